"""The JSON report: `Report.to_json()` as text. The contract is spec/report.md (stable keys).

Owns only serialisation: key order is the model's, numbers stay numbers, non-ASCII stays readable.
Must not add, rename or drop keys (CI scripts parse them) — that is the model's business.

The text is the standard library's `json.dumps(indent=2, ensure_ascii=False, default=str)`, byte
for byte. orjson writes it: the standard library indents in pure Python (a 10,000-rank report is
~10^6 calls, the largest part of writing it). orjson formats floats its own way (1e-5, not
1e-05) and some types (datetimes, enums) differently, so floats go in as the standard library's
text (orjson.Fragment) and anything but plain str / int / float / bool / None / list / tuple /
dict with str keys falls back to the standard library for the whole report.
"""
from __future__ import annotations

import json
from typing import Any

import orjson

from .model import Report
from .redact import redact_json


def render_json(report: Report, *, redact: bool = True) -> str:
    d: dict[str, Any] = report.to_json()
    if redact:
        d = redact_json(d)
    return dumps(d)


class _Other(Exception):
    """A value orjson would not write as the standard library does."""


def _plain(v: Any) -> Any:
    t = type(v)
    if t is str or t is int or t is bool or v is None:
        return v
    if t is float:
        return orjson.Fragment(_FLOAT(v))
    if t is dict:
        if not all(type(k) is str for k in v):
            raise _Other
        return {k: _plain(x) for k, x in v.items()}
    if t is list or t is tuple:
        return [_plain(x) for x in v]
    raise _Other


def _FLOAT(v: float) -> str:
    """The standard library's text of a float: its repr; NaN, Infinity, -Infinity."""
    if v != v:
        return "NaN"
    if v in (_INF, -_INF):
        return "Infinity" if v > 0 else "-Infinity"
    return float.__repr__(v)


_INF = float("inf")


def dumps(d: dict[str, Any]) -> str:
    """`json.dumps(d, indent=2, ensure_ascii=False, default=str) + "\\n"`, faster."""
    try:
        return orjson.dumps(_plain(d), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode()
    except (_Other, orjson.JSONEncodeError, RecursionError):
        return json.dumps(d, indent=2, ensure_ascii=False, default=str) + "\n"
