"""Every scenario with an expected.toml — sample_logs/*/, tests/fixtures/realrun/*/, realrun_moved/*/, realrun_varied/*/, realrun_torchrun/*/, realrun_localise/*/ and realrun_heldout/*/ — diagnosed.

What a scenario's `[expect]` means:
- `root_cause`: the kind of the root cause ("none": root_cause must be null); `alternatives`:
  other kinds also accepted (the same fault seen one layer down);
- `ranks`: exactly the rank(s) at fault named by the root cause (never the victims);
- `must_not`: kinds that must not be the root cause, and that may appear at WARN/ERROR only as a
  consequence the root cause explains (e.g. the timeouts an OOM caused).
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.store import open_store

from error_accounting import error_lines, unaccounted

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = sorted(
    p.parent for base in (REPO / "sample_logs", REPO / "tests" / "fixtures" / "realrun", REPO / "tests" / "fixtures" / "realrun_moved",
                          REPO / "tests" / "fixtures" / "realrun_varied", REPO / "tests" / "fixtures" / "realrun_torchrun",
                          REPO / "tests" / "fixtures" / "realrun_localise", REPO / "tests" / "fixtures" / "realrun_heldout")
    for p in base.glob("*/expected.toml")
)


def expected(d: Path) -> dict:
    return tomllib.loads((d / "expected.toml").read_text())["expect"]


def check(report, exp: dict) -> list[str]:
    """What is wrong with a report against a scenario's expectation (empty: right)."""
    problems = []
    rc = report.root_cause
    kind = rc.kind if rc else "none"
    if kind not in [exp["root_cause"], *exp.get("alternatives", [])]:
        problems.append(f"root cause {kind!r}, expected {exp['root_cause']!r}")
    ranks = sorted(rc.ranks) if rc else []
    if kind != "none" and ranks != sorted(exp["ranks"]):
        problems.append(f"root cause names ranks {ranks}, expected {sorted(exp['ranks'])}")
    explained = set(report.findings[0].explains) if rc else set()
    for bad in exp.get("must_not", []):
        if kind == bad:
            problems.append(f"{bad} is the root cause")
        for i, f in enumerate(report.findings):
            if f.kind == bad and f.severity in ("WARN", "ERROR") and i != 0 and i not in explained:
                problems.append(f"unexplained {bad} finding: {f.title}")
    return problems


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_scenario(scenario: Path, tmp_path: Path) -> None:
    store = tmp_path / "run.forensics"
    ingest([str(scenario)], store)
    run = open_store(store)
    report = diagnose(run)
    assert check(report, expected(scenario)) == []
    # issue 27's invariant: every ERROR line is cited by, or explained under, some finding, and
    # the report counts them all
    assert unaccounted(run.events(), report, run.totals.get("ranks") or []) == []
    assert report.run.error_lines == len(error_lines(run.events()))
    # every finding cites at least one line of the logs, or says what it counted
    for f in report.findings:
        assert f.lines or f.evidence, f.title
    json.dumps(report.to_json(), allow_nan=False)    # the CI contract is plain JSON


def test_there_are_scenarios_for_every_pass_kind() -> None:
    kinds = {expected(d)["root_cause"] for d in SCENARIOS}
    assert {"none", "data_load_skew", "straggler", "thermal_throttling", "gradient_skew", "oom", "hang",
            "loss_divergence", "vanishing_grad", "grad_norm_spike", "comm_bound"} <= kinds


def test_the_check_itself_rejects_wrong_answers() -> None:
    from forensics.report.model import Finding, Report, RootCause, RunInfo

    info = RunInfo(ranks=4, hosts=1, start=None, end=None, events=0, rejected_lines=0, crashed=True)
    victim_blamed = Report(info, RootCause("nccl_timeout", "communication", [0, 1, 2], "x"),
                           [Finding("r", "nccl_timeout", "communication", "ERROR", [0, 1, 2], "t")])
    exp = {"root_cause": "oom", "ranks": [3], "must_not": ["nccl_timeout"]}
    assert len(check(victim_blamed, exp)) == 3
    stray = Report(info, RootCause("oom", "resource", [3], "x"),
                   [Finding("r", "oom", "resource", "ERROR", [3], "t"),
                    Finding("r", "straggler", "resource", "WARN", [3], "t")])
    assert check(stray, {"root_cause": "oom", "ranks": [3], "must_not": ["straggler"]}) == ["unexplained straggler finding: t"]
