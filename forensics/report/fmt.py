"""Small formatting helpers shared by the report renderers and by finding titles.

Owns how a rank list, a number, a duration and a timestamp are written for a human. Must not
decide anything about a run; pure functions of their arguments.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

DASH = "–"


def ranks_text(ranks: list[int] | tuple[int, ...], dash: str = DASH) -> str:
    """[0, 1, 2, 4, 5, 6, 7] -> '0–2,4–7' (the seed's way of naming a cascade's ranks)."""
    rs = sorted(set(ranks))
    if not rs:
        return "none"
    out: list[str] = []
    start = prev = rs[0]
    for r in [*rs[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}{dash}{prev}")
        if r is not None:
            start = prev = r
    return ",".join(out)


def rank_phrase(ranks: list[int] | tuple[int, ...]) -> str:
    """'rank 3' or 'ranks 0–2,4–7'."""
    return f"rank {ranks[0]}" if len(set(ranks)) == 1 else f"ranks {ranks_text(ranks)}"


def num(v: Any) -> str:
    """A measured value, short: 92, 0.45, 1.2e-06, 12,345."""
    if v is None:
        return "?"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10_000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}" if v.is_integer() else f"{v:.1f}"
    if a >= 0.01:
        return f"{v:.3g}"
    return f"{v:.2g}"


def duration(seconds: float | None) -> str:
    """0.004 -> '4 ms', 0.4 -> '0.4 s', 12.3 -> '12.3 s', 425 -> '7m05s', 3720 -> '1h02m'."""
    if seconds is None:
        return "?"
    s = float(seconds)
    if s < 0.1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s" if not s.is_integer() else f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def iso(ts: datetime | None) -> str | None:
    """UTC timestamp as ISO-8601 with milliseconds and Z, the report's one time format."""
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock(ts: str | None) -> str:
    """'2025-06-12T14:03:21.123Z' -> '14:03:21.123' (the day is in the report header)."""
    if not ts:
        return "?"
    m = re.match(r"^\d{4}-\d{2}-\d{2}[T ](\d{2}:\d{2}:\d{2})(\.\d{1,3})?", ts)
    return m.group(1) + (m.group(2) or "") if m else ts


def cited_clock(ts: str | None, aligned: str | None) -> str:
    """A cited line's own time, and its time on the common clock beside it when they differ."""
    own = clock(ts)
    return f"{own} (aligned {clock(aligned)})" if aligned and clock(aligned) != own else own


def is_iso(v: object) -> bool:
    return isinstance(v, str) and re.match(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}", v) is not None


def seconds_between(a: str | None, b: str | None) -> float | None:
    """b - a in seconds for two ISO timestamps, None when either is missing."""
    if not a or not b:
        return None
    try:
        ta = datetime.fromisoformat(a.replace("Z", "+00:00"))
        tb = datetime.fromisoformat(b.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (tb - ta).total_seconds()


def gpu_hours(h: float) -> str:
    """410.2 -> '410', 4.13 -> '4.1', 0.0231 -> '0.023' (an estimate: two significant digits)."""
    if h >= 100:
        return f"{h:,.0f}"
    return f"{h:.2g}" if h > 0 else "0"


def cost_text(cost: dict[str, Any] | None, short: bool = False) -> str:
    """A finding's cost (passes/cost.py) for a human: 'cost 23% of wall time (41.0 s), ~0.09
    GPU-hours'; short: 'cost 23% · 41.0 s · ~0.09 GPU-h'. '' when there is none."""
    if not cost or cost.get("seconds") is None:
        return ""
    sec = duration(cost["seconds"]) if cost["seconds"] >= 0.1 else f"{cost['seconds']:.2f} s"
    share = cost.get("share")
    gh = gpu_hours(float(cost.get("gpu_hours") or 0.0))
    if short:
        return f"cost {share:.0%} · {sec} · ~{gh} GPU-h" if share is not None else f"cost {sec} · ~{gh} GPU-h"
    pct = f"{share:.0%} of wall time ({sec})" if share is not None else sec
    return f"cost {pct}, ~{gh} GPU-hours"


# How a finding's kind reads in a sentence ("explained by rank 3 CUDA OOM 0.4 s earlier").
KIND_LABELS = {
    "thermal_throttling": "thermal throttling", "low_bandwidth": "low link bandwidth",
    "gpu_underutilized": "low GPU utilisation", "oom": "CUDA OOM", "data_load_skew": "slow data loading",
    "straggler": "straggler", "gradient_skew": "gradient skew", "comm_bound": "communication-bound steps",
    "nccl_timeout": "NCCL timeout", "hang": "hang", "rank_lag": "rank lag", "loss_divergence": "loss divergence",
    "loss_plateau": "loss plateau", "grad_norm_spike": "grad-norm spike", "vanishing_grad": "vanishing gradients",
    "clock_skew": "clock skew", "log_hygiene": "log hygiene",
    "crash": "crash", "host_oom": "host out of memory", "collective_mismatch": "collective mismatch",
    "job_cancelled": "job cancelled", "gpu_error": "GPU error",
}


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind.replace("_", " "))


def memory(mb: float) -> str:
    """A memory size given in MiB, as an allocator or nvidia-smi would say it: '19.9 GiB', '512 MiB'."""
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 rank', '3 ranks', '1,024 host tracks': the number and its noun in agreement."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
