"""Trace files read in worker processes (traces/pool.py) give the same answers as one after
another: `trace-stats` and the ingest of a trace folder, on the shared DLRM traces; and the
worker count follows cores, files and the memory budget."""
from __future__ import annotations

import os

import polars as pl
import pytest

from forensics.traces import pool as tpool
from forensics.traces.stats import trace_stats

from conftest import SHARED

DLRM = SHARED / "realdata" / "kineto" / "dlrm_8rank"


class _Spy:
    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.real = tpool.pool

    def __call__(self, n: int):
        self.sizes.append(n)
        return self.real(n)


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_trace_stats_same_in_workers_as_one_after_another(monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(tpool, "pool", spy)
    serial = trace_stats([str(DLRM)], jobs=1).to_dict()
    assert spy.sizes == []
    parallel = trace_stats([str(DLRM)], jobs=2).to_dict()
    assert spy.sizes == [2]            # the pool was used, with two workers
    assert parallel == serial
    assert len(parallel["traces"]) == 8 and parallel["straggler"] == serial["straggler"]


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_ingest_of_traces_same_in_workers_as_inline(tmp_path, monkeypatch):
    import forensics.ingest as ing
    from forensics.run import open_run

    spy = _Spy()
    monkeypatch.setattr(tpool, "pool", spy)
    # the DLRM traces are small: without these, one unit inline would read them all
    monkeypatch.setattr(ing, "INLINE_BYTES", 0)
    monkeypatch.setattr(ing, "BATCH_BYTES", 1)
    a = ing.ingest([str(DLRM)], str(tmp_path / "one"), workers=1)
    assert spy.sizes == []
    b = ing.ingest([str(DLRM)], str(tmp_path / "two"), workers=2)
    assert spy.sizes == [2]
    assert (a.events, a.rejected, a.lines_read) == (b.events, b.rejected, b.lines_read)
    ra, rb = open_run([str(tmp_path / "one")]), open_run([str(tmp_path / "two")])
    order = ["source_file", "line"]
    assert ra.kernels().collect().sort(order).equals(rb.kernels().collect().sort(order))
    assert ra.kernels().select(pl.len()).collect().item() == 2244
    assert ra.events().collect().sort(order).equals(rb.events().collect().sort(order))


def test_worker_count_follows_cores_files_and_memory(tmp_path, monkeypatch):
    files = []
    for i in range(4):
        p = tmp_path / f"rank{i}.json"
        with open(p, "wb") as f:      # sparse: 1 GB listed, nothing written
            f.truncate(1_000_000_000)
        files.append(p)
    one = tpool.estimated_mb(files[0])
    assert one == pytest.approx(tpool.BASE_MB + tpool.PER_BYTE * 1000)
    assert tpool.workers_for(files, jobs=4, budget_mb=10 * one) == 4
    assert tpool.workers_for(files, jobs=4, budget_mb=2.5 * one) == 2
    assert tpool.workers_for(files, jobs=4, budget_mb=one / 2) == 1     # one always runs
    assert tpool.workers_for(files, jobs=3, budget_mb=10 * one) == 3
    assert tpool.workers_for(files[:2], jobs=8, budget_mb=10 * one) == 2
    monkeypatch.setenv(tpool.ENV_BUDGET, str(int(2.5 * one)))
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert tpool.workers_for(files) == 2
    gz = tmp_path / "rank9.json.gz"
    gz.write_bytes(b"x" * 1000)
    assert tpool.estimated_mb(gz) == pytest.approx(tpool.BASE_MB + tpool.PER_BYTE * 1000 * tpool.GZIP_RATIO / 1e6)
    small = tmp_path / "small.json"
    small.write_bytes(b"{}")
    assert tpool.workers_for([small, small]) == 1          # too little to pay for the imports


def _pid() -> int:
    return os.getpid()


def test_each_worker_reads_one_trace_then_exits():
    # a fresh process per task: what a worker's allocator held goes back with it
    with tpool.pool(1) as ex:
        a = ex.submit(_pid).result()
        b = ex.submit(_pid).result()
    assert a != b and os.getpid() not in (a, b)


_ORPHAN = """
import os, sys, time
from forensics.traces import pool as tpool

def task(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)

if __name__ == "__main__":
    ex = tpool.pool(1)
    ex.submit(task, sys.argv[1])
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to see processes")
def test_workers_die_with_their_parent(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN)
    pidfile = tmp_path / "worker.pid"
    parent = subprocess.Popen([sys.executable, str(script), str(pidfile)])
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        worker = int(pidfile.read_text())
        assert _alive(worker)
        parent.send_signal(signal.SIGKILL)      # no clean-up in the parent: the worker must go by itself
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker)
    finally:
        parent.kill()


def test_default_budget_keeps_the_tree_under_the_cap(tmp_path, monkeypatch):
    files = []
    for i in range(8):
        p = tmp_path / f"rank{i}.json"
        with open(p, "wb") as f:      # sparse: 1 GB listed
            f.truncate(1_000_000_000)
        files.append(p)
    monkeypatch.delenv(tpool.ENV_BUDGET, raising=False)
    monkeypatch.setattr(tpool, "available_mb", lambda: 1e6)   # a big machine: the cap decides
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    n = tpool.workers_for(files)
    assert 1 <= n < 8
    assert tpool.MAIN_MB + n * tpool.estimated_mb(files[0]) <= tpool.DEFAULT_CAP_MB
    assert tpool.MAIN_MB + (n + 1) * tpool.estimated_mb(files[0]) > tpool.DEFAULT_CAP_MB
    monkeypatch.setenv(tpool.ENV_BUDGET, "100000")              # the user raises it
    assert tpool.workers_for(files) == 8
    # the ingest's workers hold more per trace: fewer of them
    assert tpool.workers_for(files, per_byte=tpool.INGEST_PER_BYTE, budget_mb=1200) <= n


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_big_traces_read_in_a_worker_even_one_at_a_time(monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(tpool, "pool", spy)
    here = trace_stats([str(DLRM)], jobs=1).to_dict()
    assert spy.sizes == []
    monkeypatch.setattr(tpool, "POOL_MIN_MB", 0)     # as if the DLRM traces were big
    assert trace_stats([str(DLRM)], jobs=1).to_dict() == here
    assert spy.sizes == [1]
