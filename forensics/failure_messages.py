"""What a failure message MEANS, whatever its wording: message families as data.

Question: given the text of one line (or one exception), which failure does it report — CUDA OOM,
host OOM, a collective timeout, a hang, a non-finite value, a crash, a device error, a data-loader
death, the scheduler's cancel — is it the writer's OWN failure or what a peer's failure looks like
from here (a victim's cascade), and which rank does it name?

Owns the table (`FAMILIES`) and the lookups over it (`meaning`, `pattern`). Each family holds:
- `kind`: the spec/report.md kind the message means (oom, host_oom, nccl_timeout, hang, non_finite,
  crash, gpu_error, job_cancelled);
- `role`: `own` (the writing process failed this way), `victim` (a peer's failure seen from here:
  a timeout, a lost connection — never a culprit by itself), `job` (job-wide: no rank is at fault
  by this message alone: the fp16 loss scaler's minimum, the scheduler's cancel), `benign` (reads
  like a failure and is not: the loss scaler skipping a step);
- `rank`: how the rank is named — `line` (the line's own rank: its prefix or file), `text` (a rank
  written in the message: the pattern's `rank` group, basis named_in_text), `job` (none), `pid`
  (a process id only: the kernel's OOM killer);
- `source`: the upstream project and file that writes it, and `form`, the format as written there.
  The regexes are ours, written against `form`; every family carries sample lines written here in
  that format (tests/test_failure_messages.py runs them).

Order matters: the first family whose pattern matches gives the meaning, so a specific wording
(NCCL's "Cuda failure 'out of memory'") precedes a general one (ncclUnhandledCudaError, a device
error) and own failures precede the victims' wording that often follows them in one exception.

Must not: read events, decide a culprit among ranks (passes/failures.py, passes/non_finite.py),
or hold texts copied from logs: samples are written here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Family:
    id: str
    kind: str
    role: str                  # own / victim / job / benign
    pattern: str               # Python and polars (Rust regex) compatible; (?P<rank>..) when rank == "text"
    rank: str                  # line / text / job / pid
    source: str
    form: str
    meaning: str
    samples: tuple[str, ...]


_C10D = "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
_HEARTBEAT = _C10D + " (HeartbeatMonitor::runLoop)"

FAMILIES: tuple[Family, ...] = (
    # ---- benign: the wording of a failure, the meaning of normal work --------------------------
    Family("deepspeed_overflow_skip", "non_finite", "benign",
           r"OVERFLOW! Rank \d+ Skipping step|Gradient overflow\.\s+Skipping step|[Ss]kipping step, loss scaler \d+ reducing loss scale",
           "job", "deepspeed deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale); apex apex/amp/scaler.py",
           'f"[deepspeed] OVERFLOW! Rank {rank} Skipping step. Attempted loss scale: {cur}, reducing to {next}"',
           "fp16 dynamic loss scaling skipped a step and lowered the scale: normal operation",
           ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
            "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0")),
    Family("megatron_nan_counter", "non_finite", "benign", r"number of nan iterations:", "job",
           "megatron-lm megatron/training/training.py (training_log)", "' number of nan iterations: {:3d} |'",
           "Megatron's per-interval count of iterations skipped for a NaN loss: a counter, not a value",
           (" number of skipped iterations:   0 | number of nan iterations:   0 |",)),

    # ---- CUDA / device memory --------------------------------------------------------------------
    Family("nccl_cuda_failure_oom", "oom", "own", r"Cuda failure (?:\d+ )?'?out of memory'?", "line",
           "nvidia nccl src/include/checks.h (CUDACHECK: runtime API; CUCHECK: driver API, with the error number)",
           "WARN(\"Cuda failure '%s'\", cudaGetErrorString(err))  /  WARN(\"Cuda failure %d '%s'\", err, errStr)",
           "a CUDA allocation inside NCCL failed: device memory is exhausted on this rank",
           ("gpu-node-00:4711:4790 [1] NCCL WARN Cuda failure 'out of memory'",
            "gpu-node-00:4711:4790 [1] NCCL WARN Cuda failure 2 'out of memory'",
            "ncclUnhandledCudaError: Call to CUDA function failed. Last error: Cuda failure 'out of memory'")),
    Family("c10_device_oom", "oom", "own",
           r"(?:CUDA|HIP|XPU|MPS backend) out of memory|OutOfMemoryError: (?:CUDA|HIP|XPU)|CUDA error: out of memory"
           r"|cudaErrorMemoryAllocation|hipErrorOutOfMemory",
           "line", "pytorch c10/cuda/CUDACachingAllocator.cpp (malloc: TORCH_CHECK_WITH(OutOfMemoryError, ...)); "
           "c10/xpu/XPUCachingAllocator.cpp; aten/src/ATen/mps/MPSAllocator.mm; c10/cuda/CUDAException.cpp (C10_CUDA_CHECK)",
           '"CUDA out of memory. Tried to allocate ", format_size(alloc_size), ". GPU ", device, " has a total capacity of ", ...',
           "the device allocator could not allocate: GPU memory is exhausted on this rank",
           ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.05 GiB is free.",
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.21 GiB already allocated)",
            "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.50 GiB. GPU 3 has a total capacity of 191.98 GiB",
            "RuntimeError: CUDA error: out of memory")),
    Family("cublas_alloc_failed", "oom", "own", r"CUBLAS_STATUS_ALLOC_FAILED|CUSOLVER_STATUS_ALLOC_FAILED", "line",
           "pytorch aten/src/ATen/cuda/Exceptions.h (TORCH_CUDABLAS_CHECK: cublasGetErrorString)",
           '"CUDA error: ", at::cuda::blas::_cublasGetErrorEnum(__err), " when calling `" #EXPR "`"',
           "cuBLAS could not allocate its workspace or handle: device memory is exhausted on this rank",
           ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",)),
    Family("accelerate_no_batch_size", "oom", "own", r"No executable batch size found, reached zero", "line",
           "huggingface accelerate src/accelerate/utils/memory.py (find_executable_batch_size)",
           'raise RuntimeError("No executable batch size found, reached zero.")',
           "every batch size down to 1 ran out of device memory", ("RuntimeError: No executable batch size found, reached zero.",)),

    # ---- host memory -----------------------------------------------------------------------------
    Family("cpu_allocator", "host_oom", "own", r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)", "line",
           "pytorch c10/core/impl/alloc_cpu.cpp (alloc_cpu: CAFFE_ENFORCE)",
           '"DefaultCPUAllocator: can\'t allocate memory: you tried to allocate ", nbytes, " bytes. Error code ", err, " (", strerror(err), ")"',
           "host RAM allocation failed in this process",
           ("RuntimeError: [enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)",)),
    Family("dataloader_killed_oom", "host_oom", "own",
           r"DataLoader worker \(pid \d+\) is killed by signal: (?:Killed|Bus error)", "line",
           "pytorch torch/csrc/DataLoader.cpp (handler for SIGCHLD: _error_if_any_worker_fails)",
           '"DataLoader worker (pid %d) is killed by signal: %s. " (+ the shared-memory hint for SIGBUS)',
           "a data-loader worker of this rank was killed by SIGKILL (often the OOM killer: confirmed only by a memory line, "
           "passes/failures/deaths._worker_kill) or SIGBUS (/dev/shm exhausted): host memory",
           ("RuntimeError: DataLoader worker (pid 5123) is killed by signal: Killed. ",
            "RuntimeError: DataLoader worker (pid 6001) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory.")),
    Family("python_memory_error", "host_oom", "own",
           r"^(?:[\w.]*\.)?(?:MemoryError|_ArrayMemoryError)\b|terminate called after throwing an instance of 'std::bad_alloc'"
           r"|Unable to allocate [\d.]+ [KMGT]i?B for an array",
           "line", "cpython Objects/exceptions.c (MemoryError); numpy numpy/core/_exceptions.py (_ArrayMemoryError); "
           "libstdc++ vterminate.cc (verbose terminate handler)",
           '"Unable to allocate {} for an array with shape {} and data type {}"',
           "the process could not get host memory",
           ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 32.0 GiB for an array with shape (4294967296, 2) and data type float32",
            "MemoryError", "terminate called after throwing an instance of 'std::bad_alloc'")),
    Family("kernel_oom_killer", "host_oom", "own", r"(?:Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process (?P<pid>\d+)", "pid",
           "linux mm/oom_kill.c (__oom_kill_process)", '"%s: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, ..."',
           "the kernel's OOM killer killed the process with that pid: host memory",
           ("Out of memory: Killed process 4702 (python3) total-vm:98213344kB, anon-rss:90123456kB, file-rss:0kB",
            "Memory cgroup out of memory: Killed process 4702 (python3) total-vm:1kB")),
    Family("slurm_oom_kill", "host_oom", "job", r"Detected \d+ oom[-_]kill event", "job",
           "slurm src/plugins/cgroup/v2 and task/cgroup (oom event notification in slurmstepd)",
           '"Detected %"PRIu64" oom_kill event%s in %ps. Some of your processes may have been killed by the cgroup out-of-memory handler."',
           "the step's cgroup ran out of memory and a process of it was killed (which one: the launcher's exit record)",
           ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=5151.0. Some of your processes may have been killed by the cgroup out-of-memory handler.",
            "slurmstepd: error: Detected 2 oom_kill events in StepId=8.batch. Some of your processes may have been killed by the cgroup out-of-memory handler.")),
    Family("slurm_memory_limit", "host_oom", "job",
           r"exceeded (?:virtual )?memory limit \(\d+ > \d+\), being killed|Exceeded (?:job|step) memory limit\s*$", "job",
           "slurm src/plugins/jobacct_gather/common/common_jag.c (_acct_kill_step); src/slurmd/slurmd/slurmd.c (job notify)",
           '"%ps exceeded memory limit (%"PRIu64" > %"PRIu64"), being killed"  /  "Exceeded job memory limit"',
           "the job's host memory went over the limit Slurm enforces: Slurm killed its step (which process: srun's task report)",
           ("slurmstepd: error: StepId=90210.0 exceeded memory limit (70368744177664 > 68719476736), being killed",
            "slurmstepd: error: Job 4411 exceeded memory limit (9000000 > 8388608), being killed",
            "slurmstepd: error: Exceeded job memory limit")),

    # ---- non-finite values -----------------------------------------------------------------------
    Family("megatron_rerun_nan", "non_finite", "own",
           r"\bRank (?P<rank>\d+), node \S+, device \d+, iteration \d+: Unexpected result (?:nan|inf|-inf)", "text",
           "megatron-lm megatron/core/rerun_state_machine.py (validate_result, rerun disabled)",
           'f"Rank {rank}, node {node}, device {device}, iteration {self.current_iteration}: Unexpected result {result} (message=\'{message}\')"',
           "Megatron's validation found a NaN/Inf (e.g. in the local grad norm) on the rank it names",
           ("RuntimeError: Rank 5, node gpu-node-00, device 5, iteration 21: Unexpected result nan (message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel communication collective')",)),
    Family("megatron_grad_norm_nan", "non_finite", "own",
           r"\bRank (?P<rank>\d+): found (?:NaN|Inf) in local grad norm", "text",
           "megatron-lm megatron/core/distributed/param_and_grad_buffer.py (start_grad_sync / check_for_nan_in_grad)",
           "f'Rank {global_rank}: found NaN in local grad norm in backward pass before data-parallel communication collective. Device: {..}, node: {..}'",
           "the rank's own gradients hold a NaN before the all-reduce spreads it: that rank is where it appeared",
           ("AssertionError: Rank 11: found NaN in local grad norm in backward pass before data-parallel communication collective. Device: 3, node: node-02",)),
    Family("local_grad_nan_unranked", "non_finite", "own", r"found (?:NaN|Inf) in local grad norm", "line",
           "megatron-lm megatron/core/distributed/param_and_grad_buffer.py (rerun-state-machine message)",
           "f\"found NaN in local grad norm for bucket #{i} in backward pass before data-parallel communication collective\"",
           "a NaN in this rank's local gradients", ("found NaN in local grad norm for bucket #0 in backward pass before data-parallel communication collective",)),
    Family("loss_scale_minimum", "non_finite", "job", r"Current loss scale already at minimum", "job",
           "deepspeed deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale)",
           'raise Exception("Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.")',
           "every step overflows even at the smallest loss scale: the values are non-finite (the overflow flag is all-reduced, so "
           "every rank raises it: job-wide when every rank's line is here, else the rank whose line it is)",
           ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",)),
    Family("autograd_anomaly_nan", "non_finite", "own", r"returned (?:nan|inf) values in its \d+(?:st|nd|rd|th) output", "line",
           "pytorch torch/csrc/autograd/engine.cpp (validate_outputs / anomaly mode: checkForNaN)",
           '"Function \'", name, "\' returned nan values in its ", i, "th output."',
           "autograd anomaly detection found a NaN in a backward output on this rank",
           ("RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",)),
    Family("clip_grad_nonfinite", "non_finite", "own", r"for gradients from `parameters` is non-finite", "line",
           "pytorch torch/nn/utils/clip_grad.py (clip_grad_norm_, error_if_nonfinite)",
           'f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so it cannot be clipped. ..."',
           "this rank's gradient norm is NaN/Inf", ("RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped.",)),
    Family("lightning_metric_nonfinite", "non_finite", "own", r"Monitored metric \S+ = (?:nan|[+-]?inf|tensor\((?:nan|[+-]?inf)) is not finite", "line",
           "lightning src/lightning/pytorch/callbacks/early_stopping.py (_evaluate_stopping_criteria, check_finite)",
           "f\"Monitored metric {self.monitor} = {current} is not finite. Previous best value was {self.best_score:.3f}. Signaling Trainer to stop.\"",
           "the monitored metric became NaN/Inf and Lightning stopped the run",
           ("Monitored metric val_loss = nan is not finite. Previous best value was 1.842. Signaling Trainer to stop.",)),

    Family("nonfinite_wording", "non_finite", "own",
           r"(?i:found (?:a )?(?:nan|inf)\b|\b(?:nan|inf)s? (?:detected|found|encountered)|detected (?:a )?(?:nan|inf)\b"
           r"|\bis non-?finite\b|non-?finite (?:loss|grad|value|norm)|unexpected result nan"
           r"|\b(?:loss|grad(?:ient)?[ _]norm|gradients?)\s*(?:is|are|became|=|:)\s*(?:nan|[+-]?inf(?:inity)?)\b)",
           "line", "no single writer: the wording of NaN checks in training loops (HF Trainer callbacks, user code)",
           "'loss is nan' / 'NaN detected in ...' / 'grad_norm: inf'", "a message reporting a NaN/Inf on this rank",
           ("loss is nan, stopping", "NaN detected in layer 12 output", "grad_norm = inf at step 40")),

    # ---- hangs -----------------------------------------------------------------------------------
    Family("heartbeat_stuck", "hang", "own",
           r"watchdog got stuck for \d+ seconds|Heartbeat monitor timed out|[Tt]erminating the process after attempting to dump debug info, due to .*(?:watchdog hang|collective timeout)",
           "line", _HEARTBEAT,
           '"ProcessGroupNCCL\'s watchdog got stuck for ", heartbeatTimeoutInSec_, " seconds without making progress in monitoring enqueued collectives. ..."',
           "this rank's NCCL watchdog thread made no progress (a NCCL/CUDA call or the GIL is blocked): the rank is hung",
           ("[PG ID 0 PG GUID 0(default_pg) Rank 2] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
            "[PG ID 0 PG GUID 0(default_pg) Rank 1] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1")),

    # ---- device errors ---------------------------------------------------------------------------
    Family("gpu_device_error", "gpu_error", "own",
           r"illegal memory access|unspecified launch failure|uncorrectable ECC|NVRM: Xid|fallen off the bus|misaligned address|hardware stack error",
           "line", "nvidia cuda runtime (cudaGetErrorString); linux nvidia driver (NVRM: Xid)",
           '"CUDA error: ", cudaGetErrorString(err)  /  "NVRM: Xid (PCI:%s): %d, ..."',
           "the device failed on this rank (or the host's GPU the Xid names)",
           ("RuntimeError: CUDA error: an illegal memory access was encountered",
            "NVRM: Xid (PCI:0000:4e:00): 79, pid=4711, name=python3, GPU has fallen off the bus.")),

    # ---- crashes ---------------------------------------------------------------------------------
    Family("fatal_signal", "crash", "own",
           r"Fatal Python error: (?:Segmentation fault|Aborted|Bus error|Floating point exception|Illegal instruction)"
           r"|^Segmentation fault(?: \(core dumped\))?$|\*\*\* (?:SIGSEGV|SIGABRT|SIGBUS|SIGFPE|SIGILL) \(@0x",
           "line", "cpython Modules/faulthandler.c (faulthandler_fatal_error); glog's failure signal handler",
           '"Fatal Python error: " + handler->name', "the process died of a fatal signal in native code",
           ("Fatal Python error: Segmentation fault", "*** SIGSEGV (@0x0) received by PID 4711 (TID 0x7f) from PID 0; stack trace: ***")),
    Family("cpp_terminate", "crash", "own", r"terminate called after throwing an instance of '", "line",
           "libstdc++ libsupc++/vterminate.cc (__verbose_terminate_handler); std::bad_alloc is host_oom (above)",
           '"terminate called after throwing an instance of \'%s\'"', "an uncaught C++ exception aborted the process (SIGABRT)",
           ("terminate called after throwing an instance of 'c10::Error'",)),
    Family("dataloader_exited", "crash", "own",
           r"DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly|DataLoader worker \(pid \d+\) exited unexpectedly with exit code"
           r"|DataLoader worker \(pid \d+\) is killed by signal: (?:Segmentation fault|Aborted)",
           "line", "pytorch torch/utils/data/dataloader.py (_MultiProcessingDataLoaderIter._try_get_data); torch/csrc/DataLoader.cpp",
           "f\"DataLoader worker (pid(s) {pids_str}) exited unexpectedly\"", "a data-loader worker of this rank died; the rank's training loop raised",
           ("RuntimeError: DataLoader worker (pid(s) 7001) exited unexpectedly",
            "RuntimeError: DataLoader worker (pid 7001) is killed by signal: Segmentation fault. ")),
    Family("nccl_system_error", "crash", "own", r"unhandled system error|ncclSystemError", "line",
           "nvidia nccl src/init.cc (ncclGetErrorString: ncclSystemError); " + _C10D + " (C10D_NCCL_CHECK)",
           '"unhandled system error (run with NCCL_DEBUG=INFO for details)"',
           "a system call or library call inside NCCL failed on this rank (socket, shared memory, device)",
           ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",)),

    # ---- the scheduler ---------------------------------------------------------------------------
    Family("slurm_cancelled", "job_cancelled", "job",
           r"\*\*\* (?:JOB|STEP) [\w.+]+ ON \S+ CANCELLED AT \S+(?: DUE TO (?P<why>TIME LIMIT|PREEMPTION|NODE FAILURE|JOB REQUEUE))?",
           "job", "slurm src/slurmd/slurmstepd/req.c (_handle_signal_container) / src/slurmd/slurmstepd/mgr.c",
           '"*** %s ON %s CANCELLED AT %s%s ***" (" DUE TO TIME LIMIT", " DUE TO PREEMPTION", ...)',
           "the scheduler ended the job (scancel, time limit, preemption, node failure)",
           ("slurmstepd: error: *** JOB 424242 ON gpu-node-00 CANCELLED AT 2024-11-20T14:30:31 DUE TO TIME LIMIT ***",
            "slurmstepd: error: *** STEP 77.0 ON gpu-node-03 CANCELLED AT 2024-11-20T14:30:21 ***")),

    # ---- victims: a peer's failure seen from here -------------------------------------------------
    Family("nccl_watchdog_timeout", "nccl_timeout", "victim",
           r"Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out", "line", _C10D + " (WorkNCCL::checkTimeout)",
           '"[Rank ", rank_, "] Watchdog caught collective operation timeout: ", work, " ran for ", timeElapsed, " milliseconds before timing out."',
           "this rank waited in a collective that a peer never joined or finished",
           ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",)),
    Family("gloo_timeout", "nccl_timeout", "victim", r"Timed out waiting \d+ms for (?:recv|send) operation to complete", "line",
           "facebookincubator gloo gloo/transport/tcp/unbound_buffer.cc (waitRecv / waitSend)",
           'GLOO_ERROR_MSG("Timed out waiting ", timeout.count(), "ms for recv operation to complete")',
           "this rank waited for a peer's data that never came",
           ("RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",)),
    Family("peer_lost", "nccl_timeout", "victim",
           r"Connection closed by (?:remote )?peer|Connection reset by peer|remote process exited or there was a network error|ncclRemoteError"
           r"|remote process exiting prematurely|Broken pipe|Connection refused",
           "line", "facebookincubator gloo gloo/transport/tcp/pair.cc (Pair::read: 'Connection closed by peer'); "
           "nvidia nccl src/init.cc (ncclGetErrorString: ncclRemoteError); "
           "pytorch torch/csrc/distributed/c10d/NCCLUtils.cpp (getNcclErrorDetailStr: ncclRemoteError)",
           '"remote process exited or there was a network error"  /  GLOO_ERROR_MSG("Connection closed by peer ", peer)',
           "a peer process went away (died) under this rank's connection: this rank is its victim",
           ("RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.1.0.2]:40001",
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2006, remote process exited or there was a network error, NCCL version 2.21.5",
            "A call failed possibly due to a network error or a remote process exiting prematurely.")),

    # ---- the broad wording of each kind, in any case: last, so that any family above decides first --
    # (the failures pass reads a line's kind by these unions too: pattern(kinds=..., roles=...))
    Family("oom_wording", "oom", "own",
           r"(?i:cuda out of memory|outofmemoryerror|cuda error: out of memory|\bcuda_oom\b)", "line",
           "pytorch torch/cuda/memory.py and torch/__init__.py (torch.cuda.OutOfMemoryError, torch.OutOfMemoryError); "
           "c10/cuda/CUDACachingAllocator.cpp; the CUDA_OOM event name of structured logs",
           "the class name OutOfMemoryError of any module, 'CUDA out of memory' in any case",
           "device memory is exhausted on this rank, in a wording the specific families above do not hold",
           ("torch.cuda.OutOfMemoryError", "warning: cuda out of memory while compiling the graph", "event=CUDA_OOM rank=3")),
    Family("gpu_wording", "gpu_error", "own",
           r"(?i:illegal memory access|unspecified launch failure|uncorrectable ECC|ECC error|NVRM: Xid|\bXid\b|fallen off the bus"
           r"|misaligned address|illegal instruction|hardware stack error|launch timed out|unhandled cuda error|ncclUnhandledCudaError)",
           "line", "nvidia cuda runtime (cudaGetErrorString: cudaErrorLaunchTimeout, cudaErrorIllegalInstruction, cudaErrorECCUncorrectable); "
           "nvidia nccl src/init.cc (ncclGetErrorString: ncclUnhandledCudaError 'unhandled cuda error'); linux nvidia driver (Xid)",
           '"the launch timed out and was terminated"  /  "unhandled cuda error (run with NCCL_DEBUG=INFO for details)"',
           "the device (or a CUDA call inside NCCL) failed on this rank, in a wording the families above do not hold",
           ("RuntimeError: CUDA error: the launch timed out and was terminated",
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5")),
    Family("timeout_wording", "nccl_timeout", "victim",
           r"(?i:watchdog caught collective operation timeout|collective operation timeout|timed out|Timeout\(ms\)|waiting on rank"
           r"|connection (?:reset|closed) by (?:remote )?peer|communicator was aborted|DistBackendError|NCCL error|remote process exited"
           r"|socket timeout|NCCL_TIMEOUT|Broken pipe|Connection refused|DistNetworkError|DistStoreError)",
           "line", _C10D + "; pytorch torch/csrc/distributed/c10d/TCPStore.cpp, socket.cpp (DistStoreError, DistNetworkError: "
           "C10D_THROW_ERROR); torch/distributed/distributed_c10d.py (barrier / monitored_barrier timeouts)",
           '"Timed out after ", timeout, " seconds waiting for clients"  /  "The client socket has timed out after ..."',
           "a collective, a store or a socket this rank waited on failed or timed out: what a peer's failure looks like from here",
           ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 3/4 clients joined.",
            "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to (10.0.0.1, 29500).",
            "RuntimeError: NCCL communicator was aborted on rank 2.")),
)

# The collective library a failure line names, for the human wording of a collective's failure
# (the kind stays `nccl_timeout`: the JSON contract): gloo's errors cite its sources
# ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534]", ProcessGroupGloo), NCCL's name it
# (ProcessGroupNCCL.cpp, WorkNCCL(...), ncclRemoteError, "NCCL error"). First match wins.
TRANSPORTS: tuple[tuple[str, str], ...] = (
    ("gloo", r"(?i:ProcessGroupGloo|\bgloo\b)"),
    ("NCCL", r"(?i:nccl)"),
)


def transport(text: str | None) -> str | None:
    """The collective library `text` names ("gloo", "NCCL"), None when it names none."""
    return next((name for name, rx in TRANSPORTS if text and re.search(rx, text)), None)


KINDS = ("oom", "host_oom", "nccl_timeout", "hang", "non_finite", "crash", "gpu_error", "job_cancelled")
ROLES = ("own", "victim", "job", "benign")


@dataclass(frozen=True)
class Meaning:
    family: Family
    rank: int | None        # the rank the text names (family.rank == "text"), else None
    pid: int | None = None  # the process id the text names (family.rank == "pid")

    @property
    def kind(self) -> str:
        return self.family.kind

    @property
    def role(self) -> str:
        return self.family.role


@lru_cache(maxsize=None)
def _compiled() -> tuple[tuple[Family, re.Pattern[str]], ...]:
    return tuple((f, re.compile(f.pattern, re.M)) for f in FAMILIES)


def meaning(text: str | None, *, kinds: tuple[str, ...] | None = None) -> Meaning | None:
    """The first family (in table order) whose pattern matches `text`, with the rank or pid it
    names; None when no family does. `kinds`: only families of these kinds."""
    if not text:
        return None
    text = text[:8000]
    for fam, rx in _compiled():
        if kinds is not None and fam.kind not in kinds:
            continue
        m = rx.search(text)
        if m is None:
            continue
        g = m.groupdict()
        rank = int(g["rank"]) if g.get("rank") else None
        pid = int(g["pid"]) if g.get("pid") else None
        return Meaning(fam, rank, pid)
    return None


def pattern(*, kinds: tuple[str, ...] | None = None, roles: tuple[str, ...] | None = None) -> str:
    """One regex (polars-compatible, named groups dropped) matching any family of these kinds and
    roles: a cheap filter before `meaning` runs per row."""
    parts = [re.sub(r"\(\?P<\w+>", "(?:", f.pattern) for f in FAMILIES
             if (kinds is None or f.kind in kinds) and (roles is None or f.role in roles)]
    return "(?m)(?:" + ")|(?:".join(parts) + ")" if parts else r"[^\s\S]"


def family(fid: str) -> Family:
    """The family of that id."""
    return next(f for f in FAMILIES if f.id == fid)


def families(*, kind: str | None = None, role: str | None = None) -> list[Family]:
    return [f for f in FAMILIES if (kind is None or f.kind == kind) and (role is None or f.role == role)]
