"""The CI job summary: a short Markdown block for `$GITHUB_STEP_SUMMARY` (or any CI page).

Owns `render_summary(report, policy)` and `render_lint_summary(result, policy)`: the verdict, the
root cause with what it cost (when the report carries a cost) and what to do next, whether the
`--fail-on` policy tripped, the top findings, and a per-rank table without links — short enough
to read on the job page (the full report is the artifact). `append_summary` appends, because
GitHub joins what every step writes to that file. Must not judge anything nor read the store.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BAD_ARGUMENT, ForensicsError
from .fmt import cost_text, kind_label, num, rank_phrase
from .markdown import _cell, _code, _text
from .model import SEVERITIES, Finding, Report
from .outline import outline, singled_out
from .text import _where

if TYPE_CHECKING:
    from ..config import FailOn
    from ..lint import LintResult

TOP_FINDINGS = 5
MAX_RANK_ROWS = 16
# The per-rank columns a reader of a job page looks at, in this order (when the report has them).
RANK_COLUMNS = [("rank", "rank"), ("host", "host"), ("last_step", "step"), ("step_time_ms", "step ms"),
                ("data_load_ms", "data ms"), ("comm_ms", "comm ms"), ("wait_ms", "wait ms"),
                ("gpu_util", "GPU %"), ("temp_c_max", "max °C"), ("warnings", "WARN"), ("errors", "ERROR")]


def _finding_line(f: Finding) -> str:
    who = rank_phrase(f.ranks) if f.ranks else "all ranks"
    line = f"- **{f.severity}** {kind_label(f.kind)} · {who} — {_cell(f.title)}"
    if f.cost:
        line += f" ({cost_text(f.cost, short=True)})"
    if f.lines:
        line += f" {_code(_where(f.lines[0]))}"
    return line


def _rank_rows(report: Report, faults: set[int]) -> tuple[list[str], list[list[str]], int]:
    rows = [r for r in report.per_rank if r.get("rank") is not None]
    cols = [(k, h) for k, h in RANK_COLUMNS if any(r.get(k) is not None for r in rows)]
    if len(rows) > MAX_RANK_ROWS:
        # the ranks the report singles out first (at fault, then named by a few-rank finding), then
        # the ranks that logged errors or warnings, then the slowest
        named = set(singled_out(report))

        def key(r: dict[str, Any]) -> tuple:
            return (r["rank"] not in named, -(r.get("errors") or 0), -(r.get("warnings") or 0), -(r.get("step_time_ms") or 0))
        shown = sorted(sorted(rows, key=key)[:MAX_RANK_ROWS], key=lambda r: r["rank"])
    else:
        shown = rows

    def cell(k: str, v: Any) -> str:
        if v is None:
            return "-"
        text = num(v) if isinstance(v, float) else str(v)
        return f"**{text}**" if k == "rank" and v in faults else _cell(text)

    return [h for _, h in cols], [[cell(k, r.get(k)) for k, _ in cols] for r in shown], len(rows) - len(shown)


def render_summary(report: Report, policy: "FailOn | None" = None, title: str = "forensics diagnose",
                   redact: bool = True) -> str:
    """The job summary of a diagnosis, in Markdown (no links: job pages strip or break them).
    `redact` masks secrets found in log text, as the other formats do."""
    if redact:
        from .redact import redact_report

        report = redact_report(report)
    o = outline(report)
    where = f" of {_code(report.run.store)}" if report.run.store else ""
    md = [f"### {title}{where}", "", f"**{_text(o.verdict)}**", ""]
    if o.accounting:
        md += [_text(o.accounting), ""]
    rc = report.root_cause
    if rc is not None:
        md += [_text(o.summary or rc.summary), ""]     # the verdict above states the root cause's cost
        if rc.next:
            md += [f"**Next:** {_text(rc.next)}", ""]
    from ..config import fails

    tripped = [f for f in report.findings if fails(policy, f)]
    if policy is not None:
        md += [f"CI: **{'failed' if tripped else 'passed'}** `--fail-on {policy.text}`"
               + (f" ({len(tripped)} finding{'s' if len(tripped) != 1 else ''})" if tripped else ""), ""]
    elif tripped:   # no input to diagnose fails CI without --fail-on (config.ALWAYS_FAILS)
        md += [f"CI: **failed** ({', '.join(sorted({f.kind for f in tripped}))})", ""]
    # a rule and a pass that saw the root cause's own fault are one finding, as the full report says
    # ("the same fault, also reported by"): listed once (the DeepSpeed OOM: "4 times" and "8 events")
    dup = [x for x in o.explained if " the same fault, also reported by" in x.line]
    same = {id(f) for x in dup for f in report.findings if f is x.finding or (f.rule in x.also and f.kind == x.finding.kind)}
    shown = [f for f in report.findings if f.severity != "INFO" and f.kind != "log_hygiene" and id(f) not in same] \
        or report.findings
    top = sorted(shown, key=lambda f: -SEVERITIES.index(f.severity))[:TOP_FINDINGS]
    if top:
        md += ["Top findings:", "", *(_finding_line(f) for f in top)]
        if len(report.findings) > len(top):
            md.append(f"- … {len(report.findings) - len(top)} more in the full report")
        md.append("")
    head, rows, hidden = _rank_rows(report, set(rc.ranks) if rc is not None else set())
    if rows:
        md += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|",
               *("| " + " | ".join(r) + " |" for r in rows)]
        if hidden:
            md.append(f"\n{hidden} more ranks in the full report.")
        md.append("")
    return "\n".join(md).rstrip("\n") + "\n\n"


def render_lint_summary(result: "LintResult", policy: "FailOn | None" = None) -> str:
    """The job summary of `forensics lint`: one row per check."""
    md = [f"### forensics lint of {_code(result.store or '?')}", "",
          f"**Worst: {result.worst}** · {result.events:,} events", ""]
    if policy is not None:
        tripped = [c for c in result.checks if policy.trips_check(c.id, c.status)]
        md += [f"CI: **{'failed' if tripped else 'passed'}** `--fail-on {policy.text}`", ""]
    md += ["| check | status | summary |", "|---|---|---|"]
    md += [f"| {c.id} | {c.status} | {_cell(c.summary)} |" for c in result.checks]
    return "\n".join(md) + "\n\n"


def render_compare_summary(result: Any) -> str:
    """The job summary of `forensics compare`: both runs, the verdict, one row per check."""
    from .compare_render import _check_status, _side

    md = ["### forensics compare", "", f"- {_cell(_side('baseline', result.baseline))}",
          f"- {_cell(_side('candidate', result.candidate))}", "", f"**{_cell(result.verdict)}**", "",
          "| | check | result |", "|---|---|---|"]
    md += [f"| {_check_status(c)} | {c.label} | {_cell(c.text)} |" for c in result.checks]
    return "\n".join(md) + "\n\n"


def append_summary(path: str, text: str) -> None:
    """Append `text` to `path` ($GITHUB_STEP_SUMMARY is shared by every step of the job)."""
    try:
        with Path(path).open("a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as e:
        raise ForensicsError(f"cannot write the job summary to {path}", where=path, reason=e.strerror,
                             code=BAD_ARGUMENT) from None
