"""bench/same_store.py (is an ingest change's store the same?): a summary's partial cut into other
row groups, or a summary read in other chunks, is the same; a part cut into other row groups is not
(its row groups decide what a rank filter reads)."""
from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import same_store  # noqa: E402


def _written(tmp_path: Path, name: str, t: pa.Table, rows: int) -> tuple[pa.Table, list[int], pa.Schema]:
    pq.write_table(t, tmp_path / name, row_group_size=rows)
    return same_store._parquet(tmp_path / name)


def test_other_row_groups_are_the_same_summary_partial_but_not_the_same_part(tmp_path: Path) -> None:
    t = pa.table({"rank": list(range(10)), "file": pa.array([f"f{i % 3}" for i in range(10)]).dictionary_encode()})
    a, b = _written(tmp_path, "a.parquet", t, 4), _written(tmp_path, "b.parquet", t, 10)
    assert a[1] != b[1]
    assert same_store.same("partial P0:events.steps.parquet", a, b)
    assert not same_store.same("part P0:events", a, b)
    # the rows of a summary read from files of other row groups: other chunks and dictionaries
    assert not a[0].equals(b[0]) or a[0]["file"].num_chunks != b[0]["file"].num_chunks
    assert same_store.same("summary steps/000000.parquet", a[0], b[0])
    # ... but not other values
    c = _written(tmp_path, "c.parquet", t.set_column(0, "rank", pa.array(list(range(1, 11)))), 10)
    assert not same_store.same("partial P0:events.steps.parquet", a, c)
    assert not same_store.same("summary steps/000000.parquet", a[0], c[0])
