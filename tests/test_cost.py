"""What a slowdown cost (forensics/passes/cost.py), checked against runs where the lost time is
known by construction, and the report's use of it (verdict, order of findings)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import forensics
import forensics.report
from forensics.passes import cost
from forensics.passes.context import Context
from forensics.passes.rootcause import assign
from forensics.report import render
from forensics.report.model import Finding
from forensics.report.outline import outline
from slowdown import inject_slowdown
from synthetic_run import SAMPLE_LOGS, write_run


def _steps(compute: dict[tuple[int, int], float], ranks: int = 4, steps: int = 10, data: float = 20.0) -> pl.DataFrame:
    """A step table without jitter: every rank computes 100 ms unless `compute` says otherwise."""
    rows = [{"rank": r, "step": s, "data_load_ms": data, "compute_ms": compute.get((r, s), 100.0), "comm_ms": 50.0,
             "wait_est": 0.0, "step_time_ms": 200.0} for s in range(steps) for r in range(ranks)]
    return pl.DataFrame(rows)


def test_peer_replay_gives_back_exactly_the_injected_excess() -> None:
    # rank 1 computes +70 ms in steps 3..7: the run lost 5 x 70 ms, no more, no less
    st = _steps({(1, s): 170.0 for s in range(3, 8)})
    saved = cost.peer_replay(st, [1], ["compute_ms"])
    assert saved.get_column("saved_ms").sum() == pytest.approx(350.0)
    # the wrong phase gives nothing back: rank 1's data loading was like its peers'
    assert cost.peer_replay(st, [1], ["data_load_ms"]).get_column("saved_ms").sum() == 0.0
    # a rank faster than its peers is never made slower by the replay
    fast = _steps({(2, s): 60.0 for s in range(10)})
    assert cost.peer_replay(fast, [2], ["compute_ms"]).get_column("saved_ms").sum() == 0.0


def test_a_slow_rank_hidden_behind_a_slower_one_costs_only_the_difference() -> None:
    # rank 1 +70 ms, rank 3 +100 ms at the same steps: fixing rank 1 alone saves nothing (rank 3
    # still holds the collective), fixing both saves the full 100 ms per step
    c = {**{(1, s): 170.0 for s in range(5)}, **{(3, s): 200.0 for s in range(5)}}
    st = _steps(c)
    assert cost.peer_replay(st, [1], ["compute_ms"]).get_column("saved_ms").sum() == 0.0
    assert cost.peer_replay(st, [3], ["compute_ms"]).get_column("saved_ms").sum() == pytest.approx(5 * 30.0)
    assert cost.peer_replay(st, [1, 3], ["compute_ms"]).get_column("saved_ms").sum() == pytest.approx(5 * 100.0)


def test_peer_replay_covers_the_whole_run_and_a_temporal_one_only_the_finding() -> None:
    # the straggler finding names steps 2-4 (its episode), but rank 1 was slow in all 10 steps
    st = _steps({(1, s): 170.0 for s in range(10)})
    f = Finding("pass.straggler", "straggler", "resource", "WARN", [1], "t", evidence={"first_step": 2, "last_step": 4})
    c = cost.finding_cost(f, st, wall_s=10.0, world=4)
    assert c["seconds"] == pytest.approx(0.7) and c["steps"] == 10
    assert c["share"] == pytest.approx(0.07) and c["gpu_hours"] == pytest.approx(0.7 * 4 / 3600, abs=1e-4)
    # a job-wide throughput drop in steps 6-9: step time 300 instead of 200 ms -> 4 x 100 ms
    slow = _steps({}).with_columns(pl.when(pl.col("step") >= 6).then(300.0).otherwise(200.0).alias("step_time_ms"))
    drop = Finding("pass.throughput", "throughput_drop", "training", "WARN", [], "t", evidence={"first_step": 6, "last_step": 9})
    c = cost.finding_cost(drop, slow, wall_s=10.0, world=4)
    assert c["seconds"] == pytest.approx(0.4) and c["method"] == "own_steps_outside"
    # slow from the first step to the last: no reference, so the cost is unknown, not 0
    everywhere = Finding("pass.throughput", "throughput_drop", "training", "WARN", [], "t",
                         evidence={"first_step": 0, "last_step": 9})
    assert cost.finding_cost(everywhere, slow, 10.0, 4) is None
    # not a slowdown: no cost
    assert cost.finding_cost(Finding("x", "oom", "resource", "ERROR", [1], "t"), st, 10.0, 4) is None


def test_generated_hot_rank_costs_n_times_x(tmp_path: Path) -> None:
    """tests/synthetic_run.py: rank 5 computes 320 instead of 200 ms (X = 120 ms) in steps 30-59
    (N = 30). Tolerance, from the generator: every rank's own time is data 20±2 + compute ±5, so
    the healthy rank 5 and the slowest peer after the replay differ by at most 14 ms in any of the
    60 steps (in the 30 healthy ones the replay gives back only what rank 5 happened to arrive
    last by): |cost - N·X| <= 60·14 ms, and the cost is never above N·X + 60·14 ms."""
    logs = write_run(tmp_path, ranks=8, hosts=2, steps=60, hot=5, hot_from=30, hostile=False)
    report = forensics.diagnose(str(logs))
    costed = [f for f in report.findings if f.ranks == [5] and f.kind in ("straggler", "thermal_throttling")]
    assert {f.kind for f in costed} == {"straggler", "thermal_throttling"}
    for f in costed:
        assert f.cost is not None and f.cost["method"] == "peers"
        assert abs(f.cost["seconds"] - 30 * 0.120) <= 60 * 0.014, f.cost
        assert f.cost["steps"] == 60
        # every one of the 8 GPUs waited: GPU-hours = seconds x 8 / 3600
        assert f.cost["gpu_hours"] == pytest.approx(f.cost["seconds"] * 8 / 3600, abs=1e-4)
    assert report.root_cause is not None and report.root_cause.cost == report.findings[0].cost


@pytest.mark.parametrize("phase,pct,rank", [("compute", 0.25, 2), ("data", 6.0, 1)])
def test_injected_slowdown_cost_matches_the_time_the_run_lost(tmp_path: Path, phase: str, pct: float, rank: int) -> None:
    """A copy of sample_logs/healthy with one rank's compute (data) made longer from step 20, as a
    lockstep run would look (tests/slowdown.py): the injector knows how much longer the run took.
    The replay uses the peers' median where the truth is the rank's own unslowed time, so it may
    differ by the healthy run's spread of arrivals: at most the largest (max - median) of the
    ranks' own time per step in the original, summed over the slowed steps."""
    src = SAMPLE_LOGS / "healthy"
    truth = inject_slowdown(src, tmp_path / "slow", rank=rank, phase=phase, pct=pct, from_step=20)
    base = Context.from_run(forensics.open_run(str(src))).steps
    spread = (base.with_columns((pl.col("data_load_ms") + pl.col("compute_ms")).alias("own"))
              .group_by("step").agg((pl.col("own").max() - pl.col("own").median()).alias("d"))
              .get_column("d").max()) / 1000.0
    report = forensics.diagnose(str(tmp_path / "slow"))
    kind = "straggler" if phase == "compute" else "data_load_skew"
    f = next(f for f in report.findings if f.kind == kind)
    assert f.ranks == [rank]
    assert truth["lost_s"] > 3.0
    assert abs(f.cost["seconds"] - truth["lost_s"]) <= truth["steps"] * spread, (f.cost, truth, spread)
    assert report.root_cause is not None and report.root_cause.cost is not None
    text = render(report, "text")
    assert f"cost {report.root_cause.cost['share']:.0%} of wall time" in text.splitlines()[3]


def test_job_wide_slow_network_is_priced_against_its_own_earlier_steps() -> None:
    """sample_logs/comm_bound: from step 10 of 40 every transfer takes 1100 instead of 150 ms on
    every rank (x U(0.97, 1.03)): no peer was faster, so the reference is the run's steps before:
    30 x 950 ms, within the generator's ±3% of 1100 ms a step."""
    report = forensics.diagnose(str(SAMPLE_LOGS / "comm_bound"))
    f = next(f for f in report.findings if f.kind == "comm_bound" and f.ranks)
    assert f.cost["method"] == "own_steps_outside"
    assert abs(f.cost["seconds"] - 30 * 0.95) <= 30 * 0.033 + 30 * 0.005, f.cost


def test_overlapped_late_gradients_cost_nothing() -> None:
    # sample_logs/gradient_skew: rank 1's gradients are ready late but the reduction overlaps it
    # and nobody waits: the fault is real, its cost is ~0
    report = forensics.diagnose(str(SAMPLE_LOGS / "gradient_skew"))
    f = next(f for f in report.findings if f.kind == "gradient_skew")
    assert f.cost is not None and f.cost["share"] < 0.005


def test_healthy_run_has_no_cost() -> None:
    src = SAMPLE_LOGS / "healthy"
    report = forensics.diagnose(str(src))
    assert all(f.cost is None for f in report.findings)
    assert report.root_cause is None
    # and replaying any one rank at its peers' pace gives back (almost) nothing: < 0.5% of the run
    steps = Context.from_run(forensics.open_run(str(src))).steps
    for r in range(4):
        saved = cost.peer_replay(steps, [r], ["data_load_ms", "compute_ms"]).get_column("saved_ms").sum() / 1000.0
        assert saved < 0.005 * 60.6, (r, saved)


def test_findings_are_listed_costliest_first_within_a_severity() -> None:
    def f(title: str, layer: str, severity: str, seconds: float | None, kind: str = "straggler") -> Finding:
        return Finding(f"pass.{title}", kind, layer, severity, [1], title, first_seen="2025-06-12T14:00:00Z",
                       cost=None if seconds is None else {"seconds": seconds, "share": 0.1, "gpu_hours": 0.0})
    # no root cause (INFO notes and a log-hygiene ERROR): the findings are listed by severity, then
    # cost; without costs the physical-layer note would lead its severity (layer order)
    found = [f("plain", "physical", "INFO", None, "low_bandwidth"), f("cheap", "resource", "INFO", 1.0),
             f("dear", "communication", "INFO", 9.0, "comm_bound"), f("error", "training", "ERROR", None, "log_hygiene")]
    root, ordered = assign(found, [0, 1, 2])
    assert root is None
    assert [x.title for x in ordered] == ["error", "dear", "cheap", "plain"]
    report = forensics.report.Report(run=forensics.report.RunInfo(3, 1, None, None, 10, 0, False), root_cause=None,
                                     findings=ordered)
    assert [x.title for x in outline(report).others] == ["error", "dear", "cheap", "plain"]


def test_verdict_states_the_cost(tmp_path: Path) -> None:
    truth = inject_slowdown(SAMPLE_LOGS / "healthy", tmp_path / "slow", rank=2, phase="compute", pct=0.25, from_step=20)
    report = forensics.diagnose(str(tmp_path / "slow"))
    o = outline(report)
    rc = report.root_cause
    assert rc is not None and rc.cost is not None and truth["lost_s"] > 0
    assert o.verdict.startswith("Root cause: straggler on rank 2 (resource layer); cost ")
    assert "GPU-hours" in o.verdict
    d = report.to_json()
    assert set(d["root_cause"]["cost"]) >= {"seconds", "share", "gpu_hours"}
    assert all("cost" in f for f in d["findings"])
    md = render(report, "md")
    assert "cost" in md.splitlines()[4]


# --- with a parallel topology: peers are the ranks that do the same work --------------------------

def test_a_slow_whole_pipeline_stage_is_priced_against_the_runs_own_earlier_steps() -> None:
    """Stage 1 of a 4-stage pipeline computes twice as long from step 15 on: the straggler pass
    names both its ranks. They have no healthy peer in their stage, and the other stages do other
    work (the last one computes more by design): the time lost is what the step time lay above its
    own earlier median (measured from the generated run: ~185 ms x 25 steps), not a comparison
    with ranks of other stages (which priced it at 3.75 s)."""
    from pipeline_run import pipeline_rows
    from forensics.passes import straggler

    ctx = Context.from_frame(pipeline_rows(pp=4, dp=2, factor=lambda s, d, step: 2.0 if (s == 1 and step >= 15) else 1.0).frame())
    [f] = straggler.find(ctx)
    assert f.ranks == [2, 3]
    cost.attach_costs([f], ctx)
    per = ctx.steps.group_by("step").agg(pl.col("step_time_ms").median()).sort("step")
    lost = float(per.filter(pl.col("step") >= 15)["step_time_ms"].sum()
                 - per.filter(pl.col("step").is_between(2, 14))["step_time_ms"].median() * 25) / 1000
    assert f.cost is not None and f.cost["method"] == "own_steps_outside" and f.cost["steps"] == 25
    assert f.cost["seconds"] == pytest.approx(lost, rel=0.05)
    # the replay itself finds no peer of stage 1's ranks in their stage
    assert cost.peer_replay(ctx.steps, [2, 3], ("compute_ms",), topo=ctx.topology).is_empty()
    assert not cost.peer_replay(ctx.steps, [2, 3], ("compute_ms",)).is_empty()   # without topology: other stages



def _peer_replay_by_joins(steps: pl.DataFrame, ranks: list[int], phases: tuple[str, ...]) -> pl.DataFrame:
    """cost.peer_replay as it was first written (no topology): a filter, group_bys and joins."""
    faulty = pl.col("rank").is_in(ranks)
    st = steps.filter(pl.col("rank").is_not_null() & pl.col("step_time_ms").is_not_null())
    own = pl.col("data_load_ms").fill_null(0.0) + pl.col("compute_ms").fill_null(0.0)
    replaced = {p: pl.when(pl.col(f"peer_{p}").is_not_null())
                .then(pl.min_horizontal(pl.col(p).fill_null(0.0), pl.col(f"peer_{p}")))
                .otherwise(pl.col(p).fill_null(0.0)) for p in phases}
    whatif = sum((replaced.get(p, pl.col(p).fill_null(0.0)) for p in ("data_load_ms", "compute_ms")), pl.lit(0.0))
    healthy = st.with_columns(pl.when(~faulty).then(own).alias("own_ok"),
                              *(pl.when(~faulty).then(pl.col(p)).alias(f"ok_{p}") for p in phases))
    per = healthy.group_by("step").agg((~faulty).sum().alias("peers"), pl.col("own_ok").max().alias("max_ok"))
    bad = st.filter(faulty)
    for p in phases:
        bad = bad.join(healthy.group_by("step").agg(pl.col(f"ok_{p}").median().alias(f"peer_{p}")), on="step", how="left")
    return (bad.select("step", own.alias("own"), whatif.alias("whatif"),
                       pl.any_horizontal(*(pl.col(f"peer_{p}").is_not_null() for p in phases)).alias("has_peers"))
            .group_by("step").agg(pl.col("own").max().alias("own_bad"), pl.col("whatif").max().alias("whatif_bad"),
                                  pl.col("has_peers").any().alias("counted"))
            .filter(pl.col("counted")).join(per, on="step", how="inner").filter(pl.col("peers") >= 1)
            .select("step", pl.max_horizontal("max_ok", "own_bad").alias("actual_ms"),
                    pl.max_horizontal("max_ok", "whatif_bad").alias("whatif_ms"))
            .with_columns((pl.col("actual_ms") - pl.col("whatif_ms")).clip(lower_bound=0.0).alias("saved_ms"))
            .sort("step"))


def test_peer_replay_over_shared_step_groups_is_the_replay_by_joins() -> None:
    import numpy as np

    for seed in range(6):
        rng = np.random.default_rng(seed)
        rows = [(r, s) for r in range(6) for s in range(40) if rng.random() > 0.1]
        n = len(rows)

        def col(null_share: float) -> list[float | None]:
            v = rng.integers(10, 30, n) * 5.0     # ties, as logged milliseconds have
            return [None if rng.random() < null_share else float(x) for x in v]

        st = pl.DataFrame({"rank": [r for r, _ in rows], "step": [s for _, s in rows], "data_load_ms": col(0.1),
                           "compute_ms": col(0.1), "step_time_ms": col(0.05)}, schema_overrides={"rank": pl.Int32})
        for ranks in ([1], [0, 4], [5]):
            for phases in (("compute_ms",), ("data_load_ms",), ("data_load_ms", "compute_ms")):
                assert cost.peer_replay(st, ranks, phases).equals(_peer_replay_by_joins(st, ranks, list(phases))), \
                    (seed, ranks, phases)


def test_findings_of_one_fault_share_one_replay(monkeypatch) -> None:
    st = _steps({(1, s): 170.0 for s in range(3, 8)})
    calls = []
    real = cost.peer_replay
    monkeypatch.setattr(cost, "peer_replay", lambda *a, **k: calls.append(a[1:3]) or real(*a, **k))
    fs = [Finding("pass.straggler", "straggler", "resource", "WARN", [1], "t"),
          Finding("rule.x", "straggler", "resource", "WARN", [1], "t2"),
          Finding("pass.data_load_skew", "data_load_skew", "resource", "WARN", [1], "t3")]
    memo: dict = {}
    got = [cost.finding_cost(f, st, 10.0, 4, memo=memo) for f in fs]
    assert len(calls) == 2                      # the straggler's replay once, the data loading's once
    assert got == [cost.finding_cost(f, st, 10.0, 4) for f in fs]
    assert got[0]["seconds"] == pytest.approx(0.35) and got[1] == got[0] and got[2]["seconds"] == 0.0
