"""The same flags on every command that writes a report (issue 28 item 7): `-o FILE` and
`--summary FILE` together, never one without the other."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from forensics.cli import app

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))


def _commands(group=None, prefix=""):
    group = group or get_command(app)
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, f"{prefix}{name} ")
        else:
            yield prefix + name, {o for p in cmd.params for o in getattr(p, "opts", [])}


def test_every_command_with_a_summary_has_an_output_file_and_back() -> None:
    have = dict(_commands())
    with_summary = {n for n, o in have.items() if "--summary" in o}
    assert {"diagnose", "lint", "compare"} <= with_summary
    for name in with_summary:
        assert {"-o", "--output"} <= have[name], name
    for name, opts in have.items():
        if "--output" in opts and name in ("diagnose", "lint", "compare"):
            assert "--summary" in opts, name


def test_lint_writes_to_a_file_what_it_prints(tmp_path: Path) -> None:
    r = CliRunner()
    shown = r.invoke(app, ["lint", str(SAMPLES / "straggler"), "--format", "json"])
    out = tmp_path / "lint.json"
    wrote = r.invoke(app, ["lint", str(SAMPLES / "straggler"), "--format", "json", "-o", str(out),
                           "--summary", str(tmp_path / "s.md")])
    assert wrote.exit_code == 0 and wrote.stdout == ""
    assert json.loads(out.read_text()) == json.loads(shown.stdout)
    text = tmp_path / "lint.txt"
    assert r.invoke(app, ["lint", str(SAMPLES / "straggler"), "-o", str(text)]).exit_code == 0
    assert text.read_text().startswith("forensics lint · ") and "checks: " in text.read_text()
    assert "### forensics lint of" in (tmp_path / "s.md").read_text()


def test_compare_appends_a_job_summary(tmp_path: Path) -> None:
    s = tmp_path / "summary.md"
    s.write_text("earlier step\n")
    r = CliRunner().invoke(app, ["compare", str(SAMPLES / "healthy"), str(SAMPLES / "straggler"), "--no-findings",
                                 "-o", str(tmp_path / "c.md"), "--summary", str(s)])
    assert r.exit_code == 3
    md = s.read_text()
    assert md.startswith("earlier step\n### forensics compare") and "**FAIL: median step time +" in md
    assert "| FAIL | median step time |" in md


def test_the_summary_lists_the_root_cause_fault_once() -> None:
    """The real DeepSpeed OOM: the pass's finding ("4 times") and the cuda_oom rule's ("8 events")
    are one fault; the full report says so, the job summary listed it twice."""
    from forensics.passes import diagnose
    from forensics.report.summary import render_summary

    log = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "console" / "deepspeed_2rank_oom.log"
    if not log.exists():
        pytest.skip("../shared/realdata not present")
    md = render_summary(diagnose([str(log)]))
    top = md[md.index("Top findings:"):]
    assert top.count("CUDA OOM · rank 0") == 1 and "4 times" in top and "8 events" not in top
