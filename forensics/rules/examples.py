"""A rule's `[[examples]]` run through the real compiler: what `forensics rules check` proves.

Owns turning example events into an event frame (EVENT_SCHEMA, each row citing the rule file)
and comparing the outcome with `expect`. Must not special-case any rule: an example passes only
if `evaluate` itself matches (or does not match) it.
"""
from __future__ import annotations

from typing import Any

import polars as pl

from ..schema import EVENT_SCHEMA, conform
from .evaluate import evaluate
from .spec import Example, Rule, RuleError


def example_frame(rule: Rule, ex: Example) -> pl.DataFrame:
    """The example's events as a conformed event table; raises ValueError on a bad value."""
    rows: list[dict[str, Any]] = []
    for i, r in enumerate(ex.rows):
        rows.append({**r, "source_file": f"{rule.path.name}#{ex.key}", "line": i + 1})
    cols = list(dict.fromkeys(c for r in rows for c in r))
    data: dict[str, pl.Series] = {}
    for c in cols:
        dtype = EVENT_SCHEMA[c]
        values = [r.get(c) for r in rows]
        try:
            if isinstance(dtype, pl.Enum):
                s = pl.Series(c, values, dtype=pl.String).cast(dtype)
            else:
                s = pl.Series(c, values, dtype=dtype, strict=True)
        except Exception as e:
            raise ValueError(f"column {c!r}: {str(e).splitlines()[0]}") from None
        data[c] = s
    return conform(pl.DataFrame(data))  # type: ignore[return-value]


def run_examples(rule: Rule, display: str) -> list[RuleError]:
    """Every example of one rule; an error for each that does not come out as expected."""
    errors: list[RuleError] = []
    for ex in rule.examples:
        try:
            frame = example_frame(rule, ex)
        except ValueError as e:
            errors.append(RuleError(display, f"{ex.key}.events", str(e)))
            continue
        found = [f for f in evaluate(frame.lazy(), [rule]) if f.rule == rule.id]
        note = f" ({ex.note})" if ex.note else ""
        if ex.expect == "match" and not found:
            errors.append(RuleError(display, ex.key, f"expected a match, the rule did not match{note}"))
        elif ex.expect == "match" and ex.ranks is not None and (found[0].ranks or found[0].victims) != sorted(ex.ranks):
            got = found[0].ranks or found[0].victims
            errors.append(RuleError(display, ex.key, f"expected ranks {sorted(ex.ranks)}, matched ranks {got}{note}"))
        elif ex.expect == "no_match" and found:
            errors.append(RuleError(display, ex.key, f"expected no match, got: {found[0].title}{note}"))
    return errors
