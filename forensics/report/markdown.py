"""The Markdown report, for tickets and post-mortems: same reading order as the terminal report.

Owns Markdown layout and escaping (table pipes, backticks in log text). Must not judge anything:
it lays out `outline()`.
"""
from __future__ import annotations

from .fmt import cited_clock, cost_text
from .model import Evidence, Finding, Report, basis_phrase
from .outline import outline

EVIDENCE_PER_CLAIM = 3


def _code(s: str) -> str:
    return "`" + s.replace("`", "'") + "`"


def _text(s: str) -> str:
    """Log text in Markdown prose: most renderers pass raw HTML through (a host named
    `node<script>` must not become a tag), so `<` is written as an entity (no tag, comment or
    HTML block can open without it; code spans need nothing: they show their text as is)."""
    return s.replace("<", "&lt;")


def _cell(s: str) -> str:
    return _text(s).replace("|", "\\|").replace("\n", " ")


def _evidence(e: Evidence) -> str:
    bits = [_code(e.where)]
    if e.rank is not None:
        bits.append(f"rank {e.rank}")
    if e.timestamp:
        bits.append(cited_clock(e.timestamp, e.aligned_timestamp))
    if e.text:
        bits.append(_code(e.text))
    return " · ".join(bits)


def _finding(f: Finding) -> list[str]:
    phrase = basis_phrase(f.basis, f.basis_weak)
    out = [f"- **{f.severity}** · {f.layer} · `{f.kind}` · rule `{f.rule}`" + (f" · {phrase}" if phrase else "")
           + f" — {_text(f.title)}" + (f" _({cost_text(f.cost, short=True)})_" if f.cost else "")]
    out += [f"  - {_evidence(e)}" for e in f.lines[:EVIDENCE_PER_CLAIM]]
    if f.next:
        out.append(f"  - next: {_text(f.next)}")
    return out


def render_markdown(report: Report) -> str:
    o = outline(report)
    title = f"# Diagnosis of {_code(report.run.store)}" if report.run.store else "# Training run diagnosis"
    md: list[str] = [title, "", f"_{o.header}_", ""]
    md += [f"**{_text(o.verdict)}**", ""]
    if o.accounting:
        md += [_text(o.accounting), ""]
    if o.summary:
        md += [_text(o.summary), ""]
    rc = report.root_cause
    if rc is not None and (phrase := basis_phrase(rc.basis, rc.basis_weak)):
        md += [f"_Why this rank: {phrase}._", ""]
    if o.chain:
        md += ["## Chain, bottom-up", ""]
        for i, c in enumerate(o.chain, 1):
            md.append(f"{i}. **{c.layer}** — {_text(c.finding)}")
            md += [f"   - {_evidence(e)}" for e in c.lines[:EVIDENCE_PER_CLAIM]]
        md.append("")
    elif o.root is not None:
        md += ["## Root finding", "", *_finding(o.root), ""]
    if report.root_cause is not None and report.root_cause.next:
        md += ["## Next", "", _text(report.root_cause.next), ""]
    if o.explained:
        md += ["## Explained by the root cause", ""]
        for x in o.explained:
            cite = f" ({_code(x.finding.lines[0].where)})" if x.finding.lines else ""
            md.append(f"- {_text(x.line)}{cite}")
        md.append("")
    if o.others:
        md += [f"## {o.others_title}", ""]
        for f in o.others:
            md += _finding(f)
        md.append("")
    from ..render.fr_table import report_block

    if fr := report_block(report):     # the Flight Recorder table (forensics fr-table), when dumps were read
        md += ["## Flight Recorder", "", "```", fr, "```", ""]
    rows, left_out = o.printed_rows()
    if rows or left_out:
        md += ["## Per rank", ""]
    if rows:
        md += ["| " + " | ".join(_cell(c) for c in o.columns) + " |", "|" + "|".join("---" for _ in o.columns) + "|"]
        rank_col = o.columns.index("rank") if "rank" in o.columns else None
        faults = {str(r) for r in o.fault_ranks}
        for row in rows:
            cells = [_cell(c) for c in row]
            if rank_col is not None and cells[rank_col] in faults:
                cells[rank_col] = f"**{cells[rank_col]}**"
            md.append("| " + " | ".join(cells) + " |")
        md.append("")
        if faults and rank_col is not None:
            md += ["Ranks in bold are at fault (root cause).", ""]
    if left_out:
        md += [_text(o.left_out_note(left_out, report.run.store)), ""]
    return "\n".join(md).rstrip("\n") + "\n"
