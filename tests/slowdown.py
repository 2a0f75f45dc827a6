"""Inject a slowdown into one rank of a copy of a lockstep run, the way the run would have looked.

For the compare and cost tests: `inject_slowdown(src, dst, rank=2, phase="compute", pct=0.25,
from_step=20)` copies the seed-schema JSON lines of `src` to `dst` and makes `rank`'s compute
(or data loading) `pct` longer in every step from `from_step` on (up to `until_step`, inclusive,
when given), consistently with synchronous
data parallelism:

- the rank arrives at the all-reduce D = pct x its phase time later; the collective ends when the
  last rank arrived, so every rank's collective ends E = max(0, its arrival + D - last arrival)
  later, and every later event of every rank moves by the sum of the E's so far;
- every rank's wait_ms and comm_ms grow by E (the slowed rank's by E - D: it now arrives later),
  step_time_ms grows by E and samples_per_s shrinks with it; the slowed rank's data_load_ms grows
  by D (phase "data"), its grad_ready_ts moves with its arrival.

Returns the truth: `lost_s` = the sum of the E's (how much longer the run took), `steps`.
Reads each line's step from extra.step, the record's step, or `step=N` in the message; the rank
from the record, else the file name. Lines that are not JSON are copied as they are.
"""
from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

_STEP = re.compile(r"\bstep=(\d+)")
_RANK = re.compile(r"rank_?(\d+)")


def _ts(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


def _fmt(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _step(rec: dict) -> int | None:
    ex = rec.get("extra") or {}
    for v in (ex.get("step"), rec.get("step")):
        if isinstance(v, int):
            return v
    m = _STEP.search(rec.get("message") or "")
    return int(m.group(1)) if m else None


def _set(rec: dict, key: str, value: float) -> None:
    rec.setdefault("extra", {})[key] = round(value, 3)
    if rec.get("message"):
        rec["message"] = re.sub(rf"\b{key}=[-\d.]+", f"{key}={value:.1f}", rec["message"])


def inject_slowdown(src: Path, dst: Path, *, rank: int, phase: str = "compute", pct: float = 0.25,
                    from_step: int = 0, until_step: int | None = None) -> dict:
    assert phase in ("compute", "data")
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    files: dict[Path, list] = {}
    for p in sorted(dst.rglob("*.jsonl")):
        m = _RANK.search(p.name)
        rows = []
        for line in p.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                rows.append(line)
                continue
            rows.append(rec)
        files[p] = [int(m.group(1)) if m else None, rows]
    # per (rank, step): data-load end, collective end, arrival at the collective
    t_data: dict[tuple[int, int], dt.datetime] = {}
    t_coll: dict[tuple[int, int], dt.datetime] = {}
    arrive: dict[tuple[int, int], dt.datetime] = {}
    data_ms: dict[tuple[int, int], float] = {}
    for file_rank, rows in files.values():
        for rec in rows:
            if not isinstance(rec, dict):
                continue
            r = rec.get("rank", file_rank)
            s = _step(rec)
            if r is None or s is None:
                continue
            ex = rec.get("extra") or {}
            if rec.get("event") == "DATA_LOAD_TIME":
                t_data[(r, s)] = _ts(rec["timestamp"])
                data_ms[(r, s)] = float(ex.get("data_load_ms", 0.0))
            elif rec.get("event") == "ALLREDUCE":
                end = _ts(rec["timestamp"])
                t_coll[(r, s)] = end
                arrive[(r, s)] = end - dt.timedelta(milliseconds=float(ex["comm_ms"]))
    steps = sorted({s for (_, s) in t_coll})
    delay: dict[int, float] = {}   # D_s (ms) for the slowed rank
    extra: dict[int, float] = {}   # E_s (ms) for every rank
    for s in steps:
        if s < from_step or (until_step is not None and s > until_step) or (rank, s) not in arrive:
            delay[s] = extra[s] = 0.0
            continue
        if phase == "data":
            d = pct * data_ms.get((rank, s), 0.0)
        else:
            d = pct * (arrive[(rank, s)] - t_data[(rank, s)]).total_seconds() * 1000.0
        last = max(a for (r, k), a in arrive.items() if k == s)
        mine = arrive[(rank, s)] + dt.timedelta(milliseconds=d)
        delay[s] = d
        extra[s] = max(0.0, (mine - last).total_seconds() * 1000.0)
    before: dict[int, float] = {}  # C_{s-1}: the shift of everything a step does before its collective ends
    acc = 0.0
    for s in steps:
        before[s] = acc
        acc += extra[s]
    for p, (file_rank, rows) in files.items():
        cur: int | None = None
        out = []
        for rec in rows:
            if not isinstance(rec, dict):
                out.append(rec)
                continue
            r = rec.get("rank", file_rank)
            s = _step(rec)
            cur = s if s is not None else cur          # an unstepped line belongs to the step around it
            if cur is None or cur not in before or "timestamp" not in rec:
                out.append(json.dumps(rec))
                continue
            t = _ts(rec["timestamp"])
            shift = before[cur]
            coll = t_coll.get((r, cur))
            ev = rec.get("event")
            after = coll is not None and t >= coll and ev != "DATA_LOAD_TIME" and ev != "GRAD_READY"
            if after:
                shift += extra[cur]
            elif r == rank and cur in delay:
                td = t_data.get((r, cur))
                if td is not None and (t > td or (phase == "data" and t >= td)):
                    shift += delay[cur]
            ex = rec.get("extra") or {}
            if ev == "ALLREDUCE" and "wait_ms" in ex:
                grow = extra[cur] - (delay[cur] if r == rank else 0.0)
                _set(rec, "wait_ms", max(0.0, float(ex["wait_ms"]) + grow))
                _set(rec, "comm_ms", float(ex["comm_ms"]) + grow)
            elif ev == "DATA_LOAD_TIME" and r == rank and phase == "data" and delay[cur]:
                _set(rec, "data_load_ms", float(ex["data_load_ms"]) + delay[cur])
            elif ev == "TRAIN_STEP" and "step_time_ms" in ex and extra[cur]:
                old = float(ex["step_time_ms"])
                _set(rec, "step_time_ms", old + extra[cur])
                if "samples_per_s" in ex:
                    _set(rec, "samples_per_s", float(ex["samples_per_s"]) * old / (old + extra[cur]))
            if "grad_ready_ts" in ex:
                rec["extra"]["grad_ready_ts"] = round(float(ex["grad_ready_ts"]) + shift / 1000.0, 6)
            rec["timestamp"] = _fmt(t + dt.timedelta(milliseconds=shift))
            out.append(json.dumps(rec))
        p.write_text("\n".join(out) + "\n")
    n = sum(1 for s in steps if extra[s] > 0)
    return {"lost_s": sum(extra.values()) / 1000.0, "steps": n}
