"""What to do next: the sentence of rules/next_steps.toml (or a rule's own `next`) filled in.

Owns `attach_next(findings, root, events, ...)`: for every finding, its kind's sentence (a rule's
own `next` wins) with {placeholders} replaced by what the finding and the logs of its rank(s)
say: host, GPU index (local_rank), data path, collective, sequence number, step, pid, the first
cited file:line, the other processes on an OOM's GPU, a scheduler's job id and reason. A
placeholder the logs cannot fill becomes a readable stand-in ("its host (not named in the
logs)"), never an empty gap and never a made-up location. A segment in square brackets is kept
only when the logs fill every placeholder in it: `{rank}[ on {host}]`, and `[A|B]` reads A when
all of A is known, else B — so a sentence can use what the report knows (the job id, the other
processes) and fall back when it does not. The root cause takes its finding's sentence.

Must not judge anything: it neither adds nor reorders findings; the sentences are data
(validated by forensics.rules.spec.next_step_error, checked for every kind by `rules check`).
"""
from __future__ import annotations

import re
import string
from typing import Any

import polars as pl

from .. import host_names
from ..report.model import Finding, RootCause
from ..report.text import _where
from ..report.fmt import memory

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
    out = {int(r["rank"]): r for r in df.iter_rows(named=True)}
    if any(host_names.is_loopback(r.get("host")) for r in out.values()):
        # the machine a loopback name stands for: the log's one named host, where it names one
        every = events.select(pl.col("host").drop_nulls().unique()).collect().to_series().to_list()
        for r in out.values():
            r["host"] = host_names.resolve(r.get("host"), every)
    return out


def _ranks_text(ranks: list[int]) -> str:
    from ..passes.evidence import rank_ranges

    if not ranks:
        return "the ranks in the evidence"
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks).replace(',', ', ')}"


# The NCCL watchdog's line names the work it waited for (ProcessGroupNCCL.cpp, WorkNCCL::logPrefix /
# operator<<): "WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=..., Timeout(ms)=600000)".
_WORK = re.compile(r"SeqNum=(\d+),\s*OpType=(\w+)")
_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")


def _others(ev: dict[str, Any]) -> str | None:
    """The other processes an OOM's allocator listed on its GPU (pid, memory), when the finding
    established that they are others (`shared_gpu`)."""
    if not ev.get("shared_gpu"):
        return None
    mine = ev.get("failing_pid")
    listed = [o for o in ev.get("listed_processes") or [] if isinstance(o, dict) and o.get("pid") != mine]
    n = ev.get("other_processes") or len(listed)
    if not n:
        return None
    shown = ", ".join(f"pid {o.get('pid')} ({memory(float(o['mb']))})" for o in listed[:4] if o.get("mb") is not None)
    more = f" and {n - 4} more" if n > 4 and shown else ""
    return f"{n} other process{'es' if n != 1 else ''}" + (f" ({shown}{more})" if shown else "")


def _values(f: Finding, facts: dict[int, dict[str, Any]]) -> tuple[dict[str, str], set[str]]:
    """Every placeholder's text, and the names the finding or the logs actually filled."""
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

    work = next((m for e in f.lines for m in [_WORK.search(e.text or "")] if m), None)
    host = pick("host") or mine.get("host")
    gpu = pick("local_rank", "gpu", "gpu_index", "device")
    gpu = gpu if gpu is not None else mine.get("local_rank")
    path = pick("path", "shard", "file") or mine.get("path")
    coll = pick("collective", "op", "op_type") or mine.get("collective") or (work.group(2).lower() if work else None)
    seq = pick("seq", "failing_seq")
    seq = seq if seq is not None else mine.get("seq")
    seq = seq if seq is not None else (work.group(1) if work else None)
    step = pick("first_step", "step", "reference_step", "spike_step")
    pid = pick("pid", "failing_pid")
    job = pick("job", "job_id")
    reason = pick("reason")
    others = _others(ev)
    where = _where(f.lines[0]) if f.lines else None
    known = {name for name, v in (("rank", first), ("ranks", f.ranks or None), ("rank_id", first), ("host", host),
                                  ("gpu", gpu), ("path", path), ("collective", coll), ("seq", seq), ("step", step),
                                  ("pid", pid), ("where", where), ("job", job), ("reason", reason), ("others", others))
             if v is not None}
    return {
        "rank": who,
        "ranks": _ranks_text(list(f.ranks)),
        "rank_id": str(first) if first is not None else "N",
        "host": str(host) if host else "its host (not named in the logs)",
        "gpu": (f"GPU {gpu} ({who})" if first is not None else f"GPU {gpu}") if gpu is not None
               else (f"the GPU of {who}" if first is not None else "the GPU in the evidence"),
        "path": str(path) if path else "the data path it reads (not named in the logs)",
        "collective": str(coll) if coll else "the collective",
        "seq": str(seq) if seq is not None else "unknown",
        "step": str(step) if step is not None else "the first step cited",
        "pid": str(pid) if pid is not None else "PID",
        "where": where or "the cited line",
        "job": str(job) if job else "JOBID",
        "reason": str(reason).lower() if reason else "a reason the logs do not give",
        "others": others or "other processes",
    }, known


def _names(text: str) -> list[str]:
    return [n for _, n, _, _ in string.Formatter().parse(text) if n is not None]


def _substitute(text: str, vals: dict[str, str]) -> str:
    out = []
    for literal, name, _, _ in string.Formatter().parse(text):
        out.append(literal)
        if name is not None:
            out.append(vals.get(name, "{" + name + "}"))
    return "".join(out)


def fill(template: str, f: Finding, facts: dict[int, dict[str, Any]]) -> str:
    """`template` with its {placeholders} filled from the finding and its ranks' facts, and its
    [optional|fallback] segments resolved by what is known."""
    vals, known = _values(f, facts)

    def segment(m: re.Match[str]) -> str:
        first, _, rest = m.group(1).partition("|")
        return first if all(n in known for n in _names(first)) else rest

    text = _substitute(_OPTIONAL.sub(segment, template), vals)
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
