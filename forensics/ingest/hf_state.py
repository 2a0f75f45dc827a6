"""HF Trainer `trainer_state.json` -> TRAIN_STEP / EVAL / TRAIN_SUMMARY / TRAINER_STATE events.

Owns: the `log_history` list (one record per logging step) and the state around it. Must not
read anything else (ms-swift / HF `logging.jsonl` flat lines belong to the JSONL reader).

Rank: the Trainer saves this file only from the world process zero (`should_save`), so every
record is rank 0. When the state says so itself (`is_world_process_zero: true`, newer
versions) rank_source is "record"; otherwise it is "path": the rank is implied by which file
this is, not by a field — and never guessed from a missing one. A rank in the path
(ctx.rank_hint) wins over both.

Lines: record i of log_history is line i (1-based); the state itself (global_step, best_metric,
...) is line len(log_history) + 1. A file that is not a JSON object is one rejected line.
The file is parsed with the standard json module because the Trainer writes NaN/Infinity
literals for diverged losses (strict JSON parsers refuse them, and those are the runs we read).
"""
from __future__ import annotations

import json
import math
from typing import Any, BinaryIO, Iterator

import orjson
import polars as pl

from ..errors import UNREADABLE, ForensicsError
from ..schema import Level, RankSource
from .formats import ReaderContext
from .jsonl import Block, rejects_frame

MAX_STATE_BYTES = 512 << 20

# log_history key -> canonical column (per event kind; first present wins)
_TRAIN = {"loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm", "epoch": "epoch", "step": "step"}
_EVAL = {"eval_loss": "loss", "test_loss": "loss", "eval_samples_per_second": "samples_per_s",
         "test_samples_per_second": "samples_per_s", "epoch": "epoch", "step": "step"}
_SUMMARY = {"train_loss": "loss", "train_samples_per_second": "samples_per_s", "epoch": "epoch", "step": "step",
            "train_runtime": "duration_s"}
_FLOAT_COLS = ("loss", "lr", "grad_norm", "epoch", "samples_per_s", "duration_s")


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _clean(v: Any) -> Any:
    """JSON-safe: non-finite floats become strings so that extra keeps 'nan' instead of null."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _record(entry: dict[str, Any], line: int) -> dict[str, Any]:
    keys = set(entry)
    if any(k.startswith(("eval_", "test_")) for k in keys):
        event, mapping = "EVAL", _EVAL
    elif "train_runtime" in keys:
        event, mapping = "TRAIN_SUMMARY", _SUMMARY
    elif "loss" in keys or "learning_rate" in keys or "grad_norm" in keys:
        event, mapping = "TRAIN_STEP", _TRAIN
    else:
        event, mapping = "METRICS", {"epoch": "epoch", "step": "step"}
    row: dict[str, Any] = {"line": line, "event": event}
    extra: dict[str, Any] = {}
    for k, v in entry.items():
        col = mapping.get(k)
        num = _number(v)
        if col is not None and num is not None and col not in row:
            row[col] = int(num) if col == "step" and math.isfinite(num) else num
        else:
            extra[k] = _clean(v)
    loss = row.get("loss")
    row["level"] = "WARN" if isinstance(loss, float) and not math.isfinite(loss) else "INFO"
    if extra:
        row["extra"] = extra
    return row


def _state_row(state: dict[str, Any], line: int) -> dict[str, Any]:
    extra = {k: _clean(v) for k, v in state.items() if k != "log_history" and not isinstance(v, (list, dict))}
    nested = {k: v for k, v in state.items() if k != "log_history" and isinstance(v, dict)}
    if nested:
        extra.update({k: v for k, v in nested.items()})
    row: dict[str, Any] = {"line": line, "event": "TRAINER_STATE", "level": "INFO", "extra": extra,
                           "message": f"global_step {state.get('global_step')}, best_metric {state.get('best_metric')}"}
    gs = _number(state.get("global_step"))
    if gs is not None and math.isfinite(gs):
        row["step"] = int(gs)
    ep = _number(state.get("epoch"))
    if ep is not None:
        row["epoch"] = ep
    return row


def _reject_frame(rows: list[tuple[int, str, bytes, int]]) -> pl.DataFrame:
    return rejects_frame(rows)


def _event_frame(rows: list[dict[str, Any]], rank: int, rank_source: str, host: str | None) -> pl.DataFrame:
    n = len(rows)
    cols: dict[str, pl.Series] = {
        "line": pl.Series([r["line"] for r in rows], dtype=pl.Int64),
        "rank": pl.Series([rank] * n, dtype=pl.Int32),
        "rank_source": pl.Series([rank_source] * n, dtype=pl.String).cast(RankSource),
        "host": pl.Series([host] * n, dtype=pl.String),
        "level": pl.Series([r["level"] for r in rows], dtype=pl.String).cast(Level),
        "event": pl.Series([r["event"] for r in rows], dtype=pl.String),
        "message": pl.Series([r.get("message") for r in rows], dtype=pl.String),
        "step": pl.Series([r.get("step") for r in rows], dtype=pl.Int64),
        "extra": pl.Series(
            [orjson.dumps(r["extra"], default=str).decode() if r.get("extra") else None for r in rows], dtype=pl.String
        ),
    }
    for c in _FLOAT_COLS:
        if c != "step" and any(c in r for r in rows):
            cols[c] = pl.Series([r.get(c) for r in rows], dtype=pl.Float64)
    return pl.DataFrame(cols)


def read_hf_state(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    data = stream.read(MAX_STATE_BYTES + 1)
    if len(data) > MAX_STATE_BYTES:
        raise ForensicsError(
            f"trainer_state.json larger than {MAX_STATE_BYTES >> 20} MiB", where=path,
            reason="a Trainer state is a few MiB at most", help="check that this is a trainer_state.json",
            code=UNREADABLE,
        )
    try:
        state = json.loads(data.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        yield Block(_event_frame([], 0, "none", None), _reject_frame([(1, f"invalid JSON: {e}", data, len(data))]), 1)
        return
    if not isinstance(state, dict):
        yield Block(_event_frame([], 0, "none", None),
                    _reject_frame([(1, "JSON value is not an object", data, len(data))]), 1)
        return
    if ctx.rank_hint is not None:
        rank, source = ctx.rank_hint, "path"
    elif state.get("is_world_process_zero") is True:
        rank, source = 0, "record"
    else:
        rank, source = 0, "path"
    history = state.get("log_history")
    rows: list[dict[str, Any]] = []
    rejects: list[tuple[int, str, bytes, int]] = []
    if isinstance(history, list):
        for i, entry in enumerate(history, start=1):
            if isinstance(entry, dict):
                rows.append(_record(entry, i))
            else:
                raw = json.dumps(entry, default=str).encode()
                rejects.append((i, "log_history entry is not an object", raw, len(raw)))
        n = len(history)
    else:
        n = 0
    rows.append(_state_row(state, n + 1))
    yield Block(_event_frame(rows, rank, source, ctx.host_hint), _reject_frame(rejects), n + 1)


read = read_hf_state
