"""forensics.query: the `events` filter and SQL over events / rejects / ranks."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest

import forensics
from forensics.errors import BAD_ARGUMENT, BAD_QUERY, ForensicsError
from forensics.query import filter_events, sql
from forensics.store import open_store
from test_timeline import T0, ingest


def test_filter_by_rank_event_level_in_time_order(tmp_path: Path) -> None:
    warn = {"t": 1.0, "level": "WARN", "event": "GRAD_NORM", "message": "grad_norm=45.6 exceeds threshold=10.0", "extra": {}}
    err = {"t": 2.0, "level": "ERROR", "event": "NCCL_TIMEOUT", "message": "rank=1 waiting on rank=2 for 1800s",
           "extra": {"collective": "allreduce"}}
    run, _ = ingest(tmp_path, ranks=3, steps=4, extra={1: [warn, err]})
    one = filter_events(run, ranks=[1]).collect()
    assert one["rank"].unique().to_list() == [1] and one["timestamp"].is_sorted()
    assert one.height == run.events().filter(pl.col("rank") == 1).select(pl.len()).collect().item()
    assert filter_events(run, event="DATA_LOAD_TIME").collect().height == 12
    assert filter_events(run, event="DATA_LOAD_TIME,TRAIN_STEP", ranks=[0]).collect().height == 8
    assert filter_events(run, event=["NCCL_*"]).collect()["event"].to_list() == ["NCCL_TIMEOUT"]
    assert filter_events(run, level="warn").collect()["level"].cast(pl.String).to_list() == ["WARN", "ERROR"]
    assert filter_events(run, level="ERROR").collect().height == 1
    with pytest.raises(ForensicsError) as e:
        filter_events(run, level="LOUD")
    assert e.value.code == BAD_ARGUMENT


def test_filter_by_time_grep_and_limit(tmp_path: Path) -> None:
    run, _ = ingest(tmp_path, ranks=2, steps=6, per_host=1)
    t0, t1 = T0 + dt.timedelta(seconds=1), T0 + dt.timedelta(seconds=2)
    df = filter_events(run, since=t0, until=t1).collect()
    assert df.height and df["timestamp"].min() >= t0 and df["timestamp"].max() <= t1
    # specs as on the command line
    end = run.events().select(pl.col("timestamp").max()).collect().item()
    assert filter_events(run, since="-0.1s").collect()["timestamp"].min() >= end - dt.timedelta(seconds=0.1)
    s3 = filter_events(run, since="step:3").collect()
    assert s3["step"].drop_nulls().min() == 3
    # grep: case-insensitive, literal, in message or in the raw extra object
    assert filter_events(run, grep="STEP=2 LOSS").collect()["event"].to_list() == ["TRAIN_STEP", "TRAIN_STEP"]
    assert filter_events(run, grep='"disk_read_mbps"').collect()["event"].unique().to_list() == ["DATA_LOAD_TIME"]
    assert filter_events(run, grep="a.c").collect().height == 0      # not a regex
    first = filter_events(run, limit=5).collect()
    assert first.height == 5 and first["timestamp"].to_list() == filter_events(run).collect()["timestamp"].head(5).to_list()


def test_rank_and_time_filters_reach_the_parquet_scan(tmp_path: Path) -> None:
    """`events --rank N --since T` must read only what is needed: the predicate goes into the
    scan, where Parquet statistics skip other ranks' parts and row groups."""
    run, _ = ingest(tmp_path, ranks=2, steps=2, per_host=1)
    plan = filter_events(run, ranks=[1], since="-10s").explain()
    scan = plan[plan.index("SCAN"):]
    assert "SELECTION" in scan and 'col("rank")' in scan.split("SELECTION", 1)[1]
    assert 'col("timestamp")' in scan.split("SELECTION", 1)[1]


def test_sql_over_events_rejects_and_ranks(tmp_path: Path) -> None:
    d = tmp_path / "raw"
    d.mkdir()
    good = [{"timestamp": f"2025-06-12T14:00:0{s}Z", "rank": r, "level": "INFO", "event": "TRAIN_STEP",
             "message": f"step={s}", "extra": {"step_time_ms": 1000.0 + r}} for r in range(2) for s in range(3)]
    (d / "rank_0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in good if x["rank"] == 0) + "\x00\x01\x02\x03 not json\n")
    (d / "rank_1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in good if x["rank"] == 1))
    forensics.ingest([str(d)], tmp_path / "st")
    run = open_store(tmp_path / "st")
    df = sql(run, "SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank")
    assert df.to_dict(as_series=False) == {"rank": [0, 1], "n": [3, 3]}
    rj = sql(run, "SELECT line, reason FROM rejects")
    assert rj["line"].to_list() == [4]
    ranks = sql(run, "SELECT rank, last_step, step_ms FROM ranks ORDER BY rank")
    assert ranks["step_ms"].to_list() == [1000.0, 1001.0]
    for bad in ("SELECT nope FROM events", "SELEKT 1", "SELECT * FROM nowhere"):
        with pytest.raises(ForensicsError) as e:
            sql(run, bad)
        assert e.value.code == BAD_QUERY and e.value.reason


@pytest.fixture
def small_store(tmp_path: Path):
    d = tmp_path / "raw"
    d.mkdir()
    rows = [{"timestamp": f"2025-06-12T14:00:0{s}Z", "rank": r, "level": "INFO", "event": "TRAIN_STEP",
             "message": f"step={s}", "extra": {"step_time_ms": 1000.0 + r, "node": {"gpu": f"g{r}"}}}
            for r in range(2) for s in range(3)]
    (d / "rank_0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    forensics.ingest([str(d)], tmp_path / "st")
    return open_store(tmp_path / "st"), tmp_path


def test_sql_names_columns_as_duckdb_and_reads_json_in_extra(small_store) -> None:
    run, _ = small_store
    df = sql(run, "SELECT rank, count(*) FROM events GROUP BY rank ORDER BY rank")
    assert df.columns == ["rank", "count_star()"]          # polars SQL called it `len`
    gpus = sql(run, "SELECT DISTINCT extra->>'$.node.gpu' AS gpu FROM events ORDER BY gpu")
    assert gpus["gpu"].to_list() == ["g0", "g1"]
    assert sql(run, "SELECT json_extract(extra, '$.step_time_ms')::DOUBLE AS t FROM events WHERE rank = 1 LIMIT 1")["t"].item() == 1001.0
    ts = sql(run, "SELECT max(timestamp) AS t FROM events")["t"]
    assert ts.dtype == pl.Datetime("us", "UTC") and ts.item() == dt.datetime(2025, 6, 12, 14, 0, 2, tzinfo=dt.timezone.utc)
    assert sql(run, "SELECT count(*) AS n FROM rejects")["n"].item() == 0   # an empty table is still a table


@pytest.mark.parametrize("query", [
    "SELECT * FROM read_csv('{secret}')",
    "SELECT * FROM read_text('{secret}')",
    "SELECT * FROM sniff_csv('{secret}')",
    "SELECT * FROM glob('{dir}/*')",
    "SELECT * FROM read_parquet('{other}')",
    "SELECT * FROM '{other}'",
    "COPY (SELECT * FROM events) TO '{dir}/leak.csv'",
    "ATTACH '{dir}/x.duckdb' AS x",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET allowed_paths = ['{secret}']",
])
def test_sql_sees_only_the_store(small_store, query: str) -> None:
    """A query reads the tables events, rejects, ranks and nothing else on the machine."""
    run, tmp = small_store
    secret = tmp / "secret.csv"
    secret.write_text("user,password\nroot,hunter2\n")
    other = next((run.path / "events").glob("*.parquet"))
    copy = tmp / "other.parquet"
    copy.write_bytes(other.read_bytes())
    with pytest.raises(ForensicsError) as e:
        sql(run, query.format(secret=secret, dir=tmp, other=copy))
    assert e.value.code == BAD_QUERY and "hunter2" not in str(e.value)
    assert not (tmp / "leak.csv").exists() and not (tmp / "x.duckdb").exists()


def test_events_without_a_time_are_listed_where_their_file_puts_them(tmp_path: Path) -> None:
    from test_timeline import iso, store_of

    t = lambda s: iso(T0 + dt.timedelta(seconds=s))  # noqa: E731
    step = lambda r, s: {"timestamp": t(s), "rank": r, "level": "INFO", "event": "TRAIN_STEP",  # noqa: E731
                         "message": f"step={s}", "extra": {"step": s}}
    run = store_of(tmp_path, {
        "rank_0.jsonl": [step(0, s) for s in range(4)],
        "rank_1.jsonl": [step(1, 0), {"rank": 1, "level": "ERROR", "event": "CUDA_ERROR", "message": "untimed",
                                      "extra": {}}, step(1, 3)],
    })
    df = filter_events(run).collect()
    order = list(zip(df["rank"].to_list(), df["event"].to_list()))
    # placed right after rank 1's line at T0, before rank 0's step 1 (it was listed last)
    assert order[:3] == [(0, "TRAIN_STEP"), (1, "TRAIN_STEP"), (1, "CUDA_ERROR")]
    assert "CUDA_ERROR" in filter_events(run, until=T0).collect()["event"].to_list()
    assert "CUDA_ERROR" not in filter_events(run, since=T0 + dt.timedelta(seconds=0.5)).collect()["event"].to_list()
