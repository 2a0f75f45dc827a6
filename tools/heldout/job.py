"""A small real gloo training job for held-out evaluation: varied schemas, varied faults.
Run under torchrun. Not part of the repo under test."""
import argparse, ctypes, datetime as dt, json, math, os, random, signal, sys, time

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
ap.add_argument("--names", default="default", help="event and metric names: default, alt1, alt2")
ap.add_argument("--timeout", type=float, default=5.0, help="the training group's collective timeout (s)")
ap.add_argument("--batch", type=int, default=1024)
ap.add_argument("--own-event", default="evaluate", help="the event name of the own_long fault's work")
ap.add_argument("--own-seconds", type=float, default=8.0)
ap.add_argument("--clock-offset", type=float, default=0.0, help="seconds added to the clock of hosts after the first")
ap.add_argument("--host-fmt", default="gpu-node-{i:02d}", help="host name pattern ({i}: host index)")
ap.add_argument("--jitter-ms", type=float, default=0.0, help="random per-step delay on every rank (ordinary noise)")
ap.add_argument("--warmup-steps", type=int, default=0, help="first steps slower on every rank, lr ramps up")
ap.add_argument("--stall-s", type=float, default=7.0, help="loader_stall / periodic_slow length (s)")
ap.add_argument("--every", type=int, default=10, help="periodic_slow period (steps)")
ap.add_argument("--telemetry", default="none", help="the job's own GPU/host telemetry CSV beside its logs: none, a, b")
ap.add_argument("--log-every", default="1", help="per-step events every N steps; a comma list is taken by rank (rank r: item r %% len)")
ap.add_argument("--warmup-s", type=float, default=0.15, help="the first warm-up step's extra seconds (falls linearly)")
ap.add_argument("--lr-decay-at", type=float, default=0.0, help="fraction of the steps after which lr drops 10x (a schedule, healthy)")
ap.add_argument("--pylog-fmt", default="a", help="the pylog schema's logging format: a, b, c")
ap.add_argument("--skew", type=float, default=4.0, help="batch_skew: batch multiple; grad_skew: loss multiple on the fault rank")
a = ap.parse_args()
if a.schema.startswith("mix:"):    # mixed schemas in one run: rank r writes in item r % len
    _mix = a.schema[4:].split(",")
    a.schema = _mix[int(os.environ["RANK"]) % len(_mix)]
_every = [int(v) for v in a.log_every.split(",")]
LOG_EVERY = _every[int(os.environ["RANK"]) % len(_every)]
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

# renamed events and metrics (what other trainers call the same things)
NAMES = {
    "default": {},
    "alt1": {"data_load": "input_wait", "data_load_ms": "input_wait_ms", "allreduce": "grad_sync", "comm_ms": "sync_ms",
             "wait_ms": "barrier_ms", "train_step": "iteration", "step_time_ms": "iter_time_ms", "compute_ms": "fwd_bwd_ms",
             "step": "global_step", "barrier": "barrier", "barrier_ms": "barrier_wait_ms"},
    "alt3": {"data_load": "next_batch", "data_load_ms": "fetch_ms", "allreduce": "grad_allreduce", "comm_ms": "collective_ms",
             "wait_ms": "idle_ms", "train_step": "step_end", "step_time_ms": "duration_ms", "compute_ms": "fwd_bwd_ms",
             "step": "iteration", "barrier": "sync_point", "barrier_ms": "held_ms"},
    "alt2": {"data_load": "fetch_batch", "data_load_ms": "data_wait_ms", "allreduce": "sync", "comm_ms": "allreduce_time_ms",
             "wait_ms": "barrier_wait_ms", "train_step": "optimizer_step", "step_time_ms": "step_duration_ms",
             "compute_ms": "compute_time_ms", "step": "iter", "barrier": "rendezvous_barrier", "barrier_ms": "blocked_ms"},
}[a.names]


def nm(k):
    return NAMES.get(k, k)

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
node_rank = int(os.environ.get("GROUP_RANK", "0"))
local_rank = int(os.environ.get("LOCAL_RANK", rank))
# two launchers (torchrun --nnodes 2): the host is the launcher's node; else split ranks over --hosts
host_i = node_rank if int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1 else (rank * a.hosts) // world
host = a.host_fmt.format(i=host_i)
CLOCK = a.clock_offset if host_i > 0 else 0.0
os.makedirs(a.out, exist_ok=True)
path = os.path.join(a.out, a.file_pattern.format(rank=rank, host=host))
os.makedirs(os.path.dirname(path), exist_ok=True)
import logging
if a.schema == "pylog":            # plain Python logging text on stderr only: no JSON file of its own
    log = None
    _fmt = {"a": "%(asctime)s %(levelname)s %(name)s: [rank %(rank)d] %(message)s",
            "b": "[%(asctime)s][%(name)s][%(levelname)s] - rank=%(rank)d %(message)s",
            "c": "%(levelname)s:%(name)s:%(message)s"}[a.pylog_fmt]
    _h = logging.StreamHandler(sys.stderr)
    _h.setFormatter(logging.Formatter(_fmt))
    PYLOG = logging.getLogger("trainer")
    PYLOG.addHandler(_h); PYLOG.setLevel(logging.INFO); PYLOG.propagate = False
else:
    log = open(path, "a", buffering=1)
if a.stderr_into_log and log is not None:
    os.dup2(log.fileno(), 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)


def emit(level, event, msg, **f):
    now = time.time() + CLOCK
    event = nm(event)
    f = {nm(k): v for k, v in f.items()}
    s = a.schema
    if s == "pylog":
        kv = " ".join(f"{k}={round(v, 4) if isinstance(v, float) else v}" for k, v in f.items())
        lvl = {"WARN": logging.WARNING, "ERROR": logging.ERROR, "DEBUG": logging.DEBUG}.get(level, logging.INFO)
        PYLOG.getChild(event.lower()).log(lvl, f"{msg} {kv}".rstrip(), extra={"rank": rank})
        return
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
    elif s == "bunyan":        # pino/bunyan: numeric level, epoch-ms time, msg, name
        rec = {"level": {"DEBUG": 20, "INFO": 30, "WARN": 40, "ERROR": 50}.get(level, 30), "time": int(now * 1000),
               "pid": os.getpid(), "hostname": host, "name": event.lower(), "msg": msg, "node_rank": 0, "rank": rank, **f}
    elif s == "otel":          # OpenTelemetry log data model, as a JSON exporter writes it
        rec = {"Timestamp": str(int(now * 1e9)), "SeverityText": level, "Body": msg,
               "Resource": {"host.name": host, "service.name": "trainer"},
               "Attributes": {"event.name": event.lower(), "rank": rank, **f}}
    elif s == "nested_ms":
        conv = {}
        for k, v in f.items():
            if k.endswith("_ms") and isinstance(v, (int, float)):
                conv[k[:-3] + "_sec"] = v / 1000.0
            else:
                conv[k] = v
        rec = {"ts_ms": int(now * 1000), "sev": level[0], "kind": event.lower(), "who": {"rank": rank, "node": host},
               "text": msg, "m": conv}
    elif s == "gelf":          # Graylog GELF 1.1: epoch-s timestamp, syslog numeric level, extras prefixed with _
        rec = {"version": "1.1", "host": host, "short_message": msg, "timestamp": round(now, 6),
               "level": {"DEBUG": 7, "INFO": 6, "WARN": 4, "ERROR": 3}.get(level, 6), "_logger": event.lower(),
               "_rank": rank, **{"_" + k: v for k, v in f.items()}}
    elif s == "own":           # a schema of this batch's own: short keys, epoch-s float, nested source and values
        rec = {"t": round(now, 6), "lvl": level[0], "src": {"r": rank, "h": host, "pid": os.getpid()},
               "what": event.lower(), "note": msg, "kv": f}
    elif s == "metrics_nested":  # metrics grouped by kind, two levels deep
        grp = {"time": {}, "train": {}, "other": {}}
        for k, v in f.items():
            if k.endswith("_ms"):
                grp["time"][k] = v
            elif k in ("loss", "grad_norm", "lr", "samples_per_s", "val_acc"):
                grp["train"][k] = v
            else:
                grp["other"][k] = v
        rec = {"ts": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="microseconds"),
               "severity": level, "logger": f"trainer.{event.lower()}", "msg": msg,
               "ctx": {"rank": rank, "host": host, "world": world}, "metrics": grp}
    elif s == "clef":          # Serilog compact JSON (CLEF): @t, @l absent for Information, @mt template, PascalCase props
        pas = lambda k: "".join(w[:1].upper() + w[1:] for w in k.split("_"))
        rec = {"@t": dt.datetime.fromtimestamp(now, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f0Z"),
               "@mt": "{EventName}: " + msg.replace("{", "{{").replace("}", "}}"), "EventName": event.lower(),
               "SourceContext": "Trainer.Loop", "Rank": rank, "MachineName": host, **{pas(k): v for k, v in f.items()}}
        if level != "INFO":
            rec["@l"] = {"WARN": "Warning", "ERROR": "Error", "DEBUG": "Debug"}.get(level, level.title())
        if "error" in f:
            rec["@x"] = f"{f.get('exc_type', 'Exception')}: {f['error']}"
    elif s == "logfmt_json":   # a JSON envelope whose message is logfmt: key=value ...
        kv = " ".join(f"{k}={json.dumps(v) if isinstance(v, str) and (' ' in v or not v) else v}"
                      for k, v in {"event": event.lower(), "rank": rank, "host": host, **f}.items())
        rec = {"ts": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat(timespec="milliseconds"),
               "level": level.lower(), "logger": "train", "message": f"{kv} msg={json.dumps(msg)}"}
    elif s == "ctx_lvl":       # numeric level (30/40/50), a context object, the event as `op`, values under `data`
        rec = {"time": dt.datetime.fromtimestamp(now).astimezone().isoformat(timespec="milliseconds"),
               "lvl": {"DEBUG": 20, "INFO": 30, "WARN": 40, "ERROR": 50}.get(level, 30), "op": event.lower(), "text": msg,
               "ctx": {"rank": rank, "local_rank": local_rank, "node_rank": node_rank, "node": host, "world": world},
               "data": f}
    else:
        raise SystemExit(s)
    log.write(json.dumps(rec, default=str) + "\n")


if RESTART:   # a restarted attempt: the launcher's store still holds the first attempt's addresses; keys of its own
    _st = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                        is_master=rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True",
                        timeout=dt.timedelta(seconds=120))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt{RESTART}", _st), rank=rank, world_size=world,
                            timeout=dt.timedelta(seconds=120))
else:
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=120))
grp = dist.new_group(backend="gloo", timeout=dt.timedelta(seconds=a.timeout))
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
tel = None
if a.telemetry != "none":  # the job's own GPU/host telemetry, one CSV per rank beside its logs (a CPU job: modelled values)
    tel = open(os.path.join(a.out, f"gpu_stats_rank{rank}.csv"), "w", buffering=1)
    tel.write({"a": "timestamp,rank,host,gpu_temp_c,gpu_util_pct,sm_clock_mhz,power_w,mem_used_mb\n",
               "b": "time,hostname,global_rank,temperature,utilization,clocks_graphics,power_draw\n"}[a.telemetry])
hot = 0.0


def telemetry(step, step_ms):
    global hot
    if tel is None:
        return
    if a.fault == "thermal" and rank == a.fault_rank and step >= a.fault_step:
        hot = min(1.0, hot + 0.25)
    temp = 58 + random.random() * 3 + hot * 32
    clk = 1410 - hot * 660 + random.random() * 15
    util = 97 - random.random() * 3
    pw = 240 + random.random() * 20 - hot * 90
    ts = dt.datetime.fromtimestamp(time.time() + CLOCK, dt.timezone.utc)
    if a.telemetry == "a":
        tel.write(f"{ts.isoformat(timespec='milliseconds').replace('+00:00', 'Z')},{rank},{host},{temp:.1f},{util:.0f},{clk:.0f},{pw:.1f},{1800 + step:.0f}\n")
    else:
        tel.write(f"{ts.strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]},{host},{rank},{temp:.0f} C,{util:.0f} %,{clk:.0f} MHz,{pw:.2f} W\n")


emit("INFO", "run_start", f"starting world={world}", world_size=world, host=host, pid=os.getpid(), restart=RESTART)
t_run = time.time()
for step in range(a.steps):
    t0 = time.perf_counter()
    x = torch.randn(a.batch, 256)
    y = teacher(x).argmax(1)
    if a.fault == "batch_skew" and rank == a.fault_rank:
        x = torch.randn(int(a.batch * a.skew), 256)                  # this rank's loader yields a larger batch
        y = teacher(x).argmax(1)
    if a.warmup_steps and step < a.warmup_steps:
        time.sleep(a.warmup_s * (a.warmup_steps - step) / a.warmup_steps)   # warmup: every rank slower at first
    if a.jitter_ms:
        time.sleep(random.random() * a.jitter_ms / 1000.0)
    if a.fault == "loader_stall" and rank == a.fault_rank and step == a.fault_step:
        time.sleep(a.stall_s)                                       # one long stall of this rank's input pipeline
    if a.fault == "data_slow" and rank == a.fault_rank:
        time.sleep(float(os.environ.get("DATA_SLOW_S", "0.25")))   # a slow reader on this rank
    t_data = time.perf_counter()
    data_ms = (t_data - t0) * 1000
    if a.fault == "straggler" and rank == a.fault_rank:
        time.sleep(float(os.environ.get("STRAGGLE_S", "0.06")))
    if a.fault == "eval_gap" and rank == a.fault_rank and step in (a.fault_step, a.fault_step + 8):
        te = time.perf_counter()
        time.sleep(2.5)
        emit("INFO", "evaluate", f"evaluation finished at step {step}", step=step, duration_ms=round((time.perf_counter() - te) * 1000, 1), val_acc=0.5)
    if a.fault == "compute_slow" and rank == a.fault_rank:
        w = torch.randn(1024, 1024)                                  # extra work of its own each step
        for _ in range(int(os.environ.get("EXTRA_MATMULS", "6"))):
            w = torch.tanh(w @ w / 32.0)
    if a.fault == "periodic_slow" and rank == a.fault_rank and step % a.every == a.every - 1:
        time.sleep(a.stall_s)                                       # periodic GC / checkpoint, nothing logged
    if a.fault == "oom_kill" and rank == a.fault_rank and step == a.fault_step:
        import threading                                            # killed from outside while inside the step
        threading.Timer(0.02, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        _hog = [bytearray(64 << 20) for _ in range(4)]
    if a.fault == "own_long" and rank == a.fault_rank and step in (a.fault_step, a.fault_step + 6):
        te = time.perf_counter()
        time.sleep(a.own_seconds)
        emit("INFO", a.own_event, f"{a.own_event} done at step {step}", step=step, elapsed_s=round(time.perf_counter() - te, 3))
    if a.fault == "barrier_block" and step % 5 == 2:
        if rank == a.fault_rank:
            time.sleep(float(os.environ.get("BARRIER_HOLD_S", "2.0")))   # arrives late at the barrier
        tb = time.perf_counter()
        dist.barrier(group=grp)
        emit("INFO", "barrier", f"barrier passed step={step}", step=step, barrier_ms=round((time.perf_counter() - tb) * 1000, 2))
    if a.fault == "thermal" and rank == a.fault_rank and step >= a.fault_step:
        time.sleep(float(os.environ.get("THERMAL_S", "0.12")) * min(1.0, 0.25 * (step - a.fault_step + 1)))  # clocks down: slower steps
    if a.fault == "alloc_fail" and rank == a.fault_rank and step == a.fault_step:
        torch.empty(1 << 46, dtype=torch.uint8)                         # the allocator refuses: RuntimeError
    if a.fault == "assert_text" and rank == a.fault_rank and step == a.fault_step:
        raise AssertionError(f"Rank {rank}: found NaN in local grad norm in backward pass before data-parallel communication collective")
    if a.fault == "abort" and rank == a.fault_rank and step == a.fault_step:
        emit("WARN", "watchdog", "internal state inconsistent, aborting", step=step)
        log and log.flush()
        os.abort()
    if a.fault == "node_exit0" and node_rank == 1 and step == a.fault_step:
        log and log.flush()                                               # a whole node leaves early, cleanly
        os._exit(0)
    if a.fault == "loader_worker" and rank == a.fault_rank and step == a.fault_step:
        class _Killed(torch.utils.data.Dataset):
            def __len__(self):
                return 4
            def __getitem__(self, i):
                os.kill(os.getpid(), signal.SIGKILL)                     # the loader's worker process dies
        for _ in torch.utils.data.DataLoader(_Killed(), num_workers=1):
            pass
    if a.fault == "fail_once" and rank == a.fault_rank and step == a.fault_step and RESTART == 0:
        raise RuntimeError(f"shard reader lost its connection at step {step}: peer reset")   # the restart succeeds
    if a.fault == "mem_error" and rank == a.fault_rank and step == a.fault_step:
        raise MemoryError(f"cannot allocate pinned host buffer of {1 << 34} bytes")
    if a.fault == "barrier_stuck" and rank == a.fault_rank and step == a.fault_step:
        emit("INFO", "checkpoint", "waiting for all ranks before saving a checkpoint", step=step)
        dist.barrier()                                               # its peers never enter it: they wait in all_reduce
    if a.fault == "exc_plain" and rank == a.fault_rank and step == a.fault_step:
        raise RuntimeError(f"CUDA-like failure simulated: index {step * 7} out of range in embedding lookup")
    if a.fault == "hang" and rank == a.fault_rank and step == a.fault_step:
        emit("INFO", "prefetch", "waiting for prefetch worker", step=step)
        time.sleep(3600)
    if a.fault == "exit0" and rank == a.fault_rank and step == a.fault_step:
        log and log.flush()
        os._exit(0)
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
    if a.fault == "grad_skew" and rank == a.fault_rank:
        loss = loss * a.skew                                         # this rank's gradients persistently larger
    opt.zero_grad()
    loss.backward()
    if a.fault == "nan_grad" and rank == a.fault_rank and step == a.fault_step:
        next(iter(model.parameters())).grad.view(-1)[7] = float("nan")   # one bad gradient value, spread by all-reduce
    local_gn = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    t_comp = time.perf_counter()
    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
    tw = time.perf_counter()
    dist.all_reduce(torch.zeros(1), group=grp)
    wait_ms = (time.perf_counter() - tw) * 1000
    if a.fault == "coll_raise" and rank == a.fault_rank and step == a.fault_step:
        dist.all_reduce(flat, op=dist.ReduceOp.BAND, group=grp)     # raises inside the collective on this rank
    if a.fault == "coll_mismatch" and rank == a.fault_rank and step == a.fault_step:
        flat = flat[: flat.numel() // 2].contiguous()               # a smaller buffer than its peers'
    if a.fault == "comm_heavy":
        for _ in range(int(os.environ.get("COMM_REPEAT", "6"))):       # every rank: far more traffic than compute
            dist.all_reduce(flat.clone(), group=grp)
    if a.fault == "gather_mismatch" and rank == a.fault_rank and step == a.fault_step:
        outs = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(outs, flat, group=grp)                        # its peers are in all_reduce
    dist.all_reduce(flat, group=grp)
    comm_ms = (time.perf_counter() - tw) * 1000
    flat /= world
    i = 0
    for p in model.parameters():
        n = p.numel(); p.grad.copy_(flat[i:i + n].view_as(p)); i += n
    if a.warmup_steps:
        for g in opt.param_groups:
            g["lr"] = 0.05 * min(1.0, (step + 1) / a.warmup_steps)
    if a.lr_decay_at and step >= int(a.steps * a.lr_decay_at):
        for g in opt.param_groups:                                   # the schedule's late step decay
            g["lr"] = 0.05 * 0.1
    if a.fault == "late_plateau" and step >= int(a.steps * 0.5):
        for g in opt.param_groups:
            g["lr"] = 1e-5
    opt.step()
    step_ms = (time.perf_counter() - t0) * 1000
    lv = loss.item()
    telemetry(step, step_ms)
    if step % LOG_EVERY and step != a.steps - 1:
        continue
    emit("INFO", "data_load", f"batch ready step={step}", step=step, data_load_ms=round(data_ms, 2))
    emit("INFO", "allreduce", f"allreduce step={step}", step=step, comm_ms=round(comm_ms, 2), wait_ms=round(wait_ms, 2), collective="allreduce", tensor_size_mb=round(flat.numel() * 4 / 1e6, 3))
    emit("INFO", "train_step", f"step {step} loss {lv:.4f}", step=step, loss=lv, batch_size=len(x),
         grad_norm=local_gn, step_time_ms=round(step_ms, 2),
         compute_ms=round((t_comp - t_data) * 1000, 2), samples_per_s=round(len(x) / (step_ms / 1000), 1), lr=opt.param_groups[0]["lr"])
emit("INFO", "run_end", f"done in {time.time() - t_run:.1f}s", steps=a.steps)
dist.destroy_process_group()
