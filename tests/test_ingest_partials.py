"""The ingest's partial summaries (forensics.summaries.Partial): its own (rank, step) aggregation
and layout pre-filter give exactly what the definitions they stand for give
(`timeline.steps._step_groups`, `topology.candidates`), and ingesting imports no pandas."""
from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from polars.testing import assert_frame_equal

from forensics import summaries as S
from forensics import topology as T
from forensics.schema import EVENT_SCHEMA
from forensics.store import _key, min_max
from forensics.timeline.inputs import TS
from forensics.timeline.steps import _step_groups

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)


def _events(rows: list[dict]) -> pl.DataFrame:
    """Rows of the partials' input columns (the others null), in the given order."""
    cols = {c: EVENT_SCHEMA[c] for c in S._PARTIAL_INPUT}
    return pl.DataFrame([{c: r.get(c) for c in cols} for r in rows], schema=cols, orient="row")


def _mixed() -> pl.DataFrame:
    """Every kind of row the (rank, step) aggregation treats apart: the step summary, per-op compute
    events in any case (fwd/bwd, compute_ms, elapsed as step_time_ms, duration), per-op comm
    events without comm_ms, collectives, a null event, null rank / step / time, WARN / ERROR /
    null level, several sums in one group (three or more: the order of the additions matters)."""
    rows = []
    line = 0
    for rank in (0, 1, None):
        for step in (1, 2, None):
            for k, (event, extra) in enumerate([
                ("DATA_LOAD", {"data_load_ms": 3.1}),
                ("forward", {"fwd_ms": 10.3, "bwd_ms": None}),
                ("Backward", {"compute_ms": 7.7}),
                ("OPTIMIZER", {"step_time_ms": 1.9}),
                ("fwd_bwd", {"duration_s": 0.0123}),
                ("allreduce", {"comm_ms": 0.1, "wait_ms": 0.7}),
                ("ALLREDUCE", {"comm_ms": 0.2, "wait_ms": 0.3}),
                ("ALL_GATHER", {"comm_ms": 0.3, "wait_ms": 1e-9}),
                ("send_forward", {"step_time_ms": 4.4}),
                ("RECV", {"duration_s": 0.002}),
                (None, {"temp_c": 71.5, "gpu_util": 90.0, "disk_read_mbps": 120.5}),
                ("GPU", {"temp_c": 80.25, "disk_read_mbps": 99.1, "grad_ready_ts": 1.7e9 + 0.25}),
                ("TRAIN_STEP", {"step_time_ms": 250.0, "data_load_ms": 5.0, "comm_ms": 12.5, "wait_ms": 1.0,
                                "loss": 2.5, "lr": 1e-4, "samples_per_s": 800.0, "stage": "warmup",
                                "disk_read_mbps": 100.0}),
                ("train_step", {"loss": 2.4, "stage": "main"}),
            ]):
                line += 1
                rows.append({"rank": rank, "step": step, "host": None if k < 2 else f"h{rank}",
                             "timestamp": None if (k == 3 and rank == 1) else T0 + timedelta(milliseconds=line),
                             "event": event, "level": ("WARN", "ERROR", None, "INFO")[k % 4], "line": line,
                             "source_file": f"/logs/r{rank}.jsonl", **extra})
    return _events(rows)


def _reference(df: pl.DataFrame) -> pl.DataFrame:
    return (_step_groups(df.lazy(), TS, evidence=True, per_rank=True, state=True).collect(engine="in-memory")
            .sort("rank", "step", nulls_last=True))


def test_the_step_state_is_the_step_groups_state_bit_for_bit() -> None:
    df = _mixed()
    # rows out of (rank, step) order, as a part's chunk has them (sorted by rank, then time)
    df = df.sample(fraction=1.0, shuffle=True, seed=3)
    got = S._step_state(df).collect(engine="in-memory").sort("rank", "step", nulls_last=True)
    assert_frame_equal(got, _reference(df), check_exact=True)
    assert got.height == 9 and got["n_op"].max() > 0 and got["n_comm_ms"].max() >= 3


def test_the_step_state_of_the_sample_runs_is_the_step_groups_state(tmp_path: Path) -> None:
    import forensics

    # every sample run in one store on purpose (many runs of the same ranks: force, ingest/runs.py)
    forensics.ingest([str(REPO / "sample_logs")], tmp_path / "s", force=True)
    ev = pl.read_parquet(tmp_path / "s" / "events", columns=list(S._PARTIAL_INPUT))
    assert ev.height > 1000
    got = S._step_state(ev).collect(engine="in-memory").sort("rank", "step", nulls_last=True)
    assert_frame_equal(got, _reference(ev), check_exact=True)


def test_an_empty_chunk_and_one_without_event_names() -> None:
    empty = _events([])
    assert S._step_state(empty).collect().height == 0 == _reference(empty).height
    none = _events([{"rank": 0, "step": 1, "line": 1, "timestamp": T0, "comm_ms": 1.0}])
    assert_frame_equal(S._step_state(none).collect(), _reference(none), check_exact=True)


@pytest.mark.parametrize("where", ["extra", "fields", "message"])
def test_the_layout_prefilter_keeps_every_row_candidates_keeps(where: str) -> None:
    texts = {
        "extra": ['{"tp_rank": 1, "pp_rank": 0}', '{"stage": 3}', '{"stage": "warmup"}', '{"world_size":8}',
                  '{"peer_rank": 3, "tensor_size_mb": 4}', '{"dp_id": 2}', "{}"],
        "fields": ["pipeline_stage=2", "num_stages=4", "stage_id=1", "x=1", "tp_size=2"],
        "message": ["using world size: 8, tensor-model-parallel size: 2", "Using topology: {ProcessCoord(pipe=0)}",
                    "STAGE=1 layers=4", "stage=2 layers=8", "loss 2.0", "building pipeline group: [0, 1]"],
    }[where]
    df = _events([{"rank": i % 3, "line": i, where: t} for i, t in enumerate(texts * 3)])
    want = T.candidates(df.lazy()).collect()
    assert want.height > 0
    assert_frame_equal(T.candidates(S._layout_rows(df).lazy()).collect(), want)
    assert S._layout_rows(df).height < df.height


def test_the_layout_prefilter_keeps_every_row_the_layout_candidates_keep() -> None:
    """`_layout_rows` (literal hints, '"stage"' in extra only where its pattern can go on) then
    `topology.candidates` == `candidates` of every row: random texts of the keys, '"stage"' with
    and without a number after it, whitespace, text cut between extra and fields, nulls."""
    import random

    rng = random.Random(7)
    bits = ['"stage"', ":", " ", '"', "5", "12", "warmup", "=", "..", '"tp_rank"', "pp_size", "world_size", "x",
            "_size", "{", "}", ",", "\t", "STAGE=", "world size:", "stage=3 layers=", "Using topology:", "tp_size",
            # hints of each ending the test looks for (`_layout_hint`), and words near them
            "dp_id", "num_stages", "pipe_stage", "data_parallel_id", "stage_id", "ep_rank", "tensor_size_mb", "peer_rank"]

    def text() -> str | None:
        return None if rng.random() < 0.2 else "".join(rng.choice(bits) for _ in range(rng.randint(0, 6)))

    n = 30_000
    df = pl.DataFrame({"rank": list(range(n)), "extra": [text() for _ in range(n)],
                       "fields": [text() for _ in range(n)], "message": [text() for _ in range(n)]},
                      schema={"rank": pl.Int32, "extra": pl.String, "fields": pl.String, "message": pl.String})
    want = T.candidates(df.lazy()).collect()
    got = T.candidates(S._layout_rows(df).lazy()).collect()
    assert got.equals(want)
    # the test sees the cases it is about: a stage number in extra, and one only after the cut
    stage = pl.col("extra").str.contains('"stage"')
    assert want.filter(stage & ~pl.col("extra").str.contains('"stage"\\s*:\\s*"?\\d')).height > 0
    # ... and leaves out rows whose '"stage"' no stage number can follow
    assert S._layout_rows(df).filter(stage).height < df.filter(stage).height


def test_no_event_hint_holds_a_space() -> None:
    # _layout_rows tests extra and fields apart: exact only while no hint can span their join
    assert not [h for h in T.EVENT_HINTS if " " in h]


def test_min_max_and_sort_key_without_pyarrow_scalars() -> None:
    ts = pa.array([T0 + timedelta(microseconds=7), None, T0 - timedelta(days=400, microseconds=1)],
                  pa.timestamp("us", "UTC"))
    want = pc.min_max(ts).as_py()
    assert min_max(ts) == (want["min"], want["max"])
    assert min_max(ts)[0].isoformat() == want["min"].isoformat()
    assert min_max(pa.array([None, None], pa.timestamp("us", "UTC"))) == (None, None)
    assert min_max(pa.array([3, None, -2], pa.int32())) == (-2, 3)
    ranks = pa.chunked_array([pa.array([5, None], pa.int32()), pa.array([None, 1, 2], pa.int32())])
    assert _key(ranks).tolist() == [5, (1 << 63) - 1, (1 << 63) - 1, 1, 2]
    assert _key(ranks.combine_chunks().slice(1, 3)).tolist() == [(1 << 63) - 1, (1 << 63) - 1, 1]


def test_ingesting_imports_no_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas when it converts Python values (pa.array, pa.scalar, a timestamp's
    as_py): ~0.5 s of CPU per ingest, paid for nothing."""
    code = ("import sys, forensics; forensics.ingest([sys.argv[1]], sys.argv[2], force=True); "   # every sample run
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "sample_logs"), str(tmp_path / "s")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_units_on_threads_give_the_summaries_the_events_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Units on the thread pool at once (each builds the partials' cached expressions): the
    summaries merged from their partials are the tables the committed events give."""
    import forensics
    import forensics.ingest as ing
    import forensics.store as store_mod
    from forensics.store import open_store

    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)   # the units' parts kept apart at commit
    monkeypatch.setattr(ing, "BATCH_BYTES", 1)
    monkeypatch.setattr(ing, "BATCH_MIN", 1)
    monkeypatch.setattr(ing, "INLINE_BYTES", 0)
    monkeypatch.setattr(S, "_STEP_EXPRS", None)
    forensics.ingest([str(REPO / "sample_logs" / "straggler")], tmp_path / "s", workers=4)
    run = open_store(tmp_path / "s")
    assert len(run.event_parts()) > 1
    for name, compute in S.COMPUTE.items():
        stored, want = S._read(S.path_of(run, name)), compute(run)
        if name == S.ERRORS:
            stored, want = stored.sort(pl.all()), want.sort(pl.all())
        assert_frame_equal(stored, want, check_exact=False, rel_tol=1e-12, abs_tol=1e-9)


@pytest.mark.parametrize("cut", ["whole ranks", "anywhere", "two sorted runs"])
def test_a_partial_fed_chunk_by_chunk_writes_the_state_of_all_its_rows(tmp_path: Path, cut: str) -> None:
    """The (rank, step) states of a part's chunks, written out as they come (chunks of whole ranks
    in rank order), merged where a rank or the unranked rows go on in the next chunk, read back
    and held when a chunk goes back in rank order (a part sorted in runs): the partial written is
    the state of all the part's rows, in (rank, step) order, and no temp file is left."""
    import random

    rng = random.Random(11)
    events = ["DATA_LOAD", "ALLREDUCE", "forward", "TRAIN_STEP", None]
    rows = [{"rank": rank, "step": rng.choice([0, 1, 2, 3, None]), "line": i,
             "timestamp": None if rng.random() < 0.05 else T0 + timedelta(milliseconds=rng.randrange(10_000)),
             "event": rng.choice(events), "comm_ms": rng.choice([None, 1.5, 2.25]), "loss": rng.choice([None, 2.5]),
             "data_load_ms": rng.choice([None, 3.0]), "step_time_ms": rng.choice([None, 100.0, 7.5]),
             "source_file": f"/logs/r{rank}.jsonl", "level": "INFO"}
            for i, rank in enumerate(rng.choice([0, 1, 2, 3, 4, 5, None]) for _ in range(3000))]
    order = [pl.col("rank"), pl.col("timestamp"), pl.col("line")]
    part = _events(rows).sort(order, nulls_last=True)
    def whole_ranks(rows: pl.DataFrame) -> list[pl.DataFrame]:
        return [rows.filter(pl.col("rank").is_in(rs)) for rs in ([0, 1], [2], [3, 4, 5])] + [
            rows.filter(pl.col("rank").is_null())]

    if cut == "whole ranks":
        chunks = whole_ranks(part)
    elif cut == "anywhere":   # ranks and the unranked rows go on in the next chunk
        chunks = [part.slice(a, 250) for a in range(0, part.height, 250)]
    else:   # the second run goes back to rank 0, after the first's states were written out
        chunks = [c for k in (0, 1) for c in whole_ranks(part.filter(pl.col("line") % 2 == k))]
    p = S.Partial(tmp_path, "events/p.parquet")
    for c in chunks:
        p.add(c.to_arrow())
    if cut == "whole ranks":   # written out as they came
        assert p._out is not None
    if cut == "two sorted runs":   # ... until the second run: held from then on
        assert p._out is None and not p._streaming
    p.write()
    target = S.partial_path(tmp_path, "events/p.parquet", S.STEPS)
    got = S._read_states(target)
    assert_frame_equal(got, _reference(part), check_exact=False, rel_tol=1e-12, abs_tol=1e-9)
    # ... in one file with the step groups they finish into, first, as the STEPS summary reads them
    from forensics.timeline.steps import finish_group_states

    groups = pl.read_parquet(target)
    want = finish_group_states(_reference(part).lazy(), evidence=True).collect()
    assert groups.columns[:want.width] == want.columns
    assert_frame_equal(groups.select(want.columns), want, check_exact=False, rel_tol=1e-12, abs_tol=1e-9)
    assert sorted(f.name for f in (tmp_path / S.SUMMARIES_DIR / S.PARTS_DIR).iterdir()) == sorted(
        S.partial_path(tmp_path, "events/p.parquet", n).name for n in S.PARTIALS)


def test_an_aborted_partial_leaves_no_file(tmp_path: Path) -> None:
    p = S.Partial(tmp_path, "events/p.parquet")
    for r in range(3):   # whole ranks in order: the first states are written out
        p.add(_events([{"rank": r, "step": 1, "line": 1, "timestamp": T0}]))
    assert p._out is not None
    p.abort()
    assert not list((tmp_path / S.SUMMARIES_DIR / S.PARTS_DIR).iterdir())


def test_the_sources_table_columns_are_what_pa_array_makes() -> None:
    from forensics.store import arrow_array

    cases = [([1, None, 3, -5], pa.int64()), ([1.5, None, 2.25], pa.float64()), (["a", None, "", "é漢"], pa.large_string()),
             ([["a", "b"], None, [], ["c"]], pa.large_list(pa.large_string())),
             ([[1], None, [2, 3], []], pa.large_list(pa.int64())), ([], pa.large_string()), ([None, None], pa.int64())]
    for values, typ in cases:
        got = arrow_array(values, typ)
        got.validate(full=True)
        assert got.equals(pa.array(values, typ)), (values, typ)


def test_ingesting_more_sources_than_the_manifest_holds_imports_no_pandas(tmp_path: Path) -> None:
    """Past SOURCES_INLINE sources the table of sources is Parquet: built without pa.array."""
    from forensics.store import SOURCES_INLINE, open_store

    logs = tmp_path / "logs"
    logs.mkdir()
    for r in range(SOURCES_INLINE + 5):
        (logs / f"rank{r}.jsonl").write_text(
            f'{{"ts": "2025-03-01T00:00:{r % 60:02d}Z", "rank": {r}, "event": "TRAIN_STEP", "step": 1}}\n')
    code = ("import sys, forensics; forensics.ingest([sys.argv[1]], sys.argv[2], force=True); "   # every sample run
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(logs), str(tmp_path / "s")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    run = open_store(tmp_path / "s")
    assert len(run.sources) == SOURCES_INLINE + 5 and (tmp_path / "s" / "sources.parquet").is_file()
    src = next(s for s in run.sources if s["path"].endswith("rank7.jsonl"))
    assert src["ranks"] == [7] and src["events"] == 1 and src["rank_hint"] == 7


def test_the_step_line_of_a_group_from_several_files_or_none_is_the_step_groups() -> None:
    """The step line cited is the least in the group's first row's file (`_train_line_in_file`):
    groups whose rows come from two files (in either order, the first file's lines above or below
    the other's), from a file and rows without one, or from no file at all are computed apart
    from the one-file groups (`summaries._step_state`), and give what the filter gives."""
    rows = []
    line = 0
    files = {0: ("/logs/a.jsonl", "/logs/b.jsonl"), 1: ("/logs/b.jsonl", "/logs/a.jsonl"),
             2: (None, "/logs/a.jsonl"), 3: ("/logs/a.jsonl", None), 4: (None, None), 5: ("/logs/c.jsonl",) * 2}
    for rank, (first, second) in files.items():
        for step in (1, 2):
            for k in range(4):
                line += 1
                rows.append({"rank": rank, "step": step, "timestamp": T0 + timedelta(milliseconds=line),
                             "event": "TRAIN_STEP" if k % 2 else "forward", "level": "INFO",
                             # the second file's lines below the first's on even steps
                             "line": line + (0 if k < 2 else (-100 if step == 2 else 100)),
                             "source_file": first if k < 2 else second, "loss": 2.0})
    df = _events(rows)
    got = S._step_state(df).collect(engine="in-memory").sort("rank", "step", nulls_last=True)
    want = _reference(df)
    assert_frame_equal(got, want, check_exact=True)
    # each kind of group is there: the first file's least line (not the group's least), none
    # (the first row names no file), the least of a group all from one file
    lines = dict(zip(zip(want["rank"], want["step"]), want["train_line"]))
    assert (lines[(0, 2)], lines[(1, 2)], lines[(3, 2)], lines[(5, 2)]) == (5, 13, 29, -53)
    assert lines[(2, 1)] is None and lines[(4, 1)] is None and lines[(0, 1)] == 1
