"""The hygiene pass: rank/event fields, ERROR floods that bury WARNs, metrics polled too often."""
from __future__ import annotations

from forensics.passes import hygiene
from pass_helpers import Rows


def checks(rows: Rows) -> dict[str, object]:
    return {f.evidence["check"]: f for f in hygiene.find(rows.ctx())}


def test_records_without_rank_say_where_the_rank_came_from() -> None:
    rows = Rows()
    for i in range(5):
        r = rows.add(float(i), 3, "TRAIN_STEP", step=i, loss=2.0)
        r["rank_source"] = "path"
    f = checks(rows)["rank_missing"]
    assert f.severity == "INFO" and f.evidence["records"] == 5 and "file name" in f.title


def test_error_flood_buries_the_real_error() -> None:
    rows = Rows()
    for i in range(300):
        rows.add(float(i), 0, "GRAD_NORM", level="ERROR", grad_norm=12.0)
    rows.add(301.0, 1, "NCCL_TIMEOUT", level="ERROR")
    rows.add(302.0, 1, "LR_WARMUP_END", level="WARN")
    f = checks(rows)["error_flood"]
    assert f.severity == "WARN" and f.evidence["event"] == "GRAD_NORM" and f.evidence["flood"] == 300
    assert "NCCL_TIMEOUT" in f.title


def test_traceback_lines_of_a_console_log_are_not_a_flood() -> None:
    rows = Rows()
    for i in range(80):
        r = rows.add(float(i), 1, "TRACEBACK_CONT", level="ERROR")
        r["format"] = "console"
    rows.add(90.0, 1, "CUDA_OOM", level="ERROR")
    assert "error_flood" not in checks(rows)


def test_gpu_metrics_polled_every_200ms() -> None:
    rows = Rows()
    for i in range(50):
        for r in range(2):
            rows.add(0.2 * i, r, "GPU_STATS", gpu_util=97.0)
    f = checks(rows)["sampling_interval"]
    assert f.ranks == [0, 1] and f.evidence["interval_s"] == 0.2
    # each rank's first sample is cited (fetched after the intervals are known): its file and line
    assert [(ln.source_file, ln.line, ln.rank) for ln in f.lines] == [("rank_0.jsonl", 1, 0), ("rank_1.jsonl", 1, 1)]


def test_sampling_cites_a_ranks_first_sample_even_when_two_lines_share_its_time() -> None:
    rows = Rows()
    rows.add(0.0, 0, "TRAIN_STEP", step=0, loss=2.0)              # line 1: no metric
    for i in range(30):
        rows.add(0.5 * i, 0, "GPU_STATS", gpu_util=97.0)
        if i == 0:
            rows.add(0.0, 0, "GPU_STATS", temp_c=70.0)            # the same time: one sample
    f = checks(rows)["sampling_interval"]
    assert f.evidence["interval_s"] == 0.5
    assert [(ln.line, ln.rank) for ln in f.lines] == [(2, 0)]


def test_five_second_sampling_is_fine_and_clean_logs_are_quiet() -> None:
    rows = Rows()
    for i in range(50):
        rows.add(5.0 * i, 0, "GPU_STATS", gpu_util=97.0)
    assert hygiene.find(rows.ctx()) == []


def test_records_without_event_id() -> None:
    rows = Rows()
    for i in range(3):  # what ingest makes of a flat line: it names the event and says it did
        rows.add(float(i), 0, "TRAIN_STEP", step=i, loss=2.0, event_source="inferred")
    rows.add(4.0, 0, "TRAIN_STEP", step=4, loss=2.0, event_source="record")
    assert checks(rows)["event_missing"].evidence["records"] == 3


def test_flat_lines_through_ingest_are_found(tmp_path) -> None:
    import forensics
    from forensics.passes.context import Context
    from forensics.passes import hygiene
    from forensics.store import open_store

    (tmp_path / "logging.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n')
    forensics.ingest([str(tmp_path / "logging.jsonl")], tmp_path / "st")
    found = {f.evidence.get("check"): f for f in hygiene.find(Context.from_run(open_store(tmp_path / "st")))}
    assert found["event_missing"].evidence["records"] == 2


def test_every_rank_reporting_one_timeout_is_not_a_flood() -> None:
    rows = Rows()
    for r in range(64):
        rows.add(100.0, r, "NCCL_TIMEOUT", level="ERROR")
        rows.add(50.0, r, "GRAD_NORM", level="WARN")
    assert "error_flood" not in checks(rows)


def _random_rows(seed: int) -> Rows:
    """Varied metric and level lines: ties of time within a rank, null times and events, ranks
    interleaved, some console lines."""
    import random

    rng = random.Random(seed)
    rows = Rows()
    for _ in range(rng.randint(0, 300)):
        rank = rng.randint(0, 5)
        t = float(rng.randint(0, 60)) * rng.choice([0.2, 1.0, 3.0])
        kind = rng.random()
        if kind < 0.5:
            r = rows.add(t, rank, "GPU_STATS", **{rng.choice(hygiene.RESOURCE): rng.uniform(0, 100)})
        else:
            r = rows.add(t, rank, rng.choice(["GRAD_NORM", "NCCL_TIMEOUT", None]), level=rng.choice(["WARN", "ERROR", "INFO"]))
        if rng.random() < 0.05:
            r["timestamp"] = None
        if rng.random() < 0.1:
            r["format"] = "console"
    return rows


def test_sampling_per_rank_equals_unique_then_sort_of_the_whole_table() -> None:
    import polars as pl

    has = pl.any_horizontal([pl.col(c).is_not_null() for c in hygiene.RESOURCE])
    nonempty = 0
    for seed in range(40):
        rows = _random_rows(seed)
        if not rows.rows:
            continue
        ctx = rows.ctx()
        want = (ctx.telemetry.lazy().filter(has).select("rank", "timestamp").unique().sort("rank", "timestamp")
                .group_by("rank", maintain_order=True)
                .agg(pl.len().alias("n"),
                     (pl.col("timestamp").diff().dt.total_microseconds() / 1e6).median().alias("interval_s"),
                     pl.col("timestamp").first())
                .collect())
        got = hygiene._sampling(ctx).collect()
        assert got.equals(want), seed
        nonempty += not got.is_empty()
    assert nonempty > 30


def test_first_line_of_a_level_group_equals_the_first_in_the_full_aggregation() -> None:
    import polars as pl

    for seed in range(40):
        rows = _random_rows(seed)
        if not rows.rows:
            continue
        ctx = rows.ctx()
        want = (ctx.events.filter(pl.col("level").is_in(["ERROR", "WARN"]) & (pl.col("format") == "jsonl"))
                .group_by("level", "event")
                .agg(pl.len().alias("n"), pl.col("rank").n_unique().alias("ranks"), pl.col("source_file").first(),
                     pl.col("line").first(), pl.col("rank").first(), pl.col("timestamp").first())
                .sort("level", "event").collect())
        levels = hygiene._levels(ctx).collect().sort("level", "event")
        assert hygiene._first_of(ctx, levels).equals(want), seed
        assert hygiene._first_of(ctx, levels.tail(2)).equals(want.tail(2)), seed
