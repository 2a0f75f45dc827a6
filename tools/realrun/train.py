#!/usr/bin/env python3
"""A small but real multi-process torch.distributed (gloo, CPU) training run that writes
seed-schema JSON lines per rank, with faults injected by scenario.

Two ways to run it:

  # built-in launcher (what make_fixtures.py uses): spawns WORLD worker processes with the
  # torchrun environment (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK), captures each
  # worker's stdout+stderr into OUT/console.log with torchrun-style "[rankN]: " prefixes,
  # and does NOT tear the job down when one worker dies (so survivors really time out).
  python tools/realrun/train.py --scenario straggler --out /tmp/run

  # or under torchrun (no console capture; torchrun kills the survivors when one rank fails):
  torchrun --nproc-per-node 4 tools/realrun/train.py --worker --scenario straggler --out /tmp/run

Everything timed is measured with time.perf_counter() around the real operation; timestamps are
time.time() at the moment the line is written. Only the thermal scenario's GPU_STATS readings
(gpu_util, temp_c, sm_clock_mhz) and the CUDA_OOM allocator numbers are synthetic (this is a CPU
box); see tools/realrun/README.md.

Per step, per rank:
  DATA_LOAD_TIME  next(DataLoader) wall time; disk_read_mbps = bytes pread() from the shard / that time
  GRAD_READY      grad_ready_ts = time.time() right after loss.backward() (+ injected compute delay)
  ALLREDUCE       two real collectives on a gloo group with a short timeout:
                    1. all_reduce(MAX) of one float64 (this rank's grad_ready_ts): it cannot finish
                       before the last rank has arrived, so its duration is wait_ms (time spent
                       waiting for the slowest peer, plus the small latency of the op itself);
                    2. all_reduce(SUM) of the flattened gradients (xfer_ms).
                  comm_ms = wait_ms + xfer_ms. peer_lag_ms = (latest arrival - own arrival), from
                  the exchanged clocks (same host, so same clock) - a cross-check of wait_ms.
  TRAIN_STEP      "step=N loss=X lr=Y", step_time_ms, samples_per_s (this rank), stage, compute_ms
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

# --------------------------------------------------------------------------------------------
# scenarios: what is injected, on which rank, from which step (0-based steps)
# --------------------------------------------------------------------------------------------
SCENARIOS: dict[str, dict] = {
    "healthy": {},
    "straggler": {"slow_rank": 2, "slow_ms": 40.0, "slow_from": 0},
    "data_skew": {"io_rank": 1, "io_mbps": 32.0},          # shard reads capped at 32 MB/s
    "thermal": {"hot_rank": 3, "hot_from": 40, "hot_ms": 50.0, "heat_from": 25},
    "rank_dies": {"oom_rank": 1, "oom_step": 50, "oom_linger_s": 8.0},  # peers really time out
    "rank_dies_fast": {"oom_rank": 1, "oom_step": 50},  # exits at once: gloo peers see a reset
    "hang": {"hang_rank": 3, "hang_step": 45, "hang_s": 60.0},
    "grad_spike": {"spike_step": 60, "lr_mult": 100.0},
    "lora_vanishing": {"lora": True},
    # one simulated host's network is degraded from net_from: its ranks feed every gradient
    # all_reduce late, chunk by chunk, so EVERY rank's collective time rises alike; only that
    # host's own NIC counters (SYNTHETIC, --net-event / --net-names) show why. Needs --hosts >= 2.
    "net_host": {"net_host": 1, "net_from": 15, "net_ms": 60.0},
    # pause_rank does real work of its own (an evaluation loop over its shard, --pause-s long) after
    # the steps in pause_steps and logs it under --pause-event; its peers wait in the next
    # all_reduce. Needs --timeout above --pause-s.
    "rank_pause": {"pause_rank": 0, "pause_steps": (12, 27), "pause_s": 8.0},
}
NET_CHUNKS = 4

D_IN, HIDDEN, N_CLS = 512, 384, 10
SHARD_SAMPLES = 4096
REC_FLOATS = D_IN + 1              # features + label (as float) per record, 2052 bytes
WARMUP_STEPS = 10
BASE_LR = 0.05
GRAD_NORM_THRESHOLD = 10.0
CKPT_EVERY = 25
HOST_STATS_EVERY = 10
GPU_STATS_EVERY = 5
NET_STATS_EVERY = 5


def iso(ts: float) -> str:
    ms = int(round(ts * 1000.0))
    d = dt.datetime.fromtimestamp(ms // 1000, dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


# --schema: how the records are written (the same measurements, other names and layouts)
#   seed   the seed schema: {"timestamp","rank","level","event","message","extra":{...}}
#   lower  lower-case event names, the summary event is "iteration" and the step key "iteration"
#   flat   metrics at the top level of the record instead of inside "extra"
SCHEMAS = ("seed", "lower", "flat")
_LOWER_EVENTS = {"TRAIN_STEP": "iteration", "DATA_LOAD_TIME": "data_load", "GRAD_READY": "grad_ready",
                 "ALLREDUCE": "allreduce"}


class JsonlLog:
    """One JSON object per line; line-buffered so a crash (os._exit) loses nothing written.

    `clock_offset_s` is added to every wall-clock reading this rank writes (the timestamp and
    grad_ready_ts): a simulated host whose clock is off by that much. `host` is written on
    every record when given."""

    def __init__(self, path: Path, rank: int, schema: str = "seed", host: str | None = None,
                 clock_offset_s: float = 0.0):
        self.rank, self.schema, self.host, self.off = rank, schema, host, clock_offset_s
        self.f = open(path, "a", buffering=1, encoding="utf-8")

    def now(self) -> float:
        """This host's wall clock."""
        return time.time() + self.off

    def emit(self, level: str, event: str, message: str, extra: dict) -> None:
        rec = {"timestamp": iso(self.now()), "rank": self.rank}
        if self.host:
            rec["host"] = self.host
        rec.update({"level": level, "event": event, "message": message})
        extra = dict(extra)
        if self.schema == "lower":
            rec["event"] = _LOWER_EVENTS.get(event, event.lower())
            if "step" in extra:
                extra["iteration"] = extra.pop("step")
            rec["message"] = message.replace("step=", "iteration=")
        if self.schema == "flat":
            rec.update(extra)
        else:
            rec["extra"] = extra
        # json.dumps writes NaN/Infinity for non-finite floats, exactly like a real Python logger
        self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")


def r3(x: float) -> float:
    return round(x, 3)


def g6(x: float) -> float:
    """6 significant digits (keeps nan/inf as they are)."""
    return float(f"{x:.6g}")


# --------------------------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------------------------
class CollectiveFailure(Exception):
    def __init__(self, name: str, seq: int, elapsed_s: float, size_mb: float, exc: BaseException):
        super().__init__(str(exc))
        self.name, self.seq, self.elapsed_s, self.size_mb, self.exc = name, seq, elapsed_s, size_mb, exc


def make_shard(path: Path, rank: int) -> None:
    """Seeded synthetic data: inputs differ per rank, labels come from one fixed teacher net."""
    import torch

    g = torch.Generator().manual_seed(1234)
    w1 = torch.randn(D_IN, 64, generator=g) / math.sqrt(D_IN)
    w2 = torch.randn(64, N_CLS, generator=g) / 8.0
    gx = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(SHARD_SAMPLES, D_IN, generator=gx)
    y = torch.tanh(x @ w1) @ w2
    lab = y.argmax(dim=1).to(torch.float32).unsqueeze(1)
    rec = torch.cat([x, lab], dim=1).contiguous()
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(ctypes.string_at(rec.data_ptr(), rec.numel() * rec.element_size()))
    tmp.replace(path)


def worker(args: argparse.Namespace) -> None:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    scen = SCENARIOS[args.scenario]
    if args.fault_rank is not None:  # move the fault to another rank (blind re-checks of the passes)
        scen = {k: (args.fault_rank if k.endswith("_rank") else v) for k, v in scen.items()}
    if args.fault_host is not None:
        scen = {k: (args.fault_host if k == "net_host" else v) for k, v in scen.items()}
    if args.pause_steps:
        scen = {k: (tuple(int(x) for x in args.pause_steps.split(",")) if k == "pause_steps" else v)
                for k, v in scen.items()}
    if args.pause_s is not None:
        scen = {k: (args.pause_s if k == "pause_s" else v) for k, v in scen.items()}
    if args.fault_step is not None:  # move the fault in time (shorter runs)
        fs = args.fault_step
        scen = {k: (max(0, fs - 10) if k == "heat_from" else fs if k.endswith(("_step", "_from")) else v)
                for k, v in scen.items()}
    out = Path(args.out)
    work = Path(args.workdir) if args.workdir else out / "_work"
    (work / "data").mkdir(parents=True, exist_ok=True)
    (work / "ckpt").mkdir(parents=True, exist_ok=True)

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)  # same init on every rank, as DDP would broadcast
    rng = random.Random(7 + rank)  # only for the injected (synthetic) readings
    # --noise jitter: healthy ranks block now and then (scheduler, GC, a noisy neighbour)
    jitter = random.Random(args.seed * 1000 + rank)
    fault_ranks = {v for k, v in scen.items() if k.endswith("_rank")}

    host = os.environ.get("REALRUN_HOST") or None
    host_index = int(host[4:]) if host else 0
    net_rng = random.Random(args.seed * 7919 + rank)   # the synthetic NIC counters only
    net_names = args.net_names.split(",")
    log = JsonlLog(out / f"rank_{rank}.jsonl", rank, schema=args.schema, host=host,
                   clock_offset_s=float(os.environ.get("REALRUN_CLOCK_OFFSET_MS", "0")) / 1000.0)

    # ---- data: one shard file per rank, read with pread() per sample -------------------------
    shard = work / "data" / f"shard_{rank:02d}.bin"
    if not shard.exists():
        make_shard(shard, rank)
    io_cap = scen.get("io_mbps") if scen.get("io_rank") == rank else None

    class ShardDataset(Dataset):
        """Fixed-size records in one shard file per rank, read with pread(). DataLoader calls
        __getitems__ with the whole batch of (shuffled) indices, so the read cost is I/O, not
        per-sample Python overhead."""

        def __init__(self, path: Path, cap_mbps: float | None):
            self.path, self.cap, self.fd, self.bytes_read = str(path), cap_mbps, None, 0
            self.rec = REC_FLOATS * 4

        def __len__(self) -> int:
            return SHARD_SAMPLES

        def _read(self, idx: list[int]) -> bytearray:
            if self.fd is None:
                self.fd = os.open(self.path, os.O_RDONLY)
            t0 = time.perf_counter()
            buf = bytearray(len(idx) * self.rec)
            mv = memoryview(buf)
            for j, i in enumerate(idx):
                os.preadv(self.fd, [mv[j * self.rec:(j + 1) * self.rec]], i * self.rec)
            self.bytes_read += len(buf)
            if self.cap:  # throttled device: n bytes take at least n / cap seconds
                rem = len(buf) / (self.cap * 1e6) - (time.perf_counter() - t0)
                if rem > 0:
                    time.sleep(rem)
            return buf

        def __getitems__(self, idx: list[int]):
            v = torch.frombuffer(self._read(idx), dtype=torch.float32).view(len(idx), REC_FLOATS)
            return v[:, :D_IN], v[:, D_IN].to(torch.int64)

        def __getitem__(self, i: int):
            x, y = self.__getitems__([i])
            return x[0], int(y[0])

    ds = ShardDataset(shard, io_cap)
    gen = torch.Generator().manual_seed(99 + rank)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=0, drop_last=True,
                        generator=gen, collate_fn=lambda b: b)  # __getitems__ returns the batch

    # ---- model ---------------------------------------------------------------------------------
    class LoRALinear(nn.Module):
        def __init__(self, base: nn.Linear, r: int = 4, alpha: float = 1.0, a_std: float = 1e-5):
            super().__init__()
            self.base = base
            self.lora_A = nn.Parameter(torch.randn(r, base.in_features) * a_std)
            self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
            self.scale = alpha / r

        def forward(self, x):
            return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(D_IN, HIDDEN)
            self.fc2 = nn.Linear(HIDDEN, HIDDEN)
            self.fc3 = nn.Linear(HIDDEN, N_CLS)

        def forward(self, x):
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    model = MLP()
    lora = bool(scen.get("lora"))
    if lora:
        for p in model.parameters():
            p.requires_grad_(False)
        model.fc2 = LoRALinear(model.fc2)
    adapter = [p for n, p in model.named_parameters() if "lora_" in n]
    backbone = [p for n, p in model.named_parameters() if "lora_" not in n]
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in params)
    grad_mb = n_train * 4 / 2**20
    opt = torch.optim.SGD(params, lr=BASE_LR, momentum=0.9)

    # injected OOM: raised from inside the forward pass, like the caching allocator would
    state = {"step": -1}
    if scen.get("oom_rank") == rank:
        def _oom_hook(mod, inp):
            if state["step"] == scen["oom_step"]:
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate 2.25 GiB. GPU {rank} has a total "
                    "capacity of 79.15 GiB of which 1.06 GiB is free. Including non-PyTorch "
                    "memory, this process has 78.08 GiB memory in use. Of the allocated memory "
                    "75.41 GiB is allocated by PyTorch, and 1.97 GiB is reserved by PyTorch but "
                    "unallocated. If reserved but unallocated memory is large try setting "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
                    "See documentation for Memory Management  "
                    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
        model.fc2.register_forward_pre_hook(_oom_hook)

    # ---- process groups --------------------------------------------------------------------
    # The default group gets a long timeout so that 4 processes importing torch on 2 cores can
    # all rendezvous; training collectives run on a second gloo group with a SHORT timeout, which
    # is the one that fires when a peer dies or hangs.
    t_init0 = time.perf_counter()
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=dt.timedelta(seconds=120))
    pg = dist.new_group(list(range(world)), timeout=dt.timedelta(seconds=args.timeout),
                        backend="gloo")
    init_ms = (time.perf_counter() - t_init0) * 1000
    log.emit("INFO", "RUN_CONFIG",
             f"world_size={world} backend=gloo params={n_params} trainable={n_train}",
             {"world_size": world, "backend": "gloo", "params": n_params,
              "trainable_params": n_train, "batch_size": args.batch, "steps": args.steps,
              "timeout_s": args.timeout, "init_ms": r3(init_ms), "torch": torch.__version__,
              "host": host or socket.gethostname(), "pid": os.getpid()})

    seq = 0

    def collective(name: str, size_mb: float, fn):
        nonlocal seq
        seq += 1
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as e:  # gloo raises RuntimeError / DistBackendError
            raise CollectiveFailure(name, seq, time.perf_counter() - t0, size_mb, e) from e
        return time.perf_counter() - t0

    def lr_at(step: int) -> float:
        lr = BASE_LR * min(1.0, (step + 1) / WARMUP_STEPS)
        if "spike_step" in scen and step >= scen["spike_step"]:
            lr *= scen["lr_mult"]
        return lr

    cpu0, wall0 = time.process_time(), time.perf_counter()
    it = iter(loader)
    epoch = 0
    step = -1
    t_run0 = time.perf_counter()
    try:
        for step in range(args.steps):
            state["step"] = step
            t0 = time.perf_counter()
            if scen.get("hang_rank") == rank and step == scen["hang_step"]:
                # goes silent: no more lines, no more collectives; the launcher kills it later
                time.sleep(scen["hang_s"])

            # -- data ---------------------------------------------------------------------------
            b0 = ds.bytes_read
            try:
                x, y = next(it)
            except StopIteration:
                epoch += 1
                it = iter(loader)
                x, y = next(it)
            t1 = time.perf_counter()
            dl_s = t1 - t0
            nbytes = ds.bytes_read - b0
            log.emit("INFO", "DATA_LOAD_TIME", f"step={step} data_load_ms={dl_s * 1000:.3f}",
                     {"step": step, "data_load_ms": r3(dl_s * 1000),
                      "disk_read_mbps": round(nbytes / dl_s / 1e6, 1), "bytes": nbytes})

            # -- compute --------------------------------------------------------------------------
            lr = lr_at(step)
            for g in opt.param_groups:
                g["lr"] = lr
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if scen.get("slow_rank") == rank and step >= scen["slow_from"]:
                time.sleep(scen["slow_ms"] / 1000)        # a slower device: host blocks longer
            if scen.get("hot_rank") == rank and step >= scen["hot_from"]:
                time.sleep(scen["hot_ms"] * rng.uniform(0.9, 1.1) / 1000)  # throttled clocks
            if args.noise == "jitter" and rank not in fault_ranks and jitter.random() < 0.15:
                time.sleep(jitter.uniform(5, 40) / 1000)  # a healthy rank held up once in a while
            t2 = time.perf_counter()
            ready_ts = log.now()
            compute_s = t2 - t1
            log.emit("INFO", "GRAD_READY", f"step={step} grads ready",
                     {"step": step, "grad_ready_ts": round(ready_ts, 6)})

            # -- communication --------------------------------------------------------------------
            arrive = torch.tensor([ready_ts], dtype=torch.float64)
            wait_s = collective("allreduce", 8 / 2**20,
                                lambda: dist.all_reduce(arrive, op=dist.ReduceOp.MAX, group=pg))
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            if "net_host" in scen:
                # the gradient all_reduce in NET_CHUNKS pieces; on the degraded host each piece is
                # fed net_ms / NET_CHUNKS late (inside the timed window), so every rank's transfer
                # waits for it: the whole job's communication slows, nobody arrives late
                slow_net = host_index == scen["net_host"] and step >= scen["net_from"]

                def chunked(flat=flat, slow_net=slow_net):
                    for piece in flat.chunk(NET_CHUNKS):
                        if slow_net:
                            time.sleep(scen["net_ms"] / NET_CHUNKS / 1000 * net_rng.uniform(0.9, 1.1))
                        dist.all_reduce(piece, group=pg)
                xfer_s = collective("allreduce", grad_mb, chunked)
            else:
                xfer_s = collective("allreduce", grad_mb, lambda: dist.all_reduce(flat, group=pg))
            flat /= world
            off = 0
            for p in params:
                n = p.numel()
                p.grad.copy_(flat[off:off + n].view_as(p.grad))
                off += n
            comm_s = wait_s + xfer_s
            log.emit("INFO", "ALLREDUCE",
                     f"step={step} allreduce comm_ms={comm_s * 1000:.3f} wait_ms={wait_s * 1000:.3f}",
                     {"step": step, "collective": "allreduce", "seq": seq,
                      "comm_ms": r3(comm_s * 1000), "wait_ms": r3(wait_s * 1000),
                      "xfer_ms": r3(xfer_s * 1000),
                      "peer_lag_ms": r3((arrive.item() - ready_ts) * 1000),  # across hosts: includes clock offsets
                      "tensor_size_mb": round(grad_mb, 3)})

            grad_norm = float(flat.norm())
            gn_extra = {}
            if lora:
                gn_extra["grad_norm_adapter"] = g6(float(
                    torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in adapter]))))
                bb = [p.grad.norm() for p in backbone if p.grad is not None]
                gn_extra["grad_norm_backbone"] = g6(float(
                    torch.linalg.vector_norm(torch.stack(bb)))) if bb else 0.0
            if not (grad_norm <= GRAD_NORM_THRESHOLD):
                log.emit("WARN", "GRAD_NORM",
                         f"grad_norm={grad_norm:.4g} exceeds threshold={GRAD_NORM_THRESHOLD}",
                         {"step": step, "grad_norm": g6(grad_norm), "threshold": GRAD_NORM_THRESHOLD,
                          "param_group": "all"})
            opt.step()
            t3 = time.perf_counter()

            # -- step summary -------------------------------------------------------------------
            step_s = t3 - t0
            lossv = float(loss.item())
            stage = "warmup" if step < WARMUP_STEPS else "stable"
            log.emit("INFO", "TRAIN_STEP", f"step={step} loss={lossv:.4f} lr={lr:.3e}",
                     {"step": step, "loss": g6(lossv), "lr": g6(lr), "stage": stage,
                      "step_time_ms": r3(step_s * 1000),
                      "samples_per_s": round(args.batch / step_s, 1),
                      "compute_ms": r3(compute_s * 1000), "grad_norm": g6(grad_norm),
                      "epoch": epoch, **gn_extra})
            if step == WARMUP_STEPS - 1:
                log.emit("WARN", "LR_WARMUP_END", f"lr warmup finished at step={step} lr={lr:.3e}",
                         {"step": step, "lr": g6(lr)})
            if rank == 0 and step % 10 == 0:
                print(f"step {step}/{args.steps} loss={lossv:.4f} lr={lr:.3e} "
                      f"step_time={step_s * 1000:.1f}ms", flush=True)

            if (step + 1) % HOST_STATS_EVERY == 0:  # real process readings
                cpu1, wall1 = time.process_time(), time.perf_counter()
                rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
                log.emit("INFO", "HOST_STATS", f"cpu_util={100 * (cpu1 - cpu0) / (wall1 - wall0):.1f}",
                         {"step": step, "device": "cpu",
                          "cpu_util": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 1),
                          "rss_mb": round(rss / 2**20, 1)})
                cpu0, wall0 = cpu1, wall1
            if "net_host" in scen and step % NET_STATS_EVERY == 0 and not args.net_text:
                log.emit("INFO", args.net_event, "nic counters",
                         synthetic_net_stats(scen, host_index, step, grad_mb, world, net_names, net_rng))
            if ("net_host" in scen and args.net_text and host_index == scen["net_host"] and step >= scen["net_from"]
                    and net_rng.random() < 0.4):
                # --net-text: no counters anywhere; the degraded host's ranks only SAY it (SYNTHETIC text)
                log.emit("WARN", args.net_event,
                         f"transport: retransmit timeout on eth{rank % 2} queue {net_rng.randint(0, 7)}, "
                         f"resent {net_rng.randint(150, 400)} segments to peer 10.0.{host_index}.{rank + 10}", {"step": step})
            if scen.get("pause_rank") == rank and step in scen["pause_steps"]:
                p0 = time.perf_counter()
                batches, vloss = 0, 0.0
                with torch.no_grad():   # real work of its own: forward passes over its shard
                    while time.perf_counter() - p0 < scen["pause_s"]:
                        vx, vy = ds.__getitems__(list(range((batches * args.batch) % (SHARD_SAMPLES - args.batch),
                                                            (batches * args.batch) % (SHARD_SAMPLES - args.batch)
                                                            + args.batch)))
                        vloss += float(F.cross_entropy(model(vx), vy))
                        batches += 1
                took = time.perf_counter() - p0
                log.emit("INFO", args.pause_event, f"{args.pause_event} done in {took:.2f}s",
                         {"step": step, "batches": batches, "val_loss": g6(vloss / max(batches, 1)),
                          args.pause_duration_key: round(took * 1000, 1) if args.pause_duration_key.endswith("_ms")
                          else round(took, 3)})
            if "hot_rank" in scen and step % GPU_STATS_EVERY == 0:
                log.emit("INFO", "GPU_STATS", "gpu stats", synthetic_gpu_stats(scen, rank, step, rng))

            if rank == 0 and (step + 1) % CKPT_EVERY == 0:
                c0 = time.perf_counter()
                name = f"ckpt/step_{step + 1:06d}.pt"
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1},
                           work / name)
                dur = time.perf_counter() - c0
                size = (work / name).stat().st_size
                log.emit("INFO", "CHECKPOINT", f"saved checkpoint step={step + 1} to {name}",
                         {"step": step + 1, "path": name, "duration_s": round(dur, 4),
                          "size_mb": round(size / 2**20, 3)})
    except CollectiveFailure as cf:
        exc_text = str(cf.exc).strip()
        log.emit("ERROR", "NCCL_TIMEOUT",
                 f"rank={rank} {cf.name} seq={cf.seq} step={step} failed after "
                 f"{cf.elapsed_s:.3f}s (timeout={args.timeout}s): {exc_text}",
                 {"step": step, "collective": cf.name, "seq": cf.seq,
                  "timeout_s": float(args.timeout), "elapsed_ms": r3(cf.elapsed_s * 1000),
                  "tensor_size_mb": round(cf.size_mb, 6), "backend": "gloo",
                  "reason": ("timeout" if "timed out" in exc_text.lower() else
                             "peer_closed" if ("closed" in exc_text or "reset" in exc_text)
                             else "error"),
                  "exception": type(cf.exc).__name__})
        traceback.print_exception(cf.exc)
        sys.stderr.flush()
        os._exit(1)
    except torch.OutOfMemoryError as e:
        log.emit("ERROR", "CUDA_OOM", str(e),
                 {"step": step, "device": f"cuda:{rank}", "mem_alloc_mb": 77219.8,
                  "tried_alloc_mb": 2304.0, "total_mb": 81049.6, "free_mb": 1085.4})
        traceback.print_exc()
        sys.stderr.flush()
        if scen.get("oom_linger_s"):
            # the process stays up with its sockets open for a while (as a CUDA process stuck in
            # teardown does, and as NCCL peers experience a dead rank: nothing on the wire)
            time.sleep(scen["oom_linger_s"])
        os._exit(1)

    total_s = time.perf_counter() - t_run0
    log.emit("INFO", "TRAIN_END", f"finished {args.steps} steps in {total_s:.2f}s",
             {"steps": args.steps, "duration_s": round(total_s, 3)})
    dist.barrier()
    dist.destroy_process_group()
    log.f.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # skip interpreter teardown (torch's finalizers): on a loaded 2-core box it took 2-14 s
    os._exit(0)


def synthetic_net_stats(scen: dict, host_index: int, step: int, grad_mb: float, world: int,
                        names: list[str], rng: random.Random) -> dict:
    """A rank's NIC counters over the last NET_STATS_EVERY steps. The bytes sent are what a ring
    all_reduce of the gradients sends (real sizes); retransmits and CRC errors are SYNTHETIC:
    a handful on a healthy host, hundreds on the degraded one once its fault has begun."""
    bad = host_index == scen["net_host"] and step >= scen["net_from"]
    retrans = rng.randint(150, 400) if bad else rng.randint(0, 3)
    crc = rng.randint(5, 30) if bad else 0
    tx_mb = 2 * (world - 1) / world * grad_mb * NET_STATS_EVERY
    return {"step": step, names[0]: retrans, names[1]: crc, names[2]: round(tx_mb, 3)}


def synthetic_gpu_stats(scen: dict, rank: int, step: int, rng: random.Random) -> dict:
    """INJECTED readings for the thermal scenario only (this box has no GPU)."""
    if rank == scen["hot_rank"] and step >= scen["heat_from"]:
        frac = min(1.0, (step - scen["heat_from"]) / (scen["hot_from"] - scen["heat_from"]))
        temp = 66 + 26 * frac + rng.uniform(-0.6, 0.6)
        hot = step >= scen["hot_from"]
        clock = 1200 + rng.uniform(-20, 20) if hot else 1980 - rng.uniform(0, 15)
        util = rng.uniform(42, 52) if hot else rng.uniform(94, 98)
        reasons = 0x40 if hot else 0
    else:
        temp = 65 + rng.uniform(-1.5, 1.5)
        clock = 1980 - rng.uniform(0, 15)
        util = rng.uniform(94, 99)
        reasons = 0
    return {"step": step, "gpu_util": round(util, 1), "temp_c": round(temp, 1),
            "sm_clock_mhz": round(clock), "throttle_reasons": reasons}


# --------------------------------------------------------------------------------------------
# launcher
# --------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_layout(world: int, hosts: int) -> list[str]:
    """Rank -> simulated host name: consecutive ranks share a host, as torchrun numbers them
    (node n holds ranks n*per_node ...), the last host may hold fewer."""
    hosts = max(1, min(hosts, world))
    per = -(-world // hosts)
    return [f"node{r // per}" for r in range(world)]


def launch(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in list(out.glob("rank_*.jsonl")) + [out / "console.log"]:
        f.unlink(missing_ok=True)
    work = Path(tempfile.mkdtemp(prefix="realrun_"))
    port = free_port()
    console = open(out / "console.log", "w", encoding="utf-8")
    lock = threading.Lock()

    def say(msg: str) -> None:
        with lock:
            console.write(f"[launcher]: {iso(time.time())} {msg}\n")
            console.flush()

    say(f"scenario={args.scenario} world_size={args.world} steps={args.steps} "
        f"master=127.0.0.1:{port} backend=gloo timeout={args.timeout}s")
    procs: list[subprocess.Popen] = []
    pumps = []
    t_start = time.time()
    hosts = host_layout(args.world, args.hosts)
    offsets = [float(x) for x in args.clock_offsets_ms.split(",")] if args.clock_offsets_ms else []
    hog = None
    if args.noise == "hog":  # a background process that burns one core for the whole run
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        say(f"noise: CPU hog pid={hog.pid}")
    for r in range(args.world):
        h = hosts[r]
        per_node = hosts.count(h)
        local = hosts[:r].count(h)
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   LOCAL_RANK=str(local), WORLD_SIZE=str(args.world), LOCAL_WORLD_SIZE=str(per_node),
                   GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        if args.hosts > 1:
            hi = int(h[4:])
            env["REALRUN_HOST"] = h
            env["REALRUN_CLOCK_OFFSET_MS"] = str(offsets[hi] if hi < len(offsets) else 0.0)
        cmd = [sys.executable, "-u", os.path.abspath(__file__), "--worker",
               "--scenario", args.scenario, "--out", str(out), "--workdir", str(work),
               "--steps", str(args.steps), "--batch", str(args.batch),
               "--timeout", str(args.timeout), "--schema", args.schema, "--noise", args.noise,
               "--seed", str(args.seed)]
        if args.fault_rank is not None:
            cmd += ["--fault-rank", str(args.fault_rank)]
        if args.fault_step is not None:
            cmd += ["--fault-step", str(args.fault_step)]
        if args.fault_host is not None:
            cmd += ["--fault-host", str(args.fault_host)]
        if args.pause_steps:
            cmd += ["--pause-steps", args.pause_steps]
        if args.pause_s is not None:
            cmd += ["--pause-s", str(args.pause_s)]
        if args.net_text:
            cmd += ["--net-text"]
        cmd += ["--pause-event", args.pause_event, "--pause-duration-key", args.pause_duration_key,
                "--net-event", args.net_event, "--net-names", args.net_names]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(p)
        say(f"rank {r} started pid={p.pid}")

        def pump(p=p, r=r):
            for raw in p.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                with lock:
                    console.write(f"[rank{r}]: {line}\n")
                    console.flush()
        th = threading.Thread(target=pump, daemon=True)
        th.start()
        pumps.append(th)

    codes: dict[int, int] = {}
    exit_t: dict[int, float] = {}
    deadline = time.time() + args.deadline
    while len(codes) < len(procs):
        for r, p in enumerate(procs):
            if r not in codes and p.poll() is not None:
                codes[r] = p.returncode
                exit_t[r] = time.time()
                say(f"rank {r} (pid={p.pid}) exited with code {p.returncode}")
        alive = [r for r in range(len(procs)) if r not in codes]
        if not alive:
            break
        # after a failure, survivors get timeout+grace seconds after the LAST exit to fail on
        # their own (their collective timeout); whoever is still alive then is stuck: kill it
        failed = any(c != 0 for c in codes.values())
        stuck = failed and time.time() - max(exit_t.values()) > args.timeout + args.grace
        if stuck or time.time() > deadline:
            for r in alive:
                say(f"sending SIGTERM to rank {r} (pid={procs[r].pid}): "
                    f"{'peers have failed' if stuck else 'deadline reached'}")
                procs[r].send_signal(signal.SIGTERM)
            t_kill = time.time()
            while time.time() - t_kill < 3 and any(procs[r].poll() is None for r in alive):
                time.sleep(0.05)
            for r in alive:
                if procs[r].poll() is None:
                    say(f"sending SIGKILL to rank {r} (pid={procs[r].pid})")
                    procs[r].kill()
            continue
        time.sleep(0.05)
    for th in pumps:
        th.join(timeout=5)
    if hog is not None:
        hog.kill()
        hog.wait()
    wall = time.time() - t_start
    say(f"done in {wall:.2f}s exit codes {[codes[r] for r in range(len(procs))]}")
    console.close()
    for f in (work / "ckpt").glob("*"):
        f.unlink()
    for f in (work / "data").glob("*"):
        f.unlink()
    for d in (work / "ckpt", work / "data", work):
        try:
            d.rmdir()
        except OSError:
            pass
    print(json.dumps({"scenario": args.scenario, "wall_s": round(wall, 2),
                      "exit_codes": [codes[r] for r in range(len(procs))]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default="healthy")
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--timeout", type=float, default=5.0, help="collective timeout (s)")
    ap.add_argument("--grace", type=float, default=2.0,
                    help="launcher: after a rank failed, kill ranks still alive timeout+grace s after the last exit")
    ap.add_argument("--deadline", type=float, default=90.0, help="launcher: hard wall limit (s)")
    ap.add_argument("--worker", action="store_true", help="run one rank (env from torchrun/launcher)")
    ap.add_argument("--fault-rank", type=int, default=None, help="inject the scenario's fault on this rank instead")
    ap.add_argument("--fault-step", type=int, default=None,
                    help="move the fault's step (hang/oom step, straggler/thermal start; heat starts 10 earlier)")
    ap.add_argument("--hosts", type=int, default=1,
                    help="simulated hosts: consecutive ranks grouped onto node0..nodeN-1, host written on every record")
    ap.add_argument("--clock-offsets-ms", default="",
                    help="per simulated host, ms added to its logged wall-clock readings, e.g. 0,350,-1200")
    ap.add_argument("--noise", choices=("none", "jitter", "hog"), default="none",
                    help="jitter: healthy ranks sleep 5-40 ms in 15%% of steps; hog: a CPU-burning process runs alongside")
    ap.add_argument("--schema", choices=SCHEMAS, default="seed", help="how records are written (see SCHEMAS)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the jitter noise")
    ap.add_argument("--fault-host", type=int, default=None, help="net_host: index of the degraded host")
    ap.add_argument("--pause-steps", default="", help="rank_pause: the steps after which the rank pauses, e.g. 12,27")
    ap.add_argument("--pause-s", type=float, default=None, help="rank_pause: seconds of its own work per pause")
    ap.add_argument("--pause-event", default="validation_pass", help="rank_pause: event name of the pause's line")
    ap.add_argument("--pause-duration-key", default="elapsed_s", help="rank_pause: key of the pause's duration (s)")
    ap.add_argument("--net-event", default="nic_counters", help="net_host: event name of the NIC counter lines")
    ap.add_argument("--net-names", default="tcp_retrans_segs,rx_crc_errors,tx_mb",
                    help="net_host: keys of the retransmit, CRC-error and bytes-sent counters")
    ap.add_argument("--net-text", action="store_true",
                    help="net_host: no NIC counters; the degraded host's ranks log a WARN line about retransmits instead")
    ap.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
