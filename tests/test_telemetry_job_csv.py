"""A training job's own GPU telemetry CSV, written beside its logs: samples of the rank it names.

A job that logs its GPUs itself writes a CSV of its own naming — a time column, the rank and host,
temperature, utilisation, clocks, power, with or without unit suffixes in the names or units in
the values — not nvidia-smi's query names. It is telemetry: its rows become GPU_STATS of the rank
the row names (rank_source "record"), its header is that file's, not a rankless event, and a hot,
clocked-down rank in it is the thermal root cause of its slower steps. The files here are ours.
"""
from __future__ import annotations

import io
import json

import polars as pl

from forensics.ingest.formats import ReaderContext, sniff
from forensics.ingest.telemetry import read_nvidia_smi

HEAD_A = "timestamp,rank,host,gpu_temp_c,gpu_util_pct,sm_clock_mhz,power_w,mem_used_mb"
HEAD_B = "time,hostname,global_rank,temperature,utilization,clocks_graphics,power_draw"


def _read(text: str) -> pl.DataFrame:
    ctx = ReaderContext(path="/logs/gpu_stats_rank3.csv", rank_hint=None, host_hint=None)
    blocks = list(read_nvidia_smi("/logs/gpu_stats_rank3.csv", io.BytesIO(text.encode()), ctx))
    assert all(b.rejects.height == 0 for b in blocks)
    return pl.concat([b.events for b in blocks], how="diagonal_relaxed")


def test_a_job_telemetry_header_is_sniffed_as_telemetry() -> None:
    assert sniff((HEAD_A + "\n2026-12-06T10:00:00.000Z,3,node-a,61.0,95,1410,250.1,1800\n").encode(), "x.csv") == "nvidia_smi"
    assert sniff((HEAD_B + "\n").encode(), "x.csv") == "nvidia_smi"
    # console text with commas, or a CSV of other things, stays what it was
    assert sniff(b"epoch 1, step 2, loss 0.31\n", "x.log") == "console"
    assert sniff(b"timestamp,rank,loss,lr\n", "x.csv") != "nvidia_smi"


def test_rows_are_samples_of_the_rank_they_name_and_the_header_is_that_files() -> None:
    ev = _read(HEAD_A + "\n" + "\n".join(
        f"2026-12-06T10:00:0{i}.000Z,3,node-a,{60 + i}.5,95,{1410 - 100 * i},250.1,1800" for i in range(3)) + "\n")
    stats = ev.filter(pl.col("event") == "GPU_STATS")
    assert stats.height == 3
    assert stats["rank"].to_list() == [3, 3, 3] and set(stats["rank_source"].cast(pl.String)) == {"record"}
    assert stats["temp_c"].to_list() == [60.5, 61.5, 62.5] and stats["sm_clock_mhz"].to_list() == [1410, 1310, 1210]
    assert stats["gpu_util"].to_list() == [95, 95, 95] and stats["host"].to_list() == ["node-a"] * 3
    assert stats["timestamp"].null_count() == 0
    head = ev.filter(pl.col("event") == "TELEMETRY_HEADER")
    assert head["rank"].to_list() == [3]


def test_units_in_values_and_other_names() -> None:
    ev = _read(HEAD_B + "\n2026/12/06 10:00:00.250,node-b,5,88 C,97 %,810 MHz,171.20 W\n")
    s = ev.filter(pl.col("event") == "GPU_STATS").row(0, named=True)
    assert (s["rank"], s["host"], s["temp_c"], s["gpu_util"], s["sm_clock_mhz"], s["power_w"]) == (5, "node-b", 88, 97, 810, 171.2)


def test_a_rank_per_row_file_keeps_each_rows_rank_and_a_header_of_none() -> None:
    ev = _read(HEAD_A + "\n2026-12-06T10:00:00.000Z,0,node-a,61,95,1410,250,1800\n"
               "2026-12-06T10:00:00.000Z,1,node-a,62,95,1410,250,1800\n")
    assert ev.filter(pl.col("event") == "GPU_STATS")["rank"].to_list() == [0, 1]
    assert ev.filter(pl.col("event") == "TELEMETRY_HEADER")["rank"].to_list() == [None]


def _job(tmp_path, hot: int | None) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    for r in range(4):
        with open(tmp_path / f"rank_{r}.jsonl", "w") as log, open(tmp_path / f"gpu_stats_rank{r}.csv", "w") as tel:
            tel.write(HEAD_A + "\n")
            for s in range(24):
                slow = r == hot and s >= 4
                t = 10 + s * 0.2
                log.write(json.dumps({"timestamp": f"2026-12-06T10:00:{t:06.3f}Z", "rank": r, "level": "INFO",
                                      "event": "TRAIN_STEP", "extra": {"step": s, "loss": 2.3 - s * 0.01,
                                      "step_time_ms": 200 if hot is not None and s >= 4 else 170,
                                      "compute_ms": 185 if slow else 150, "comm_ms": 15 if slow else 20 + (30 if hot is not None and s >= 4 else 0),
                                      "wait_ms": 2 if slow else (32 if hot is not None and s >= 4 else 2)}}) + "\n")
                temp, clk = (91.0, 760) if slow else (60.0 + (s % 3), 1410)
                tel.write(f"2026-12-06T10:00:{t:06.3f}Z,{r},node-a,{temp},96,{clk},250.0,1800\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def test_a_hot_clocked_down_rank_in_the_jobs_telemetry_is_the_thermal_root_cause(tmp_path) -> None:
    rc = _job(tmp_path, hot=2)["root_cause"]
    assert rc is not None and rc["kind"] == "thermal_throttling" and rc["ranks"] == [2], rc


def test_cool_telemetry_is_no_finding(tmp_path) -> None:
    rep = _job(tmp_path, hot=None)
    assert rep["root_cause"] is None, rep["root_cause"]
