"""The inventory of message templates that name a rank, a sequence number, a process group or a
failure: which upstream file writes each one, what the console reader takes from it, and sample
lines written here in that format (like lnav format definitions that carry their own samples).

Owns the table (`TEMPLATES`, `COLLECTORS`) and its README rendering (`inventory_markdown`); the
text patterns of the templates that more than one module reads (the c10d desync report and the
collective fingerprint mismatch) live in forensics/collective_text.py (re-exported here). Must not
read files or build events: forensics/ingest/console/ does; tests/test_reader_console_templates.py runs
every sample of every template through it, bare and behind every collector the entry lists, and
checks what it `expect`s. The `form` column quotes the upstream format string (%d / {} / c10::str
pieces) as read in the source named by `source`; the sample lines are ours.

Expectation keys: event, level, rank, rank_source, local_rank, host, seq, collective, process_group,
peer_rank, exit_code, timeout_s, and `x.<key>` for a key of the event's `extra` (missing_ranks, pg,
last_enqueued ...). `at` is the 0-based index of the sample line the expectation is about.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

# The shared text patterns (desync report, fingerprint mismatch) live in forensics.collective_text,
# which the failures pass reads without loading this package; re-exported for the readers here.
from ..collective_text import (  # noqa: F401
    DESYNC_LIST, DESYNC_SEQ, DESYNC_TEXT, DESYNC_TIMEOUT_AT, FINGERPRINT, FP_ASPECTS, MISMATCH_PAIR, MISMATCH_TEXT,
    RUNNING_COLLECTIVE, desync_ranks, fingerprint, fingerprint_diff, mismatch_pairs,
)


@dataclass(frozen=True)
class Sample:
    lines: tuple[str, ...]
    expect: dict[str, Any]
    at: int = -1                                  # which line's event the expectation is about
    context: dict[str, Any] = field(default_factory=dict)   # ReaderContext overrides (host_hint ...)


@dataclass(frozen=True)
class Template:
    id: str
    source: str                     # upstream project and file that writes the line
    form: str                       # the template as written upstream
    yields: tuple[str, ...]         # what the reader takes: rank, local_rank, host, seq, pg, missing_ranks, kind ...
    event: str                      # event id the line becomes
    samples: tuple[Sample, ...]
    collectors: tuple[str, ...] = ("plain", "iso", "pylog", "cri", "docker", "journal_iso", "journal_iso_precise", "journal_precise")


# What collectors put in front of a line. `iso` / `pylog`: a log shipper's or Python logging's
# timestamp; `syslog`: rsyslog / journald short format (names the host); `cri`: kubelet's
# container log files; `docker`: Docker's json-file driver (one JSON object per line).
_TS = "2024-11-20 14:37:16"


def _docker(line: str) -> str:
    return json.dumps({"log": line + "\n", "stream": "stderr", "time": "2024-11-20T14:37:16.123456789Z"})


COLLECTORS: dict[str, tuple[str, Callable[[str], str]]] = {
    "plain": ("the line as the program wrote it", lambda s: s),
    "iso": ("log shipper ISO timestamp `2024-11-20 14:37:16 <line>`", lambda s: f"{_TS} {s}"),
    "pylog": ("Python logging `%(asctime)s - %(levelname)s - <line>`", lambda s: f"{_TS},123 - ERROR - {s}"),
    "syslog": ("syslog / journald `Nov 20 14:37:16 host tag[pid]: <line>`", lambda s: f"Nov 20 14:37:16 gpu-node7 kernel: {s}"),
    "cri": ("Kubernetes CRI `<RFC3339Nano> stderr F <line>`", lambda s: f"2024-11-20T14:37:16.123456789Z stderr F {s}"),
    "docker": ('Docker json-file `{"log": "<line>\\n", "stream": .., "time": ..}`', _docker),
    # systemd src/shared/logs-show.c (output_timestamp_realtime, output_short): the time, " host",
    # " identifier", "[pid]", ": ". short-iso writes the offset with %z in older systemd (+0000)
    # and as %+03d:%02d in newer ones (+00:00); short-precise adds ".%06u" to "%b %d %H:%M:%S".
    "journal_iso": ("journald `journalctl -o short-iso`: `2024-11-20T14:37:16+0000 host unit[pid]: <line>`",
                    lambda s: f"2024-11-20T14:37:16+0000 gpu-node7 torchrun[4242]: {s}"),
    "journal_iso_precise": ("journald `-o short-iso-precise`: `2024-11-20T14:37:16.123456+00:00 host unit[pid]: <line>`",
                            lambda s: f"2024-11-20T14:37:16.123456+00:00 gpu-node7 torchrun[4242]: {s}"),
    "journal_precise": ("journald `-o short-precise`: `Nov 20 14:37:16.123456 host unit[pid]: <line>`",
                        lambda s: f"Nov 20 14:37:16.123456 gpu-node7 torchrun[4242]: {s}"),
}
_JOURNAL = ("journal_iso", "journal_iso_precise", "journal_precise")
# Multi-line constructs whose later lines are recognised by their indentation (rendezvous
# result, launch configs, ChildFailedError table): behind a collector's timestamp the reader
# consumes it with exactly one separator, so the indentation is kept; verified behind each.
_BLOCK = ("plain", "iso", "pylog", "syslog", "cri", "docker", "journal_iso", "journal_iso_precise", "journal_precise")

_NCCL_CPP = "pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
_TRACE_UTILS = "pytorch torch/csrc/distributed/c10d/TraceUtils.h (retrieveDesyncReport)"

TEMPLATES: list[Template] = [
    # --- prefixes that name the rank of every line ------------------------------------------
    Template(
        "torch_rank_prefix", "pytorch c10/util/Logging.cpp (c10::SetGlobalRank, set by distributed_c10d._update_default_pg)",
        "[rank{rank}]:",
        ("rank",), "any",
        (Sample(("[rank5]:loss did not improve",), {"rank": 5, "rank_source": "prefix", "event": "LOG"}),),
        collectors=("plain", "iso", "pylog", "syslog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "torchrun_tee_prefix", "pytorch torch/distributed/elastic/agent/server/local_elastic_agent.py (--tee, --redirects)",
        "[${role_name}${local_rank}]:", ("local_rank", "rank only where the log maps it or shows one node"), "any",
        # the number is the LOCAL rank: with nothing else it stays local (rank null, never a guess)
        (Sample(("[default3]:epoch 1 done",), {"local_rank": 3, "rank": None, "rank_source": "none"}),
         # a single-node launch printed by torchrun: local rank = global rank, and mapped_by says why
         Sample(("INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:",
                 "  min_nodes        : 1", "  max_nodes        : 1", "  nproc_per_node   : 4",
                 "[default3]:epoch 1 done"),
                {"local_rank": 3, "rank": 3, "rank_source": "mapped",
                 "x.mapped_by": "single-node launch (max_nodes=1, nproc_per_node=4): local rank = rank"}),
         # a one-node rendezvous result (group_world_size=1)
         Sample(("INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
                 "  restart_count=0", "  master_addr=127.0.0.1", "  master_port=29500", "  group_rank=0",
                 "  group_world_size=1", "  local_ranks=[0, 1]", "  role_ranks=[0, 1]", "  global_ranks=[0, 1]",
                 "  role_world_sizes=[2, 2]", "  global_world_sizes=[2, 2]", "[default1]:epoch 1 done"),
                {"local_rank": 1, "rank": 1, "rank_source": "mapped",
                 "x.mapped_by": "torchrun rendezvous result (group_rank=0)"}),
         # the same process writes `[default1]:[rank1]:` later (PyTorch >= 2.3 prefixes a failing
         # rank's lines with its global rank): its earlier lines of this block are mapped too
         Sample(("[default1]:step 0 loss 2.01", "[default0]:step 0 loss 2.00",
                 "[default1]:[rank1]: RuntimeError: Detected mismatch between collectives on ranks."),
                {"local_rank": 1, "rank": 1, "rank_source": "mapped",
                 "x.mapped_by": "its own lines carry both [defaultN]: and [rankM]:"}, at=0),
         # the agent's ChildFailedError record of this node's worker: rank 2 (local_rank: 2)
         Sample(("[default2]:step 5 loss 1.9", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                 "============================================================", "train.py FAILED",
                 "------------------------------------------------------------", "Failures:", "  <NO_OTHER_FAILURES>",
                 "------------------------------------------------------------", "Root Cause (first observed failure):",
                 "[0]:", "  time      : 2024-11-20_14:37:16", "  host      : gpu-node4", "  rank      : 2 (local_rank: 2)",
                 "  exitcode  : 1 (pid: 2211)", "  error_file: <N/A>"),
                {"local_rank": 2, "rank": 2, "rank_source": "mapped",
                 "x.mapped_by": "torch elastic's ChildFailedError record (rank, local_rank)"}, at=0)),
        collectors=_BLOCK,
    ),
    Template(
        "torchrun_prefix_template_rank", "pytorch local_elastic_agent.py (log_line_prefix_template='[${rank}]:')",
        "[${rank}]:", ("rank",), "any",
        (Sample(("[12]:saving checkpoint",), {"rank": 12, "rank_source": "prefix"}),),
    ),
    Template(
        "srun_label", "slurm src/srun (srun --label: \"%0*d: \" task id)", "%0*d: <line>",
        ("rank (task id = SLURM_PROCID)",), "any",
        (Sample(("03: step 10 loss 2.1", "12: step 10 loss 2.0", "03: step 11 loss 2.0"),
                {"rank": 3, "rank_source": "prefix", "x.srun_task": 3}),
         Sample(("0: [default1]:step 4", "1: [default1]:step 4", "1: [default2]:step 4"),
                {"local_rank": 1, "rank": None, "x.srun_task": 1}, at=1)),
        # srun's label is found per file (most lines carry it): checked bare and in CRI / Docker
        collectors=("plain", "cri", "docker"),
    ),
    Template(
        "mpirun_tag_output", "open-mpi orte/mca/iof/base (prrte src/mca/iof): mpirun --tag-output",
        "[%s,%s]<%s>:", ("rank", "stream"), "any",
        (Sample(("[1,6]<stderr>:RuntimeError: CUDA error: an illegal memory access was encountered",),
                {"rank": 6, "rank_source": "prefix", "event": "CUDA_ERROR", "x.stream": "stderr"}),),
    ),
    Template(
        "c10d_log_prefix", _NCCL_CPP + " (createLogPrefix)",
        "[PG ID {local_id} PG GUID {pg_uid}({pg_desc}) Rank {rank}] ", ("rank (default PG)", "pg", "pg_rank (other PGs)"), "any",
        (Sample(("[PG ID 0 PG GUID 0(default_pg) Rank 6] ProcessGroupNCCL initialized",),
                {"rank": 6, "rank_source": "prefix", "process_group": "default_pg", "x.pg": "default_pg"}),
         Sample(("[PG ID 2 PG GUID 5(DATA_PARALLEL_GROUP) Rank 1] ProcessGroupNCCL initialized",),
                {"rank": None, "x.pg_rank": 1, "x.pg": "DATA_PARALLEL_GROUP"})),
    ),
    Template(
        "nccl_debug_prefix", "nvidia nccl src/debug.cc (NCCL_DEBUG=INFO/WARN header)",
        "%s:%d:%d [%d] NCCL WARN|INFO", ("host", "pid", "local_rank (cudaDev)"), "any",
        (Sample(("gpu-node2:4711:4790 [3] NCCL INFO Channel 00/02 : 0 1 2 3",),
                {"host": "gpu-node2", "local_rank": 3, "rank": None, "x.pid": 4711}),),
    ),
    Template(
        "nccl_comm_init", "nvidia nccl src/init.cc (INFO NCCL_INIT)",
        "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d",
        ("nccl_rank", "nranks", "host:pid -> rank when nRanks = world size"), "LOG",
        (Sample(("gpu-node2:4711:4790 [3] NCCL INFO comm 0x5581d0 rank 11 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",),
                {"x.nccl_rank": 11, "x.nccl_nranks": 16, "local_rank": 3, "rank": None}),
         Sample(("[2024-11-20 14:37:16,000] [INFO] [launch.py:170:main] dist_world_size=4",
                 "gpu-node2:4711:4790 [1] NCCL INFO comm 0x5581d0 rank 3 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0",
                 "gpu-node2:4711:4795 [1] NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129"),
                {"rank": 3, "rank_source": "mapped", "local_rank": 1, "host": "gpu-node2"})),
    ),
    Template(
        "kubernetes_cri_partial", "kubernetes kubelet CRI container log (pkg/kubelet/kuberuntime/logs)",
        "<RFC3339Nano> <stream> P <part> / <RFC3339Nano> <stream> F <rest>", ("rank of the line it continues",), "any",
        (Sample(("2024-11-20T14:37:16.1Z stderr P [rank6]:RuntimeError: a very long message cut here",
                 "2024-11-20T14:37:16.1Z stderr F  and its end"),
                {"rank": 6, "rank_source": "prefix", "x.continues": 1}),),
        collectors=("plain",),
    ),
    Template(
        "pdsh_host_prefix", "pdsh / DeepSpeed multinode runner (host: <line>)", "%s: <line>", ("host",), "any",
        (Sample(("worker-3: loading shard 7",), {"host": "worker-3", "rank": None}),),
        collectors=("plain", "cri", "docker"),
    ),
    Template(
        "ray_worker_prefix", "ray python/ray/_private/log_monitor.py", "({actor} pid={pid}, ip={ip})",
        ("host (ip)", "pid"), "any",
        (Sample(("(RayTrainWorker pid=9021, ip=10.0.4.17) [rank2]:step 3",),
                {"host": "10.0.4.17", "x.pid": 9021, "rank": 2}),),
    ),
    # --- launchers: local -> global -------------------------------------------------------
    Template(
        "torchrun_rendezvous", "pytorch torch/distributed/elastic/agent/server/api.py (_rendezvous)",
        "[{role}] Rendezvous complete for workers. Result:\\n  group_rank=..\\n  local_ranks=[..]\\n  global_ranks=[..]",
        ("local->global map", "multi-node"), "LOG (topology)",
        (Sample(("INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
                 "  restart_count=0", "  master_addr=gpu-node1", "  master_port=29500", "  group_rank=1",
                 "  group_world_size=2", "  local_ranks=[0, 1, 2, 3]", "  role_ranks=[4, 5, 6, 7]",
                 "  global_ranks=[4, 5, 6, 7]", "  role_world_sizes=[8, 8, 8, 8]", "  global_world_sizes=[8, 8, 8, 8]",
                 "[default2]:step 9 loss 1.7"),
                {"rank": 6, "rank_source": "mapped", "local_rank": 2}),
         Sample(("INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
                 "  restart_count=0", "  group_rank=1", "  group_world_size=2", "  local_ranks=[0, 1]",
                 "  global_ranks=[2, 3]", "  global_world_sizes=[4, 4]",
                 "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 1 (pid: 8123) of binary: /usr/bin/python3"),
                {"event": "CHILD_FAILED", "rank": 3, "rank_source": "mapped", "local_rank": 1, "exit_code": 1})),
        collectors=_BLOCK,
    ),
    Template(
        "torchrun_launch_configs", "pytorch torch/distributed/launcher/api.py (launch_agent)",
        "Starting elastic_operator with launch configs:\\n  min_nodes : %s\\n  max_nodes : %s\\n  nproc_per_node : %s",
        ("single node => local = global", "multi-node"), "LOG",
        (Sample(("INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:",
                 "  entrypoint       : train.py", "  min_nodes        : 1", "  max_nodes        : 1",
                 "  nproc_per_node   : 4", "  run_id           : none",
                 "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 (pid: 702) of binary: /usr/bin/python3"),
                {"event": "CHILD_FAILED", "rank": 2, "rank_source": "mapped", "exit_code": -9}),
         Sample(("INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:",
                 "  min_nodes        : 2", "  max_nodes        : 2", "  nproc_per_node   : 4",
                 "[default3]:step 2"),
                {"rank": None, "local_rank": 3})),
        collectors=_BLOCK,
    ),
    Template(
        "deepspeed_rank_mapping", "deepspeed deepspeed/launcher/launch.py (main)",
        "nnodes={}, num_local_procs={}, node_rank={} / global_rank_mapping={} / dist_world_size={}",
        ("local->global map per host",), "LOG",
        (Sample(("[2024-11-20 14:37:16,000] [INFO] [launch.py:163:main] nnodes=2, num_local_procs=2, node_rank=1",
                 "[2024-11-20 14:37:16,000] [INFO] [launch.py:169:main] global_rank_mapping=defaultdict(<class 'list'>, "
                 "{'gpu-a': [0, 1], 'gpu-b': [2, 3]})",
                 "gpu-b:4411:4411 [1] NCCL WARN Cuda failure 'out of memory'"),
                {"rank": 3, "rank_source": "mapped", "host": "gpu-b", "local_rank": 1}),),
        collectors=_BLOCK,
    ),
    Template(
        "elastic_worker_failed", "pytorch torch/distributed/elastic/multiprocessing/api.py (_poll)",
        "failed (exitcode: {}) local_rank: {} (pid: {}) of binary: {}", ("local_rank", "exitcode", "pid"), "CHILD_FAILED",
        (Sample(("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 5 (pid: 3306) of binary: /usr/bin/python3",),
                {"event": "CHILD_FAILED", "local_rank": 5, "exit_code": -9, "x.signal": "SIGKILL", "rank": None},
                context={"host_hint": "node-a"}),),
    ),
    Template(
        "child_failed_error_table", "pytorch torch/distributed/elastic/multiprocessing/errors/__init__.py (ChildFailedError.format_msg)",
        "Root Cause (first observed failure):\\n[0]:\\n  time : ..\\n  host : ..\\n  rank : {} (local_rank: {})\\n  exitcode : {} (pid: {})",
        ("rank", "local_rank", "host", "exitcode", "first observed"), "CHILD_FAILED",
        (Sample(("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                 "============================================================", "train.py FAILED",
                 "------------------------------------------------------------", "Failures:", "  <NO_OTHER_FAILURES>",
                 "------------------------------------------------------------", "Root Cause (first observed failure):",
                 "[0]:", "  time      : 2024-11-20_14:37:16", "  host      : gpu-node4", "  rank      : 13 (local_rank: 5)",
                 "  exitcode  : -6 (pid: 2211)", "  error_file: <N/A>",
                 "  traceback : Signal 6 (SIGABRT) received by PID 2211"),
                {"event": "CHILD_FAILED", "rank": 13, "rank_source": "record", "local_rank": 5, "host": "gpu-node4",
                 "exit_code": -6, "x.first_observed": True}, at=12),),
        collectors=_BLOCK,
    ),
    Template(
        "deepspeed_exit", "deepspeed deepspeed/launcher/launch.py (sigkill_handler)",
        "exits with return code = {}", ("exitcode",), "CHILD_FAILED",
        (Sample(("[2024-11-20 14:37:16,000] [ERROR] [launch.py:322:sigkill_handler] ['python', 'train.py', '--local_rank=1'] exits with return code = 1",),
                {"event": "CHILD_FAILED", "exit_code": 1}),),
    ),
    Template(
        "accelerate_launch", "huggingface accelerate src/accelerate/commands/launch.py (runs torch.distributed.run)",
        "same lines as torchrun (elastic agent, ChildFailedError table)", ("as torchrun",), "CHILD_FAILED",
        (Sample(("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 51) of binary: /opt/conda/bin/python",),
                {"event": "CHILD_FAILED", "local_rank": 0, "exit_code": 1}),),
    ),
    Template(
        "mp_spawn_exited", "pytorch torch/multiprocessing/spawn.py (ProcessContext.join, ProcessExitedException)",
        "process %d terminated with signal %s | process %d terminated with exit code %d", ("rank", "exitcode", "signal"),
        "CHILD_FAILED",
        (Sample(("torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal SIGKILL",),
                {"event": "CHILD_FAILED", "rank": 3, "rank_source": "record", "exit_code": -9, "x.signal": "SIGKILL"}),
         Sample(("Exception: process 1 terminated with exit code 2",),
                {"event": "CHILD_FAILED", "rank": 1, "exit_code": 2})),
    ),
    Template(
        "mp_spawn_raised", "pytorch torch/multiprocessing/spawn.py (ProcessContext.join, ProcessRaisedException)",
        "\\n\\n-- Process %d terminated with the following error:\\n{child traceback}", ("rank of the traceback after it",),
        "TRACEBACK",
        (Sample(("-- Process 2 terminated with the following error:", "Traceback (most recent call last):",
                 '  File "/srv/train.py", line 12, in worker', "ValueError: empty shard"),
                {"event": "TRACEBACK", "rank": 2, "rank_source": "record", "x.exception": "ValueError"}, at=1),),
        collectors=("plain",),
    ),
    Template(
        "horovod_gloo_exit", "horovod horovod/runner/gloo_run.py (_exec_command_fn)",
        "Process {idx} exit with status code {ec}.", ("rank", "exitcode"), "CHILD_FAILED",
        (Sample(("Process 5 exit with status code 137.",),
                {"event": "CHILD_FAILED", "rank": 5, "exit_code": 137, "x.signal": "SIGKILL"}),),
    ),
    # --- c10d: timeouts, watchdog, desync, barriers ---------------------------------------
    Template(
        "nccl_watchdog_timeout", _NCCL_CPP + " (WorkNCCL::checkTimeout)",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=.., OpType=.., ..) ran for {} milliseconds before timing out.",
        ("seq", "collective", "timeout"), "NCCL_TIMEOUT",
        (Sample(("[rank4]:[E1120 14:37:16.100200300 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation "
                 "timeout: WorkNCCL(SeqNum=77, OpType=BROADCAST, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for "
                 "600012 milliseconds before timing out.",),
                {"event": "NCCL_TIMEOUT", "rank": 4, "seq": 77, "collective": "BROADCAST", "timeout_s": 600.0}),),
        collectors=("plain", "iso", "pylog", "syslog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "nccl_watchdog_detected", _NCCL_CPP + " (watchdogHandler)",
        "Exception (either an error or timeout) | Work timeout is | NCCL error is detected by watchdog at work: {}, last enqueued NCCL work: {}, last completed NCCL work: {}.",
        ("seq", "last enqueued", "last completed", "pg"), "NCCL_WATCHDOG / NCCL_ERROR",
        (Sample(("[rank2]:[E1120 14:37:16.101 ProcessGroupNCCL.cpp:1785] [PG ID 1 PG GUID 1 Rank 2] Exception (either an "
                 "error or timeout) detected by watchdog at work: 3120, last enqueued NCCL work: 3122, last completed NCCL work: 3119.",),
                {"event": "NCCL_WATCHDOG", "rank": 2, "seq": 3120, "x.last_enqueued": 3122, "x.last_completed": 3119, "x.pg": "1"}),
         Sample(("[PG ID 0 PG GUID 0(default_pg) Rank 1] NCCL error is detected by watchdog at work: 55, last enqueued "
                 "NCCL work: 55, last completed NCCL work: 54.",),
                {"event": "NCCL_ERROR", "rank": 1, "seq": 55, "x.last_completed": 54})),
    ),
    Template(
        "nccl_timeout_at", _NCCL_CPP + " (watchdogHandler, torch 2.4-2.5)",
        "Timeout at NCCL work: {}, last enqueued NCCL work: {}, last completed NCCL work: {}.", ("seq", "last enqueued", "last completed"),
        "NCCL_WATCHDOG",
        (Sample(("[rank6]:[E1120 14:37:16.2 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 6] Timeout at NCCL "
                 "work: 901, last enqueued NCCL work: 901, last completed NCCL work: 900.",),
                {"event": "NCCL_WATCHDOG", "rank": 6, "seq": 901, "x.last_completed": 900}),),
    ),
    Template(
        "nccl_failure_sequence_id", _NCCL_CPP + " (torch 2.6-2.7)",
        "failure detected by watchdog at work sequence id: {} PG status: last enqueued work: {}, last completed work: {}",
        ("seq", "last enqueued", "last completed"), "NCCL_WATCHDOG",
        (Sample(("[rank1]:[E1120 14:37:16.3 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 1]  failure detected "
                 "by watchdog at work sequence id: 64 PG status: last enqueued work: 65, last completed work: 63",),
                {"event": "NCCL_WATCHDOG", "rank": 1, "seq": 64, "x.last_enqueued": 65}),),
    ),
    Template(
        "nccl_async_exception", _NCCL_CPP + " (WorkNCCL::checkAndSetException)",
        "Collective WorkNCCL(SeqNum=.., OpType=..) raised the following async exception: {}", ("seq", "collective", "error"),
        "NCCL_ERROR",
        (Sample(("[rank3]:[E1120 14:37:16.4 ProcessGroupNCCL.cpp:542] [Rank 3] Collective WorkNCCL(SeqNum=18, OpType=ALLGATHER, "
                 "NumelIn=512, NumelOut=4096, Timeout(ms)=600000) raised the following async exception: NCCL error: remote "
                 "process exited or there was a network error, NCCL version 2.21.5",),
                {"event": "NCCL_ERROR", "rank": 3, "seq": 18, "collective": "ALLGATHER"}),),
    ),
    Template(
        "nccl_dump_signal", _NCCL_CPP + " (getNCCLWatchdogTimeoutErrorMsg)",
        "Received a dump signal due to a collective timeout from {this local rank | rank N} ... Last enqueued NCCL work: {}, last completed NCCL work: {}.",
        ("signal source rank", "last enqueued", "last completed"), "NCCL_DUMP_SIGNAL",
        (Sample(("[rank7]:[E1120 14:37:16.5 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 7] Received a dump "
                 "signal due to a collective timeout from  rank 2 and we will try our best to dump the debug info. Last "
                 "enqueued NCCL work: 300, last completed NCCL work: 300.This is most likely caused by incorrect usages of collectives.",),
                {"event": "NCCL_DUMP_SIGNAL", "rank": 7, "x.signal_from": 2, "x.last_enqueued": 300}),),
    ),
    Template(
        "nccl_work_status", _NCCL_CPP + " (watchdogHandler, periodic INFO)",
        "NCCL Work update periodically: last enqueued NCCL work: {}, last completed NCCL work: {}.", ("last enqueued", "last completed"),
        "LOG",
        (Sample(("[PG ID 0 PG GUID 0(default_pg) Rank 5] NCCL Work update periodically: last enqueued NCCL work: 1200, "
                 "last completed NCCL work: 1199.",),
                {"event": "LOG", "rank": 5, "x.last_enqueued": 1200, "x.last_completed": 1199}),),
    ),
    Template(
        "flight_recorder_dump", _NCCL_CPP + " (dumpDebuggingInfo) / TraceUtils.h (DebugInfoWriter)",
        "ProcessGroupNCCL dumping nccl trace to {} | Finished writing NCCLPG debug info to {}", ("dump path",), "LOG",
        (Sample(("[rank0]:[I1120 14:37:17.0 ProcessGroupNCCL.cpp:1200] [PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL "
                 "dumping nccl trace to /tmp/nccl_trace_rank_0",),
                {"rank": 0, "x.fr_dump": "/tmp/nccl_trace_rank_0"}),
         Sample(("[PG ID 0 PG GUID 0(default_pg) Rank 4] Broadcasting flight-recorder dump signal to other processes via TCPStore.",),
                {"rank": 4, "x.fr_signal": "broadcast"})),
    ),
    Template(
        "desync_missing", _TRACE_UTILS + " (analyzeMissingRanks)",
        "- To our best knowledge, ranks [{}] are the lagging ranks that caused this timeout. They never joined any collectives",
        ("missing_ranks",), "NCCL_DESYNC",
        (Sample(("[rank0]:\t - To our best knowledge, ranks [5, 6] are the lagging ranks that caused this timeout. They never joined any collectives",),
                {"event": "NCCL_DESYNC", "x.missing_ranks": [5, 6]}),),
    ),
    Template(
        "desync_lagging", _TRACE_UTILS + " (analyzeLaggingRanks)",
        "- [{}] joined but didn't finish collective #{} (count from 1) / [{}] finished collective #{}, but didn't join collective #{}",
        ("missing_ranks", "seq"), "NCCL_DESYNC",
        (Sample(("[rank0]:\t   - [3] joined but didn't finish collective #412 (count from 1)",),
                {"event": "NCCL_DESYNC", "x.missing_ranks": [3], "seq": 412}),
         Sample(("[rank0]:\t     [1, 2] finished collective #412, but didn't join collective #413 (count from 1)",),
                {"event": "NCCL_DESYNC", "x.missing_ranks": [1, 2], "seq": 412})),
    ),
    Template(
        "desync_timeout_at", _TRACE_UTILS + " (retrieveDesyncReport)",
        "- [{}] Timeout at collective: {}, #{}", ("reporting rank", "seq", "collective"), "NCCL_DESYNC",
        (Sample(("[rank0]:\t - [0] Timeout at collective: ALLREDUCE, #413",),
                {"event": "NCCL_DESYNC", "seq": 413, "collective": "ALLREDUCE", "x.reporting_rank": 0}),),
    ),
    Template(
        "collective_fingerprint_mismatch", "pytorch torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp (TORCH_DISTRIBUTED_DEBUG=DETAIL)",
        "Detected mismatch between collectives on ranks. Rank {} is running collective: CollectiveFingerPrint(..), but Rank {} is running collective: CollectiveFingerPrint(..).",
        ("rank", "peer rank", "seq per rank", "collective"), "COLLECTIVE_MISMATCH",
        (Sample(("RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: "
                 "CollectiveFingerPrint(SequenceNumber=40, OpType=ALLREDUCE, TensorShape=[16], TensorDtypes=Float), but "
                 "Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=41, OpType=BROADCAST, TensorShape=[16], "
                 "TensorDtypes=Float).",),
                {"event": "COLLECTIVE_MISMATCH", "rank": 2, "seq": 40, "peer_rank": 0, "x.peer_seq": 41,
                 "x.seq_by_rank": {"2": 40, "0": 41}, "x.named_ranks": [2, 0], "x.differ": ["seq", "op"]}),
         # same op and sequence number, another dtype; compute_collective_diff's tail appended
         Sample(("[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
                 "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, TensorShape=[64, 8], TensorDtypes=Half, "
                 "TensorDeviceTypes=cuda), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=12, "
                 "OpType=ALLREDUCE, TensorShape=[64, 8], TensorDtypes=Float, TensorDeviceTypes=cuda).Collectives differ "
                 "in the following aspects:   Tensor Tensor dtypes: Halfvs Float",),
                {"event": "COLLECTIVE_MISMATCH", "rank": 1, "seq": 12, "collective": "ALLREDUCE", "peer_rank": 0,
                 "x.fingerprint": {"seq": 12, "op": "ALLREDUCE", "shape": [64, 8], "dtypes": ["Half"]},
                 "x.peer_fingerprint": {"seq": 12, "op": "ALLREDUCE", "shape": [64, 8], "dtypes": ["Float"]},
                 "x.differ": ["dtypes"]}),
         # an older release: no SequenceNumber, devices as TensorOptions(..), a peer without tensors
         Sample(("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
                 "CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes="
                 "TensorOptions(dtype=float (default), device=cuda, layout=Strided (default))), but Rank 3 is running "
                 "collective: CollectiveFingerPrint(OpType=BARRIER).",),
                {"event": "COLLECTIVE_MISMATCH", "rank": 0, "peer_rank": 3, "collective": "ALLGATHER",
                 "x.peer_collective": "BARRIER", "x.differ": ["op"]})),
    ),
    Template(
        "collective_fingerprint_log", "pytorch torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp (runCollectiveChecks)",
        "LOG(INFO) [Rank {}] Running collective: CollectiveFingerPrint(SequenceNumber={}, OpType={}, ..) | "
        "ProcessGroupWrapper: Monitored Barrier encountered error running collective: {}. Error: ",
        ("rank", "seq", "collective", "shape / dtypes"), "LOG / BARRIER_TIMEOUT",
        (Sample(("[I1120 14:37:16.000000000 ProcessGroupWrapper.cpp:560] [Rank 3] Running collective: "
                 "CollectiveFingerPrint(SequenceNumber=9, OpType=REDUCE_SCATTER, TensorShape=[2048], TensorDtypes=BFloat16, "
                 "TensorDeviceTypes=cuda)",),
                {"event": "LOG", "level": "INFO", "rank": 3, "seq": 9, "collective": "REDUCE_SCATTER",
                 "x.fingerprint": {"seq": 9, "op": "REDUCE_SCATTER", "shape": [2048], "dtypes": ["BFloat16"]}}),
         Sample(("[rank0]: RuntimeError: ProcessGroupWrapper: Monitored Barrier encountered error running collective: "
                 "CollectiveFingerPrint(SequenceNumber=5OpType=BARRIER). Error: ",),
                {"event": "BARRIER_TIMEOUT", "rank": 0, "seq": 5, "collective": "BARRIER"})),
    ),
    Template(
        "monitored_barrier_failed", "pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp (monitoredBarrier)",
        "[Rank 0]: Rank{s} {} failed to pass monitoredBarrier in {} ms", ("missing_ranks", "timeout", "rank 0 reports"),
        "BARRIER_TIMEOUT",
        (Sample(("RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms",),
                {"event": "BARRIER_TIMEOUT", "rank": 0, "x.missing_ranks": [1, 3], "timeout_s": 30.0}),
         Sample(("[Rank 0]: Rank 6 failed to pass monitoredBarrier in 5000 ms",),
                {"event": "BARRIER_TIMEOUT", "x.missing_ranks": [6]})),
    ),
    Template(
        "monitored_barrier_out_of_time", "pytorch ProcessGroupGloo.cpp (checkRemainingTime)",
        "Rank {} timed out in monitoredBarrier after {} ms.\\nSuccessfully processed ranks: {}", ("passed ranks", "timeout"),
        "BARRIER_TIMEOUT",
        (Sample(("[rank0]:Rank 0 timed out in monitoredBarrier after 10000 ms.", "[rank0]:Successfully processed ranks: 1, 2"),
                {"event": "BARRIER_TIMEOUT", "rank": 0, "x.passed_ranks": [1, 2], "timeout_s": 10.0}, at=0),),
    ),
    Template(
        "monitored_barrier_peer", "pytorch ProcessGroupGloo.cpp (monitoredBarrier, rank != 0)",
        "Rank {} successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0.",
        ("rank", "peer rank 0"), "BARRIER_TIMEOUT",
        (Sample(("RuntimeError: Rank 2 successfully reached monitoredBarrier, but received errors while waiting for send/recv "
                 "from rank 0. Please check rank 0 logs for faulty rank.",),
                {"event": "BARRIER_TIMEOUT", "rank": 2, "peer_rank": 0, "x.reached": True}),),
    ),
    Template(
        "store_based_barrier", "pytorch torch/distributed/distributed_c10d.py (_store_based_barrier)",
        "Timed out initializing process group in store based barrier on rank {}, for key: {} (world_size={}, num_workers_joined={}, timeout={})",
        ("rank", "world size", "arrived"), "BARRIER_TIMEOUT",
        (Sample(("torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank 5, "
                 "for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=6, timeout=0:30:00)",),
                {"event": "BARRIER_TIMEOUT", "rank": 5, "rank_source": "record", "x.world_size": 8, "x.arrived": 6, "x.missing_count": 2,
                 "timeout_s": 1800.0}),),
    ),
    # --- memory, processes, schedulers ---------------------------------------------------
    Template(
        "cuda_oom", "pytorch c10/cuda/CUDACachingAllocator.cpp", "CUDA out of memory. Tried to allocate {} ... this process has {} memory in use.",
        ("kind oom", "device", "other processes"), "CUDA_OOM",
        (Sample(("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 1 has a total capacity "
                 "of 79.10 GiB of which 120.00 MiB is free. Process 3311 has 78.90 GiB memory in use.",),
                {"event": "CUDA_OOM", "rank": 1, "x.device": 1}),),
        collectors=("plain", "iso", "pylog", "syslog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "kernel_oom_killer", "linux mm/oom_kill.c (__oom_kill_process)",
        "Out of memory: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB ...", ("pid", "kind host_oom", "host (syslog)"),
        "PROCESS_KILLED",
        (Sample(("Out of memory: Killed process 5102 (python3) total-vm:98765432kB, anon-rss:87654321kB, file-rss:0kB, "
                 "shmem-rss:0kB, UID:1000 pgtables:180000kB oom_score_adj:0",),
                {"event": "PROCESS_KILLED", "x.by": "oom_killer", "x.pid": 5102}),
         Sample(("Memory cgroup out of memory: Killed process 731 (pt_main_thread) total-vm:1kB, anon-rss:1kB, file-rss:0kB, "
                 "shmem-rss:0kB, UID:0 pgtables:1kB oom_score_adj:0",),
                {"event": "PROCESS_KILLED", "x.by": "oom_killer", "x.pid": 731})),
        collectors=("plain", "iso", "syslog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "slurm_oom_kill", "slurm src/plugins/task/cgroup (task_cgroup_memory_check_oom)",
        "Detected %lu oom_kill event%s in %ps. Some of the step tasks have been OOM Killed.", ("kind host_oom",), "PROCESS_KILLED",
        (Sample(("slurmstepd: error: Detected 2 oom_kill events in StepId=88123.0. Some of the step tasks have been OOM Killed.",),
                {"event": "PROCESS_KILLED", "x.by": "oom_killer", "x.oom_kill_events": 2}),),
        collectors=("plain", "iso", "pylog", "syslog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "slurm_memory_limit", "slurm src/plugins/jobacct_gather/common/common_jag.c (_acct_kill_step)",
        "%ps exceeded memory limit (%lu > %lu), being killed | Exceeded job memory limit", ("kind host_oom",), "PROCESS_KILLED",
        (Sample(("slurmstepd: error: StepId=5521.0 exceeded memory limit (34359738368 > 32212254720), being killed",),
                {"event": "PROCESS_KILLED", "x.by": "oom_killer", "x.how": "slurm memory limit", "x.mem_limit": 32212254720}),
         Sample(("slurmstepd: error: Job 610 exceeded memory limit (5000000 > 4194304), being killed",),
                {"event": "PROCESS_KILLED", "x.by": "oom_killer", "x.slurm_step": "610"})),
        collectors=("plain", "iso", "pylog", "syslog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "srun_task_exit", "slurm src/srun (task state messages)",
        "srun: error: %s: task(s) %s: Exited with exit code %d | Killed | Terminated | Out Of Memory",
        ("host", "tasks", "exitcode"), "CHILD_FAILED / PROCESS_KILLED",
        (Sample(("srun: error: gpu-node9: tasks 8-10,12: Exited with exit code 1",),
                {"event": "CHILD_FAILED", "host": "gpu-node9", "exit_code": 1, "x.task_list": [8, 9, 10, 12]}),
         Sample(("srun: error: gpu-node9: task 3: Out Of Memory",),
                {"event": "PROCESS_KILLED", "host": "gpu-node9", "x.by": "oom_killer"})),
    ),
    Template(
        "slurm_cancelled", "slurm src/slurmd/slurmstepd/req.c (_handle_signal_container)",
        "*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT | PREEMPTION | NODE FAILURE ... ***", ("host", "reason"), "JOB_CANCELLED",
        (Sample(("slurmstepd: error: *** JOB 88123 ON gpu-node9 CANCELLED AT 2024-11-20T14:37:16 DUE TO TIME LIMIT ***",),
                {"event": "JOB_CANCELLED", "host": "gpu-node9", "x.reason": "TIME LIMIT"}),
         Sample(("srun: error: *** STEP 88123.0 CANCELLED AT 2024-11-20T14:37:16 DUE TO TIME LIMIT ***",),
                {"event": "JOB_CANCELLED", "x.kind": "step"})),
        collectors=("plain", "iso", "pylog", "syslog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "srun_node_failure", "slurm src/srun/libsrun/launch.c (_node_fail_handler)", "Node failure on %s", ("host",),
        "JOB_CANCELLED",
        (Sample(("srun: error: Node failure on gpu-node12",), {"event": "JOB_CANCELLED", "host": "gpu-node12", "x.reason": "NODE FAILURE"}),),
    ),
    Template(
        "python_traceback", "cpython Lib/traceback.py (behind a rank prefix)", "Traceback (most recent call last): ... <Exception>: <message>",
        ("rank (prefix)", "exception"), "TRACEBACK",
        (Sample(("[rank3]: Traceback (most recent call last):", '[rank3]:   File "/srv/train.py", line 88, in <module>',
                 "[rank3]:     main()", "[rank3]: ValueError: batch has no tokens"),
                {"event": "TRACEBACK", "rank": 3, "message": "ValueError: batch has no tokens", "x.exception": "ValueError"}, at=0),),
        collectors=("plain", "iso", "pylog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "cuda_error", "pytorch c10/cuda/CUDAException.h (C10_CUDA_CHECK)", "CUDA error: {}", ("kind gpu_error",), "CUDA_ERROR",
        (Sample(("[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered",),
                {"event": "CUDA_ERROR", "rank": 2, "x.cuda_error": "an illegal memory access was encountered"}),),
    ),
    Template(
        "gpu_xid", "nvidia open-gpu-kernel-modules (NVRM: Xid)", "NVRM: Xid (PCI:%s): %d, ...", ("pci", "xid", "host (syslog)"),
        "GPU_XID",
        (Sample(("NVRM: Xid (PCI:0000:4e:00): 79, pid=2231, name=python3, GPU has fallen off the bus.",),
                {"event": "GPU_XID", "x.xid": 79, "x.pci": "PCI:0000:4e:00"}),),
        collectors=("plain", "iso", "syslog", "cri", "docker", *_JOURNAL),
    ),
    Template(
        "elastic_signal", "pytorch torch/distributed/elastic/multiprocessing/api.py (_terminate_process_handler, close)",
        "Sending process {} closing signal {} | Signal {} ({}) received by PID {}", ("pid", "signal"), "PROCESS_KILLED",
        (Sample(("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 9911 closing signal SIGTERM",),
                {"event": "PROCESS_KILLED", "x.pid": 9911, "x.signal": "SIGTERM", "x.by": "launcher"}),
         Sample(("  traceback : Signal 9 (SIGKILL) received by PID 9912",),
                {"event": "PROCESS_KILLED", "x.pid": 9912, "x.signal": "SIGKILL"})),
    ),
    Template(
        "deepspeed_log_dist", "deepspeed deepspeed/utils/logging.py (log_dist: `[Rank {}] `)", "[Rank {}] {message}",
        ("rank",), "any",
        (Sample(("[2024-11-20 14:37:16,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=200, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]",),
                {"event": "TRAIN_STEP", "rank": 0, "step": 200}),),
    ),
    Template(
        "megatron_iteration", "megatron megatron/training/training.py (training_log)",
        " iteration {:8d}/{:8d} | ... | lm loss: {} | ...", ("step", "loss"), "TRAIN_STEP",
        (Sample((" [2024-11-20 14:37:16] iteration      120/   10000 | consumed samples:        15360 | elapsed time per "
                 "iteration (ms): 850.2 | learning rate: 2.000000E-04 | lm loss: 3.412345E+00 | grad norm: 1.234 |",),
                {"event": "TRAIN_STEP", "step": 120, "loss": 3.412345}),),
    ),
    Template(
        "megatron_memory_report", "megatron megatron/training/utils.py (report_memory)",
        "[Rank {}] (after {} iterations) memory (MB) | allocated: {} | max allocated: {}", ("rank", "step"), "GPU_MEMORY",
        (Sample(("[Rank 9] (after 20 iterations) memory (MB) | allocated: 2048.5 | max allocated: 4096.0 | reserved: 5000.0 | max reserved: 5000.0",),
                {"event": "GPU_MEMORY", "rank": 9}),),
    ),
]


def inventory_markdown() -> str:
    """The README table: one row per template (generated; tests keep README in sync)."""
    rows = ["| template | written by | names | event |", "|---|---|---|---|"]
    for t in TEMPLATES:
        rows.append(f"| `{t.id}` | {t.source} | {', '.join(t.yields)} | {t.event} |")
    rows.append("")
    rows.append("| collector | form | templates verified behind it |")
    rows.append("|---|---|---|")
    for name, (form, _) in COLLECTORS.items():
        n = sum(name in t.collectors for t in TEMPLATES)
        rows.append(f"| `{name}` | {form} | {n} of {len(TEMPLATES)} |")
    return "\n".join(rows)
