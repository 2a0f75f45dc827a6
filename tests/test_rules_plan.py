"""The census's shortcuts (forensics.rules.plan) held to the computations they replaced, on random
data: where a clause's condition may be known."""
from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from forensics.rules import plan
from forensics.rules.compile import compile_leaf
from forensics.rules.spec import Cond, Leaf, parse_rule
from forensics.schema import EVENT_SCHEMA

from test_rules_engine import T0, write_rule

# --- where a condition may be known: Kleene logic instead of (can be true) | (can be false) ------


def _can_be_per_leaf(c: Cond, per: str) -> tuple[pl.Expr, pl.Expr]:
    """The census's former `_can_be`: every leaf compiled on its own, combined by hand."""
    if isinstance(c, Leaf):
        if plan._from_other_rows(c):
            k = plan._operands_known(c)
            return k, k
        v = compile_leaf(c, per)
        return v.fill_null(False), (~v).fill_null(False)
    parts = [_can_be_per_leaf(i, per) for i in c.items]
    t, f = [p[0] for p in parts], [p[1] for p in parts]
    if c.mode == "all":
        return pl.all_horizontal(t), pl.any_horizontal(f)
    return pl.any_horizontal(t), pl.all_horizontal(f)


LEAVES = [
    '{ col = "gpu_util", op = "<", value = 60 }',
    '{ col = "temp_c", op = ">=", value = 85 }',
    '{ col = "throttle_reasons", op = "bits", value = 0x40 }',
    '{ col = "event", op = "==", value = "GPU_STATS" }',
    '{ col = "level", op = "in", value = ["WARN", "ERROR"] }',
    '{ col = "message", op = "contains", value = "out of" }',
    '{ col = "loss", op = "not_finite" }',
    '{ col = "grad_norm", op = ">", expr = "threshold" }',
    '{ col = "threshold", op = "is_null" }',
    '{ col = "sm_clock_mhz", op = "<", expr = "0.9 * median(sm_clock_mhz)" }',
    '{ col = "gpu_util", op = "<", expr = "0.05 * max(sm_clock_mhz)" }',
]


def _random_cond(rnd: random.Random, depth: int = 0) -> str:
    items = [rnd.choice(LEAVES) if depth > 1 or rnd.random() < 0.6 else _random_cond(rnd, depth + 1)
             for _ in range(rnd.randint(1, 3))]
    body = ", ".join(items)
    return f'{{ {rnd.choice(["any", "all"])} = [{body}] }}' if depth else f'{rnd.choice(["any", "all"])} = [{body}]'


def _random_rows(rnd: random.Random, n: int) -> pl.DataFrame:
    def pick(*vals: Any) -> Any:
        return rnd.choice(vals)

    rows = [{"rank": pick(0, 1, None), "event": pick("GPU_STATS", "TRAIN_STEP", None),
             "level": pick("INFO", "WARN", "ERROR", None), "message": pick("CUDA out of memory", "ok", None),
             "gpu_util": pick(None, float("nan"), rnd.uniform(0, 100)), "temp_c": pick(None, 85.0, rnd.uniform(60, 100)),
             "throttle_reasons": pick(None, 0, 0x40, 0x44), "loss": pick(None, 1.0, float("nan"), float("inf")),
             "grad_norm": pick(None, rnd.uniform(0, 20)), "threshold": pick(None, 10.0),
             "sm_clock_mhz": pick(None, 1400.0, rnd.uniform(500, 1500))} for _ in range(n)]
    df = pl.DataFrame(rows, schema={c: (pl.String if c == "level" else EVENT_SCHEMA[c]) for c in rows[0]})
    return df.with_columns(pl.col("level").cast(EVENT_SCHEMA["level"]))


@pytest.mark.parametrize("seed", range(40))
def test_known_is_where_the_condition_can_be_true_or_false(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    r, errors = parse_rule(write_rule(tmp_path, "[match]\n" + _random_cond(rnd) + "\n", f"k{seed}"))
    assert r is not None, [str(e) for e in errors]
    c = r.clause
    t, f = _can_be_per_leaf(c.cond, c.per)
    df = _random_rows(rnd, 200)
    got = df.select(plan._known(c).alias("new"), (t | f).alias("old"))
    assert got["new"].null_count() == 0
    assert got["new"].to_list() == got["old"].to_list(), _random_cond(random.Random(seed))


# --- a by-step clause's steps combined without float copies of the rows' flags ----------------


def _step_frame_before(rows: pl.DataFrame, clause: Any, s: str) -> pl.DataFrame:
    """The census's former `_step_frame` (all the rows at once in numpy, counts as float weights
    of bincount, nulls filled by a copy, means divided into a new array)."""
    import numpy as np

    from forensics.rules.compile import step_values
    from forensics.rules.spec import column_kind

    vals = step_values(clause)
    out = {"rank": pl.Int32, "step": pl.Int64, f"{s}_e": pl.Boolean, f"{s}_ts": EVENT_SCHEMA["timestamp"],
           **{f"{s}_v_{c}": (pl.Float64 if c in clause.sums or column_kind(c) == "float" else EVENT_SCHEMA.get(c, pl.Float64))
              for c in vals}}
    rank = rows.get_column("rank").to_numpy()
    step = rows.get_column("step").to_numpy()
    same = rank[1:] == rank[:-1]
    blocks = rank[np.flatnonzero(np.concatenate(([True], ~same)))]
    if len(np.unique(blocks)) != len(blocks) or not np.all(~same | (step[1:] >= step[:-1])):
        order = np.lexsort((step, rank))
        rows = rows[order]
        rank, step = rank[order], step[order]
    cut = np.ones(len(rank), dtype=bool)
    cut[1:] = (rank[1:] != rank[:-1]) | (step[1:] != step[:-1])
    starts = np.flatnonzero(cut)
    group = np.cumsum(cut) - 1
    ts = rows.get_column("timestamp").to_physical().to_numpy()
    cols: dict[str, Any] = {"rank": rank[starts], "step": step[starts], f"{s}_e": np.ones(len(starts), dtype=bool),
                            f"{s}_ts": np.maximum.reduceat(ts, starts)}
    for c in vals:
        v = rows.get_column(c)
        n = np.bincount(group, weights=v.is_not_null().to_numpy(), minlength=len(starts))
        if c in clause.sums or column_kind(c) == "float":
            tot = np.bincount(group, weights=v.cast(pl.Float64).fill_null(0.0).to_numpy(), minlength=len(starts))
            got = tot if c in clause.sums else tot / np.maximum(n, 1)
        else:
            got = np.maximum.reduceat(v.cast(pl.Int64).fill_null(np.iinfo(np.int64).min).to_numpy(), starts)
        cols[f"{s}_v_{c}"] = pl.Series(got).scatter(np.flatnonzero(n == 0), None) if (n == 0).any() else got
    return pl.DataFrame(cols).with_columns(pl.col(k).cast(t) for k, t in out.items())


@pytest.mark.parametrize("seed", range(30))
def test_step_frame_combines_steps_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Sums (added in the rows' order: long steps too), means of floats, maxima of integers, per
    (rank, step) of rows in blocks or interleaved, with nulls, NaN, gaps in the steps and several
    chunks (a streaming query's output), combined in pieces of whole ranks of any size."""
    from polars.testing import assert_frame_equal

    rnd = random.Random(seed)
    monkeypatch.setattr(plan, "PIECE_ROWS", rnd.choice([1, 7, 50, 1 << 18]))
    body = ('[match]\nby = "step"\nsum = ["comm_ms"]\nall = [{ col = "comm_ms", op = ">", expr = "0.4 * step_time_ms" },\n'
            '       { col = "throttle_reasons", op = "bits", value = 64 }]\n')
    r, errors = parse_rule(write_rule(tmp_path, body, f"s{seed}"))
    assert r is not None, [str(e) for e in errors]
    n = rnd.randint(1, 400)
    long = rnd.random() < 0.5      # few steps: groups of dozens of rows
    rows = [{"rank": rnd.randint(0, 9), "step": rnd.randint(0, 3 if long else 40) * rnd.choice([1, 1, 7]),
             "timestamp": T0 + timedelta(seconds=rnd.randint(0, 50)),
             "comm_ms": rnd.choice([None, float("nan"), rnd.uniform(0, 1e3), 1e16, 0.1]),
             "step_time_ms": rnd.choice([None, rnd.uniform(0, 1e3), float("nan")]),
             "throttle_reasons": rnd.choice([None, 0, 0x40, -5])} for _ in range(n)]
    df = pl.DataFrame(rows, schema={c: EVENT_SCHEMA[c] for c in rows[0]})
    order = rnd.choice(["shuffled", "store", "split"])
    if order != "shuffled":        # a store's order: each rank one block, steps never going back
        df = df.sort("rank", "step", maintain_order=True)
    if order == "split":           # a rank in two blocks (two parts of it), each in order
        late = (pl.col("rank") == df["rank"][0]) & (pl.col("step") > df["step"].median())
        df = pl.concat([df.filter(~late), df.filter(late)])
    cut = sorted(rnd.sample(range(n + 1), min(n + 1, 3)))
    df = pl.concat([df.slice(a, b - a) for a, b in zip([0, *cut], [*cut, n])], rechunk=False)
    assert_frame_equal(plan._step_frame(df, r.clause, "_c"), _step_frame_before(df, r.clause, "_c"), check_exact=True)
