"""`forensics compare` (forensics/compare.py and report/compare_render.py): a slowdown injected
into one rank of a copy of a run is found and the rank named; two runs of the same healthy job
pass; warmup is not compared; world sizes may differ; every format and the exit codes."""
from __future__ import annotations

import importlib.util
import json
import re
import random
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from forensics.compare import CompareThresholds, compare_junit_cases, compare_runs, parse_share
from forensics.errors import ForensicsError
from forensics.report.compare_render import render_compare
from slowdown import inject_slowdown
from synthetic_run import SAMPLE_LOGS, write_run

HEALTHY = SAMPLE_LOGS / "healthy"
# The JSON keys CI scripts read (README "Compare two runs"): additions only, never renamed.
TOP_KEYS = ["passed", "verdict", "baseline", "candidate", "thresholds", "checks", "metrics", "matched_steps",
            "changed_most", "ranks", "only_in_baseline", "only_in_candidate", "new_findings", "resolved_findings", "notes",
            "comparable", "incomparable"]
METRIC_NAMES = ["step_time_median_ms", "step_time_p95_ms", "throughput", "data_load_median_ms", "compute_median_ms",
                "comm_share", "wait_median_ms", "gpu_util_median", "temp_c_median", "temp_c_max", "sm_clock_mhz_median",
                "loss_matched", "grad_norm_matched", "wall_s"]


def _healthy_job(out: Path, seed: int) -> Path:
    """sample_logs/generate.py's healthy job (4 ranks, 60 steps) with another seed."""
    spec = importlib.util.spec_from_file_location("sample_generate", SAMPLE_LOGS / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules["sample_generate"] = gen
    spec.loader.exec_module(gen)  # type: ignore[union-attr]
    out.mkdir(parents=True)
    for log in gen.build_healthy(random.Random(seed)):
        log.write(out)
    return out


@pytest.fixture(scope="module")
def slow_rank2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sample_logs/healthy with rank 2 computing 25% longer from step 20 (lockstep-consistent)."""
    d = tmp_path_factory.mktemp("inj") / "slow"
    inject_slowdown(HEALTHY, d, rank=2, phase="compute", pct=0.25, from_step=20)
    return d


@pytest.fixture(scope="module")
def slow_result(slow_rank2: Path):
    return compare_runs(HEALTHY, slow_rank2)


def test_injected_compute_slowdown_fails_and_names_the_rank(slow_result) -> None:
    r = slow_result
    assert not r.passed
    checks = {c.name: c for c in r.checks}
    assert checks["slowdown"].passed is False and checks["slowdown"].value > 0.05
    assert checks["throughput_drop"].passed is False
    assert checks["loss_increase"].passed is True            # the injection leaves the loss alone
    assert r.changed_most == [2]                              # the victims' waits grew, not their own time
    rank2 = next(x for x in r.ranks if x.rank == 2)
    assert rank2.metrics["compute_ms"].delta > 150 and abs(rank2.metrics["data_load_ms"].delta) < 1
    assert all(abs(x.excess_ms) < 5 for x in r.ranks if x.rank != 2)
    assert all(x.metrics["wait_ms"].delta > 150 for x in r.ranks if x.rank != 2)
    new = {(f["kind"], tuple(f["ranks"])) for f in r.new_findings}
    assert ("straggler", (2,)) in new
    assert {c.name for c in r.checks if c.passed is False} >= {"new_findings"}
    assert "rank 2" in r.verdict and r.verdict.startswith("FAIL")
    straggler = next(f for f in r.new_findings if f["kind"] == "straggler")
    assert straggler["cost"]["seconds"] > 3 and straggler["evidence"]


def test_injected_data_slowdown_on_a_generated_run_names_that_rank(tmp_path: Path) -> None:
    logs = write_run(tmp_path / "base", ranks=8, hosts=2, steps=60, hot=None, hostile=False, seed=3)
    inject_slowdown(logs, tmp_path / "slow", rank=6, phase="data", pct=5.0, from_step=15)
    r = compare_runs(logs, tmp_path / "slow")
    assert not r.passed and r.changed_most[0] == 6
    rank6 = next(x for x in r.ranks if x.rank == 6)
    assert rank6.metrics["data_load_ms"].delta > 50 and "data load" in rank6.summary
    assert rank6.host == "node-b"
    assert ("data_load_skew", (6,)) in {(f["kind"], tuple(f["ranks"])) for f in r.new_findings}


def test_two_runs_of_the_same_healthy_job_pass(tmp_path: Path) -> None:
    a, b = _healthy_job(tmp_path / "a", 1), _healthy_job(tmp_path / "b", 2)
    r = compare_runs(a, b)
    assert r.passed, r.verdict
    assert r.changed_most == [] and r.new_findings == [] and r.resolved_findings == []
    assert abs(r.metric("step_time_median_ms").rel) < 0.01
    assert r.matched_steps["count"] == 50 and r.matched_steps["after_warmup_step"] == 9
    # the other generator, two seeds, 8 ranks on 2 hosts
    g1 = write_run(tmp_path / "g1", hot=None, hostile=False, seed=1)
    g2 = write_run(tmp_path / "g2", hot=None, hostile=False, seed=2)
    assert compare_runs(g1, g2).passed


def test_a_slower_warmup_is_not_a_regression(tmp_path: Path) -> None:
    # rank 0 computes twice as long during warmup only (steps 0-9, stage=warmup): the run took
    # longer, but its pace after warmup is the baseline's
    inject_slowdown(HEALTHY, tmp_path / "w", rank=0, phase="compute", pct=1.0, from_step=0, until_step=9)
    r = compare_runs(HEALTHY, tmp_path / "w")
    assert r.metric("wall_s").delta > 5
    checks = {c.name: c for c in r.checks}
    assert checks["slowdown"].passed and checks["throughput_drop"].passed, r.verdict
    assert r.candidate.compared_from == 10


def test_world_sizes_differ(tmp_path: Path) -> None:
    big = write_run(tmp_path / "big", ranks=8, hosts=2, hot=None, hostile=False, seed=1)
    small = write_run(tmp_path / "small", ranks=4, hosts=1, hot=None, hostile=False, seed=2)
    r = compare_runs(big, small, CompareThresholds(max_throughput_drop=None, fail_on_new=None))
    assert any("world sizes differ" in n for n in r.notes)
    assert [x.rank for x in r.ranks] == [0, 1, 2, 3] and r.only_in_baseline == [4, 5, 6, 7]
    assert r.metric("step_time_median_ms").candidate is not None


def test_thresholds_parse_and_switch_off(slow_rank2: Path) -> None:
    assert parse_share("5%") == pytest.approx(0.05) and parse_share("0.1") == pytest.approx(0.1)
    assert parse_share("off") is None and parse_share("2.5 %") == pytest.approx(0.025)
    for bad in ("5", "fast", "-3%"):
        with pytest.raises(ForensicsError):
            parse_share(bad)
    r = compare_runs(HEALTHY, slow_rank2, CompareThresholds(max_slowdown=0.5, max_throughput_drop=None,
                                                            max_loss_increase=None, fail_on_new=None))
    assert r.passed, r.verdict
    assert [c.passed for c in r.checks] == [True, None, None, None]


def test_json_contract_and_formats(slow_result) -> None:
    d = json.loads(render_compare(slow_result, "json"))
    assert list(d) == TOP_KEYS
    assert [m["name"] for m in d["metrics"]] == METRIC_NAMES
    assert set(d["metrics"][0]) == {"name", "label", "unit", "baseline", "candidate", "delta", "rel", "worse"}
    assert set(d["checks"][0]) >= {"name", "limit", "value", "passed", "text"}
    assert d["passed"] is False and d["changed_most"] == [2]
    text = render_compare(slow_result, "text")
    assert next(ln for ln in text.splitlines() if ln.startswith(("FAIL", "PASS"))).startswith("FAIL: ") and "2 *" in text
    md = render_compare(slow_result, "md")
    assert "| FAIL | median step time |" in md and "**2**" in md
    html = render_compare(slow_result, "html")
    assert html.count('<path d="M') >= 6          # step time, throughput, loss: two runs each
    assert "<script" not in html and "default-src &#x27;none&#x27;" in html   # no script runs, nothing is fetched
    with pytest.raises(ForensicsError):
        render_compare(slow_result, "pdf")


def test_a_big_run_prints_the_rows_of_the_ranks_that_changed(slow_result) -> None:
    import copy
    import dataclasses

    # the 4-rank result as a 100-rank one: rank 2 (slower) and 99 copies of the unchanged ranks
    changed = next(x for x in slow_result.ranks if x.changed)
    quiet = next(x for x in slow_result.ranks if not x.changed)
    big = copy.copy(slow_result)
    big.ranks = [changed if k == 2 else dataclasses.replace(quiet, rank=k) for k in range(100)]
    text, md = render_compare(big, "text"), render_compare(big, "md")
    rows = [ln for ln in text.splitlines() if re.match(r"^\d+\s", ln) and "not shown" not in ln]
    assert [ln.split()[0] for ln in rows] == ["2"]
    assert re.findall(r"^\| \**(\d+)\** \|", md, flags=re.M) == ["2"]
    note = "99 other ranks not shown (their own time per step changed within the noise)"
    assert note in " ".join(text.split()) and note in md
    assert len(json.loads(render_compare(big, "json"))["ranks"]) == 100
    # the page of a run past its row budget: the changed rank's row in sight, every rank folded
    big.ranks = [changed if k == 2 else dataclasses.replace(quiet, rank=k) for k in range(300)]
    page = render_compare(big, "html")
    ranks = page[page.index("<h2>Per rank"):]
    assert ranks.index("<details><summary>the table of all 300 ranks") > ranks.index('<tr class="hl">')
    assert ranks[:ranks.index("<details>")].count("<tr class=") == 1
    # up to the budget every rank is printed, as before
    big.ranks = big.ranks[:60]
    assert len([ln for ln in render_compare(big, "text").splitlines() if re.match(r"^\d+\s", ln)]) == 60


def test_junit_has_one_case_per_check_and_failures_cite_lines(slow_result) -> None:
    cases = compare_junit_cases(slow_result)
    assert [c.name for c in cases] == ["slowdown", "throughput_drop", "loss_increase", "new_findings"]
    root = ET.fromstring(render_compare(slow_result, "junit"))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "3"
    fail = suite.find("testcase[@name='new_findings']/failure")
    assert fail is not None and "rank_2.jsonl:" in (fail.text or "")
    assert suite.find("testcase[@name='loss_increase']/failure") is None


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forensics", "compare", *args], capture_output=True, text=True)


def test_cli_exit_codes_and_output(slow_rank2: Path, tmp_path: Path) -> None:
    r = _cli(str(HEALTHY), str(slow_rank2), "--format", "json")
    assert r.returncode == 3, r.stderr
    assert json.loads(r.stdout)["changed_most"] == [2]
    r = _cli(str(HEALTHY), str(HEALTHY), "--no-findings")
    assert r.returncode == 0, r.stderr
    assert next(ln for ln in r.stdout.splitlines() if ln.startswith(("FAIL", "PASS"))).startswith("PASS: ")
    out = tmp_path / "c.xml"
    r = _cli(str(HEALTHY), str(slow_rank2), "--format", "junit", "-o", str(out), "--max-slowdown", "50%",
             "--max-throughput-drop", "off", "--fail-on-new", "off")
    assert r.returncode == 0, r.stderr + r.stdout
    assert ET.parse(out).getroot().find("testsuite").get("failures") == "0"   # type: ignore[union-attr]
    r = _cli(str(HEALTHY), str(slow_rank2), "--max-slowdown", "5")
    assert r.returncode == 1 and "error[F300]" in r.stderr and "Traceback" not in r.stderr
    r = _cli(str(HEALTHY), str(tmp_path / "nowhere"))
    assert r.returncode == 1 and "error[" in r.stderr and "Traceback" not in r.stderr


def test_config_gives_the_baseline_and_thresholds(slow_rank2: Path, tmp_path: Path) -> None:
    """forensics.toml [compare]: the baseline (relative to the file) and thresholds; the CLI wins."""
    import shutil

    shutil.copytree(slow_rank2, tmp_path / "cand")
    shutil.copytree(HEALTHY, tmp_path / "good")
    cfg = tmp_path / "forensics.toml"
    cfg.write_text('[compare]\nbaseline = "good"\nmax_slowdown = "50%"\nmax_throughput_drop = "off"\nfail_on_new = "off"\n')
    r = _cli(str(tmp_path / "cand"), "--format", "json", "--no-findings")
    assert r.returncode == 0, r.stderr + r.stdout
    assert json.loads(r.stdout)["changed_most"] == [2]
    r = _cli(str(tmp_path / "cand"), "--format", "json", "--no-findings", "--max-slowdown", "5%")
    assert r.returncode == 3, r.stderr
    cfg.write_text("[compare]\nmax_slowdown = \"5%\"\n")                 # no baseline: one path is not enough
    r = _cli(str(tmp_path / "cand"))
    assert r.returncode == 1 and "error[" in r.stderr and "baseline" in r.stderr and "Traceback" not in r.stderr


def test_a_run_that_never_left_warmup_is_compared_whole_with_a_note(tmp_path: Path) -> None:
    # 8 steps, all stage=warmup (tests/synthetic_run.py marks the first 10): nothing after warmup
    a = write_run(tmp_path / "a", steps=8, hot=None, hostile=False, seed=1)
    b = write_run(tmp_path / "b", steps=8, hot=None, hostile=False, seed=2)
    r = compare_runs(a, b, findings=False)
    assert sum("never left warmup" in n for n in r.notes) == 2
    assert r.metric("step_time_median_ms").baseline is not None and r.baseline.compared_from == 0


@pytest.mark.parametrize("scenario", ["straggler", "data_skew", "thermal"])
def test_real_gloo_runs_the_faulty_rank_is_the_one_that_changed_most(scenario: str) -> None:
    """tests/fixtures/realrun: real 4-process gloo runs on a loaded 2-core machine (timings are
    real, tools/realrun/README.md). Against the healthy run, the rank whose fault was injected is
    the one whose own time changed most, and the comparison fails."""
    import tomllib

    root = Path(__file__).parent / "fixtures" / "realrun"
    expected = tomllib.loads((root / scenario / "expected.toml").read_text())["expect"]["ranks"]
    r = compare_runs(root / "healthy", root / scenario, findings=False)
    assert not r.passed
    assert r.changed_most[:1] == expected, (r.changed_most, r.verdict)
