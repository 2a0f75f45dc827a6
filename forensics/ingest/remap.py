"""A block of JSON lines in another schema -> the same lines in the seed's schema, line for line.

Owns applying a SchemaMap (roles.py) to each record: its envelope roles to `timestamp`, `rank`,
`host`, `level`, `event`, `message`; every other leaf (nested objects flattened to dotted paths)
into `extra`, a known metric under its canonical name in the canonical unit; the event's logged
name kept as `extra.logged_event` when it was renamed. A line that is not a JSON object is
left exactly as it was (the reader judges it as before), so line numbers, counts and rejects
are those of the file. Must not decide roles (roles.py) nor parse the seed schema (jsonl.py).

Only files whose map is not the identity come here: the seed schema's lines go straight to the
compiled scanner.
"""
from __future__ import annotations

import json
from typing import Any

import orjson

from ..schema import FIELDS
from .hf_state import _clean as _finite_or_text  # non-finite floats as text: orjson writes NaN as null
from .hf_state import _number
from .roles import SchemaMap, event_by_content, event_by_name, flatten

_TEXT = object()


class Remapper:
    """Applies one SchemaMap; caches the per-name decisions (metric columns, event ids)."""

    def __init__(self, sm: SchemaMap) -> None:
        self.sm = sm
        self._plans: dict[str, Any] = {}
        self._levels = dict(sm.level_numbers)
        self._event: dict[tuple[str, frozenset[str]], str] = {}
        self._roles = [(p, k) for p, k in ((sm.time, "timestamp"), (sm.rank, "rank"), (sm.host, "host"),
                                           (sm.level, "level"), (sm.event, "event"), (sm.message, "message"))
                       if p is not None]

    def plan(self, path: str) -> tuple[str, float, bool] | None:
        """(column, factor, numeric?) of a field path, or None: kept under its path."""
        m = self.sm.metric(path)
        return None if m is None else (m[0], m[1], FIELDS[m[0]].dtype.is_numeric())

    def record(self, obj: dict) -> dict:
        flat = flatten(obj)
        rec: dict[str, Any] = {}
        for p, k in self._roles:   # (a config may give two roles one field)
            if p in flat:
                rec[k] = flat[p]
        lr = flat.get(self.sm.local_rank) if self.sm.local_rank is not None else None
        for p, _ in self._roles:
            flat.pop(p, None)
        if lr is not None:
            flat.pop(self.sm.local_rank, None)  # type: ignore[arg-type]
            flat["local_rank"] = lr
        extra: dict[str, Any] = {}
        rest: dict[str, Any] = {}
        plans = self._plans
        for p, v in flat.items():
            a = plans.get(p, _TEXT)
            if a is _TEXT:
                a = plans[p] = self.plan(p)
            if a is None or v is None:
                rest[p] = _finite_or_text(v)
                continue
            canon, f, numeric = a
            if numeric:
                t = type(v)
                if t is float or t is int:
                    x = v * f if f != 1.0 else v
                else:
                    x = _number(v)
                    if x is None:
                        rest[p] = v
                        continue
                    x *= f
                v = _finite_or_text(x)
            if canon in extra:
                rest[p] = v
            else:
                extra[canon] = v
        for p, v in rest.items():
            extra.setdefault(p, v)
        ev = rec.get("event")
        if ev is not None:
            raw = ev if isinstance(ev, str) else str(ev)
            key = (raw, frozenset(extra))
            name = self._event.get(key)
            if name is None:
                name = event_by_content(event_by_name(raw, self.sm.event_last_part), key[1])
                if len(self._event) < 4096:
                    self._event[key] = name
            rec["event"] = name
            if name != raw:
                extra["logged_event"] = raw
        ts = rec.get("timestamp")
        if type(ts) is str and len(ts) > 20 and ts[19] == "," and ts[10] in " T":
            # Python logging's default asctime: "2026-12-04 16:59:14,123" (a comma before the ms)
            rec["timestamp"] = ts[:19] + "." + ts[20:]
        for k in ("host", "level", "message"):
            v = rec.get(k)
            if v is not None and not isinstance(v, str):
                rec[k] = v if isinstance(v, (int, float)) and not isinstance(v, bool) else orjson.dumps(v).decode()
                if k == "host":
                    rec[k] = str(rec[k])
        lv = rec.get("level")
        if self._levels and lv is not None:
            n = _number(lv)
            if n is not None and n == n:
                rec["level"] = self._levels.get(int(n), "INFO")
            else:   # glog's letters
                rec["level"] = self._levels.get(str(lv).strip().upper(), lv)
        elif isinstance(lv, str):
            rec["level"] = lv.strip()
        rec["extra"] = extra
        return rec

    def block(self, buf: bytes | memoryview) -> bytes:
        """The block's lines, each JSON object rewritten; every other line as it was."""
        lines = bytes(buf).split(b"\n")
        for i, ln in enumerate(lines):
            s = ln.strip()
            if not s.startswith(b"{") or not s.endswith(b"}"):
                continue
            try:
                obj = orjson.loads(s)
            except orjson.JSONDecodeError:
                try:   # NaN / Infinity literals: Python's parser reads them, orjson does not
                    obj = json.loads(s)
                except (ValueError, RecursionError):
                    continue
            if not isinstance(obj, dict):
                continue
            rec = self.record(obj)
            try:
                lines[i] = orjson.dumps(rec)
            except TypeError:   # an integer beyond 64 bits
                lines[i] = json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode()
        return b"\n".join(lines)
