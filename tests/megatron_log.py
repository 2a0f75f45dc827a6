"""Write Megatron-LM console logs in its own formats, for the compare and reader tests.

Formats from Megatron-LM's source: the arguments line (megatron/training/arguments.py, rank 0:
`using world size: W, data-parallel size: D, ... tensor-model-parallel size: T,
pipeline-model-parallel size: P`), the iteration line (training.py `training_log`, printed once
for the job by the last rank, `print_rank_last`: ` iteration N/ M | consumed samples: ... |
elapsed time per iteration (ms): X | learning rate: ... | global batch size: B | lm loss: ... |`)
and the memory report (training/utils.py `report_memory`, `[Rank r] (after N iterations)
memory (MB) | allocated: ... | max allocated: ... | reserved: ... | max reserved: ...`, printed
where the data-parallel rank is 0). Values are made up; nothing is copied from a real log.
"""
from __future__ import annotations

import math
from pathlib import Path


def write_megatron(path: Path, *, world: int = 8, tp: int = 2, pp: int = 4, dp: int = 1, iters: int = 200,
                   every: int = 10, step_ms: float = 1500.0, gbs: int = 16, reporters: list[int] | None = None,
                   glue: tuple[int, int] | None = None) -> Path:
    """The log of one run; `reporters` the ranks whose memory report is printed (default: every
    data-parallel-rank-0 rank), `glue` two of them printed onto one physical line."""
    if reporters is None:
        reporters = [r for r in range(world) if (r // tp) % dp == 0]
    out = ["using world size: {}, data-parallel size: {}, context-parallel size: 1, tensor-model-parallel size: {}, "
           "pipeline-model-parallel size: {} ".format(world, dp, tp, pp),
           "> building GPT model ...",
           "[before the start of training step] datetime: 2026-11-30 10:00:00 "]
    for it in range(every, iters + 1, every):
        ms = step_ms * (2.0 if it == every else 1.0) * (1 + 0.01 * math.sin(it))
        lr = 1.5e-4 * min(1.0, it / 30)
        loss = f" lm loss: {8.0 + 3.0 * math.exp(-it / 50):.6E} |" if it > every else ""
        out.append(f" iteration {it:8d}/{iters:8d} | consumed samples: {it * gbs:12d} | elapsed time per iteration (ms): "
                   f"{ms:.1f} | learning rate: {lr:.3E} | global batch size: {gbs:5d} |{loss} loss scale: 65536.0 | "
                   f"number of skipped iterations:   0 | number of nan iterations:   0 |")
        if it == 2 * every:
            mem = {r: f"[Rank {r}] (after {it} iterations) memory (MB) | allocated: {1000.0 + r:.1f} | max allocated: "
                      f"{2000.0 + r:.1f} | reserved: 3000.0 | max reserved: 3000.0" for r in reporters}
            if glue is not None:
                a, b = glue
                mem[a] = mem[a] + mem.pop(b)
            out.extend(mem.values())
    path.write_text("\n".join(out) + "\n")
    return path
