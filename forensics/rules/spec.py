"""The rule language: a TOML file parsed and validated into a `Rule`, every error collected.

Owns what a rule file may say and what each key means (the docstring of `forensics.rules`
shows a whole file). Must not touch event data: compilation to polars is `compile.py`, running
the examples is `examples.py`.

Validation never stops at the first problem: `parse_rule` returns the rule (or None) together
with every `RuleError` found, each naming the file and the key (`match.all[1].op`), so that
`forensics rules check` can list them all at once.
"""
from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from ..report.model import KINDS, LAYERS
from ..schema import EVENT_SCHEMA, LEVELS
from . import expr as X

# Fixed metadata, in this order, first in every file (the Sigma convention: a reader finds the
# same thing in the same place in every rule).
METADATA = ("id", "title", "level", "layer", "kind", "description", "references", "falsepositives")
SECTIONS = ("next", "ranks_are", "params", "match", "threshold", "join", "examples")
# What to do next (optional in a rule file; rules/next_steps.toml holds one per kind): one
# sentence, with {placeholders} filled from the finding by forensics.rules.next_steps.
NEXT_PLACEHOLDERS = ("rank", "ranks", "rank_id", "host", "gpu", "path", "collective", "seq", "step", "pid", "where",
                     "job", "reason", "others")
NEXT_STEPS_FILE = "next_steps.toml"
# Whether the ranks a rule matches are the ones at fault (a hot GPU, an OOM), or only where a
# symptom shows (every rank blocked in a hung collective times out): then they are victims.
RANKS_ARE = ("at_fault", "affected")
# WARN = an anomaly that can heal itself, ERROR = a fault that needs a person (seed 000, 4.5).
RULE_LEVELS = ("WARN", "ERROR")

ORDER_OPS = ("<", "<=", ">", ">=")
EQ_OPS = ("==", "!=")
LIST_OPS = ("in", "not_in")
STR_OPS = ("contains", "regex")
NULL_OPS = ("is_null", "not_null")
OPS = (*ORDER_OPS, *EQ_OPS, *LIST_OPS, *STR_OPS, "bits", *NULL_OPS, "not_finite")

CLAUSE_KEYS = ("event", "all", "any", "sustain", "max_gap", "per", "by", "sum")
THRESHOLD_KEYS = ("event", "metric", "op", "value", "expr", "where", "sustain", "max_gap", "per", "by", "sum")
LEAF_KEYS = ("col", "op", "value", "expr")
EXAMPLE_KEYS = ("expect", "ranks", "note", "events")
EXAMPLE_EVENT_META = ("at", "repeat", "every", "increment")

# Example events start here; only differences between timestamps matter to a rule.
EXAMPLE_T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)

_ID = re.compile(r"^[a-z][a-z0-9_]*$")
_DYN = re.compile(r"^(extra|fields)\.([A-Za-z_][A-Za-z0-9_]*)$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|steps?)\s*$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class RuleError:
    """One problem in one rule file, at one key."""

    file: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.key}: {self.message}" if self.key else f"{self.file}: {self.message}"


@dataclass(frozen=True)
class Sustain:
    """How long a condition must hold: first to last satisfying sample, in seconds or in steps."""

    amount: float
    unit: str           # "s" or "steps"
    text: str


@dataclass(frozen=True)
class Leaf:
    col: str            # an event column, or extra.KEY / fields.KEY (a key of those JSON objects)
    op: str
    value: Any = None
    expr: X.Node | None = None
    expr_text: str | None = None

    @property
    def rhs_text(self) -> str:
        if self.expr_text is not None:
            return self.expr_text
        return "" if self.value is None else _fmt_value(self.value)

    def describe(self) -> str:
        rhs = self.rhs_text
        return f"{self.col} {self.op} {rhs}".strip()


@dataclass(frozen=True)
class Group:
    mode: str           # "all" | "any"
    items: tuple["Leaf | Group", ...]


Cond = Leaf | Group


def leaves(c: Cond | None) -> list[Leaf]:
    """The leaves of a condition tree, left to right."""
    if isinstance(c, Leaf):
        return [c]
    return [lf for i in c.items for lf in leaves(i)] if isinstance(c, Group) else []


@dataclass(frozen=True)
class Clause:
    """Which events (and, with `by = "step"`, which per-step sums) satisfy what, for how long."""

    key: str                        # where it was written: "match", "threshold", "join[0]"
    events: tuple[str, ...]
    cond: Group | None
    sustain: Sustain | None = None
    max_gap_s: float | None = None
    per: str = "rank"
    by_step: bool = False
    sums: tuple[str, ...] = ()
    within_s: float = 0.0           # joins: how far apart in time two episodes may be

    def leaves(self) -> list[Leaf]:
        return leaves(self.cond)

    def primary(self) -> Leaf | None:
        """The first ordering condition: its column is the measured value, its margin ranks 'worst'."""
        return next((lf for lf in self.leaves() if lf.op in ORDER_OPS), None)

    def columns(self) -> list[str]:
        cols: list[str] = []
        for lf in self.leaves():
            cols.append(lf.col)
            if lf.expr is not None:
                cols.extend(sorted(X.columns_of(lf.expr)))
        cols.extend(self.sums)
        return list(dict.fromkeys(cols))


@dataclass(frozen=True)
class ExampleEvent:
    """One `events = [...]` entry of an example, checked: its columns, when, how many times."""

    columns: dict[str, Any]
    start: float                    # seconds after EXAMPLE_T0
    every: float
    repeat: int
    increment: dict[str, float]


@dataclass(frozen=True)
class Example:
    key: str                        # "examples[0]"
    expect: str                     # "match" | "no_match"
    ranks: tuple[int, ...] | None
    events: tuple[ExampleEvent, ...]
    note: str = ""

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The example's events, one row per repetition: expanded when the example runs (`rules
        check`), not each time a diagnosis loads the rules."""
        rows: list[dict[str, Any]] = []
        for ev in self.events:
            for n in range(ev.repeat):
                row = dict(ev.columns)
                for c, d in ev.increment.items():
                    row[c] = (row.get(c) or 0) + n * d
                row.setdefault("timestamp", EXAMPLE_T0 + timedelta(seconds=ev.start + n * ev.every))
                row.setdefault("rank", 0)
                rows.append(row)
        return rows


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    level: str
    layer: str
    kind: str
    description: str
    references: tuple[str, ...]
    falsepositives: tuple[str, ...]
    clause: Clause
    joins: tuple[Clause, ...] = ()
    params: dict[str, float] = field(default_factory=dict)
    examples: tuple[Example, ...] = ()
    path: Path = Path("?")
    ranks_are: str = "at_fault"
    next: str | None = None         # what to do next, when more specific than the kind's


# --- columns ----------------------------------------------------------------------------------

def column_kind(col: str) -> str | None:
    """'int' | 'float' | 'str' | 'time' | 'dyn' (a JSON key, typed by use) | None (unknown)."""
    if _DYN.match(col):
        return "dyn"
    dt = EVENT_SCHEMA.get(col)
    if dt is None:
        return None
    if dt.is_integer():
        return "int"
    if dt.is_float():
        return "float"
    if dt.is_temporal():
        return "time"
    return "str"


NUMERIC_COLUMNS = {c for c in EVENT_SCHEMA if column_kind(c) in ("int", "float")}


def dyn_source(col: str) -> tuple[str, str] | None:
    m = _DYN.match(col)
    return (m.group(1), m.group(2)) if m else None


def parse_duration(text: Any, *, steps_ok: bool) -> Sustain:
    if not isinstance(text, str):
        also = ' or "100 steps"' if steps_ok else ""
        raise ValueError(f'expected a duration string such as "5m", "30s"{also}, found {text!r}')
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"cannot read duration {text!r} (use ms, s, m, h{' or steps' if steps_ok else ''})")
    n, unit = float(m.group(1)), m.group(2)
    if unit.startswith("step"):
        if not steps_ok:
            raise ValueError(f"{text!r}: a step count is not allowed here, give a time (s, m, h)")
        return Sustain(n, "steps", text.strip())
    return Sustain(n * _SECONDS[unit], "s", text.strip())


def _fmt_value(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_fmt_value(x) for x in v) + "]"
    if isinstance(v, int) and not isinstance(v, bool) and v >= 16 and v & (v - 1) == 0:
        return hex(v)       # bit masks read better in hex (HW_THERMAL = 0x40)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# --- the parser -------------------------------------------------------------------------------

class _Parser:
    def __init__(self, path: Path, display: str) -> None:
        self.path = path
        self.file = display
        self.errors: list[RuleError] = []
        self.params: dict[str, float] = {}

    def err(self, key: str, msg: str) -> None:
        self.errors.append(RuleError(self.file, key, msg))

    # metadata ----------------------------------------------------------------------------
    def metadata(self, doc: dict[str, Any]) -> dict[str, Any]:
        keys = list(doc)
        for k in keys:
            if k not in METADATA and k not in SECTIONS:
                self.err(k, f"unknown top-level key (allowed: {', '.join(METADATA + SECTIONS)})")
        missing = [k for k in METADATA if k not in doc]
        for k in missing:
            self.err(k, "missing required metadata")
        present = [k for k in keys if k in METADATA]
        if not missing and present != list(METADATA):
            self.err(present[0] if present else "", f"metadata must come first in this order: {', '.join(METADATA)} (found {', '.join(present)})")
        meta: dict[str, Any] = {}
        rid = doc.get("id")
        if "id" in doc:
            if not isinstance(rid, str) or not _ID.match(rid):
                self.err("id", f"must be lower_snake_case ([a-z][a-z0-9_]*), found {rid!r}")
            elif rid != self.path.stem:
                self.err("id", f"id {rid!r} must equal the file stem {self.path.stem!r}")
        meta["id"] = rid if isinstance(rid, str) else self.path.stem
        for k in ("title", "description"):
            v = doc.get(k)
            if k in doc and (not isinstance(v, str) or not v.strip()):
                self.err(k, "must be a non-empty string")
            meta[k] = v.strip() if isinstance(v, str) else ""
        for k, allowed in (("level", RULE_LEVELS), ("layer", tuple(LAYERS)), ("kind", tuple(KINDS))):
            v = doc.get(k)
            if k in doc and v not in allowed:
                self.err(k, f"{v!r} is not one of {', '.join(allowed)}")
            meta[k] = v
        for k in ("references", "falsepositives"):
            v = doc.get(k)
            if k in doc and (not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v)):
                self.err(k, "must be a list of non-empty strings")
            elif k == "references" and isinstance(v, list) and not v:
                self.err(k, "name at least one source for the threshold (e.g. \"seed 000 §4.2\")")
            meta[k] = tuple(v) if isinstance(v, list) else ()
        return meta

    # params -------------------------------------------------------------------------------
    def parse_params(self, raw: Any) -> dict[str, float]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.err("params", "must be a table of name = number")
            return {}
        out: dict[str, float] = {}
        for name, v in raw.items():
            key = f"params.{name}"
            if not re.match(r"^[a-z_][a-z0-9_]*$", name):
                self.err(key, "parameter names are lower_snake_case")
            elif name in EVENT_SCHEMA or name in X.FUNCS:
                self.err(key, f"{name!r} is an event column or function name; choose another parameter name")
            elif not _is_num(v):
                self.err(key, f"must be a number, found {v!r}")
            else:
                out[name] = float(v)
        return out

    # conditions ---------------------------------------------------------------------------
    def cond_list(self, raw: Any, key: str, mode: str) -> Group | None:
        if not isinstance(raw, list) or not raw:
            self.err(key, f"`{mode}` must be a non-empty list of conditions")
            return None
        items = [c for i, r in enumerate(raw) if (c := self.cond(r, f"{key}[{i}]")) is not None]
        return Group(mode, tuple(items)) if len(items) == len(raw) else None

    def cond(self, raw: Any, key: str) -> Cond | None:
        if not isinstance(raw, dict):
            self.err(key, "a condition is a table: {col = ..., op = ..., value = ...} or {all = [...]} / {any = [...]}")
            return None
        if "all" in raw or "any" in raw:
            if len(raw) != 1:
                self.err(key, "a group holds exactly one key, `all` or `any`")
                return None
            mode = "all" if "all" in raw else "any"
            return self.cond_list(raw[mode], f"{key}.{mode}", mode)
        return self.leaf(raw, key)

    def leaf(self, raw: dict[str, Any], key: str) -> Leaf | None:
        ok = True
        for k in raw:
            if k not in LEAF_KEYS:
                self.err(f"{key}.{k}", f"unknown key (a condition has {', '.join(LEAF_KEYS)})")
                ok = False
        col, op = raw.get("col"), raw.get("op")
        kind = column_kind(col) if isinstance(col, str) else None
        if not isinstance(col, str):
            self.err(f"{key}.col", "missing column name")
            return None
        if kind is None:
            self.err(f"{key}.col", f"unknown column {col!r} (event columns are listed in forensics/schema.py; JSON keys are written extra.KEY or fields.KEY)")
            ok = False
        if op not in OPS:
            self.err(f"{key}.op", f"unknown operator {op!r} (allowed: {', '.join(OPS)})")
            return None
        has_v, has_e = "value" in raw, "expr" in raw
        value, etext = raw.get("value"), raw.get("expr")
        node: X.Node | None = None
        if has_v and has_e:
            self.err(key, "give either `value` or `expr`, not both")
            return None
        if op in NULL_OPS or op == "not_finite":
            if has_v or has_e:
                self.err(key, f"`{op}` takes no value")
                ok = False
        elif not has_v and not has_e:
            self.err(key, f"`{op}` needs a `value` (or an `expr`)")
            return None
        if has_e:
            if op not in ORDER_OPS + EQ_OPS:
                self.err(f"{key}.expr", f"`expr` is arithmetic; it goes with {', '.join(ORDER_OPS + EQ_OPS)}, not `{op}`")
                ok = False
            elif not isinstance(etext, str):
                self.err(f"{key}.expr", "must be a string such as \"0.4 * step_time_ms\"")
                ok = False
            else:
                try:
                    node = X.parse(etext, self.params, NUMERIC_COLUMNS)
                except X.ExprError as e:
                    self.err(f"{key}.expr", str(e))
                    ok = False
        if kind is not None and not self._op_fits(key, col, kind, op, value, has_v, node is not None or has_e):
            ok = False
        return Leaf(col, op, value if has_v else None, node, etext if has_e else None) if ok else None

    def _op_fits(self, key: str, col: str, kind: str, op: str, value: Any, has_v: bool, has_e: bool) -> bool:
        numeric = kind in ("int", "float", "dyn")
        stringy = kind in ("str", "dyn")
        if kind == "time" and op not in NULL_OPS:
            self.err(f"{key}.op", f"`{col}` is a time; rules compare durations with `sustain`/`within`, only is_null/not_null apply")
            return False
        if op in ORDER_OPS:
            if not numeric:
                self.err(f"{key}.op", f"`{op}` needs a numeric column; `{col}` holds text")
                return False
            if has_v and not _is_num(value):
                self.err(f"{key}.value", f"`{op}` compares with a number, found {value!r}")
                return False
        elif op in EQ_OPS:
            if has_e and not numeric:
                self.err(f"{key}.expr", f"`{col}` holds text; compare it with a `value`")
                return False
            if has_v:
                if kind in ("int", "float") and not _is_num(value):
                    self.err(f"{key}.value", f"`{col}` is numeric, found {value!r}")
                    return False
                if kind == "str" and not isinstance(value, str):
                    self.err(f"{key}.value", f"`{col}` holds text, found {value!r}")
                    return False
                if kind == "dyn" and not (_is_num(value) or isinstance(value, str)):
                    self.err(f"{key}.value", f"expected a number or a string, found {value!r}")
                    return False
                if col == "level" and value not in LEVELS:
                    self.err(f"{key}.value", f"levels are {', '.join(LEVELS)}, found {value!r}")
                    return False
        elif op in LIST_OPS:
            if not isinstance(value, list) or not value:
                self.err(f"{key}.value", f"`{op}` needs a non-empty list")
                return False
            want_num = kind in ("int", "float") or (kind == "dyn" and all(_is_num(v) for v in value))
            if want_num and not all(_is_num(v) for v in value):
                self.err(f"{key}.value", f"`{col}` is numeric; every item must be a number")
                return False
            if not want_num and not all(isinstance(v, str) for v in value):
                self.err(f"{key}.value", "every item must be a string (or every item a number)")
                return False
            if col == "level" and not set(value) <= set(LEVELS):
                self.err(f"{key}.value", f"levels are {', '.join(LEVELS)}")
                return False
        elif op in STR_OPS:
            if not stringy:
                self.err(f"{key}.op", f"`{op}` needs a text column; `{col}` is numeric")
                return False
            if not isinstance(value, str) or not value:
                self.err(f"{key}.value", f"`{op}` needs a non-empty string")
                return False
            if op == "regex":
                try:
                    pl.select(pl.lit("").str.contains(value))
                except Exception as e:  # polars reports the Rust regex error text
                    why = next((ln.strip() for ln in str(e).splitlines() if ln.strip().startswith("error:")), str(e).splitlines()[0])
                    self.err(f"{key}.value", f"invalid regular expression {value!r}: {why.removeprefix('error: ')}")
                    return False
        elif op == "bits":
            if kind not in ("int", "dyn"):
                self.err(f"{key}.op", f"`bits` needs an integer column (a bitmask); `{col}` is {kind}")
                return False
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                self.err(f"{key}.value", f"`bits` needs a positive integer mask such as 0x40, found {value!r}")
                return False
        elif op == "not_finite":
            if kind not in ("float", "dyn"):
                self.err(f"{key}.op", f"`not_finite` needs a float column; `{col}` is {kind}")
                return False
        return True

    # clauses ------------------------------------------------------------------------------
    def duration(self, raw: dict[str, Any], key: str, name: str, *, steps_ok: bool) -> Sustain | None:
        """raw[name] as a duration; None (and an error) when it cannot be read, None when absent."""
        if name not in raw:
            return None
        try:
            return parse_duration(raw[name], steps_ok=steps_ok)
        except ValueError as e:
            self.err(f"{key}.{name}", str(e))
            return None

    def clause(self, raw: Any, key: str, *, join: bool) -> Clause | None:
        if not isinstance(raw, dict):
            self.err(key, "must be a table")
            return None
        threshold = key == "threshold" or "metric" in raw
        allowed = (THRESHOLD_KEYS if threshold else CLAUSE_KEYS) + (("within",) if join else ())
        for k in raw:
            if k not in allowed:
                self.err(f"{key}.{k}", f"unknown key (allowed here: {', '.join(allowed)})")
        ok = True
        events: tuple[str, ...] = ()
        ev = raw.get("event")
        if ev is not None:
            evs = [ev] if isinstance(ev, str) else ev
            if not isinstance(evs, list) or not evs or not all(isinstance(e, str) and e for e in evs):
                self.err(f"{key}.event", "must be an event name or a list of event names")
                ok = False
            else:
                events = tuple(evs)
        groups: list[Cond] = []
        if threshold:
            leaf_raw = {k: raw[k] for k in ("op", "value", "expr") if k in raw}
            metric = raw.get("metric")
            if not isinstance(metric, str):
                self.err(f"{key}.metric", "missing metric (a numeric event column)")
                ok = False
            else:
                if column_kind(metric) not in ("int", "float", "dyn", None):
                    self.err(f"{key}.metric", f"`{metric}` is not numeric")
                    ok = False
                if "op" in raw and raw["op"] not in ORDER_OPS + EQ_OPS:
                    self.err(f"{key}.op", f"a threshold compares with {', '.join(ORDER_OPS + EQ_OPS)}, found {raw['op']!r}")
                    ok = False
                elif "op" not in raw:
                    self.err(f"{key}.op", "missing operator")
                    ok = False
                else:
                    lf = self.leaf({"col": metric, **leaf_raw}, key)
                    ok = ok and lf is not None
                    if lf is not None:
                        groups.append(lf)
            if "where" in raw:
                g = self.cond_list(raw["where"], f"{key}.where", "all")
                ok = ok and g is not None
                if g is not None:
                    groups.extend(g.items)
        else:
            for mode in ("all", "any"):
                if mode in raw:
                    g = self.cond_list(raw[mode], f"{key}.{mode}", mode)
                    ok = ok and g is not None
                    if g is not None and mode == "all":
                        groups.extend(g.items)
                    elif g is not None:
                        groups.append(g)
            if not events and "all" not in raw and "any" not in raw:
                self.err(key, "matches every event: give an `event` filter or conditions (`all`/`any`)")
                ok = False
        cond = Group("all", tuple(groups)) if groups else None
        sustain = self.duration(raw, key, "sustain", steps_ok=True)
        max_gap = None
        ok = ok and ("sustain" not in raw or sustain is not None)
        if "max_gap" in raw:
            gap = self.duration(raw, key, "max_gap", steps_ok=False)
            ok = ok and gap is not None
            max_gap = gap.amount if gap is not None else None
            if sustain is None:
                self.err(f"{key}.max_gap", "only means something with `sustain`")
                ok = False
        elif sustain is not None and sustain.unit == "s":
            # Samples further apart than the whole window cannot show the condition held
            # in between, so by default a gap that long ends the episode.
            max_gap = sustain.amount
        per = raw.get("per", "rank")
        if per != "rank":
            self.err(f"{key}.per", f"only \"rank\" is supported (logic spanning ranks belongs in a pass), found {per!r}")
            ok = False
        by = raw.get("by")
        if by is not None and by != "step":
            self.err(f"{key}.by", f"only \"step\" is supported, found {by!r}")
            ok = False
        sums: tuple[str, ...] = ()
        if "sum" in raw:
            s = raw["sum"]
            if by != "step":
                self.err(f"{key}.sum", "`sum` adds up a column per step; it needs by = \"step\"")
                ok = False
            elif not isinstance(s, list) or not all(isinstance(c, str) and c in NUMERIC_COLUMNS for c in s):
                self.err(f"{key}.sum", "must be a list of numeric event columns")
                ok = False
            else:
                sums = tuple(s)
        within = 0.0
        if join:
            if "within" not in raw:
                self.err(f"{key}.within", "a join needs `within` (how far apart in time the two may be, e.g. \"5m\")")
                ok = False
            else:
                w = self.duration(raw, key, "within", steps_ok=False)
                ok = ok and w is not None
                within = w.amount if w is not None else 0.0
        if not ok:
            return None
        return Clause(key, events, cond, sustain, max_gap, per, by == "step", sums, within)

    # examples -----------------------------------------------------------------------------
    def examples(self, raw: Any) -> tuple[Example, ...]:
        if raw is None:
            self.err("examples", "no [[examples]]: give at least one that must match and one that must not")
            return ()
        if not isinstance(raw, list):
            self.err("examples", "must be an array of tables ([[examples]])")
            return ()
        out: list[Example] = []
        for i, ex in enumerate(raw):
            key = f"examples[{i}]"
            if not isinstance(ex, dict):
                self.err(key, "must be a table")
                continue
            for k in ex:
                if k not in EXAMPLE_KEYS:
                    self.err(f"{key}.{k}", f"unknown key (allowed: {', '.join(EXAMPLE_KEYS)})")
            expect = ex.get("expect")
            if expect not in ("match", "no_match"):
                self.err(f"{key}.expect", f"must be \"match\" or \"no_match\", found {expect!r}")
                continue
            ranks = ex.get("ranks")
            if ranks is not None and (not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks)):
                self.err(f"{key}.ranks", "must be a list of rank numbers")
                continue
            if ranks is not None and expect == "no_match":
                self.err(f"{key}.ranks", "a no_match example has no ranks")
                continue
            rows = self.example_rows(ex.get("events"), f"{key}.events")
            if rows is None:
                continue
            out.append(Example(key, expect, tuple(ranks) if ranks is not None else None, tuple(rows), str(ex.get("note", ""))))
        if not {"match", "no_match"} <= {e.get("expect") for e in raw if isinstance(e, dict)}:
            self.err("examples", "give at least one example with expect = \"match\" and one with expect = \"no_match\"")
        return tuple(out)

    def example_rows(self, raw: Any, key: str) -> list[ExampleEvent] | None:
        if not isinstance(raw, list) or not raw:
            self.err(key, "must be a non-empty list of events ({event = ..., col = value, ...})")
            return None
        rows: list[ExampleEvent] = []
        cursor = 0.0
        ok = True
        for i, ev in enumerate(raw):
            k = f"{key}[{i}]"
            if not isinstance(ev, dict):
                self.err(k, "an event is a table of column = value")
                ok = False
                continue
            base: dict[str, Any] = {}
            for c, v in ev.items():
                if c in EXAMPLE_EVENT_META:
                    continue
                if c not in EVENT_SCHEMA or c in ("source_file", "line"):
                    self.err(f"{k}.{c}", f"unknown event column {c!r}")
                    ok = False
                elif c in ("extra", "fields") and isinstance(v, dict):
                    base[c] = json.dumps(v)
                else:
                    base[c] = v
            try:
                every = parse_duration(ev.get("every", "1s"), steps_ok=False).amount
                start = parse_duration(ev["at"], steps_ok=False).amount if "at" in ev else cursor
            except ValueError as e:
                self.err(f"{k}.every" if "every" in ev else f"{k}.at", str(e))
                ok = False
                continue
            repeat = ev.get("repeat", 1)
            if not isinstance(repeat, int) or isinstance(repeat, bool) or not 1 <= repeat <= 100_000:
                self.err(f"{k}.repeat", f"must be a count between 1 and 100000, found {repeat!r}")
                ok = False
                continue
            inc = ev.get("increment", {})
            if not isinstance(inc, dict) or not all(c in NUMERIC_COLUMNS and _is_num(d) for c, d in inc.items()):
                self.err(f"{k}.increment", "must be a table of numeric column = step per repetition")
                ok = False
                continue
            rows.append(ExampleEvent(base, start, every, repeat, inc))
            cursor = start + repeat * every
        return rows if ok else None


def next_step_error(text: Any) -> str | None:
    """Why `text` is not a usable next step (None when it is): one sentence on one line, and
    only the placeholders forensics.rules.next_steps knows how to fill."""
    import string

    if not isinstance(text, str) or not text.strip():
        return "must be a non-empty string: one sentence saying what to do next"
    if "\n" in text.strip():
        return "must be one sentence on one line"
    depth = 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if depth not in (0, 1):
            return "square brackets mark an optional segment: one level, each [ closed by a ]"
    if depth:
        return "square brackets mark an optional segment: one level, each [ closed by a ]"
    try:
        names = [f for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        return f"cannot read its {{placeholders}}: {e} (write a literal brace as {{{{ or }}}})"
    for n in names:
        if n not in NEXT_PLACEHOLDERS:
            return f"unknown placeholder {{{n}}} (allowed: {', '.join('{' + x + '}' for x in NEXT_PLACEHOLDERS)})"
    return None


def parse_next_steps(path: Path, display: str | None = None) -> tuple[dict[str, str], list[RuleError]]:
    """rules/next_steps.toml: `kind = "one sentence"` per kind of the vocabulary."""
    file = display or str(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        return {}, [RuleError(file, "", f"cannot read: {e}")]
    except tomllib.TOMLDecodeError as e:
        return {}, [RuleError(file, "", f"not valid TOML: {e}")]
    out: dict[str, str] = {}
    errors: list[RuleError] = []
    for kind, text in doc.items():
        if kind not in KINDS:
            errors.append(RuleError(file, kind, f"{kind!r} is not a kind of the vocabulary (forensics/report/model.py KINDS)"))
        elif why := next_step_error(text):
            errors.append(RuleError(file, kind, why))
        else:
            out[kind] = text.strip()
    return out, errors


def apply_overrides(doc: dict[str, Any], rid: str, ov: dict[str, Any], source: str | None) -> dict[str, Any]:
    """A rule file's TOML with a config's overrides (level, params, value, sustain) applied, before
    it is validated and compiled. An override that names what the rule does not have is a
    ForensicsError naming the config file and key (a typo must not silently do nothing)."""
    import copy

    from ..errors import BAD_CONFIG, ForensicsError

    def bad(key: str, reason: str) -> ForensicsError:
        return ForensicsError(f"bad config: rules.{rid}.{key}", where=source, reason=reason, code=BAD_CONFIG,
                              help=f"see the rule: forensics rules list -v (rule {rid})")

    doc = copy.deepcopy(doc)
    if "level" in ov:
        doc["level"] = ov["level"]
    if "params" in ov:
        have = doc.get("params") if isinstance(doc.get("params"), dict) else {}
        for name, v in ov["params"].items():
            if name not in have:
                raise bad(f"params.{name}", f"rule {rid} has no parameter {name!r}"
                          + (f" (it has: {', '.join(have)})" if have else " (it has none)"))
            have[name] = v
    clause = doc.get("threshold") if isinstance(doc.get("threshold"), dict) else doc.get("match")
    if "value" in ov:
        if not isinstance(doc.get("threshold"), dict) or "value" not in doc["threshold"]:
            raise bad("value", f"rule {rid} has no [threshold] value to replace"
                      + (" (its threshold is an expr: override its params instead)" if isinstance(doc.get("threshold"), dict) else ""))
        doc["threshold"]["value"] = ov["value"]
    if "sustain" in ov:
        if not isinstance(clause, dict) or "sustain" not in clause:
            raise bad("sustain", f"rule {rid} has no sustain window to replace")
        clause["sustain"] = ov["sustain"]
    return doc


def parse_rule(path: Path, display: str | None = None, overrides: dict[str, Any] | None = None,
               override_source: str | None = None) -> tuple[Rule | None, list[RuleError]]:
    """Read and validate one rule file. Returns the rule (None if unusable) and every error.
    `overrides` (from a config file) replace its level, params, threshold value or sustain first."""
    p = _Parser(path, display or str(path))
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        p.err("", f"cannot read: {e}")
        return None, p.errors
    except tomllib.TOMLDecodeError as e:
        p.err("", f"not valid TOML: {e}")
        return None, p.errors
    if overrides:
        doc = apply_overrides(doc, str(doc.get("id", path.stem)), overrides, override_source)
    meta = p.metadata(doc)
    p.params = p.parse_params(doc.get("params"))
    has_m, has_t = "match" in doc, "threshold" in doc
    clause = None
    if has_m == has_t:
        p.err("match", "give exactly one of [match] or [threshold]")
    else:
        clause = p.clause(doc["match"] if has_m else doc["threshold"], "match" if has_m else "threshold", join=False)
    joins: list[Clause] = []
    raw_joins = doc.get("join", [])
    if not isinstance(raw_joins, list):
        p.err("join", "must be an array of tables ([[join]])")
    else:
        for i, j in enumerate(raw_joins):
            c = p.clause(j, f"join[{i}]", join=True)
            if c is not None:
                joins.append(c)
    examples = p.examples(doc.get("examples"))
    nxt = doc.get("next")
    if "next" in doc and (why := next_step_error(nxt)):
        p.err("next", why)
    ranks_are = doc.get("ranks_are", "at_fault")
    if ranks_are not in RANKS_ARE:
        p.err("ranks_are", f"{ranks_are!r} is not one of {', '.join(RANKS_ARE)}")
    if p.errors or clause is None:
        return None, p.errors
    return Rule(
        id=meta["id"], title=meta["title"], level=meta["level"], layer=meta["layer"], kind=meta["kind"],
        description=meta["description"], references=meta["references"], falsepositives=meta["falsepositives"],
        clause=clause, joins=tuple(joins), params=p.params, examples=examples, path=path, ranks_are=ranks_are,
        next=nxt.strip() if isinstance(nxt, str) else None,
    ), p.errors
