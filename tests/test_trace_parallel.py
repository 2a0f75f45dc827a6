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
