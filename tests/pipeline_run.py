"""Small pipeline-parallel runs for the topology tests: per-op FORWARD / BACKWARD / RECV /
ALLREDUCE / OPTIMIZER events per rank and step, with the rank's stage and dp rank.

Owns nothing but test scaffolding. The timing follows the mechanism the passes rely on, so
waits follow from the injected fault instead of being written by hand:
- ranks are laid out as Megatron / DeepSpeed do (dp fastest, then pp): rank = pp * dp_size + dp;
- stage s of pipeline d computes c[s, d] per step (forward 1/3, backward 2/3, over `micro`
  micro-batches); the last stage computes more by design (`last_extra`);
- pipeline d takes T_d = sum_s c[s, d] / micro + (micro - 1) / micro * max_s c[s, d]; a rank idles
  in p2p receives (RECV: comm_ms = wait_ms = T_d - c[s, d]), then the stage's data-parallel group
  all-reduces its gradients: a rank waits max_d T_d - T_d, plus a 5 ms transfer;
- every rank's step takes data + max_d T_d + transfer + optimizer.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable

import polars as pl

from pass_helpers import T0, Rows


def pipeline_rows(pp: int, dp: int, steps: int = 40, micro: int = 4, base_ms: float = 300.0,
                  last_extra: float = 0.5, factor: Callable[[int, int, int], float] = lambda s, d, step: 1.0,
                  layout: str = "events", jitter: float = 0.02, seed: int = 0,
                  data: Callable[[int, int, int], float | None] = lambda s, d, step: 20.0 if s == 0 else None,
                  comm_fields: bool = True, grad_ready: bool = False) -> Rows:
    """`factor(stage, dp_rank, step)` multiplies a rank's compute. `layout`: "events" (stage and
    dp_rank in every per-op event's extra), "megatron" (rank 0 prints Megatron's sizes line),
    "deepspeed" (rank 0 prints DeepSpeed's topology map) or "none" (the logs do not say).
    `data(stage, dp_rank, step)`: a rank's batch loading time (None: it logs none; by default only
    the first stage loads batches); a slow loader delays its whole pipeline. Without
    `comm_fields`, RECV / ALLREDUCE events log only their duration (no comm_ms / wait_ms). With
    `grad_ready`, GRAD_READY events: backward runs from the last stage to the first, so a stage's
    gradients are ready one backward micro-batch of the next stage earlier than the stage before."""
    rng = random.Random(seed)
    rows = Rows()
    world = pp * dp

    def rank(s: int, d: int) -> int:
        return s * dp + d

    t = 0.0
    if layout == "megatron":
        rows.add(t, 0, "LOG", message=f"using world size: {world}, data-parallel size: {dp}, context-parallel size: 1, "
                 f"hierarchical context-parallel sizes: None, tensor-model-parallel size: 1, "
                 f"pipeline-model-parallel size: {pp}", file="console.log")
    elif layout == "deepspeed":
        coords = ", ".join(f"ProcessCoord(pipe={s}, data={d}): {rank(s, d)}" for s in range(pp) for d in range(dp))
        rows.add(t, 0, "LOG", message=f"Using topology: {{{coords}}}", file="console.log")
    for step in range(steps):
        c = {(s, d): base_ms * (1 + (last_extra if s == pp - 1 else 0.0)) * factor(s, d, step)
             * (1 + rng.uniform(-jitter, jitter)) for s in range(pp) for d in range(dp)}
        load = {(s, d): data(s, d, step) for s in range(pp) for d in range(dp)}
        late = {d: max((load[s, d] or 0.0) for s in range(pp)) for d in range(dp)}
        T = {d: late[d] + sum(c[s, d] for s in range(pp)) / micro + (micro - 1) / micro * max(c[s, d] for s in range(pp))
             for d in range(dp)}
        tmax = max(T.values())
        xfer, opt = 5.0, 10.0
        for s in range(pp):
            for d in range(dp):
                r = rank(s, d)
                ex = {"stage": s, "dp_rank": d} if layout == "events" else {}
                x = json.dumps(ex) if ex else None
                t0 = t
                dl = load[s, d]
                if dl is not None:
                    rows.add(t0, r, "DATA_LOAD_TIME", step=step, data_load_ms=dl, extra=json.dumps({"step": step, **ex}))
                tt = t0 + late[d] / 1000
                for m in range(micro):
                    for op, share in (("FORWARD", 1 / 3), ("BACKWARD", 2 / 3)):
                        dur = c[s, d] * share / micro
                        tt += dur / 1000
                        rows.add(tt, r, op, step=step, duration_s=dur / 1000, extra=x)
                bubble = T[d] - late[d] - c[s, d]
                if grad_ready:
                    ready = t0 + T[d] / 1000 - s * (2 / 3) * base_ms / micro / 1000
                    rows.add(ready, r, "GRAD_READY", step=step, grad_ready_ts=T0.timestamp() + ready, extra=x)
                tt += bubble / 1000
                wait = tmax - T[d]
                if comm_fields:
                    rows.add(tt, r, "RECV", step=step, comm_ms=bubble + 0.5, wait_ms=bubble, extra=x)
                    tt += (wait + xfer) / 1000
                    rows.add(tt, r, "ALLREDUCE", step=step, comm_ms=wait + xfer, wait_ms=wait, extra=x)
                else:
                    rows.add(tt, r, "RECV", step=step, duration_s=(bubble + 0.5) / 1000, extra=x)
                    tt += (wait + xfer) / 1000
                    rows.add(tt, r, "ALLREDUCE", step=step, duration_s=(wait + xfer) / 1000, extra=x)
                tt += opt / 1000
                rows.add(tt, r, "OPTIMIZER", step=step, duration_s=opt / 1000, extra=x)
                rows.add(tt, r, "TRAIN_STEP", step=step, step_time_ms=tmax + xfer + opt, loss=2.0 - step * 0.01)
        t += (tmax + xfer + opt) / 1000
    return rows


def write_jsonl(rows: Rows, out: Path) -> Path:
    """The rows as per-rank seed-schema JSON-lines files (extra as an object), for a real ingest."""
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    for row in rows.rows:
        rec = {"timestamp": row["timestamp"].isoformat().replace("+00:00", "Z"), "rank": row["rank"],
               "level": row["level"], "event": row["event"], "message": row.get("message") or ""}
        extra = json.loads(row["extra"]) if row.get("extra") else {}
        for k in ("step", "data_load_ms", "comm_ms", "wait_ms", "step_time_ms", "loss"):
            if row.get(k) is not None:
                extra[k] = row[k]
        if row.get("duration_s") is not None:
            extra["duration_ms"] = round(row["duration_s"] * 1000, 3)
        rec["extra"] = extra
        files.setdefault(row["source_file"], []).append(json.dumps(rec))
    for name, lines in files.items():
        (out / name.replace("console.log", "console.jsonl")).write_text("\n".join(lines) + "\n")
    return out


def frame(rows: Rows) -> pl.DataFrame:
    return rows.frame()
