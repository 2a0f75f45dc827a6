"""Training progress printed by Megatron, DeepSpeed, HF Trainer and free-form scripts:
step, loss, lr, step time, memory, timers.
"""
from __future__ import annotations

import re
from typing import Any

from .row import _Row, _num


_MEGATRON_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")


_MEGATRON_VAL = re.compile(r"validation loss at ([^|]*)\|(.*)")


_ITERATION_N = re.compile(r"iteration (\d+)")


_MEGATRON_MEM = re.compile(
    r"\(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)"
    r"(?: \| reserved: ([\d.]+))?(?: \| max reserved: ([\d.]+))?"
)


_MEGATRON_MEM_ALL = re.compile(
    r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)"
)


_TIMERS = re.compile(r"time \(ms\) \|(.*)")


_DS_STEP = re.compile(r"\bstep=(\d+), skipped=(\d+), lr=\[([^\]]*)\]")


_DS_THROUGHPUT = re.compile(
    r"epoch=(\d+)/micro_step=(\d+)/global_step=(\d+), RunningAvgSamplesPerSec=([\d.eE+-]+), "
    r"CurrSamplesPerSec=([\d.eE+-]+)(?:, MemAllocated=([\d.]+)GB, MaxMemAllocated=([\d.]+)GB)?"
)


_HF_DICT = re.compile(r"\{('[\w/.\-]+': [^{}]*)\}\s*$")


# A training script's own progress line: "step 88 | loss 2.301 | 512.3 ms/step", "Step 88/1000, loss:
# 2.3, lr: 1e-4", key=value logging "step=88 loss=2.301". Both a step number and a loss are required (a line naming only a step is too
# common to mean progress).
_FREE_STEP = re.compile(r"\b[Ss]tep(?:[:\s]\s*|=)(\d+)(?:\s*/\s*\d+)?\b")


_FREE_LOSS = re.compile(r"\b[Ll]oss\s*[:=]?\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf)\b")


_FREE_LR = re.compile(r"\b(?:lr|learning[_ ]rate)\s*[:=]?\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\b")


_FREE_MS = re.compile(r"(?<!\d)(\d++(?:\.\d++)?)\s*+ms\s*+/\s*+(?:step|it(?:er)?)\b")


_HF_PAIR = re.compile(r"'([\w/.\-]+)': ('(?:[^'\\]|\\.)*'|[^,}]+)")


def _megatron_fields(text: str, r: _Row) -> None:
    """`key: value | key: value` pairs of a Megatron log line onto columns / extra."""
    other: dict[str, Any] = {}
    for part in text.split("|"):
        k, sep, v = part.partition(":")
        k = k.strip().lower()
        if not sep or not k:
            continue
        val = _num(v)
        if k == "elapsed time per iteration (ms)":
            r.put(step_time_ms=val)
        elif k == "learning rate":
            r.put(lr=val)
        elif k in ("lm loss", "lm loss value"):
            r.put(loss=val)
        elif k == "grad norm":
            r.put(grad_norm=val)
        elif k == "samples per second":
            r.put(samples_per_s=val)
        elif k in ("tokens per second", "tokens/sec"):
            r.put(tokens_per_s=val)
        elif k.endswith(" loss") and (r.m is None or "loss" not in r.m):
            r.put(loss=val)
            other[k.replace(" ", "_")] = val
        else:
            other[k.replace(" ", "_")] = val if val is not None else v.strip()
    if other:
        r.x(**other)


_HF_COLUMNS = {
    "loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm", "epoch": "epoch",
    "step": "step", "train_samples_per_second": "samples_per_s", "train_loss": "loss",
    "eval_loss": "loss", "eval_samples_per_second": "samples_per_s",
}


def _hf_dict(text: str, r: _Row) -> None:
    """HF Trainer's printed `{'loss': 1.76, 'learning_rate': 0.001, 'epoch': 0.05}`."""
    vals: dict[str, Any] = {}
    for k, v in _HF_PAIR.findall(text):
        v = v.strip()
        num = _num(v)
        vals[k] = num if num is not None else v.strip("'")
    if not vals:
        return
    if any(k.startswith("eval_") for k in vals):
        r.event = "EVAL"
    elif "train_runtime" in vals:
        r.event = "TRAIN_SUMMARY"
    elif "loss" in vals or "learning_rate" in vals:
        r.event = "TRAIN_STEP"
    else:
        return
    other: dict[str, Any] = {}
    for k, v in vals.items():
        col = _HF_COLUMNS.get(k)
        if col is not None and isinstance(v, float):
            if col == "step":
                r.put(step=int(v))
            elif r.m is None or col not in r.m:
                r.put(**{col: v})
        else:
            other[k] = v
    if other:
        r.x(**other)
