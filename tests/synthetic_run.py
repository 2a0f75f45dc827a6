"""A small synthetic multi-host run in the seed schema, for the HTML, Perfetto and lint tests.

Physical timing, as in a synchronous data-parallel step: every rank loads its batch and computes,
the all-reduce returns on all ranks when the last one arrived plus the transfer, so comm_ms and
wait_ms follow from the arrivals. Rank `hot` overheats from step `hot_from` (92 °C, SM clock
1.2 GHz, utilisation 45 %) and computes slower: it becomes the straggler and the others wait.

The last lines carry hostile text (HTML/JS payloads, an API key) to test escaping and redaction.
Switches add the log-hygiene faults `forensics lint` must find.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import random
from pathlib import Path

T0 = dt.datetime(2025, 6, 12, 14, 0, 0, tzinfo=dt.timezone.utc)
XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = '"><img src=x onerror=alert(2)>'
SECRET = "sk-abcdefghijklmnopqrstuvwx0123456789"


def _ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def write_run(root: Path, *, ranks: int = 8, hosts: int = 2, steps: int = 60, hot: int | None = 5, hot_from: int = 30,
              gpu_every: int = 8, first_step: int = 0, flood: int = 0, tracebacks: bool = False,
              no_rank_file: bool = False, flat_file: bool = False, dup_rank_host: bool = False,
              hostile: bool = True, seed: int = 0) -> Path:
    """Write the logs under root/logs/<host>/rank_<r>.jsonl and return root/logs."""
    rng = random.Random(seed)
    logs = root / "logs"
    per_host = max(1, ranks // hosts)
    host_of = {r: f"node-{chr(ord('a') + min(r // per_host, hosts - 1))}" for r in range(ranks)}
    lines: dict[int, list[str]] = {r: [] for r in range(ranks)}

    def emit(r: int, t: dt.datetime, level: str, event: str, message: str, extra: dict, host: str | None = None) -> None:
        rec = {"timestamp": _ts(t), "rank": r, "host": host or host_of[r], "level": level, "event": event,
               "message": message, "extra": extra}
        lines[r].append(json.dumps(rec))

    start = T0
    for s in range(first_step, first_step + steps):
        arrivals = {}
        for r in range(ranks):
            data = 20.0 + rng.uniform(-2, 2)
            hot_now = hot is not None and r == hot and s >= hot_from
            compute = (320.0 if hot_now else 200.0) + rng.uniform(-5, 5)
            arrivals[r] = (data, compute)
        last = max(d + c for d, c in arrivals.values())
        xfer = 30.0
        for r in range(ranks):
            data, compute = arrivals[r]
            arrive = data + compute
            wait = last - arrive
            comm = wait + xfer
            end = last + xfer + 5.0
            t_data = start + dt.timedelta(milliseconds=data)
            t_ready = start + dt.timedelta(milliseconds=arrive)
            t_comm = start + dt.timedelta(milliseconds=last + xfer)
            t_end = start + dt.timedelta(milliseconds=end)
            emit(r, t_data, "INFO", "DATA_LOAD_TIME", f"step={s} data_load_ms={data:.1f}",
                 {"step": s, "data_load_ms": round(data, 3), "disk_read_mbps": 1200.0})
            emit(r, t_ready, "INFO", "GRAD_READY", f"step={s} grads ready",
                 {"step": s, "grad_ready_ts": t_ready.timestamp()})
            emit(r, t_comm, "INFO", "ALLREDUCE", f"step={s} allreduce comm_ms={comm:.1f} wait_ms={wait:.1f}",
                 {"step": s, "collective": "allreduce", "comm_ms": round(comm, 3), "wait_ms": round(wait, 3),
                  "tensor_size_mb": 512})
            warm = s - first_step < 10
            lr = 1e-4 * min(1.0, (s - first_step + 1) / 10)
            loss = 1.0 + 2.5 * math.exp(-(s - first_step) / 25) + rng.uniform(-0.03, 0.03) + (0.3 * rng.random() if warm else 0)
            emit(r, t_end, "INFO", "TRAIN_STEP", f"step={s} loss={loss:.4f} lr={lr:.2e}",
                 {"step": s, "loss": round(loss, 5), "lr": lr, "step_time_ms": round(end, 3),
                  "samples_per_s": round(32 / end * 1000, 2), "stage": "warmup" if warm else "stable"})
            if tracebacks and r == 0:
                emit(r, t_end, "ERROR", "TRACEBACK", "Traceback (most recent call last):\n  File \"train.py\", line 10, in step\n"
                     "ValueError: ignored", {"step": s})
            if (s - first_step) % gpu_every == 0:
                hot_now = hot is not None and r == hot and s >= hot_from
                emit(r, t_end + dt.timedelta(milliseconds=1), "INFO", "GPU_STATS", "gpu stats",
                     {"gpu_util": 45.0 if hot_now else 96.0 + rng.uniform(-1, 1),
                      "temp_c": 92.0 if hot_now else 65.0 + rng.uniform(-1, 1),
                      "sm_clock_mhz": 1200 if hot_now else 1980, "mem_alloc_mb": 40500})
        start = start + dt.timedelta(milliseconds=last + xfer + 5.0)

    end_t = start
    if flood:
        for i in range(flood):
            emit(1, T0 + dt.timedelta(milliseconds=50 * i + 7), "ERROR", "GRAD_NORM",
                 f"grad_norm={40 + i % 7} exceeds threshold=10.0", {"grad_norm": 40 + i % 7, "threshold": 10.0})
        emit(2, end_t - dt.timedelta(seconds=3), "WARN", "COMM_RETRY", "retrying allreduce", {})
    if hostile:
        emit(0, end_t - dt.timedelta(seconds=2), "WARN", "GRAD_NORM", f"grad_norm=45.6 exceeds threshold=10.0 {XSS_SCRIPT}",
             {"grad_norm": 45.6, "threshold": 10.0, "param_group": XSS_IMG})
        emit(1, end_t - dt.timedelta(seconds=1), "ERROR", "DATA_LOAD_ERROR",
             f"cannot read shard s3://bucket/x with api_key={SECRET} {XSS_IMG}", {"path": "s3://bucket/x"})
    for r in range(ranks):
        d = logs / host_of[r]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"rank_{r}.jsonl").write_text("\n".join(lines[r]) + "\n")
    if dup_rank_host:
        # rank 0 appears again on another host: a local rank logged as if it were global
        d = logs / "node-z"
        d.mkdir(parents=True, exist_ok=True)
        (d / "rank_0.jsonl").write_text(json.dumps({"timestamp": _ts(T0), "rank": 0, "host": "node-z", "level": "INFO",
                                                    "event": "RUN_CONFIG", "message": "world_size=8", "extra": {}}) + "\n")
    if no_rank_file:
        recs = [json.dumps({"timestamp": _ts(T0 + dt.timedelta(seconds=i)), "level": "INFO", "event": "HEARTBEAT",
                            "message": "alive", "extra": {}}) for i in range(20)]
        (logs / "launcher.jsonl").write_text("\n".join(recs) + "\n")
    if flat_file:
        recs = [json.dumps({"step": s, "loss": 2.0 - s / 100, "learning_rate": 1e-4,
                            "timestamp": _ts(T0 + dt.timedelta(seconds=s))}) for s in range(30)]
        (logs / "node-a" / "rank_0_trainer.jsonl").write_text("\n".join(recs) + "\n")
    return logs


def make_store(root: Path, **kw) -> Path:
    """Write the logs and ingest them; return the store path."""
    from forensics.ingest import ingest

    logs = write_run(root, **kw)
    store = root / "run.forensics"
    ingest([str(logs)], store)
    return store


SAMPLE_LOGS = Path(__file__).resolve().parents[1] / "sample_logs"


def sample_scenarios() -> list[Path]:
    """The scenario folders of sample_logs/ (empty when they are not there)."""
    if not SAMPLE_LOGS.is_dir():
        return []
    return sorted(d for d in SAMPLE_LOGS.iterdir() if d.is_dir() and (d / "expected.toml").is_file())


def ingest_scenario(d: Path, out: Path) -> Path:
    """Ingest a sample_logs scenario (its logs/ folder, or its files but expected.toml)."""
    from forensics.ingest import ingest

    src = d / "logs" if (d / "logs").is_dir() else d
    ingest([str(p) for p in sorted(src.iterdir()) if p.name != "expected.toml"], out)
    return out
