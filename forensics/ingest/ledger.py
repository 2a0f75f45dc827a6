"""The accounting of the files one ingest reads, a column per field: the table of sources.

Owns `Ledger`: one row per source file read now (listed by planning, counted as its units
finish), held as columns -- numbers in typed arrays, the list and count fields as tuples shared
by every row that has the same value (a unit's part names, a rank, a host, {"record": 1}) -- and
handed on as the columns of the store's sources table (`store.sources_table`), as the few rows
a check needs, or as the dicts the manifest inlines for a small store. A dict per source (27
fields, their lists and dicts) cost ~2 KB a file: 100,000 one-line files held ~200 MB of them.

The fields, their meaning and the rows handed on are those of a source dict (`store.Run.sources`):
`lines_read`, `events` and `rejected` count the file's lines, events and rejects (every rejected
line itself is in the rejects parts, with its file, line and reason), `rejected_by_reason` splits
`rejected`, and a row's parts name where its rows are. Must not read files nor decide what is read.
"""
from __future__ import annotations

from array import array
from typing import Any, Iterator

# the columns of a source dict, in its key order (problems and kernel_parts: only when set)
FIELDS = ("path", "size", "mtime", "fingerprint", "head_hash", "compression", "format", "rank_hint", "host_hint",
          "lines_read", "events", "rejected", "rejected_by_reason", "ranks", "hosts", "rank_sources", "start", "end",
          "event_parts", "reject_parts", "complete_end", "complete_lines", "bytes_read", "read_complete")
_COUNTS = ("size", "lines_read", "events", "rejected", "complete_end", "complete_lines", "bytes_read")
_SHARED = ("ranks", "hosts", "event_parts", "reject_parts", "rejected_by_reason", "rank_sources")
TRUNCATED_TAIL = "truncated line (no newline at end of file)"


class Ledger:
    """The sources read now, a column per field (see the module docstring)."""

    def __init__(self) -> None:
        self.row: dict[str, int] = {}
        self.path: list[str] = []
        self.mtime = array("d")
        self.read_complete = bytearray()
        for k in _COUNTS:
            setattr(self, k, array("q"))
        for k in ("fingerprint", "head_hash", "compression", "format", "rank_hint", "host_hint", "start", "end",
                  *_SHARED):
            setattr(self, k, [])
        self.problems: dict[int, list[str]] = {}       # rare: by row
        self.kernel_parts: dict[int, list[str]] = {}
        self._shared: dict[Any, Any] = {}

    def __len__(self) -> int:
        return len(self.path)

    def __contains__(self, path: object) -> bool:
        return path in self.row

    def _same(self, value: tuple) -> tuple:
        """One tuple object for every row holding this value."""
        return self._shared.setdefault(value, value)

    def add(self, info: Any, fmt: str, rank_hint: int | None, host_hint: str | None) -> int:
        """A new source (`info`: its sources.FileInfo), nothing read yet: its row."""
        i = len(self.path)
        self.row[info.path] = i
        self.path.append(info.path)
        self.size.append(info.size)
        self.mtime.append(info.mtime)
        self.fingerprint.append(info.fingerprint)
        self.head_hash.append(info.head_hash)
        self.compression.append(self._shared.setdefault(info.compression, info.compression))
        self.format.append(self._shared.setdefault(fmt, fmt))
        self.rank_hint.append(rank_hint)
        self.host_hint.append(host_hint)
        for k in ("lines_read", "events", "rejected", "complete_end", "complete_lines", "bytes_read"):
            getattr(self, k).append(0)
        for k in ("start", "end"):
            getattr(self, k).append(None)
        for k in _SHARED:
            getattr(self, k).append(())
        self.read_complete.append(1)
        return i

    def hints(self, path: str) -> dict[str, Any]:
        """The path's rank and host hints (what `_same_origin` reads of a source)."""
        i = self.row[path]
        return {"rank_hint": self.rank_hint[i], "host_hint": self.host_hint[i]}

    def add_problem(self, path: str, problem: str) -> None:
        self.problems.setdefault(self.row[path], []).append(problem)

    def merge(self, path: str, r: Any, events_part: str, rejects_part: str) -> None:
        """One piece's counts (`r`: unit.PieceResult) into its source's row, and its unit's parts
        (paths in the store) into the row's part lists: what ingest._merge does to a dict."""
        i = self.row[path]
        self.lines_read[i] += r.lines
        self.events[i] += r.events
        self.rejected[i] += r.rejected
        if r.rejected_by_reason:
            self.rejected_by_reason[i] = self._added(self.rejected_by_reason[i], r.rejected_by_reason)
        if r.rank_sources:
            self.rank_sources[i] = self._added(self.rank_sources[i], r.rank_sources)
        if r.ranks:
            old = self.ranks[i]
            self.ranks[i] = self._same(tuple(sorted(set(old) | set(r.ranks))) if old else tuple(r.ranks))
        if r.hosts:
            old = self.hosts[i]
            self.hosts[i] = self._same(tuple(sorted(set(old) | set(r.hosts))) if old else tuple(r.hosts))
        if r.start_ts and (self.start[i] is None or r.start_ts < self.start[i]):
            self.start[i] = r.start_ts
        if r.end_ts and (self.end[i] is None or r.end_ts > self.end[i]):
            self.end[i] = r.end_ts
        if r.wrote_events:
            self.event_parts[i] = self._same((*self.event_parts[i], events_part))
        if r.wrote_rejects:
            self.reject_parts[i] = self._same((*self.reject_parts[i], rejects_part))
        if r.problem:
            self.problems.setdefault(i, []).append(r.problem)
        self.bytes_read[i] += r.end - r.start
        if not r.complete:
            self.read_complete[i] = 0

    def _added(self, items: tuple, counts: dict[str, int]) -> tuple:
        d = dict(items)
        for k, v in counts.items():
            d[k] = d.get(k, 0) + v
        return self._same(tuple(d.items()))

    def add_kernel_part(self, path: str, rel: str) -> None:
        self.kernel_parts.setdefault(self.row[path], []).append(rel)

    def order_parts(self, path: str, key: Any) -> None:
        """A file read in ranges lists its parts in file order (`key` of a part's path)."""
        i = self.row[path]
        for col in (self.event_parts, self.reject_parts):
            col[i] = self._same(tuple(sorted(col[i], key=key)))

    def rename_parts(self, moved: dict[str, str]) -> None:
        """Parts merged by the store's compaction: each row's part lists renamed (deduplicated)."""
        renamed: dict[tuple, tuple] = {}
        for col in (self.event_parts, self.reject_parts):
            for i, parts in enumerate(col):
                if parts:
                    if parts not in renamed:
                        renamed[parts] = self._same(tuple(dict.fromkeys(moved.get(rel, rel) for rel in parts)))
                    col[i] = renamed[parts]

    def finish(self) -> None:
        """complete_lines of every plain file read: its lines but a truncated last one."""
        for i in range(len(self.path)):
            if self.format[i] != "empty" and self.compression[i] == "none" and self.complete_end[i]:
                tail = 1 if dict(self.rejected_by_reason[i]).get(TRUNCATED_TAIL) else 0
                self.complete_lines[i] = self.lines_read[i] - tail

    def problem_rows(self) -> list[dict[str, str]]:
        """{"path", "problem"} of every problem, by path."""
        return [{"path": self.path[i], "problem": p} for i in sorted(self.problems, key=self.path.__getitem__)
                for p in self.problems[i]]

    def runs_view(self) -> list[tuple[str, tuple, tuple]]:
        """(path, ranks, event parts) of the rows with event parts: what ingest.runs checks."""
        return [(p, r, e) for p, r, e in zip(self.path, self.ranks, self.event_parts) if e]

    def source(self, i: int) -> dict[str, Any]:
        """Row i as a source dict (store.Run.sources' form)."""
        d: dict[str, Any] = {}
        for k in FIELDS:
            v = getattr(self, k)[i]
            if k in ("event_parts", "reject_parts", "ranks", "hosts"):
                v = list(v)
            elif k in ("rejected_by_reason", "rank_sources"):
                v = dict(v)
            elif k == "read_complete":
                v = bool(v)
            d[k] = v
        if i in self.problems:
            d["problems"] = list(self.problems[i])
        if i in self.kernel_parts:
            d["kernel_parts"] = list(self.kernel_parts[i])
        return d

    def sources(self) -> Iterator[dict[str, Any]]:
        """Every row as a source dict, in row order (made one at a time)."""
        return (self.source(i) for i in range(len(self.path)))

    def columns(self, order: list[int]) -> dict[str, list[Any]]:
        """The rows `order` as the columns of the store's sources table (`store.sources_table`:
        lists, the count fields as their JSON text, no field beyond the table's)."""
        import orjson

        text: dict[tuple, str] = {}

        def json_of(items: tuple) -> str:
            if items not in text:
                text[items] = orjson.dumps(dict(items), option=orjson.OPT_NON_STR_KEYS).decode() if items else "{}"
            return text[items]

        cols: dict[str, list[Any]] = {}
        for k in FIELDS:
            col = getattr(self, k)
            if k in ("rejected_by_reason", "rank_sources"):
                cols[k] = [json_of(col[i]) for i in order]
            elif k == "read_complete":
                cols[k] = [bool(col[i]) for i in order]
            else:
                cols[k] = [col[i] for i in order]
        cols["problems"] = [self.problems.get(i) for i in order]
        cols["kernel_parts"] = [self.kernel_parts.get(i) for i in order]
        cols["more"] = ["{}"] * len(order)
        return cols
