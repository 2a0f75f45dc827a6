"""Root-cause selection for failures reported twice: by the ranks that suffered them and by the
pass that found who caused them; and rule findings of untimed console lines."""
from __future__ import annotations

from forensics.passes import rootcause
from forensics.report.model import Finding


def F(kind: str, ranks: list[int], t: str | None, *, victims: list[int] | None = None, rule: str = "pass.failures",
      layer: str = "communication") -> Finding:
    ts = None if t is None else f"2024-12-18T20:27:{t}+00:00"
    return Finding(rule=rule, kind=kind, layer=layer, severity="ERROR", ranks=ranks, title=f"{rule} {kind} {ranks}",
                   victims=victims or [], first_seen=ts, last_seen=ts)


def test_the_report_naming_the_culprit_explains_the_report_of_who_timed_out() -> None:
    # the rule's time is rounded to the millisecond: a hair before the pass's own time
    rule = F("nccl_timeout", [], "21.426", victims=[0, 1, 3], rule="nccl_timeout")
    culprit = F("nccl_timeout", [2], "21.426417", victims=[0, 1, 3])
    assert rootcause.explains(culprit, rule) and not rootcause.explains(rule, culprit)
    rc, ordered = rootcause.assign([rule, culprit], [0, 1, 2, 3])
    assert rc.ranks == [2] and ordered[0] is culprit and ordered[0].explains == [1]


def test_a_job_wide_report_of_other_ranks_is_not_explained_by_it() -> None:
    culprit = F("nccl_timeout", [2], "21.4", victims=[0, 1])
    other = F("nccl_timeout", [], "21.3", victims=[5, 6], rule="nccl_timeout")
    assert not rootcause.explains(culprit, other)


def test_an_undated_rule_finding_takes_the_time_of_the_same_fault() -> None:
    # rank 3's OOM (untimed console traceback, placed after the others' errors by the pass);
    # the rule matching the same lines has no time and must not jump ahead of the timeouts
    timeouts = F("nccl_timeout", [], "30.001", victims=[0, 2])
    oom_pass = F("oom", [3], "30.005", layer="resource")
    oom_rule = F("oom", [3], None, rule="cuda_oom", layer="resource")
    rc, ordered = rootcause.assign([oom_rule, timeouts, oom_pass], [0, 1, 2, 3])
    assert rc.kind == "nccl_timeout"
    assert oom_rule.first_seen is None          # the finding itself is not changed
