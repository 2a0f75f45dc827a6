"""`forensics compare` cannot pass by default: a regression in a log whose step lines name no
rank fails; runs that cannot be compared get their own verdict (NOT COMPARABLE, exit 4), never
PASS; no output of any format holds a nan.

The cases the issue measured: two Megatron console logs, the second with every `elapsed time per
iteration` 40% higher, gave "median step time: nothing to compare ... PASS" (exit 0); a run
compared with itself printed "communication share ... nan% nan% +nan pp better"; two unrelated
runs (29 ranks vs 1, every check n/a) passed.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.compare import NOT_COMPARABLE_EXIT, CompareThresholds, compare_runs
from forensics.report.compare_render import render_compare

from megatron_log import write_megatron
from synthetic_run import write_run

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "console"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True)


def test_a_megatron_run_40_percent_slower_fails(tmp_path: Path) -> None:
    base = write_megatron(tmp_path / "base.out")
    slow = write_megatron(tmp_path / "slow.out", step_ms=1500.0 * 1.4)
    r = compare_runs(base, slow, CompareThresholds(fail_on_new=None))
    checks = {c.name: c for c in r.checks}
    assert checks["slowdown"].passed is False and checks["slowdown"].value == pytest.approx(0.4, abs=0.01)
    assert checks["throughput_drop"].passed is False          # global batch size / step time
    assert r.metric("throughput").unit == "samples/s"
    assert (r.baseline.first_step, r.baseline.last_step) == (10, 200)
    assert r.comparable and not r.passed and r.verdict.startswith("FAIL")
    same = compare_runs(base, write_megatron(tmp_path / "same.out"), CompareThresholds(fail_on_new=None))
    assert same.passed and same.metric("step_time_median_ms").rel == pytest.approx(0.0)


@pytest.mark.skipif(not (REAL / "megatron_8node_tp4_pp8.out").is_file(), reason="realdata absent")
def test_the_real_megatron_log_slowed_by_40_percent_fails_with_exit_3(tmp_path: Path) -> None:
    src = (REAL / "megatron_8node_tp4_pp8.out").read_text(errors="replace")
    slow = re.sub(r"elapsed time per iteration \(ms\): ([\d.]+)",
                  lambda m: f"elapsed time per iteration (ms): {float(m.group(1)) * 1.4:.1f}", src)
    (tmp_path / "slow.out").write_text(slow)
    r = cli("compare", str(REAL / "megatron_8node_tp4_pp8.out"), str(tmp_path / "slow.out"))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "FAIL: median step time +40.0%" in r.stdout
    assert "steps 10–200" in r.stdout                        # not "steps 20–20"


def _no_nan(text: str) -> None:
    assert not re.search(r"(?i)\bnan\b|nan%|\+nan", text), re.search(r"(?i).{40}nan.{40}", text).group(0)


def test_a_run_compared_with_itself_has_no_nan_in_any_format(tmp_path: Path) -> None:
    log = write_megatron(tmp_path / "a.out")
    r = compare_runs(log, log)
    assert r.passed and r.metric("comm_share").baseline is None
    for fmt in ("text", "md", "json", "html", "junit"):
        _no_nan(render_compare(r, fmt))
    json.loads(render_compare(r, "json"))                     # strict JSON: NaN would not be


def test_unrelated_runs_are_not_comparable_exit_4(tmp_path: Path) -> None:
    big = write_megatron(tmp_path / "big.out", world=8)
    one = tmp_path / "one"
    one.mkdir()
    (one / "rank_0.jsonl").write_text(json.dumps({"timestamp": "2026-11-30T10:00:00Z", "rank": 0, "level": "INFO",
                                                  "event": "HEARTBEAT", "message": "alive", "extra": {}}) + "\n")
    r = compare_runs(big, one)
    assert not r.comparable and not r.passed
    assert r.verdict.startswith("NOT COMPARABLE") and "PASS" not in r.verdict
    assert any("world sizes" in w for w in r.incomparable) and any("no common metric" in w for w in r.incomparable)
    d = json.loads(render_compare(r, "json"))
    assert d["comparable"] is False and d["passed"] is False and d["incomparable"] == r.incomparable
    junit = render_compare(r, "junit")
    assert 'name="comparable"' in junit and "<failure" in junit
    out = cli("compare", str(big), str(one), "--format", "junit")
    assert out.returncode == NOT_COMPARABLE_EXIT == 4, out.stderr


def test_different_world_sizes_are_not_comparable(tmp_path: Path) -> None:
    big = write_run(tmp_path / "big", ranks=8, hosts=2, hot=None, hostile=False, seed=1)
    small = write_run(tmp_path / "small", ranks=4, hosts=1, hot=None, hostile=False, seed=2)
    r = compare_runs(big, small, CompareThresholds(fail_on_new=None))
    assert not r.comparable and "different world sizes (8 ranks in the baseline, 4 in the candidate)" in r.verdict


def test_runs_without_overlapping_steps_are_not_comparable(tmp_path: Path) -> None:
    early = write_run(tmp_path / "early", ranks=4, hosts=1, hot=None, hostile=False, steps=40, seed=1)
    late = write_run(tmp_path / "late", ranks=4, hosts=1, hot=None, hostile=False, steps=40, first_step=1000, seed=2)
    r = compare_runs(early, late, CompareThresholds(fail_on_new=None))
    assert not r.comparable and any("no overlapping steps (baseline 0–39, candidate 1000–1039)" in w
                                    for w in r.incomparable)


def test_a_one_rank_run_is_one_rank_in_the_header(tmp_path: Path) -> None:
    import shutil

    from typer.testing import CliRunner

    from forensics.cli import app

    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "sample_logs" / "healthy" / "rank_0.jsonl", one / "rank_0.jsonl")
    res = CliRunner().invoke(app, ["compare", str(one), str(one)])
    assert "— 1 rank," in res.output and "1 ranks" not in res.output, res.output
