"""A catalogue of short multi-rank failure logs, each written here in the format of the tool that
prints it (forensics/failure_messages.py names the upstream source of every message), with the
truth of each: the kind of the root cause and the culprit ranks.

Issue 27: a failure message must be understood by what it MEANS (CUDA OOM, host OOM, NCCL
timeout, hang, non-finite, crash, data-loader death, the scheduler's cancel), whatever its
wording, and the rank it names must be the culprit. Each case mixes one message family with one
way of naming ranks (`[rankN]:`, per-rank files, torchrun --tee `[defaultN]:` on one node,
`[Rank N]` in c10d's text, Megatron's `Rank N:` in the message, Lightning's `[rank: N]`, srun
--label, mpirun --tag-output, DeepSpeed's launcher) and with the victims' cascade (timeouts,
lost peers, launcher teardown).

Parts: `seen` (written first, scored while the failure facts were wired), `added` (written
after, to probe what the wiring missed), `unseen` (written before the wiring with the seen part
and scored only at the end: it measures whether the work is general).

    python -m tests.message_catalogue score [--part seen|added|unseen|all] [-v]

runs `python -m forensics diagnose DIR --format json` on each case (in a scratch folder) and
prints right/total per part and every miss. A case is right when the root cause's kind is one of
the truth's kinds and its ranks are the truth's ranks (a healthy case: no root cause; a job-wide
case: ranks []).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

DAY = "2024-11-20"


@dataclass(frozen=True)
class Case:
    name: str
    part: str                               # seen / added / unseen
    kinds: tuple[str, ...] | None           # None: healthy (no root cause)
    ranks: tuple[int, ...]
    files: Callable[[], dict[str, str | bytes]]
    what: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


# -- line builders (formats of the tools named; the lines are ours) ---------------------------------
def ts(s: float) -> str:
    """Python logging's asctime (`%Y-%m-%d %H:%M:%S,mmm`) at second s after 14:30:00."""
    m, sec = divmod(s, 60)
    return f"{DAY} 14:{30 + int(m):02d}:{int(sec):02d},{int((sec % 1) * 1000):03d}"


def glog(level: str, s: float, pid: int, src: str, msg: str) -> str:
    """c10's glog-style header: `E1120 14:37:16.123456 4711 ProcessGroupNCCL.cpp:1234] msg`."""
    m, sec = divmod(s, 60)
    return f"{level}1120 14:{30 + int(m):02d}:{sec:09.6f} {pid} {src}] {msg}"


def steps(n: int, *, t0: float = 0.0, dt: float = 1.0, loss0: float = 2.5, until: int | None = None) -> list[tuple[float, str]]:
    """A rank's progress lines: (time, 'step k loss x step_time_ms y')."""
    out = []
    for k in range(1, (until or n) + 1):
        out.append((t0 + k * dt, f"step {k} loss {loss0 - 0.01 * k:.4f} step_time_ms {dt * 1000:.0f}"))
    return out


def logline(s: float, text: str, level: str = "INFO", name: str = "train") -> str:
    return f"{ts(s)} - {name} - {level} - {text}"


def prefixed(prefix: str, lines: list[str]) -> list[str]:
    return [prefix + ln for ln in lines]


def traceback(frames: list[tuple[str, int, str, str]], exc: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for f, ln, fn, code in frames:
        out += [f'  File "{f}", line {ln}, in {fn}', f"    {code}"]
    return out + exc.splitlines()


TRAIN_TB = [("/workspace/train.py", 212, "<module>", "main()"), ("/workspace/train.py", 180, "main", "loss = step(batch)"),
            ("/workspace/train.py", 141, "step", "out = model(batch)")]


def watchdog(rank: int, seq: int, op: str = "ALLREDUCE", ms: int = 600000, pg: str | None = None) -> str:
    """ProcessGroupNCCL.cpp (WorkNCCL::checkTimeout): the watchdog's timeout message."""
    head = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] " if pg else f"[Rank {rank}] "
    return (f"{head}Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1048576, "
            f"NumelOut=1048576, Timeout(ms)={ms}) ran for {ms + 37} milliseconds before timing out.")


def child_failed(rows: list[tuple[int, int, int, str]], root: int = 0, when: str = f"{DAY}_14:45:00") -> list[str]:
    """torch elastic's ChildFailedError table (torch/distributed/elastic/multiprocessing/errors):
    rows = (global rank, local rank, exitcode, host); `root` = index of the first observed."""
    out = ["Traceback (most recent call last):", '  File "/usr/local/bin/torchrun", line 8, in <module>',
           "    sys.exit(main())", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "============================================================", "train.py FAILED",
           "------------------------------------------------------------", "Failures:"]

    def rec(i: int, r: tuple[int, int, int, str]) -> list[str]:
        g, lr, code, host = r
        sig = {-9: "SIGKILL", -11: "SIGSEGV", -6: "SIGABRT", -7: "SIGBUS"}.get(code)
        out = [f"[{i}]:", f"  time      : {when}", f"  host      : {host}", f"  rank      : {g} (local_rank: {lr})",
               f"  exitcode  : {code} (pid: {4700 + g})", "  error_file: <N/A>"]
        out.append(f"  traceback : Signal {-code} ({sig}) received by PID {4700 + g}" if sig else
                   "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
        return out

    others = [r for i, r in enumerate(rows) if i != root]
    if not others:
        out.append("  <NO_OTHER_FAILURES>")
    for i, r in enumerate(others, 1):
        out += rec(i, r)
    out += ["------------------------------------------------------------", "Root Cause (first observed failure):"]
    out += rec(0, rows[root])
    out.append("============================================================")
    return out


def one_node_launch(n: int) -> list[str]:
    """torchrun's launch config of a one-node job (torch/distributed/launcher/api.py)."""
    return ["INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:",
            "  entrypoint       : train.py", "  min_nodes        : 1", "  max_nodes        : 1",
            f"  nproc_per_node   : {n}", "  run_id           : none", "  rdzv_backend     : static",
            "  rdzv_endpoint    : 127.0.0.1:29500", "  max_restarts     : 0", "  monitor_interval : 0.1"]


def torchrun_console(world: int, per_rank: dict[int, list[tuple[float, str]]], style: str = "rank",
                     tail: list[str] | None = None, head: list[str] | None = None) -> str:
    """One console file: every rank's (time, text) lines merged by time, each prefixed
    (`rank`: `[rankN]:`, `default`: torchrun --tee `[defaultN]:`, `lightning`: `[rank: N] `,
    `srun`: srun --label `N: `, `mpi`: mpirun --tag-output `[1,N]<stdout>:`); a text that is
    a list of lines (a traceback) keeps its order."""
    rows = []
    for r, items in per_rank.items():
        for i, (t, text) in enumerate(items):
            for j, ln in enumerate(text.split("\n")):
                rows.append((t, r, i, j, ln))
    rows.sort()
    pre = {"rank": "[rank{r}]:", "default": "[default{r}]:", "lightning": "[rank: {r}] ", "srun": "{r}: ",
           "mpi": "[1,{r}]<stderr>:", "none": ""}[style]
    out = list(head or [])
    out += [pre.format(r=r) + ln for (_t, r, _i, _j, ln) in rows]
    return "\n".join(out + list(tail or [])) + "\n"


def stamped(t: float, text: str, level: str = "INFO") -> tuple[float, str]:
    return t, logline(t, text, level)


def run_steps(world: int, n: int, stop: dict[int, int] | None = None, dt: float = 1.0) -> dict[int, list[tuple[float, str]]]:
    stop = stop or {}
    return {r: [stamped(t, x) for t, x in steps(n, dt=dt, until=stop.get(r, n))] for r in range(world)}


def per_rank_files(per_rank: dict[int, list[tuple[float, str]]], pattern: str = "rank_{r}.log") -> dict[str, str]:
    return {pattern.format(r=r): "\n".join(x for _t, x in sorted(items, key=lambda p: p[0])) + "\n"
            for r, items in per_rank.items()}


def tb(t: float, exc: str, frames: list[tuple[str, int, str, str]] | None = None) -> tuple[float, str]:
    return t, "\n".join(traceback(frames or TRAIN_TB, exc))


# -- message texts (formats from the sources failure_messages.py cites) ----------------------------
OOM_NEW = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {dev} has a total capacity of "
           "79.10 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. "
           "Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.31 GiB is reserved by PyTorch but "
           "unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
           "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
OOM_OLD = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU {dev}; 15.78 GiB total capacity; 14.21 GiB "
           "already allocated; 3.94 MiB free; 14.52 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
           "memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
           "PYTORCH_CUDA_ALLOC_CONF")
OOM_HIP = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.50 GiB. GPU {dev} has a total capacity of "
           "191.98 GiB of which 612.00 MiB is free. Of the allocated memory 188.1 GiB is allocated by PyTorch, and "
           "2.2 GiB is reserved by PyTorch but unallocated.")
CUDA_ERR_OOM = ("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other "
                "API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1")
NCCL_CUDA_OOM = ("torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
                 "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
                 "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'out of memory'")
CPU_ALLOC = ("RuntimeError: [enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: can't allocate memory: you tried "
             "to allocate 34359738368 bytes. Error code 12 (Cannot allocate memory)")
NP_MEMORY = "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 32.0 GiB for an array with shape (4294967296, 2) and data type float32"
DL_KILLED = "RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Killed. "
DL_BUS = ("RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Bus error. It is possible that dataloader's "
          "workers are out of shared memory. Please try to raise your shared memory limit.")
DL_EXITED = "RuntimeError: DataLoader worker (pid(s) {pid}) exited unexpectedly"
GLOO_TIMEOUT = ("RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
                "1800000ms for recv operation to complete")
GLOO_CLOSED = "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.1.0.{peer}]:{port}"
NCCL_REMOTE = ("torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
               "2006, remote process exited or there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed "
               "possibly due to a network error or a remote process exiting prematurely.\nLast error:\nsocketProgress: "
               "Connection closed by remote peer gpu-node-00<45678>")
NCCL_SYSTEM = ("torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
               "1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclSystemError: "
               "System call (e.g. socket, malloc) or external library call failed or device error. \nLast error:\n"
               "socketStartConnect: Connect to 10.1.0.3<43019> failed : Software caused connection abort")
HEARTBEAT_STUCK = ("[PG ID 0 PG GUID 0(default_pg) Rank {rank}] ProcessGroupNCCL's watchdog got stuck for 480 seconds without "
                   "making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API "
                   "(e.g., CudaEventDestroy) hang blocking the watchdog, and could be triggered by another thread holding "
                   "the GIL inside a CUDA api (for example, CudaEventDestroy), or other deadlock-prone behaviors.If you "
                   "suspect the watchdog is not actually stuck and a longer timeout would help, you can either increase "
                   "the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or disable the heartbeat monitor "
                   "(TORCH_NCCL_ENABLE_MONITORING=0).If either of aforementioned helps, feel free to file an issue to "
                   "PyTorch about the short timeout or false positive abort; otherwise, please attempt to debug the hang.")
HEARTBEAT_TIMED_OUT = ("[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Heartbeat monitor timed out! Process will be terminated "
                       "after dumping debug info. workMetaList_.size()=1")
MEGATRON_NAN = ("AssertionError: Rank {rank}: found NaN in local grad norm in backward pass before data-parallel "
                "communication collective. Device: {dev}, node: {host}")
MEGATRON_RERUN = ("RuntimeError: Rank {rank}, node {host}, device {dev}, iteration {it}: Unexpected result nan "
                  "(message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel "
                  "communication collective')")
DS_MIN_SCALE = "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
DS_OVERFLOW = "[deepspeed] OVERFLOW! Rank {rank} Skipping step. Attempted loss scale: {a}, reducing to {b}"
ANOMALY_NAN = "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output."
LIGHTNING_NONFINITE = ("Monitored metric val_loss = nan is not finite. Previous best value was 1.842. Signaling Trainer to stop.")
SEGV = "Fatal Python error: Segmentation fault\n\nThread 0x00007f3c2a5fe700 (most recent call first):\n  File \"/workspace/model.py\", line 88 in forward"
C10_TERMINATE = ("terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA driver error: invalid argument\n"
                 "Exception raised from c10_cuda_check_implementation at /opt/pytorch/c10/cuda/CUDAException.cpp:43 (most recent call first):")
ILLEGAL_ACCESS = ("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously "
                  "reported at some other API call, so the stacktrace below might be incorrect.")
XID = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid=4711, name=python3, GPU has fallen off the bus."


def syslog(s: float, host: str, tag: str, msg: str) -> str:
    m, sec = divmod(s, 60)
    return f"Nov 20 14:{30 + int(m):02d}:{int(sec):02d} {host} {tag}: {msg}"


# -- the cases --------------------------------------------------------------------------------------
def _c(name: str, part: str, kinds: tuple[str, ...] | None, ranks: tuple[int, ...], what: str = "", tags: tuple[str, ...] = ()):
    def deco(fn: Callable[[], dict[str, str | bytes]]) -> Case:
        CASES.append(Case(name, part, kinds, ranks, fn, what, tags))
        return fn  # type: ignore[return-value]
    return deco


CASES: list[Case] = []
HANG = ("hang", "nccl_timeout")


# ---- seen: CUDA OOM ----
@_c("oom_new_format_rank_prefix", "seen", ("oom",), (2,), "c10 CUDA OOM (>=2.3 wording), [rankN]: prefix, peers time out")
def _():
    pr = run_steps(4, 30, stop={2: 20})
    pr[2].append(tb(20.5, OOM_NEW.format(dev=2)))
    for r in (0, 1, 3):
        pr[r].append((630.0, glog("E", 630.0 + r, 4700 + r, "ProcessGroupNCCL.cpp:616", watchdog(r, 81))))
    return {"console.log": torchrun_console(4, pr)}


@_c("oom_old_format_per_rank_files", "seen", ("oom",), (1,), "pre-2.3 CUDA OOM wording in per-rank files")
def _():
    pr = run_steps(3, 20, stop={1: 12})
    pr[1].append(tb(12.5, OOM_OLD.format(dev=1)))
    for r in (0, 2):
        pr[r].append((613.0, glog("E", 613.0, 4700 + r, "ProcessGroupNCCL.cpp:616", watchdog(r, 37))))
    return per_rank_files(pr)


@_c("oom_hip_rocm", "seen", ("oom",), (3,), "ROCm: the same allocator says HIP out of memory")
def _():
    pr = run_steps(4, 20, stop={3: 9})
    pr[3].append(tb(9.5, OOM_HIP.format(dev=3)))
    return {"console.log": torchrun_console(4, pr)}


@_c("nccl_cuda_failure_oom", "seen", ("oom",), (1,), "NCCL WARN Cuda failure 'out of memory' + ncclUnhandledCudaError")
def _():
    pr = run_steps(2, 15, stop={1: 10})
    pr[1].append((10.4, "gpu-node-00:4711:4790 [1] NCCL WARN Cuda failure 'out of memory'"))
    pr[1].append(tb(10.5, NCCL_CUDA_OOM))
    pr[0].append((610.0, glog("E", 610.0, 4700, "ProcessGroupNCCL.cpp:616", watchdog(0, 31))))
    return {"console.log": torchrun_console(2, pr)}


@_c("cuda_error_out_of_memory", "seen", ("oom",), (0,), "CUDA runtime 'CUDA error: out of memory'")
def _():
    pr = run_steps(4, 20, stop={0: 7})
    pr[0].append(tb(7.5, CUDA_ERR_OOM))
    return {"console.log": torchrun_console(4, pr)}


# ---- seen: host OOM ----
@_c("cpu_allocator_host_oom", "seen", ("host_oom",), (1,), "DefaultCPUAllocator can't allocate memory = host RAM")
def _():
    pr = run_steps(2, 12, stop={1: 8})
    pr[1].append(tb(8.5, CPU_ALLOC))
    pr[0].append((608.0, glog("E", 608.0, 4700, "ProcessGroupNCCL.cpp:616", watchdog(0, 25))))
    return {"console.log": torchrun_console(2, pr)}


@_c("kernel_oom_killer_one_node", "seen", ("host_oom",), (1,), "kernel OOM killer + torchrun exitcode -9 local_rank 1 on one node")
def _():
    pr = run_steps(4, 20, stop={1: 14})
    con = torchrun_console(4, pr, style="default", head=one_node_launch(4))
    con += "\n".join([
        f"[{DAY} 14:30:15,210] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 4701 closing signal SIGTERM",
        f"[{DAY} 14:30:15,211] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 4703 closing signal SIGTERM",
        f"[{DAY} 14:30:15,300] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 1 (pid: 4702) of binary: /usr/bin/python3",
    ] + child_failed([(1, 1, -9, "gpu-node-00")])) + "\n"
    kern = syslog(14.8, "gpu-node-00", "kernel", "Out of memory: Killed process 4702 (python3) total-vm:98213344kB, anon-rss:90123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:180000kB oom_score_adj:0") + "\n"
    return {"console.log": con, "kern.log": kern}


@_c("dataloader_killed_signal", "seen", ("host_oom",), (3,), "DataLoader worker killed by signal: Killed (OOM killer took the worker)")
def _():
    pr = run_steps(4, 20, stop={3: 11})
    pr[3].append(tb(11.5, DL_KILLED.format(pid=5123), [("/workspace/train.py", 180, "main", "batch = next(it)"),
                 ("/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", 1133, "_try_get_data", "data = self._data_queue.get(timeout=timeout)"),
                 ("/usr/lib/python3/dist-packages/torch/utils/data/_utils/signal_handling.py", 66, "handler", "_error_if_any_worker_fails()")]))
    return {"console.log": torchrun_console(4, pr)}


@_c("dataloader_bus_error_files", "seen", ("host_oom",), (0,), "DataLoader worker Bus error: /dev/shm exhausted")
def _():
    pr = run_steps(2, 12, stop={0: 6})
    pr[0].append(tb(6.5, DL_BUS.format(pid=6001)))
    return per_rank_files(pr)


@_c("numpy_memory_error", "seen", ("host_oom",), (2,), "Python MemoryError subclass (numpy _ArrayMemoryError)")
def _():
    pr = run_steps(3, 12, stop={2: 5})
    pr[2].append(tb(5.5, NP_MEMORY))
    return {"console.log": torchrun_console(3, pr)}


# ---- seen: timeouts and hangs ----
@_c("watchdog_all_but_one", "seen", HANG, (2,), "every rank but 2 times out; rank 2 went silent first")
def _():
    pr = run_steps(4, 40, stop={2: 25})
    for r in (0, 1, 3):
        pr[r].append((626.0 + r, glog("E", 626.0 + r, 4700 + r, "ProcessGroupNCCL.cpp:616", watchdog(r, 101))))
    return {"console.log": torchrun_console(4, pr)}


@_c("heartbeat_stuck_one_rank", "seen", ("hang",), (2,), "heartbeat monitor: rank 2's watchdog got stuck")
def _():
    pr = run_steps(4, 30, stop={0: 22, 1: 22, 2: 22, 3: 22})
    pr[2].append((502.0, glog("E", 502.0, 4702, "ProcessGroupNCCL.cpp:1375", HEARTBEAT_STUCK.format(rank=2))))
    return {"console.log": torchrun_console(4, pr)}


@_c("heartbeat_timed_out_files", "seen", ("hang",), (1,), "'Heartbeat monitor timed out!' in rank 1's file")
def _():
    pr = run_steps(3, 30, stop={0: 18, 1: 18, 2: 18})
    pr[1].append((498.0, glog("E", 498.0, 4701, "ProcessGroupNCCL.cpp:1333", HEARTBEAT_TIMED_OUT.format(rank=1))))
    return per_rank_files(pr)


@_c("gloo_recv_timeout", "seen", HANG, (2,), "gloo 'Timed out waiting ...ms for recv' on all but rank 2")
def _():
    pr = run_steps(4, 30, stop={2: 17})
    for r in (0, 1, 3):
        pr[r].append(tb(1818.0 + r, GLOO_TIMEOUT))
    return {"console.log": torchrun_console(4, pr)}


@_c("gloo_closed_by_peer_cascade", "seen", ("crash",), (1,), "rank 1 raises; peers: gloo Connection closed by peer")
def _():
    pr = run_steps(4, 20, stop={1: 9})
    pr[1].append(tb(9.5, "ValueError: Expected input batch_size (32) to match target batch_size (31)."))
    for r in (0, 2, 3):
        pr[r].append(tb(9.8 + r * 0.01, GLOO_CLOSED.format(peer=1, port=40000 + r)))
    return {"console.log": torchrun_console(4, pr)}


@_c("nccl_remote_error_after_segv", "seen", ("crash",), (3,), "rank 3 segfaults; peers report ncclRemoteError")
def _():
    pr = run_steps(4, 20, stop={3: 13})
    pr[3].append((13.5, SEGV))
    for r in (0, 1, 2):
        pr[r].append(tb(14.0 + r * 0.01, NCCL_REMOTE))
    return {"console.log": torchrun_console(4, pr)}


# ---- seen: non-finite ----
@_c("megatron_nan_rank_in_text", "seen", ("non_finite",), (11,), "Megatron's assert names its global rank in the text; no prefix")
def _():
    lines = [logline(k, f" iteration {k * 10:8d}/   10000 | consumed samples: {k * 1280:10d} | elapsed time per iteration (ms): 812.3 | "
                     f"learning rate: 3.000E-04 | global batch size:   128 | lm loss: {2.5 - k * 0.01:.6E} | loss scale: 1.0 |")
             for k in range(1, 15)]
    lines += traceback([("/workspace/Megatron-LM/pretrain_gpt.py", 290, "<module>", "pretrain(train_valid_test_datasets_provider,"),
                        ("/workspace/Megatron-LM/megatron/core/distributed/param_and_grad_buffer.py", 114, "start_grad_sync",
                         "assert not norm.isnan(), (")], MEGATRON_NAN.format(rank=11, dev=3, host="node-02")).copy()
    return {"console.log": "\n".join(lines) + "\n"}


@_c("megatron_rerun_unexpected_nan", "seen", ("non_finite",), (5,), "Megatron rerun state machine: 'Rank 5, node ..: Unexpected result nan'")
def _():
    pr = run_steps(8, 30, stop={r: 21 for r in range(8)})
    pr[5].append(tb(21.5, MEGATRON_RERUN.format(rank=5, host="gpu-node-00", dev=5, it=21)))
    return {"console.log": torchrun_console(8, pr, style="none")}


@_c("deepspeed_loss_scale_minimum", "seen", ("non_finite",), (), "fp16 loss scaler at its minimum: every rank raises (job-wide)")
def _():
    pr = run_steps(4, 20, stop={r: 12 for r in range(4)})
    for k, (a, b) in enumerate([(4, 2), (2, 1), (1, 1)]):
        for r in range(4):
            pr[r].append(stamped(12.1 + k * 0.1, DS_OVERFLOW.format(rank=r, a=a, b=b)))
    for r in range(4):
        pr[r].append(tb(12.6, DS_MIN_SCALE, [("/workspace/train.py", 180, "main", "engine.step()"),
                                             ("/usr/lib/python3/dist-packages/deepspeed/runtime/fp16/loss_scaler.py", 183, "update_scale",
                                              "raise Exception(")]))
    return {"console.log": torchrun_console(4, pr)}


@_c("autograd_anomaly_nan", "seen", ("non_finite",), (1,), "torch anomaly mode: 'returned nan values in its 0th output'")
def _():
    pr = run_steps(2, 15, stop={1: 8})
    pr[1].append(tb(8.5, ANOMALY_NAN))
    return per_rank_files(pr)


# ---- seen: crashes, GPU, scheduler ----
@_c("python_exception_childfailed", "seen", ("crash",), (2,), "plain exception on rank 2, torchrun's table names rank 2")
def _():
    pr = run_steps(4, 20, stop={2: 10})
    pr[2].append(tb(10.5, "KeyError: 'attention_mask'"))
    return {"console.log": torchrun_console(4, pr, tail=child_failed([(2, 2, 1, "gpu-node-00")]))}


@_c("segfault_tee_one_node", "seen", ("crash",), (3,), "SIGSEGV exitcode -11 on local rank 3 of a one-node launch")
def _():
    pr = run_steps(4, 20, stop={3: 10})
    con = torchrun_console(4, pr, style="default", head=one_node_launch(4))
    con += f"[{DAY} 14:30:11,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -11) local_rank: 3 (pid: 4703) of binary: /usr/bin/python3\n"
    return {"console.log": con}


@_c("c10_terminate_abort", "seen", ("crash",), (1,), "terminate called after throwing c10::Error; SIGABRT")
def _():
    pr = run_steps(2, 15, stop={1: 9})
    pr[1].append((9.5, C10_TERMINATE))
    return {"console.log": torchrun_console(2, pr, tail=child_failed([(1, 1, -6, "gpu-node-00")]))}


@_c("xid_fallen_off_bus", "seen", ("gpu_error",), (4,), "Xid 79 in the kernel log + illegal memory access on rank 4")
def _():
    pr = run_steps(8, 20, stop={4: 11})
    pr[4].append(tb(11.5, ILLEGAL_ACCESS))
    kern = syslog(11.2, "gpu-node-00", "kernel", XID.format(bus="4e")) + "\n"
    return {"console.log": torchrun_console(8, pr), "kern.log": kern}


@_c("slurm_time_limit", "seen", ("job_cancelled",), (), "slurmstepd: CANCELLED AT .. DUE TO TIME LIMIT")
def _():
    pr = run_steps(4, 30)
    con = torchrun_console(4, pr, style="srun")
    con += f"slurmstepd: error: *** JOB 424242 ON gpu-node-00 CANCELLED AT {DAY}T14:30:31 DUE TO TIME LIMIT ***\n"
    return {"slurm-424242.out": con}


@_c("slurm_step_cancelled", "seen", ("job_cancelled",), (), "srun: *** STEP n.0 ON host CANCELLED AT ***")
def _():
    pr = run_steps(2, 20)
    con = torchrun_console(2, pr, style="srun")
    con += (f"srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
            f"slurmstepd: error: *** STEP 77.0 ON gpu-node-03 CANCELLED AT {DAY}T14:30:21 ***\n")
    return {"slurm-77.out": con}


@_c("dataloader_exited_unexpectedly", "seen", ("data_load_error", "crash"), (1,), "DataLoader worker exited unexpectedly (no signal)")
def _():
    pr = run_steps(2, 15, stop={1: 7})
    pr[1].append(tb(7.5, DL_EXITED.format(pid=7001)))
    return {"console.log": torchrun_console(2, pr)}


@_c("lightning_rank_prefix_crash", "seen", ("crash",), (1,),
    "Lightning's own messages carry '[rank: N] ' (rank_prefixed_message); the failing rank's traceback torchrun's [rank1]:")
def _():
    pr = run_steps(2, 15, stop={1: 6})
    lines = torchrun_console(2, pr, style="lightning").splitlines()
    lines += ["[rank1]:" + ln for ln in traceback(TRAIN_TB, "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x512 and 256x10)")]
    return {"console.log": "\n".join(lines) + "\n"}


@_c("lightning_nonfinite_metric", "seen", ("non_finite",), (0,), "Lightning EarlyStopping check_finite: metric is not finite")
def _():
    pr = run_steps(2, 15, stop={0: 9, 1: 9})
    pr[0].append(stamped(9.5, LIGHTNING_NONFINITE))
    return {"console.log": torchrun_console(2, pr, style="lightning")}


# ---- seen: healthy controls ----
@_c("healthy_fp16_overflow_skips", "seen", None, (), "DeepSpeed OVERFLOW skipped steps are the loss scaler working, not a fault")
def _():
    pr = run_steps(4, 30)
    for r in range(4):
        pr[r].insert(2, stamped(2.5, DS_OVERFLOW.format(rank=r, a=65536, b=32768)))
    return {"console.log": torchrun_console(4, pr)}


@_c("healthy_plain", "seen", None, (), "a plain healthy run")
def _():
    return {"console.log": torchrun_console(4, run_steps(4, 30))}


# ---- seen: flight recorder ----
def _fr(behind: dict[int, int], world: int = 8, n: int = 12) -> dict[str, bytes]:
    import pickle
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fr_dumps import make_dumps  # type: ignore[import-not-found]
    d = make_dumps(world, n, behind=behind)
    return {f"fr/nccl_trace_rank_{r}": pickle.dumps(v, protocol=4) for r, v in d.items()}


@_c("fr_one_rank_never_issued", "seen", HANG, (5,), "Flight Recorder: rank 5 never issued the first pending collective")
def _():
    return _fr({5: 1})


@_c("fr_two_ranks_behind_with_timeouts", "seen", HANG, (2, 6), "Flight Recorder: ranks 2 and 6 never issued; the others time out")
def _():
    files: dict[str, str | bytes] = dict(_fr({2: 1, 6: 1}))
    pr = run_steps(8, 12, stop={2: 11, 6: 11})
    for r in (0, 1, 3, 4, 5, 7):
        pr[r].append((612.0, glog("E", 612.0, 4700 + r, "ProcessGroupNCCL.cpp:616", watchdog(r, 12))))
    files["console.log"] = torchrun_console(8, pr)
    return files


@_c("nccl_system_error_one_rank", "seen", ("crash", "nccl_timeout", "unexplained_error"), (3,),
    "ncclSystemError on rank 3 only (its own socket failed)")
def _():
    pr = run_steps(4, 20, stop={3: 5})
    pr[3].append(tb(5.5, NCCL_SYSTEM))
    return {"console.log": torchrun_console(4, pr)}


# ---- added (written after the wiring, to probe what it misses) ----
BAD_ALLOC = "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc"
CLIP_NONFINITE = ("RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot "
                  "be clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
                  "`error_if_nonfinite=False`")
C10D_CONNECT = ("[c10d] The client socket has failed to connect to [gpu-node-00]:29500 (errno: 111 - Connection refused).")


@_c("a_oom_tee_one_node", "added", ("oom",), (2,), "CUDA OOM under torchrun --tee on one node, agent's table")
def _():
    pr = run_steps(4, 20, stop={2: 9})
    pr[2].append(tb(9.5, OOM_NEW.format(dev=2)))
    con = torchrun_console(4, pr, style="default", head=one_node_launch(4))
    return {"console.log": con + "\n".join(child_failed([(2, 2, 1, "gpu-node-00")])) + "\n"}


@_c("a_cpu_alloc_tee_one_node", "added", ("host_oom",), (1,), "DefaultCPUAllocator under --tee on one node")
def _():
    pr = run_steps(2, 12, stop={1: 6})
    pr[1].append(tb(6.5, CPU_ALLOC))
    return {"console.log": torchrun_console(2, pr, style="default", head=one_node_launch(2))}


@_c("a_dataloader_killed_gloo_cascade", "added", ("host_oom",), (2,), "DataLoader worker killed on rank 2; peers lose it (gloo)")
def _():
    pr = run_steps(4, 15, stop={2: 8})
    pr[2].append(tb(8.5, DL_KILLED.format(pid=9001)))
    for r in (0, 1, 3):
        pr[r].append(tb(9.0 + r * 0.01, GLOO_CLOSED.format(peer=2, port=42000 + r)))
    return {"console.log": torchrun_console(4, pr)}


@_c("a_heartbeat_two_of_eight", "added", ("hang",), (3, 5), "heartbeat monitor stuck on ranks 3 and 5 of 8")
def _():
    pr = run_steps(8, 20, stop={r: 14 for r in range(8)})
    for r in (3, 5):
        pr[r].append((494.0 + r, glog("E", 494.0 + r, 4700 + r, "ProcessGroupNCCL.cpp:1375", HEARTBEAT_STUCK.format(rank=r))))
    return {"console.log": torchrun_console(8, pr)}


@_c("a_heartbeat_everyone_after_timeouts", "added", HANG, (1,), "every rank's heartbeat fires after 0,2,3 time out; rank 1 went silent")
def _():
    pr = run_steps(4, 30, stop={1: 12})
    for r in (0, 2, 3):
        pr[r].append((612.0 + r, glog("E", 612.0 + r, 4700 + r, "ProcessGroupNCCL.cpp:616", watchdog(r, 50))))
    for r in range(4):
        pr[r].append((1100.0 + r, glog("E", 1100.0 + r, 4700 + r, "ProcessGroupNCCL.cpp:1375", HEARTBEAT_STUCK.format(rank=r))))
    return {"console.log": torchrun_console(4, pr)}


@_c("a_megatron_nan_rank_prefix", "added", ("non_finite",), (6,), "Megatron NaN assert on a [rank6]: line")
def _():
    pr = run_steps(8, 15, stop={r: 10 for r in range(8)})
    pr[6].append(tb(10.5, MEGATRON_NAN.format(rank=6, dev=6, host="gpu-node-00")))
    return {"console.log": torchrun_console(8, pr)}


@_c("a_clip_grad_nonfinite", "added", ("non_finite",), (3,), "clip_grad_norm_ error_if_nonfinite on rank 3")
def _():
    pr = run_steps(4, 15, stop={3: 7})
    pr[3].append(tb(7.5, CLIP_NONFINITE))
    return {"console.log": torchrun_console(4, pr)}


@_c("a_bad_alloc_terminate", "added", ("host_oom",), (1,), "terminate after std::bad_alloc on rank 1, SIGABRT exit")
def _():
    pr = run_steps(2, 12, stop={1: 5})
    pr[1].append((5.5, BAD_ALLOC))
    return {"console.log": torchrun_console(2, pr, tail=child_failed([(1, 1, -6, "gpu-node-00")]))}


@_c("a_nccl_warn_oom_tee", "added", ("oom",), (0,), "only NCCL's WARN Cuda failure 'out of memory' (cudaDev 0) + agent exit, one node")
def _():
    pr = run_steps(2, 12, stop={0: 6})
    pr[0].append((6.5, "gpu-node-00:4700:4790 [0] NCCL WARN Cuda failure 'out of memory'"))
    con = torchrun_console(2, pr, style="default", head=one_node_launch(2))
    con += f"[{DAY} 14:30:07,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 0 (pid: 4700) of binary: /usr/bin/python3\n"
    return {"console.log": con}


@_c("a_nccl_system_error_peers_remote", "added", ("crash",), (2,), "ncclSystemError on rank 2, peers report ncclRemoteError")
def _():
    pr = run_steps(4, 12, stop={2: 6})
    pr[2].append(tb(6.5, NCCL_SYSTEM))
    for r in (0, 1, 3):
        pr[r].append(tb(7.5, NCCL_REMOTE))
    return {"console.log": torchrun_console(4, pr)}


@_c("a_healthy_rendezvous_retries", "added", None, (), "healthy run whose workers retried the rendezvous (Connection refused warnings)")
def _():
    pr = run_steps(4, 20)
    for r in (1, 2, 3):
        pr[r].insert(0, (0.2, glog("W", 0.2, 4700 + r, "socket.cpp:752", C10D_CONNECT)))
    return {"console.log": torchrun_console(4, pr)}


@_c("a_cgroup_oom_killer_one_node", "added", ("host_oom",), (3,), "kernel 'Memory cgroup out of memory: Killed process' + exitcode -9 local_rank 3")
def _():
    pr = run_steps(4, 15, stop={3: 9})
    con = torchrun_console(4, pr, style="default", head=one_node_launch(4))
    con += f"[{DAY} 14:30:10,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 3 (pid: 4703) of binary: /usr/bin/python3\n"
    kern = syslog(9.6, "gpu-node-00", "kernel", "Memory cgroup out of memory: Killed process 4703 (python3) total-vm:812345kB, anon-rss:801234kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:1800kB oom_score_adj:0") + "\n"
    return {"console.log": con, "kern.log": kern}


@_c("a_accelerate_no_batch_size", "added", ("oom",), (0,), "accelerate find_executable_batch_size reached zero on rank 0")
def _():
    pr = run_steps(2, 10, stop={0: 3, 1: 3})
    pr[0].append(tb(3.5, "RuntimeError: No executable batch size found, reached zero."))
    return {"console.log": torchrun_console(2, pr)}


@_c("a_megatron_rerun_inf_unprefixed", "added", ("non_finite",), (7,), "Megatron rerun 'Unexpected result inf' naming rank 7, no prefixes")
def _():
    pr = run_steps(8, 12, stop={r: 9 for r in range(8)})
    pr[7].append(tb(9.5, MEGATRON_RERUN.format(rank=7, host="gpu-node-00", dev=7, it=9).replace("result nan", "result inf")))
    return {"console.log": torchrun_console(8, pr, style="none")}


@_c("a_fr_unequal_lag", "added", HANG, (2,), "Flight Recorder: rank 2 is 2 collectives behind, rank 6 one: only 2 never issued the first pending one")
def _():
    return _fr({2: 2, 6: 1})


@_c("a_slurm_oom_kill_tee_exit", "added", ("host_oom",), (1,), "slurmstepd oom-kill event + torchrun 'failed (exitcode: -9) local_rank: 1' on one node")
def _():
    pr = run_steps(2, 12, stop={1: 7})
    con = torchrun_console(2, pr, style="default", head=one_node_launch(2))
    con += (f"[{DAY} 14:30:08,000] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 4700 closing signal SIGTERM\n"
            f"[{DAY} 14:30:08,100] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 1 (pid: 4701) of binary: /usr/bin/python3\n"
            "slurmstepd: error: Detected 1 oom_kill event in StepId=31.0. Some of your processes may have been killed by the cgroup out-of-memory handler.\n")
    return {"slurm-31.out": con}


@_c("a_cublas_alloc_failed", "added", ("oom",), (2,), "CUBLAS_STATUS_ALLOC_FAILED on rank 2 (no 'out of memory' words); peers time out")
def _():
    pr = run_steps(4, 15, stop={2: 8})
    pr[2].append(tb(8.5, "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    for r in (0, 1, 3):
        pr[r].append((608.0, glog("E", 608.0, 4700 + r, "ProcessGroupNCCL.cpp:616", watchdog(r, 23))))
    return {"console.log": torchrun_console(4, pr)}


# ---- unseen (written with the seen part, scored at the end only) ----
@_c("u_oom_mpirun_tag", "unseen", ("oom",), (6,), "CUDA OOM under mpirun --tag-output")
def _():
    pr = run_steps(8, 20, stop={6: 12})
    pr[6].append(tb(12.5, OOM_NEW.format(dev=6)))
    for r in (0, 1, 2, 3, 4, 5, 7):
        pr[r].append((612.0, glog("E", 612.0, 4700 + r, "ProcessGroupNCCL.cpp:616", watchdog(r, 49))))
    return {"mpirun.log": torchrun_console(8, pr, style="mpi")}


@_c("u_oom_srun_label", "unseen", ("oom",), (2,), "old CUDA OOM wording under srun --label")
def _():
    pr = run_steps(4, 20, stop={2: 8})
    pr[2].append(tb(8.5, OOM_OLD.format(dev=2)))
    return {"slurm-9.out": torchrun_console(4, pr, style="srun")}


@_c("u_host_oom_cpu_alloc_files", "unseen", ("host_oom",), (3,), "DefaultCPUAllocator in rank 3's own file")
def _():
    pr = run_steps(4, 15, stop={3: 9})
    pr[3].append(tb(9.5, CPU_ALLOC))
    return per_rank_files(pr, "worker_{r}.log")


@_c("u_slurm_oom_kill_childfailed", "unseen", ("host_oom",), (2,), "slurmstepd oom-kill event + torchrun table rank 2 exitcode -9")
def _():
    pr = run_steps(4, 20, stop={2: 12})
    con = torchrun_console(4, pr)
    con += "\n".join(child_failed([(2, 2, -9, "gpu-node-07")])) + "\n"
    con += ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=5151.0. Some of your processes may have been "
            "killed by the cgroup out-of-memory handler.\n")
    return {"slurm-5151.out": con}


@_c("u_dataloader_killed_files", "unseen", ("host_oom",), (1,), "DataLoader worker killed by signal: Killed, per-rank files")
def _():
    pr = run_steps(3, 15, stop={1: 10})
    pr[1].append(tb(10.5, DL_KILLED.format(pid=8123)))
    for r in (0, 2):
        pr[r].append((610.0, glog("E", 610.0, 4700 + r, "ProcessGroupNCCL.cpp:616", watchdog(r, 33))))
    return per_rank_files(pr)


@_c("u_watchdog_pg_prefix_silent", "unseen", HANG, (0,), "c10d PG-prefixed timeouts on 1..3, rank 0 silent")
def _():
    pr = run_steps(4, 30, stop={0: 19})
    for r in (1, 2, 3):
        pr[r].append((620.0 + r, glog("E", 620.0 + r, 4700 + r, "ProcessGroupNCCL.cpp:632", watchdog(r, 77, pg="default_pg"))))
    return {"console.log": torchrun_console(4, pr)}


@_c("u_heartbeat_stuck_srun", "unseen", ("hang",), (3,), "heartbeat monitor stuck on rank 3 under srun --label")
def _():
    pr = run_steps(4, 20, stop={r: 15 for r in range(4)})
    pr[3].append((495.0, glog("E", 495.0, 4703, "ProcessGroupNCCL.cpp:1375", HEARTBEAT_STUCK.format(rank=3))))
    return {"slurm-1.out": torchrun_console(4, pr, style="srun")}


@_c("u_gloo_timeout_files", "unseen", HANG, (1,), "gloo recv timeouts in ranks 0,2 files; rank 1 silent")
def _():
    pr = run_steps(3, 20, stop={1: 11})
    for r in (0, 2):
        pr[r].append(tb(1811.0, GLOO_TIMEOUT))
    return per_rank_files(pr)


@_c("u_megatron_nan_srun", "unseen", ("non_finite",), (13,), "Megatron NaN assert (rank in text) behind srun label of task 1")
def _():
    lines = [f"1: {logline(k, f'step {k} loss {2.0 - k * 0.01:.4f}')}" for k in range(1, 10)]
    lines += ["1: " + x for x in traceback([("/workspace/megatron/core/distributed/param_and_grad_buffer.py", 114, "start_grad_sync",
                                             "assert not norm.isnan(), (")], MEGATRON_NAN.format(rank=13, dev=5, host="node-15-11"))]
    lines += [f"0: {logline(k, f'step {k} loss {2.0 - k * 0.01:.4f}')}" for k in range(1, 10)]
    return {"slurm-3.out": "\n".join(lines) + "\n"}


@_c("u_megatron_rerun_files", "unseen", ("non_finite",), (2,), "Megatron rerun 'Unexpected result nan' in rank 2's file")
def _():
    pr = run_steps(4, 20, stop={r: 14 for r in range(4)})
    pr[2].append(tb(14.5, MEGATRON_RERUN.format(rank=2, host="gpu-node-01", dev=2, it=14)))
    return per_rank_files(pr)


@_c("u_deepspeed_min_scale_files", "unseen", ("non_finite",), (), "loss scale at minimum in every rank's file")
def _():
    pr = run_steps(2, 12, stop={0: 8, 1: 8})
    for r in range(2):
        pr[r].append(tb(8.5, DS_MIN_SCALE))
    return per_rank_files(pr)


@_c("u_segv_exit_code_files", "unseen", ("crash",), (2,), "Fatal Python error: Segmentation fault in rank 2's file, peers lose it")
def _():
    pr = run_steps(3, 15, stop={2: 6})
    pr[2].append((6.5, SEGV))
    for r in (0, 1):
        pr[r].append(tb(7.0, GLOO_CLOSED.format(peer=2, port=41000 + r)))
    return per_rank_files(pr)


@_c("u_illegal_access_mpirun", "unseen", ("gpu_error",), (5,), "illegal memory access on rank 5 (mpirun tags)")
def _():
    pr = run_steps(8, 12, stop={5: 7})
    pr[5].append(tb(7.5, ILLEGAL_ACCESS))
    return {"mpi.log": torchrun_console(8, pr, style="mpi")}


@_c("u_slurm_preempted", "unseen", ("job_cancelled",), (), "slurm: CANCELLED AT .. DUE TO PREEMPTION")
def _():
    con = torchrun_console(2, run_steps(2, 10), style="srun")
    con += f"slurmstepd: error: *** JOB 99 ON gpu-node-02 CANCELLED AT {DAY}T14:30:11 DUE TO PREEMPTION ***\n"
    return {"slurm-99.out": con}


@_c("u_healthy_nan_word_in_config", "unseen", None, (), "healthy run whose config printout mentions nan checks")
def _():
    pr = run_steps(2, 20)
    head = [logline(0.1, "args: check_for_nan_in_loss_and_grad=True, detect_anomaly=False, min_loss_scale=1.0")]
    return {"console.log": torchrun_console(2, pr, head=head)}


@_c("u_nccl_remote_after_oom", "unseen", ("oom",), (1,), "rank 1 CUDA OOM; peers ncclRemoteError")
def _():
    pr = run_steps(4, 15, stop={1: 9})
    pr[1].append(tb(9.5, OOM_NEW.format(dev=1)))
    for r in (0, 2, 3):
        pr[r].append(tb(10.5, NCCL_REMOTE))
    return {"console.log": torchrun_console(4, pr)}


@_c("u_fr_rank0_behind", "unseen", HANG, (0,), "Flight Recorder: rank 0 never issued the last collective (4 ranks)")
def _():
    return _fr({0: 1}, world=4)


# -- scorer ----------------------------------------------------------------------------------------
def write_case(case: Case, root: Path) -> Path:
    d = root / case.name
    d.mkdir(parents=True, exist_ok=True)
    for rel, data in case.files().items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
    return d


def diagnose(d: Path, tree: str | None = None) -> tuple[dict | None, int, str]:
    """`forensics diagnose D --format json`, run from `tree` (a checkout: its package is imported)."""
    env = dict(os.environ, FORENSICS_CACHE=str(d.parent / ".cache"))
    p = subprocess.run([sys.executable, "-m", "forensics", "diagnose", str(d), "--format", "json"],
                       capture_output=True, text=True, env=env, cwd=tree)
    try:
        return json.loads(p.stdout), p.returncode, p.stderr
    except json.JSONDecodeError:
        return None, p.returncode, p.stderr


def judge(case: Case, rep: dict | None) -> tuple[bool, str]:
    rc = (rep or {}).get("root_cause")
    got_k = rc.get("kind") if rc else None
    got_r = sorted(rc.get("ranks") or []) if rc else []
    if rep is None:
        return False, "no JSON report"
    if case.kinds is None:
        return rc is None, f"got {got_k} {got_r}"
    ok = got_k in case.kinds and got_r == sorted(case.ranks)
    return ok, f"got {got_k} {got_r}" + (f" :: {rc.get('summary', '')[:160]}" if rc else "")


def score(parts: list[str], verbose: bool = False, only: str | None = None, tree: str | None = None,
          quiet: bool = False) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="msgcat-") as tmp:
        for part in parts:
            cases = [c for c in CASES if c.part == part and (only is None or only in c.name)]
            right = 0
            for c in cases:
                rep, _rc, err = diagnose(write_case(c, Path(tmp)), tree)
                ok, got = judge(c, rep)
                right += ok
                if not quiet and (verbose or not ok):
                    truth = "healthy" if c.kinds is None else f"{'/'.join(c.kinds)} {list(c.ranks)}"
                    print(f"  {'ok  ' if ok else 'MISS'} {part}:{c.name}: truth {truth}; {got}" + ("" if rep else f" {err[-200:]}"))
            out[part] = (right, len(cases))
            print(f"{part}: {right}/{len(cases)}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score")
    s.add_argument("--part", default="seen", choices=["seen", "added", "unseen", "all"])
    s.add_argument("-k", dest="only", default=None, help="only cases whose name contains this")
    s.add_argument("-v", action="store_true")
    s.add_argument("-q", action="store_true", help="counts only (for a part kept unseen)")
    s.add_argument("--tree", default=None, help="the checkout whose forensics runs (default: the current folder)")
    w = sub.add_parser("write", help="write the cases into a folder (one sub-folder per case)")
    w.add_argument("out", type=Path)
    a = ap.parse_args()
    if a.cmd == "write":
        for c in CASES:
            write_case(c, a.out)
        return
    parts = ["seen", "added", "unseen"] if a.part == "all" else [a.part]
    score(parts, a.v, a.only, a.tree, a.q)


if __name__ == "__main__":
    main()
