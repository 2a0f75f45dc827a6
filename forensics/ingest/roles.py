"""Which field of a JSON-lines schema plays which role: found from names AND values, once per file.

Owns: flattening nested objects into dotted paths (`proc.rank`, `payload.values.loss`); the
envelope roles (time, rank, local rank, host, level, event, message) judged on a sample of a
file's first lines; metric roles (step time, compute, communication, wait, data loading, loss,
grad norm, memory, temperature, clock, utilisation, throughput) and units from a name's words
and suffix (`comm_time_s` -> comm_ms x 1000); event names as other code bases write them
(`trainer.data_load_time`, `TrainStep`, `data/fetch`) -> the seed's ids; and the decision that a
file is already in the seed's schema (then nothing here runs on its lines: the compiled scanner
reads it as before). Must not read files or parse whole blocks (remap.py applies a SchemaMap).

Domain facts leaned on:
- a time is a value in a plausible range: ISO-8601 text, or an epoch number of s/ms/us/ns
  between 2000 and 2100 (a relative `elapsed` of 12.5 s is not a time);
- a level takes its values from a small vocabulary (INFO, warning, Err, CRITICAL ...);
- an event is a small set of identifier-like values on (nearly) every line; a logger name
  (`trainer.data_load_time`) names it by its last dotted part;
- a message is free text (spaces) on most lines;
- units are part of a metric's name (`_ms`, `_s`, `_sec`, `_us`, `_mb`, `_gib`, `_bytes` ...).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import orjson

from ..schema import ALIASES, ENVELOPE_ALIASES, FIELDS, LEVEL_ALIASES

ROLES = ("time", "rank", "local_rank", "host", "level", "event", "message")
SAMPLE_LINES = 200
SEED_CHECK_LINES = 24   # a file in the seed's schema is told from this many lines (cost per file)
# The seed's event ids (../shared/spec/log-formats.md): a renamed event maps back to one of them.
SEED_EVENTS = ("TRAIN_STEP", "DATA_LOAD_TIME", "ALLREDUCE", "GPU_STATS", "GRAD_NORM", "GRAD_READY",
               "CHECKPOINT", "NCCL_TIMEOUT", "CUDA_OOM", "DATA_LOAD_ERROR")
_SEED_TOP = {"timestamp", "rank", "host", "level", "event", "message", "extra"}

# Name words per envelope role (a bonus, never enough alone: values decide).
_ROLE_WORDS: dict[str, tuple[str, ...]] = {
    "time": ("timestamp", "time", "ts", "datetime", "asctime", "date", "at", "when", "t"),
    "rank": ("rank", "global_rank", "world_rank", "process_rank", "rank_id"),
    "local_rank": ("local_rank", "localrank", "local_rank_id", "gpu_rank", "device_rank"),
    "host": ("host", "hostname", "host_name", "node", "node_name", "nodename", "machine", "server", "name"),
    "level": ("level", "levelname", "lvl", "severity", "loglevel", "log_level", "priority", "levelno", "sev"),
    "event": ("event", "event_id", "evt", "kind", "type", "action", "name", "logger", "event_type", "tag", "category",
              "logger_name", "event_name", "channel", "component", "topic"),
    "message": ("message", "msg", "text", "event", "log", "body", "line", "description"),
}
_HOST_WORDS = {"host", "hostname", "node", "nodename", "machine", "server"}
_NOT_OWN_RANK = {"peer", "src", "dst", "source", "target", "remote", "waiting", "local", "next", "prev", "root", "from", "to"}
_LEVEL_WORDS = {k.upper() for k in LEVEL_ALIASES}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/\-]{0,79}$")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
# epoch seconds of 2000-01-01 and 2100-01-01
_EPOCH_LO, _EPOCH_HI = 946_684_800.0, 4_102_444_800.0


def flatten(obj: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Nested objects -> {dotted path: leaf value}; lists stay values."""
    if out is None:
        out = {}
    for k, v in obj.items():
        p = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            flatten(v, p + ".", out)
        else:
            out[p] = v
    return out


def leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _words(name: str) -> list[str]:
    """`stepTimeMs` / `step-time.ms` / `STEP_TIME_MS` -> ['step', 'time', 'ms']."""
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", s.lower()) if w]


def _is_epoch(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    a = abs(float(v))
    return any(_EPOCH_LO <= a / d <= _EPOCH_HI for d in (1.0, 1e3, 1e6, 1e9))


def _is_time(v: Any) -> bool:
    if isinstance(v, str):
        s = v.strip()
        if _ISO.match(s):
            return True
        try:
            return _is_epoch(float(s))
        except ValueError:
            return False
    return _is_epoch(v)


def _is_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return 0 <= v < 2**31
    if isinstance(v, float):
        return v.is_integer() and 0 <= v < 2**31
    if isinstance(v, str):
        return v.strip().isdigit() and len(v.strip()) < 10
    return False


def _is_level(v: Any) -> bool:
    return isinstance(v, str) and v.strip().upper() in _LEVEL_WORDS


def _is_ident(v: Any) -> bool:
    return isinstance(v, str) and bool(_IDENT.match(v)) and not _ISO.match(v)


def _is_text(v: Any) -> bool:
    return isinstance(v, str) and (" " in v.strip() or len(v) > 40)


# --- metric roles and units ---------------------------------------------------------------------

# unit word -> (dimension, factor to the canonical unit of that dimension: ms, MB, MHz)
UNITS: dict[str, tuple[str, float]] = {
    "ms": ("time", 1.0), "msec": ("time", 1.0), "millis": ("time", 1.0), "milliseconds": ("time", 1.0),
    "s": ("time", 1000.0), "sec": ("time", 1000.0), "secs": ("time", 1000.0), "second": ("time", 1000.0),
    "seconds": ("time", 1000.0),
    "us": ("time", 1e-3), "usec": ("time", 1e-3), "micros": ("time", 1e-3), "microseconds": ("time", 1e-3),
    "ns": ("time", 1e-6), "nanos": ("time", 1e-6), "nanoseconds": ("time", 1e-6),
    "mb": ("size", 1.0), "mib": ("size", 1.0), "gb": ("size", 1024.0), "gib": ("size", 1024.0),
    "kb": ("size", 1 / 1024), "kib": ("size", 1 / 1024), "bytes": ("size", 1 / (1024 * 1024)),
    "b": ("size", 1 / (1024 * 1024)),
    "mhz": ("clock", 1.0), "ghz": ("clock", 1000.0), "hz": ("clock", 1e-6),
    "c": ("temp", 1.0), "celsius": ("temp", 1.0), "degc": ("temp", 1.0),
    "pct": ("pct", 1.0), "percent": ("pct", 1.0),
}
# the unit of a canonical column (for a config override naming a path with another unit)
_CANON_UNIT = {"ms": ("time", 1.0), "s": ("time", 1000.0), "MB": ("size", 1.0), "MHz": ("clock", 1.0), "C": ("temp", 1.0)}

# waiting, and what is waited for: a barrier is a wait (every rank waits there for the last);
# a wait for the input (`input_wait_ms`, `data_wait_ms`, `io_wait_s`) is data loading, not a
# collective's wait (_data_wait)
_WAIT = frozenset({"wait", "waiting", "waited", "blocked", "idle", "barrier", "barriers"})
_DATA = frozenset({"data", "dataload", "dataloader", "loader", "load", "loading", "fetch", "input", "io", "batch_fetch"})
# (words that name the role, canonical column, the dimension its unit must have or None)
_METRIC_ROLES: list[tuple[frozenset[str], str, str | None]] = [
    (_WAIT, "wait_ms", "time"),
    (_DATA, "data_load_ms", "time"),
    (frozenset({"comm", "communication", "allreduce", "collective", "nccl", "allgather", "reduce", "sync", "network"}), "comm_ms", "time"),
    (frozenset({"forward", "fwd"}), "fwd_ms", "time"),
    (frozenset({"backward", "bwd"}), "bwd_ms", "time"),
    (frozenset({"compute", "computation", "gpu_time", "kernel"}), "compute_ms", "time"),
    (frozenset({"step", "iter", "iteration", "batch", "train", "elapsed"}), "step_time_ms", "time"),
    (frozenset({"mem", "memory", "vram", "allocated", "alloc", "reserved"}), "mem_alloc_mb", "size"),
    (frozenset({"temp", "temperature"}), "temp_c", None),
    (frozenset({"clock", "clk", "freq", "frequency", "sm", "graphics"}), "sm_clock_mhz", "clock"),
    (frozenset({"util", "utilization", "utilisation", "busy"}), "gpu_util", None),
    (frozenset({"power", "watts"}), "power_w", None),
]
_EXCLUDE_LOSS = {"eval", "val", "valid", "validation", "test"}


@lru_cache(maxsize=4096)
def metric_for(path: str) -> tuple[str, float] | None:
    """The canonical column a field's values go to, and the factor to its unit; None: not a
    metric this table knows (the field is kept under its own name)."""
    name = leaf(path)
    if "." in path:
        timed = _duration_of(path[: -len(name) - 1], name)
        if timed is None:
            timed = _duration_under(path[: -len(name) - 1], name)
        if timed is not False:
            return timed
    if name in ALIASES:
        return ALIASES[name]
    w = _words(name)
    if not w:
        return None
    snake = "_".join(w)
    if snake in ALIASES:
        return ALIASES[snake]
    ws = set(w)
    if "per" in ws or snake.endswith("_ps") or "throughput" in ws:
        if ws & {"token", "tokens", "tok"}:
            return ("tokens_per_s", 1.0)
        if ws & {"sample", "samples", "throughput", "seq", "sequences", "example", "examples"}:
            return ("samples_per_s", 1.0)
        return None
    if "loss" in ws and not ws & _EXCLUDE_LOSS and len(w) <= 3:
        return ("loss", 1.0)
    if ("grad" in ws or "gradient" in ws) and "norm" in ws or "gnorm" in ws:
        return ("grad_norm", 1.0)
    unit = UNITS.get(w[-1]) if len(w) > 1 else None
    base = set(w[:-1]) if unit else ws
    # a path's parents name the role when the leaf alone does not (`time.data_ms`, `gpu.temp`)
    parents = set(_words(path[: -len(name)])) if "." in path else set()
    if base & _WAIT and base & _DATA:
        base = base - _WAIT      # the input is what it waited for: data loading (input_wait_ms)
    for words, canon, dim in _METRIC_ROLES:
        if not base & words:
            continue
        if dim is not None and (unit is None or unit[0] != dim):
            if not (dim == "time" and unit is None and parents & {"time", "timing", "timings", "durations", "latency"}):
                continue
            return None   # a duration of unknown unit: kept as written
        if canon == "gpu_util" and unit is not None and unit[0] != "pct":
            continue
        return (canon, unit[1] if unit is not None and dim is not None else 1.0)
    # a namespace before a known name (`train/learning_rate`, `optim_lr`, `train/global_step`);
    # not an evaluation's (`eval_loss` is not the training loss)
    if ws & _EXCLUDE_LOSS:
        return None
    for k in range(1, len(w)):
        tail = "_".join(w[k:])
        if tail in ALIASES:
            return ALIASES[tail]
    return None


_TIME_GROUPS = {"time", "times", "timing", "timings", "duration", "durations", "latency", "latencies", "elapsed"}


_SPAN_WORDS = {"duration", "time", "latency", "elapsed", "took"}


def _duration_of(parent: str, name: str) -> tuple[str, float] | None:
    """A duration with a unit under what it measures (OpenTelemetry's `<thing>.duration` naming:
    `data_load.duration_s`, `comm.latency_ms`): the role the parent names, in the leaf's unit."""
    w = _words(name)
    unit = UNITS.get(w[-1]) if len(w) > 1 else None
    if unit is None or unit[0] != "time" or not set(w[:-1]) <= _SPAN_WORDS:
        return None
    pw = set(_words(parent.rsplit(".", 1)[-1]))
    for words, canon, dim in _METRIC_ROLES:
        if dim == "time" and pw & words:
            return canon, unit[1]
    return None


def _duration_under(parent: str, name: str) -> tuple[str, float] | None | bool:
    """A leaf under a group of durations (`durations_ms.step`, `timing.data_s`): the duration of
    that part of the step, in the group's unit (the leaf's own suffix first). None: a duration
    of no known unit or role (kept as written, never read as a step number); False: not such a
    group."""
    pw = _words(parent.rsplit(".", 1)[-1])
    if not pw:
        return False
    unit = UNITS.get(pw[-1]) if len(pw) > 1 else None
    if not (set(pw) & _TIME_GROUPS or (unit is not None and unit[0] == "time")):
        return False
    w = _words(name)
    own = UNITS.get(w[-1]) if len(w) > 1 else None
    if own is not None:
        return metric_for(name)
    if unit is None or unit[0] != "time":
        return None
    for words, canon, dim in _METRIC_ROLES:
        if dim == "time" and set(w) & words:
            return canon, unit[1]
    return None


# --- event names --------------------------------------------------------------------------------

def _norm_event(name: str) -> str:
    return "_".join(_words(name)).upper()


_SEED_SQUASHED = {e.replace("_", ""): e for e in SEED_EVENTS}


def event_by_name(raw: str, last_part: bool) -> str:
    """A logged event name as an upper-case id: its last dotted part when it is a logger name,
    camel case and separators as `_`; a seed id spelt another way (`all_reduce`, `grads_ready`)
    becomes that id."""
    name = raw.rsplit(".", 1)[-1] if last_part else raw
    norm = _norm_event(name) or raw
    if norm in SEED_EVENTS:
        return norm
    sq = norm.replace("_", "")
    if sq in _SEED_SQUASHED:
        return _SEED_SQUASHED[sq]
    sing = "_".join(w[:-1] if w.endswith("S") and len(w) > 3 else w for w in norm.split("_"))
    return _SEED_SQUASHED.get(sing.replace("_", ""), norm)


# what a step summary carries beside its time, or says in its name: a line of another name with
# a duration alone (`checkpoint_upload` with elapsed_s) is that work's, not the step's
_STEP_COMPANIONS = frozenset({"loss", "lr", "samples_per_s", "tokens_per_s", "grad_norm"})
_STEP_WORDS = frozenset({"STEP", "ITER", "ITERATION", "TRAIN", "TRAINING", "BATCH"})


def event_by_content(norm: str, metrics: frozenset[str]) -> str:
    """A renamed event that carries the metrics a seed event carries is that event: a step
    summary carries the step's time (with a training value, or a step in its name), a data-load
    event the batch's fetch time, a GPU sample two or more device readings, a gradient-ready
    event its ready time."""
    if norm in SEED_EVENTS:
        return norm
    if "grad_ready_ts" in metrics:
        return "GRAD_READY"
    if "step_time_ms" in metrics and (metrics & _STEP_COMPANIONS or set(norm.split("_")) & _STEP_WORDS):
        return "TRAIN_STEP"
    if "data_load_ms" in metrics:
        return "DATA_LOAD_TIME"
    if len(metrics & {"gpu_util", "temp_c", "sm_clock_mhz", "power_w", "throttle_reasons"}) >= 2:
        return "GPU_STATS"
    if metrics & {"comm_ms", "wait_ms"} and "ALLREDUCE" in norm.replace("_", ""):
        return "ALLREDUCE"
    return norm


# --- the mapping --------------------------------------------------------------------------------

@dataclass(frozen=True)
class SchemaMap:
    """Where each role is in a file's records (dotted paths), and how its metrics are named.
    Picklable: planning infers it, a unit (maybe in another process) applies it."""
    time: str | None = None
    rank: str | None = None
    local_rank: str | None = None
    host: str | None = None
    level: str | None = None
    event: str | None = None
    message: str | None = None
    event_last_part: bool = False            # event values are logger names: take the last part
    level_numbers: tuple[tuple[int | str, str], ...] = ()  # numeric levels (pino/bunyan, Python's levelno, syslog), glog's letters
    metrics: tuple[tuple[str, str, float], ...] = ()  # (path, column, factor) set by config
    seen_metrics: tuple[tuple[str, str, float], ...] = ()  # inferred from the sample (for display)
    overridden: tuple[str, ...] = ()        # roles the config set

    def metric(self, path: str) -> tuple[str, float] | None:
        for p, canon, f in self.metrics:
            if p == path:
                return canon, f
        return metric_for(path)

    def describe(self) -> str:
        """One line per file family: `time=@timestamp_ms rank=proc.rank ... | metrics: a->b`."""
        parts = []
        for r in ROLES:
            p = getattr(self, r)
            if p is not None:
                tag = "*" if r in self.overridden else ""
                note = " (last part)" if r == "event" and self.event_last_part else ""
                if r == "level" and self.level_numbers:
                    info = max((n for n, lv in self.level_numbers if lv == "INFO"), key=str)
                    note = f" ({'letters' if isinstance(info, str) else 'numbers'}: {info} info)"
                parts.append(f"{r}={p}{note}{tag}")
        step = [p for p, c, _ in self.seen_metrics + self.metrics if c == "step"]
        if step:
            parts.append(f"step={step[0]}")
        renamed, by_name, parents = [], 0, {}
        for p, c, f in {(*m,): None for m in self.metrics + self.seen_metrics}:
            if c == "step":
                continue
            if leaf(p) != c or f != 1.0:
                renamed.append(f"{p}->{c}" + (f" x{f:g}" if f != 1.0 else ""))
            else:
                by_name += 1
                if "." in p:
                    parents[p.rsplit(".", 1)[0]] = None
        ms = renamed + ([f"{by_name} by name" + (f" under {', '.join(list(parents)[:3])}" + (" ..." if len(parents) > 3 else "")
                                                  if parents else "")] if by_name else [])
        return " ".join(parts) + (f" | metrics: {', '.join(ms)}" if ms else "")


def _sample(head: bytes, n: int = SAMPLE_LINES) -> list[dict]:
    out: list[dict] = []
    pos, size = 0, len(head)
    while pos < size and len(out) < n:
        nl = head.find(b"\n", pos)
        end = size if nl < 0 else nl
        if head.startswith(b"{", pos):
            try:
                o = orjson.loads(head[pos:end])
            except orjson.JSONDecodeError:
                o = None
            if isinstance(o, dict):
                out.append(o)
        pos = end + 1
    return out


# A whole seed-schema line in the seed's key order (extra last, any content): told without parsing.
_SEED_LINE = re.compile(
    rb'\{"timestamp":(?:"[0-9T:.+Z -]*"|[0-9.eE+]+),(?:"rank":[0-9]+,)?(?:"host":"[^"\\]*",)?"level":"[A-Za-z]+",'
    rb'"event":"[A-Z][A-Z0-9_]{0,79}","message":"(?:[^"\\]|\\.)*"(?:,"extra":(\{.*\}))?\}\r?$')


def _seed_lines(head: bytes) -> bool:
    """The head's first SEED_CHECK_LINES lines (at least one) are all seed lines as the seed's
    writers print them (compact, keys in order): the cheap test before any JSON parse."""
    pos, n, size = 0, 0, len(head)
    while pos < size and n < SEED_CHECK_LINES:
        nl = head.find(b"\n", pos)
        end = size if nl < 0 else nl
        if nl < 0 and n:
            break   # a cut last line of the head: judged by the lines before it
        m = _SEED_LINE.match(head, pos, end)
        if m is None:
            return False
        extra = m.group(1)
        # `.*` may have swallowed a top-level key after `extra` ({"a":1},"rank":3}): a closing
        # brace followed by a key inside the captured text needs a real parse to tell.
        if extra is not None and b"}," in extra and not _seed_extra(head[pos:end]):
            return False
        n += 1
        pos = end + 1
    return n > 0


def _seed_extra(line: bytes) -> bool:
    """A line the seed pattern matched whose `extra` text holds `},`: seed only when parsed, its
    keys end with `extra` (nothing after it at the top level)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and list(obj)[-1] == "extra" and _seed_like([obj])


def _seed_like(objs: list[dict]) -> bool:
    """Every sampled record uses only the seed's keys (or known metric names) at its top level,
    names its time `timestamp`, and its events are upper-case ids: nothing to remap."""
    for o in objs:
        if "timestamp" not in o:
            return False
        for k, v in o.items():
            if k in _SEED_TOP:
                if k == "event" and not (isinstance(v, str) and v == v.upper() and _is_ident(v) and "." not in v):
                    return False
                if k == "extra" and v is not None and not isinstance(v, dict):
                    return False
                continue
            if k not in ALIASES or isinstance(v, dict):
                return False
    return bool(objs)


@dataclass
class _Stats:
    n: int = 0
    time: int = 0
    int_: int = 0
    level: int = 0
    ident: int = 0
    text: int = 0
    str_: int = 0
    values: set = field(default_factory=set)


# A rank's or host's field under a short name (`proc.r`, `ctx.rk`, `proc.n`): told by its values
_SHORT = 3
_MAX_RANK = 1 << 16
_HOSTLIKE = re.compile(r"^(?=.*\d)[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*$")


def _rank_by_values(stats: dict[str, "_Stats"], flats: list[dict[str, Any]], used: set[str], metrics: set[str]) -> str | None:
    """A field no name marks as the rank, whose short name (at most three letters: `r`, `rk`) sits
    in a nested object and whose values look like a rank: on (nearly) every line, whole numbers
    below 65536, one value through a rank's own file or a few repeated values in a merged one —
    never a counter that climbs line by line (a step). The name's `r` breaks ties."""
    total = len(flats)
    best: tuple | None = None
    for p, st in stats.items():
        name = leaf(p)
        if p in used or p in metrics or "." not in p or len(name) > _SHORT or st.n < 0.9 * total or st.int_ != st.n:
            continue
        seq = [int(float(f[p])) for f in flats if f.get(p) is not None]
        if not seq or max(seq) >= _MAX_RANK or (len(set(seq)) > 1 and len(set(seq)) * 2 > len(seq)):
            continue
        if len(set(seq)) > 1 and all(b >= a for a, b in zip(seq, seq[1:])):
            continue          # climbs with the lines: a counter, not whose line it is
        key = (name.lower().startswith("r"), -p.count("."), p)
        if best is None or key > best:
            best = key
    return best[2] if best else None


def _host_by_values(stats: dict[str, "_Stats"], used: set[str], rank: str) -> str | None:
    """The host beside a rank found by its values: a string field of a short name in the same
    object whose values read as host names (a letter first, a digit in them: `node-1`, `gpu07`),
    no more of them than the ranks."""
    parent = rank.rsplit(".", 1)[0]
    n_ranks = len(stats[rank].values)
    for p, st in stats.items():
        if p in used or p.rsplit(".", 1)[0] != parent or len(leaf(p)) > _SHORT or st.str_ != st.n:
            continue
        if st.values and len(st.values) <= max(n_ranks, 1) and all(isinstance(v, str) and _HOSTLIKE.match(v) for v in st.values):
            return p
    return None


def infer(head: bytes, overrides: dict[str, Any] | None = None) -> SchemaMap | None:
    """The SchemaMap of a JSON-lines file from its first bytes; None when the file is in the
    seed's schema (or shows no JSON records) and the config overrides nothing."""
    if not overrides and _seed_lines(head):
        return None
    objs = _sample(head, SEED_CHECK_LINES)
    if not objs:
        return None
    if not overrides and _seed_like(objs):
        return None
    if len(objs) == SEED_CHECK_LINES:
        objs = _sample(head)
    flats = [flatten(o) for o in objs]
    if overrides and not _names_any(flats, overrides):
        overrides = None   # the config names fields of another family of files
        if _seed_like(objs):
            return None
    stats: dict[str, _Stats] = {}
    for f in flats:
        for p, v in f.items():
            if v is None:
                continue
            s = stats.setdefault(p, _Stats())
            s.n += 1
            s.time += _is_time(v)
            s.int_ += _is_int(v)
            s.level += _is_level(v)
            s.ident += _is_ident(v)
            s.text += _is_text(v)
            s.str_ += isinstance(v, str)
            if len(s.values) < 64 and isinstance(v, (str, int, float)):
                s.values.add(v)
    total = len(flats)
    chosen: dict[str, str | None] = {}
    used: set[str] = set()

    def bonus(role: str, p: str) -> float:
        lw = "_".join(_words(leaf(p)))
        words = _ROLE_WORDS[role]
        pw = set(_words(p))
        if role == "host" and not pw & _HOST_WORDS:
            return 0.0
        if role == "rank" and pw & _NOT_OWN_RANK:
            return 0.0
        if lw in words:
            return 1.0 if words.index(lw) < 2 else 0.9
        if lw.rsplit("_", 1)[-1] in words[:2] and role != "time":
            return 0.9   # a namespace before the role's own name (`trainer_event`, `worker_rank`)
        return 0.5 if pw & set(words) else 0.0

    def pick(role: str, ok, need: float = 0.5, name_needed: bool = False) -> None:
        best, score = None, 0.0
        for p, s in stats.items():
            if p in used:
                continue
            frac_ok = ok(s) / s.n
            cover = s.n / total
            b = bonus(role, p)
            # an unnamed field is an event only when on (nearly) every line with several
            # identifier values, or logger names (`trainer.data_load_time`)
            unnamed_event = role == "event" and b == 0.0 and cover >= 0.9 and (
                len(s.values) >= 3 or all(isinstance(v, str) and "." in v for v in s.values))
            if frac_ok < 0.9 or cover < need or (name_needed and b == 0.0 and not unnamed_event):
                continue
            if role == "event" and b < 0.9 and len(s.values) < 2:   # `model_name`: one value, not an event
                continue
            sc = cover + b - 0.01 * p.count(".")
            if role == "event":   # several values, never free text
                sc += (0.2 if len(s.values) > 1 else 0.0) - (0.5 if s.text else 0.0)
            if sc > score:
                best, score = p, sc
        chosen[role] = best
        if best is not None:
            used.add(best)

    known_metric = {p for p in stats if p.rsplit(".", 1)[-1] in ALIASES}
    used |= {p for p in known_metric if leaf(p) not in ENVELOPE_ALIASES}
    pick("level", lambda s: s.level)
    if chosen["level"] is None:
        _numeric_level(stats, used, chosen, bonus)
    pick("time", lambda s: s.time)
    pick("local_rank", lambda s: s.int_, need=0.3, name_needed=True)
    pick("rank", lambda s: s.int_, need=0.3, name_needed=True)
    pick("event", lambda s: s.ident, need=0.5, name_needed=True)
    if chosen["event"] is None:
        # a field on every line with several identifier values, or whose values spell the
        # seed's event ids (`op: "train_step"`), is what the lines are about: the event (even
        # under a metric's name: `op` is also the collective's)
        alt = [(s.n, -p.count("."), p) for p, s in stats.items()
               if (p not in used or p in known_metric) and s.n / total >= 0.9 and s.ident / s.n >= 0.9 and not s.text
               and (len(s.values) >= 3 and p in known_metric
                    or any(isinstance(v, str) and event_by_name(v, "." in v) in SEED_EVENTS for v in s.values))]
        if alt:
            chosen["event"] = max(alt)[2]
    ev = chosen["event"]
    if ev is not None and "_".join(_words(leaf(ev))) in _ROLE_WORDS["message"]:
        # structlog writes its message under `event`: where another identifier field says the
        # same on every line (`kind`), that one is the event and `event` the message text
        for p, s in stats.items():
            if p != ev and p not in used and s.n == stats[ev].n and bonus("event", p) > 0 \
                    and all(f.get(p) == f.get(ev) for f in flats):
                used.discard(ev)
                used.add(p)
                chosen["event"] = p
                break
    ev = chosen["event"]
    if ev is not None and len(stats[ev].values) == 1 and total >= 5 and "event" not in _words(leaf(ev)):
        # one value on every line is the logger's or module's name (loguru's `record.name`), not
        # what happened: a field on (nearly) every line with three or more identifier values
        # (loguru's `record.function`) tells the lines apart
        alt = [(s.n, -p.count("."), p) for p, s in stats.items()
               if p not in used and s.n / total >= 0.9 and s.ident / s.n >= 0.9 and len(s.values) >= 3 and not s.text]
        if alt:
            used.discard(ev)
            chosen["event"] = max(alt)[2]
            used.add(chosen["event"])
    pick("message", lambda s: s.str_, need=0.3, name_needed=True)
    pick("host", lambda s: s.n, need=0.3, name_needed=True)
    if chosen["rank"] is None:
        chosen["rank"] = _rank_by_values(stats, flats, used, known_metric)
        if chosen["rank"] is not None:
            used.add(chosen["rank"])
    if chosen["host"] is None and chosen["rank"] is not None:
        chosen["host"] = _host_by_values(stats, used, chosen["rank"])
        if chosen["host"] is not None:
            used.add(chosen["host"])
    # a local rank is named as one: `rank` alone is the global rank
    if chosen["local_rank"] and "local" not in chosen["local_rank"].lower() and "gpu" not in chosen["local_rank"].lower() \
            and "device" not in chosen["local_rank"].lower():
        chosen["local_rank"] = None
    ev = chosen["event"]
    last = False
    if ev is not None:
        vals = [v for v in stats[ev].values if isinstance(v, str)]
        last = bool(vals) and all("." in v for v in vals)
    seen: dict[tuple[str, str, float], None] = {}
    for p, s in stats.items():
        if p in chosen.values():
            continue
        m = metric_for(p)
        if m is not None:
            seen[(p, m[0], m[1])] = None
    numbers = chosen.pop("level_numbers", None)
    sm = SchemaMap(**chosen, event_last_part=last, seen_metrics=tuple(seen), level_numbers=numbers or ())
    if overrides:
        sm = apply_overrides(sm, overrides)
    if not overrides and _is_identity(sm) and not (
            ev is not None and any(isinstance(v, str) and event_by_name(v, last) != v for v in stats[ev].values)):
        return None
    return sm


# Numeric levels: pino and bunyan write `level` 10..60 (30 info, 40 warn, 50 error, 60 fatal);
# Python's logging writes `levelno` 10..50 (20 info, 30 warning, 40 error, 50 critical).
_PINO = ((10, "DEBUG"), (20, "DEBUG"), (30, "INFO"), (40, "WARN"), (50, "ERROR"), (60, "ERROR"))
# OpenTelemetry's SeverityNumber: 1-8 trace/debug, 9-12 info, 13-16 warn, 17-24 error/fatal;
# syslog's priority (journald's PRIORITY): 0-3 emerg..err, 4 warning, 5-6 notice/info, 7 debug.
_OTEL = tuple((n, "DEBUG" if n < 9 else "INFO" if n < 13 else "WARN" if n < 17 else "ERROR") for n in range(1, 25))
_SYSLOG = ((0, "ERROR"), (1, "ERROR"), (2, "ERROR"), (3, "ERROR"), (4, "WARN"), (5, "INFO"), (6, "INFO"), (7, "DEBUG"))
_PYTHON = ((10, "DEBUG"), (20, "INFO"), (30, "WARN"), (40, "ERROR"), (50, "ERROR"))


# glog/klog write one letter (I, W, E, F); Android's logcat V, D, I, W, E, A.
_LETTERS = (("V", "DEBUG"), ("D", "DEBUG"), ("T", "DEBUG"), ("I", "INFO"), ("W", "WARN"), ("E", "ERROR"),
            ("F", "ERROR"), ("A", "ERROR"), ("C", "ERROR"))


def _numeric_level(stats: dict[str, _Stats], used: set[str], chosen: dict, bonus) -> None:
    """A level-named field of numbers (or of glog's one letters) when no field holds level words."""
    for p, s in stats.items():
        words = _words(leaf(p))
        otel = words[-2:] == ["severity", "number"]   # OpenTelemetry's SeverityNumber
        if p in used or not s.values or bonus("level", p) < (0.5 if otel else 0.9):
            continue
        table = None
        if s.str_ == s.n and all(isinstance(v, str) and v.strip().upper() in dict(_LETTERS) for v in s.values):
            table = _LETTERS
        elif s.int_ == s.n:
            vals = {int(float(v)) for v in s.values}
            if otel and vals <= set(range(1, 25)):
                table = _OTEL
            elif "priority" in words and vals <= set(range(8)):
                table = _SYSLOG
            elif vals <= {10, 20, 30, 40, 50, 60}:
                table = _PYTHON if "no" in words or "levelno" == leaf(p).lower() else _PINO
        if table is not None:
            chosen["level"] = p
            chosen["level_numbers"] = table
            used.add(p)
            return


def _names_any(flats: list[dict[str, Any]], overrides: dict[str, Any]) -> bool:
    """Does any record of the sample hold a field the config's [schema] names?"""
    paths = [v for k, v in overrides.items() if k in ROLES] + list((overrides.get("metrics") or {}).values())
    return any(p in f for f in flats for p in paths)


def _is_identity(sm: SchemaMap) -> bool:
    """The existing reader already reads what this map says (flat metric lines, seed variants)."""
    for r in ("time", "rank", "host", "level", "event", "message"):
        p = getattr(sm, r)
        if p is None:
            continue
        canon = "timestamp" if r == "time" else r
        if "." in p or ENVELOPE_ALIASES.get(p) != canon:
            return False
    if sm.local_rank is not None or sm.event_last_part or sm.level_numbers:
        return False
    for p, canon, f in sm.seen_metrics:
        top = p.split(".", 1)
        if not ((len(top) == 1 or (top[0] == "extra" and "." not in top[1])) and leaf(p) in ALIASES):
            return False
    return True


def apply_overrides(sm: SchemaMap, overrides: dict[str, Any]) -> SchemaMap:
    """The config's [schema] (role = path) and [schema.metrics] (column = path) over a map."""
    roles = {r: v for r, v in overrides.items() if r in ROLES}
    metrics = []
    for canon, path in (overrides.get("metrics") or {}).items():
        metrics.append((path, canon, unit_factor(path, canon)))
    return replace(sm, **roles, metrics=tuple(metrics), overridden=tuple(roles),
                   event_last_part=sm.event_last_part if "event" not in roles else bool(overrides.get("event_last_part", False)))


def unit_factor(path: str, canon: str) -> float:
    """Factor from the unit a path's suffix names to the unit of column `canon` (1: none named)."""
    w = _words(leaf(path))
    got = UNITS.get(w[-1]) if len(w) > 1 else None
    m = FIELDS.get(canon)
    want = _CANON_UNIT.get(m.unit) if m is not None else None
    if got is None or want is None or got[0] != want[0]:
        return 1.0
    return got[1] / want[1]
