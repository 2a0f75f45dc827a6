"""horovodrun's gloo launcher prints `Process {idx} exit with status code {ec}.` for each worker
that ended non-zero (horovod/runner/gloo_run.py, _exec_command_fn; idx = slot_info.rank, the
worker's rank; ec the shell's code, 128+N for a signal). That line is the rank's end: 137 is a
SIGKILL (host memory suspected), a positive code of its own a crash.

Every line here is ours, in that format.
"""
from __future__ import annotations

import json

import pytest


def _diagnose(tmp_path, lines: list[str]) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "hvd.log").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


@pytest.mark.parametrize("code,kind", [(137, "host_oom"), (139, "crash"), (3, "crash")])
def test_the_gloo_launchers_exit_line_names_the_rank(tmp_path, code, kind):
    lines = ["[0]<stdout>:Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.316",
             "[1]<stdout>:Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.298",
             f"Process 1 exit with status code {code}.",
             "Traceback (most recent call last):",
             '  File "/opt/venv/bin/horovodrun", line 8, in <module>',
             "    sys.exit(run_commandline())"]
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert (rc["kind"], rc["ranks"]) == (kind, [1])
