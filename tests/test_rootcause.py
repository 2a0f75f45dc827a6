"""Root-cause selection: the deepest finding that explains the others; failures cascade in time."""
from __future__ import annotations

from forensics.passes import rootcause
from forensics.report.model import Finding


def F(kind: str, layer: str, ranks: list[int], t: str, *, victims: list[int] | None = None, sev: str = "WARN",
      rule: str | None = None, last: str | None = None) -> Finding:
    return Finding(rule=rule or f"pass.{kind}", kind=kind, layer=layer, severity=sev, ranks=ranks, title=f"{kind} {ranks}",
                   victims=victims or [], first_seen=f"2025-06-12T14:{t}+00:00", last_seen=f"2025-06-12T14:{last or t}+00:00")


EVERY = list(range(8))


def test_thermal_chain_bottom_up() -> None:
    fs = [
        F("throughput_drop", "training", [], "01:50"),
        F("comm_bound", "communication", [6], "01:42", victims=[0, 1, 2, 3, 4, 5, 7], last="03:00"),
        F("straggler", "resource", [6], "01:42", victims=[0, 1, 2, 3, 4, 5, 7], last="03:00"),
        F("gpu_underutilized", "resource", [6], "01:48", last="03:00"),
        F("thermal_throttling", "physical", [6], "01:48", last="03:00"),   # sampled a little after the first slow step
        F("comm_bound", "communication", [0, 1, 2, 3, 4, 5, 7], "01:43", rule="comm_share"),  # a rule naming the waiters
    ]
    rc, ordered = rootcause.assign(fs, EVERY)
    assert rc.kind == "thermal_throttling" and rc.ranks == [6] and rc.layer == "physical"
    assert ordered[0].kind == "thermal_throttling" and ordered[0].explains == [1, 2, 3, 4, 5]
    assert [c.layer for c in rc.chain] == ["physical", "resource", "resource", "communication", "training"]
    assert all(i < len(ordered) for f in ordered for i in f.explains)


def test_earlier_oom_is_never_replaced_by_the_timeouts_it_caused() -> None:
    fs = [
        F("nccl_timeout", "communication", [3], "00:31.4", victims=[0, 1, 2], sev="ERROR"),
        F("nccl_timeout", "communication", [0, 1, 2], "00:31.4", sev="ERROR", rule="nccl_timeout"),
        F("oom", "resource", [3], "00:31.0", victims=[0, 1, 2], sev="ERROR"),
    ]
    rc, ordered = rootcause.assign(fs, [0, 1, 2, 3])
    assert rc.kind == "oom" and rc.ranks == [3] and len(ordered[0].explains) == 2


def test_a_later_oom_does_not_replace_an_earlier_hang() -> None:
    fs = [
        F("hang", "communication", [2], "00:40", victims=[0, 1, 3], sev="ERROR"),
        F("nccl_timeout", "communication", [2], "30:41", victims=[0, 1, 3], sev="ERROR"),
        F("oom", "resource", [1], "30:45", sev="ERROR"),   # during teardown, after the timeouts
    ]
    rc, _ = rootcause.assign(fs, [0, 1, 2, 3])
    assert rc.kind == "hang" and rc.ranks == [2]


def test_the_verdict_explains_the_crash() -> None:
    fs = [F("thermal_throttling", "physical", [1], "00:10", last="00:50"),
          F("oom", "resource", [3], "00:40", sev="ERROR")]
    rc, _ = rootcause.assign(fs, [0, 1, 2, 3])
    assert rc.kind == "oom"


def test_nothing_wrong_symptoms_and_hygiene_leave_no_root_cause() -> None:
    assert rootcause.assign([], [0])[0] is None
    fs = [F("log_hygiene", "training", [0, 1], "00:00"), F("gradient_skew", "communication", [], "00:01", sev="INFO"),
          F("throughput_drop", "training", [], "01:09")]
    rc, ordered = rootcause.assign(fs, [0, 1])
    assert rc is None and len(ordered) == 3


def test_rule_and_pass_reporting_the_same_fault() -> None:
    fs = [F("thermal_throttling", "physical", [6], "01:48", rule="gpu_temp"), F("thermal_throttling", "physical", [6], "01:48")]
    rc, ordered = rootcause.assign(fs, EVERY)
    assert ordered[0].rule == "pass.thermal_throttling" and ordered[0].explains == [1]


def test_same_kind_on_other_ranks_is_another_fault() -> None:
    a, b = F("straggler", "resource", [1], "00:10"), F("straggler", "resource", [5], "00:20")
    assert not rootcause.explains(a, b) and not rootcause.explains(b, a)


def test_data_skew_explains_low_util_but_not_a_straggler() -> None:
    skew = F("data_load_skew", "resource", [5], "00:00", victims=[0, 1, 2], last="01:00")
    assert rootcause.explains(skew, F("gpu_underutilized", "resource", [5], "00:05"))
    assert not rootcause.explains(skew, F("straggler", "resource", [5], "00:05"))


def test_training_findings_need_their_cause_first() -> None:
    div = F("loss_divergence", "training", [0, 1], "01:40")
    spike = F("grad_norm_spike", "training", [0, 1], "02:05")
    rc, _ = rootcause.assign([spike, div], [0, 1])
    assert rc.kind == "loss_divergence"
    spike_first = F("grad_norm_spike", "training", [0, 1], "01:10")
    rc, _ = rootcause.assign([div, spike_first], [0, 1])
    assert rc.kind == "grad_norm_spike"


def test_a_rank_that_timed_out_itself_is_not_why_the_collective_hung() -> None:
    """Real run (tests/fixtures/realrun_moved/hang_r1): rank 0 was slow for a few steps, then rank 1
    hung; ranks 0 and 2 timed out. Rank 0's slowness cannot explain a timeout rank 0 suffered."""
    from forensics.passes.rootcause import explains
    from forensics.report.model import Finding

    slow = Finding(rule="pass.straggler", kind="straggler", layer="resource", severity="WARN", ranks=[0],
                   title="rank 0 is a straggler", first_seen="2026-11-29T10:56:39.000Z", last_seen="2026-11-29T10:56:40.800Z",
                   victims=[1, 2])
    timeout = Finding(rule="nccl_timeout", kind="nccl_timeout", layer="communication", severity="ERROR", ranks=[],
                      title="NCCL collective timed out", first_seen="2026-11-29T10:56:46.032Z", victims=[0, 2])
    assert not explains(slow, timeout)
    waited_for = Finding(rule="nccl_timeout", kind="nccl_timeout", layer="communication", severity="ERROR", ranks=[],
                         title="NCCL collective timed out", first_seen="2026-11-29T10:56:46.032Z", victims=[1, 2])
    assert explains(slow, waited_for)


def test_a_slowdown_costing_a_tenth_of_another_is_not_the_root() -> None:
    # a start-up blip of slow data loading on rank 1 (0.1 s) beside rank 2's stalls (10.7 s):
    # neither explains the other; kind priority alone would pick the data loading
    blip = F("data_load_skew", "resource", [1], "00:01", last="00:02")
    blip.cost = {"seconds": 0.1}
    stalls = F("straggler", "resource", [2], "00:10", last="00:40")
    stalls.cost = {"seconds": 10.7}
    rc, _ = rootcause.assign([blip, stalls], [0, 1, 2, 3, 4])
    assert rc.kind == "straggler" and rc.ranks == [2]
    blip.cost = {"seconds": 5.0}          # comparable costs: the table of causes and priorities decide
    rc, _ = rootcause.assign([blip, stalls], [0, 1, 2, 3, 4])
    assert rc.kind == "data_load_skew"


def test_a_job_wide_slowdown_does_not_explain_the_host_that_stands_apart() -> None:
    job = F("comm_bound", "communication", EVERY, "00:01", last="00:40")
    host = F("comm_bound", "communication", [6, 7], "00:05", victims=[0, 1, 2, 3, 4, 5], last="00:40")
    host.basis = "outlier"
    rc, ordered = rootcause.assign([job, host], EVERY)
    assert rc.ranks == [6, 7] and rc.basis == "outlier" and ordered[0].explains == [1]


def test_what_a_rank_alone_said_outweighs_a_hairs_silence_on_another() -> None:
    # the failures pass names rank 0 by a silence 8 ms earlier than rank 3's (basis_weak); rank
    # 3 alone said "stopping: shard checksum differs" and exited with code 3 (lone_message)
    silent = F("hang", "communication", [0], "00:28.079", victims=[1, 2, 3], sev="ERROR")
    silent.basis, silent.basis_weak = "last_to_log", True
    lone = F("crash", "resource", [3], "00:28.087", victims=[0, 1, 2], sev="ERROR", rule="pass.lone_message")
    lone.basis = "own_gap"
    rc, _ = rootcause.assign([silent, lone], [0, 1, 2, 3])
    assert rc.kind == "crash" and rc.ranks == [3]
    # on its own rank, the statement explains the silence that the timeouts name
    same = F("nccl_timeout", "communication", [3], "00:28.080", victims=[0, 1, 2], sev="ERROR")
    same.basis = "last_to_log"
    rc, ordered = rootcause.assign([same, lone], [0, 1, 2, 3])
    assert rc.kind == "crash" and rc.ranks == [3] and ordered[0].explains == [1]


def test_values_turned_nan_are_the_verdict_over_a_slowdown_that_does_not_explain_them() -> None:
    # the run lost its values (a NaN on rank 3, spread by the all-reduce): a job-wide
    # communication share it does not explain, found earlier, is not the verdict
    fs = [F("comm_bound", "communication", [], "00:01", last="00:40", rule="comm_share_high"),
          F("non_finite", "training", [3], "00:05", sev="ERROR", last="00:40"),
          F("loss_divergence", "training", EVERY, "00:06", sev="ERROR", last="00:40")]
    rc, _ = rootcause.assign(fs, EVERY)
    assert rc.kind == "non_finite" and rc.ranks == [3]
    # a non_finite note (INFO) does not outrank it
    fs = [F("comm_bound", "communication", [], "00:01", last="00:40", rule="comm_share_high"),
          F("non_finite", "training", [3], "00:05", sev="INFO", last="00:40")]
    rc, _ = rootcause.assign(fs, EVERY)
    assert rc.kind == "comm_bound"
