"""Collective failures in the text of c10d / ProcessGroupNCCL / NCCL: watchdog timeouts, dump
signals, desync reports, fingerprint mismatches, monitoredBarrier and store-barrier timeouts,
NCCL errors and notices.
"""
from __future__ import annotations

import re

from ..templates import FINGERPRINT, RUNNING_COLLECTIVE, fingerprint, fingerprint_diff, mismatch_pairs
from .row import _Row, _int, _ranks


_WORK = re.compile(
    r"WorkNCCL\(SeqNum=(\d+),\s*OpType=(\w+)(?:,\s*NumelIn=(-?\d+))?(?:,\s*NumelOut=(-?\d+))?"
    r"(?:,\s*Timeout\(ms\)=(\d+))?\)(?:\s*ran for (\d+) milliseconds)?"
)


_WATCHDOG_FAIL = re.compile(
    r"failure detected by watchdog at work sequence id: (\d+)"
    r"(?:.*?last enqueued work: (-?\d+),\s*last completed work: (-?\d+))?"
)


_TIMEOUT_AT = re.compile(
    r"Timeout at NCCL work: (\d+), last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)"
)


# ProcessGroupNCCL (torch >= 2.3) on every rank once one rank's watchdog fires: "Received a dump
# signal due to a collective timeout from rank 0 ... Last enqueued NCCL work: 40, last completed
# NCCL work: 40." The numbers are THIS rank's: a rank whose last enqueued work is below the
# sequence number the others time out on never issued that collective (it lags).
# "last enqueued NCCL work: 40, last completed NCCL work: 39" (the backend name varies: NCCL, Gloo)
_LAST_WORK = r"[Ll]ast enqueued (?:\w+ )?work: (-?\d+), last completed (?:\w+ )?work: (-?\d+)"


_DUMP_SIGNAL = re.compile(
    r"Received a (?:global )?dump signal (?:due to a collective timeout )?from\s+(this local rank|rank\s*(\d+))"
    r"(?:.*?" + _LAST_WORK + ")?"
)


# ProcessGroupNCCL watchdog (torch >= 2.3 / >= 2.6 wordings)
_WATCHDOG_AT = re.compile(
    r"(Exception \(either an error or timeout\)|NCCL error is|Work timeout is) detected by watchdog at work: (\d+)"
    r"(?:, " + _LAST_WORK + ")?"
)


_WORK_STATUS = re.compile(r"Work update periodically: " + _LAST_WORK)


_ASYNC_EXC = re.compile(r"raised the following async exception: (.*)")


_WATCHDOG_STUCK = re.compile(r"watchdog got stuck for (\d+) seconds")


_FR_DUMP = re.compile(r"(?:dumping nccl trace to|Finished writing NCCLPG debug info to) (\S+)")


_NCCL_COMM = re.compile(
    r"comm (0x[0-9a-fA-F]+) rank (\d+) nr?[Rr]anks (\d+)(?: nNodes (\d+) localRanks (\d+) localRank (\d+))?"
)


# monitoredBarrier (ProcessGroupGloo / ProcessGroupWrapper), store-based barrier (distributed_c10d)
_MB_FAILED = re.compile(r"Ranks? (\d+(?:, \d+)*) failed to pass monitoredBarrier in (\d+) ms")


_MB_TIMED_OUT = re.compile(
    r"Rank (\d+) timed out in monitoredBarrier after (\d+) ms\.?(?:\s*Successfully processed ranks: ([\d,\s]+))?"
)


_MB_PROCESSED = re.compile(r"^\s*(?:Successfully processed ranks: ([\d,\s]+)|No ranks successfully processed in monitoredBarrier)")


_MB_REACHED = re.compile(r"Rank (\d+) successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank (\d+)")


_STORE_BARRIER = re.compile(
    r"Timed out initializing process group in store based barrier on rank:? (\d+), for key: (\S+) "
    r"\(world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+), timeout=([\d:.]+)\)"
)


_NCCL_ERROR_IN = re.compile(r"NCCL error in: ([^,]+), (.+?)(?:, NCCL version ([\d.]+))?$")


_NCCL_ERROR_NAME = re.compile(r"\b(nccl(?:UnhandledCuda|System|Internal|Remote)Error|ncclInvalid(?:Argument|Usage))\b")


_NCCL_ABORTED = re.compile(r"NCCL communicator was aborted on rank (\d+)")


# Horovod's stall inspector (horovod/common/stall_inspector.cc, CheckForStalledTensors): a
# warning that tensors wait for the remainder of ranks, then "Stalled ranks:" and one line per
# rank that has not submitted them: "%d: [%s, ...]", "%d!: [...]" when it is past the shutdown
# time. Before it (horovod/common/operations.cc, 0.1x): "Stalled ops:" and, per tensor,
# "<tensor> [missing ranks: 1, 2]".
_HVD_MISSING = re.compile(r"(?<!\S)(\S+) \[missing ranks: ([\d, ]+)\]")
_HVD_STALLED_RANK = re.compile(r"(\d{1,6})(!?): \[([^\]]*)\]?")


class _Collectives:
    """The parser's reading of collective failures: fingerprint mismatches, barriers, NCCL notices."""

    def _fingerprint(self, body: str, r: _Row) -> None:
        """TORCH_DISTRIBUTED_DEBUG=DETAIL (ProcessGroupWrapper.cpp): a rank's own fingerprint
        ("Running collective: ..", INFO), the mismatch error naming this rank's and a peer's
        fingerprints (COLLECTIVE_MISMATCH: seq, op, shape, dtypes of each, and what differs), and
        a monitored barrier that failed before the check (BARRIER_TIMEOUT: the collective is kept,
        the missing ranks come on the next line)."""
        pairs = mismatch_pairs(body) if "is running collective" in body else []
        if pairs:
            own, fp, peer, pfp = pairs[0]
            r.event, r.level = "COLLECTIVE_MISMATCH", "ERROR"
            if r.rank is None or r.rank_source == "path":
                r.rank, r.rank_source = own, "record"
            r.put(seq=fp.get("seq"), collective=fp.get("op"), peer_rank=peer)
            seqs = {str(own): fp.get("seq"), str(peer): pfp.get("seq")}
            r.x(peer_seq=pfp.get("seq"), peer_collective=pfp.get("op"), named_ranks=[own, peer],
                seq_by_rank={k: v for k, v in seqs.items() if v is not None} or None,
                fingerprint=fp or None, peer_fingerprint=pfp or None, differ=fingerprint_diff(fp, pfp) or None)
            return
        m = RUNNING_COLLECTIVE.search(body)
        fm = m or FINGERPRINT.search(body)
        fp = fingerprint(fm.group(0)) if fm else {}
        r.put(seq=fp.get("seq"), collective=fp.get("op"))
        r.x(fingerprint=fp or None)
        if m:
            r.event = "LOG"             # every rank logs its own fingerprint before each collective
        elif "Monitored Barrier encountered error" in body:
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            r.x(barrier="monitored_barrier")
        else:
            r.event, r.level = "COLLECTIVE_MISMATCH", "ERROR"

    def _horovod_stall(self, body: str, r: _Row) -> bool:
        """Horovod's stall warning: the tensor and the ranks that did not submit it
        (COLLECTIVE_STALL, WARN: a slow rank can catch up; extra.missing_ranks names them, which
        the failures pass reads when a collective of the run does fail)."""
        m = _HVD_MISSING.search(body) if "missing ranks" in body else None
        if m:
            r.event, r.level = "COLLECTIVE_STALL", "WARN"
            r.x(barrier="horovod_stall", missing_ranks=_ranks(m.group(2)), tensor=m.group(1).removeprefix("ops:")[-200:])
            return True
        if body.strip() == "Stalled ranks:":
            self.hvd_stall[(r.rank, r.host)] = r.line     # the rank lines follow, one per missing rank
            r.event, r.level = "LOG", "WARN"
            return True
        return False

    def _horovod_stalled_rank(self, body: str, r: _Row) -> bool:
        """A line of the "Stalled ranks:" list its writer opened: that rank has not submitted the
        tensors named (`!`: stalled past the shutdown time)."""
        key = (r.rank, r.host)
        if key not in self.hvd_stall:
            return False
        m = _HVD_STALLED_RANK.fullmatch(body.strip())
        if not m:
            del self.hvd_stall[key]
            return False
        # past the shutdown time ("!") Horovod shuts the job down: that rank's absence is fatal
        r.event, r.level = ("BARRIER_TIMEOUT", "ERROR") if m.group(2) else ("COLLECTIVE_STALL", "WARN")
        r.message = body
        r.x(barrier="horovod_stall", missing_ranks=[int(m.group(1))], shutdown=True if m.group(2) else None,
            tensor=m.group(3).split(",")[0].strip()[:200] or None, head=self.hvd_stall[key])
        return True

    def _barrier(self, body: str, r: _Row) -> bool:
        """monitoredBarrier and store-based barrier timeouts: BARRIER_TIMEOUT, naming the ranks
        that did not arrive when the text names them (extra.missing_ranks)."""
        m = _MB_FAILED.search(body)
        if m:
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            r.put(timeout_s=int(m.group(2)) / 1000)
            r.x(barrier="monitored_barrier", missing_ranks=_ranks(m.group(1)))
            return True
        m = _MB_TIMED_OUT.search(body)
        if m:
            # rank 0 ran out of time before it reached the next rank: the ranks after the
            # processed ones were never checked, so none of them is named
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            r.put(timeout_s=int(m.group(2)) / 1000)
            r.x(barrier="monitored_barrier", passed_ranks=_ranks(m.group(3)) if m.group(3) else None)
            self.last_barrier[self.node_key] = r
            return True
        m = _MB_PROCESSED.search(body)
        if m:
            head = self.last_barrier.pop(self.node_key, None)
            if head is not None and head in self.pending[-3:]:
                head.x(passed_ranks=_ranks(m.group(1)) if m.group(1) else [])
                r.x(head=head.line)
            return False
        m = _MB_REACHED.search(body)
        if m:
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            if r.rank is None or r.rank_source == "path":
                r.rank, r.rank_source = int(m.group(1)), "record"
            r.put(peer_rank=int(m.group(2)))
            r.x(barrier="monitored_barrier", reached=True)
            return True
        m = _STORE_BARRIER.search(body)
        if m:
            r.event, r.level = "BARRIER_TIMEOUT", "ERROR"
            if r.rank is None or r.rank_source == "path":
                r.rank, r.rank_source = int(m.group(1)), "record"
            h, _, rest = m.group(5).partition(":")
            mi, _, sec = rest.partition(":")
            try:
                r.put(timeout_s=int(h) * 3600 + int(mi) * 60 + float(sec))
            except ValueError:
                pass
            world, arrived = int(m.group(3)), int(m.group(4))
            # the store counts arrivals, it does not say who: how many are missing, not which
            r.x(barrier="store_based_barrier", store_key=m.group(2), world_size=world, arrived=arrived,
                missing_count=max(world - arrived, 0))
            return True
        return False

    def _nccl_notice(self, body: str, r: _Row) -> bool:
        """Informational ProcessGroupNCCL / NCCL lines whose numbers matter later: the periodic
        work status, Flight Recorder dump notices, a stuck watchdog, NCCL's communicator init."""
        m = _WORK_STATUS.search(body) if "Work update periodically" in body else None
        if m:
            r.x(last_enqueued=int(m.group(1)), last_completed=int(m.group(2)))
            return True
        m = _FR_DUMP.search(body) if "NCCL" in body else None
        if m:
            r.x(fr_dump=m.group(1).rstrip("."))
            return True
        if "flight recorder dump signal" in body or "flight-recorder dump signal" in body:
            r.x(fr_signal="broadcast" if "Broadcasting" in body else "observed")
            return True
        m = _WATCHDOG_STUCK.search(body) if "got stuck" in body else None
        if m:
            r.x(watchdog_stuck_s=int(m.group(1)))
            return False
        m = _NCCL_COMM.search(body) if "comm 0x" in body else None
        if m:
            rank, nranks = int(m.group(2)), int(m.group(3))
            r.x(nccl_comm=m.group(1), nccl_rank=rank, nccl_nranks=nranks,
                nccl_nnodes=_int(m.group(4)), nccl_local_ranks=_int(m.group(5)))
            pid = r.extra.get("pid") if r.extra else None
            if self.world is not None and nranks == self.world and pid is not None:
                # a communicator over the whole world (the default PG's, or a group of all ranks,
                # whose ranks c10d sorts): its NCCL rank is the global rank of this process
                self.pid_rank[(r.host, pid)] = rank
                if r.rank is None:
                    r.rank, r.rank_source = rank, "mapped"
            return True
        return False
