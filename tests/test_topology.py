"""The parallel layout (forensics.topology) and the timing passes that compare a rank only with
the ranks that do the same work: pipeline stage for compute, data-parallel group for data."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from forensics import timeline
from forensics import topology as T
from forensics.ingest import ingest
from forensics.passes import data_load_skew, diagnose, gradient_skew, straggler
from forensics.passes.context import Context
from forensics.schema import conform
from forensics.store import open_store
from pass_helpers import Rows
from pipeline_run import frame, pipeline_rows, write_jsonl


def _ctx(rows: Rows) -> Context:
    return Context.from_frame(rows.frame())


# --- reading the layout --------------------------------------------------------------------------

def _printed(world: int, *messages: str):
    """The topology of a run of `world` ranks whose rank 0 printed `messages` on its console."""
    rows = Rows()
    for m in messages:
        rows.add(0.0, 0, "LOG", message=m)
    for r in range(world):
        rows.add(1.0, r, "TRAIN_STEP", step=0)
    return _ctx(rows).topology


def test_megatron_sizes_line_gives_the_default_rank_order() -> None:
    # Megatron prints this on rank 0 (megatron/training/arguments.py); order tp-cp-ep-dp-pp
    topo = _printed(8, "using world size: 8, data-parallel size: 2, context-parallel size: 1, "
                    "hierarchical context-parallel sizes: None, tensor-model-parallel size: 2, "
                    "pipeline-model-parallel size: 2")
    assert topo is not None and topo.sizes["tp"] == 2 and topo.sizes["pp"] == 2
    t = {row["rank"]: row for row in topo.table.iter_rows(named=True)}
    # tp fastest: ranks 0,1 are tp 0,1 of dp 0, stage 0; ranks 4-7 are stage 1
    assert [t[r]["tp"] for r in range(4)] == [0, 1, 0, 1]
    assert [t[r]["dp"] for r in range(4)] == [0, 0, 1, 1]
    assert topo.stages() == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    g = {row["rank"]: row["dgroup"] for row in topo.groups().iter_rows(named=True)}
    assert g[0] == g[2] != g[1]           # a data-parallel group: same stage and tp rank


def test_megatron_argument_dump_sizes() -> None:
    topo = _printed(8, "  pipeline_model_parallel_size ................... 4",
                    "  tensor_model_parallel_size ..................... 1")
    assert topo.stages() == {0: [0, 1], 1: [2, 3], 2: [4, 5], 3: [6, 7]}


def test_deepspeed_printed_topology_and_pipeline_groups() -> None:
    # deepspeed/runtime/pipe/topology.py: rank 0 prints the ProcessCoord map, or the groups
    topo = _printed(4, "Using topology: {ProcessCoord(pipe=0, data=0): 0, ProcessCoord(pipe=0, data=1): 1, "
                    "ProcessCoord(pipe=1, data=0): 2, ProcessCoord(pipe=1, data=1): 3}")
    assert topo.stages() == {0: [0, 1], 1: [2, 3]}
    topo = _printed(6, "RANK=0 building pipeline group: [0, 2, 4]", "RANK=0 building pipeline group: [1, 3, 5]")
    assert topo.stages() == {0: [0, 1], 1: [2, 3], 2: [4, 5]}


def test_deepspeed_stage_lines_of_data_parallel_id_0_give_the_number_of_stages() -> None:
    # pipe/engine.py logs RANK/STAGE on data-parallel id 0 only; module.py prints stage=s layers=n
    topo = _printed(6, "stage=0 layers=4", "stage=1 layers=5",
                    "RANK=0 STAGE=0 LAYERS=4 [0, 4) STAGE_PARAMS=100 (0.000M) TOTAL_PARAMS=200 (0.000M)")
    assert topo.stages() == {0: [0, 1, 2], 1: [3, 4, 5]}


def test_per_rank_keys_in_events_win_and_a_training_stage_is_not_a_pipeline_stage() -> None:
    rows = Rows()
    for r in range(4):
        rows.add(0.0, r, "TRAIN_STEP", step=0, extra=json.dumps({"stage": "warmup"}))
        rows.add(0.0, r, "FORWARD", step=0, extra=json.dumps({"pp_rank": r % 2, "dp_rank": r // 2}))
    topo = _ctx(rows).topology
    assert topo.stages() == {0: [0, 2], 1: [1, 3]} and topo.sources == ("events",)
    rows = Rows()
    for r in range(4):
        rows.add(0.0, r, "TRAIN_STEP", step=0, extra=json.dumps({"stage": "warmup", "world_size": 4}))
    assert _ctx(rows).topology is None     # plain data parallelism: no topology


def test_sizes_that_do_not_describe_the_world_are_ignored() -> None:
    assert T.layout_from_sizes({"tp": 3, "pp": 2}, 8) == {}
    assert T.layout_from_sizes({"tp": 1, "pp": 1}, 8) == {}
    assert T.layout_from_sizes({"pp": 2}, 4) == {0: {"tp": 0, "cp": 0, "dp": 0, "pp": 0}, 1: {"tp": 0, "cp": 0, "dp": 1, "pp": 0},
                                                 2: {"tp": 0, "cp": 0, "dp": 0, "pp": 1}, 3: {"tp": 0, "cp": 0, "dp": 1, "pp": 1}}


# --- per-op compute ------------------------------------------------------------------------------

def test_compute_is_the_sum_of_the_logged_forward_backward_optimizer_ops() -> None:
    rows = pipeline_rows(pp=2, dp=2, steps=3, jitter=0.0)
    st = _ctx(rows).steps.sort("rank", "step")
    # stage 0 computes 300 ms + 10 ms optimizer; the last stage 450 + 10, whatever its waits
    got = st.group_by("rank").agg(pl.col("compute_ms").median()).sort("rank")["compute_ms"].to_list()
    assert got == pytest.approx([310.0, 310.0, 460.0, 460.0])


def test_explicit_compute_ms_beats_the_remainder_of_the_step() -> None:
    rows = Rows()
    for r in range(2):
        rows.add(0.0, r, "ALLREDUCE", step=0, comm_ms=50.0)
        rows.add(0.5, r, "TRAIN_STEP", step=0, step_time_ms=500.0, compute_ms=120.0 + r)
    st = timeline.step_table(conform(rows.frame())).collect()
    assert st["compute_ms"].to_list() == [120.0, 121.0]


# --- the passes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("pp,dp", [(2, 4), (4, 2)])
def test_one_slow_worker_of_stage_0_is_named_alone(pp: int, dp: int) -> None:
    rows = pipeline_rows(pp=pp, dp=dp, factor=lambda s, d, step: 1.6 if (s, d) == (0, 1) else 1.0)
    fs = straggler.find(_ctx(rows))
    assert [f.ranks for f in fs] == [[1]]
    f = fs[0]
    assert f.evidence["peer_group"] == "pipeline stage 0"
    assert f.evidence["group_ranks"] == list(range(dp))
    assert f.evidence["group_median_compute_ms"] == pytest.approx(310.0, rel=0.05)


def test_p2p_and_collective_ops_with_only_a_duration_are_communication() -> None:
    # RECV / ALLREDUCE events that log duration_ms and nothing else: their time is comm time,
    # and the waits are estimated from it (the last rank to arrive spends least)
    rows = pipeline_rows(pp=2, dp=4, comm_fields=False, factor=lambda s, d, step: 1.6 if (s, d) == (0, 1) else 1.0)
    st = _ctx(rows).steps
    assert st["comm_ms"].null_count() == 0
    assert [f.ranks for f in straggler.find(_ctx(rows))] == [[1]]


@pytest.mark.parametrize("layout", ["megatron", "deepspeed"])
def test_layout_from_printed_text_gives_the_same_verdict(layout: str) -> None:
    rows = pipeline_rows(pp=2, dp=4, layout=layout, factor=lambda s, d, step: 1.6 if (s, d) == (0, 2) else 1.0)
    assert [f.ranks for f in straggler.find(_ctx(rows))] == [[2]]


def test_the_last_stage_computing_more_by_design_is_not_blamed() -> None:
    rows = pipeline_rows(pp=4, dp=2, last_extra=0.8)
    assert straggler.find(_ctx(rows)) == []


def test_without_topology_the_last_stage_looks_like_stragglers() -> None:
    # the measured failure this module fixes: stages compared with each other
    rows = pipeline_rows(pp=2, dp=4, layout="none", last_extra=0.8,
                         factor=lambda s, d, step: 1.6 if (s, d) == (0, 1) else 1.0)
    ranks = sorted(r for f in straggler.find(_ctx(rows)) for r in f.ranks)
    assert 1 not in ranks or len(ranks) > 1


def test_a_slow_whole_stage_is_a_finding_about_the_stage() -> None:
    # twice as slow: stage 1 becomes the pipeline's bottleneck (the last stage was, by design)
    rows = pipeline_rows(pp=4, dp=2, factor=lambda s, d, step: 2.0 if (s == 1 and step >= 15) else 1.0)
    fs = straggler.find(_ctx(rows))
    assert len(fs) == 1
    f = fs[0]
    assert f.ranks == [2, 3] and f.evidence["scope"] == "pipeline_stage" and f.evidence["stage"] == 1
    assert f.evidence["first_step"] >= 14 and "pipeline stage 1" in f.title
    # every other rank waits for it
    assert set(f.victims) <= {0, 1, 4, 5, 6, 7} and f.victims


def test_a_job_wide_slowdown_is_not_a_slow_stage() -> None:
    rows = pipeline_rows(pp=2, dp=2, factor=lambda s, d, step: 1.5 if step >= 15 else 1.0)
    assert straggler.find(_ctx(rows)) == []


def test_pipeline_run_through_ingest_and_diagnose(tmp_path: Path) -> None:
    rows = pipeline_rows(pp=2, dp=4, steps=30, factor=lambda s, d, step: 1.6 if (s, d) == (0, 3) else 1.0)
    write_jsonl(rows, tmp_path / "logs")
    ingest([str(tmp_path / "logs")], tmp_path / "s.forensics")
    rep = diagnose(open_store(tmp_path / "s.forensics"))
    assert rep.root_cause is not None and rep.root_cause.kind == "straggler" and rep.root_cause.ranks == [3]


def _loads(slow: tuple[int, int] | None):
    # the first stage loads batches (60 ms); the other stages only log a 0.5 ms label fetch
    return lambda s, d, step: (400.0 if (s, d) == slow else 60.0) if s == 0 else 0.5


def test_data_loading_is_compared_within_the_data_parallel_group() -> None:
    # without the layout, every first-stage rank looks 120x slower than the median rank
    assert [f.ranks for f in data_load_skew.find(_ctx(pipeline_rows(pp=4, dp=2, layout="none", data=_loads(None))))] == [[0], [1]]
    assert data_load_skew.find(_ctx(pipeline_rows(pp=4, dp=2, data=_loads(None)))) == []
    [f] = data_load_skew.find(_ctx(pipeline_rows(pp=2, dp=4, data=_loads((0, 2)))))
    assert f.ranks == [2] and f.evidence["group_ranks"] == [0, 1, 2, 3]
    assert f.evidence["peer_data_load_ms"] == pytest.approx(60.0)


def test_gradient_ready_times_are_compared_within_the_data_parallel_group() -> None:
    # the first stage finishes its backward last by design: across stages it is "late" every step
    [f] = gradient_skew.find(_ctx(pipeline_rows(pp=4, dp=2, layout="none", grad_ready=True)))
    assert f.ranks and set(f.ranks) <= {0, 1} and f.severity == "WARN"
    assert [g for g in gradient_skew.find(_ctx(pipeline_rows(pp=4, dp=2, grad_ready=True))) if g.severity != "INFO"] == []


def test_layout_prefilter_passes_layout_keys_only() -> None:
    """The literal pre-filter before the layout regexes: every key the regexes read passes it
    (a superset: `candidates` keeps every row `read` takes anything from), a collective's
    tensor_size_mb / peer_rank do not (they reached the regexes on every collective: wasted
    work, never a wrong size, as the last check shows)."""
    keys = [k for ks in (*T.KEYS.values(), *T.SIZE_KEYS.values()) for k in ks]
    texts = pl.Series([json.dumps({k: 2}) for k in keys] + ['{"stage": 1}'])
    assert texts.str.contains_any(T.EVENT_HINTS).all()
    noise = pl.Series(['{"comm_ms": 229.8, "collective": "allreduce", "tensor_size_mb": 512}',
                       '{"peer_rank": 3, "seq": 17, "group_id": 0}'])
    assert not noise.str.contains_any(T.EVENT_HINTS).any()
    rows = Rows()
    for r in range(4):
        rows.add(0.0, r, "ALLREDUCE", step=0, extra=json.dumps({"tensor_size_mb": 512, "pp_size": 2, "world_size": 4}))
    assert _ctx(rows).topology.stages() == {0: [0, 1], 1: [2, 3]}


@pytest.mark.parametrize("layout", ["events", "none"])
@pytest.mark.parametrize("seed", range(4))
def test_with_groups_gives_the_rows_their_group_columns(seed: int, layout: str) -> None:
    """Context.with_groups (constants without a topology, never made into columns) gives a
    selection of the step table the `peer` and `dgroup` of `group_columns`, as the passes read
    them before: with a pipeline layout and without one (the logs do not say)."""
    import random

    from forensics.passes.context import group_columns

    rnd = random.Random(seed)
    ctx = Context.from_frame(frame(pipeline_rows(2, rnd.randint(1, 3), steps=rnd.randint(2, 12), layout=layout,
                                                 seed=seed)))
    assert (ctx.topology is None) == (layout == "none")
    df = ctx.steps.select(rnd.sample(ctx.steps.columns, rnd.randint(1, 5)))
    want = df.with_columns(group_columns(ctx.steps, ctx.topology).get_columns())
    assert ctx.with_groups(df).equals(want)
