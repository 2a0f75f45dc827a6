"""A corpus of multi-rank console logs in the formats of launchers and collectors nobody here wrote.

Owns: generating varied console text (torchrun / torch elastic, torch.distributed.launch, srun
--label, mpirun --tag-output, Horovod, the DeepSpeed launcher with pdsh, accelerate, Lightning,
kubectl logs, Docker / CRI / journald / syslog collectors, NCCL lines, Python tracebacks,
faulthandler) for runs with a known truth, and scoring `forensics diagnose --format json` on them.
Must not: be read by the code it scores, or carry a real log: every line is ours, written in the
format the upstream source writes (the source is named beside each template below).

Each case is one run: a folder of log files and a truth record — failed or healthy, the culprit
rank(s) and the accepted kind(s) (`ranks` is empty when the log cannot name a global rank: a
multi-node run whose lines carry only local ranks). Two sets: `seen` (looked at while the console
reader is changed) and `unseen` (other seeds, and launcher / collector / message variants that only
it uses: scored before and after, never looked at in between).

    python -m tests.console_corpus score --set seen --root /tmp/cc-seen [--show-all]
    python -m tests.console_corpus write --set unseen --root /tmp/cc-unseen
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# ---------------------------------------------------------------------------------------------
# The run: world, hosts, per-rank lines
# ---------------------------------------------------------------------------------------------


@dataclass
class Line:
    t: float                 # seconds after the run's start
    rank: int | None         # None: the launcher of node `node`
    text: str
    node: int = 0
    err: bool = False        # written on stderr
    fd: bool = False         # written to fd 2 from a signal handler (faulthandler): no Python-level prefix


@dataclass
class World:
    nodes: int
    gpn: int
    hosts: list[str]
    start: dt.datetime
    pids: dict[int, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.nodes * self.gpn

    def node_of(self, rank: int) -> int:
        return rank // self.gpn

    def local(self, rank: int) -> int:
        return rank % self.gpn

    def host(self, rank: int) -> str:
        return self.hosts[self.node_of(rank)]

    def at(self, t: float) -> dt.datetime:
        return self.start + dt.timedelta(seconds=t)


@dataclass
class Fault:
    kind: str                       # crash, oom, host_oom, nccl_timeout, hang, non_finite, gpu_error, segfault, healthy
    culprits: list[int]
    t: float                        # when the culprit fails
    exits: dict[int, tuple[float, int]] = field(default_factory=dict)   # rank -> (t, code; negative = signal)
    truth_kinds: list[str] = field(default_factory=list)
    cancelled: bool = False         # the job is ended from outside (time limit / user)
    named: bool = True              # the log names the culprit's global rank (a launcher may not say whose exit it saw)


_HOST_STYLES = [
    lambda i: f"gpu-node{i + 1}", lambda i: f"node-{i:02d}", lambda i: f"dgx{i + 3:03d}",
    lambda i: f"ip-10-0-{12 + i}-{40 + 7 * i}", lambda i: f"worker-{i}", lambda i: f"a100-{chr(97 + i)}",
    lambda i: f"hpc{i + 100}.cluster.local",
]


def _world(rng: random.Random, nodes: int, gpn: int) -> World:
    style = rng.choice(_HOST_STYLES)
    start = dt.datetime(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 600), seconds=rng.randint(0, 86_000))
    w = World(nodes, gpn, [style(i) for i in range(nodes)], start)
    base = rng.randint(1000, 90_000)
    w.pids = {r: base + 7 * r + rng.randint(0, 5) for r in range(w.size)}
    return w


# ---------------------------------------------------------------------------------------------
# What the training script prints (per-rank progress), in a few common styles
# ---------------------------------------------------------------------------------------------

def _step_line(style: str, w: World, step: int, loss: float, t: float, total: int) -> str:
    ms = 380 + (step % 7) * 3.1
    lv = "nan" if loss != loss else f"{loss:.4f}"
    if style == "plain":
        return f"step {step} | loss {lv} | lr 3.00e-04 | {ms:.1f} ms/step"
    if style == "pylog":
        ts = w.at(t).strftime("%Y-%m-%d %H:%M:%S,") + f"{int(t * 1000) % 1000:03d}"
        return f"{ts} - INFO - trainer - step={step} loss={lv} step_time_ms={ms:.1f}"
    if style == "megatron":
        ts = w.at(t).strftime("%Y-%m-%d %H:%M:%S")
        ll = "nan" if loss != loss else f"{loss:.6E}"
        return (f" [{ts}] iteration {step:>8}/{total:>8} | consumed samples: {step * 128:>12} | elapsed time per "
                f"iteration (ms): {ms:.1f} | learning rate: 3.000E-04 | global batch size:   128 | lm loss: {ll} | "
                f"loss scale: 65536.0 | grad norm: 1.{step % 9}21 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    if style == "hf":
        return "{'loss': " + lv + ", 'grad_norm': 1.31, 'learning_rate': 0.0003, 'epoch': " + f"{step / total:.2f}" + "}"
    # loguru's default sink format
    ts = w.at(t).strftime("%Y-%m-%d %H:%M:%S.") + f"{int(t * 1000) % 1000:03d}"
    return f"{ts} | INFO     | __main__:train:88 - step {step} loss {lv}"


# ---------------------------------------------------------------------------------------------
# The faults: what the culprit's process writes (Python / C++ / NCCL upstream formats)
# ---------------------------------------------------------------------------------------------
_EXC = [  # (frames, exception line)
    ([("/workspace/data/loader.py", 141, "__next__", "sample = self.dataset[idx]"),
      ("/workspace/data/dataset.py", 77, "__getitem__", "raise ValueError(f\"corrupt record at offset {off}\")")],
     "ValueError: corrupt record at offset 8812301"),
    ([("/workspace/model.py", 212, "forward", "x = self.proj(torch.cat([a, b], dim=-1))")],
     "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4096x1536 and 2048x1024)"),
    ([("/workspace/train.py", 96, "load_batch", "return cache[key]")], "KeyError: 'input_ids'"),
    ([("/workspace/ckpt.py", 58, "save", "torch.save(state, path)"),
      ("/usr/lib/python3/dist-packages/torch/serialization.py", 651, "save", "with _open_zipfile_writer(f) as opened_zipfile:")],
     "OSError: [Errno 28] No space left on device"),
    ([("/workspace/train.py", 150, "step", "assert batch.shape[0] == micro_bs, batch.shape")],
     "AssertionError: torch.Size([3, 2048])"),
]
_EXC_UNSEEN = [
    ([("/opt/app/pipeline.py", 33, "collate", "return {k: torch.stack(v) for k, v in out.items()}")],
     "RuntimeError: stack expects each tensor to be equal size, but got [512] at entry 0 and [498] at entry 5"),
    ([("/opt/app/tokenize.py", 12, "encode", "return vocab[tok]")], "IndexError: list index out of range"),
    ([("/opt/app/train_loop.py", 201, "run", "metrics = compute(metrics_cfg)")],
     "ZeroDivisionError: float division by zero"),
]


def _traceback(exc: tuple, entry: str = "/workspace/train.py") -> list[str]:
    frames, last = exc
    out = ["Traceback (most recent call last):", f'  File "{entry}", line 301, in <module>', "    main()",
           f'  File "{entry}", line 277, in main', "    train(cfg)"]
    for f, ln, fn, src in frames:
        out += [f'  File "{f}", line {ln}, in {fn}', f"    {src}"]
    return out + [last]


def _oom_lines(rng: random.Random, w: World, rank: int, new: bool) -> list[str]:
    tried = rng.choice(["2.00 GiB", "1.53 GiB", "784.00 MiB", "4.50 GiB"])
    tb = _traceback(([("/workspace/model.py", 188, "forward", "attn = torch.softmax(q @ k.transpose(-2, -1), dim=-1)")], ""))[:-1]
    gpu = w.local(rank)
    if new:   # torch >= 2.3 (c10/cuda/CUDACachingAllocator.cpp)
        msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU {gpu} has a total capacity of "
               f"79.15 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use. "
               "Of the allocated memory 75.31 GiB is allocated by PyTorch, and 1.27 GiB is reserved by PyTorch but "
               "unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
               "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    else:
        msg = (f"RuntimeError: CUDA out of memory. Tried to allocate {tried} (GPU {gpu}; 39.59 GiB total capacity; "
               "36.10 GiB already allocated; 1.19 GiB free; 37.00 GiB reserved in total by PyTorch) If reserved memory "
               "is >> allocated memory try setting max_split_size_mb to avoid fragmentation.")
    return tb + [msg]


def _gpu_error_lines(rng: random.Random) -> list[str]:
    what = rng.choice(["an illegal memory access was encountered", "uncorrectable ECC error encountered",
                       "unspecified launch failure"])
    tb = _traceback(([("/workspace/train.py", 188, "step", "loss.backward()")], ""))[:-1]
    return tb + [f"RuntimeError: CUDA error: {what}",
                 "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
                 "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                 "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]


def _segfault_lines(w: World) -> list[str]:
    # CPython Python/faulthandler.c (faulthandler_fatal_error, dump_traceback)
    return ["Fatal Python error: Segmentation fault", "",
            "Thread 0x00007f3a5cffd700 (most recent call first):",
            '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
            '  File "/usr/lib/python3.10/threading.py", line 607 in wait', "",
            "Current thread 0x00007f3c1b5f7740 (most recent call first):",
            '  File "/workspace/ext/fused_ops.py", line 41 in fused_adam_step',
            '  File "/workspace/train.py", line 190 in step',
            '  File "/workspace/train.py", line 301 in <module>', ""]


def _glog_ts(w: World, t: float) -> str:
    d = w.at(t)
    return d.strftime("%m%d %H:%M:%S.") + f"{d.microsecond:06d}"


def _watchdog(w: World, rank: int, t: float, seq: int, new: bool, pg: bool = True) -> list[str]:
    # torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (WorkNCCL::checkTimeout, watchdogHandler)
    tag = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]" if (new and pg) else f"[Rank {rank}]"
    pid = w.pids[rank]
    lines = [f"[E{_glog_ts(w, t)} {pid} ProcessGroupNCCL.cpp:632] {tag} Watchdog caught collective operation timeout: "
             f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=25690112, NumelOut=25690112, Timeout(ms)=600000) ran for "
             f"600{rank % 10}{(rank * 7) % 100:02d} milliseconds before timing out."]
    if new:
        lines.append(f"[E{_glog_ts(w, t + 0.01)} {pid} ProcessGroupNCCL.cpp:2168] {tag} Timeout at NCCL work: {seq}, "
                     f"last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.")
    return lines


# ---------------------------------------------------------------------------------------------
# A run's worker lines and exits, from its fault
# ---------------------------------------------------------------------------------------------

def _worker_lines(rng: random.Random, w: World, f: Fault, style: str, all_log: bool, new_torch: bool,
                  exc_pool: list, tag: str = "") -> list[Line]:
    out: list[Line] = []
    total = rng.choice([500, 1000, 2000])
    every = rng.choice([10, 20, 50])
    dt_step = 0.4
    # the fault comes right after a logged step (its step line is the last one the culprit wrote)
    fail_step = min(-(-int(f.t / dt_step) // every) * every, total) if f.kind != "healthy" else total
    if f.kind != "healthy":
        f.t = 2 + fail_step * dt_step + 0.2
    loggers = range(w.size) if all_log else [0]
    for r in range(w.size):
        out.append(Line(0.5 + r * 0.003, r, f"Initialized process group: rank {r}, world size {w.size}"
                        if rng.random() < 0.5 or r == 0 else "Loading dataset shards ...", w.node_of(r)))
    last_step = {r: fail_step for r in range(w.size)}
    if f.kind in ("hang", "nccl_timeout"):
        for c in f.culprits:
            last_step[c] = fail_step - every        # the culprit stopped one logging period early
    nan_from = {}
    if f.kind == "non_finite":
        for r in range(w.size):
            nan_from[r] = fail_step + (0 if r in f.culprits else every)
    end = min(fail_step + (every if f.kind == "non_finite" else 0), total)
    for s in range(every, end + 1, every):
        for r in loggers:
            if s > last_step[r] and f.kind in ("hang", "nccl_timeout"):
                continue
            loss = 2.9 * (0.999 ** s) + 0.01 * ((r * 13 + s) % 7)
            if r in nan_from and s >= nan_from[r]:
                loss = float("nan")
            t = 2 + s * dt_step + r * 0.002 + rng.random() * 0.05
            out.append(Line(t, r, tag.format(r=r, w=w.size) + _step_line(style, w, s, loss, t, total), w.node_of(r)))
    # noise every rank prints
    for r in range(w.size):
        if rng.random() < 0.3:
            out.append(Line(1.0 + r * 0.01, r, "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:558: UserWarning: "
                            "This DataLoader will create 16 worker processes in total.", w.node_of(r), err=True))
    k = f.kind
    tf = f.t
    seq = 4000 + rng.randint(0, 3000)
    if k == "crash":
        for c in f.culprits:
            for i, tx in enumerate(_traceback(rng.choice(exc_pool))):
                out.append(Line(tf + i * 1e-4, c, tx, w.node_of(c), err=True))
            f.exits[c] = (tf + 0.5, 1)
    elif k == "oom":
        c = f.culprits[0]
        for i, tx in enumerate(_oom_lines(rng, w, c, new_torch)):
            out.append(Line(tf + i * 1e-4, c, tx, w.node_of(c), err=True))
        f.exits[c] = (tf + 0.5, 1)
    elif k == "gpu_error":
        c = f.culprits[0]
        for i, tx in enumerate(_gpu_error_lines(rng)):
            out.append(Line(tf + i * 1e-4, c, tx, w.node_of(c), err=True))
        f.exits[c] = (tf + 0.5, -6)     # c10::Error after the CUDA error aborts
    elif k == "segfault":
        c = f.culprits[0]
        for i, tx in enumerate(_segfault_lines(w)):
            out.append(Line(tf + i * 1e-4, c, tx, w.node_of(c), err=True, fd=True))
        f.exits[c] = (tf + 0.1, -11)
    elif k == "host_oom":
        c = f.culprits[0]
        f.exits[c] = (tf, -9)           # the kernel's OOM killer: no line of its own
    elif k == "non_finite":
        c = f.culprits[0]
        if rng.random() < 0.5:   # the script stops on the NaN, on the rank that saw it first
            for i, tx in enumerate(_traceback(([("/workspace/train.py", 160, "step",
                                                 "raise FloatingPointError(f\"loss is {loss} at step {step}\")")],
                                               f"FloatingPointError: loss is nan at step {fail_step}"))):
                out.append(Line(tf + 0.1 + i * 1e-4, c, tx, w.node_of(c), err=True))
            f.exits[c] = (tf + 0.6, 1)
        else:
            f.cancelled = True
    elif k in ("nccl_timeout", "hang"):
        c = f.culprits[0]
        if k == "nccl_timeout":
            for r in range(w.size):
                if r in f.culprits:
                    continue
                for i, tx in enumerate(_watchdog(w, r, tf + 600 + r * 0.01, seq, new_torch)):
                    out.append(Line(tf + 600 + r * 0.01 + i * 1e-3, r, tx, w.node_of(r), err=True))
                f.exits[r] = (tf + 601 + r * 0.01, -6)
            if new_torch:   # the culprit's watchdog status: it never enqueued the collective
                out.append(Line(tf + 600.5, c, f"[E{_glog_ts(w, tf + 600.5)} {w.pids[c]} ProcessGroupNCCL.cpp:1987] "
                                f"[PG ID 0 PG GUID 0(default_pg) Rank {c}] Received a dump signal due to a collective "
                                f"timeout from  rank {min(set(range(w.size)) - {c})} and we will try our best to dump the "
                                f"debug info. Last enqueued NCCL work: {seq - 1}, last completed NCCL work: {seq - 1}.This "
                                "is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across "
                                "ranks, the order of collectives is not same for all ranks or the scheduled collective, "
                                "for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other "
                                "reasons such as network errors or bugs in the communications library (e.g. NCCL), etc.",
                                w.node_of(c), err=True))
            f.exits[c] = (tf + 602, -6)
        else:
            f.cancelled = True
    # nobody logs progress after its own death, nor after the launcher tore the job down
    if f.exits:
        t_end = min(t for t, _ in f.exits.values()) + 2.0
        out = [ln for ln in out if not (ln.t > t_end and ln.rank is not None and not ln.err)
               and not (ln.rank in f.exits and ln.t > f.exits[ln.rank][0])]
    return out


# ---------------------------------------------------------------------------------------------
# Launchers: how the lines of the ranks reach files, and what the launcher itself says
# ---------------------------------------------------------------------------------------------
_SIGNAMES = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 7: "SIGBUS"}
_STRSIGNAL = {6: "Aborted", 9: "Killed", 11: "Segmentation fault", 15: "Terminated", 7: "Bus error"}


def _first_exit(f: Fault, ranks) -> tuple[int, float, int] | None:
    got = [(t, r, c) for r, (t, c) in f.exits.items() if r in ranks and c != 0]
    if not got:
        return None
    t, r, c = min(got)
    return r, t, c


def _elastic_agent_lines(w: World, f: Fault, node: int, glog: bool, script: str = "train.py",
                         table: bool = True) -> list[Line]:
    """torch/distributed/elastic/multiprocessing/api.py (_poll) and errors/__init__.py (ChildFailedError)."""
    ranks = range(node * w.gpn, (node + 1) * w.gpn)
    first = _first_exit(f, ranks)
    out: list[Line] = []

    def log(t: float, level: str, mod: str, msg: str) -> None:
        if glog:
            out.append(Line(t, None, f"{level[0]}{_glog_ts(w, t)} {w.pids[0] - 50 + node} torch/distributed/elastic/{mod}] {msg}",
                            node, err=True))
        else:
            out.append(Line(t, None, f"{level}:torch.distributed.elastic.{mod.split('.py')[0].replace('/', '.')}:{msg}",
                            node, err=True))
    if first is None:
        if f.cancelled:   # the job is stopped from outside (agent/server/api.py run(): SignalException)
            t = f.t + 1800
            log(t, "INFO", "agent/server/api.py:704", "Received Signals.SIGTERM death signal, shutting down workers")
            for r in ranks:
                log(t + 0.01, "WARNING", "multiprocessing/api.py:897", f"Sending process {w.pids[r]} closing signal SIGTERM")
            tb = ["Traceback (most recent call last):", '  File "/usr/local/bin/torchrun", line 8, in <module>',
                  "    sys.exit(main())",
                  '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/multiprocessing/api.py", line 79, in _terminate_process_handler',
                  "    raise SignalException(f\"Process {os.getpid()} got signal: {sigval}\", sigval=sigval)",
                  f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {w.pids[0] - 50 + node} got signal: 15"]
            out += [Line(t + 0.5 + i * 1e-4, None, tx, node, err=True) for i, tx in enumerate(tb)]
        return out
    r0, t0, c0 = first
    killed = []
    for r in ranks:
        if r != r0 and (r not in f.exits or f.exits[r][0] > t0):
            log(t0 + 0.2, "WARNING", "multiprocessing/api.py:897", f"Sending process {w.pids[r]} closing signal SIGTERM")
            killed.append(r)
    log(t0 + 1.0, "ERROR", "multiprocessing/api.py:869",
        f"failed (exitcode: {c0}) local_rank: {w.local(r0)} (pid: {w.pids[r0]}) of binary: /usr/bin/python3")
    if not table:
        return out
    tb = ["Traceback (most recent call last):", '  File "/usr/local/bin/torchrun", line 8, in <module>',
          "    sys.exit(main())",
          '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 263, in launch_agent',
          "    raise ChildFailedError(", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
          "=" * 60, f"{script} FAILED", "-" * 60, "Failures:"]
    others = [r for r in ranks if r != r0 and r in f.exits and f.exits[r][1] != 0]
    if not others:
        tb.append("  <NO_OTHER_FAILURES>")
    ts = lambda t: w.at(t).strftime("%Y-%m-%d_%H:%M:%S")
    for i, r in enumerate(others, 1):
        c = f.exits[r][1]
        tb += [f"[{i}]:", f"  time      : {ts(f.exits[r][0])}", f"  host      : {w.hosts[node]}",
               f"  rank      : {r} (local_rank: {w.local(r)})", f"  exitcode  : {c} (pid: {w.pids[r]})",
               "  error_file: <N/A>",
               f"  traceback : Signal {-c} ({_SIGNAMES.get(-c, 'SIG?')}) received by PID {w.pids[r]}" if c < 0
               else "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]
    tb += ["-" * 60, "Root Cause (first observed failure):", "[0]:", f"  time      : {ts(t0)}",
           f"  host      : {w.hosts[node]}", f"  rank      : {r0} (local_rank: {w.local(r0)})",
           f"  exitcode  : {c0} (pid: {w.pids[r0]})", "  error_file: <N/A>",
           f"  traceback : Signal {-c0} ({_SIGNAMES.get(-c0, 'SIG?')}) received by PID {w.pids[r0]}" if c0 < 0
           else "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html", "=" * 60]
    for i, tx in enumerate(tb):
        out.append(Line(t0 + 1.5 + i * 1e-4, None, tx, node, err=True))
    return out


def _launch_configs(w: World, node: int, glog: bool, t: float = 0.05) -> list[Line]:
    """torch/distributed/launcher/api.py (launch_agent): the launch config block."""
    head = ("I" + _glog_ts(w, t) + f" {w.pids[0] - 50 + node} torch/distributed/launcher/api.py:188] "
            if glog else "INFO:torch.distributed.launcher.api:") + "Starting elastic_operator with launch configs:"
    body = ["  entrypoint       : train.py", f"  min_nodes        : {w.nodes}", f"  max_nodes        : {w.nodes}",
            f"  nproc_per_node   : {w.gpn}", "  run_id           : none", "  rdzv_backend     : static",
            f"  rdzv_endpoint    : {w.hosts[0]}:29500", "  rdzv_configs     : {'rank': " + str(node) + ", 'timeout': 900}",
            "  max_restarts     : 0", "  monitor_interval : 0.1", "  log_dir          : /tmp/torchelastic_x1y2",
            "  metrics_cfg      : {}"]
    return [Line(t + i * 1e-4, None, tx, node, err=True) for i, tx in enumerate([head, *body])]


def _rendezvous(w: World, node: int, glog: bool, t: float = 0.2) -> list[Line]:
    """torch/distributed/elastic/agent/server/api.py (_rendezvous): the result block."""
    ranks = list(range(node * w.gpn, (node + 1) * w.gpn))
    head = ("I" + _glog_ts(w, t) + f" {w.pids[0] - 50 + node} torch/distributed/elastic/agent/server/api.py:525] "
            if glog else "INFO:torch.distributed.elastic.agent.server.api:") + "[default] Rendezvous complete for workers. Result:"
    body = ["  restart_count=0", f"  master_addr={w.hosts[0]}", "  master_port=29500", f"  group_rank={node}",
            f"  group_world_size={w.nodes}", f"  local_ranks={list(range(w.gpn))}", f"  role_ranks={ranks}",
            f"  global_ranks={ranks}", f"  role_world_sizes={[w.size] * w.gpn}", f"  global_world_sizes={[w.size] * w.gpn}", ""]
    return [Line(t + i * 1e-4, None, tx, node, err=True) for i, tx in enumerate([head, *body])]


# ---------------------------------------------------------------------------------------------
# Collectors: what is put in front of each physical line of a file
# ---------------------------------------------------------------------------------------------

def _collector(name: str, w: World, host: str) -> Callable[[Line], str]:
    if name == "plain":
        return lambda ln: ln.text
    if name == "iso":
        return lambda ln: w.at(ln.t).strftime("%Y-%m-%dT%H:%M:%S.") + f"{w.at(ln.t).microsecond // 1000:03d}Z {ln.text}"
    if name == "cri":   # kubelet's CRI container log files
        return lambda ln: (w.at(ln.t).strftime("%Y-%m-%dT%H:%M:%S.") + f"{w.at(ln.t).microsecond:06d}123Z "
                           + ("stderr" if ln.err else "stdout") + " F " + ln.text)
    if name == "kubectl_ts":   # kubectl logs --timestamps
        return lambda ln: w.at(ln.t).strftime("%Y-%m-%dT%H:%M:%S.") + f"{w.at(ln.t).microsecond:06d}000Z {ln.text}"
    if name == "docker":   # the json-file logging driver
        return lambda ln: json.dumps({"log": ln.text + "\n", "stream": "stderr" if ln.err else "stdout",
                                      "time": w.at(ln.t).strftime("%Y-%m-%dT%H:%M:%S.") + f"{w.at(ln.t).microsecond:06d}000Z"})
    if name == "journal":   # journalctl -o short-precise
        return lambda ln: (w.at(ln.t).strftime("%b %d %H:%M:%S.") + f"{w.at(ln.t).microsecond:06d} {host} "
                           f"python3[{4000 + (ln.rank or 0)}]: {ln.text}")
    if name == "journal_iso":   # journalctl -o short-iso
        return lambda ln: w.at(ln.t).strftime("%Y-%m-%dT%H:%M:%S+0000") + f" {host} torchrun[4242]: {ln.text}"
    raise ValueError(name)


# ---------------------------------------------------------------------------------------------
# Launcher renderers: (world, fault, lines, rng, unseen) -> {relative path: [Line, ...]} + prefixing
# ---------------------------------------------------------------------------------------------
Files = dict[str, list[str]]


def _time_limit(w: World, f: Fault) -> list[Line]:
    """A launcher run inside an sbatch script: the job's output file ends with slurmstepd's line when
    the time limit stops a job that made no progress (slurm src/slurmd/slurmstepd/req.c)."""
    if not f.cancelled:
        return []
    return [Line(f.t + 3000, None, f"slurmstepd: error: *** JOB 4815162 ON {w.hosts[0]} CANCELLED AT "
                 f"{w.at(f.t + 3000).strftime('%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***", 0, True)]


def _order(lines: list[Line]) -> list[Line]:
    return sorted(lines, key=lambda ln: ln.t)


def _emit(files: dict[str, list[Line]], texts: dict[str, Callable[[Line], str]], coll: dict[str, Callable]) -> Files:
    return {p: [coll[p](Line(ln.t, ln.rank, texts[p](ln), ln.node, ln.err, ln.fd)) for ln in _order(lines)]
            for p, lines in files.items()}


def _torchrun(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """torchrun on each node, console of each node in its own file; --tee 3 gives [defaultN]: (the LOCAL rank);
    PyTorch >= 2.3 puts [rankN]: (the global rank) in front of a failing rank's lines."""
    glog = rng.random() < (0.7 if unseen else 0.5)
    tee = rng.random() < 0.7
    rankp = rng.random() < 0.6
    show_cfg = rng.random() < 0.5
    show_rdzv = rng.random() < 0.4
    coll_name = rng.choice(["plain", "plain", "iso", "journal_iso"] if not unseen else ["plain", "kubectl_ts", "journal"])
    files: dict[str, list[Line]] = {}
    for n in range(w.nodes):
        own = [ln for ln in lines if ln.node == n]
        own += _elastic_agent_lines(w, f, n, glog)
        if show_cfg:
            own += _launch_configs(w, n, glog)
        if show_rdzv:
            own += _rendezvous(w, n, glog)
        files[f"{w.hosts[n]}.log" if w.nodes > 1 else "train.log"] = own

    def text(ln: Line) -> str:
        if ln.rank is None:
            return ln.text
        p = ""
        if tee:
            p += f"[default{w.local(ln.rank)}]:"
        if rankp and ln.err and not ln.fd:
            p += f"[rank{ln.rank}]:"
        return p + ln.text
    coll = {p: _collector(coll_name, w, p.split(".")[0]) for p in files}
    basis = "tee" if tee else "none"
    return _emit(files, {p: text for p in files}, coll), f"torchrun/{basis}{'+rank' if rankp else ''}/{coll_name}"


def _torchrun_logdir(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """torchrun --log-dir D --redirects 3: D/<run_id>/attempt_0/<local_rank>/{stdout,stderr}.log per node, the agent's
    lines on the node's console (torch/distributed/elastic/multiprocessing/api.py, LogsSpecs)."""
    glog = rng.random() < 0.5
    files: dict[str, list[Line]] = {}
    texts: dict[str, Callable] = {}
    run_id = f"{rng.randint(100000, 999999)}_{rng.choice(['abc1', 'x7k2', 'q9w3'])}"
    for n in range(w.nodes):
        nd = f"{w.hosts[n]}/" if w.nodes > 1 else ""
        for r in range(n * w.gpn, (n + 1) * w.gpn):
            for stream in ("stdout", "stderr"):
                p = f"{nd}logs/{run_id}/attempt_0/{w.local(r)}/{stream}.log"
                files[p] = [ln for ln in lines if ln.rank == r and ln.err == (stream == "stderr")]
        agent = _elastic_agent_lines(w, f, n, glog) + _launch_configs(w, n, glog)
        files[f"{nd}console.log"] = agent
    for p in files:
        texts[p] = lambda ln: ln.text
    coll = {p: _collector("plain", w, "") for p in files}
    return _emit(files, texts, coll), "torchrun-logdir"


def _srun(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """srun --label python train.py: one task per rank, `%0*d: ` (slurm src/srun, --label); srun's own lines
    `srun: error: host: task N: Exited with exit code C` / `: Killed` (slurm src/srun/launch.c _task_finish)."""
    width = len(str(w.size - 1))
    out: list[Line] = list(lines)
    first = _first_exit(f, range(w.size))
    if first:
        r0, t0, c0 = first
        if f.kind == "host_oom" and rng.random() < 0.5:
            out.append(Line(t0 + 0.2, None, f"slurmstepd: error: Detected 1 oom_kill event in StepId=4815162.0. "
                            "Some of the step tasks have been OOM Killed.", w.node_of(r0), True))
            out.append(Line(t0 + 0.3, None, f"srun: error: {w.host(r0)}: task {r0}: Out Of Memory", 0, True))
        elif c0 < 0:
            core = " (core dumped)" if -c0 in (6, 11) else ""
            out.append(Line(t0 + 0.3, None, f"srun: error: {w.host(r0)}: task {r0}: {_STRSIGNAL[-c0]}{core}", 0, True))
        else:
            out.append(Line(t0 + 0.3, None, f"srun: error: {w.host(r0)}: task {r0}: Exited with exit code {c0}", 0, True))
        out.append(Line(t0 + 0.4, None, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", 0, True))
        out.append(Line(t0 + 0.5, None, f"slurmstepd: error: *** STEP 4815162.0 ON {w.hosts[0]} CANCELLED AT "
                        f"{w.at(t0 + 0.5).strftime('%Y-%m-%dT%H:%M:%S')} ***", 0, True))
        rest = [r for r in range(w.size) if r != r0]
        for n in range(w.nodes):
            mine = [r for r in rest if w.node_of(r) == n]
            if mine:
                spec = f"{mine[0]}-{mine[-1]}" if mine == list(range(mine[0], mine[-1] + 1)) and len(mine) > 1 else ",".join(map(str, mine))
                out.append(Line(t0 + 1.0 + n * 0.01, None, f"srun: error: {w.hosts[n]}: task{'s' if len(mine) > 1 else ''} {spec}: Killed", 0, True))
    elif f.cancelled:
        out.append(Line(f.t + 3000, None, f"slurmstepd: error: *** JOB 4815162 ON {w.hosts[0]} CANCELLED AT "
                        f"{w.at(f.t + 3000).strftime('%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***", 0, True))

    def text(ln: Line) -> str:
        return ln.text if ln.rank is None else f"{ln.rank:0{width}d}: {ln.text}"
    coll_name = rng.choice(["plain"] if not unseen else ["plain", "cri"])
    files = {"slurm-4815162.out": out}
    return _emit(files, {"slurm-4815162.out": text}, {"slurm-4815162.out": _collector(coll_name, w, "")}), f"srun-label/{coll_name}"


def _mpirun(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """mpirun --tag-output: `[jobid,rank]<stream>:` (open-mpi orte/mca/iof); errmgr's help texts
    (help-errmgr-base.txt: proc-aborted-signal, normal-termination-but / non-zero-exit)."""
    job = rng.randint(1000, 65000)
    out: list[Line] = list(lines) + _time_limit(w, f)
    first = _first_exit(f, range(w.size))
    dash = "-" * 74
    if first:
        r0, t0, c0 = first
        if c0 < 0:
            block = [dash, f"mpirun noticed that process rank {r0} with PID {w.pids[r0]} on node {w.host(r0)} exited on "
                     f"signal {-c0} ({_STRSIGNAL[-c0]}).", dash]
        else:
            block = [dash, "Primary job  terminated normally, but 1 process returned",
                     "a non-zero exit code. Per user-direction, the job has been aborted.", dash, dash,
                     "mpirun detected that one or more processes exited with non-zero status, thus causing",
                     "the job to be terminated. The first process to do so was:", "",
                     f"  Process name: [[{job},1],{r0}]", f"  Exit code:    {c0}", dash]
        out += [Line(t0 + 1 + i * 1e-4, None, tx, 0, True) for i, tx in enumerate(block)]

    def text(ln: Line) -> str:
        return ln.text if ln.rank is None else f"[{job},{ln.rank}]<{'stderr' if ln.err else 'stdout'}>:{ln.text}"
    return _emit({"mpirun.log": out}, {"mpirun.log": text}, {"mpirun.log": _collector("plain", w, "")}), "mpirun-tag"


def _horovod(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """horovodrun (gloo): `[rank]<stream>:` with time.asctime() in front when --prefix-output-with-timestamp
    (horovod/runner/common/util/safe_shell_exec.py prepend_context); a death by signal N is exit code 128+N
    (the middleman's); the driver's RuntimeError names the first process (horovod/runner/gloo_run.py)."""
    stamp = unseen or rng.random() < 0.4
    out: list[Line] = list(lines) + _time_limit(w, f)
    first = _first_exit(f, range(w.size))
    if first:
        r0, t0, c0 = first
        code = 128 - c0 if c0 < 0 else c0
        tb = ["Traceback (most recent call last):", '  File "/usr/local/bin/horovodrun", line 8, in <module>',
              "    sys.exit(run_commandline())",
              '  File "/usr/local/lib/python3.8/dist-packages/horovod/runner/gloo_run.py", line 168, in launch_gloo',
              "    raise RuntimeError('Horovod detected that one or more processes exited with non-zero '",
              "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the "
              "job to be terminated. The first process to do so was:", f"Process name: {r0}", f"Exit code: {code}"]
        out += [Line(t0 + 2 + i * 1e-4, None, tx, 0, True) for i, tx in enumerate(tb)]

    def text(ln: Line) -> str:
        if ln.rank is None:
            return ln.text
        ts = w.at(ln.t).strftime("%a %b %d %H:%M:%S %Y").replace(" 0", "  ", 1) if stamp else ""
        return f"{ts}[{ln.rank}]<{'stderr' if ln.err else 'stdout'}>:{ln.text}"
    return _emit({"horovod.log": out}, {"horovod.log": text}, {"horovod.log": _collector("plain", w, "")}), f"horovod{'-ts' if stamp else ''}"


def _deepspeed(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """deepspeed launcher: runner.py runs launch.py on each node (pdsh prefixes `host: ` on several nodes);
    launch.py prints WORLD INFO DICT / nnodes / global_rank_mapping / dist_world_size and, when a worker
    dies, sigkill_handler's `exits with return code = C` (deepspeed/launcher/launch.py)."""
    rankp = rng.random() < 0.6
    out: list[Line] = list(lines)

    def ds(t: float, lvl: str, where: str, msg: str, node: int) -> Line:
        return Line(t, None, f"[{w.at(t).strftime('%Y-%m-%d %H:%M:%S')},{int(t * 1000) % 1000:03d}] [{lvl}] [{where}] {msg}", node, True)
    mapping = "{" + ", ".join(f"'{h}': {list(range(i * w.gpn, (i + 1) * w.gpn))}" for i, h in enumerate(w.hosts)) + "}"
    for n in range(w.nodes):
        out.append(ds(0.1, "INFO", "launch.py:146:main", f"WORLD INFO DICT: {mapping}", n))
        out.append(ds(0.1, "INFO", "launch.py:152:main", f"nnodes={w.nodes}, num_local_procs={w.gpn}, node_rank={n}", n))
        out.append(ds(0.1, "INFO", "launch.py:163:main", f"global_rank_mapping=defaultdict(<class 'list'>, {mapping})", n))
        out.append(ds(0.1, "INFO", "launch.py:164:main", f"dist_world_size={w.size}", n))
    for n in range(w.nodes):
        first = _first_exit(f, range(n * w.gpn, (n + 1) * w.gpn))
        if first:
            r0, t0, c0 = first
            # sigkill_handler kills every process it spawned, then prints `cmd`: the spawn loop's
            # variable, the command of the LAST process (local rank nproc-1), whoever failed
            for r in range(n * w.gpn, (n + 1) * w.gpn):
                out.append(ds(t0 + 0.2, "INFO", "launch.py:319:sigkill_handler", f"Killing subprocess {w.pids[r]}", n))
            out.append(ds(t0 + 0.4, "ERROR", "launch.py:325:sigkill_handler",
                          f"['/usr/bin/python3', '-u', 'train.py', '--local_rank={w.gpn - 1}', '--deepspeed'] exits with return code = {c0}", n))
    # whose exit it was shows only in the culprit's own lines
    # (a segfault's faulthandler lines are the culprit's own error lines: `[rankN]:` names it too)
    f.named = f.kind in ("hang", "nccl_timeout", "non_finite") or (rankp and f.kind in ("crash", "oom", "gpu_error", "segfault"))

    if f.cancelled:   # launch.py sigkill_handler on SIGTERM
        for n in range(w.nodes):
            for r in range(n * w.gpn, (n + 1) * w.gpn):
                out.append(ds(f.t + 1800, "INFO", "launch.py:319:sigkill_handler", f"Killing subprocess {w.pids[r]}", n))
            out.append(ds(f.t + 1800.2, "INFO", "launch.py:331:sigkill_handler", "Main process received SIGTERM, exiting", n))

    def text(ln: Line) -> str:
        s = ln.text if ln.rank is None or not (rankp and ln.err) else f"[rank{ln.rank}]:{ln.text}"
        return f"{w.hosts[ln.node]}: {s}" if w.nodes > 1 else s
    return _emit({"deepspeed.log": out}, {"deepspeed.log": text}, {"deepspeed.log": _collector("plain", w, "")}), \
        f"deepspeed{'-pdsh' if w.nodes > 1 else ''}{'+rank' if rankp else ''}"


def _accelerate(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """accelerate launch (one node): runs torch.distributed.run in process, so torchrun's agent lines and table,
    then its own CalledProcessError-free exit; PyTorch >= 2.3 [rankN]: prefixes on failing ranks' stderr."""
    glog = rng.random() < 0.5
    out = list(lines) + _elastic_agent_lines(w, f, 0, glog, script="train_accel.py")
    rankp = rng.random() < 0.7

    def text(ln: Line) -> str:
        return f"[rank{ln.rank}]:{ln.text}" if (ln.rank is not None and rankp and ln.err and not ln.fd) else ln.text
    return _emit({"accelerate.log": out}, {"accelerate.log": text}, {"accelerate.log": _collector("plain", w, "")}), \
        f"accelerate{'+rank' if rankp else ''}"


def _legacy_launch(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """torch.distributed.launch before torch 1.9 (torch/distributed/launch.py main): one node, no prefixes; on a
    failed worker it kills the rest and raises CalledProcessError with the worker's command (its --local_rank)."""
    out: list[Line] = [Line(0.01, None, "*" * 49, 0, True),
                       Line(0.011, None, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                            "to avoid your system being overloaded, please further tune the variable for optimal performance "
                            "in your application as needed. ", 0, True),
                       Line(0.012, None, "*" * 49, 0, True)] + list(lines) + _time_limit(w, f)
    first = _first_exit(f, range(w.size))
    # the script names its rank only in lines it prints itself (the tag); the launcher's cmd is the
    # spawn loop's last one (local rank nproc-1), whoever failed
    f.named = f.kind in ("hang", "nccl_timeout", "non_finite")
    if first:
        r0, t0, c0 = first
        for r in range(w.size):
            out.append(Line(t0 + 0.2 + r * 1e-3, None, f"Killing subprocess {w.pids[r]}", 0, True))
        tb = ["Traceback (most recent call last):", '  File "/usr/lib/python3.8/runpy.py", line 194, in _run_module_as_main',
              '    return _run_code(code, main_globals, None,',
              '  File "/usr/local/lib/python3.8/dist-packages/torch/distributed/launch.py", line 253, in main',
              "    raise subprocess.CalledProcessError(returncode=process.returncode,",
              f"subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'train.py', '--local_rank={w.gpn - 1}']' "
              + (f"died with <Signals.{_SIGNAMES[-c0]}: {-c0}>." if c0 < 0 else f"returned non-zero exit status {c0}.")]
        out += [Line(t0 + 0.5 + i * 1e-4, None, tx, 0, True) for i, tx in enumerate(tb)]
    return _emit({"launch.log": out}, {"launch.log": lambda ln: ln.text}, {"launch.log": _collector("plain", w, "")}), "legacy-launch"


def _kubectl(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """A PyTorchJob (Kubeflow training-operator): one pod per node running torchrun (master-0, worker-0..),
    `kubectl logs --prefix` puts `[pod/NAME/CONTAINER] ` in front (kubectl logs, --prefix)."""
    pods = [f"llm-ft-master-0"] + [f"llm-ft-worker-{i}" for i in range(w.nodes - 1)]
    w.hosts = pods
    glog = True
    tee = rng.random() < 0.6
    out: list[Line] = list(lines)
    for n in range(w.nodes):
        out += _elastic_agent_lines(w, f, n, glog) + _launch_configs(w, n, glog)

    def text(ln: Line) -> str:
        s = ln.text
        if ln.rank is not None:
            s = (f"[default{w.local(ln.rank)}]:" if tee else "") + (f"[rank{ln.rank}]:" if ln.err and not ln.fd else "") + s
        return f"[pod/{pods[ln.node]}/pytorch] {s}"
    return _emit({"kubectl.log": out}, {"kubectl.log": text}, {"kubectl.log": _collector("plain", w, "")}), "kubectl-prefix"


def _lightning(w: World, f: Fault, lines: list[Line], rng: random.Random, unseen: bool) -> tuple[Files, str]:
    """Lightning under Slurm (srun --label, one task per rank): lightning_fabric's rank_prefixed_message
    `[rank: N] ` on its own info lines, `Initializing distributed: GLOBAL_RANK: N, MEMBER: N+1/W`."""
    extra = [Line(0.3 + r * 1e-3, r, f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{w.size}", w.node_of(r), True)
             for r in range(w.size)]
    extra += [Line(0.31 + r * 1e-3, r, f"[rank: {r}] Seed set to 1234", w.node_of(r), True) for r in range(w.size)]
    f2 = lines + extra
    files, name = _srun(w, f, f2, rng, unseen)
    return files, "lightning+" + name


_LAUNCHERS: dict[str, tuple[Callable, str]] = {   # name -> (renderer, which sets use it)
    "torchrun": (_torchrun, "both"), "torchrun_logdir": (_torchrun_logdir, "both"), "srun": (_srun, "both"),
    "mpirun": (_mpirun, "both"), "horovod": (_horovod, "both"), "deepspeed": (_deepspeed, "both"),
    "accelerate": (_accelerate, "both"), "lightning": (_lightning, "both"),
    "legacy_launch": (_legacy_launch, "unseen"), "kubectl": (_kubectl, "unseen"),
}
_ONE_NODE = {"accelerate", "legacy_launch"}
_RANK_PREFIXED = {"srun", "mpirun", "horovod", "lightning"}


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------
_KINDS = ["crash", "crash", "oom", "host_oom", "host_oom", "nccl_timeout", "hang", "non_finite", "gpu_error", "segfault", "healthy"]
_TRUTH_KINDS = {"crash": ["crash"], "oom": ["oom"], "host_oom": ["host_oom"], "nccl_timeout": ["nccl_timeout", "hang"],
                "hang": ["hang"], "non_finite": ["non_finite"], "gpu_error": ["gpu_error"], "segfault": ["crash"],
                "healthy": []}


def make_case(seed: int, unseen: bool) -> tuple[Files, dict]:
    rng = random.Random(seed)
    names = [n for n, (_, sets) in _LAUNCHERS.items() if sets == "both" or (unseen and sets == "unseen")]
    launcher = rng.choice(names)
    if launcher in _ONE_NODE:
        nodes = 1
    else:
        nodes = rng.choice([1, 1, 2, 2, 4, 8])
    gpn = rng.choice([2, 4, 8]) if nodes > 1 else rng.choice([2, 4, 8])
    while nodes * gpn > 64:
        gpn //= 2
    w = _world(rng, nodes, gpn)
    kind = rng.choice(_KINDS)
    culprit = rng.randrange(w.size)
    if kind == "crash" and rng.random() < 0.15 and w.size >= 4:   # two ranks fail on the same bad batch
        culprits = sorted(rng.sample(range(w.size), 2))
    else:
        culprits = [culprit]
    f = Fault(kind, culprits if kind != "healthy" else [], t=60 + rng.random() * 200)
    style = rng.choice(["plain", "pylog", "megatron", "hf"] if not unseen else ["plain", "loguru", "megatron", "pylog"])
    all_log = kind in ("hang", "nccl_timeout", "non_finite") or rng.random() < 0.5
    new_torch = rng.random() < 0.6
    # a script that logs on every rank names the rank itself unless its launcher prefixes every line
    tags = ["[Rank {r}] ", "rank {r}: ", ""] if not unseen else ["(rank {r}/{w}) ", "RANK={r} ", "[Rank {r}] ", ""]
    tag = rng.choice(tags)
    if all_log and not tag and launcher not in _RANK_PREFIXED:
        tag = tags[0]
    lines = _worker_lines(rng, w, f, style, all_log, new_torch, _EXC_UNSEEN + _EXC[:2] if unseen else _EXC, tag)
    if kind == "crash" and len(culprits) == 2:
        # the second rank fails on the same batch 0.3 s later: both are culprits, the launcher names the first
        t2, c2 = f.exits[culprits[1]]
        f.exits[culprits[1]] = (t2 + 0.3, c2)
    files, lname = _LAUNCHERS[launcher][0](w, f, lines, rng, unseen)
    truth = {"failed": kind != "healthy", "ranks": sorted(f.culprits) if f.named else [], "kinds": _TRUTH_KINDS[kind],
             "fault": kind, "launcher": lname, "world": w.size, "nodes": w.nodes, "style": style, "seed": seed}
    return files, truth


SETS = {"seen": (1000, 183), "unseen": (900_000, 77)}


def write_set(name: str, root: Path) -> list[tuple[str, dict]]:
    base, n = SETS[name]
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    cases = []
    for i in range(n):
        files, truth = make_case(base + i, name == "unseen")
        cname = f"{name}-{i:03d}"
        d = root / cname
        for rel, text in files.items():
            p = d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("\n".join(text) + "\n")
        (root / f"{cname}.truth.json").write_text(json.dumps(truth, indent=1))
        cases.append((cname, truth))
    return cases


def _diagnose(path: Path) -> tuple[dict | None, int, str]:
    from typer.testing import CliRunner

    from forensics.cli import app

    res = CliRunner().invoke(app, ["diagnose", str(path), "--format", "json"])
    try:
        return json.loads(res.stdout), res.exit_code, ""
    except Exception:
        return None, res.exit_code, (res.stdout + str(res.exception))[-300:]


def judge(truth: dict, rep: dict | None) -> tuple[bool, str]:
    if rep is None:
        return False, "no JSON"
    rc = rep.get("root_cause")
    if not truth["failed"]:
        return rc is None, "healthy" if rc is None else f"{rc.get('kind')} {rc.get('ranks')}"
    if rc is None:
        return False, "Healthy"
    got = f"{rc.get('kind')} {rc.get('ranks')} ({rc.get('basis')}) :: {(rc.get('summary') or '')[:140]}"
    return rc.get("kind") in truth["kinds"] and sorted(rc.get("ranks") or []) == truth["ranks"], got


def score(name: str, root: Path, show_all: bool = False) -> int:
    os.environ.setdefault("FORENSICS_CACHE", f"/tmp/console-corpus-cache-{os.getpid()}")
    cases = write_set(name, root)
    right = 0
    misses = []
    by: dict[str, list[int]] = {}
    for cname, truth in cases:
        rep, code, err = _diagnose(root / cname)
        ok, got = judge(truth, rep)
        right += ok
        key = truth["launcher"].split("/")[0]
        by.setdefault(key, [0, 0])
        by[key][0] += ok
        by[key][1] += 1
        if not ok or show_all:
            misses.append(f"{'ok ' if ok else 'BAD'} {cname} {truth['launcher']} {truth['fault']} w={truth['world']}x"
                          f"{truth['nodes']}n truth={truth['ranks']} {truth['kinds']} got={got}{' ' + err if err else ''}")
    for m in misses:
        print(m)
    print("by launcher: " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in sorted(by.items())))
    print(f"{name}: {right}/{len(cases)} right")
    return right


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.console_corpus")
    ap.add_argument("command", choices=["score", "write"])
    ap.add_argument("--set", choices=list(SETS), required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--show-all", action="store_true")
    a = ap.parse_args(argv)
    if a.command == "write":
        cases = write_set(a.set, Path(a.root))
        print(f"{len(cases)} cases in {a.root}")
    else:
        score(a.set, Path(a.root), a.show_all)


if __name__ == "__main__":
    main(sys.argv[1:])
