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


_SCALARS = (str, int, bool, type(None))


def _plain(v: Any) -> Any:
    """`v` for orjson: containers copied, floats whose text differs wrapped (`_float`); _Other
    for anything else. A container's scalars are handled inline (a call per value cost as much
    as the rest of the walk on a 4,096-rank report)."""
    t = type(v)
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise _Other
            tx = type(x)
            out[k] = x if tx in _SCALARS else _float(x) if tx is float else _plain(x)
        return out
    if t is list or t is tuple:
        return [x if type(x) in _SCALARS else _float(x) if type(x) is float else _plain(x) for x in v]
    if t in _SCALARS:
        return v
    if t is float:
        return _float(v)
    raise _Other


def _float(v: float) -> Any:
    """A float as orjson takes it. orjson's text is the standard library's (repr: the shortest
    digits that read back, fixed notation) for 1e-4 <= |v| < 1e16 and zero (1.2 M random values
    checked); outside that Python writes an exponent (1e-05, 1e+16) where orjson writes 0.00001 or
    1e16, and NaN / Infinity where orjson writes null: those go in as the standard library's text."""
    a = abs(v)
    if 1e-4 <= a < 1e16 or a == 0.0:
        return v
    if v != v:
        return orjson.Fragment("NaN")
    if a == _INF:
        return orjson.Fragment("Infinity" if v > 0 else "-Infinity")
    return orjson.Fragment(float.__repr__(v))


_INF = float("inf")


def dumps(d: dict[str, Any]) -> str:
    """`json.dumps(d, indent=2, ensure_ascii=False, default=str) + "\\n"`, faster."""
    try:
        return orjson.dumps(_plain(d), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode()
    except (_Other, orjson.JSONEncodeError, RecursionError):
        return json.dumps(d, indent=2, ensure_ascii=False, default=str) + "\n"
