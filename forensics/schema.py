"""The canonical event table: column names, dtypes, levels and metric aliases.

Owns the contract every reader writes to and every query reads from. It must not read files:
readers map their input onto these names; `conform` fills the rest with typed nulls.

The logged timestamp is stored as `timestamp` (UTC) and never rewritten; derived times get new
names (`ts_aligned`, `t_rel`) in the code that derives them.
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

SCHEMA_VERSION = 4  # 2: event_source column; 3: compute_ms, fwd_ms, bwd_ms columns; 4: parts by rank range, part table, sources.parquet

LEVELS = ["DEBUG", "INFO", "WARN", "ERROR"]
Level = pl.Enum(LEVELS)

# How a reader learned the rank of an event; "none" means nobody knows (never silently rank 0).
# "mapped": a local rank turned global by a topology the log itself printed (torchrun's
# rendezvous result, DeepSpeed's global_rank_mapping, a single-node launch). Appended last: the
# compiled scanner writes the codes of the first five.
RANK_SOURCES = ["record", "path", "prefix", "gpu_map", "none", "mapped", "text"]
RankSource = pl.Enum(RANK_SOURCES)

# Whether the line named its event, or forensics named it (flat metric lines, console text).
EVENT_SOURCES = ["record", "inferred"]
EventSource = pl.Enum(EVENT_SOURCES)

LEVEL_ALIASES = {
    "DEBUG": "DEBUG", "TRACE": "DEBUG", "INFO": "INFO", "NOTICE": "INFO",
    "WARN": "WARN", "WARNING": "WARN",
    "ERROR": "ERROR", "ERR": "ERROR", "CRITICAL": "ERROR", "FATAL": "ERROR", "CRIT": "ERROR",
}


@dataclass(frozen=True)
class Metric:
    name: str
    dtype: pl.DataType
    aliases: tuple[str, ...] = ()
    unit: str = ""
    doc: str = ""


# Known metrics become typed columns. Units are part of the canonical name; aliases that carry
# another unit are converted in `ALIAS_SCALE`.
METRICS: list[Metric] = [
    Metric("step", pl.Int64(), ("global_step", "iteration", "iter"), "", "training step"),
    Metric("loss", pl.Float64(), ("train_loss", "lm_loss"), "", "training loss (raw)"),
    Metric("lr", pl.Float64(), ("learning_rate",), "", "learning rate"),
    Metric("step_time_ms", pl.Float64(), ("step_ms", "iter_time_ms", "elapsed_ms"), "ms", "wall time of one step"),
    Metric("samples_per_s", pl.Float64(), ("throughput", "samples_per_sec", "train_samples_per_second"), "1/s", "throughput"),
    Metric("tokens_per_s", pl.Float64(), ("tokens_per_sec",), "1/s", "token throughput"),
    Metric("data_load_ms", pl.Float64(), ("data_time_ms", "dataloader_ms", "data_ms"), "ms", "time to fetch the batch"),
    Metric("disk_read_mbps", pl.Float64(), ("disk_read_mb_s", "read_mbps"), "MB/s", "disk read rate"),
    Metric("disk_read_bytes", pl.Float64(), (), "B", "bytes read from disk (counter or interval)"),
    Metric("comm_ms", pl.Float64(), ("allreduce_ms", "collective_ms"), "ms", "time inside the collective"),
    Metric("wait_ms", pl.Float64(), ("comm_wait_ms",), "ms", "part of comm_ms spent waiting for peers"),
    Metric("tensor_size_mb", pl.Float64(), ("size_mb",), "MB", "payload of the collective"),
    Metric("gpu_util", pl.Float64(), ("utilization", "gpu_utilization", "util"), "%", "GPU utilisation"),
    Metric("mem_alloc_mb", pl.Float64(), ("mem_alloc", "gpu_memory_mb", "memory_mb", "mem_used_mb", "memory_used_mb"), "MB", "GPU memory allocated"),
    Metric("temp_c", pl.Float64(), ("temperature", "gpu_temp", "temp", "temperature_gpu"), "C", "GPU temperature"),
    Metric("sm_clock_mhz", pl.Float64(), ("sm_clock", "clocks_sm", "clock_sm_mhz"), "MHz", "SM clock"),
    Metric("power_w", pl.Float64(), ("power", "power_draw", "power_draw_w"), "W", "board power"),
    Metric("pcie_mbps", pl.Float64(), ("pcie_bw_mbps",), "MB/s", "PCIe throughput"),
    Metric("nvlink_mbps", pl.Float64(), ("nvlink_bw_mbps",), "MB/s", "NVLink throughput"),
    Metric("throttle_reasons", pl.Int64(), ("clocks_event_reasons", "clock_throttle_reasons"), "", "throttle bitmask (HW_THERMAL=0x40)"),
    Metric("grad_norm", pl.Float64(), ("gradient_norm", "grad_norm_total"), "", "global gradient norm"),
    Metric("grad_norm_adapter", pl.Float64(), ("adapter_grad_norm",), "", "gradient norm of adapter (LoRA) params"),
    Metric("grad_norm_backbone", pl.Float64(), ("backbone_grad_norm",), "", "gradient norm of frozen/backbone params"),
    Metric("threshold", pl.Float64(), ("grad_threshold", "clip_threshold"), "", "threshold the logger compared against"),
    Metric("grad_ready_ts", pl.Float64(), (), "s", "epoch seconds when local gradients were ready"),
    Metric("epoch", pl.Float64(), (), "", "epoch (fractional)"),
    Metric("duration_s", pl.Float64(), ("duration",), "s", "duration of a checkpoint or other span"),
    Metric("timeout_s", pl.Float64(), (), "s", "timeout the runtime waited for"),
    Metric("seq", pl.Int64(), ("seq_num", "seqnum", "collective_seq_id"), "", "collective sequence number"),
    Metric("peer_rank", pl.Int32(), ("waiting_on",), "", "rank this one waits on"),
    Metric("exit_code", pl.Int64(), ("exitcode",), "", "process exit code"),
    # explicit compute time (timeline.op_compute): beats step - data - comm where logged
    Metric("compute_ms", pl.Float64(), ("compute_time_ms", "fwd_bwd_ms"), "ms", "forward+backward(+optimizer) time of the step, or of one per-op event"),
    Metric("fwd_ms", pl.Float64(), ("forward_ms", "forward_time_ms"), "ms", "forward time"),
    Metric("bwd_ms", pl.Float64(), ("backward_ms", "backward_time_ms"), "ms", "backward time"),
]

# Known string fields (categorical in practice).
TEXT_FIELDS: list[Metric] = [
    Metric("collective", pl.String(), ("op", "op_type", "optype"), "", "collective operation"),
    Metric("stage", pl.String(), ("phase",), "", "training stage (warmup/stable)"),
    Metric("param_group", pl.String(), (), "", "parameter group"),
    Metric("process_group", pl.String(), ("pg", "pg_name"), "", "process group"),
    Metric("path", pl.String(), ("file",), "", "path named by the event (checkpoint, data shard)"),
]

# Aliases whose unit differs from the canonical column: value * factor.
ALIAS_SCALE: dict[str, tuple[str, float]] = {
    "step_time_s": ("step_time_ms", 1000.0),
    "data_load_s": ("data_load_ms", 1000.0),
    "data_time": ("data_load_ms", 1000.0),     # HF/Megatron report seconds under this name
    "comm_s": ("comm_ms", 1000.0),
    "wait_s": ("wait_ms", 1000.0),
    "mem_alloc_gb": ("mem_alloc_mb", 1024.0),
    "gpu_memory_gb": ("mem_alloc_mb", 1024.0),
    "mem_alloc_bytes": ("mem_alloc_mb", 1.0 / (1024 * 1024)),
    "disk_read_gbps": ("disk_read_mbps", 1000.0),
    "tensor_size_bytes": ("tensor_size_mb", 1.0 / (1024 * 1024)),
    "sm_clock_ghz": ("sm_clock_mhz", 1000.0),
    "timeout_ms": ("timeout_s", 1.0 / 1000.0),
    "duration_ms": ("duration_s", 1.0 / 1000.0),
    "dur_ms": ("duration_s", 1.0 / 1000.0),
}

FIELDS: dict[str, Metric] = {m.name: m for m in [*METRICS, *TEXT_FIELDS]}

# alias -> (canonical, factor)
ALIASES: dict[str, tuple[str, float]] = {}
for _m in [*METRICS, *TEXT_FIELDS]:
    ALIASES[_m.name] = (_m.name, 1.0)
    for _a in _m.aliases:
        ALIASES[_a] = (_m.name, 1.0)
ALIASES.update(ALIAS_SCALE)

# Record keys that are part of the envelope, not metrics.
ENVELOPE = ("timestamp", "rank", "host", "level", "event", "message", "extra")
ENVELOPE_ALIASES: dict[str, str] = {
    "timestamp": "timestamp", "time": "timestamp", "ts": "timestamp", "@timestamp": "timestamp",
    "datetime": "timestamp", "asctime": "timestamp",
    "rank": "rank", "global_rank": "rank", "RANK": "rank",
    "host": "host", "hostname": "host", "node": "host",
    "level": "level", "levelname": "level", "severity": "level",
    "event": "event", "event_id": "event", "evt": "event",
    "message": "message", "msg": "message",
    "extra": "extra",
}

# The table, in column order. `extra` keeps the record's `extra` object verbatim (all keys);
# `fields` keeps top-level keys that are neither envelope nor known metrics (JSON object).
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "timestamp": pl.Datetime("us", "UTC"),
    "rank": pl.Int32(),
    "rank_source": RankSource,
    "host": pl.String(),
    "local_rank": pl.Int32(),
    "level": Level,
    "event": pl.String(),
    "event_source": EventSource,
    "message": pl.String(),
    **{m.name: m.dtype for m in METRICS},
    **{m.name: m.dtype for m in TEXT_FIELDS},
    "extra": pl.String(),
    "fields": pl.String(),
    "source_file": pl.String(),
    "line": pl.Int64(),
    "format": pl.String(),
}

REJECT_SCHEMA: dict[str, pl.DataType] = {
    "source_file": pl.String(),
    "line": pl.Int64(),
    "reason": pl.String(),
    "raw": pl.Binary(),       # bounded: first RAW_LIMIT bytes
    "raw_len": pl.Int64(),    # full length of the rejected line
}
RAW_LIMIT = 4096

METRIC_NAMES = [m.name for m in METRICS]


def conform(df: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """Give a reader's frame exactly EVENT_SCHEMA: missing columns become typed nulls, extra
    columns are an error in the reader (they would be silently lost), order is fixed."""
    names = df.collect_schema().names() if isinstance(df, pl.LazyFrame) else df.columns
    unknown = set(names) - set(EVENT_SCHEMA)
    if unknown:
        raise ValueError(f"reader produced columns outside the schema: {sorted(unknown)}")
    return df.select(
        [
            (pl.col(c) if c in names else pl.lit(None)).cast(t, strict=False).alias(c)
            for c, t in EVENT_SCHEMA.items()
        ]
    )


def normalize_level() -> pl.Expr:
    """Map free-form level strings (warning, Err, CRITICAL) onto LEVELS; unknown -> INFO."""
    up = pl.col("level").cast(pl.String).str.strip_chars().str.to_uppercase()
    return up.replace_strict(LEVEL_ALIASES, default="INFO", return_dtype=pl.String).cast(Level)


_ARROW: dict[str, object] = {}


def arrow_schema(table: str = "events"):
    """EVENT_SCHEMA ("events"), REJECT_SCHEMA ("rejects") or KERNEL_STORE_SCHEMA ("kernels") as
    the Arrow schema polars writes (the store's Parquet schema; enums keep their values in the
    field metadata)."""
    if table not in _ARROW:
        schema = {"events": EVENT_SCHEMA, "rejects": REJECT_SCHEMA, "kernels": KERNEL_STORE_SCHEMA}[table]
        _ARROW[table] = pl.DataFrame(schema=schema).to_arrow().schema
    return _ARROW[table]


def empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=EVENT_SCHEMA)


def empty_rejects() -> pl.DataFrame:
    return pl.DataFrame(schema=REJECT_SCHEMA)


_ENVELOPE_DOCS = {
    "timestamp": "when the line says it happened, UTC (null when the line has none: order by `line`)",
    "rank": "global rank (null when nobody knows; never guessed as 0)",
    "rank_source": "where `rank` came from: record, path, prefix, gpu_map, mapped (a local rank through the topology the log printed), text (a tag at the start of the line's own text: \"(rank 3/8) \", \"RANK=2 \") or none",
    "host": "host name from the record or the path",
    "local_rank": "GPU index on the host (telemetry, console prefixes)",
    "level": "DEBUG, INFO, WARN or ERROR (WARNING, ERR, CRITICAL ... mapped)",
    "event": "event id (TRAIN_STEP, ALLREDUCE, NCCL_TIMEOUT ...); flat metric lines get TRAIN_STEP/METRICS",
    "event_source": "record when the line named its event, inferred when forensics named it (flat metric lines, console text)",
    "message": "free text; `key=value` pairs of known metrics are also typed into their columns",
    "extra": "the record's `extra` object as JSON text, all keys (known ones are also typed columns)",
    "fields": "top-level keys outside the envelope, as a JSON object (flat metric lines, unknown keys)",
    "source_file": "absolute path of the file the event came from",
    "line": "1-based line number in that file (record index for binary formats)",
    "format": "reader that produced it: jsonl, console, nvidia_smi, dcgm, flight_recorder, hf_state, kineto",
}


def columns_markdown() -> str:
    """The README's column table, generated so that it cannot drift from the schema."""
    rows = ["| column | type | meaning |", "|---|---|---|"]
    docs = {m.name: (m.doc + (f" ({m.unit})" if m.unit else "") + (f"; aliases: {', '.join(m.aliases)}" if m.aliases else ""))
            for m in [*METRICS, *TEXT_FIELDS]}
    for name, dtype in EVENT_SCHEMA.items():
        rows.append(f"| `{name}` | {_type_name(dtype)} | {_ENVELOPE_DOCS.get(name) or docs.get(name, '')} |")
    return "\n".join(rows)


def _type_name(t: pl.DataType) -> str:
    if isinstance(t, pl.Datetime):
        return "timestamp[us, UTC]"
    if isinstance(t, pl.Enum):
        return "enum"
    return {pl.Int32: "int32", pl.Int64: "int64", pl.Float64: "float64", pl.String: "string"}.get(type(t), str(t))


# The store's `kernels` table (STORE/kernels/*.parquet): one row per GPU activity of a profiler
# (Kineto) trace, written by ingest/kineto.py from traces/reader.py. Its own table: a trace holds
# millions of kernels, which are not log events.
KERNEL_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "step": pl.Int32(),           # ProfilerStep number of the launch; null: none
    "device": pl.Int32(),
    "stream": pl.Int32(),
    "category": pl.String(),      # compute | communication | memcpy | memset | other (HTA's rules)
    "cat": pl.String(),           # the trace's own category (kernel, gpu_memcpy, ...)
    "name": pl.String(),
    "collective": pl.String(),    # AllReduce, SendRecv, ... for NCCL kernels
    "start_ns": pl.Int64(),       # epoch ns when the trace's clock is known, else the trace's clock
    "dur_ns": pl.Int64(),
    "correlation": pl.Int64(),
    "launch_ns": pl.Int64(),      # start of the launching runtime call (same clock); null: not in the trace
    "launch": pl.String(),        # cudaLaunchKernel, cudaGraphLaunch, cudaMemcpyAsync, ...
    "line": pl.Int64(),           # 1-based index of the event in traceEvents
}
KERNEL_STORE_SCHEMA: dict[str, pl.DataType] = {**KERNEL_SCHEMA, "source_file": pl.String()}
