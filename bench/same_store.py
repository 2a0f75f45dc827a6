"""Do two stores of the same logs hold the same thing? (an ingest change must not change the store)

    python bench/same_store.py STORE_A STORE_B     # exit 1 and the differing items if not

Compared, with the names that differ between any two ingests (uuid part names, `written`, the
summaries' part-list key) taken out:
- the manifest, its parts put in (kind, rank range, time range, rows) order (it lists them as their
  units finished) and each named by its place there; the table of sources' row count;
- every events / rejects / kernels part: its rows in order, its schema (with metadata), its rows per
  row group;
- the sources (sources.parquet sorted by path, or the manifest's list), part lists renamed the same way;
- every summary (summaries/*.parquet and folders of them, summaries/parts/*: each part's partials).
A summary or partial table holding the same rows in another order is said so, not counted as a
difference: two ingests of one tree differ so (polars' group_by order), as ea5eafb's own runs do;
nor are the same rows in the same order in other chunks or dictionaries (a summary file's row groups),
and a summary's Parquet partial cut into other row groups (said so, with their count).
"""
from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq


def _parquet(path: Path) -> tuple[pa.Table, list[int], pa.Schema]:
    f = pq.ParquetFile(path)
    return f.read(), [f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)], f.schema_arrow


def load(root: Path) -> dict[str, Any]:
    m = json.loads((root / "manifest.json").read_text())
    m["parts"].sort(key=lambda p: (p["kind"], str(p.get("rank_min")), str(p.get("rank_max")), str(p.get("ts_min")), p["rows"]))
    names = {p["path"]: f"P{i}:{p['kind']}" for i, p in enumerate(m["parts"])}

    def renamed(text: str) -> str:
        return re.sub(r"(?:events|rejects|kernels)/part-[0-9a-f]{32}\.parquet", lambda x: names.get(x.group(0), "?" + x.group(0)), text)

    out: dict[str, Any] = {}
    mm = {k: v for k, v in m.items() if k not in ("written", "sources")}
    if "sources_table" in mm:   # its size varies with the uuids it holds (zstd)
        mm["sources_table"] = {k: v for k, v in mm["sources_table"].items() if k not in ("path", "bytes")}
    out["manifest"] = renamed(json.dumps(mm, sort_keys=True, indent=0))
    for p in m["parts"]:
        out["part " + names[p["path"]]] = _parquet(root / p["path"])
    if "sources_table" in m:
        src = pq.read_table(root / m["sources_table"]["path"])
        out["sources schema"] = str(src.schema)
        rows = src.sort_by("path").to_pylist()
    else:
        rows = sorted(m["sources"], key=lambda r: r["path"])
    out["sources"] = renamed(json.dumps(rows, sort_keys=True, default=str, indent=0))
    by_stem = {Path(p).stem: name for p, name in names.items()}
    summaries = root / "summaries"
    if summaries.exists():
        for f in sorted(summaries.glob("*.parquet")):
            out["summary " + re.sub(r"-[0-9a-f]{20}\.parquet$", "", f.name)] = pq.read_table(f)
        for d in sorted(x for x in summaries.iterdir() if x.is_dir() and x.name != "parts"):
            for f in sorted(d.glob("*.parquet")):
                out[f"summary {re.sub(r'-[0-9a-f]{20}$', '', d.name)}/{f.name}"] = pq.read_table(f)
        for f in sorted((summaries / "parts").glob("*")):
            stem, rest = f.name.split(".", 1)
            if rest.endswith(".arrow"):
                with ipc.open_file(f) as r:
                    t: Any = r.read_all()
            else:
                t = _parquet(f)
            out[f"partial {by_stem.get(stem, '?' + stem)}.{rest}"] = t
    return out


def same(key: str, x: Any, y: Any) -> bool:
    if isinstance(x, tuple):
        if x[0].equals(y[0]) and x[1] == y[1] and x[2].equals(y[2], check_metadata=True):
            return True
        if key.startswith("partial") and x[2].equals(y[2], check_metadata=True) and x[0].to_pylist() == y[0].to_pylist():
            # a summary's file, not a part (where row groups decide what a rank filter reads)
            print(f"same rows in the same order, other row groups ({len(x[1])} vs {len(y[1])}):", key)
            return True
        return False
    if isinstance(x, pa.Table):
        if x.equals(y):
            return True
        if x.schema.equals(y.schema) and x.to_pylist() == y.to_pylist():
            # e.g. a dictionary column read from other row groups: other dictionaries, the same values
            print("same rows in the same order, other chunks or dictionaries:", key)
            return True
        if x.schema.equals(y.schema) and sorted(map(repr, x.to_pylist())) == sorted(map(repr, y.to_pylist())):
            print("same rows, another order:", key)
            return True
        return False
    if x != y:
        print("\n".join(list(difflib.unified_diff(x.splitlines(), y.splitlines(), lineterm=""))[:30]))
    return x == y


def main() -> None:
    a, b = load(Path(sys.argv[1])), load(Path(sys.argv[2]))
    bad = sorted(a.keys() ^ b.keys())
    if bad:
        print("in one store only:", bad)
    for k in sorted(a.keys() & b.keys()):
        if not same(k, a[k], b[k]):
            print("DIFFERENT:", k)
            bad.append(k)
    print(f"{len(a.keys() | b.keys())} items compared:", f"{len(bad)} differ" if bad else "identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
