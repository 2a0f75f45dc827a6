"""CI use (docs/ci.md): --fail-on selectors, log hygiene that never fails a run unless named,
healthy runs passing --fail-on WARN with the default config, the appended job summary, and the
forensics commands of docs/ci.md's GitHub Actions and GitLab CI snippets run as written."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.config import parse_fail_on
from forensics.errors import ForensicsError
from forensics.report.model import Finding

etree = pytest.importorskip("lxml.etree")

REPO = Path(__file__).resolve().parents[1]
CI_DOC = REPO / "docs" / "ci.md"
DIAGNOSE_DOC = REPO / "docs" / "diagnose.md"
SAMPLES = REPO / "sample_logs"
REALRUN = REPO / "tests" / "fixtures" / "realrun"
SCHEMA = etree.XMLSchema(etree.parse(str(REPO / "tests" / "data" / "junit.xsd")))


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout


# --- the --fail-on policy -----------------------------------------------------------------------

def f(kind: str, layer: str, sev: str) -> Finding:
    return Finding("r", kind, layer, sev, [0], "t")


def test_fail_on_levels_layers_kinds_and_exclusions() -> None:
    hot, lag, hyg, loss = (f("thermal_throttling", "physical", "WARN"), f("straggler", "resource", "ERROR"),
                           f("log_hygiene", "resource", "WARN"), f("loss_plateau", "training", "INFO"))
    trips = lambda text: [x.kind for x in (hot, lag, hyg, loss) if parse_fail_on(text).trips(x)]  # noqa: E731
    assert trips("WARN") == ["thermal_throttling", "straggler"]
    assert trips("warn") == trips("WARN")
    assert trips("INFO") == ["thermal_throttling", "straggler", "loss_plateau"]
    assert trips("ERROR") == ["straggler"]
    assert trips("WARN:physical") == ["thermal_throttling"]
    assert trips("WARN:resource") == ["straggler"]                       # log hygiene is not part of a layer
    assert trips("INFO:training,straggler") == ["straggler", "loss_plateau"]
    assert trips("WARN:-thermal_throttling") == ["straggler"]
    assert trips("WARN:-resource") == ["thermal_throttling"]
    assert trips("WARN:log_hygiene") == ["log_hygiene"]                  # only when named
    assert trips("WARN:log_hygiene,physical") == ["thermal_throttling", "log_hygiene"]


@pytest.mark.parametrize("text, why", [("FATAL", "level 'FATAL'"), ("WARN:bogus", "'bogus' is not a layer or kind"),
                                       ("WARN:", "nothing after ':'"), ("FAIL", "level 'FAIL'")])
def test_bad_fail_on(text: str, why: str) -> None:
    with pytest.raises(ForensicsError) as e:
        parse_fail_on(text)
    assert why in (e.value.reason or "")
    assert run("diagnose", str(SAMPLES / "healthy"), "--fail-on", text)[0] == 2      # a usage error


def test_lint_fail_on_check_ids() -> None:
    healthy = str(SAMPLES / "healthy")                 # rank_field warns, every other check passes
    assert run("lint", healthy, "--fail-on", "WARN")[0] == 3
    assert run("lint", healthy, "--fail-on", "WARN:sampling,error_flood")[0] == 0
    assert run("lint", healthy, "--fail-on", "WARN:rank_field")[0] == 3
    assert run("lint", healthy, "--fail-on", "WARN:-rank_field")[0] == 0
    r = CliRunner().invoke(app, ["lint", healthy, "--fail-on", "WARN:rank_feild"])
    assert r.exit_code == 1 and "rank_field" in str(r.exception)


# --- healthy runs pass --fail-on WARN -------------------------------------------------------------

def test_sample_healthy_run_passes_fail_on_warn() -> None:
    code, out = run("diagnose", str(SAMPLES / "healthy"), "--fail-on", "WARN", "--format", "json")
    assert code == 0
    assert [x["kind"] for x in json.loads(out)["findings"]] == ["log_hygiene"]     # a note, not a fault


@pytest.mark.xfail(strict=True, reason=(
    "measured: the throughput pass reports a real drop (92k -> 49k samples/s, -47%) over steps 69-79 of this gloo "
    "run, recorded on a shared 2-core machine; not a log-hygiene note, and not hidden here by a default"))
def test_realrun_healthy_passes_fail_on_warn() -> None:
    code, out = run("diagnose", str(REALRUN / "healthy"), "--fail-on", "WARN", "--format", "json")
    assert code == 0, [(x["kind"], x["severity"]) for x in json.loads(out)["findings"]]


def test_realrun_healthy_fails_only_on_its_throughput_drop() -> None:
    # the other half of the xfail above: nothing but that finding trips, and log hygiene never does
    assert run("diagnose", str(REALRUN / "healthy"), "--fail-on", "WARN:-throughput_drop")[0] == 0


def fast_sampled_copy(dst: Path) -> Path:
    """sample_logs/healthy plus GPU metrics every 0.5 s on every rank (healthy values): the logs
    break the >= 2 s sampling advice, the training is fine."""
    shutil.copytree(SAMPLES / "healthy", dst)
    t0 = datetime(2025, 6, 12, 14, 0, 0, 100_000, tzinfo=timezone.utc)
    for rank in range(4):
        lines = []
        for i in range(120):
            ts = (t0 + timedelta(seconds=0.5 * i)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            lines.append(json.dumps({"timestamp": ts, "rank": rank, "level": "INFO", "event": "GPU_POLL",
                                     "message": "nvml poll", "extra": {"gpu_util": 96.0 + (i % 3), "temp_c": 65.0 + (i % 2),
                                                                       "sm_clock_mhz": 1970}}))
        (dst / f"gpu_poll_rank_{rank}.jsonl").write_text("\n".join(lines) + "\n")
    return dst


def test_log_hygiene_warning_never_fails_a_run_unless_named(tmp_path: Path) -> None:
    logs = str(fast_sampled_copy(tmp_path / "logs"))
    code, out = run("diagnose", logs, "--format", "json", "--fail-on", "WARN")
    hyg = [x for x in json.loads(out)["findings"] if x["kind"] == "log_hygiene" and x["severity"] == "WARN"]
    assert [x["title"].split(" on ")[0] for x in hyg] == ["GPU metrics sampled every 0.5 s"]
    assert code == 0                                             # before issue 12 this exited 3
    assert json.loads(out)["root_cause"] is None
    assert run("diagnose", logs, "--fail-on", "WARN:log_hygiene")[0] == 3
    assert run("diagnose", logs, "--fail-on", "WARN:training")[0] == 0


# --- the job summary -------------------------------------------------------------------------------

def test_summary_is_appended_short_and_link_free(tmp_path: Path) -> None:
    summ = tmp_path / "step_summary.md"
    summ.write_text("## earlier step\n\n")
    code, _ = run("diagnose", str(SAMPLES / "thermal_throttling"), "--fail-on", "WARN", "--summary", str(summ))
    assert code == 3
    assert run("lint", str(SAMPLES / "thermal_throttling"), "--summary", str(summ))[0] == 0
    text = summ.read_text()
    assert text.startswith("## earlier step\n\n### forensics diagnose of ")
    assert text.index("### forensics diagnose") < text.index("### forensics lint")
    diag = text.split("### forensics lint")[0]
    assert "**Root cause: thermal throttling on rank 6 (physical layer); cost " in diag
    assert "**Next:** On node1, inspect the GPU of rank 6" in diag
    assert "CI: **failed** `--fail-on WARN`" in diag
    assert "| **6** | node1 |" in diag and diag.count("\n| ") == 1 + 8       # the header and 8 ranks
    assert "](" not in text and "http" not in text and "<a " not in text
    assert len(diag.splitlines()) < 40


def test_summary_shows_a_cost_when_the_report_has_one() -> None:
    from forensics.report.model import Report, RootCause, RunInfo
    from forensics.report.summary import render_summary

    rc = RootCause("straggler", "resource", [5], "straggler on rank 5 (resource layer): slow", finding=0)
    rc.cost = {"seconds": 410.0, "share": 0.23, "gpu_hours": 12.5}  # type: ignore[attr-defined]
    rep = Report(RunInfo(8, 1, None, None, 10, 0, False), rc, [Finding("pass.straggler", "straggler", "resource", "WARN", [5], "slow")])
    assert "; cost 23% of wall time (6m50s), ~12 GPU-hours.**" in render_summary(rep)
    rc.cost = None  # type: ignore[attr-defined]
    assert "cost" not in render_summary(rep)


# --- the docs/ci.md snippets, run as written -------------------------------------------------------------

def ci_commands() -> list[str]:
    section = CI_DOC.read_text().split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, "a GitHub Actions and a GitLab CI snippet"
    cmds = [m.group(1).strip() for b in blocks for m in re.finditer(r"(?:run:|- )\s*(forensics [^\n#]+)", b)]
    assert any("--format junit" in c for c in cmds) and any("--summary" in c for c in cmds)
    return cmds


@pytest.mark.parametrize("sample, broken", [("healthy", False), ("thermal_throttling", True)])
def test_readme_ci_snippets_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: str, broken: bool) -> None:
    shutil.copytree(SAMPLES / sample, tmp_path / "logs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    for cmd in ci_commands():
        args = shlex.split(os.path.expandvars(cmd))
        assert args[0] == "forensics"
        code, _ = run(*args[1:])
        fails = broken and "diagnose" in args and "--fail-on" in args
        assert code == (3 if fails else 0), cmd
        if "--format" in args and "junit" in args:
            doc = etree.parse(str(tmp_path / args[args.index("-o") + 1]))
            assert SCHEMA.validate(doc), SCHEMA.error_log
            assert (doc.getroot().get("failures") != "0") == broken
    assert (tmp_path / "forensics-report.html").read_text().startswith("<!doctype html>")
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count("### forensics lint") == 1 and summary.count("### forensics diagnose") == 1


def test_readme_next_step_example_is_what_the_tool_says() -> None:
    text = DIAGNOSE_DOC.read_text()
    shown = text.split("jq -r .root_cause.next\n", 1)[1].splitlines()[0].strip()
    code, out = run("diagnose", str(SAMPLES / "thermal_throttling"), "--format", "json")
    assert json.loads(out)["root_cause"]["next"] == shown


def test_summary_of_a_big_run_shows_the_faulty_ranks_first() -> None:
    from forensics.report.model import Report, RootCause, RunInfo
    from forensics.report.summary import MAX_RANK_ROWS, render_summary

    rows = [{"rank": r, "host": f"node{r // 8}", "step_time_ms": 1000.0 + (500 if r == 37 else r), "errors": 0, "warnings": 0}
            for r in range(64)]
    rows[5]["errors"] = 2
    rc = RootCause("straggler", "resource", [37], "straggler on rank 37 (resource layer): slow", finding=0)
    rep = Report(RunInfo(64, 8, None, None, 10, 0, False), rc,
                 [Finding("pass.straggler", "straggler", "resource", "WARN", [37], "rank 37 is slow")], per_rank=rows)
    md = render_summary(rep)
    table = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| rank")]
    assert len(table) == MAX_RANK_ROWS
    assert "| **37** | node4 |" in md and "| 5 | node0 |" in md          # at fault, then logged errors
    assert f"{64 - MAX_RANK_ROWS} more ranks in the full report." in md
    assert [int(ln.split("|")[1].strip(" *")) for ln in table] == sorted(int(ln.split("|")[1].strip(" *")) for ln in table)


def test_no_test_module_imports_the_tests_package() -> None:
    """CI runs a bare `pytest` (README): `tests` is no package on its path, only the test folder
    itself (pytest's rootdir insertion), so `from tests.x import y` fails collection there while
    `python -m pytest` (which adds the working folder) passes — twice a stop's CI broke on it.
    Helpers are imported as `from x import y`."""
    import ast

    here = Path(__file__).resolve().parent
    bad = []
    for path in sorted(here.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{path.relative_to(here)}:{node.lineno}" for n in names if n == "tests" or n.startswith("tests.")]
    assert bad == []
