"""Which typed event a console line is: the checks in order (collectives, memory, device,
processes, training progress), first match wins.
"""
from __future__ import annotations

from typing import Any

from ..templates import DESYNC_SEQ, DESYNC_TIMEOUT_AT, desync_ranks
from .collectives import (
    _ASYNC_EXC, _DUMP_SIGNAL, _NCCL_ABORTED, _NCCL_ERROR_IN, _NCCL_ERROR_NAME, _TIMEOUT_AT, _WATCHDOG_AT,
    _WATCHDOG_FAIL, _WORK,
)
from .device import _CUDA_ERROR, _OOM, _OOM_DEVICE, _OOM_FIELDS, _OOM_OTHERS, _XID, _mb
from .progress import (
    _DS_STEP, _DS_THROUGHPUT, _FREE_LOSS, _FREE_LR, _FREE_MS, _FREE_STEP, _HF_DICT, _ITERATION_N, _MEGATRON_ITER,
    _MEGATRON_MEM, _MEGATRON_MEM_ALL, _MEGATRON_VAL, _TIMERS, _hf_dict, _megatron_fields,
)
from .row import _Row, _int, _num


class _Typed:
    """The parser's typing of a line: the ordered checks, first match wins."""

    # -- typed events ---------------------------------------------------------------------------
    def _typed(self, body: str, r: _Row) -> None:
        if ("monitoredBarrier" in body or "store based barrier" in body or "processed ranks" in body) and self._barrier(body, r):
            return
        if ("missing ranks" in body or "Stalled ranks" in body) and self._horovod_stall(body, r):
            return
        # NCCL / c10d
        m = _WORK.search(body) if "WorkNCCL" in body else None
        if m and ("timeout" in body or "timing out" in body or "timed out" in body):
            r.event, r.level = "NCCL_TIMEOUT", "ERROR"
            timeout_ms = _int(m.group(5))
            ran_ms = _int(m.group(6))
            r.put(seq=int(m.group(1)), collective=m.group(2),
                  timeout_s=timeout_ms / 1000 if timeout_ms is not None else None,
                  duration_s=ran_ms / 1000 if ran_ms is not None else None)
            r.x(numel_in=_int(m.group(3)), numel_out=_int(m.group(4)), ran_for_ms=ran_ms)
            return
        a = _ASYNC_EXC.search(body) if m and "async exception" in body else None
        if m and a:
            r.event, r.level = "NCCL_ERROR", "ERROR"
            r.put(seq=int(m.group(1)), collective=m.group(2))
            r.x(nccl_error=a.group(1).strip()[:500], numel_in=_int(m.group(3)))
            return
        m = _WATCHDOG_AT.search(body) if "detected by watchdog at work" in body else None
        if m:
            error = m.group(1).startswith("NCCL error")
            r.event, r.level = ("NCCL_ERROR" if error else "NCCL_WATCHDOG"), "ERROR"
            r.put(seq=int(m.group(2)))
            r.x(last_enqueued=_int(m.group(3)), last_completed=_int(m.group(4)),
                cause="error" if error else ("timeout" if m.group(1).startswith("Work timeout") else None))
            return
        m = (_WATCHDOG_FAIL.search(body) if "work sequence id" in body else None) or (_TIMEOUT_AT.search(body) if "Timeout at NCCL work" in body else None)
        if m:
            r.event, r.level = "NCCL_WATCHDOG", "ERROR"
            r.put(seq=int(m.group(1)))
            r.x(last_enqueued=_int(m.group(2)), last_completed=_int(m.group(3)))
            return
        m = _DUMP_SIGNAL.search(body) if "dump signal" in body else None
        if m:
            r.event = "NCCL_DUMP_SIGNAL"
            own = m.group(1) == "this local rank"
            r.x(signal_from="self" if own else _int(m.group(2)),
                last_enqueued=_int(m.group(3)), last_completed=_int(m.group(4)))
            return
        culprits = (desync_ranks(body) if "lagging" in body or "] joined" in body or "] finished" in body
                    or "didn't join" in body else None)
        if culprits:
            r.event, r.level = "NCCL_DESYNC", "ERROR"
            sm = DESYNC_SEQ.search(body)
            r.put(seq=int(sm.group(1)) if sm else None)
            # TraceUtils' report names these as the lagging / dead / mismatched ranks
            r.x(culprit_ranks=culprits, missing_ranks=culprits)
            if len(culprits) == 1:
                r.put(peer_rank=culprits[0])
            return
        m = DESYNC_TIMEOUT_AT.search(body) if "Timeout at collective" in body else None
        if m:
            r.event, r.level = "NCCL_DESYNC", "ERROR"
            r.put(seq=int(m.group(3)), collective=m.group(2).strip())
            r.x(report="timeout_at", reporting_rank=int(m.group(1)))
            return
        if "CollectiveFingerPrint" in body or "mismatch between collectives" in body:
            self._fingerprint(body, r)
            return
        # memory
        if ("memory" in body or "Memory" in body) and _OOM.search(body):
            r.event, r.level = "CUDA_OOM", "ERROR"
            nums: dict[str, Any] = {}
            for name, pat in _OOM_FIELDS:
                if name not in nums:
                    om = pat.search(body)
                    if om:
                        nums[name] = _mb(om.group(1), om.group(2))
            others = [{"pid": int(p), "mb": _mb(v, u)} for p, v, u in _OOM_OTHERS.findall(body)]
            dm = _OOM_DEVICE.search(body)
            r.put(mem_alloc_mb=nums.get("allocated_mb"))
            r.x(**nums, other_processes=others or None, device=int(dm.group(1)) if dm else None)
            return
        m = _XID.search(body) if "Xid" in body else None
        if m:
            r.event, r.level = "GPU_XID", "ERROR"
            r.x(pci=m.group(1), xid=int(m.group(2)), detail=m.group(3))
            return
        if self._nccl_notice(body, r):
            return
        if "NCCL" in body or "nccl" in body:
            m = _NCCL_ERROR_IN.search(body) if "NCCL error in" in body else None
            n = _NCCL_ERROR_NAME.search(body) if "Error" in body or "Invalid" in body else None
            a = _NCCL_ABORTED.search(body) if "was aborted" in body else None
            if m or n or a:
                r.event, r.level = "NCCL_ERROR", "ERROR"
                r.x(nccl_error=n.group(1) if n else (m.group(2) if m else None),
                    where=m.group(1) if m else None, nccl_version=m.group(3) if m else None,
                    aborted_rank=int(a.group(1)) if a else None)
                return
        m = _CUDA_ERROR.search(body) if "CUDA error" in body else None
        if m:
            r.event, r.level = "CUDA_ERROR", "ERROR"
            r.x(cuda_error=m.group(1).strip())
            return
        # processes
        if self._killed(body, r):
            return
        # training progress
        if "iteration" in body:
            m = _MEGATRON_ITER.search(body)
            if m:
                r.event = "TRAIN_STEP"
                r.put(step=int(m.group(1)))
                r.x(train_iters=int(m.group(2)))
                _megatron_fields(m.group(3), r)
                return
            m = _MEGATRON_VAL.search(body)
            if m:
                r.event = "EVAL"
                im = _ITERATION_N.search(m.group(1))
                r.put(step=int(im.group(1)) if im else None)
                _megatron_fields(m.group(2), r)
                return
            m = _MEGATRON_MEM.search(body)
            if m:
                r.event = "GPU_MEMORY"
                r.put(step=int(m.group(1)), mem_alloc_mb=float(m.group(2)))
                r.x(max_allocated_mb=float(m.group(3)),
                    reserved_mb=float(m.group(4)) if m.group(4) else None,
                    max_reserved_mb=float(m.group(5)) if m.group(5) else None)
                # Ranks print concurrently: a second report can land on the same physical line.
                more = [
                    {"rank": int(mm.group(1)), "step": int(mm.group(2)), "allocated_mb": float(mm.group(3)),
                     "max_allocated_mb": float(mm.group(4))}
                    for mm in _MEGATRON_MEM_ALL.finditer(body, m.end())
                ]
                if more:
                    r.x(interleaved=more)
                return
        m = _TIMERS.search(body) if "time (ms)" in body else None
        if m:
            timers = {}
            for part in m.group(1).split("|"):
                k, _, v = part.partition(":")
                val = _num(v)
                if k.strip() and val is not None:
                    timers[k.strip()] = val
            if timers:
                r.event = "STEP_TIMERS"
                r.x(timers_ms=timers)
                return
        m = _DS_THROUGHPUT.search(body) if "global_step=" in body else None
        if m:
            r.event = "TRAIN_STEP"
            r.put(step=int(m.group(3)), samples_per_s=float(m.group(5)), epoch=float(m.group(1)),
                  mem_alloc_mb=float(m.group(6)) * 1024 if m.group(6) else None)
            r.x(micro_step=int(m.group(2)), running_avg_samples_per_s=float(m.group(4)),
                max_mem_allocated_mb=float(m.group(7)) * 1024 if m.group(7) else None)
            return
        m = _DS_STEP.search(body) if "step=" in body else None
        if m:
            r.event = "TRAIN_STEP"
            lrs = [v for v in (_num(t) for t in m.group(3).split(",")) if v is not None]
            r.put(step=int(m.group(1)), lr=lrs[0] if lrs else None)
            r.x(skipped=int(m.group(2)), lrs=lrs if len(lrs) > 1 else None)
            return
        m = _HF_DICT.search(body) if body.rstrip().endswith("}") else None
        if m:
            _hf_dict(m.group(1), r)
            return
        m = _FREE_STEP.search(body) if "tep" in body else None
        lm = _FREE_LOSS.search(body, m.end()) if m else None
        if m and lm:
            r.event = "TRAIN_STEP"
            lr, ms = _FREE_LR.search(body, m.end()), _FREE_MS.search(body, m.end())
            r.put(step=int(m.group(1)), loss=_num(lm.group(1)), lr=_num(lr.group(1)) if lr else None,
                  step_time_ms=_num(ms.group(1)) if ms else None)
            return
