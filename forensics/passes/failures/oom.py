"""A CUDA OOM's details: what it tried to allocate, and who else held memory on its GPU.
"""
from __future__ import annotations

import re
from typing import Any

import orjson

from ...report.fmt import memory


_TRIED = re.compile(r"(?i)Tried to allocate ([\d.]+ ?[KMGT]i?B)")


_IN_USE = re.compile(r"(?i)this process has ([\d.]+ ?[KMGT]i?B) memory in use")


def _oom_detail(msg: str | None) -> str:
    msg = msg or ""
    bits = []
    if m := _TRIED.search(msg):
        bits.append(f"tried to allocate {m.group(1)}")
    if m := _IN_USE.search(msg):
        bits.append(f"{m.group(1)} in use")
    return f" ({', '.join(bits)})" if bits else ""


def _shared_gpu(rows: list[dict[str, Any]], own_pids: set[int]) -> dict[str, Any] | None:
    """Who else holds memory on the GPU of an OOM, from the allocator's message.

    Fact (c10/cuda/CUDACachingAllocator.cpp, reportProcessMemoryInfo): the message lists every
    process NVML sees on the device, the failing one included; it is written "Including non-PyTorch
    memory, this process has X memory in use" only when NVML's pid equals the process's getpid(),
    else "Process N has X memory in use". In a container (its own pid namespace) the two differ,
    so the failing process itself appears as "Process N". Hence: "Process N" lines are OTHER
    processes only when the message also has the "this process" line, or when the failing
    process's pid is known from the logs (`own_pids`: the launcher's record of that rank) and
    excluded. Otherwise sharing is unknown and not claimed.

    Returns, for the OOM that saw the most memory held by others (or the first one), the listed
    processes, the failing pid if known, and `shared_gpu`: True / False / None (unknown)."""
    best: dict[str, Any] | None = None
    for r in rows:
        if not r.get("extra"):
            continue
        try:
            x = orjson.loads(r["extra"])
        except orjson.JSONDecodeError:
            continue
        listed = [o for o in x.get("other_processes") or [] if isinstance(o, dict) and o.get("mb") is not None]
        this_mb = x.get("process_mb")
        if not listed and this_mb is None:
            continue
        mine = [o for o in listed if o.get("pid") in own_pids]
        known = this_mb is not None or bool(mine)
        others = [o for o in listed if o not in mine] if known else []
        held = float(sum(o["mb"] for o in others))
        d = {"shared_gpu": bool(others) if known else None,
             "other_processes": len(others) if known else None,
             "other_processes_mb": round(held, 1) if known else None,
             "listed_processes": [{"pid": o.get("pid"), "mb": o["mb"]} for o in listed],
             "failing_pid": mine[0].get("pid") if mine else None,
             "failing_process_identified": known,
             "gpu_total_mb": x.get("total_mb"), "device": x.get("device"),
             "process_mb": this_mb if this_mb is not None else (mine[0]["mb"] if mine else None)}
        if best is None or (known and (best["other_processes_mb"] or 0) < held):
            best = d
    return best


def _shared_phrase(shared: dict[str, Any] | None) -> str:
    if not shared:
        return ""
    gpu = f"GPU {shared['device']}" if shared["device"] is not None else "its GPU"
    listed = shared["listed_processes"]
    if shared["shared_gpu"]:
        n = shared["other_processes"]
        total = f" of {memory(shared['gpu_total_mb'])}" if shared["gpu_total_mb"] else ""
        return (f"; {gpu} is shared: {n} other process{'es' if n != 1 else ''} "
                f"hold{'s' if n == 1 else ''} {memory(shared['other_processes_mb'])}{total}")
    if shared["shared_gpu"] is None and listed:
        pids = ", ".join(f"pid {o['pid']} {memory(o['mb'])}" for o in listed[:4])
        if len(listed) == 1:
            return (f"; the allocator lists one process on {gpu} ({pids}): most likely the failing process "
                    f"itself (its own pid is not in the log), not another job")
        return (f"; the allocator lists {len(listed)} processes on {gpu} ({pids}); the failing process's own pid "
                f"is not in the log, so whether another job shared the GPU is not known")
    return ""
