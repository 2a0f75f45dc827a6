#!/usr/bin/env python3
"""Deterministic generator of the sample runs in sample_logs/<scenario>/ (stdlib only, seeded).

Owns the scenario definitions: what is injected, on which rank, from which step, and the
`expected.toml` that states what a correct diagnosis must say. Must not import forensics: the
samples are inputs, written without knowledge of how they are diagnosed.

Every scenario simulates synchronous data-parallel training step by step (the physics the
diagnosis relies on): each rank loads its batch, computes, arrives at the all-reduce, waits for
the last rank to arrive, transfers, and all ranks leave together. Injected faults change one
rank's data loading, compute, clocks or life, and the waits/throughput follow from the
simulation — they are not written in by hand.

    python sample_logs/generate.py            # (re)write every scenario next to this file
    python sample_logs/generate.py --out DIR  # somewhere else
    python sample_logs/generate.py healthy    # one scenario
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

T0 = dt.datetime(2025, 6, 12, 14, 0, 0, tzinfo=dt.timezone.utc)
EPOCH0 = T0.timestamp()


def iso(t: float) -> str:
    d = T0 + dt.timedelta(seconds=t)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------
@dataclass
class RankLog:
    """One rank's file: records kept with their time so the file is written in time order."""

    rank: int | None
    path: str
    host: str | None = None
    with_rank: bool = True               # False: the records omit "rank" (rank only in the path)
    records: list[tuple[float, int, str]] = field(default_factory=list)
    raw_after: dict[int, list[str]] = field(default_factory=dict)   # non-JSON lines after record n
    truncate_last: bool = False

    def emit(self, t: float, level: str, event: str | None, message: str | None, extra: dict | None) -> None:
        rec: dict = {"timestamp": iso(t)}
        if self.with_rank and self.rank is not None:
            rec["rank"] = self.rank
        if self.host:
            rec["host"] = self.host
        rec["level"] = level
        if event is not None:
            rec["event"] = event
        if message is not None:
            rec["message"] = message
        if extra:
            rec["extra"] = extra
        self.records.append((t, len(self.records), json.dumps(rec, separators=(",", ":"))))

    def flat(self, t: float, rec: dict) -> None:
        """A flat metrics line (HF/ms-swift logging.jsonl): no event, no rank, no extra."""
        self.records.append((t, len(self.records), json.dumps(rec, separators=(",", ":"))))

    def after_last(self, lines: list[str]) -> None:
        """Non-JSON text (a traceback) written right after the most recent record."""
        self.raw_after.setdefault(len(self.records) - 1, []).extend(lines)

    def write(self, root: Path) -> None:
        p = root / self.path
        p.parent.mkdir(parents=True, exist_ok=True)
        out: list[str] = []
        for _, i, text in sorted(self.records):
            out.append(text)
            out.extend(self.raw_after.get(i, []))
        if self.truncate_last and out:
            last = out[-1]
            out[-1] = last[: max(10, len(last) * 2 // 5)]   # the process died mid-write
            p.write_text("\n".join(out))
        else:
            p.write_text("\n".join(out) + "\n")


# --------------------------------------------------------------------------------------------
# the simulation
# --------------------------------------------------------------------------------------------
@dataclass
class Sim:
    """Synchronous data parallelism; every duration in ms. Hooks return per (rank, step) values."""

    rng: random.Random
    ranks: int
    steps: int
    batch: int = 32
    compute: Callable[[int, int], float] = lambda r, s: 800.0
    data: Callable[[int, int], tuple[float, float]] = lambda r, s: (20.0, 1200.0)
    transfer: Callable[[int], float] = lambda s: 150.0
    opt_ms: float = 30.0
    loss: Callable[[int], float] = lambda s: 2.2 + 1.0 * math.exp(-s / 40)
    loss_noise: float = 0.03
    lr: Callable[[int], float] = lambda s: 3e-4 * min(1.0, (s + 1) / 10)
    stage: Callable[[int], str] = lambda s: "warmup" if s < 10 else "stable"
    grad_norm: Callable[[int], float] = lambda s: 1.5
    grad_threshold: float = 10.0
    late_grad: Callable[[int, int], float] = lambda r, s: 0.0   # gradient ready late, reduce overlapped
    gpu: Callable[[int, int], dict | None] = lambda r, s: None
    gpu_every: int = 5
    grad_ready: bool = True
    tensor_mb: float = 512.0
    stop: Callable[[int, int], str | None] = lambda r, s: None  # "silent" / "oom": rank r stops at step s
    t: float = 0.0

    def run(self, logs: list[RankLog]) -> dict[int, float]:
        """Writes the per-step events; returns, per stopped rank, when it stopped (s)."""
        rng = self.rng
        stopped: dict[int, float] = {}
        seq = 0
        for s in range(self.steps):
            t_s = self.t
            seq += 1
            alive = [r for r in range(self.ranks) if r not in stopped]
            arrive: dict[int, float] = {}
            ready_ts: dict[int, float] = {}
            dls: dict[int, tuple[float, float]] = {}
            for r in alive:
                jit = rng.uniform(0.0, 2.0)
                dl, mbps = self.data(r, s)
                dl *= rng.uniform(0.9, 1.1)
                dls[r] = (dl, mbps * rng.uniform(0.95, 1.05))
                comp = self.compute(r, s) * rng.uniform(0.985, 1.015)
                arrive[r] = t_s + (jit + dl + comp) / 1000.0
                ready_ts[r] = arrive[r] + self.late_grad(r, s) * rng.uniform(0.8, 1.2) / 1000.0
                if self.gpu_every and s % self.gpu_every == 0:
                    g = self.gpu(r, s)
                    if g is not None:
                        logs[r].emit(t_s + 0.2, "INFO", "GPU_STATS", "gpu stats", g)
                logs[r].emit(t_s + (jit + dl) / 1000.0, "INFO", "DATA_LOAD_TIME", f"step={s} data_load_ms={dl:.1f}",
                             {"step": s, "data_load_ms": round(dl, 1), "disk_read_mbps": round(dls[r][1], 1)})
            stops = {r: self.stop(r, s) for r in alive}
            stops = {r: k for r, k in stops.items() if k}
            if stops:
                for r, kind in stops.items():
                    # an OOM strikes late in the backward pass; a silent rank stops after its data load
                    stopped[r] = t_s + (dls[r][0] + (700.0 if kind == "oom" else 0.0)) / 1000.0
                self.t = t_s
                return {**stopped, **{-1: max(arrive[r] for r in alive if r not in stops)}}
            last = max(arrive.values())
            xfer = self.transfer(s) * rng.uniform(0.97, 1.03)
            done = last + xfer / 1000.0
            for r in alive:
                if self.grad_ready:
                    logs[r].emit(ready_ts[r], "INFO", "GRAD_READY", f"step={s} grads ready",
                                 {"step": s, "grad_ready_ts": round(EPOCH0 + ready_ts[r], 6)})
                wait = (last - arrive[r]) * 1000.0 + rng.uniform(0.2, 1.5)
                comm = wait + xfer
                logs[r].emit(done, "INFO", "ALLREDUCE", f"step={s} allreduce comm_ms={comm:.1f} wait_ms={wait:.1f}",
                             {"step": s, "collective": "allreduce", "seq": seq, "comm_ms": round(comm, 1),
                              "wait_ms": round(wait, 1), "tensor_size_mb": self.tensor_mb})
            end = done + self.opt_ms / 1000.0
            gn = self.grad_norm(s)
            for r in alive:
                st = (end - t_s) * 1000.0 + rng.uniform(-0.5, 0.5)
                lv = self.loss(s) + rng.gauss(0.0, self.loss_noise)
                lr = self.lr(s)
                if gn > self.grad_threshold:
                    logs[r].emit(done + 0.001, "WARN", "GRAD_NORM", f"grad_norm={gn:.1f} exceeds threshold={self.grad_threshold}",
                                 {"step": s, "param_group": "embedding"})
                logs[r].emit(end, "INFO", "TRAIN_STEP", f"step={s} loss={lv:.4f} lr={lr:.3e}",
                             {"step_time_ms": round(st, 1), "samples_per_s": round(self.batch / (st / 1000.0), 1),
                              "stage": self.stage(s), "grad_norm": round(gn, 3)})
            self.t = end + rng.uniform(0.001, 0.003)
        return stopped


def healthy_gpu(rng: random.Random) -> Callable[[int, int], dict]:
    return lambda r, s: {"gpu_util": round(rng.uniform(94, 99), 1), "mem_alloc_mb": round(40500 + rng.uniform(-200, 200)),
                         "temp_c": round(rng.uniform(62, 68), 1), "sm_clock_mhz": round(1980 - rng.uniform(0, 15)),
                         "throttle_reasons": 0}


def toml_list(xs: list) -> str:
    return "[" + ", ".join(json.dumps(x) for x in xs) + "]"


@dataclass
class Scenario:
    name: str
    root_cause: str
    ranks: list[int]
    must_not: list[str]
    injected: str
    build: Callable[[random.Random], list[RankLog]]

    def expected(self) -> str:
        return (
            "# What a correct diagnosis of this run says (written by sample_logs/generate.py).\n"
            "[expect]\n"
            f"root_cause = {json.dumps(self.root_cause)}\n"
            f"ranks = {toml_list(self.ranks)}\n"
            f"must_not = {toml_list(self.must_not)}\n"
            "\n[truth]\n"
            f"injected = {json.dumps(self.injected)}\n"
        )


def _logs(n: int, hosts: int = 1, layout: str = "rank_{r}.jsonl") -> list[RankLog]:
    per = max(1, n // hosts)
    out = []
    for r in range(n):
        host = f"node{r // per}" if hosts > 1 else None
        out.append(RankLog(rank=r, path=layout.format(r=r, node=r // per), host=host))
    return out


# --------------------------------------------------------------------------------------------
# scenarios
# --------------------------------------------------------------------------------------------
def build_healthy(rng: random.Random) -> list[RankLog]:
    logs = _logs(4)
    logs[3].with_rank = False            # a logger that forgot the rank field: rank from the path
    Sim(rng, ranks=4, steps=60, gpu=healthy_gpu(rng), grad_norm=lambda s: 1.5 + 0.2 * math.sin(s)).run(logs)
    return logs


def build_data_load_skew(rng: random.Random) -> list[RankLog]:
    bad = 5
    logs = _logs(8, hosts=2, layout="node{node}/rank_{r}.jsonl")
    hg = healthy_gpu(rng)

    def data(r: int, s: int) -> tuple[float, float]:
        # seed 000 §4.4: the shard of this rank sits on an HDD: 180 ms / 40 MB/s vs 20 ms / 1.2 GB/s
        return (180.0, 40.0) if r == bad else (20.0, 1200.0)

    def gpu(r: int, s: int) -> dict:
        g = hg(r, s)
        if r == bad:
            g["gpu_util"] = round(rng.uniform(52, 58), 1)
        return g

    Sim(rng, ranks=8, steps=30, batch=64, data=data, gpu=gpu, gpu_every=3, grad_ready=False).run(logs)
    return logs


def build_straggler(rng: random.Random) -> list[RankLog]:
    slow, start = 2, 15
    logs = _logs(4)
    Sim(rng, ranks=4, steps=50, gpu=healthy_gpu(rng),
        compute=lambda r, s: 1400.0 if (r == slow and s >= start) else 800.0).run(logs)
    return logs


def build_thermal(rng: random.Random) -> list[RankLog]:
    hot, heat_from, throttle_from = 6, 8, 18
    logs = _logs(8, hosts=2, layout="logs/node{node}/rank_{r}.jsonl")

    def compute(r: int, s: int) -> float:
        # SM clock 1980 -> 1200 MHz: the same kernels take longer (+2.0 s of 3.2 s)
        return 5200.0 if (r == hot and s >= throttle_from) else 3200.0

    def gpu(r: int, s: int) -> dict:
        if r == hot and s >= heat_from:
            frac = min(1.0, (s - heat_from) / (throttle_from - heat_from))
            throttled = s >= throttle_from
            return {"gpu_util": round(rng.uniform(42, 48) if throttled else rng.uniform(94, 98), 1),
                    "mem_alloc_mb": round(61000 + rng.uniform(-150, 150)),
                    "temp_c": round(66 + 26 * frac + rng.uniform(-0.5, 0.5), 1),
                    "sm_clock_mhz": round(1200 + rng.uniform(-15, 15)) if throttled else round(1980 - rng.uniform(0, 15)),
                    "throttle_reasons": 0x40 if throttled else 0}
        return {"gpu_util": round(rng.uniform(94, 99), 1), "mem_alloc_mb": round(61000 + rng.uniform(-150, 150)),
                "temp_c": round(rng.uniform(63, 69), 1), "sm_clock_mhz": round(1980 - rng.uniform(0, 15)),
                "throttle_reasons": 0}

    Sim(rng, ranks=8, steps=36, batch=600, compute=compute, transfer=lambda s: 600.0, opt_ms=180.0,
        loss=lambda s: 2.9 - 0.012 * s, loss_noise=0.01, gpu=gpu, gpu_every=1, grad_ready=False,
        lr=lambda s: 1.5e-4, stage=lambda s: "stable").run(logs)
    return logs


def build_gradient_skew(rng: random.Random) -> list[RankLog]:
    late, start = 1, 10
    logs = _logs(4)

    def loss(s: int) -> float:
        base = 2.2 + 1.0 * math.exp(-s / 40)
        # stale gradients applied: the loss zig-zags locally (seed 000 误区三)
        return base + (0.06 * (1 if s % 2 else -1) if s >= start else 0.0)

    Sim(rng, ranks=4, steps=60, gpu=healthy_gpu(rng), loss=loss,
        late_grad=lambda r, s: rng.uniform(250, 450) if (r == late and s >= start) else 0.0).run(logs)
    return logs


def build_comm_bound(rng: random.Random) -> list[RankLog]:
    start = 10
    logs = _logs(8, hosts=2, layout="node{node}/rank_{r}.jsonl")

    def gpu(r: int, s: int) -> dict:
        g = healthy_gpu(rng)(r, s)
        if s >= start:
            g["gpu_util"] = round(rng.uniform(38, 46), 1)     # every GPU idles while the network moves data
        return g

    # the inter-node fabric degrades (e.g. a flapping switch port falls back): every all-reduce slows
    Sim(rng, ranks=8, steps=40, batch=64, gpu=gpu, gpu_every=2, grad_ready=False,
        transfer=lambda s: 1100.0 if s >= start else 150.0).run(logs)
    return logs


def build_oom_cascade(rng: random.Random) -> list[RankLog]:
    bad, oom_step = 3, 30
    logs = _logs(4)
    hg = healthy_gpu(rng)

    def gpu(r: int, s: int) -> dict:
        g = hg(r, s)
        if r == bad and s >= 15:
            g["mem_alloc_mb"] = round(70000 + (s - 15) * 650 + rng.uniform(-100, 100))   # buffers pile up
        return g

    sim = Sim(rng, ranks=4, steps=40, gpu=gpu, stop=lambda r, s: "oom" if (r == bad and s == oom_step) else None)
    stopped = sim.run(logs)
    t_oom = stopped[bad]
    msg = ("CUDA out of memory. Tried to allocate 2.25 GiB. GPU 3 has a total capacity of 79.15 GiB of which "
           "1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use.")
    logs[bad].emit(t_oom, "ERROR", "CUDA_OOM", msg, {"step": oom_step, "mem_alloc_mb": 79953})
    logs[bad].after_last([
        "Traceback (most recent call last):",
        '  File "train.py", line 212, in <module>',
        "    loss = model(batch).loss",
        "torch.OutOfMemoryError: " + msg,
    ])
    # the peers sit in the step's all-reduce; the dead rank's sockets close 0.4 s later
    t_arrive = stopped[-1]
    for r in range(4):
        if r == bad:
            continue
        logs[r].emit(t_arrive, "INFO", "GRAD_READY", f"step={oom_step} grads ready",
                     {"step": oom_step, "grad_ready_ts": round(EPOCH0 + t_arrive - 0.001 * r, 6)})
    texts = {
        0: "[Rank 0] NCCL error in allreduce: remote process exited or there was a network error (SeqNum=31)",
        1: f"rank=1 waiting on rank={bad} for 0.4s: Connection closed by peer",
        2: "[Rank 2] ProcessGroupNCCL: communicator was aborted (SeqNum=31, OpType=ALLREDUCE)",
    }
    for i, r in enumerate((0, 1, 2)):
        logs[r].emit(t_oom + 0.4 + 0.003 * i, "ERROR", "NCCL_TIMEOUT", texts[r],
                     {"step": oom_step, "collective": "allreduce", "tensor_size_mb": 512})
    logs[1].emit(t_oom + 0.45, "ERROR", "PROCESS_EXIT", "process group destroyed, exiting with code 1", {"exitcode": 1})
    logs[1].truncate_last = True          # killed by the launcher mid-write
    return logs


def build_hang(rng: random.Random) -> list[RankLog]:
    bad, hang_step = 2, 40
    logs = _logs(4)
    logs[bad].with_rank = False
    sim = Sim(rng, ranks=4, steps=45, gpu=healthy_gpu(rng),
              stop=lambda r, s: "silent" if (r == bad and s == hang_step) else None)
    stopped = sim.run(logs)
    t_arrive = stopped[-1]
    for r in range(4):
        if r != bad:
            logs[r].emit(t_arrive, "INFO", "GRAD_READY", f"step={hang_step} grads ready",
                         {"step": hang_step, "grad_ready_ts": round(EPOCH0 + t_arrive, 6)})
    # everyone else sits in all-reduce #41 until the 30 min watchdog fires; rank 0 reports first
    for i, r in enumerate((0, 3, 1)):
        ran = 1800000 + 83 + 40 * i
        logs[r].emit(t_arrive + ran / 1000.0, "ERROR", "NCCL_TIMEOUT",
                     f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={hang_step + 1}, "
                     f"OpType=ALLREDUCE, NumelIn=134217728, NumelOut=134217728, Timeout(ms)=1800000) ran for {ran} "
                     "milliseconds before timing out.",
                     {"step": hang_step, "collective": "allreduce", "timeout_s": 1800, "tensor_size_mb": 512})
    return logs


def _train_only(rng: random.Random, n: int, steps: int, every: int, loss: Callable[[int], float],
                lr: Callable[[int], float], stage: Callable[[int], str], gn: Callable[[int], float],
                noise: float = 0.03, step_s: float = 1.0, threshold: float = 10.0) -> list[RankLog]:
    """Runs that log only TRAIN_STEP (and GRAD_NORM warnings): the common minimal logger."""
    logs = _logs(n)
    for s in range(0, steps, every):
        t = s * step_s
        g = gn(s)
        for r in range(n):
            lv = loss(s) + rng.gauss(0.0, noise)
            if g > threshold:
                logs[r].emit(t + 0.9 * step_s, "WARN", "GRAD_NORM", f"grad_norm={g:.1f} exceeds threshold={threshold}",
                             {"step": s, "param_group": "embedding"})
            st = step_s * 1000.0 * rng.uniform(0.99, 1.01)
            logs[r].emit(t + step_s + rng.uniform(0.0, 0.004), "INFO", "TRAIN_STEP", f"step={s} loss={lv:.4f} lr={lr(s):.3e}",
                         {"step_time_ms": round(st, 1), "samples_per_s": round(32 / (st / 1000.0), 1),
                          "stage": stage(s), "grad_norm": round(g, 3)})
    return logs


def build_loss_divergence(rng: random.Random) -> list[RankLog]:
    onset = 100

    def loss(s: int) -> float:
        base = 2.2 + 0.8 * math.exp(-s / 35)
        return base * (1.015 ** (s - onset)) if s > onset else base

    def gn(s: int) -> float:
        return 1.5 * (1.08 ** (s - onset)) if s > onset else 1.5

    return _train_only(rng, 4, 160, 1, loss, lambda s: 6e-4 * min(1.0, (s + 1) / 20),
                       lambda s: "warmup" if s < 20 else "stable", gn)


def build_warmup_oscillation(rng: random.Random) -> list[RankLog]:
    warm = 100

    def loss(s: int) -> float:
        if s < warm:
            # seed 003 case 1: loss jumps between 3.0 and 5.0 while lr ramps (4.12 at step 50, 3.35 at 80)
            return 3.9 - 0.6 * s / warm + 0.9 * math.sin(s / 3.7)
        return 2.98 - 0.5 * (1 - math.exp(-(s - warm) / 60))

    return _train_only(rng, 4, 200, 2, loss, lambda s: 2.0e-5 * min(1.0, (s + 1) / warm),
                       lambda s: "warmup" if s < warm else "stable", lambda s: 2.0 + 0.5 * math.sin(s / 5))


def build_grad_norm_spike(rng: random.Random) -> list[RankLog]:
    spikes = {70: 45.6, 71: 18.3}

    def loss(s: int) -> float:
        base = 2.2 + 0.9 * math.exp(-s / 40)
        return base + (0.3 * math.exp(-(s - 71) / 1.5) if s >= 71 else 0.0)   # a bump that heals

    return _train_only(rng, 4, 120, 1, loss, lambda s: 3e-4 * min(1.0, (s + 1) / 10),
                       lambda s: "warmup" if s < 10 else "stable",
                       lambda s: spikes.get(s, 1.2 + 0.2 * math.sin(s / 3)))


def build_lora_vanishing(rng: random.Random) -> list[RankLog]:
    # ms-swift logging.jsonl: rank 0 only, flat metrics, no event, no rank, logging_steps=10
    log = RankLog(rank=None, path="output/logging.jsonl", with_rank=False)
    for s in range(10, 2001, 10):
        loss = 2.8 - 0.2 * (s / 2000) + rng.gauss(0.0, 0.008)
        lr = 1e-4 * min(1.0, s / 100)
        log.flat(s * 0.5, {"step": s, "loss": round(loss, 4), "learning_rate": lr,
                           "grad_norm_adapter": float(f"{rng.uniform(0.9e-6, 1.5e-6):.3g}"),
                           "grad_norm_backbone": 0.0, "gpu_memory_mb": round(18765 + rng.uniform(-40, 40)),
                           "timestamp": iso(s * 0.5).replace(".000Z", "Z"), "model_name": "llama3-lora-finetune"})
    return [log]


SCENARIOS: list[Scenario] = [
    Scenario("healthy", "none", [], ["straggler", "data_load_skew", "gradient_skew", "loss_divergence"],
             "nothing: 4 ranks, 60 steps, warmup 10 steps; rank 3's records omit the rank field",
             build_healthy),
    Scenario("data_load_skew", "data_load_skew", [5], ["straggler", "thermal_throttling"],
             "rank 5's shard on an HDD: data_load 180 ms vs 20 ms, disk read 40 vs 1200 MB/s, GPU util 55% "
             "(seed 000 §4.4 scaled to 8 ranks)", build_data_load_skew),
    Scenario("straggler", "straggler", [2], ["data_load_skew", "thermal_throttling", "gradient_skew"],
             "rank 2 computes 1400 ms instead of 800 ms from step 15 (a co-located process); its data "
             "loading and GPU stats are normal", build_straggler),
    Scenario("thermal_throttling", "thermal_throttling", [6], ["data_load_skew", "loss_divergence"],
             "rank 6 heats from step 8 to 92 °C, throttles from step 18 (HW_THERMAL 0x40, SM clock 1200 MHz, "
             "util 45%), computes +2.0 s: others wait ~2 s, throughput 1200 -> 800 samples/s, loss keeps falling",
             build_thermal),
    Scenario("gradient_skew", "gradient_skew", [1], ["straggler", "loss_divergence"],
             "rank 1's gradients become ready 250-450 ms late from step 10; the reduction overlaps "
             "(no one waits), stale gradients make the loss zig-zag", build_gradient_skew),
    Scenario("comm_bound", "comm_bound", list(range(8)), ["straggler", "data_load_skew"],
             "from step 10 every all-reduce transfer takes 1100 ms instead of 150 ms on all 8 ranks "
             "(the fabric degrades); nobody waits for anybody", build_comm_bound),
    Scenario("oom_cascade", "oom", [3], ["hang", "straggler"],
             "rank 3's memory grows from step 15 and it dies of CUDA OOM in step 30 (traceback after the "
             "JSON line); ranks 0-2 report NCCL errors 0.4 s later; rank 1's last line is cut mid-write",
             build_oom_cascade),
    Scenario("hang", "hang", [2], ["straggler", "oom"],
             "rank 2 goes silent in step 40 (never joins all-reduce #41); ranks 0,3,1 hit the 1800 s watchdog "
             "timeout in that order; rank 2's records omit the rank field", build_hang),
    Scenario("loss_divergence", "loss_divergence", [0, 1, 2, 3], ["loss_plateau"],
             "after warmup (20 steps) the loss falls to step 100, then grows 1.5% per step; the grad norm "
             "follows and crosses its threshold ~25 steps later", build_loss_divergence),
    Scenario("warmup_oscillation", "none", [], ["loss_divergence", "loss_plateau", "grad_norm_spike"],
             "seed 003 case 1: loss oscillates 3.0-5.0 during a 100-step lr warmup (stage=warmup), then "
             "falls steadily", build_warmup_oscillation),
    Scenario("lora_vanishing", "vanishing_grad", [], ["grad_norm_spike", "loss_divergence"],
             "seed 003 case 3: ms-swift logging.jsonl of a QLoRA run, grad_norm_adapter ~1.2e-6, backbone 0.0, "
             "loss 2.8 -> 2.6 over 2000 steps", build_lora_vanishing),
    Scenario("grad_norm_spike", "grad_norm_spike", [0, 1, 2, 3], ["loss_divergence"],
             "grad norm 45.6 and 18.3 at steps 70-71 (threshold 10, WARN lines on every rank); the loss "
             "bumps by 0.3 and recovers", build_grad_norm_spike),
]


def generate(out: Path, names: list[str] | None = None) -> list[str]:
    done = []
    for i, sc in enumerate(SCENARIOS):
        if names and sc.name not in names:
            continue
        d = out / sc.name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        rng = random.Random(1000 + i)
        for log in sc.build(rng):
            log.write(d)
        (d / "expected.toml").write_text(sc.expected())
        done.append(sc.name)
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="scenarios to write (default: all)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    args = ap.parse_args()
    for name in generate(Path(args.out), args.names or None):
        print(name)


if __name__ == "__main__":
    main()
