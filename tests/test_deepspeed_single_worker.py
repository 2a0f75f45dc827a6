"""DeepSpeed's launcher (deepspeed/launcher/launch.py) prints "Killing subprocess {pid}" once per
worker, then `{cmd} exits with return code = {code}` quoting its LAST spawned worker's command.
With one worker that command is the failed one's: its --local_rank is the failed worker's, and a
one-node launch (nnodes=1 ...) makes it the global rank. With several workers it names nobody.

Every line here is ours, in the launcher's formats (launch.py main / sigkill_handler).
"""
from __future__ import annotations

import json

import pytest


def _diagnose(tmp_path, text: str) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "ds.log").write_text(text)
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def _log(procs: int, code: int, header: bool = True) -> str:
    t = "[2025-02-03 09:00:02,200] [INFO]"
    out = []
    if header:
        slots = list(range(procs))
        out += [f"{t} [launch.py:145:main] WORLD INFO DICT: {{'localhost': {slots}}}",
                f"{t} [launch.py:151:main] nnodes=1, num_local_procs={procs}, node_rank=0",
                f"{t} [launch.py:162:main] global_rank_mapping=defaultdict(<class 'list'>, {{'localhost': {slots}}})",
                f"{t} [launch.py:163:main] dist_world_size={procs}"]
    out += [f"[2025-02-03 09:14:40,501] [INFO] [launch.py:315:sigkill_handler] Killing subprocess {9100 + i}"
            for i in range(procs)]
    out.append(f"[2025-02-03 09:14:40,530] [ERROR] [launch.py:321:sigkill_handler] ['/opt/py/bin/python', '-u', "
               f"'finetune.py', '--local_rank={procs - 1}', '--bf16'] exits with return code = {code}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("code,kind", [(-9, "host_oom"), (-11, "crash"), (1, "crash")])
def test_one_worker_on_one_node_is_rank_0(tmp_path, code, kind):
    rc = _diagnose(tmp_path, _log(1, code))["root_cause"]
    assert rc["kind"] == kind and rc["ranks"] == [0] and rc["basis"] == "one_node"


def test_several_workers_the_quoted_command_names_nobody(tmp_path):
    rc = _diagnose(tmp_path, _log(4, -9))["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == []


def test_one_worker_without_a_one_node_sign_keeps_only_its_local_rank(tmp_path):
    rc = _diagnose(tmp_path, _log(1, -9, header=False))["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == [] and rc["local_ranks"] == [{"host": None, "local_rank": 0}]
