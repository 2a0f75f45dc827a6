"""What to do next: the sentence of rules/next_steps.toml (or a rule's own `next`) filled in.

Owns `attach_next(findings, root, events, ...)`: for every finding, its kind's sentence (a rule's
own `next` wins) with {placeholders} replaced by what the finding and the logs of its rank(s)
say: host, GPU index (local_rank), data path, collective, sequence number, step, pid, the first
cited file:line. A placeholder the logs cannot fill becomes a readable stand-in ("the host of
rank 3"), never an empty gap. The root cause takes its finding's sentence.

Must not judge anything: it neither adds nor reorders findings; the sentences are data
(validated by forensics.rules.spec.next_step_error, checked for every kind by `rules check`).
"""
from __future__ import annotations

import string
from typing import Any

import polars as pl

from ..report.model import Finding, RootCause
from ..report.text import _where

_FACT_COLUMNS = ("host", "local_rank", "path", "collective", "seq")


def rank_facts(events: pl.LazyFrame, ranks: set[int]) -> dict[int, dict[str, Any]]:
    """Per rank: its host and GPU index (first seen), the last data path and collective it named."""
    if not ranks:
        return {}
    have = set(events.collect_schema().names())
    cols = [c for c in _FACT_COLUMNS if c in have]
    if "rank" not in have or not cols:
        return {}
    aggs = [pl.col(c).drop_nulls().first().alias(c) if c in ("host", "local_rank") else pl.col(c).drop_nulls().last().alias(c)
            for c in cols]
    df = (events.select("rank", "timestamp", *cols).filter(pl.col("rank").is_in(sorted(ranks)))
          .sort("rank", "timestamp", nulls_last=True).group_by("rank").agg(aggs).collect())
    return {int(r["rank"]): r for r in df.iter_rows(named=True)}


def _ranks_text(ranks: list[int]) -> str:
    from ..passes.evidence import rank_ranges

    if not ranks:
        return "the ranks in the evidence"
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks).replace(',', ', ')}"


def _values(f: Finding, facts: dict[int, dict[str, Any]]) -> dict[str, str]:
    ev = f.evidence or {}
    first = f.ranks[0] if f.ranks else None
    mine = facts.get(first, {}) if first is not None else {}
    who = f"rank {first}" if first is not None else "the rank named above"

    def pick(*keys: str) -> Any:
        for k in keys:
            v = ev.get(k)
            if v not in (None, "", []):
                return v
        return None

    host = pick("host") or mine.get("host")
    gpu = pick("local_rank", "gpu", "gpu_index")
    gpu = gpu if gpu is not None else mine.get("local_rank")
    path = pick("path", "shard", "file") or mine.get("path")
    coll = pick("collective", "op", "op_type") or mine.get("collective")
    seq = pick("seq", "failing_seq")
    seq = seq if seq is not None else mine.get("seq")
    step = pick("first_step", "step", "reference_step", "spike_step")
    pid = pick("pid")
    where = _where(f.lines[0]) if f.lines else None
    return {
        "rank": who,
        "ranks": _ranks_text(list(f.ranks)),
        "rank_id": str(first) if first is not None else "N",
        "host": str(host) if host else (f"the host of {who}" if first is not None else "the host in the evidence"),
        "gpu": (f"GPU {gpu} ({who})" if first is not None else f"GPU {gpu}") if gpu is not None
               else (f"the GPU of {who}" if first is not None else "the GPU in the evidence"),
        "path": str(path) if path else "the data path it reads (not named in the logs)",
        "collective": str(coll) if coll else "the collective",
        "seq": str(seq) if seq is not None else "unknown",
        "step": str(step) if step is not None else "the first step cited",
        "pid": str(pid) if pid is not None else "PID",
        "where": where or "the cited line",
    }


def fill(template: str, f: Finding, facts: dict[int, dict[str, Any]]) -> str:
    """`template` with its {placeholders} filled from the finding and its ranks' facts."""
    vals = _values(f, facts)
    out = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is not None:
            out.append(vals.get(name, "{" + name + "}"))
    text = "".join(out)
    return text[:1].upper() + text[1:]


def attach_next(findings: list[Finding], root: RootCause | None, events: pl.LazyFrame,
                steps: dict[str, str], rule_next: dict[str, str] | None = None) -> None:
    """Set `next` on every finding (its rule's sentence, else its kind's) and on the root cause."""
    rule_next = rule_next or {}
    wanted = {r for f in findings for r in f.ranks[:1]}
    facts = rank_facts(events, wanted)
    for f in findings:
        template = rule_next.get(f.rule) or steps.get(f.kind)
        f.next = fill(template, f, facts) if template else None
    if root is not None:
        if root.finding is not None and 0 <= root.finding < len(findings):
            root.next = findings[root.finding].next
        elif root.kind in steps:
            stand_in = Finding(rule="root_cause", kind=root.kind, layer=root.layer, severity="ERROR",
                               ranks=list(root.ranks), title=root.summary)
            root.next = fill(steps[root.kind], stand_in, rank_facts(events, set(root.ranks[:1])))
