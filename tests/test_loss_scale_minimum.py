"""DeepSpeed's fp16 loss scaler at its minimum (deepspeed/runtime/fp16/loss_scaler.py,
DynamicLossScaler.update_scale): `raise Exception("Current loss scale already at minimum - cannot
decrease scale anymore. Exiting run.")`. The overflow flag is all-reduced, so every rank raises it
at once: a non_finite fault, job-wide when every rank's line is in the logs, else the rank whose
line it is. The "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: X, reducing to
Y" lines before it are the scaler at work: never errors nor the culprit.

Lines are ours, in those formats, behind torchrun's `[rankN]:` prefix.
"""
from __future__ import annotations

from pathlib import Path

from test_failures_console import diagnosed, progress, unexplained_errors

SCALER = "/opt/ds/deepspeed/runtime/fp16/loss_scaler.py"


def raised(r: int) -> list[str]:
    return [f"[rank{r}]: Traceback (most recent call last):",
            f'[rank{r}]:   File "/srv/job/main.py", line 90, in <module>',
            f"[rank{r}]:     engine.step()",
            f'[rank{r}]:   File "{SCALER}", line 183, in update_scale',
            f"[rank{r}]:     raise Exception(",
            f"[rank{r}]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."]


def run(raising: list[int], world: int = 4) -> list[str]:
    lines = progress(list(range(world)), step=40, t="10:00:00")
    for s, (a, b) in enumerate([(4, 2), (2, 1), (1, 1)]):
        lines.append(f"[rank0]:[2024-12-18 10:00:0{s + 1},000] [WARNING] [loss_scaler.py:190:update_scale] "
                     f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}")
    for r in raising:
        lines += raised(r)
    return lines


def test_one_ranks_raise_keeps_its_rank(tmp_path: Path) -> None:
    rep = diagnosed(tmp_path, run([2]))
    assert (rep.root_cause.kind, rep.root_cause.ranks, rep.root_cause.basis) == ("non_finite", [2], "own_error")
    assert unexplained_errors(rep) == []


def test_the_first_of_some_ranks_is_named(tmp_path: Path) -> None:
    rep = diagnosed(tmp_path, run([3, 1]))
    assert (rep.root_cause.kind, rep.root_cause.ranks) == ("non_finite", [3])


def test_every_rank_raising_names_nobody(tmp_path: Path) -> None:
    rep = diagnosed(tmp_path, run([0, 1, 2, 3]))
    assert (rep.root_cause.kind, rep.root_cause.ranks) == ("non_finite", [])
    assert rep.findings[0].evidence["job_wide"] is True


def test_overflow_skips_alone_are_the_scaler_at_work(tmp_path: Path) -> None:
    rep = diagnosed(tmp_path, run([]) + progress([0, 1, 2, 3], step=41, t="10:00:09"))
    assert rep.root_cause is None
    assert not any(f.severity == "ERROR" for f in rep.findings)
