"""Every rule over a run's events: `evaluate(events, rules) -> findings`, ordered by first seen.

Owns the order of work only: the census (forensics.rules.plan) says which rules can match where
and fetches their rows, forensics.rules.compile gives each rule's query and finding. Lives apart
from both so that the planner may use the compiler without the compiler knowing the planner.
"""
from __future__ import annotations

import polars as pl

from ..report.model import Finding
from .compile import finding_of, rule_query
from .spec import Rule


def evaluate(events: pl.LazyFrame, rules: list[Rule], *, census: bool = True) -> list[Finding]:
    """Every rule over the events; findings ordered by when they were first seen.

    With `census` (always, but in tests that hold it against the direct way), one query over the
    events finds which rules can match on which ranks (forensics.rules.plan), one more reads the
    rows of those, and each of those rules is evaluated over them in memory. Without it, each rule
    is one query over all the events, as the rule's definition reads."""
    if not rules:
        return []
    if census:
        # the planner (and numpy) imported here: loading the rules needs neither, and diagnose
        # evaluates them on a thread of their own, beside the step table
        from .plan import candidate_rows

        rows = candidate_rows(events, rules)
        todo = [(r, rule_query(r, rw)) for r, rw in zip(rules, rows) if rw is not None]
    else:
        todo = [(r, rule_query(r, lambda _c: events)) for r in rules]
    # One rule at a time: collected together, the queries' peaks add up (3.0 GB on a 8.4 M-event
    # store vs 1.5 GB one after another, when each rule scanned the store).
    frames = [q.collect() for _, q in todo]
    found = [f for (r, _), df in zip(todo, frames) if (f := finding_of(r, df)) is not None]
    return sorted(found, key=lambda f: (f.first_seen or "", f.rule))
