"""The ledger (ingest/ledger.py): the sources read now held as columns, not a dict per file.

It must account as the dicts did: the same fields from the same piece results, the same table of
sources, and a store whose every rejected line is kept with its file, line and reason, the
counts adding up per file and in total, whether the sources are inlined or a table.
"""
from __future__ import annotations

import gzip
import importlib
import json
import random
from pathlib import Path

import polars as pl
import pytest

import forensics
from forensics import store as store_mod
from forensics.ingest.ledger import Ledger
from forensics.ingest.sources import FileInfo
from forensics.ingest.unit import PieceResult
from forensics.store import open_store, read_sources_rows, source_columns, sources_table

ing = importlib.import_module("forensics.ingest")
TAIL = "truncated line (no newline at end of file)"


def _dict_source(info: FileInfo, fmt: str, rank_hint, host_hint) -> dict:
    """A source as ingest planned it before the ledger (a dict per file)."""
    return {
        "path": info.path, "size": info.size, "mtime": info.mtime, "fingerprint": info.fingerprint,
        "head_hash": info.head_hash, "compression": info.compression, "format": fmt,
        "rank_hint": rank_hint, "host_hint": host_hint,
        "lines_read": 0, "events": 0, "rejected": 0, "rejected_by_reason": {},
        "ranks": [], "hosts": [], "rank_sources": {}, "start": None, "end": None,
        "event_parts": [], "reject_parts": [], "complete_end": 0, "complete_lines": 0,
        "bytes_read": 0, "read_complete": True,
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_ledger_holds_what_the_dicts_held(seed: int) -> None:
    """Random piece results (several pieces per file, rejects of several reasons, ranks, hosts,
    problems, incomplete reads) merged into dicts by ingest._merge and into a ledger: the same
    sources, the same table of sources."""
    rnd = random.Random(seed)
    ledger, dicts = Ledger(), []
    for i in range(40):
        info = FileInfo(f"/logs/node{i % 3}/rank_{i}.jsonl", rnd.randint(1, 9999), 1.5 * i, f"fp{i}", f"hh{i}",
                        rnd.choice(["none", "gzip"]), )
        fmt, rh, hh = rnd.choice(["jsonl", "console", "empty"]), rnd.choice([None, i]), rnd.choice([None, f"node{i % 3}"])
        ledger.add(info, fmt, rh, hh)
        d = _dict_source(info, fmt, rh, hh)
        dicts.append(d)
        for k in range(rnd.randint(0, 3)):
            r = PieceResult(info.path, k * 100, k * 100 + rnd.randint(0, 100), lines=rnd.randint(0, 50),
                            events=rnd.randint(0, 40), rejected=rnd.randint(0, 5),
                            rejected_by_reason={rnd.choice(["blank line", "truncated JSON object"]): rnd.randint(1, 3)}
                            if rnd.random() < 0.5 else {},
                            ranks=sorted(rnd.sample(range(8), rnd.randint(0, 3))),
                            hosts=sorted(rnd.sample(["a", "b", "c"], rnd.randint(0, 2))),
                            rank_sources={"record": rnd.randint(1, 9)} if rnd.random() < 0.7 else {},
                            start_ts=f"2025-06-12T14:00:{rnd.randint(10, 59)}+00:00" if rnd.random() < 0.8 else None,
                            end_ts=f"2025-06-12T15:00:{rnd.randint(10, 59)}+00:00" if rnd.random() < 0.8 else None,
                            wrote_events=rnd.random() < 0.8, wrote_rejects=rnd.random() < 0.4,
                            problem="gzip stream truncated" if rnd.random() < 0.1 else None,
                            complete=rnd.random() < 0.9)
            ev, rj = f"events/part-{k}.parquet", f"rejects/part-{k}.parquet"
            ing._merge(d, r, ev, rj)
            ledger.merge(info.path, r, ev, rj)
        if rnd.random() < 0.1:
            ledger.add_kernel_part(info.path, "kernels/k.parquet")
            d.setdefault("kernel_parts", []).append("kernels/k.parquet")
    assert list(ledger.sources()) == dicts
    order = sorted(range(len(dicts)), key=lambda i: dicts[i]["path"])
    by_path = sorted(dicts, key=lambda s: s["path"])
    assert sources_table(ledger.columns(order)).equals(sources_table(source_columns(by_path)))
    assert read_sources_rows(sources_table(ledger.columns(order))) == read_sources_rows(sources_table(source_columns(by_path)))
    assert [(p, list(r), list(e)) for p, r, e in ledger.runs_view()] == \
        [(d["path"], d["ranks"], d["event_parts"]) for d in dicts if d["event_parts"]]


def _logs(d: Path, n: int) -> None:
    """n small files in per-host folders: some with bad lines (truncated JSON, binary), one
    ending in half a line (no final newline: rank_7), one gzip, one empty."""
    for i in range(n):
        sub = d / f"node{i // 4}"
        sub.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"timestamp": f"2025-06-12T14:00:{s:02d}.{i:03d}Z", "rank": i, "host": f"node{i // 4}",
                             "level": "INFO", "event": "TRAIN_STEP", "message": f"step={s}",
                             "extra": {"step": s}}).encode() for s in range(i % 3 + 1)]
        if i % 3 == 0:
            lines.insert(1, b'{"timestamp": "2025-06-12T14:00:00Z", "rank": 1, "ev')
        if i % 5 == 0:
            lines.append(b"\x00\x01\x02 not json")
        data = b"\n".join(lines) + b"\n" + (b'{"timestamp": "2025-06-12T14:00:59Z", "rank": 7, "ev' if i == 7 else b"")
        if i == 9:
            (sub / f"rank_{i}.jsonl.gz").write_bytes(gzip.compress(data))
        else:
            (sub / f"rank_{i}.jsonl").write_bytes(data)
    (d / "empty.jsonl").write_bytes(b"")


def _accounted(st: Path) -> list[dict]:
    """The store's sources, after checking every count against the rows of its parts."""
    run = open_store(st)
    rj = run.rejects().select("source_file", "line", "reason").collect()
    ev = dict(run.events().group_by("source_file").len().collect().iter_rows())
    assert rj.filter(pl.col("source_file").is_null() | pl.col("line").is_null() | pl.col("reason").is_null()).height == 0
    for s in run.sources:
        mine = rj.filter(pl.col("source_file") == s["path"])
        assert mine.height == s["rejected"], s["path"]
        assert dict(mine.group_by("reason").len().iter_rows()) == s["rejected_by_reason"], s["path"]
        assert ev.get(s["path"], 0) == s["events"] and s["lines_read"] == s["events"] + s["rejected"], s["path"]
    for s in run.sources:   # where an --append reads on: past the last complete line
        cut = s["format"] != "empty" and s["compression"] == "none"
        assert s["complete_lines"] == (s["lines_read"] - bool(s["rejected_by_reason"].get(TAIL)) if cut else 0), s["path"]
    t = run.totals
    assert t["rejected"] == rj.height == sum(s["rejected"] for s in run.sources) > 0
    assert t["events"] == sum(ev.values()) and t["files"] == len(run.sources)
    return run.sources


def test_a_store_of_the_ledger_s_table_accounts_for_every_line_as_the_inline_one(tmp_path: Path, monkeypatch) -> None:
    _logs(tmp_path / "logs", 30)
    inline = forensics.ingest([str(tmp_path / "logs")], tmp_path / "a")
    assert "sources" in json.loads((tmp_path / "a" / "manifest.json").read_text())
    monkeypatch.setattr(store_mod, "SOURCES_INLINE", 5)
    table = forensics.ingest([str(tmp_path / "logs")], tmp_path / "b")
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["sources_table"]["rows"] == 31
    a, b = _accounted(tmp_path / "a"), _accounted(tmp_path / "b")
    drop = ("event_parts", "reject_parts", "mtime", "kernel_parts")   # part names are new uuids
    assert [{k: v for k, v in s.items() if k not in drop} for s in a] == \
        [{k: v for k, v in s.items() if k not in drop} for s in b]
    for x in (inline, table):
        x.seconds = 0
    assert {**inline.to_dict(), "store": ""} == {**table.to_dict(), "store": ""}
    # the same again: every file unchanged (fingerprints read back from the table), nothing read
    again = forensics.ingest([str(tmp_path / "logs")], tmp_path / "b")
    assert again.unchanged_files == 31 and again.bytes_read == 0 and again.rejected == table.rejected
    _accounted(tmp_path / "b")
    assert sum(bool(s["rejected_by_reason"].get(TAIL)) for s in b) == 1
    # rank_7's half line completed, and a new file: the grown file read on from its last complete
    # line (its truncated-tail reject dropped), beside the files read whole
    seven = tmp_path / "logs" / "node1" / "rank_7.jsonl"
    seven.write_bytes(seven.read_bytes() + b'ent": "TRAIN_STEP", "message": "step=9", "extra": {"step": 9}}\n')
    (tmp_path / "logs" / "node9").mkdir()
    (tmp_path / "logs" / "node9" / "rank_99.jsonl").write_bytes(
        b'{"timestamp": "2025-06-12T14:00:01Z", "rank": 99, "event": "TRAIN_STEP", "extra": {"step": 1}}\n{"rank": 99, "ev\n')
    grown = forensics.ingest([str(tmp_path / "logs")], tmp_path / "b", append=True)
    assert grown.appended_files == 1 and grown.new_files == 1 and grown.files == 32
    after = {Path(s["path"]).name: s for s in _accounted(tmp_path / "b")}
    before = {Path(s["path"]).name: s for s in b}
    assert after["rank_7.jsonl"]["events"] == before["rank_7.jsonl"]["events"] + 1
    assert after["rank_7.jsonl"]["rejected"] == before["rank_7.jsonl"]["rejected"] - 1
    assert after["rank_99.jsonl"]["rejected"] == 1 and grown.rejected == table.rejected
