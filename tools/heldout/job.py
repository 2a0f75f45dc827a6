"""A small real gloo training job for held-out evaluation: varied schemas, varied faults.
Run under torchrun. Not part of the repo under test."""
import argparse, ctypes, datetime as dt, json, math, os, signal, sys, time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--schema", default="seed")
ap.add_argument("--fault", default="none")
ap.add_argument("--fault-rank", type=int, default=1)
ap.add_argument("--fault-step", type=int, default=15)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--out", required=True)
ap.add_argument("--stderr-into-log", action="store_true")
ap.add_argument("--hosts", type=int, default=1)
ap.add_argument("--file-pattern", default="rank_{rank}.jsonl")
a = ap.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
host = f"gpu-node-{(rank * a.hosts) // world:02d}"
os.makedirs(a.out, exist_ok=True)
path = os.path.join(a.out, a.file_pattern.format(rank=rank, host=host))
os.makedirs(os.path.dirname(path), exist_ok=True)
log = open(path, "a", buffering=1)
if a.stderr_into_log:
    os.dup2(log.fileno(), 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)


def emit(level, event, msg, **f):
    now = time.time()
    s = a.schema
    if s == "seed":
        rec = {"timestamp": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat().replace("+00:00", "Z"),
               "rank": rank, "level": level, "event": event.upper(), "message": msg, "extra": f}
    elif s == "python_json":   # python-json-logger: asctime, levelname, name, message, extras at top level
        rec = {"asctime": dt.datetime.fromtimestamp(now).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3],
               "levelname": {"WARN": "WARNING"}.get(level, level), "name": f"trainer.{event.lower()}",
               "message": msg, "global_rank": rank, "hostname": host, **f}
    elif s == "structlog":
        rec = {"event": msg, "level": level.lower(), "timestamp": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(),
               "logger": event.lower(), "rank": rank, **f}
    elif s == "loguru":
        rec = {"text": f"{dt.datetime.fromtimestamp(now).isoformat()} | {level} | {msg}\n",
               "record": {"time": {"repr": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(), "timestamp": now},
                          "level": {"name": {"WARN": "WARNING"}.get(level, level), "no": 20},
                          "message": msg, "name": "train", "function": event.lower(),
                          "extra": {"rank": rank, "node": host, **f}, "process": {"id": os.getpid(), "name": "MainProcess"}}}
    elif s == "ecs":
        rec = {"@timestamp": dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
               "log": {"level": level.lower(), "logger": "train"}, "message": msg,
               "event": {"action": event.lower(), "dataset": "training"},
               "host": {"name": host}, "labels": {"rank": str(rank)}, "training": f}
    elif s == "nested_ms":
        conv = {}
        for k, v in f.items():
            if k.endswith("_ms") and isinstance(v, (int, float)):
                conv[k[:-3] + "_sec"] = v / 1000.0
            else:
                conv[k] = v
        rec = {"ts_ms": int(now * 1000), "sev": level[0], "kind": event.lower(), "who": {"rank": rank, "node": host},
               "text": msg, "m": conv}
    else:
        raise SystemExit(s)
    log.write(json.dumps(rec, default=str) + "\n")


dist.init_process_group("gloo", timeout=dt.timedelta(seconds=120))
grp = dist.new_group(backend="gloo", timeout=dt.timedelta(seconds=5))
torch.manual_seed(1234 + rank)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
for p in model.parameters():
    dist.broadcast(p.data, 0)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
teacher = torch.nn.Linear(256, 10)
torch.manual_seed(99)
for p in teacher.parameters():
    p.data.normal_()
emit("INFO", "run_start", f"starting world={world}", world_size=world, host=host, pid=os.getpid())
t_run = time.time()
for step in range(a.steps):
    t0 = time.perf_counter()
    x = torch.randn(1024, 256)
    y = teacher(x).argmax(1)
    t_data = time.perf_counter()
    data_ms = (t_data - t0) * 1000
    if a.fault == "straggler" and rank == a.fault_rank:
        time.sleep(float(os.environ.get("STRAGGLE_S", "0.06")))
    if a.fault == "eval_gap" and rank == a.fault_rank and step in (a.fault_step, a.fault_step + 8):
        te = time.perf_counter()
        time.sleep(2.5)
        emit("INFO", "evaluate", f"evaluation finished at step {step}", step=step, duration_ms=round((time.perf_counter() - te) * 1000, 1), val_acc=0.5)
    if a.fault == "exc_custom" and rank == a.fault_rank and step == a.fault_step:
        try:
            raise ValueError(f"corrupt sample in shard 17 at offset {step * 4096}")
        except ValueError as e:
            emit("ERROR", "batch_failed", "could not decode batch", step=step, exc_type=type(e).__name__, error=str(e))
            raise
    if a.fault == "exit_code" and rank == a.fault_rank and step == a.fault_step:
        emit("WARN", "shard_check", "stopping: shard checksum differs", step=step)
        sys.exit(3)
    if a.fault == "sigkill" and rank == a.fault_rank and step == a.fault_step:
        os.kill(os.getpid(), signal.SIGKILL)
    if a.fault == "segv" and rank == a.fault_rank and step == a.fault_step:
        ctypes.string_at(0)
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    if a.fault == "nan" and rank == a.fault_rank and step == a.fault_step:
        loss = loss * float("nan")
    opt.zero_grad()
    loss.backward()
    local_gn = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    t_comp = time.perf_counter()
    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
    tw = time.perf_counter()
    dist.all_reduce(torch.zeros(1), group=grp)
    wait_ms = (time.perf_counter() - tw) * 1000
    dist.all_reduce(flat, group=grp)
    comm_ms = (time.perf_counter() - tw) * 1000
    flat /= world
    i = 0
    for p in model.parameters():
        n = p.numel(); p.grad.copy_(flat[i:i + n].view_as(p)); i += n
    if a.fault == "late_plateau" and step >= int(a.steps * 0.5):
        for g in opt.param_groups:
            g["lr"] = 1e-5
    opt.step()
    step_ms = (time.perf_counter() - t0) * 1000
    lv = loss.item()
    emit("INFO", "data_load", f"batch ready step={step}", step=step, data_load_ms=round(data_ms, 2))
    emit("INFO", "allreduce", f"allreduce step={step}", step=step, comm_ms=round(comm_ms, 2), wait_ms=round(wait_ms, 2), collective="allreduce", tensor_size_mb=round(flat.numel() * 4 / 1e6, 3))
    emit("INFO", "train_step", f"step {step} loss {lv:.4f}", step=step, loss=lv,
         grad_norm=local_gn, step_time_ms=round(step_ms, 2),
         compute_ms=round((t_comp - t_data) * 1000, 2), samples_per_s=round(1024 / (step_ms / 1000), 1), lr=opt.param_groups[0]["lr"])
emit("INFO", "run_end", f"done in {time.time() - t_run:.1f}s", steps=a.steps)
dist.destroy_process_group()
