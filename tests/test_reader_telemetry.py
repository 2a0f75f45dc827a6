"""Telemetry readers: nvidia-smi CSV and DCGM (exporter text, CSV, dmon) -> GPU_STATS."""
from __future__ import annotations

import io
import json
import pathlib

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import schema
from forensics.ingest import formats
from forensics.ingest.formats import ReaderContext, sniff
from forensics.ingest.telemetry import THROTTLE_BITS, norm_key, read_dcgm, read_nvidia_smi

REAL = pathlib.Path(__file__).resolve().parents[2] / "shared" / "realdata"


def _read(reader, data: bytes | str, **ctx_kw) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    if isinstance(data, str):
        data = data.encode()
    kw = {"rank_hint": None, "host_hint": None, **ctx_kw}
    ctx = ReaderContext(path="/logs/gpu.csv", **kw)
    blocks = list(reader("/logs/gpu.csv", io.BytesIO(data), ctx))
    for b in blocks:
        assert b.lines == b.events.height + b.rejects.height
        schema.conform(b.events)
    ev = pl.concat([b.events for b in blocks], how="diagonal_relaxed")
    rej = pl.concat([b.rejects for b in blocks])
    n = sum(b.lines for b in blocks)
    assert n == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return ev, rej, n


def _stats(ev: pl.DataFrame) -> pl.DataFrame:
    return ev.filter(pl.col("event") == "GPU_STATS")


def test_registered_and_sniffed():
    assert formats.reader_for("nvidia_smi") is read_nvidia_smi
    assert formats.reader_for("dcgm") is read_dcgm
    assert sniff(b"timestamp, index, temperature.gpu, utilization.gpu [%]\n", "x.csv") == "nvidia_smi"
    assert sniff(b'# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n', "m.txt") == "dcgm"


def test_real_nvidia_smi_finds_the_hot_gpu():
    p = REAL / "telemetry" / "nvidia_smi_8gpu.csv"
    if not p.exists():
        pytest.skip("realdata absent")
    ev, rej, n = _read(read_nvidia_smi, p.read_bytes())
    assert rej.height == 0 and ev.height == n
    stats = _stats(ev)
    assert stats.height == n - 1 and stats["timestamp"].null_count() == 0
    assert set(stats["local_rank"].unique().to_list()) == set(range(8))
    # no gpu_map given: nobody claims a rank
    assert stats["rank"].null_count() == stats.height and (stats["rank_source"] == "none").all()
    per_gpu = stats.group_by("local_rank").agg(pl.col("temp_c").mean().alias("t")).sort("t", descending=True)
    hot, runner_up = per_gpu.row(0, named=True), per_gpu.row(1, named=True)
    assert hot["local_rank"] == 1
    assert hot["t"] - runner_up["t"] > 5.0
    # against the raw file: first sample of GPU 1
    raw = p.read_text().splitlines()[2].split(",")
    first = stats.filter(pl.col("local_rank") == 1).row(0, named=True)
    assert (first["temp_c"], first["power_w"], first["gpu_util"]) == (float(raw[2]), float(raw[4]), float(raw[3]))


def test_nvidia_smi_with_units_na_and_throttle_hex():
    text = (
        "timestamp, name, index, temperature.gpu, utilization.gpu [%], memory.used [MiB], power.draw [W], "
        "clocks.sm [MHz], clocks_event_reasons.active\n"
        "2024/01/15 10:23:45.123, NVIDIA H100 80GB HBM3, 0, 45, 98 %, 40500 MiB, 650.10 W, 1980 MHz, 0x0000000000000000\n"
        "2024/01/15 10:23:45.123, NVIDIA H100 80GB HBM3, 1, 91, 97 %, 40510 MiB, [N/A], 1410 MHz, 0x0000000000000040\n"
    )
    ev, rej, n = _read(read_nvidia_smi, text, host_hint="node3")
    hdr = ev.row(0, named=True)
    assert hdr["event"] == "TELEMETRY_HEADER" and json.loads(hdr["extra"])["columns"]["clocks.sm [MHz]"] == "sm_clock_mhz"
    s = _stats(ev).sort("local_rank")
    assert s["temp_c"].to_list() == [45.0, 91.0] and s["gpu_util"].to_list() == [98.0, 97.0]
    assert s["mem_alloc_mb"].to_list() == [40500.0, 40510.0] and s["power_w"].to_list() == [650.1, None]
    assert s["sm_clock_mhz"].to_list() == [1980.0, 1410.0]
    assert s["throttle_reasons"].to_list() == [0, THROTTLE_BITS["hw_thermal_slowdown"]]
    assert s["level"].to_list() == ["INFO", "WARN"]
    assert s["host"].to_list() == ["node3", "node3"]
    assert str(s["timestamp"][0]) == "2024-01-15 10:23:45.123000+00:00"
    assert json.loads(s["extra"][0])["name"] == "NVIDIA H100 80GB HBM3"


def test_throttle_flag_columns_make_a_bitmask():
    text = (
        "index,clocks_throttle_reasons.hw_slowdown,clocks_throttle_reasons.sw_thermal_slowdown,"
        "clocks_throttle_reasons.hw_thermal_slowdown\n"
        "0,Not Active,Not Active,Not Active\n"
        "1,Active,Active,Active\n"
        "2,Not Active,Active,Not Active\n"
    )
    s = _stats(_read(read_nvidia_smi, text)[0]).sort("local_rank")
    assert s["throttle_reasons"].to_list() == [0, 0x8 | 0x20 | 0x40, 0x20]


def test_restarted_logger_repeats_or_changes_the_header():
    text = (
        "timestamp,index,temperature.gpu\n"
        "2024-01-01T00:00:00Z,0,40\n"
        "timestamp,index,temperature.gpu\n"
        "2024-01-01T00:00:05Z,0,41\n"
        "index,power.draw [W],temperature.gpu\n"
        "0,300.5,42\n"
    )
    ev, rej, n = _read(read_nvidia_smi, text)
    hdr = ev.filter(pl.col("event") == "TELEMETRY_HEADER")
    assert hdr["line"].to_list() == [1, 3, 5]
    assert [json.loads(x).get("restart") for x in hdr["extra"]] == [None, True, True]
    s = _stats(ev)
    assert s["temp_c"].to_list() == [40.0, 41.0, 42.0] and s["power_w"].to_list() == [None, None, 300.5]


def test_bad_rows_are_rejected_with_a_reason():
    text = "0,45\n\nindex,temperature.gpu\n1,50\n2,51,extra\n3,"
    ev, rej, n = _read(read_nvidia_smi, text)
    assert dict(zip(rej["line"].to_list(), rej["reason"].to_list())) == {
        1: "data before any header", 2: "blank line", 5: "expected 2 fields, found 3"}
    s = _stats(ev)
    assert s["local_rank"].to_list() == [1, 3] and s["temp_c"].to_list() == [50.0, None]


def test_lost_gpu_is_an_error_sample():
    text = "index,temperature.gpu,utilization.gpu\n0,[GPU is lost],[GPU is lost]\n"
    s = _stats(_read(read_nvidia_smi, text)[0]).row(0, named=True)
    assert s["level"] == "ERROR" and json.loads(s["extra"])["errors"]["temperature.gpu"] == "GPU is lost"


def test_gpu_map_gives_ranks_and_local_rank_is_kept():
    text = "hostname,index,temperature.gpu\nnodeA,0,40\nnodeA,1,41\nnodeB,0,42\n"
    s = _stats(_read(read_nvidia_smi, text, gpu_map={("nodeA", 0): 0, ("nodeA", 1): 1, ("nodeB", 0): 8})[0])
    assert s["rank"].to_list() == [0, 1, 8] and (s["rank_source"] == "gpu_map").all()
    assert s["local_rank"].to_list() == [0, 1, 0] and s["host"].to_list() == ["nodeA", "nodeA", "nodeB"]
    s = _stats(_read(read_nvidia_smi, text, gpu_map={(None, 1): 5})[0])
    assert s["rank"].to_list() == [None, 5, None] and s["rank_source"].to_list() == ["none", "gpu_map", "none"]


def test_dcgm_exporter_text():
    text = (
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-aaa",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="h1"} 65\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-bbb",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="h1"} 88\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="1",Hostname="h1"} 1095\n'
        'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="1",Hostname="h1"} 64\n'
        'DCGM_FI_DEV_FB_USED{gpu="1",Hostname="h1"} 70123\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",Hostname="h1"} 79 1705312225000\n'
        'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",Hostname="h1"} 2500000000\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h1"} 66\n'
    )
    ev, rej, n = _read(read_dcgm, text, gpu_map={("h1", 1): 1})
    assert rej["reason"].to_list() == ["comment line", "comment line"]
    g1 = ev.filter(pl.col("local_rank") == 1)
    assert g1.filter(pl.col("temp_c").is_not_null())["temp_c"].to_list() == [88.0]
    assert g1["sm_clock_mhz"].drop_nulls().to_list() == [1095.0]
    assert g1["throttle_reasons"].drop_nulls().to_list() == [64] and "WARN" in g1["level"].to_list()
    assert g1["mem_alloc_mb"].drop_nulls().to_list() == [70123.0]
    assert (g1["rank"] == 1).all() and (g1["host"] == "h1").all()
    xid = ev.filter(pl.col("event") == "GPU_XID").row(0, named=True)
    assert json.loads(xid["extra"])["xid"] == 79 and str(xid["timestamp"]) == "2024-01-15 09:50:25+00:00"
    assert ev.filter(pl.col("local_rank") == 0)["pcie_mbps"].drop_nulls().to_list() == [2500.0]
    scrapes = [json.loads(x)["scrape"] for x in ev.filter(pl.col("temp_c").is_not_null())["extra"]]
    assert scrapes == [0, 0, 1]  # the GPU 0 temperature series repeats: a second scrape


def test_dcgm_csv_and_dmon_table():
    csv = ("timestamp,gpu,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_GPU_UTIL,DCGM_FI_DEV_XID_ERRORS\n"
           "2024-05-01T10:00:00Z,3,71,402.5,99,0\n2024-05-01T10:00:01Z,3,72,401.0,98,48\n")
    ev = _read(read_dcgm, csv)[0]
    s = _stats(ev).row(0, named=True)
    assert (s["local_rank"], s["temp_c"], s["power_w"], s["gpu_util"], s["level"]) == (3, 71.0, 402.5, 99.0, "INFO")
    x = ev.filter(pl.col("event") == "GPU_XID").row(0, named=True)
    assert (x["level"], json.loads(x["extra"])["xid"], x["temp_c"]) == ("ERROR", 48, 72.0)
    dmon = "#Entity   TMPTR  POWER  GPUTL  SMCLK\nID        C      W      %      MHZ\nGPU 0     45     68.9   0      1410\nGPU 1     N/A    70.2   12     1410\n"
    ev, rej, n = _read(read_dcgm, dmon)
    assert ev["event"].to_list()[:2] == ["TELEMETRY_HEADER", "TELEMETRY_HEADER"] and rej.height == 0
    s = _stats(ev)
    assert s["local_rank"].to_list() == [0, 1] and s["temp_c"].to_list() == [45.0, None]
    assert s["power_w"].to_list() == [68.9, 70.2] and s["sm_clock_mhz"].to_list() == [1410.0, 1410.0]


_COLUMNS = {
    "temperature.gpu": ("temp_c", "71"),
    "utilization.gpu [%]": ("gpu_util", "88 %"),
    "memory.used [MiB]": ("mem_alloc_mb", "1234 MiB"),
    "power.draw [W]": ("power_w", "250.50 W"),
    "clocks.sm [MHz]": ("sm_clock_mhz", "1500 MHz"),
    "clocks_throttle_reasons.active": ("throttle_reasons", "0x0000000000000020"),
}


@given(st.permutations(list(_COLUMNS)), st.integers(1, len(_COLUMNS)), st.integers(0, 15))
@settings(max_examples=80, deadline=None)
def test_property_any_column_subset_and_order(order, k, gpu):
    cols = order[:k]
    header = "index, " + ", ".join(cols)
    row = f"{gpu}, " + ", ".join(_COLUMNS[c][1] for c in cols)
    s = _stats(_read(read_nvidia_smi, header + "\n" + row + "\n")[0]).row(0, named=True)
    assert s["local_rank"] == gpu
    expect = {"temp_c": 71.0, "gpu_util": 88.0, "mem_alloc_mb": 1234.0, "power_w": 250.5, "sm_clock_mhz": 1500.0,
              "throttle_reasons": 0x20}
    for c in cols:
        canon = _COLUMNS[c][0]
        assert s[canon] == expect[canon]


def test_norm_key():
    assert norm_key(" utilization.gpu [%]") == "utilization_gpu"
    assert norm_key("clocks_event_reasons.active") == "clocks_event_reasons_active"
    assert norm_key("temperature_C") == "temperature_c"
