"""Two or more ranks that fail of their own error before any sign of the first failure's cascade
are all culprits (passes/failures/independent.py); a rank that failed after a victim message, a
kill or a cancel, or whose order against them cannot be known, is not named.

Lines are ours, in the formats upstream writes: torchrun's `[rankN]:` prefix
(torch/distributed/elastic/multiprocessing: the local_ranks_filter/tee prefix), glog's
"Sending process N closing signal SIGTERM" (torch/distributed/elastic/multiprocessing/api.py),
Slurm's `srun --label` "N: " prefix and "srun: error: host: task N: Exited with exit code C"
(src/srun/launch.c), Python tracebacks, CUDA OOM (c10/cuda/CUDACachingAllocator.cpp).
"""
from __future__ import annotations

from pathlib import Path

from test_failures_console import GLOO_LOST, NCCL_LOST, OOM, diagnosed, expand, progress


def tb(r: int, exc: str, frame: str = '  File "/srv/app/train.py", line 141, in train_step') -> list[str]:
    return [f"[rank{r}]: Traceback (most recent call last):", f"[rank{r}]: {frame}", f"[rank{r}]:     step(batch)",
            f"[rank{r}]: {exc}"]


def sigterm(pids: list[int], t: str = "20:31:02") -> list[str]:
    return [f"W1218 {t}.{500 + i}000 140233 torch/distributed/elastic/multiprocessing/api.py:897] "
            f"Sending process {pid} closing signal SIGTERM" for i, pid in enumerate(pids)]


def test_two_ranks_with_their_own_exceptions_before_the_cascade_are_both_named(tmp_path: Path) -> None:
    lines = progress(list(range(12)), t="20:30:40")
    lines += tb(5, "ValueError: could not convert string to float: 'n/a'")
    lines += tb(9, "KeyError: 'attention_mask'", '  File "/srv/app/data.py", line 77, in collate')
    lines += sigterm([7100 + r for r in range(12) if r not in (5, 9)])
    report = diagnosed(tmp_path, lines)
    rc = report.root_cause
    assert (rc.kind, rc.ranks, rc.basis) == ("crash", [5, 9], "own_error")
    root = report.findings[0]
    assert [x["rank"] for x in root.evidence["independent"]] == [9]
    assert "KeyError" in root.title and "ValueError" in root.title
    cited = {e.line for e in root.lines}
    assert lines.index("[rank9]: KeyError: 'attention_mask'") + 1 in cited or \
        lines.index("[rank9]: Traceback (most recent call last):") + 1 in cited


def test_an_oom_and_another_ranks_exception_before_the_cascade_name_both(tmp_path: Path) -> None:
    lines = progress(list(range(6)), t="20:30:40") + expand(OOM, r=4)
    lines += tb(1, "RuntimeError: shape '[8, -1, 64]' is invalid for input of size 1000")
    lines += sigterm([7100, 7102, 7103, 7105])
    rc = diagnosed(tmp_path, lines).root_cause
    assert rc.kind == "oom" and rc.ranks == [1, 4]


def test_a_second_rank_that_lost_its_peer_is_a_victim_not_a_culprit(tmp_path: Path) -> None:
    # its error is what the first death looks like from there (families of role victim)
    for i, victim in enumerate((NCCL_LOST, GLOO_LOST)):
        lines = progress(list(range(8)), t="20:30:40")
        lines += tb(3, "ValueError: could not convert string to float: 'n/a'") + expand(victim, r=6)
        lines += sigterm([7100 + r for r in range(8) if r not in (3, 6)])
        d = tmp_path / str(i)
        d.mkdir()
        report = diagnosed(d, lines)
        assert (report.root_cause.kind, report.root_cause.ranks) == ("crash", [3])
        assert "independent" not in report.findings[0].evidence


def test_an_own_error_after_a_peers_victim_message_is_not_named(tmp_path: Path) -> None:
    # the cascade had begun (rank 2 lost its peer) before rank 7 raised: it may be its consequence
    lines = progress(list(range(8)), t="20:30:40")
    lines += tb(3, "ValueError: could not convert string to float: 'n/a'") + expand(GLOO_LOST, r=2)
    lines += tb(7, "KeyError: 'attention_mask'")
    lines += sigterm([7100 + r for r in range(8) if r not in (3, 7)])
    rc = diagnosed(tmp_path, lines).root_cause
    assert (rc.kind, rc.ranks) == ("crash", [3])


def test_an_own_error_after_the_launchers_kill_is_not_named(tmp_path: Path) -> None:
    lines = progress(list(range(4)), t="20:30:40")
    lines += tb(0, "ValueError: could not convert string to float: 'n/a'")
    lines += sigterm([7101, 7102, 7103])
    lines += tb(2, "OSError: [Errno 5] Input/output error")
    rc = diagnosed(tmp_path, lines).root_cause
    assert (rc.kind, rc.ranks) == ("crash", [0])


def _srun(rank: int, text: str) -> str:
    return f"{rank:02d}: {text}"


def test_srun_labelled_ranks_in_two_files_name_both_only_when_the_order_is_known(tmp_path: Path) -> None:
    # two nodes' outputs; node B's traceback has a timestamped line after it (its latest possible
    # time is known, before the scheduler's kill) in one case and none in the other
    def node(ranks: list[int], t: str) -> list[str]:
        return [_srun(r, f"2025-03-02 08:14:{t},100 - INFO - trainer - step=300 loss=2.20") for r in ranks]

    def tb_srun(r: int, exc: str) -> list[str]:
        return [_srun(r, "Traceback (most recent call last):"), _srun(r, '  File "/srv/train.py", line 90, in <module>'),
                _srun(r, "    main()"), _srun(r, exc)]

    a = node([0, 1, 2, 3], "09") + tb_srun(1, "ZeroDivisionError: division by zero")
    a += ["srun: error: gpu-a: task 1: Exited with exit code 1",
          "slurmstepd: error: *** STEP 9090.0 ON gpu-a CANCELLED AT 2025-03-02T08:14:30 ***"]
    b = node([4, 5, 6, 7], "10") + tb_srun(6, "FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-17'")
    for case, b_lines, named in (("known", b + node([4, 5, 7], "12"), [1, 6]), ("unknown", b, [1])):
        (tmp_path / case).mkdir()
        report = diagnosed(tmp_path / case, a, name="node-a.out", extra={"node-b.out": "\n".join(b_lines) + "\n"})
        assert report.root_cause.ranks == named, case
