"""The census's shortcuts (forensics.rules.plan) held to the computations they replaced, on random
data: where a clause's condition may be known."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from forensics.rules import plan
from forensics.rules.compile import compile_leaf
from forensics.rules.spec import Cond, Leaf, parse_rule
from forensics.schema import EVENT_SCHEMA

from test_rules_engine import write_rule

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
