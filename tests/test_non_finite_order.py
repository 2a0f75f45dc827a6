"""Which rank showed a NaN first when no line carries a step or a time (passes/non_finite.py):
the record's own progress counter (HF Trainer's fractional `epoch`), else file order within one
file; never the order of file names (a `torchrun --log-dir` tree's local-rank folders sort local
rank 0 first whatever happened), and when nothing orders them, every rank that showed one.

Lines are ours: HF Trainer's printed log dict (transformers trainer.py Trainer.log: the logs dict
with "epoch" = state.epoch), tagged by the script with its global rank; the --log-dir layout
<dir>/<run_id>/attempt_<n>/<local rank>/stdout.log (torch/distributed/elastic/multiprocessing/api.py).
"""
from __future__ import annotations

from pathlib import Path

from forensics.passes import diagnose


def record(rank: int, loss: str, epoch: float | None) -> str:
    e = f", 'epoch': {epoch:.2f}" if epoch is not None else ""
    return f"[Rank {rank}] {{'loss': {loss}, 'grad_norm': 0.97, 'learning_rate': 0.0002{e}}}"


def logdir_run(root: Path, first: int, nodes: int = 3, nproc: int = 2, with_epoch: bool = True) -> list[str]:
    """Every rank logs 12 records; `first` turns NaN one record before the others."""
    for n in range(nodes):
        for lo in range(nproc):
            g = n * nproc + lo
            d = root / f"node-{n}" / "logs" / "5150_run" / "attempt_0" / str(lo)
            d.mkdir(parents=True)
            turn = 9 if g == first else 10
            lines = [record(g, "nan" if i >= turn else f"{2.4 - 0.05 * i:.4f}", (i + 1) / 40 if with_epoch else None)
                     for i in range(12)]
            (d / "stdout.log").write_text("\n".join(lines) + "\n")
    return [str(root)]


def nf_finding(rep):
    return next(f for f in rep.findings if f.kind == "non_finite")


def test_the_epoch_a_record_carries_orders_ranks_across_log_dir_files(tmp_path: Path) -> None:
    # global rank 3 is node-1's local rank 1: its folder sorts after local rank 0's everywhere
    rep = diagnose(logdir_run(tmp_path / "logs", first=3))
    f = nf_finding(rep)
    assert f.ranks == [3] and f.evidence["epoch"] == 0.25 and "at epoch 0.25" in f.title
    assert rep.root_cause is not None and (rep.root_cause.kind, rep.root_cause.ranks) == ("non_finite", [3])


def test_values_nothing_orders_name_every_rank_that_showed_one(tmp_path: Path) -> None:
    # no step, no epoch, no time, other files: which was first the log does not show
    rep = diagnose(logdir_run(tmp_path / "logs", first=4, nodes=2, with_epoch=False))
    f = nf_finding(rep)
    assert f.ranks == [0, 1, 2, 3] and "does not show" in f.title


def test_file_order_in_one_console_is_an_order(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    lines = []
    for i in range(12):
        for g in (0, 1, 2):
            lines.append(record(g, "nan" if i >= (9 if g == 2 else 10) else f"{2.4 - 0.05 * i:.4f}", None))
    (d / "console.log").write_text("\n".join(lines) + "\n")
    f = nf_finding(diagnose([str(d)]))
    assert f.ranks == [2] and "does not show" not in f.title
