"""Rules compiled to polars: a rule's query (`rule_query`) and the finding its rows make (`finding_of`).

Owns the meaning of a rule at run time. A clause becomes one lazy query that reads only the
columns the rule names, keeps the rows its conditions decide (true or false; rows where they are
unknown, e.g. a GPU_STATS line without the metric, neither extend nor break anything), and cuts
each rank's time-ordered rows into *episodes*: maximal runs of consecutive rows that satisfy the
condition. `sustain` keeps only episodes whose first-to-last sample span is long enough; a join
keeps the primary episodes that, on the same rank, lie within `within` of an episode of every
joined clause. A clause's query runs over the rows forensics.rules.plan fetched for it (every row
it reads on the ranks where it can match), in memory; with `census=False` over all the events.

One rule gives at most one Finding, naming every rank it matched with the first and the worst
evidence line. Must not reason across ranks (that is a pass) nor format reports.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

import polars as pl

from ..report.fmt import clock, duration, iso, num, rank_phrase
from ..report.model import Evidence, Finding
from ..schema import EVENT_SCHEMA
from . import expr as X
from .spec import (
    EQ_OPS,
    LIST_OPS,
    ORDER_OPS,
    Clause,
    Cond,
    Group,
    Leaf,
    Rule,
    column_kind,
    dyn_source,
)

BASE = ["timestamp", "rank", "event", "message", "source_file", "line"]
MAX_LINES = 6          # evidence lines per finding: first, worst, one per further rank, latest
TEXT_LIMIT = 160


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _numeric_use(lf: Leaf) -> bool:
    """A JSON key (extra.KEY) is read as a number when the condition compares it as one."""
    if column_kind(lf.col) != "dyn":
        return column_kind(lf.col) in ("int", "float")
    if lf.op in ORDER_OPS or lf.op in ("bits", "not_finite") or lf.expr is not None:
        return True
    if lf.op in LIST_OPS:
        return all(_is_num(v) for v in lf.value)
    return _is_num(lf.value)


Ref = Callable[[str], pl.Expr]     # where a column's value is read from (pl.col, or a census's per-step value)


def _lhs(lf: Leaf, ref: Ref = pl.col) -> pl.Expr:
    c = ref(lf.col)
    kind = column_kind(lf.col)
    if lf.op == "bits":
        return c.cast(pl.Int64, strict=False)
    if _numeric_use(lf):
        return c.cast(pl.Float64, strict=False)
    if kind == "str" or kind == "dyn":
        return c.cast(pl.String)
    return c


def _rhs(lf: Leaf, per: str, ref: Ref = pl.col) -> pl.Expr:
    if lf.expr is not None:
        return X.to_polars(lf.expr, per, ref)
    return pl.lit(float(lf.value) if _numeric_use(lf) else lf.value)


def compile_cond(c: Cond, per: str = "rank", leaf: Callable[[Leaf], pl.Expr] | None = None) -> pl.Expr:
    """A condition tree as one boolean expression (Kleene logic: unknown stays unknown).
    `leaf` compiles the leaves instead of `compile_leaf` (the census bounds some of them)."""
    if isinstance(c, Group):
        parts = [compile_cond(i, per, leaf) for i in c.items]
        if len(parts) == 1:
            return parts[0]
        return pl.all_horizontal(parts) if c.mode == "all" else pl.any_horizontal(parts)
    return leaf(c) if leaf is not None else compile_leaf(c, per)


def compile_leaf(c: Leaf, per: str = "rank", ref: Ref = pl.col) -> pl.Expr:
    """One condition as a boolean expression: null where the row does not say (a missing value)."""
    op = c.op
    if (cats := _categories(c)) is not None:
        return _enum_leaf(c, ref(c.col), cats)
    lhs = _lhs(c, ref)
    if op in ORDER_OPS or op in EQ_OPS:
        rhs = _rhs(c, per, ref)
        return {
            "<": lhs < rhs, "<=": lhs <= rhs, ">": lhs > rhs, ">=": lhs >= rhs, "==": lhs == rhs, "!=": lhs != rhs,
        }[op]
    if op in LIST_OPS:
        vals = [float(v) for v in c.value] if _numeric_use(c) else list(c.value)
        inside = lhs.is_in(pl.lit(pl.Series(vals)).implode())
        # is_in answers false for a null value; keep unknown unknown
        inside = pl.when(lhs.is_null()).then(None).otherwise(inside)
        return inside if op == "in" else ~inside
    if op == "contains":
        return lhs.str.contains(c.value, literal=True)
    if op == "regex":
        return lhs.str.contains(c.value)
    if op == "bits":
        return (lhs & int(c.value)) != 0
    if op == "is_null":
        return lhs.is_null()
    if op == "not_null":
        return lhs.is_not_null()
    if op == "not_finite":
        return ~lhs.is_finite()
    raise AssertionError(op)


def _categories(c: Leaf) -> list[str] | None:
    """The categories of a fixed-vocabulary column (level) compared for (in)equality with text."""
    dt = EVENT_SCHEMA.get(c.col)
    if not isinstance(dt, pl.Enum) or c.op not in EQ_OPS + LIST_OPS or c.expr is not None:
        return None
    vals = c.value if c.op in LIST_OPS else [c.value]
    return list(dt.categories) if all(isinstance(v, str) for v in vals) else None


def _enum_leaf(c: Leaf, col: pl.Expr, cats: list[str]) -> pl.Expr:
    """As the same test on the column cast to text, without casting every row: a value outside the
    vocabulary is never equal, a null stays unknown."""
    dtype = pl.Enum(cats)
    vals = [v for v in (c.value if c.op in LIST_OPS else [c.value]) if v in cats]
    inside = col.is_in(pl.lit(pl.Series(vals, dtype=dtype)).implode()) if vals else pl.lit(False)
    inside = pl.when(col.is_null()).then(None).otherwise(inside)
    return inside if c.op in ("==", "in") else ~inside


def _margin(lf: Leaf | None, per: str) -> pl.Expr:
    """How far a row is past the threshold, relative to it: ranks the 'worst' row."""
    if lf is None:
        return pl.lit(None, dtype=pl.Float64)
    lhs, rhs = _lhs(lf), _rhs(lf, per)
    d = lhs - rhs if lf.op in (">", ">=") else rhs - lhs
    return pl.when(rhs != 0).then(d / rhs.abs()).otherwise(d)


def _value_columns(clause: Clause) -> list[str]:
    return [c for c in clause.columns() if c not in BASE]


def uses_step(clause: Clause) -> bool:
    return clause.by_step or (clause.sustain is not None and clause.sustain.unit == "steps")


def step_values(clause: Clause) -> list[str]:
    """The numeric columns a `by = "step"` clause combines per step."""
    return [c for c in clause.columns() if c not in BASE and c != "step" and column_kind(c) in ("int", "float")]


def dyn_columns(clause: Clause) -> dict[str, pl.Expr]:
    """extra.KEY / fields.KEY columns of the clause, each read out of its JSON column."""
    return {c: pl.col(src[0]).str.json_path_match(f"$.{src[1]}").alias(c)
            for c in clause.columns() if (src := dyn_source(c)) is not None}


def needed_columns(clause: Clause) -> list[str]:
    """The stored columns a clause reads (JSON columns for its extra.KEY / fields.KEY)."""
    cols = clause.columns()
    real = [c for c in cols if dyn_source(c) is None]
    sources = sorted({src[0] for c in cols if (src := dyn_source(c)) is not None})
    need = list(dict.fromkeys(BASE + (["step"] if uses_step(clause) else []) + real + sources))
    if clause.by_step and "message" not in real:
        need.remove("message")
    return need


def row_filter(clause: Clause) -> pl.Expr:
    """Whether a row is one the clause looks at (over rows holding its extra.KEY columns):
    the one place that says it, for the rule's own query and for the census (forensics.rules.plan)."""
    # An event without a rank cannot be placed on a rank's timeline; the log-hygiene pass
    # reports such events, a per-rank rule must not guess one.
    keep = [pl.col("rank").is_not_null()]
    if clause.events:
        keep.append(pl.col("event").is_in(list(clause.events)))
    if uses_step(clause):
        keep.append(pl.col("step").is_not_null())
    if clause.by_step or clause.sustain is not None or clause.key.startswith("join"):
        # A line without a time (console text) cannot be placed in a window or a step's span.
        keep.append(pl.col("timestamp").is_not_null())
    if clause.by_step and (values := step_values(clause)):
        # a line of the step that carries none of the values adds nothing, and is not cited
        keep.append(pl.any_horizontal([pl.col(c).is_not_null() for c in values]))
    return pl.all_horizontal(keep) if len(keep) > 1 else keep[0]


def _prepared(events: pl.LazyFrame, clause: Clause) -> pl.LazyFrame:
    """The rows a clause looks at, with only the columns it needs (and per-step sums)."""
    cols = clause.columns()
    lf = events.select(needed_columns(clause)).filter(row_filter(clause))
    if dyn := dyn_columns(clause):
        lf = lf.with_columns(list(dyn.values()))
    if clause.by_step:
        last = pl.col("timestamp").arg_max()
        aggs: list[pl.Expr] = [pl.col("timestamp").max()]
        for c in ["event", "source_file", "line"]:
            # the step's last line is cited: a step is over when its TRAIN_STEP line is written
            aggs.append(pl.col(c).get(last))
        aggs.append(pl.lit(None, dtype=pl.String).alias("message"))   # one line's text would misdescribe the step
        for c in cols:
            if c in BASE or c == "step":
                continue
            if c in clause.sums:
                # a step without any such row has no value, not zero
                aggs.append(pl.when(pl.col(c).count() > 0).then(pl.col(c).sum()).alias(c))
            elif column_kind(c) == "float":
                aggs.append(pl.col(c).mean())
            elif column_kind(c) == "int":
                aggs.append(pl.col(c).max())
            else:
                aggs.append(pl.col(c).drop_nulls().first())
        lf = lf.group_by("rank", "step").agg(aggs)
    return lf


def episodes(events: pl.LazyFrame, clause: Clause) -> pl.LazyFrame:
    """One row per episode: rank, start, end, n, first and worst row (structs), steps."""
    per = clause.per
    primary = clause.primary()
    has_step = uses_step(clause)
    cond = compile_cond(clause.cond, per) if clause.cond is not None else pl.lit(True)
    rhs = _rhs(primary, per).cast(pl.Float64) if primary is not None else pl.lit(None, dtype=pl.Float64)
    lf = _prepared(events, clause).with_columns(_cond=cond, _margin=_margin(primary, per), _rhs=rhs)
    # Two files of one rank can hold the same line number at the same time (or both none, console
    # text): the file name decides, so that the order never depends on how rows were read.
    lf = lf.filter(pl.col("_cond").is_not_null()).sort(per, "timestamp", "line", "source_file", nulls_last=True)
    brk = (pl.col(per) != pl.col(per).shift(1)) | (pl.col("_cond") != pl.col("_cond").shift(1))
    if clause.max_gap_s is not None:
        gap = (pl.col("timestamp") - pl.col("timestamp").shift(1)).dt.total_microseconds()
        brk = brk | ((pl.col(per) == pl.col(per).shift(1)) & (gap > int(clause.max_gap_s * 1e6)))
    lf = lf.with_columns(_run=brk.fill_null(True).cum_sum()).filter(pl.col("_cond"))
    row_cols = ["timestamp", "event", "message", "source_file", "line", *(["step"] if has_step else []),
                *[c for c in _value_columns(clause) if c != "step"], "_rhs"]
    row = pl.struct(list(dict.fromkeys(row_cols)))
    aggs = [
        pl.col("timestamp").min().alias("start"),
        pl.col("timestamp").max().alias("end"),
        pl.len().alias("n"),
        row.sort_by("timestamp", "line", "source_file", nulls_last=True).first().alias("first"),
        row.sort_by("_margin", "timestamp", "line", "source_file", descending=[True, False, False, False],
                    nulls_last=True).first().alias("worst"),
        pl.col("_margin").max().alias("margin"),
    ]
    if has_step:
        aggs += [pl.col("step").min().alias("step_first"), pl.col("step").max().alias("step_last")]
    eps = lf.group_by(per, "_run").agg(aggs)
    s = clause.sustain
    if s is not None and s.unit == "s":
        eps = eps.filter((pl.col("end") - pl.col("start")).dt.total_microseconds() >= int(s.amount * 1e6))
    elif s is not None:
        eps = eps.filter(pl.col("step_last") - pl.col("step_first") >= s.amount)
    return eps.rename({per: "rank"}) if per != "rank" else eps


def rule_query(rule: Rule, rows: Callable[[Clause], pl.LazyFrame]) -> pl.LazyFrame:
    """The rule's episodes (joined), over `rows(clause)`: the events each clause reads."""
    eps = episodes(rows(rule.clause), rule.clause).with_row_index("_ep")
    for j, jc in enumerate(rule.joins):
        other = episodes(rows(jc), jc).select(
            "rank", pl.col("start").alias("j_start"), pl.col("end").alias("j_end"),
            pl.struct(first="first", worst="worst", n="n", margin="margin").alias("j"),
        )
        w = int(jc.within_s * 1e6)
        near = (
            eps.select("_ep", "rank", "start", "end")
            .join(other, on="rank")
            .filter(
                ((pl.col("j_end") - pl.col("start")).dt.total_microseconds() >= -w)
                & ((pl.col("end") - pl.col("j_start")).dt.total_microseconds() >= -w)
            )
            .group_by("_ep")
            .agg(pl.col("j").sort_by(pl.col("j").struct.field("margin"), descending=True, nulls_last=True).first().alias(f"join{j}"),
                 pl.col("j").struct.field("n").sum().alias(f"join{j}_n"))
        )
        eps = eps.join(near, on="_ep", how="inner")
    return eps.sort("start", "rank", "_run", nulls_last=True)


# --- findings ----------------------------------------------------------------------------------

def _evidence_line(row: dict[str, Any] | None, rank: int, value_cols: list[str]) -> Evidence | None:
    if not row or row.get("source_file") is None or row.get("line") is None:
        return None
    parts = [str(row.get("event") or "")]
    if row.get("step") is not None:
        parts.append(f"step={row['step']}")
    parts += [f"{c}={num(row[c])}" for c in value_cols if c != "step" and row.get(c) is not None]
    text = " ".join(p for p in parts if p).strip()
    msg = row.get("message")
    if msg:
        text = f"{text}: {msg}" if text else str(msg)
    if len(text) > TEXT_LIMIT:
        text = text[: TEXT_LIMIT - 1] + "…"
    return Evidence(source_file=row["source_file"], line=int(row["line"]), rank=rank,
                    timestamp=iso(row.get("timestamp")), text=text or None)


def _values(row: dict[str, Any] | None, cols: list[str]) -> dict[str, Any]:
    if not row:
        return {}
    return {c: row.get(c) for c in cols if row.get(c) is not None}


def _earliest(eps: list[dict[str, Any]]) -> datetime | None:
    return min((e["start"] for e in eps if e["start"] is not None), default=None)


def _latest(eps: list[dict[str, Any]]) -> datetime | None:
    return max((e["end"] for e in eps if e["end"] is not None), default=None)


def _span_s(ep: dict[str, Any]) -> float:
    start: datetime = ep["start"]
    end: datetime = ep["end"]
    return (end - start).total_seconds()


def describe(clause: Clause) -> str:
    """The condition in one line, for the evidence: 'GPU_STATS: gpu_util < 60 for 5m per rank'."""
    def leaf(c: Leaf) -> str:
        k = X.constant(c.expr) if c.expr is not None else None
        return f"{c.col} {c.op} {num(k)}" if k is not None else c.describe()

    def walk(c: Cond, top: bool) -> str:
        if isinstance(c, Leaf):
            return leaf(c)
        if len(c.items) == 1:
            return walk(c.items[0], top)
        inner = (" and " if c.mode == "all" else " or ").join(walk(i, False) for i in c.items)
        return inner if top else f"({inner})"

    text = walk(clause.cond, True) if clause.cond is not None else "any event"
    if clause.events:
        text = f"{'/'.join(clause.events)}: {text}"
    if clause.by_step:
        text += " per step" + (f" (summing {', '.join(clause.sums)})" if clause.sums else "")
    if clause.sustain is not None:
        text += f" for {clause.sustain.text}"
    if clause.within_s:
        text += f", within {duration(clause.within_s)}"
    return text


def _headline(rule: Rule, worst_ep: dict[str, Any], eps: list[dict[str, Any]]) -> str:
    """The numbers of the title: the worst measured value and, sustained, how long it held."""
    primary = rule.clause.primary()
    bits: list[str] = []
    if primary is not None:
        w = worst_ep.get("worst") or {}
        if worst_ep.get("margin") is not None and worst_ep["margin"] >= 0:
            bits.append(f"{primary.col} {num(w.get(primary.col))} ({primary.op} {num(w.get('_rhs'))})")
        else:   # matched through another branch of an `any`: show what the row holds
            bits.append(" ".join(f"{c}={num(v)}" for c, v in _values(w, _value_columns(rule.clause)).items()))
        if rule.clause.sustain is not None:
            if rule.clause.sustain.unit == "s":
                bits.append(f"for {duration(max(_span_s(e) for e in eps))}")
            else:
                bits.append(f"for {max(int(e['step_last'] - e['step_first']) for e in eps)} steps")
    else:
        n = sum(e["n"] for e in eps)
        first = eps[0]
        at = f" at {clock(iso(first['start']))}" if first["start"] is not None else ""
        bits.append(f"{n} event{'s' if n != 1 else ''}, first on rank {first['rank']}{at}")
    for j, jc in enumerate(rule.joins):
        jp = jc.primary()
        jw = (worst_ep.get(f"join{j}") or {}).get("worst") or {}
        if jp is not None:
            bits.append(f"with {jp.col} {num(jw.get(jp.col))} ({jp.op} {num(jw.get('_rhs'))})")
    return " ".join(bits)


def finding_of(rule: Rule, df: pl.DataFrame) -> Finding | None:
    if df.is_empty():
        return None
    primary = rule.clause.primary()
    vcols = _value_columns(rule.clause)
    # Every episode's numbers, but the rows (first, worst, joined) only of the few cited: a rule
    # matching on thousands of ranks would otherwise turn thousands of rows into dicts.
    light = [c for c in df.columns if c not in ("first", "worst") and not c.startswith("join")]
    fields = {f.name for f in df.schema["worst"].fields}  # type: ignore[attr-defined]
    wv = (pl.col("worst").struct.field(primary.col) if primary is not None and primary.col in fields
          else pl.lit(None)).alias("_worst_value")
    eps = df.select(*light, wv).to_dicts()
    rows: dict[int, dict[str, Any]] = {}

    def full(i: int) -> dict[str, Any]:
        if i not in rows:
            rows[i] = df.row(i, named=True)
        return rows[i]

    def worst_of(idx: list[int]) -> int:
        return max(idx, key=lambda i: (eps[i]["margin"] is not None, eps[i]["margin"] or 0.0)) if primary else idx[0]

    worst_ep = full(worst_of(list(range(len(eps)))))
    by_rank: dict[int, list[int]] = {}
    for i, e in enumerate(eps):       # each rank's episodes, in the order of `eps` (by start)
        by_rank.setdefault(e["rank"], []).append(i)
    ranks = sorted(by_rank)
    per_rank: list[dict[str, Any]] = []
    for r in ranks:
        mine = [eps[i] for i in by_rank[r]]
        item: dict[str, Any] = {
            "rank": r, "episodes": len(mine), "samples": sum(e["n"] for e in mine),
            "first_seen": iso(_earliest(mine)), "last_seen": iso(_latest(mine)),
        }
        if rule.clause.sustain is not None:
            item["longest_s"] = round(max(_span_s(e) for e in mine), 3)
        if primary is not None:
            item["worst"] = eps[worst_of(by_rank[r])]["_worst_value"]
        per_rank.append(item)

    lines: list[Evidence] = []
    seen: set[tuple[str, int]] = set()

    def cite(row: dict[str, Any] | None, rank: int, cols: list[str]) -> None:
        ev = _evidence_line(row, rank, cols)
        if ev is not None and (ev.source_file, ev.line) not in seen and len(lines) < MAX_LINES:
            seen.add((ev.source_file, ev.line))
            lines.append(ev)

    first_ep = full(0)
    cite(first_ep["first"], first_ep["rank"], vcols)
    cite(worst_ep["worst"], worst_ep["rank"], vcols)
    joined: list[dict[str, Any]] = []
    for j, jc in enumerate(rule.joins):
        jcols = _value_columns(jc)
        jv = worst_ep.get(f"join{j}") or {}
        cite(jv.get("first"), worst_ep["rank"], jcols)
        cite(jv.get("worst"), worst_ep["rank"], jcols)
        joined.append({"condition": describe(jc), "samples": worst_ep.get(f"join{j}_n"),
                       "worst": _values(jv.get("worst"), jcols)})
    for r in ranks:
        if len(lines) >= MAX_LINES:
            break
        cite(full(by_rank[r][0])["first"], r, vcols)
    cite(full(len(eps) - 1)["first"], eps[-1]["rank"], vcols)   # and the latest occurrence

    evidence: dict[str, Any] = {"condition": describe(rule.clause)}
    if primary is not None and primary.expr is not None and X.constant(primary.expr) is not None:
        evidence["threshold"] = X.constant(primary.expr)
    elif primary is not None:
        evidence["threshold"] = primary.value if primary.expr is None else primary.expr_text
    evidence["episodes"] = len(eps)
    evidence["samples"] = sum(e["n"] for e in eps)
    w = worst_ep["worst"] or {}
    evidence["worst"] = {"rank": worst_ep["rank"], "timestamp": iso(w.get("timestamp")), **_values(w, vcols)}
    if primary is not None and w.get("_rhs") is not None and "threshold" in evidence and not _is_num(evidence["threshold"]):
        evidence["worst"]["threshold"] = w["_rhs"]
    if joined:
        evidence["joined"] = joined
    if rule.params:
        evidence["params"] = dict(rule.params)
    evidence["per_rank"] = per_rank
    affected = rule.ranks_are == "affected"
    return Finding(
        rule=rule.id, kind=rule.kind, layer=rule.layer, severity=rule.level, ranks=[] if affected else ranks,
        victims=ranks if affected else [],
        title=f"{rule.title}: {rank_phrase(ranks)} — {_headline(rule, worst_ep, eps)}",
        evidence=evidence, lines=lines,
        first_seen=iso(_earliest(eps)), last_seen=iso(_latest(eps)),
    )
