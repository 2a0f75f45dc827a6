"""The per-block scan: the gate words and per-line searches run once per block in polars (Rust
regex and Aho-Corasick) instead of once per line in Python.
"""
from __future__ import annotations

import polars as pl

from ..binary import SUSPECT, binary_runs, is_binary_text


# The same gate and the per-line searches, run once per block in polars (Rust regex and
# Aho-Corasick) instead of once per line in Python: they are most of the cost of a console log.
_TRIGGER_WORDS = [
    "monitoredBarrier", "store based barrier", "processed ranks", "joined but didn't finish", "didn't join", "Timeout at collective",
    "flight recorder", "flight-recorder", "oom_kill", "oom-kill", "Out Of Memory", "Node failure", "mismatch between",
    "WorkNCCL", "watchdog", "Watchdog", "lagging", "desync", "dump signal", "CollectiveFingerPrint", "NCCL", "nccl",
    "out of memory", "OutOfMemory", "CUDA error", "Xid", "exitcode", "exit code", "return code", "SIG",
    "Signal ", "Killed", "Killing", "killed", "CANCELLED", "noticed that process", "CalledProcessError", "Process name",
    "Exit code", "Segmentation fault", "Aborted", "Bus error", "iteration", "(MB)", "time (ms)", "step=", "{'", "loss",
    "missing ranks", "Stalled ranks", "terminated with the following error", "status code",
]


# Lines that start a launcher's topology block (see _Parser._topology).
_TOPOLOGY_WORDS = ["Rendezvous complete", "launch configs:", "global_rank_mapping=", "num_local_procs=", "dist_world_size="]


# (libstdc++'s terminate handler and a shell's report of a segfault name a death without the word "Error")
_ERROR_WORDS = ["Error", "ERROR", "FATAL", "Traceback", "error:", "terminate called after throwing", "Segmentation fault"]


# (Lightning's EarlyStopping reports a non-finite metric through its bare INFO handler:
# "Monitored metric val_loss = nan is not finite. ..": a warning, whatever the handler's level)
_WARN_WORDS = ["Warning", "WARN", "warning:", "is not finite"]


# `[INFO]`, `[INFO|file.py:1]`, ` - INFO - `, `NCCL WARN`: one pattern, one pass per block.
_LEVEL_VEC = r"(?:\[|NCCL | - )(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)(?:[\]|]| - |\s|$)"


_ISO_VEC = (
    r"(?:^|[^\d])((?:19|20)\d\d-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)(?:$|[^\d])"
)


class _Hints:
    """Per-line results of the block-wide scan, as Python lists indexed like the lines."""

    __slots__ = ("trig", "err", "warn", "lvl", "ts", "year", "month", "binary", "topo")

    def __init__(self, lines: list[str], before_binary: bool | None = None) -> None:
        line = pl.col("l")
        head = line.str.slice(0, 600)
        out = pl.DataFrame({"l": lines}, schema={"l": pl.String}).select(
            line.str.contains_any(_TRIGGER_WORDS).alias("trig"),
            head.str.contains_any(_ERROR_WORDS).alias("err"),
            head.str.contains_any(_WARN_WORDS).alias("warn"),
            line.str.slice(0, 200).str.extract(_LEVEL_VEC, 1).alias("lvl"),
            head.str.extract(_ISO_VEC, 1).str.replace(r"^(.{10})[ _]", "${1}T")
            .str.replace(",", ".", literal=True).alias("ts"),
            line.str.contains(SUSPECT).alias("suspect"),
            line.str.contains_any(_TOPOLOGY_WORDS).alias("topo"),
        )
        ts = out["ts"]
        self.trig: list[bool] = out["trig"].to_list()
        self.topo: list[bool] = out["topo"].to_list()
        self.err: list[bool] = out["err"].to_list()
        self.warn: list[bool] = out["warn"].to_list()
        self.lvl: list[str | None] = out["lvl"].to_list()
        self.ts: list[str | None] = ts.to_list()
        self.year: list[int | None] = ts.str.slice(0, 4).cast(pl.Int32).to_list()
        self.month: list[int | None] = ts.str.slice(5, 2).cast(pl.Int32).to_list()
        # the exact rule runs only on lines holding a suspect character (few in a text log)
        flags = [bool(s) and is_binary_text(ln) for s, ln in zip(out["suspect"].to_list(), lines)]
        self.binary: list[bool] = binary_runs(lines, flags, before_binary) if any(flags) else flags
