"""The device's own failures: CUDA OOM (with what the allocator lists), CUDA errors, Xid.
"""
from __future__ import annotations

import re


_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")


_MEM = r"(?<![\d.])([\d.]++) ?([KMGT]i?B|bytes)"


_OOM_FIELDS: list[tuple[str, re.Pattern[str]]] = [
    ("tried_mb", re.compile(r"Tried to allocate " + _MEM)),
    ("total_mb", re.compile(r"total capacity of " + _MEM)),
    ("total_mb", re.compile(_MEM + r" total capacity")),
    ("free_mb", re.compile(r"of which " + _MEM + r" is free")),
    ("free_mb", re.compile(_MEM + r" free\b")),
    ("allocated_mb", re.compile(_MEM + r" is allocated by PyTorch")),
    ("allocated_mb", re.compile(_MEM + r" already allocated")),
    ("reserved_unallocated_mb", re.compile(_MEM + r" is reserved by PyTorch but unallocated")),
    ("reserved_mb", re.compile(_MEM + r" reserved in total by PyTorch")),
    ("process_mb", re.compile(r"this process has " + _MEM + r" memory in use")),
]


_OOM_OTHERS = re.compile(r"Process (\d+) has " + _MEM + r" memory in use")


_OOM_DEVICE = re.compile(r"\bGPU (\d+)\b")


_CUDA_ERROR = re.compile(r"CUDA error: ([^\n.]+)")


_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)(?:, (.*))?")


def _mb(value: str, unit: str) -> float | None:
    try:
        v = float(value)
    except ValueError:
        return None
    u = unit.upper()
    if u == "BYTES":
        return v / (1024 * 1024)
    scale = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}.get(u[:1])
    return v * scale if scale is not None else None
