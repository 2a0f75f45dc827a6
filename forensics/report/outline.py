"""What a report says, in reading order, before any layout: shared by the text and md renderers.

Owns the reading of a `Report` for humans: the one-sentence verdict, the chain bottom-up, which
findings the root cause explains (compressed to one line each, "ranks 0–2,4–7: NCCL timeout —
explained by rank 3 CUDA OOM 0.4 s earlier"), the other findings, and the per-rank table as
strings. Must not judge the run (the passes did) nor know about rich or Markdown.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .fmt import clock, cost_text, counted, duration, is_iso, kind_label, num, rank_phrase, seconds_between
from .model import LAYERS, SEVERITIES, ChainLink, Finding, Report, local_ranks_phrase


FELT_BY_OTHERS = {"nccl_timeout", "comm_bound"}
# Per-rank rows the text and md reports print whole. A bigger run's table prints the rows of the
# ranks the report singles out (`singled_out`) and says how to list the others: 10,240 rows
# (20,000 lines of a terminal, 1 MB of Markdown: more than a CI job summary takes) bury the
# findings; `forensics ranks` and the JSON report keep every row.
PER_RANK_ROWS = 64


@dataclass
class Explained:
    finding: Finding
    line: str                       # the compressed sentence
    also: list[str] = field(default_factory=list)   # further findings saying the same


@dataclass
class Outline:
    header: str
    verdict: str
    summary: str | None
    healthy: bool
    root: Finding | None
    chain: list[ChainLink]
    explained: list[Explained]
    others: list[Finding]
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    fault_ranks: list[int] = field(default_factory=list)
    others_title: str = "Findings"
    singled_out: list[int] = field(default_factory=list)
    accounting: str = ""        # how many of the input's ERROR lines the verdict accounts for

    def printed_rows(self) -> tuple[list[list[str]], int]:
        """The per-rank rows the text and md reports print, and how many they leave out: every
        row up to PER_RANK_ROWS, else those of the ranks singled out (at most PER_RANK_ROWS)."""
        if len(self.rows) <= PER_RANK_ROWS or "rank" not in self.columns:
            return self.rows, 0
        key = self.columns.index("rank")
        named = {str(r) for r in self.singled_out[:PER_RANK_ROWS]}
        shown = [r for r in self.rows if r[key] in named]
        return shown, len(self.rows) - len(shown)

    def left_out_note(self, left_out: int, store: str | None) -> str:
        """The line under a per-rank table that leaves `left_out` rows out."""
        what = f"forensics ranks {store}" if store else "forensics ranks LOGS"
        return (f"{left_out:,} other ranks not shown: `{what}` lists every rank, and the JSON report "
                f"(--format json) holds all {len(self.rows):,} rows.")


def few_rank_findings(report: Report) -> list[int]:
    """The ranks of the WARN/ERROR findings that single out a few ranks (at most a quarter of the
    run: a finding naming most ranks singles out nobody; log hygiene aside), ERRORs first."""
    few = max(1, report.run.ranks // 4)
    out: list[int] = []
    for f in sorted(report.findings, key=lambda f: {"ERROR": 0, "WARN": 1}.get(f.severity, 2)):
        if f.kind != "log_hygiene" and f.severity in ("ERROR", "WARN") and 0 < len(f.ranks) <= few:
            out.extend(f.ranks)
    return list(dict.fromkeys(int(r) for r in out))


def singled_out(report: Report) -> list[int]:
    """The ranks a reader of the report looks for in its per-rank table: the root cause's, then
    those of the findings that name a few ranks (`few_rank_findings`)."""
    rc = [int(r) for r in report.root_cause.ranks] if report.root_cause is not None else []
    return list(dict.fromkeys([*rc, *few_rank_findings(report)]))


def _day_time(ts: str | None) -> tuple[str, str]:
    if not ts:
        return "?", "?"
    t = ts.replace("T", " ").replace("Z", "").replace("+00:00", "")
    day, _, time = t.partition(" ")
    return day, time[:8] if time else "?"


def header(report: Report) -> str:
    run = report.run
    d0, t0 = _day_time(run.start)
    d1, t1 = _day_time(run.end)
    span = f"{d0} {t0} → {t1 if d1 == d0 else f'{d1} {t1}'} UTC" if run.start else "no timestamps"
    who = f"{run.ranks} rank{'s' if run.ranks != 1 else ''}"
    if run.hosts:
        who += f" on {run.hosts} host{'s' if run.hosts != 1 else ''}"
    parts = [
        who,
        span,
        f"{run.events:,} events",
    ]
    if run.rejected_lines:
        parts.append(f"{run.rejected_lines:,} lines rejected")
    if run.crashed:
        parts.append(_ending(report))
    elif any(f.evidence.get("restarted") for f in report.findings):
        parts.append("restarted after a failure")   # failures/restart.py: the job trained on after it
    return " · ".join(parts)


# How a run that failed ended, by the kind of its failure (every kind passes.rootcause counts as
# one): an exception, an OOM or a GPU error kills the process (a crash); a hung or timed-out run
# did not crash.
ENDINGS = {
    "crash": "ended in a crash",
    "oom": "ended in a crash",
    "host_oom": "ended in a crash",
    "gpu_error": "ended in a crash",
    "nccl_timeout": "ended in an NCCL timeout",
    "hang": "hung",
    "collective_mismatch": "stopped at mismatched collectives",
}


def _ending(report: Report) -> str:
    """How the run ended: the root cause's failure, else the first failure found."""
    rc = report.root_cause
    fs = report.findings
    root = fs[rc.finding] if rc is not None and rc.finding is not None and 0 <= rc.finding < len(fs) else None
    if root is None or root.kind not in ENDINGS:
        failed = sorted((f for f in fs if f.kind in ENDINGS), key=lambda f: f.first_seen or "~")
        root = failed[0] if failed else None
    return ENDINGS[root.kind] if root is not None else "ended in a failure"


def covered(report: Report) -> set[int]:
    """Indexes of the root finding and of everything it explains, directly or through others."""
    rc = report.root_cause
    if rc is None or rc.finding is None or not 0 <= rc.finding < len(report.findings):
        return set()
    seen: set[int] = set()
    todo = [rc.finding]
    while todo:
        i = todo.pop()
        if i in seen or not 0 <= i < len(report.findings):
            continue
        seen.add(i)
        todo.extend(report.findings[i].explains)
    return seen


def _explainer(report: Report, i: int, cover: set[int]) -> Finding | None:
    """The covered finding that explains finding i (the root cause when several do)."""
    rc = report.root_cause
    cands = [j for j in cover if i in report.findings[j].explains and j != i]
    if rc is not None and rc.finding in cands:
        return report.findings[rc.finding]  # type: ignore[index]
    return report.findings[min(cands)] if cands else None


def compress(f: Finding, by: Finding | None) -> str:
    # A timeout or a communication-bound step shows on the ranks that wait: name those (the
    # victims, when the diagnosis knows them). Any other kind describes the rank it names.
    shown = (f.victims or f.ranks) if f.kind in FELT_BY_OTHERS else (f.ranks or f.victims)
    who = rank_phrase(shown) if shown else "all ranks"
    line = f"{who}: {kind_label(f.kind)}"
    if by is None:
        return line
    if by.kind == f.kind and set(f.ranks) <= set(by.ranks):
        # a rule and a pass that saw the same fault: say so instead of "explained by itself"
        return f"{line} — the same fault, also reported by"
    by_who = rank_phrase(by.ranks) if by.ranks else local_ranks_phrase(by.local_ranks) if by.local_ranks else "the run"
    line += f" — explained by {by_who} {kind_label(by.kind)}"
    # a line without a time of its own is only placed after its file's last timed line: no interval
    # is measured from it ("3.8 s earlier" from an OOM traceback placed at :52.000001)
    untimed = any((x.evidence or {}).get("time_of_its_own") is False for x in (by, f))
    dt = None if untimed else seconds_between(by.first_seen, f.first_seen)
    if untimed:
        line += " (no time of its own to measure between them)"
    elif dt is not None:
        line += " at the same time" if abs(dt) < 0.05 else f" {duration(abs(dt))} {'earlier' if dt > 0 else 'later'}"
    return line


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return num(v)
    if is_iso(v):
        return clock(v)
    if isinstance(v, (list, tuple)):
        return ",".join(_cell(x) for x in v) or "-"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_cell(x)}" for k, x in v.items()) or "-"
    return str(v)


def accounting(report: Report) -> str:
    """How many of the input's ERROR lines the verdict accounts for (passes/unexplained.py): the
    sentence every format prints under the verdict; "" when the report was built without
    counting them."""
    run = report.run
    total, done = run.error_lines, run.error_lines_accounted
    if total is None or done is None:
        return ""
    if total == 0:
        return "No ERROR line in the input."
    left = total - done
    return (f"Accounts for {done:,} of {total:,} ERROR line{'s' if total != 1 else ''}"
            + (f"; {left:,} in unexplained errors below." if left else "."))


def _severity_key(f: Finding) -> tuple[int, float, str, str]:
    # within a severity the costliest first (passes/cost.py); findings without a cost keep time order
    sev = SEVERITIES.index(f.severity) if f.severity in SEVERITIES else 0
    return (-sev, -f.cost_seconds, f.first_seen or "", f.rule)


def outline(report: Report) -> Outline:
    rc = report.root_cause
    cover = covered(report)
    root = report.findings[rc.finding] if rc is not None and rc.finding is not None and rc.finding in cover else None
    explained: list[Explained] = []
    for i in sorted(cover, key=lambda i: (report.findings[i].first_seen or "", i)):
        f = report.findings[i]
        if f is root:
            continue
        line = compress(f, _explainer(report, i, cover))
        same = next((x for x in explained if x.line == line), None)
        if same is None:
            explained.append(Explained(f, line))
        else:   # a rule and a pass reporting the same symptom: one line, both named
            same.also.append(f.rule)
    for x in explained:
        if x.line.endswith(" also reported by"):
            x.line += " " + ", ".join([x.finding.rule, *x.also])
        elif x.also:
            x.line += f" (also {', '.join(x.also)})"
    others = sorted((f for i, f in enumerate(report.findings) if i not in cover), key=_severity_key)
    summary: str | None = None
    if rc is not None:
        who = (rank_phrase(rc.ranks) if rc.ranks else local_ranks_phrase(rc.local_ranks) if rc.local_ranks
               else "a process the log does not name" if rc.kind == "unexplained_error" else "no single rank")
        verdict = f"Root cause: {kind_label(rc.kind)} on {who} ({rc.layer} layer)"
        verdict += f"; {cost_text(rc.cost)}." if rc.cost else "."
        if rc.kind == "no_data":   # about the input, not a rank: nothing was read, nothing is healthy
            verdict = "No usable data: the input holds no event a diagnosis can use; the run is not healthy."
        # the JSON summary is self-contained ("X on rank N (layer): ..."); the verdict line above
        # already says the first half, so the text shows only what follows it
        summary = rc.summary.split(f"({rc.layer} layer): ", 1)[-1]
        healthy = False
    elif not any(f.severity in ("WARN", "ERROR") for f in report.findings):
        # INFO findings are notes (e.g. on the logs themselves), not faults
        notes = len(report.findings)
        healthy = not report.run.crashed
        verdict = (f"The run crashed, but no finding explains it ({report.run.events:,} events read)."
                   if report.run.crashed else
                   f"Healthy: nothing wrong found in {counted(report.run.ranks, 'rank')} and {counted(report.run.events, 'event')}.")
        if notes:
            verdict += f" {notes} note{'s' if notes != 1 else ''} below."
    else:
        healthy = False
        n = len(report.findings)
        verdict = f"No single root cause: {n} finding{'s' if n != 1 else ''}, none explaining the others."
    order = {layer: i for i, layer in enumerate(LAYERS)}
    chain = sorted(rc.chain, key=lambda c: order.get(c.layer, len(LAYERS))) if rc is not None else []
    columns = list(dict.fromkeys(k for row in report.per_rank for k in row))
    rows = [[_cell(row.get(c)) for c in columns] for row in report.per_rank]
    others_title = ("Other findings (not explained by the chain)" if rc is not None
                    else "Notes" if healthy else "Findings")
    return Outline(
        header=header(report), verdict=verdict, summary=summary, healthy=healthy, root=root, chain=chain,
        explained=explained, others=others, columns=columns, rows=rows,
        fault_ranks=list(rc.ranks) if rc is not None else [], others_title=others_title,
        singled_out=singled_out(report), accounting=accounting(report),
    )
