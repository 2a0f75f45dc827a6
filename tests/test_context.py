"""forensics.passes.context: the step table every pass aggregates from, built by one lazy query."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl

import forensics
from forensics import timeline as tl
from forensics.passes import context as C
from forensics.passes import diagnose
from forensics.store import open_store

REPO = Path(__file__).resolve().parents[1]


def _store(tmp_path: Path, scenario: str):
    forensics.ingest([str(REPO / "sample_logs" / scenario)], tmp_path / "run.forensics")
    return open_store(tmp_path / "run.forensics")


def test_steps_are_sorted_and_carry_what_the_passes_cite(tmp_path: Path) -> None:
    run = _store(tmp_path, "data_load_skew")
    st = C.Context.from_run(run).steps
    assert st.columns == [*C.STEP_COLUMNS, "wait_est", "clock_offset_ms"]
    assert st.select(pl.struct("rank", "step").is_sorted()).item()
    assert st.select(pl.struct("rank", "step").is_unique().all()).item()
    # every step row of a rank that logged its data load cites that line, in that rank's file
    loads = (run.events().filter(pl.col("event") == "DATA_LOAD_TIME")
             .group_by("rank", "step").agg(pl.col("line").min().alias("data_line"), pl.col("source_file").first())
             .collect())
    got = st.select("rank", "step", "data_line", pl.col("file").cast(pl.String).alias("source_file"))
    assert loads.join(got, on=["rank", "step"], how="anti").height == 0
    assert loads.join(got, on=["rank", "step", "data_line", "source_file"], how="anti").height == 0


def test_steps_in_rank_slices_are_the_same_table(tmp_path: Path, monkeypatch) -> None:
    run = _store(tmp_path, "straggler")
    whole = C.Context.from_run(run).steps
    report = diagnose(run).to_json()
    monkeypatch.setattr(tl.steptable, "SLICE_EVENTS", 50)      # a slice per rank or two
    assert len(tl.rank_slices(run)) >= 3
    assert C.Context.from_run(run).steps.equals(whole)
    assert diagnose(run).to_json() == report


def test_the_step_query_reads_only_the_columns_it_needs(tmp_path: Path) -> None:
    """Projection pushdown into scan_parquet: the step table never reads message, extra, fields
    (the widest columns) or any metric it does not aggregate."""
    run = _store(tmp_path, "thermal_throttling")
    needed = {"rank", "step", "host", "timestamp", "event", "step_time_ms", "data_load_ms", "comm_ms", "wait_ms",
              "loss", "samples_per_s", "grad_ready_ts", "source_file", "line", "disk_read_mbps",
              # explicit compute (timeline.op_compute): typed columns, never extra
              "compute_ms", "fwd_ms", "bwd_ms", "duration_s"}
    q = tl.step_rows(run.events(), evidence=True).select(C.STEP_COLUMNS).with_columns(C._wait_estimate())
    projected = [int(n) for n in re.findall(r"PROJECT (\d+)/\d+ COLUMNS", q.explain())]
    assert projected == [len(needed)]


def test_rank_major_sorts_only_what_is_out_of_order() -> None:
    """The passes' per-rank episodes need (rank, step) order: a table in that order is returned as
    it is (no copy), any other is sorted."""
    df = pl.DataFrame({"rank": [0, 0, 1, 2], "step": [3, 4, 1, 0], "x": [1, 2, 3, 4]})
    assert C.rank_major(df) is df
    shuffled = df.sort("step")
    assert C.rank_major(shuffled).equals(df)
    assert C.step_peers(None, "dgroup") == ["step"]


def test_telemetry_is_every_ranked_metric_event_in_store_order() -> None:
    """Context.telemetry, read once for thermal, hot_gpu, utilization and hygiene: the ranked
    events with any GPU metric, in the order of the events (the passes' first/last citations
    depend on it), nothing else."""
    ev = pl.DataFrame({
        "rank": [1, 0, None, 1, 0, 2],
        "event": ["GPU_STATS", "TRAIN_STEP", "GPU_STATS", "GPU_STATS", "GPU_STATS", "THROTTLE"],
        "gpu_util": [90.0, None, 50.0, None, 80.0, None],
        "temp_c": [None, None, 70.0, 71.0, None, None],
        "throttle_reasons": [None, None, None, None, None, 64],
        "source_file": ["r1", "r0", "x", "r1", "r0", "r2"], "line": [1, 1, 1, 2, 2, 1],
    })
    tel = C.Context.from_frame(ev).telemetry
    assert tel.columns == ["rank", "timestamp", *C.TELEMETRY_COLUMNS, "source_file", "line"]
    assert tel.select("rank", "source_file", "line").rows() == [(1, "r1", 1), (1, "r1", 2), (0, "r0", 2), (2, "r2", 1)]


def test_gaps_of_ordered_groups_are_the_windowed_ones(tmp_path: Path) -> None:
    """A summary in (rank, step) order is finished with a plain shift instead of a per-rank
    window: the same step table, derived step times included (a step with no logged time,
    the first step of each rank, a gap in a rank's steps)."""
    from forensics.summaries import step_groups

    run = _store(tmp_path, "hang")
    g = step_groups(run).filter(~((pl.col("rank") == 1) & (pl.col("step") == 5)))    # a gap in rank 1's steps
    g = g.with_columns(pl.when(pl.col("step") % 3 == 0).then(None).otherwise(pl.col("step_time_logged"))
                       .alias("step_time_logged"))                                  # derived step times
    windowed = tl.steps.finish_groups(g.lazy(), evidence=True).collect()
    shifted = tl.steps.finish_groups(g.lazy(), evidence=True, ordered=True).collect()
    assert windowed.equals(shifted)
    assert shifted.get_column("step_time_source").to_list().count("derived") > 0


def test_finished_summary_is_the_collected_and_sorted_query(tmp_path: Path) -> None:
    """timeline.steps.finish_collected (the summary's ranked rows copied once, finished in place)
    gives the table of the straightforward way (the query collected, then sorted), in one chunk
    per column: random groups in many chunks, rows without a rank or a step anywhere, gaps,
    derived step times, in (rank, step) order or shuffled."""
    import numpy as np

    from forensics.summaries import step_groups

    base = step_groups(_store(tmp_path, "straggler"))
    cols = [c for c in C.STEP_COLUMNS if c != "wait_est"]
    for seed in range(6):
        rng = np.random.default_rng(seed)
        n = base.height
        g = base.filter(pl.Series(rng.random(n) > 0.2))    # gaps
        k = g.height
        g = g.with_columns(pl.when(pl.Series(rng.random(k) < 0.3)).then(None).otherwise(pl.col("step_time_logged"))
                           .alias("step_time_logged"),
                           pl.when(pl.Series(rng.random(k) < 0.05)).then(None).otherwise(pl.col("rank")).alias("rank"),
                           pl.when(pl.Series(rng.random(k) < 0.05)).then(None).otherwise(pl.col("step")).alias("step"))
        if seed % 2:
            g = g.sample(fraction=1.0, shuffle=True, seed=seed)
        cuts = sorted(rng.choice(np.arange(1, k), 5, replace=False).tolist())
        chunked = pl.concat([g.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, k])], rechunk=False)
        assert max(chunked.n_chunks("all")) > 1
        want = tl.collect_sorted(tl.steps.finish_groups(g.lazy(), evidence=True).select(cols), ["rank", "step"])
        got = tl.steps.finish_collected(chunked, cols, evidence=True)
        assert got.equals(want), seed
        assert got.schema == want.schema
        assert got.n_chunks("all") == [1] * len(cols)
    empty = tl.steps.finish_collected(base.clear(), cols, evidence=True)
    assert empty.is_empty() and empty.columns == cols


# --- the shared per-step groups and episodes, checked against the straightforward windows ------

def _random_steps(seed: int, ranks: int = 7, steps: int = 60) -> pl.DataFrame:
    """A rank-major step table with gaps (ranks missing steps), nulls, ties and a group column."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = [(r, s) for r in range(ranks) for s in range(steps) if rng.random() > 0.15]
    n = len(rows)
    x = rng.integers(0, 8, n).astype(float) * 1.5 + rng.random(n) * (rng.random(n) < 0.5)   # ties and not
    x[rng.random(n) < 0.1] = np.nan
    return pl.DataFrame({
        "rank": [r for r, _ in rows], "step": [s for _, s in rows],
        "x": x, "y": rng.normal(100.0, 30.0, n),
        "group": rng.choice(["a", "b", None], n).tolist(),
        "flag": (rng.random(n) < 0.7).tolist(),
    }).with_columns(pl.col("x").fill_nan(None),
                    pl.when(pl.int_range(pl.len()) % 11 == 3).then(None).otherwise(pl.col("flag")).alias("flag"))


def test_peer_groups_give_what_a_window_over_the_step_gives() -> None:
    for seed in range(8):
        df = _random_steps(seed)
        for group in (None, "group"):
            by = ["step"] if group is None else ["step", group]
            peers = C.PeerGroups(df["step"], df[group] if group else None)
            aggs = lambda: [pl.col("x").median().alias("med"), pl.col("x").min().alias("lo"),  # noqa: E731
                            pl.col("y").max().alias("hi"), pl.len().alias("n"), pl.col("x").count().alias("c"),
                            pl.col("y").first().alias("first")]
            want = df.with_columns(*(a.over(by) for a in aggs()))
            got = peers.over(df, *aggs())
            assert got.equals(want), (seed, group)
            # sums in the table's order: bit-equal to the window's
            sums = peers.agg_in_order(df, pl.col("y").sum().alias("s"), pl.col("x").mean().alias("m"))
            got = df.with_columns(*peers.broadcast(sums))
            assert got.equals(df.with_columns(pl.col("y").sum().over(by).alias("s"), pl.col("x").mean().over(by).alias("m")))


def test_peer_groups_step_is_each_groups_first_step() -> None:
    """PeerGroups.step (taken while the groups are made) is what `agg` of the step's first value
    gives: by step and by step and group, rows in any order, null steps and groups."""
    for seed in range(8):
        df = _random_steps(seed).sample(fraction=1.0, shuffle=seed % 2 == 1, seed=seed)
        df = df.with_columns(pl.when(pl.int_range(pl.len()) % (seed + 3) == 1).then(None).otherwise("step").alias("step"))
        for group in (None, "group"):
            peers = C.PeerGroups(df["step"], df[group] if group else None)
            assert peers.step.equals(peers.agg(df, pl.col("step").first()).get_column("step")), (seed, group)


def test_peer_groups_of_the_context_follow_its_step_table() -> None:
    df = _random_steps(3).select("rank", "step", "x")
    st = C.PeerGroups(df["step"])
    per = st.agg(df, pl.col("step").first(), pl.col("x").median())
    assert per.equals(df.group_by("step").agg(pl.col("x").median()).sort("step"))


def test_median_without_nulls_is_polars_median() -> None:
    """context.median (nulls dropped first, polars' fast path) gives polars' own median: per
    rank (sorted key), hashed per step, per step group (PeerGroups), over a whole column; with
    nulls, NaNs, ties, groups of only nulls, single rows and an expression."""
    import numpy as np

    for seed in range(8):
        df = _random_steps(seed)
        rng = np.random.default_rng(seed)
        nan = pl.Series(rng.random(df.height) < 0.05)
        df = df.with_columns(pl.when(nan).then(float("nan")).otherwise(pl.col("y")).alias("y"),
                             pl.when(pl.col("rank") == 2).then(None).otherwise(pl.col("x")).alias("x"))
        def exprs(m):  # type: ignore[no-untyped-def]
            return [m("x").alias("mx"), m("y").alias("my"), m(pl.col("x") / pl.col("y")).alias("mr")]

        def plain(c):  # type: ignore[no-untyped-def]
            return (pl.col(c) if isinstance(c, str) else c).median()

        by_rank = df.with_columns(pl.col("rank").set_sorted())
        assert by_rank.group_by("rank").agg(*exprs(C.median)).equals(by_rank.group_by("rank").agg(*exprs(plain)))
        assert (df.group_by("step", maintain_order=True).agg(*exprs(C.median))
                .equals(df.group_by("step", maintain_order=True).agg(*exprs(plain))))
        peers = C.PeerGroups(df["step"], df["group"])
        assert peers.agg(df, *exprs(C.median)).equals(peers.agg(df, *exprs(plain)))
        assert df.select(*exprs(C.median)).equals(df.select(*exprs(plain)))


def _sustained_windowed(flag: str, window: int, by: str | None) -> pl.Expr:
    """context.sustained as it was written first: a rolling mean of the flag within each group."""
    f = pl.col(flag).cast(pl.Float64)
    back = f.rolling_mean(window, min_samples=window)
    fwd = f.reverse().rolling_mean(window, min_samples=window).reverse()
    e = pl.col(flag).fill_null(False) & ((back >= C.SUSTAIN_SHARE) | (fwd >= C.SUSTAIN_SHARE)).fill_null(False)
    return e.over(by) if by else e


def test_sustained_over_the_whole_column_is_the_per_group_window() -> None:
    for seed in range(8):
        df = _random_steps(seed).sort("rank", "step")
        for window in (1, 2, 5, 7, 20):
            for by in ("rank", None):
                got = df.select(C.sustained("flag", window, by=by)).to_series()
                want = df.select(_sustained_windowed("flag", window, by)).to_series()
                assert got.equals(want), (seed, window, by)
        # a group key with nulls (rows of one null group together)
        g = df.with_columns(pl.when(pl.col("rank") == 0).then(None).otherwise(pl.col("rank")).alias("k"))
        assert g.select(C.sustained("flag", 5, by="k")).to_series().equals(
            g.select(_sustained_windowed("flag", 5, "k")).to_series())


def test_keep_copies_nothing_when_every_row_stays() -> None:
    df = _random_steps(1)
    assert C.keep(df, pl.col("rank") >= 0) is df
    assert C.keep(df, pl.col("x").is_not_null()).equals(df.filter(pl.col("x").is_not_null()))


def test_aligned_since_keeps_the_rows_of_the_aligned_filter() -> None:
    """`aligned_since` filters the logged times first, by a bound moved by the largest shift: the
    same rows as aligning every row and keeping ts_aligned >= since, with hosts whose clocks run
    behind (their rows move forward past the bound) or ahead, a sub-microsecond offset that
    rounds, and rows without a host (no offset)."""
    import datetime as dt

    t0 = dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    rows = []
    for i in range(-400, 400):
        for host in ("behind", "ahead", "odd", None):
            rows.append({"rank": 0, "host": host, "timestamp": t0 + dt.timedelta(microseconds=997 * i), "line": i})
    ctx = C.Context.from_frame(pl.DataFrame(rows))
    ctx.__dict__["clock_offsets"] = pl.DataFrame(
        {"clock": ["ahead", "behind", "odd"], "offset_ms": [40.0, -120.0, 7.0005],
         "samples": [9, 9, 9], "spread_ms": [0.0, 0.0, 0.0]})
    for since in (t0, t0 - dt.timedelta(milliseconds=100), t0 + dt.timedelta(microseconds=6999),
                  t0 + dt.timedelta(milliseconds=250)):
        want = ctx.aligned(ctx.events).filter(pl.col("ts_aligned") >= since).collect()
        got = ctx.aligned_since(ctx.events, since).collect()
        assert want.height > 0 and got.equals(want), since
        # rows of the clock behind moved past the bound: a filter of the logged times alone loses them
        assert want.filter(pl.col("timestamp") < since).height > 0
