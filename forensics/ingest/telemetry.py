"""Telemetry readers: nvidia-smi CSV logs and DCGM (exporter text, CSV, `dcgmi dmon`) -> GPU_STATS.

Owns: header recognition (any column subset and order, with or without units, `[N/A]`
values, restarted loggers that repeat or change the header mid-file), unit handling, the
throttle bitmask, and mapping a GPU to a rank. Must not aggregate samples, judge them (rules do
that), or guess a rank.

Rank attribution (decided here, on purpose):
- `local_rank` is always the GPU index the record names (nvidia-smi `index`, DCGM `gpu` label).
- `rank` comes from a rank column of the record itself (a training job's own telemetry CSV,
  `timestamp,rank,host,gpu_temp_c,...`: rank_source "record"), else only from
  ctx.gpu_map[(host, gpu)] (or [(None, gpu)]), with rank_source "gpu_map". Without either the
  rank is null and rank_source "none": an nvidia-smi / DCGM file covers one host, but nothing in
  it says which ranks ran there (GPU index == rank only on a one-node job whose launcher placed
  rank i on GPU i). Passes join telemetry to ranks on (host, local_rank). A header line takes
  the rank its block's rows all share (a per-rank file's header is that rank's, not a rankless
  event).
- `host` is the record's host column / DCGM `Hostname` label, else ctx.host_hint.

Events: GPU_STATS (one per CSV/table row; one per exporter sample line, which carries one
metric, with extra.metric naming it), TELEMETRY_HEADER (each header line; extra.restart marks
a header that re-appears after data: the logger restarted), GPU_XID (DCGM XID counter > 0).
A sample whose throttle bitmask has a hardware/thermal slowdown bit is WARN; a value such as
`[GPU is lost]` is kept in extra.errors and makes the sample ERROR. Rejects: blank lines,
comment lines (`# HELP`/`# TYPE`), data before any header, rows with the wrong field count,
lines that are not samples.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterator

import orjson
import polars as pl

from ..schema import Level, RankSource
from .formats import ReaderContext
from .jsonl import Block, rejects_frame
from .normalize import parse_timestamp
from .sources import iter_chunks

# NVML clock event (throttle) reasons, the same bits in DCGM (nvml.h / dcgm_fields.h).
THROTTLE_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
# Reasons that cost performance without the user asking for it.
SLOWDOWN_MASK = 0x8 | 0x20 | 0x40 | 0x80

# Columns of a table read (the first ones): nvidia-smi's query fields and DCGM's are a few dozen
# per table; a 4,000-column header took 61 s and 4 GB (the per-column expressions of one select),
# 20,000 columns more than 120 s. The header event says how many were not read.
MAX_COLUMNS = 256

_TS_KEYS = {"timestamp", "time", "ts", "date", "datetime", "time_stamp"}
_INDEX_KEYS = {"index", "gpu_index", "gpu", "gpu_id", "gpu_idx", "device_index", "gpu_num", "idx", "gpuid"}
_HOST_KEYS = {"host", "hostname", "node", "host_name", "nodename"}
_RANK_KEYS = {"rank", "global_rank", "world_rank", "grank"}
# unit suffixes a header key may carry (`gpu_temp_c`, `gpu_util_pct`): dropped when the key is not known as written
_UNIT_SUFFIX = re.compile(r"_(?:c|celsius|pct|percent|mhz|w|watts|mib|mb)$")
# normalized header key -> (canonical column, factor)
_METRIC_KEYS: dict[str, tuple[str, float]] = {}
for _names, _col, _f in [
    (("temperature_gpu", "temperature_c", "temp_c", "temp", "gpu_temp", "temperature", "gpu_temperature",
      "dcgm_fi_dev_gpu_temp", "tmptr"), "temp_c", 1.0),
    (("utilization_gpu", "utilization_gpu_percent", "gpu_util", "util", "gpu_utilization", "utilization",
      "dcgm_fi_dev_gpu_util", "gputl"), "gpu_util", 1.0),
    (("memory_used", "memory_used_mib", "memory_used_mb", "mem_used_mb", "mem_used", "fb_used",
      "dcgm_fi_dev_fb_used", "fbusd", "mem_alloc_mb", "gpu_memory_mb"), "mem_alloc_mb", 1.0),
    (("power_draw", "power_w", "power_draw_w", "power", "power_draw_instant", "power_draw_average",
      "power_usage", "dcgm_fi_dev_power_usage", "pwr"), "power_w", 1.0),
    (("clocks_sm", "clocks_current_sm", "sm_clock", "sm_clock_mhz", "clocks_sm_mhz", "clock_sm",
      "dcgm_fi_dev_sm_clock", "smclk", "clocks_gr", "clocks_graphics", "clocks_current_graphics",
      "graphics_clock"), "sm_clock_mhz", 1.0),
    (("pcie_mbps", "pcie_bw_mbps"), "pcie_mbps", 1.0),
    (("nvlink_mbps", "nvlink_bw_mbps"), "nvlink_mbps", 1.0),
]:
    for _n in _names:
        _METRIC_KEYS[_n] = (_col, _f)
_THROTTLE_HEX_KEYS = {
    "clocks_event_reasons_active", "clocks_throttle_reasons_active", "clock_throttle_reasons",
    "clocks_event_reasons", "throttle_reasons", "dcgm_fi_dev_clock_throttle_reasons",
    "dcgm_fi_dev_clocks_event_reasons",
}
_THROTTLE_FLAG = re.compile(r"^clocks?_(?:throttle|event)_reasons_(\w+)$")
# Byte-rate counters summed per direction into one throughput column (bytes/s -> MB/s, 1e6).
_RATE_KEYS: dict[str, str] = {
    "dcgm_fi_prof_pcie_tx_bytes": "pcie_mbps", "dcgm_fi_prof_pcie_rx_bytes": "pcie_mbps",
    "pcitx": "pcie_mbps", "pcirx": "pcie_mbps",
    "dcgm_fi_prof_nvlink_tx_bytes": "nvlink_mbps", "dcgm_fi_prof_nvlink_rx_bytes": "nvlink_mbps",
    "nvltx": "nvlink_mbps", "nvlrx": "nvlink_mbps",
}
_XID_KEYS = {"dcgm_fi_dev_xid_errors", "xid_errors", "xid"}

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(?:%|MiB|MB|W|MHz|C|KiB|KB/s|MB/s)?\s*$")
_STATUS = re.compile(r"^\s*+(?:\[\s*+)?(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost|"
                     r"GPU requires reset|Requires Pstate[^\]]*+|No data)\s*+(?:\]\s*+)?$", re.I)
_PROM = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'(?<!\w)(\w++)="((?:[^"\\]++|\\.)*+)"')
_UNIT = re.compile(r"(?<!\s)\s*+\[([^\[\]]*+)\]\s*+$")



def norm_key(header_field: str) -> str:
    """`utilization.gpu [%]` -> `utilization_gpu`; ` clocks.sm [MHz]` -> `clocks_sm`."""
    name = _UNIT.sub("", header_field.strip()).strip().lower()
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_")


@dataclass
class _Col:
    raw: str                 # header text as written
    key: str                 # normalized
    kind: str                # ts | index | host | metric | throttle_hex | throttle_flag | rate | xid | extra
    target: str = ""         # canonical column, flag name, or extra key
    factor: float = 1.0


def _known_key(key: str) -> str:
    """The key as written when it is known, else without its unit suffix when that is."""
    if key in _METRIC_KEYS or key in _TS_KEYS or key in _INDEX_KEYS:
        return key
    bare = _UNIT_SUFFIX.sub("", key)
    return bare if bare in _METRIC_KEYS else key


def _classify(raw: str) -> _Col:
    key = _known_key(norm_key(raw))
    if key in _RANK_KEYS:
        return _Col(raw, key, "rank")
    if key in _TS_KEYS:
        return _Col(raw, key, "ts")
    if key in _INDEX_KEYS:
        return _Col(raw, key, "index")
    if key in _HOST_KEYS:
        return _Col(raw, key, "host")
    if key in _METRIC_KEYS:
        col, f = _METRIC_KEYS[key]
        return _Col(raw, key, "metric", col, f)
    if key in _THROTTLE_HEX_KEYS:
        return _Col(raw, key, "throttle_hex", "throttle_reasons")
    m = _THROTTLE_FLAG.match(key)
    if m and m.group(1) in THROTTLE_BITS:
        return _Col(raw, key, "throttle_flag", m.group(1))
    if key in _RATE_KEYS:
        return _Col(raw, key, "rate", _RATE_KEYS[key], 1e-6)
    if key in _XID_KEYS:
        return _Col(raw, key, "xid", "xid")
    return _Col(raw, key, "extra", key or raw.strip())


def _is_known(key: str) -> bool:
    key = _known_key(key)
    return (key in _TS_KEYS or key in _INDEX_KEYS or key in _HOST_KEYS or key in _METRIC_KEYS
            or key in _THROTTLE_HEX_KEYS or key in _RATE_KEYS or bool(_THROTTLE_FLAG.match(key))
            or key.startswith("dcgm_fi_") or key in ("name", "uuid", "pci_bus_id", "driver_version", "pstate"))


def looks_like_header(line: str) -> bool:
    """A CSV line whose fields are names, not values: no numeric field and a known column."""
    fields = line.split(",")
    if len(fields) < 2:
        return False
    if any(_NUMBER.match(f) for f in fields):
        return False
    return any(_is_known(norm_key(f)) for f in fields)


# ---------------------------------------------------------------------------------------------
# Row collection (shared by every telemetry shape)
# ---------------------------------------------------------------------------------------------
@dataclass
class _Rows:
    line: list[int] = field(default_factory=list)
    event: list[str] = field(default_factory=list)
    level: list[str] = field(default_factory=list)
    message: list[str | None] = field(default_factory=list)
    ts: list[str | None] = field(default_factory=list)
    host: list[str | None] = field(default_factory=list)
    gpu: list[int | None] = field(default_factory=list)
    metrics: dict[str, dict[int, Any]] = field(default_factory=dict)    # column -> {row: value}
    extra: list[dict[str, Any] | None] = field(default_factory=list)
    rejects: list[tuple[int, str, bytes]] = field(default_factory=list)

    def add(self, line: int, event: str, level: str = "INFO", message: str | None = None, ts: str | None = None,
            host: str | None = None, gpu: int | None = None, extra: dict[str, Any] | None = None,
            **metrics: Any) -> None:
        i = len(self.line)
        self.line.append(line)
        self.event.append(event)
        self.level.append(level)
        self.message.append(message)
        self.ts.append(ts)
        self.host.append(host)
        self.gpu.append(gpu)
        self.extra.append(extra or None)
        for k, v in metrics.items():
            if v is not None:
                self.metrics.setdefault(k, {})[i] = v

    def reject(self, line: int, reason: str, raw: str) -> None:
        self.rejects.append((line, reason, raw.encode("utf-8", errors="replace")))

    def __len__(self) -> int:
        return len(self.line) + len(self.rejects)


def _with_ranks(events: pl.DataFrame, ctx: ReaderContext) -> pl.DataFrame:
    """rank and rank_source: the record's own rank column ("record"), else ctx.gpu_map; null/"none"
    where both are silent. A header row takes the one rank its block's rows share."""
    own = events["_rank"] if "_rank" in events.columns else None
    if own is not None:
        events = events.drop("_rank")
        ranks = own.drop_nulls().unique()
        if ranks.len() == 1:
            own = own.fill_null(ranks[0])
    events = _gpu_map_ranks(events, ctx)
    if own is None or own.null_count() == own.len():
        return events
    return events.with_columns(
        pl.when(own.is_not_null()).then(pl.lit("record")).otherwise(pl.col("rank_source")).cast(RankSource).alias("rank_source"),
        pl.coalesce(own, pl.col("rank")).alias("rank"))


def _gpu_map_ranks(events: pl.DataFrame, ctx: ReaderContext) -> pl.DataFrame:
    """rank and rank_source from ctx.gpu_map; null/"none" where the map is silent."""
    if not ctx.gpu_map or events.height == 0:
        return events.with_columns(
            pl.lit(None, dtype=pl.Int32).alias("rank"), pl.lit("none").cast(RankSource).alias("rank_source"))
    by_host = pl.DataFrame(
        {"host": [h for h, _ in ctx.gpu_map], "local_rank": [g for _, g in ctx.gpu_map], "_r": list(ctx.gpu_map.values())},
        schema={"host": pl.String, "local_rank": pl.Int32, "_r": pl.Int32},
    )
    any_host = by_host.filter(pl.col("host").is_null()).select("local_rank", pl.col("_r").alias("_r0"))
    out = (
        events.join(by_host.filter(pl.col("host").is_not_null()), on=["host", "local_rank"], how="left")
        .join(any_host, on="local_rank", how="left")
        .with_columns(pl.coalesce("_r", "_r0").alias("rank"))
    )
    return out.with_columns(
        pl.when(pl.col("rank").is_not_null()).then(pl.lit("gpu_map")).otherwise(pl.lit("none")).cast(RankSource).alias("rank_source")
    ).drop("_r", "_r0")


def _rows_frame(rows: _Rows) -> pl.DataFrame:
    n = len(rows.line)
    cols: dict[str, pl.Series] = {
        "line": pl.Series("line", rows.line, dtype=pl.Int64),
        "host": pl.Series("host", rows.host, dtype=pl.String),
        "local_rank": pl.Series("local_rank", rows.gpu, dtype=pl.Int32),
        "level": pl.Series("level", rows.level, dtype=pl.String).cast(Level),
        "event": pl.Series("event", rows.event, dtype=pl.String),
        "message": pl.Series("message", rows.message, dtype=pl.String),
        "extra": pl.Series("extra", [orjson.dumps(x).decode() if x else None for x in rows.extra], dtype=pl.String),
    }
    for name, vals in rows.metrics.items():
        dtype = pl.Int64 if name == "throttle_reasons" else pl.Float64
        col = [None] * n
        for i, v in vals.items():
            col[i] = v
        cols[name] = pl.Series(name, col, dtype=dtype, strict=False)
    ts = pl.DataFrame({"ts": rows.ts}, schema={"ts": pl.String})
    cols["timestamp"] = ts.select(parse_timestamp(pl.col("ts")).alias("timestamp")).to_series()
    return pl.DataFrame(cols)


def _block(rows: _Rows, frames: list[pl.DataFrame], table_rejects: list[tuple[int, str, bytes]],
           ctx: ReaderContext, n_lines: int) -> Block:
    parts = [f for f in [_rows_frame(rows), *frames] if f.height]
    events = pl.concat(parts, how="diagonal_relaxed").sort("line") if parts else _rows_frame(rows)
    events = _with_ranks(events, ctx)
    rej = sorted(rows.rejects + table_rejects)
    rejects = rejects_frame([(r[0], r[1], r[2], len(r[2])) for r in rej])
    assert events.height + rejects.height == n_lines, (events.height, rejects.height, n_lines)
    return Block(events, rejects, n_lines)


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------
def _value(text: str) -> tuple[float | None, str | None]:
    """(number, status) of one cell: `45 %` -> (45, None); `[GPU is lost]` -> (None, 'GPU is lost')."""
    m = _NUMBER.match(text)
    if m:
        return float(m.group(1)), None
    s = _STATUS.match(text)
    if s:
        status = s.group(1)
        return None, None if status.upper() in _QUIET_STATUS else status
    return None, None


_QUIET_STATUS = ("N/A", "NOT SUPPORTED", "NO DATA")
_NUMBER_VEC = r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(?:%|MiB|MB|W|MHz|C|KiB|KB/s|MB/s)?\s*$"
_STATUS_VEC = (r"(?i)^\s*\[?\s*(N/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost|"
               r"GPU requires reset|Requires Pstate[^\]]*|No data)\s*\]?\s*$")


def _num_expr(cell: pl.Expr) -> pl.Expr:
    return cell.str.extract(_NUMBER_VEC, 1).cast(pl.Float64, strict=False)


def _status_expr(cell: pl.Expr) -> pl.Expr:
    st_ = cell.str.extract(_STATUS_VEC, 1)
    return pl.when(st_.str.to_uppercase().is_in(list(_QUIET_STATUS))).then(None).otherwise(st_)


class _Table:
    """A header-described table: its data rows become GPU_STATS, parsed a run of rows at a time."""

    def __init__(self, cols: list[_Col]) -> None:
        self.cols = cols

    def frame(self, lines: list[str], nos: list[int], ctx: ReaderContext) -> tuple[pl.DataFrame, list[tuple[int, str, bytes]]]:
        """Comma-separated data rows (numbered `nos`) -> (GPU_STATS frame, rejected rows)."""
        k = len(self.cols)
        df = pl.DataFrame({"raw": lines, "line": nos}, schema={"raw": pl.String, "line": pl.Int64})
        df = df.with_columns(pl.col("raw").str.split(",").alias("f"))
        df = df.with_columns(pl.col("f").list.len().alias("nf"))
        bad = df.filter(pl.col("nf") != k)
        rejects = [(no, f"expected {k} fields, found {nf}", (raw + "\n").encode("utf-8", errors="replace"))
                   for raw, no, nf in bad.select("raw", "line", "nf").iter_rows()]
        good = df.filter(pl.col("nf") == k)
        cell = {j: pl.col("f").list.get(j).str.strip_chars() for j in range(min(k, MAX_COLUMNS))}
        exprs: list[pl.Expr] = [pl.col("line")]
        metrics: dict[str, list[pl.Expr]] = {}
        rates: dict[str, list[pl.Expr]] = {}
        flags: list[pl.Expr] = []
        status_cols: list[tuple[str, pl.Expr]] = []
        extra_cols: list[tuple[str, pl.Expr, pl.Expr]] = []     # (key, value as text, is it a number)
        ts = host = gpu = xid = throttle = rank = None
        for j, c in enumerate(self.cols[:MAX_COLUMNS]):
            v = cell[j]
            if c.kind == "ts":
                ts = v.str.replace(r"^(\d{4})/(\d\d)/(\d\d)", "${1}-${2}-${3}")
            elif c.kind == "index":
                gpu = _num_expr(v).cast(pl.Int32, strict=False)
            elif c.kind == "host":
                host = pl.when(v == "").then(None).otherwise(v)
            elif c.kind == "rank":
                rank = _num_expr(v).cast(pl.Int32, strict=False)
            elif c.kind == "metric":
                metrics.setdefault(c.target, []).append(_num_expr(v) * c.factor)
                status_cols.append((c.raw.strip(), _status_expr(v)))
            elif c.kind == "throttle_hex":
                hexed = v.str.to_lowercase().str.starts_with("0x")
                throttle = pl.when(hexed).then(v.str.slice(2).str.to_integer(base=16, strict=False)).otherwise(
                    v.str.to_integer(base=10, strict=False))
            elif c.kind == "throttle_flag":
                low = v.str.to_lowercase()
                flags.append(pl.when(low == "active").then(THROTTLE_BITS[c.target])
                             .when(low == "not active").then(0).otherwise(None).cast(pl.Int64))
            elif c.kind == "rate":
                rates.setdefault(c.target, []).append(_num_expr(v) * c.factor)
            elif c.kind == "xid":
                xid = _num_expr(v).cast(pl.Int64, strict=False)
            else:
                num = _num_expr(v)
                text = pl.when(v.is_in(["", "N/A", "[N/A]"])).then(None).otherwise(v)
                extra_cols.append((c.target, pl.when(num.is_not_null()).then(num.cast(pl.String)).otherwise(text),
                                   num.is_not_null()))
                status_cols.append((c.raw.strip(), _status_expr(v)))
        for name, es in metrics.items():
            exprs.append((pl.coalesce(es) if len(es) > 1 else es[0]).alias(name))
        for name, es in rates.items():
            exprs.append(pl.when(pl.any_horizontal([e.is_not_null() for e in es]))
                         .then(pl.sum_horizontal(es)).otherwise(None).alias(name))
        if throttle is None and flags:
            # distinct bits: their sum is their OR
            throttle = pl.when(pl.any_horizontal([f.is_not_null() for f in flags])).then(pl.sum_horizontal(flags))
        if throttle is not None:
            exprs.append(throttle.cast(pl.Int64).alias("throttle_reasons"))
        exprs.append((ts if ts is not None else pl.lit(None, dtype=pl.String)).alias("_ts"))
        exprs.append((host if host is not None else pl.lit(None, dtype=pl.String)).fill_null(pl.lit(ctx.host_hint, dtype=pl.String)).alias("host"))
        exprs.append((gpu if gpu is not None else pl.lit(None, dtype=pl.Int32)).alias("local_rank"))
        if xid is not None:
            exprs.append(xid.alias("_xid"))
        if rank is not None:
            exprs.append(rank.alias("_rank"))
        for i, (name, e) in enumerate(status_cols):
            exprs.append(e.alias(f"_st{i}"))
        for i, (name, e, isnum) in enumerate(extra_cols):
            exprs.append(e.alias(f"_x{i}"))
            exprs.append(isnum.alias(f"_xn{i}"))
        out = good.select(exprs)

        # extra (JSON) only for the columns that are not canonical; a per-row dict, built once
        n = out.height
        extra: list[dict[str, Any]] = [{} for _ in range(n)]
        for i, (name, _e, _n) in enumerate(extra_cols):
            vals, isnum = out[f"_x{i}"].to_list(), out[f"_xn{i}"].to_list()
            for r, (val, num) in enumerate(zip(vals, isnum)):
                if val is not None:
                    extra[r][name] = float(val) if num else val
        errors_any = pl.lit(False)
        for i, (name, _e) in enumerate(status_cols):
            col = out[f"_st{i}"]
            if col.null_count() < n:
                for r, val in enumerate(col.to_list()):
                    if val is not None:
                        extra[r].setdefault("errors", {})[name] = val
            errors_any = errors_any | pl.col(f"_st{i}").is_not_null()
        if xid is not None:
            for r, val in enumerate(out["_xid"].to_list()):
                if val:
                    extra[r]["xid"] = val
        level = pl.when(errors_any).then(pl.lit("ERROR"))
        if xid is not None:
            level = level.when(pl.col("_xid").fill_null(0) > 0).then(pl.lit("ERROR"))
        if "throttle_reasons" in out.columns:
            level = level.when((pl.col("throttle_reasons").fill_null(0) & SLOWDOWN_MASK) != 0).then(pl.lit("WARN"))
        event = pl.lit("GPU_STATS")
        if xid is not None:
            event = pl.when(pl.col("_xid").fill_null(0) > 0).then(pl.lit("GPU_XID")).otherwise(event)
        frame = out.with_columns(
            level.otherwise(pl.lit("INFO")).cast(Level).alias("level"),
            event.alias("event"),
            parse_timestamp(pl.col("_ts")).alias("timestamp"),
            pl.Series("extra", [orjson.dumps(x).decode() if x else None for x in extra], dtype=pl.String),
        )
        frame = frame.drop([c for c in frame.columns if c.startswith("_") and c != "_rank"])
        return frame, rejects


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------
class _State:
    def __init__(self) -> None:
        self.table: _Table | None = None
        self.seen_data = False
        self.dmon_pending_units = False
        self.run_lines: list[str] = []
        self.run_nos: list[int] = []


def _flush(state: _State, frames: list[pl.DataFrame], rejects: list[tuple[int, str, bytes]], ctx: ReaderContext) -> None:
    if state.run_lines and state.table is not None:
        f, rj = state.table.frame(state.run_lines, state.run_nos, ctx)
        frames.append(f)
        rejects.extend(rj)
    state.run_lines, state.run_nos = [], []


def _header_event(line: str, no: int, rows: _Rows, state: _State, cols: list[_Col]) -> None:
    mapping = {c.raw.strip(): (c.target or c.kind) if c.kind not in ("ts", "index", "host", "rank") else c.kind for c in cols[:MAX_COLUMNS]}
    rows.add(no, "TELEMETRY_HEADER", "INFO", line, extra={"columns": mapping, "restart": state.seen_data or None,
                                                          "columns_not_read": max(len(cols) - MAX_COLUMNS, 0) or None})


def _csv_line(line: str, no: int, rows: _Rows, state: _State, frames: list[pl.DataFrame],
              rejects: list[tuple[int, str, bytes]], ctx: ReaderContext) -> None:
    if line[:1].isdigit() or not looks_like_header(line):
        if state.table is None:
            rows.reject(no, "data before any header", line + "\n")
            return
        state.run_lines.append(line)
        state.run_nos.append(no)
        state.seen_data = True
        return
    _flush(state, frames, rejects, ctx)
    cols = [_classify(f) for f in line.split(",")]
    _header_event(line, no, rows, state, cols)
    state.table = _Table(cols)


def _lines(stream: BinaryIO, ctx: ReaderContext) -> Iterator[tuple[list[str], int]]:
    line = ctx.first_line
    for chunk in iter_chunks(stream, ctx.block_bytes):
        text = chunk.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        yield lines, line
        line += len(lines)


def read_nvidia_smi(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    """`nvidia-smi --query-gpu=... --format=csv[,nounits]` logs (and CSVs shaped like them)."""
    state = _State()
    for lines, first in _lines(stream, ctx):
        rows, frames, rejects = _Rows(), [], []
        for i, raw in enumerate(lines):
            no = first + i
            line = raw.rstrip("\r")
            if not line.strip():
                rows.reject(no, "blank line", raw + "\n")
                continue
            _csv_line(line, no, rows, state, frames, rejects, ctx)
        _flush(state, frames, rejects, ctx)
        yield _block(rows, frames, rejects, ctx, len(lines))


_DMON_HEAD = re.compile(r"^#\s*Entity\b", re.I)
_DMON_ROW = re.compile(r"^\s*(GPU|GPU-I|GPU-CI|Switch|CPU|Core|Link)\s+(\d+)\s+(.*)$", re.I)


def read_dcgm(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    """DCGM exporter text (`DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 65`), DCGM CSV, dmon."""
    state = _State()
    dmon = False
    scrape = 0
    seen_keys: set[tuple[str, str | None, int | None]] = set()
    for lines, first in _lines(stream, ctx):
        rows, frames, rejects = _Rows(), [], []
        for i, raw in enumerate(lines):
            no = first + i
            line = raw.rstrip("\r")
            s = line.strip()
            if not s:
                rows.reject(no, "blank line", raw + "\n")
                continue
            if _DMON_HEAD.match(s):
                _flush(state, frames, rejects, ctx)
                names = s.lstrip("#").split()[1:]     # the first column is the entity
                cols = [_Col("gpu", "gpu", "index"), _Col("entity", "entity", "extra", "entity")] + [_classify(n) for n in names]
                _header_event(line, no, rows, state, cols[2:])
                state.table, state.dmon_pending_units, dmon = _Table(cols), True, True
                continue
            if s.startswith("#"):
                rows.reject(no, "comment line", raw + "\n")
                continue
            if state.dmon_pending_units and s.split()[0].upper() == "ID":
                rows.add(no, "TELEMETRY_HEADER", "INFO", line, extra={"units": s.split()[1:]})
                state.dmon_pending_units = False
                continue
            m = _DMON_ROW.match(line) if dmon else None
            if m and state.table is not None:
                is_gpu = m.group(1).upper() == "GPU"
                entity = "" if is_gpu else f"{m.group(1)} {m.group(2)}"
                state.run_lines.append(",".join([m.group(2) if is_gpu else "", entity, *m.group(3).split()]))
                state.run_nos.append(no)
                state.seen_data = True
                continue
            pm = _PROM.match(s)
            if pm and "," not in s.split("{")[0]:
                name, labels_txt, value, ts_ms = pm.groups()
                labels = dict(_LABEL.findall(labels_txt or ""))
                gpu_txt = labels.get("gpu")
                gpu = int(gpu_txt) if gpu_txt and gpu_txt.isascii() and gpu_txt.isdigit() and len(gpu_txt) < 10 else None
                host = labels.get("Hostname") or labels.get("hostname") or labels.get("instance")
                key = (name, host, gpu)
                if key in seen_keys:     # the same series again: a new scrape began
                    scrape += 1
                    seen_keys.clear()
                seen_keys.add(key)
                _prom_sample(no, name, labels, value, ts_ms, gpu, host or ctx.host_hint, scrape, rows)
                continue
            if "," in s:
                dmon = False
                _csv_line(line, no, rows, state, frames, rejects, ctx)
                continue
            rows.reject(no, "not a DCGM sample", raw + "\n")
        _flush(state, frames, rejects, ctx)
        yield _block(rows, frames, rejects, ctx, len(lines))


def _prom_sample(no: int, name: str, labels: dict[str, str], value: str, ts_ms: str | None, gpu: int | None,
                 host: str | None, scrape: int, rows: _Rows) -> None:
    key = name.lower()
    # exporter <2.0 used dcgm_gpu_temp-style names
    if key.startswith("dcgm_") and not key.startswith("dcgm_fi_"):
        key = "dcgm_fi_dev_" + key[5:]
    num, _ = _value(value)
    extra: dict[str, Any] = {"metric": name, "scrape": scrape}
    for k in ("UUID", "modelName", "device", "pci_bus_id", "DCGM_FI_DRIVER_VERSION", "container", "pod", "namespace"):
        if labels.get(k):
            extra[k] = labels[k]
    ts = str(int(ts_ms)) if ts_ms else None     # exposition timestamps are epoch milliseconds
    c = _classify(key)
    metrics: dict[str, Any] = {}
    event, level = "GPU_STATS", "INFO"
    if c.kind == "metric" and num is not None:
        metrics[c.target] = num * c.factor
    elif c.kind == "throttle_hex" and num is not None:
        metrics["throttle_reasons"] = int(num)
        if int(num) & SLOWDOWN_MASK:
            level = "WARN"
    elif c.kind == "rate" and num is not None:
        metrics[c.target] = num * c.factor
    elif c.kind == "xid":
        extra["xid"] = int(num) if num is not None else None
        if num:
            event, level = "GPU_XID", "ERROR"
    else:
        extra["value"] = num if num is not None else value
    rows.add(no, event, level, None, ts, host, gpu, extra, **metrics)


read = read_nvidia_smi
