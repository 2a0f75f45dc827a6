"""Every command the tool prints is runnable (issue 28 item 3): the command of a finding is
taken from the report itself, run as printed (only its placeholders filled), and must succeed."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.ingest import ingest
from forensics.passes import diagnose

HEADER = "timestamp, index, temperature.gpu [C], utilization.gpu [%]\n"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))


def _smi(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"2025/06/12 14:00:0{t}.000, {g}, {50 + g}, 90 %\n" for t in range(3) for g in (0, 1)))
    return path


def _commands(text: str) -> list[str]:
    return re.findall(r"`(forensics [^`]+)`", text)


def _run(command: str) -> tuple[int, str]:
    argv = shlex.split(command)[1:]
    r = CliRunner().invoke(app, argv)
    return r.exit_code, r.output


@pytest.mark.parametrize("as_store", [True, False])
def test_the_gpu_map_command_of_a_telemetry_finding_runs_as_printed(tmp_path: Path, as_store: bool) -> None:
    """On a store the advice used to be `forensics diagnose … --gpu-map 0=RANK`, and the command
    on the store failed with F300: it now names the logs, where the map is applied."""
    _smi(tmp_path / "logs" / "smi.csv")
    target = str(tmp_path / "logs")
    if as_store:
        ingest([target], tmp_path / "st")
        target = str(tmp_path / "st")
    [f] = [f for f in diagnose([target]).findings if f.rule == "pass.telemetry_join"]
    cmds = _commands(f.title)
    assert len(cmds) == 2, f.title                        # with RANK to fill in, and the one-node identity
    assert "…" not in " ".join(cmds)
    filled = cmds[0].replace("=RANK", "=7", 1).replace("=RANK", "=8")
    for cmd in (filled, cmds[1]):
        code, out = _run(cmd + " --format json")
        assert code == 0, (cmd, out)
        assert "error[" not in out and "could not be joined" not in out, cmd


def _next_step_commands() -> list[str]:
    from forensics.rules import load_next_steps

    return sorted({c for t in load_next_steps().values() for c in _commands(t)})


@pytest.mark.parametrize("command", _next_step_commands())
def test_every_forensics_command_of_a_next_step_runs(command: str) -> None:
    """The sentences of rules/next_steps.toml name forensics commands with LOGS, BASELINE and the
    rank to fill in: filled with a sample run and one of its ranks, each runs."""
    sample = str(Path(__file__).resolve().parents[1] / "sample_logs" / "straggler")
    filled = command.replace("{rank_id}", "3").replace("LOGS", sample).replace("BASELINE", sample)
    assert "{" not in filled, filled
    code, out = _run(filled)
    assert code == 0, (filled, out)
