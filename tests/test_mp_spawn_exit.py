"""torch.multiprocessing.spawn's parent names the process that ended: ProcessContext.join raises
ProcessExitedException("process %d terminated with signal %s" % (error_index, name)) or
"process %d terminated with exit code %d" (torch/multiprocessing/spawn.py; a plain Exception with
the same text before 1.8). error_index is the spawned function's first argument: the rank on one
node (the local rank where each node runs its own mp.spawn: see the multi-node tests below). The
line is read as that process's death with its signal or code.

Every line here is ours, in that format.
"""
from __future__ import annotations

import io
import json

import polars as pl
import pytest

from forensics.ingest.console import read_console
from forensics.ingest.formats import ReaderContext


def _spawn_tb(tail: str) -> str:
    return "\n".join([
        "epoch 3 iter 400 loss 0.412",
        "Traceback (most recent call last):",
        '  File "/srv/proj/train_ddp.py", line 88, in <module>',
        "    mp.spawn(worker, nprocs=4, args=(cfg,))",
        '  File "/usr/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 241, in spawn',
        "    return start_processes(fn, args, nprocs, join, daemon, start_method='spawn')",
        '  File "/usr/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 170, in join',
        "    raise ProcessExitedException(",
        tail,
    ]) + "\n"


def _events(text: str) -> pl.DataFrame:
    blocks = list(read_console("c.log", io.BytesIO(text.encode()), ReaderContext("c.log", None, None)))
    return pl.concat([b.events for b in blocks], how="diagonal_relaxed")


@pytest.mark.parametrize("tail,rank,code,sig", [
    ("torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL", 2, -9, "SIGKILL"),
    ("Exception: process 3 terminated with signal SIGSEGV", 3, -11, "SIGSEGV"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 7", 1, 7, None),
])
def test_the_spawned_process_is_the_rank_that_ended(tail, rank, code, sig):
    ev = _events(_spawn_tb(tail)).filter(pl.col("event") == "CHILD_FAILED")
    assert ev.height == 1
    row = ev.row(0, named=True)
    x = json.loads(row["extra"])
    assert (row["rank"], row["exit_code"], x.get("signal"), x.get("by")) == (rank, code, sig, "mp.spawn")


def _diagnose(tmp_path, text: str) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "train.log").write_text(text)
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


@pytest.mark.parametrize("tail,kind,rank", [
    ("torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL", "host_oom", 2),
    ("Exception: process 3 terminated with signal SIGSEGV", "crash", 3),
])
def test_diagnosis_names_the_spawned_rank(tmp_path, tail, kind, rank):
    rc = _diagnose(tmp_path, _spawn_tb(tail))["root_cause"]
    assert (rc["kind"], rc["ranks"]) == (kind, [rank])


def _raised(n: int, exc: str) -> str:
    # ProcessRaisedException(msg): msg = "\n\n-- Process %d terminated with the following error:\n" + the child's traceback
    return "\n".join([
        "Traceback (most recent call last):",
        '  File "/srv/proj/train_ddp.py", line 88, in <module>',
        "    mp.spawn(worker, nprocs=4, args=(cfg,))",
        '  File "/usr/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 158, in join',
        "    raise ProcessRaisedException(msg, error_index, failed_process.pid)",
        "torch.multiprocessing.spawn.ProcessRaisedException: ",
        "",
        f"-- Process {n} terminated with the following error:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 69, in _wrap',
        "    fn(i, *args)",
        '  File "/srv/proj/train_ddp.py", line 51, in worker',
        "    batch = next(it)",
        exc,
    ]) + "\n"


def test_the_traceback_after_process_n_terminated_is_rank_ns():
    ev = _events(_raised(3, "KeyError: 'labels'"))
    tbs = ev.filter(pl.col("event") == "TRACEBACK").sort("line")
    assert tbs["rank"].to_list() == [None, 3]          # the parent's own traceback names nobody
    assert tbs.row(1, named=True)["message"] == "KeyError: 'labels'"


@pytest.mark.parametrize("exc,kind", [("KeyError: 'labels'", "crash"),
                                      ("RuntimeError: CUDA error: an illegal memory access was encountered", "gpu_error")])
def test_diagnosis_names_the_process_that_raised(tmp_path, exc, kind):
    rc = _diagnose(tmp_path, _raised(2, exc))["root_cause"]
    assert (rc["kind"], rc["ranks"]) == (kind, [2])


# A multi-node mp.spawn job runs one mp.spawn per node: the index is the node's local rank, its
# rank node_rank * nprocs + index (failure_facts.spawn_node). Guarded by what the log shows of a
# second node; on one node (or node rank 0, or a world size of nprocs) the index stays the rank.
@pytest.mark.parametrize("head,ranks,local", [
    ("launching: nnodes=2 node_rank=1 nprocs=4 world_size=8", [6], None),    # both stated: 1*4 + 2
    ("launching: node_rank=0 nprocs=4 world_size=8", [2], None),             # node 0: 0*4 + 2
    ("launching: world_size=8 nprocs=4", [], 2),                              # a second node, no node rank
    ("launching: world_size=4 nprocs=4", [2], None),                          # one node
    ("launching: nprocs=4", [2], None),
])
def test_the_spawned_index_is_a_local_rank_on_a_multi_node_job(tmp_path, head, ranks, local):
    rep = _diagnose(tmp_path, head + "\n" + _spawn_tb(
        "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL"))
    rc = rep["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("host_oom", ranks)
    assert [x["local_rank"] for x in rc.get("local_ranks") or []] == ([local] if local is not None else [])


def test_the_raised_process_on_a_second_host_is_a_local_rank(tmp_path):
    # two hosts in the log (NCCL's `host:pid:tid [dev]` lines), no node rank: process 2 of gpu-b3's
    # mp.spawn is local rank 2 there, not rank 2
    (tmp_path / "a.log").write_text("gpu-a1:5101:5101 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n")
    text = "gpu-b3:5201:5201 [2] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n" + _raised(2, "KeyError: 'labels'")
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("crash", [])
    assert rc["local_ranks"] == [{"host": "gpu-b3", "local_rank": 2}]


def test_the_finding_says_how_the_spawned_index_became_the_rank(tmp_path):
    rep = _diagnose(tmp_path, "launching: nnodes=2 node_rank=1 nprocs=4\n" + _spawn_tb(
        "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL"))
    f = next(f for f in rep["findings"] if f["kind"] == "host_oom")
    rec = f["evidence"]["launcher_record"]
    assert (f["ranks"], rec["rank"], rec["local_rank"]) == ([6], 6, 2) and "node rank 1" in rec["how"]
