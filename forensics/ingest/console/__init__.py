"""The console reader: torchrun / DeepSpeed / Megatron / NCCL / HF console text -> events.

Owns: rank attribution from console prefixes, timestamps written in the line (ISO, DeepSpeed,
HF, glog, torch elastic, syslog), levels, and the typed events that post-mortems hinge on:
NCCL_TIMEOUT, NCCL_WATCHDOG, NCCL_DUMP_SIGNAL, NCCL_DESYNC, COLLECTIVE_MISMATCH, NCCL_ERROR,
BARRIER_TIMEOUT, CUDA_OOM, CUDA_ERROR, GPU_XID, TRACEBACK (+ TRACEBACK_CONT), CHILD_FAILED,
PROCESS_KILLED, JOB_CANCELLED, TRAIN_STEP, EVAL, TRAIN_SUMMARY, GPU_MEMORY, STEP_TIMERS. Every
other non-blank line is kept as event LOG. Must not write files, guess a rank, or drop a line:
every physical line is exactly one event or one reject (blank lines and binary garbage, see
forensics/ingest/binary.py, are rejected). The forms it reads are listed, with their upstream
sources and samples, in forensics/ingest/templates.py.

What collectors put in front of a line is consumed first: Kubernetes CRI (`<ts> stderr F`),
Docker json-file (`{"log": ..}` per line, unwrapped in `_unwrap_docker`), syslog and journald
headers (short, short-precise, short-iso, short-iso-precise; they give the host), and a
shipper's ISO timestamp / Python logging `- LEVEL -` when a routing prefix follows, or the later
line of a launcher's block (consumed with one separator, so the block's indentation is kept).
Launcher blocks (rendezvous result, launch configs, ChildFailedError table) are tracked per node
(host): another node's lines and workers' own lines (a rank or local-rank prefix) between a
block's lines neither continue nor end it.

Rank attribution, first match wins (rank_source in parentheses):
- `[rank3]:` (PyTorch >= 2.3 prefixes every line of a failing rank with its GLOBAL rank),
  `[3]:` (torchrun with log_line_prefix_template "[${rank}]:") and mpirun --tag-output
  `[1,3]<stderr>:`                                                           -> rank 3 (prefix)
- `[Rank 3]` / `[PG ID 0 PG GUID 0(default_pg) Rank 3]` inside the text (c10d, DeepSpeed
  log_dist, Megatron memory report)                                         -> rank 3 (prefix);
  for a PG other than the default one that number is the rank inside the group: it goes to
  extra.pg_rank, not to rank (the PG goes to process_group and extra.pg).
- srun --label `03: ` (only in a file where most lines carry it): the task id is the rank
  (prefix), unless the tasks are launchers (their lines carry torchrun prefixes): then it is
  extra.srun_task, a node.
- `[default3]:` / `[trainer3]:` torchrun --tee: the number is the LOCAL rank (local_rank always
  set). ctx.gpu_map[(host, 3)] wins when given (gpu_map); else what the log printed for this
  node maps it (mapped, extra.mapped_by says what): torchrun's "Rendezvous complete"
  local_ranks/global_ranks, a single-node launch config, DeepSpeed's global_rank_mapping, a line
  carrying both `[default3]:` and `[rank11]:`, the agent's ChildFailedError record "rank 11
  (local_rank: 3)" (these two also map the earlier lines of the same block); else rank stays
  null: never local = global by assumption.
- `host:pid:tid [3] NCCL INFO`: the number is NCCL's cudaDev, a device index: local_rank 3 and
  host; rank only through ctx.gpu_map or the printed topology.
- `hostname: ` (pdsh, DeepSpeed multi-node) and Ray's `(RayTrainWorker pid=.., ip=..)` give host
  (and extra.pid); they never give a rank.
- nothing: rank = ctx.rank_hint (path) for a per-rank file, else null with rank_source "none"
  (the launcher, or a worker nobody named). Never rank 0 by default.

Lines that name OTHER ranks keep them in extra: missing_ranks (monitoredBarrier, desync report),
passed_ranks, named_ranks / seq_by_rank (fingerprint mismatch), signal_from (dump signal).

Multi-line Python tracebacks (per prefix stream, so interleaved ranks do not mix) are folded:
the `Traceback (most recent call last):` line becomes one TRACEBACK event whose message is the
exception line and whose extra carries frames, exception and line_count; each later line of the
traceback is its own event TRACEBACK_CONT (extra.head = line of the TRACEBACK) unless it is
itself typed (the exception line of a CUDA OOM is a CUDA_OOM event with extra.traceback).
A traceback still open at the end of a block is carried, with its later lines, into the next
block so its head can be completed (bounded by _MAX_PENDING lines).

glog lines (`E1218 20:27:21.426 ...`) carry no year: it is taken from the nearest full
timestamp in the file (the last one seen, or the first one in the first block); without any,
the timestamp stays null. Naive times are UTC, as everywhere in forensics.

Modules (one per question): parser (the line-by-line state machine; its other methods are mixins
of the modules below), prefixes (who wrote a line), timestamps (when, how severe), hints (the
per-block polars scan), topology (which global rank a local rank is), tracebacks, typed (which
event a line is), collectives, device, exits, progress (the text each kind of event is read
from), row (the row a line becomes), frames (rows -> a Block).
"""
from __future__ import annotations

from typing import BinaryIO, Iterator

from ..formats import ReaderContext
from ..jsonl import Block
from ..sources import iter_chunks
from .frames import _to_block
from .parser import _Parser


def read_console(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    """Console text of one file (or byte range) -> Blocks of events, in line order."""
    parser = _Parser(ctx)
    line = ctx.first_line
    for chunk in iter_chunks(stream, ctx.block_bytes):
        rows = parser.feed(chunk, line, final=False)
        line += chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
        if rows:
            yield _to_block(rows)
    rows = parser._ready(final=True)
    if rows:
        yield _to_block(rows)


read = read_console
