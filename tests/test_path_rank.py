"""The rank a file's path names (ingest/sources.py rank_from_path): the file name's, else the
folder's only when the folder's whole name is a rank's. A rank inside a longer folder name is
someone else's name: pytest's tmp_path is the test's name plus a counter (`test_one_rank` ->
`test_one_rank0/`), and a run's folder (`rank0_baseline/`) holds every rank's files.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import forensics
from forensics.ingest.sources import rank_from_path
from forensics.store import open_store
from test_ingest_store import seed_line


@pytest.mark.parametrize("path,rank", [
    ("/runs/job/rank_12.jsonl", 12),
    ("/runs/job/trainer_rank3.log", 3),
    ("/runs/job/rank3/stdout.log", 3),
    ("/runs/job/rank_00012/train.jsonl", 12),
    ("/runs/rank0_baseline/rank_5.jsonl", 5),           # the file name wins over any folder
    ("/runs/rank0_baseline/metrics.jsonl", None),       # a run's folder, shared by every rank's file
    ("/tmp/pytest-of-u/pytest-3/test_one_rank0/train.log", None),   # pytest's tmp dir: a test's name + 0
    ("/runs/job/worker.log", None),
])
def test_rank_from_path(path, rank):
    assert rank_from_path(path) == rank


def test_a_rank_inside_a_folder_name_gives_no_rank(tmp_path: Path) -> None:
    shared = tmp_path / "rank0_baseline"
    own = tmp_path / "rank7"
    for d in (shared, own):
        d.mkdir()
    (shared / "metrics.jsonl").write_bytes(b"".join(seed_line(None, s, s) for s in range(4)))
    (own / "train.jsonl").write_bytes(b"".join(seed_line(None, s, s + 0.5) for s in range(4)))   # not a copy
    forensics.ingest([str(tmp_path)], tmp_path / "st")
    df = open_store(tmp_path / "st").events().collect()
    got = {f.rsplit("/", 2)[-2]: (sorted(set(g["rank"].to_list()), key=str), g["rank_source"].unique().to_list())
           for (f,), g in df.group_by("source_file")}
    assert got == {"rank0_baseline": ([None], ["none"]), "rank7": ([7], ["path"])}
