"""Which rules can match, on which ranks, and the rows they then read: a rule set in a few scans.

Owns making a rule set cost a few queries over the events whatever the number of rules and parts:
1. the *census*, one aggregation over every row for all the per-row clauses (and one for each
   clause with a per-rank baseline or combined by step, each reading only its own columns): per
   rank and per clause, how many rows satisfy the condition and over what span of time / steps
   (by-step clauses combine each step first, in memory: a store's rows of one step are
   contiguous, no hash table of a million steps);
2. for the rules that can match somewhere, one scan keeping the rows their clauses read (the
   rows where their condition is known, or that feed a per-rank baseline or a per-step value), on
   the ranks where they can match; evidence columns (file, message) come with those rows only.
Each of those rules is then evaluated by forensics.rules.compile over its rows, in memory.

Must not decide what a rule means: the rows given to a rule are every row its own query would
read on those ranks (a rule looks at one rank at a time, so other ranks cannot change its
result); the census only says where a rule CANNOT match. It is an upper bound, never a guess:
where a value depends on other rows (a per-rank `median(...)`, a per-step text column) the
condition is taken as true wherever it is known, and a `sustain` window is only required to fit
between the first and last satisfying row of the rank (the episodes lie inside that span).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import polars as pl

from . import expr as X
from .compile import _lhs, compile_cond, compile_leaf, dyn_columns, needed_columns, row_filter, step_values
from ..schema import EVENT_SCHEMA
from .spec import Clause, Cond, Leaf, Rule, column_kind, leaves

Rows = Callable[[Clause], pl.LazyFrame]


@dataclass(frozen=True)
class _Slot:
    """One clause of one rule, and the prefix of its census columns."""

    name: str
    rule: int
    clause: Clause


def _slots(rules: list[Rule]) -> list[_Slot]:
    return [_Slot(f"_c{i}_{k}", i, c) for i, r in enumerate(rules) for k, c in enumerate((r.clause, *r.joins))]


def _from_other_rows(lf: Leaf) -> bool:
    """A condition whose value on a row depends on the rank's other rows (a per-rank baseline)."""
    return lf.expr is not None and bool(X.aggregated_columns(lf.expr))


def _operands_known(lf: Leaf) -> pl.Expr:
    """The row holds every value the condition reads from it (its baselines aside)."""
    cols = sorted(X.row_columns(lf.expr)) if lf.expr is not None else []
    return pl.all_horizontal([_lhs(lf).is_not_null(), *[pl.col(c).is_not_null() for c in cols]])


def _row_cond(clause: Clause) -> pl.Expr:
    """The clause's condition on a row (a baseline is taken over the rows it is evaluated on)."""
    return compile_cond(clause.cond, clause.per) if clause.cond is not None else pl.lit(True)


def _based(c: Cond | None) -> bool:
    """The condition holds a comparison with a per-rank baseline."""
    return any(_from_other_rows(lf) for lf in leaves(c))


def _can_be(c: Cond, per: str) -> tuple[pl.Expr, pl.Expr]:
    """Whether the condition can be true, and whether it can be false, on a row (never null).
    Exact without baselines; with one, a comparison whose row values are there can be either."""
    if not _based(c):
        v = compile_cond(c, per)
        return v.fill_null(False), (~v).fill_null(False)
    if isinstance(c, Leaf):
        k = _operands_known(c)
        return k, k
    parts = [_can_be(i, per) for i in c.items]
    t, f = [p[0] for p in parts], [p[1] for p in parts]
    if c.mode == "all":    # Kleene: true if every part is, false if one is
        return pl.all_horizontal(t), pl.any_horizontal(f)
    return pl.any_horizontal(t), pl.all_horizontal(f)


def _known(clause: Clause) -> pl.Expr:
    """True on every row where the clause's condition may be known (true or false): the rows that
    decide where its episodes begin and end (an `any` of unknown and false is unknown)."""
    if clause.cond is None:
        return pl.lit(True)
    if not _based(clause.cond):     # Kleene logic: known where the condition is not null
        return compile_cond(clause.cond, clause.per).is_not_null()
    t, f = _can_be(clause.cond, clause.per)
    return t | f


def _reads(clause: Clause) -> pl.Expr:
    """The rows a (not per-step) clause's result depends on: where its condition may be known,
    and where a column it takes a per-rank baseline of has a value."""
    aggs = sorted({a for lf in clause.leaves() if lf.expr is not None for a in X.aggregated_columns(lf.expr)})
    return pl.any_horizontal([_known(clause), *[pl.col(a).is_not_null() for a in aggs]]) if aggs else _known(clause)


def _step_bound(clause: Clause, s: str, fill: bool = True) -> pl.Expr:
    """A by-step clause's bound over the census's per-step values (named `{s}_v_{col}`); with
    `fill=False` null where the step's condition may be unknown (a condition has no negation, so
    the bound is false only where the condition is)."""
    exact = {"rank", "step", *step_values(clause)}

    def ref(c: str) -> pl.Expr:
        return pl.col(c) if c in ("rank", "step") else pl.col(f"{s}_v_{c}")

    def leaf(lf: Leaf) -> pl.Expr:
        cols = {lf.col, *(X.row_columns(lf.expr) if lf.expr is not None else ())}
        if _from_other_rows(lf) or not cols <= exact:
            # a baseline, or a value the census does not combine (a step's text, its last line)
            return pl.lit(True)
        return compile_leaf(lf, clause.per, ref)

    cond = compile_cond(clause.cond, clause.per, leaf) if clause.cond is not None else pl.lit(True)
    b = pl.col(f"{s}_e") & cond
    return b.fill_null(False) if fill else b


def _step_runs(per_step: pl.LazyFrame, clause: Clause, s: str) -> pl.DataFrame:
    """Per rank, the first and last step (`{s}_rlo`, `{s}_rhi`) of the widest stretch of steps,
    in the order compile.episodes takes them (by time), that holds no step where the condition
    is surely false: an episode (consecutive true steps; unknown ones skipped) lies inside one.
    `{s}_tie`: two steps of the rank end at the same time, so that order is not known here.
    The steps come in (rank, step) order, mostly also in time order: sorted only when not."""
    b = _step_bound(clause, s, fill=False)
    mine = per_step.filter(pl.col(f"{s}_e")).select("rank", "step", pl.col(f"{s}_ts"), b.alias("_b")).collect()
    if _pieces(mine, f"{s}_ts") is None:
        mine = mine.sort("rank", f"{s}_ts", maintain_order=True)
    rank = mine.get_column("rank").cast(pl.Int64).to_numpy()
    ts = mine.get_column(f"{s}_ts").to_physical().to_numpy()
    same = rank[1:] == rank[:-1]
    tie = np.zeros(len(rank), dtype=bool)
    tie[1:] = same & (ts[1:] == ts[:-1])
    ties = pl.DataFrame({"rank": rank, f"{s}_tie": tie}).group_by("rank").agg(pl.col(f"{s}_tie").any())
    bound = mine.get_column("_b")
    false = (~bound).fill_null(False).to_numpy()
    # a stretch ends at a surely false step, and at the rank's end
    cut = false.copy()
    cut[1:] |= ~same
    seg = np.cumsum(cut)
    true = bound.fill_null(False).to_numpy()
    segs = (pl.DataFrame({"rank": rank[true], "_seg": seg[true], "step": mine.get_column("step").to_numpy()[true]})
            .group_by("rank", "_seg").agg(pl.col("step").min().alias("_lo"), pl.col("step").max().alias("_hi"))
            .sort("rank", pl.col("_hi") - pl.col("_lo"), descending=[False, True])
            .group_by("rank", maintain_order=True)
            .agg(pl.col("_lo").first().alias(f"{s}_rlo"), pl.col("_hi").first().alias(f"{s}_rhi")))
    return ties.join(segs, on="rank", how="left").with_columns(pl.col("rank").cast(pl.Int32))


# A by-step clause's rows are combined a piece of whole ranks at a time, of about this many rows:
# every numpy temporary is then a piece's size and the next piece reuses its memory (arrays of
# the millions of rows of a store are each memory touched afresh: 4 KB a page fault)
PIECE_ROWS = 1 << 18


def _step_frame(rows: pl.DataFrame, clause: Clause, s: str) -> pl.DataFrame:
    """Per (rank, step) of a by-step clause's rows (rank, step, timestamp and its values, in the
    store's order): whether the step has a row of the clause (`{s}_e`), its last time (`{s}_ts`)
    and its values combined as compile._prepared combines them (sums, means of floats, maxima of
    integers). A store is written rank by rank in line order, so each rank's rows are one block
    whose steps never go back: the steps are then cut where (rank, step) changes, without
    hashing a million groups; otherwise the rows are first ordered by (rank, step) (a stable
    sort keeps each step's rows in order)."""
    vals = step_values(clause)
    out = {"rank": pl.Int32, "step": pl.Int64, f"{s}_e": pl.Boolean, f"{s}_ts": EVENT_SCHEMA["timestamp"],
           **{f"{s}_v_{c}": (pl.Float64 if c in clause.sums or column_kind(c) == "float" else EVENT_SCHEMA.get(c, pl.Float64))
              for c in vals}}
    if rows.is_empty():
        return pl.DataFrame(schema=out)
    pieces = _pieces(rows, "step")      # the clause's rows all have a rank and a step
    if pieces is None:       # (parts come in any order: blocks need not be sorted)
        rows = rows.sort("rank", "step", maintain_order=True)    # stable: a step's rows keep their order
        pieces = _pieces(rows, "step")
        assert pieces is not None
    return (pl.concat([_combine_steps(rows.slice(a, b - a), clause, s, vals) for a, b in pieces])
            .with_columns(pl.col(k).cast(t) for k, t in out.items()))


def _pieces(df: pl.DataFrame, key: str) -> list[tuple[int, int]] | None:
    """The rows of `df` in pieces of whole ranks of about PIECE_ROWS rows ([start, end) each),
    when each rank's rows are one block in which `key` never goes back; None otherwise. Read a
    piece at a time too (a shift of the whole column is a copy of it)."""
    runs = df.select(pl.col("rank").rle()).unnest("rank")      # a row per block: len, value
    if runs.get_column("value").n_unique() < runs.height:
        return None
    cuts = [0]
    for b in np.cumsum(runs.get_column("len").to_numpy())[:-1].tolist():
        if b - cuts[-1] >= PIECE_ROWS:
            cuts.append(b)
    pieces = list(zip(cuts, [*cuts[1:], df.height]))
    for a, b in pieces:
        rank, k = (df.get_column(c).slice(a, b - a).to_physical().to_numpy() for c in ("rank", key))
        if not np.all((rank[1:] != rank[:-1]) | (k[1:] >= k[:-1])):
            return None
    return pieces


def _combine_steps(rows: pl.DataFrame, clause: Clause, s: str, vals: list[str]) -> pl.DataFrame:
    """`_step_frame` of rows in (rank, step) blocks, its columns not yet cast."""
    rank = rows.get_column("rank").to_numpy()
    step = rows.get_column("step").to_numpy()
    cut = np.empty(len(rank), dtype=bool)
    cut[0] = True
    np.not_equal(rank[1:], rank[:-1], out=cut[1:])
    cut[1:] |= step[1:] != step[:-1]
    starts = np.flatnonzero(cut)
    # each row's step number (0, 1, ...) summed up in place: no other temporary of the rows' size
    group = np.zeros(len(rank), dtype=np.intp)
    group[starts[1:]] = 1
    np.cumsum(group, out=group)
    ts = rows.get_column("timestamp").to_physical().to_numpy()
    cols: dict[str, Any] = {"rank": rank[starts], "step": step[starts], f"{s}_e": np.ones(len(starts), dtype=bool),
                            f"{s}_ts": np.maximum.reduceat(ts, starts)}
    for c in vals:
        v = rows.get_column(c)
        valid = v.is_not_null().to_numpy()
        n = np.bincount(group[valid], minlength=len(starts))   # counted as integers: no float copy of the flags
        if c in clause.sums or column_kind(c) == "float":
            x = v.cast(pl.Float64).to_numpy(writable=True)    # a null is NaN here: made 0, as fill_null(0.0)
            x[~valid] = 0.0
            # bincount adds each step's values one after another, in the rows' order
            got = np.bincount(group, weights=x, minlength=len(starts))
            if c not in clause.sums:
                got /= np.maximum(n, 1)
        else:
            got = np.maximum.reduceat(v.cast(pl.Int64).fill_null(np.iinfo(np.int64).min).to_numpy(), starts)
        # a step without any such row has no value, not zero
        cols[f"{s}_v_{c}"] = pl.Series(got).scatter(np.flatnonzero(n == 0), None) if (n == 0).any() else got
    return pl.DataFrame(cols)


def census(events: pl.LazyFrame, rules: list[Rule]) -> pl.DataFrame:
    """One row per rank where some clause can hold: for each clause `_c{rule}_{k}`, the number
    `_n` of rows (or steps) satisfying its bound, and the first and last of them (`_lo`, `_hi`: in
    time, or in steps for a `sustain` in steps). The per-row clauses, the baselines and the
    by-step clauses' rows are branches over the same rows, each collected in turn; a by-step
    clause's steps are combined in memory (`_step_frame`) before the next branch is read."""
    slots = _slots(rules)
    dyn: dict[str, pl.Expr] = {}
    for sl in slots:
        dyn.update(dyn_columns(sl.clause))
    steps = [sl for sl in slots if sl.clause.by_step]
    # a per-rank baseline (median(...)) needs the rank's rows: such clauses get a branch of their own
    based = [sl for sl in slots if not sl.clause.by_step and _based(sl.clause.cond)]
    rows = [sl for sl in slots if not sl.clause.by_step and sl not in based]
    cols: list[pl.Expr] = []
    raw: list[str] = []
    for sl in based:
        c = sl.clause
        cols.append((row_filter(c) & _reads(c)).fill_null(False).alias(f"{sl.name}_k"))
        raw += [*c.columns(), "timestamp", *(["step"] if c.sustain is not None and c.sustain.unit == "steps" else [])]
    for sl in rows:
        c, s = sl.clause, sl.name
        cols.append((row_filter(c) & _row_cond(c)).fill_null(False).alias(f"{s}_t"))
        if c.sustain is not None:
            raw.append("timestamp" if c.sustain.unit == "s" else "step")
    for sl in steps:
        c = sl.clause
        cols.append(row_filter(c).fill_null(False).alias(f"{sl.name}_m"))
        raw += ["step", "timestamp", *step_values(c)]
    lf = events.filter(pl.col("rank").is_not_null())
    if dyn:
        lf = lf.with_columns(list(dyn.values()))
    # what the census reads of a row: its rank, a few booleans and the values they need
    raw = [c for c in dict.fromkeys(raw) if c != "rank"]
    base = lf.select("rank", *raw, *cols)

    def totals(sl: _Slot, t: pl.Expr, at: str | None = None) -> list[pl.Expr]:
        """How many rows (steps) hold, and the first and last of them (at `at`: when, or which step)."""
        s, sus = sl.name, sl.clause.sustain
        out = [t.sum().alias(f"{s}_n")]
        if sus is not None:
            when = pl.col(at or ("timestamp" if sus.unit == "s" else "step")).filter(t)
            out += [when.min().alias(f"{s}_lo"), when.max().alias(f"{s}_hi")]
        return out

    branches: list[pl.LazyFrame] = []
    if rows:
        # only the rows where some clause holds: a few, in a run without faults
        hits = base.filter(pl.any_horizontal([pl.col(f"{sl.name}_t") for sl in rows]))
        branches.append(hits.group_by("rank").agg([e for sl in rows for e in totals(sl, pl.col(f"{sl.name}_t"))]))
    for sl in based:
        # the rows the clause reads, in memory (its baseline over them, as compile.episodes takes it)
        c = sl.clause
        t = _row_cond(c).fill_null(False)
        at = ["timestamp" if c.sustain.unit == "s" else "step"] if c.sustain is not None else []
        mine = (base.filter(pl.col(f"{sl.name}_k")).select(list(dict.fromkeys(["rank", *c.columns(), *at])))
                .with_columns(t.alias(f"{sl.name}_t")).filter(pl.col(f"{sl.name}_t")))
        branches.append(mine.group_by("rank").agg(totals(sl, pl.col(f"{sl.name}_t"))))
    # one branch after the other, each its own scan of the columns it reads: collected together
    # (one scan shared by every branch) the scan's rows are held for all of them at once, for
    # the same CPU (4,096-rank bench store: 0.38 CPU s either way, peak +265 MB vs +196 MB)
    by_rank = [b.collect(engine="streaming") for b in branches]
    for sl in steps:
        # one clause's rows at a time (millions of them): dropped once its steps are combined
        rows_of = base.filter(pl.col(f"{sl.name}_m")).select("rank", "step", "timestamp", *step_values(sl.clause))
        by_rank.append(_step_counts(sl, rows_of.collect(engine="streaming")))
    if not by_rank:
        return pl.DataFrame(schema={"rank": pl.Int32})
    out = by_rank[0]
    for f in by_rank[1:]:
        out = out.join(f, on="rank", how="full", coalesce=True)
    return out.with_columns(pl.col(f"{sl.name}_n").fill_null(0) for sl in slots)


def _step_counts(sl: _Slot, rows: pl.DataFrame) -> pl.DataFrame:
    """A by-step clause's census columns from its rows: its steps combined, how many of them can
    hold and the first and last (in time, or in steps for a `sustain` in steps)."""
    c, s = sl.clause, sl.name
    t = pl.col(f"{s}_t")
    per_step = _step_frame(rows, c, s).lazy().with_columns(_step_bound(c, s).alias(f"{s}_t"))
    del rows
    aggs = [t.sum().alias(f"{s}_n")]
    if c.sustain is not None:
        when = pl.col(f"{s}_ts" if c.sustain.unit == "s" else "step").filter(t)
        aggs += [when.min().alias(f"{s}_lo"), when.max().alias(f"{s}_hi")]
    got = per_step.group_by("rank").agg(aggs).collect()
    if c.sustain is not None and c.sustain.unit == "steps" and c.per == "rank":
        # a `sustain` in steps needs that many steps in one run, not between the first and last:
        # the runs are looked for on the ranks the first-to-last span leaves in
        left = got.filter(_can_match(got, s, c)).get_column("rank")
        runs = _step_runs(per_step.filter(pl.col("rank").is_in(left.implode())), c, s)
        # the run's span where the order of the steps is known, else first to last
        tie = pl.col(f"{s}_tie").fill_null(True)
        got = (got.join(runs, on="rank", how="left")
               .with_columns(pl.when(tie).then(pl.col(f"{s}_{k}")).otherwise(pl.col(f"{s}_r{k}")).alias(f"{s}_{k}")
                             for k in ("lo", "hi")).drop(f"{s}_rlo", f"{s}_rhi", f"{s}_tie"))
    return got


def _can_match(counts: pl.DataFrame, s: str, clause: Clause) -> pl.Series:
    """Per census row: whether the clause can have an episode on that rank."""
    ok = counts.get_column(f"{s}_n") > 0
    sus = clause.sustain
    if sus is not None:
        lo, hi = counts.get_column(f"{s}_lo"), counts.get_column(f"{s}_hi")
        if sus.unit == "s":   # as compile.episodes compares an episode's span
            ok = ok & ((hi - lo).dt.total_microseconds() >= int(sus.amount * 1e6))
        else:
            ok = ok & ((hi - lo) >= sus.amount)
    return ok.fill_null(False)


def candidate_rows(events: pl.LazyFrame, rules: list[Rule]) -> list[Rows | None]:
    """For each rule: None when it cannot match anywhere, else where each of its clauses finds
    its rows (an in-memory frame read in one scan shared by every rule that can match)."""
    counts = census(events, rules)
    slots = _slots(rules)
    by_rule: dict[int, list[_Slot]] = {}
    for sl in slots:
        by_rule.setdefault(sl.rule, []).append(sl)
    cand: dict[int, list[int]] = {}
    for i, sls in by_rule.items():
        ok = pl.Series([True] * counts.height, dtype=pl.Boolean)
        for sl in sls:        # a joined rule matches only where every clause has an episode
            ok = ok & _can_match(counts, sl.name, sl.clause)
        if ranks := counts.get_column("rank").filter(ok).to_list():
            cand[i] = ranks
    if not cand:
        return [None] * len(rules)

    live = [sl for sl in slots if sl.rule in cand]
    dyn: dict[str, pl.Expr] = {}
    need: list[str] = []
    for sl in live:
        dyn.update(dyn_columns(sl.clause))
        need += needed_columns(sl.clause)
    need = list(dict.fromkeys(need))
    flags: list[pl.Expr] = []
    for sl in live:
        c = sl.clause
        keep = row_filter(c) if c.by_step else row_filter(c) & _reads(c)
        keep = pl.col("rank").is_in(cand[sl.rule]) & keep
        flags.append(keep.fill_null(False).alias(f"{sl.name}_in"))
    lf = events
    if dyn:
        lf = lf.with_columns(list(dyn.values()))
    # the rows some clause reads, as a filter the scan applies (row groups of other ranks are
    # skipped by their statistics), then which clause reads each of them
    lf = lf.filter(pl.any_horizontal(flags)).with_columns(flags)
    texts = [pl.col(f"{sl.name}_in") for sl in live if not sl.clause.by_step]
    if "message" in need and texts:
        # a by-step clause never reads a line's text: keep it only for the rows that may cite it
        lf = lf.with_columns(pl.when(pl.any_horizontal(texts)).then(pl.col("message")).alias("message"))
    frame = lf.select(*need, *[f"{sl.name}_in" for sl in live]).collect(engine="streaming")

    def rows_of(i: int) -> Rows:
        flag = {sl.clause.key: f"{sl.name}_in" for sl in by_rule[i]}
        return lambda c: frame.lazy().filter(pl.col(flag[c.key]))

    return [rows_of(i) if i in cand else None for i in range(len(rules))]
