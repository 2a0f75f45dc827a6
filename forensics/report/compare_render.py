"""How a comparison of two runs reads: text (rich, fixed width), Markdown, JSON, HTML, JUnit.

Owns the layout of a `forensics.compare.CompareResult` in every format: the verdict (PASS/FAIL
and why) first, the checks, the run-level figures side by side, the ranks that changed most,
new and resolved findings, the per-rank deltas; in HTML the two runs plotted together (step
time, throughput, loss at matched steps: baseline grey, candidate red) with charts.py. Must not
compute anything (compare.py did) nor read a run. Log text (finding titles) is escaped in HTML.
"""
from __future__ import annotations

import io
import json
import math
from typing import TYPE_CHECKING, Any

from ..errors import BAD_ARGUMENT, ForensicsError
from .fmt import cost_text, counted, num

if TYPE_CHECKING:
    from ..compare import CompareResult, Delta

FORMATS = ("text", "md", "json", "html", "junit")
CANDIDATE = "#d62728"


def render_compare(result: CompareResult, fmt: str, *, width: int = 100) -> str:
    if fmt == "json":
        return json.dumps(result.to_json(), indent=2, ensure_ascii=False, default=str) + "\n"
    if fmt == "md":
        return _markdown(result)
    if fmt == "html":
        return _html(result)
    if fmt == "junit":
        from ..compare import compare_junit_cases
        from .junit import render_junit

        return render_junit("forensics compare", compare_junit_cases(result))
    if fmt == "text":
        return _text(result, width)
    raise ForensicsError(f"unknown compare format {fmt!r}", reason=f"choose one of {', '.join(FORMATS)}", code=BAD_ARGUMENT)


# --- shared strings ---------------------------------------------------------------------------

def _side(name: str, s: Any) -> str:
    steps = f"steps {s.first_step}–{s.last_step}" if s.first_step is not None else "no steps"
    warm = f", compared from step {s.compared_from}" if s.compared_from is not None else ""
    warm += f" (warmup to {s.warmup_end})" if s.warmup_end is not None else ""
    wall = f", {num(s.wall_s)} s" if s.wall_s is not None else ""
    return f"{name}: {s.label or '?'} — {counted(len(s.ranks), 'rank')}, {steps}{warm}{wall}"


def _val(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "share":
        return f"{v:.1%}"
    if unit == "" and abs(v) < 1 and v != 0:
        return f"{v:.3g}"
    return num(v)


def _delta(d: Delta) -> str:
    if d.delta is None:
        return "-"
    if d.unit == "share":
        return f"{d.delta * 100:+.1f} pp"
    rel = f" ({d.rel:+.1%})" if d.rel is not None else ""
    dv = d.delta
    return (f"{dv:+.3g}" if abs(dv) < 10 else f"{dv:+,.0f}") + rel


def _mark(d: Delta, limit: float = 0.05) -> str:
    """'worse' / 'better' beyond 5%, for the eye (the checks decide pass/fail)."""
    r = d.regression
    if r is None or abs(r) < limit:
        return ""
    return "worse" if r > 0 else "better"


def _check_status(c: Any) -> str:
    return "n/a" if c.passed is None else ("PASS" if c.passed else "FAIL")


def _finding(f: dict[str, Any]) -> str:
    from .fmt import kind_label, rank_phrase

    who = rank_phrase(f["ranks"]) if f["ranks"] else "the job"
    c = cost_text(f.get("cost"), short=True)
    return f"{f['severity']} {kind_label(f['kind'])} on {who}: {f['title']}" + (f" ({c})" if c else "")


RANK_COLUMNS = [("step_time_ms", "step ms"), ("own_ms", "data+compute ms"), ("data_load_ms", "data ms"),
                ("compute_ms", "compute ms"), ("wait_ms", "wait ms"), ("gpu_util", "GPU util %"),
                ("temp_c_max", "temp max °C"), ("sm_clock_mhz", "SM clock MHz")]


def _rank_cells(rc: Any) -> list[str]:
    out = [str(rc.rank) + (" *" if rc.changed else ""), rc.host or "-"]
    for key, _ in RANK_COLUMNS:
        d = rc.metrics[key]
        if d.baseline is None and d.candidate is None:
            out.append("-")
        else:
            ch = f" ({d.delta:+.3g})" if d.delta is not None and abs(d.delta) < 10 else (
                f" ({d.delta:+,.0f})" if d.delta is not None else "")
            out.append(f"{_val(d.candidate, d.unit)}{ch}")
    return out


# --- text --------------------------------------------------------------------------------------

TEXT_RANK_HEAD = ["rank", "host", "data+compute", "Δ", "Δcompute", "Δdata", "Δwait", "ΔGPU %", "Δmax °C", "ΔSM MHz"]


def _d(d: Delta) -> str:
    if d.delta is None:
        return "-"
    if abs(d.delta) < 0.05:
        return "0"
    return f"{d.delta:+.2g}" if abs(d.delta) < 10 else f"{d.delta:+,.0f}"


def _rank_text_cells(rc: Any) -> list[str]:
    m = rc.metrics
    own = m["own_ms"]
    return [str(rc.rank) + (" *" if rc.changed else ""), rc.host or "-",
            f"{_val(own.baseline, 'ms')} → {_val(own.candidate, 'ms')}", _d(own),
            *(_d(m[k]) for k in ("compute_ms", "data_load_ms", "wait_ms", "gpu_util", "temp_c_max", "sm_clock_mhz"))]


def _text(r: CompareResult, width: int) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    con = Console(file=buf, width=width, no_color=True, highlight=False, emoji=False, markup=False, soft_wrap=False)
    con.print(Text("forensics compare", style="bold"))
    con.print(_side("baseline ", r.baseline))
    con.print(_side("candidate", r.candidate))
    for n in r.notes:
        con.print(f"note: {n}")
    con.print()
    con.print(Text(r.verdict, style="bold"))
    con.print()
    t = Table(box=None, padding=(0, 2), pad_edge=False, header_style="bold", title="Checks", title_justify="left")
    t.add_column("")
    t.add_column("check", no_wrap=True)
    t.add_column("result", overflow="fold")
    for c in r.checks:
        t.add_row(_check_status(c), c.label, c.text)
    con.print(t)
    con.print()
    t = Table(box=None, padding=(0, 2), pad_edge=False, header_style="bold",
              title=f"Run level (after warmup; loss and grad norm at {r.matched_steps['count']} matched steps)",
              title_justify="left")
    for col, just in (("figure", "left"), ("baseline", "right"), ("candidate", "right"), ("change", "right"), ("", "left")):
        t.add_column(col, justify=just, no_wrap=col != "figure")
    for m in r.metrics:
        label = m.label + (f" ({m.unit})" if m.unit and m.unit != "share" else "")
        t.add_row(label, _val(m.baseline, m.unit), _val(m.candidate, m.unit), _delta(m), _mark(m))
    con.print(t)
    con.print()
    con.print(Text("Ranks that changed most (own time per step: data loading + compute)", style="bold"))
    if r.changed_most:
        for rank in r.changed_most:
            con.print("  " + next(x for x in r.ranks if x.rank == rank).summary)
    else:
        con.print("  none beyond the job's own change (noise: 5 ms and 5% of the rank's time)")
    for title, items in (("New findings (candidate only)", r.new_findings), ("Resolved findings (baseline only)", r.resolved_findings)):
        con.print()
        con.print(Text(f"{title}: {len(items)}", style="bold"))
        g = Table.grid(padding=(0, 1))
        g.add_column(no_wrap=True)
        g.add_column(overflow="fold")
        for f in items:
            g.add_row(" ", Text(_finding(f)))
            for e in f["evidence"][:1]:
                g.add_row(" ", Text(f"↳ {e}"))
        con.print(g)
    shown, left_out = _printed_ranks(r)
    if shown:
        con.print()
        t = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold",
                  title="Per rank: changes from baseline to candidate (ms per step unless said); * changed most",
                  title_justify="left")
        for h in TEXT_RANK_HEAD:
            t.add_column(h, no_wrap=True, justify="left" if h in ("rank", "host") else "right")
        for rc in shown:
            t.add_row(*_rank_text_cells(rc))
        con.print(t)
    if left_out:
        if not shown:
            con.print()
        con.print(_left_out_note(r, shown, left_out))
    if r.only_in_baseline or r.only_in_candidate:
        con.print(f"ranks only in the baseline: {r.only_in_baseline or '-'}; only in the candidate: {r.only_in_candidate or '-'}")
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


# --- markdown ------------------------------------------------------------------------------------

def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _markdown(r: CompareResult) -> str:
    md = ["# forensics compare", "", f"- {_cell(_side('baseline', r.baseline))}", f"- {_cell(_side('candidate', r.candidate))}"]
    md += [f"- note: {_cell(n)}" for n in r.notes]
    md += ["", f"**{_cell(r.verdict)}**", "", "## Checks", "", "| | check | result |", "|---|---|---|"]
    md += [f"| {_check_status(c)} | {c.label} | {_cell(c.text)} |" for c in r.checks]
    md += ["", f"## Run level (after warmup; loss at {r.matched_steps['count']} matched steps)", "",
           "| figure | baseline | candidate | change | |", "|---|---:|---:|---:|---|"]
    for m in r.metrics:
        md.append(f"| {m.label}{f' ({m.unit})' if m.unit and m.unit != 'share' else ''} | {_val(m.baseline, m.unit)} | "
                  f"{_val(m.candidate, m.unit)} | {_delta(m)} | {_mark(m)} |")
    md += ["", "## Ranks that changed most", ""]
    md += [f"- {_cell(next(x for x in r.ranks if x.rank == k).summary)}" for k in r.changed_most] or ["- none beyond the job's own change"]
    for title, items in (("New findings", r.new_findings), ("Resolved findings", r.resolved_findings)):
        md += ["", f"## {title} ({len(items)})", ""]
        md += [f"- {_cell(_finding(f))}" + (f" (`{f['evidence'][0]}`)" if f["evidence"] else "") for f in items] or ["- none"]
    shown, left_out = _printed_ranks(r)
    if shown or left_out:
        md += ["", "## Per rank: candidate (change from baseline)", ""]
    if shown:
        md += ["| rank | host | " + " | ".join(lab for _, lab in RANK_COLUMNS) + " |",
               "|---|---|" + "---:|" * len(RANK_COLUMNS)]
        for rc in shown:
            cells = _rank_cells(rc)
            if rc.changed:
                cells[0] = f"**{rc.rank}**"
            md.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if left_out:
        md += [""] * bool(shown) + [_cell(_left_out_note(r, shown, left_out))]
    return "\n".join(md) + "\n"


def _printed_ranks(r: CompareResult) -> tuple[list, int]:
    """The per-rank rows text and md print, and how many they leave out: every rank up to
    PER_RANK_ROWS (as the diagnosis report), else the ranks that changed beyond the noise (the
    farthest PER_RANK_ROWS of them), in rank order."""
    from .outline import PER_RANK_ROWS

    if len(r.ranks) <= PER_RANK_ROWS:
        return r.ranks, 0
    changed = sorted((x for x in r.ranks if x.changed), key=lambda x: -abs(x.excess_ms or 0.0))[:PER_RANK_ROWS]
    shown = sorted(changed, key=lambda x: x.rank)
    return shown, len(r.ranks) - len(shown)


def _left_out_note(r: CompareResult, shown: list, left_out: int) -> str:
    changed = sum(x.changed for x in r.ranks)
    why = ("their own time per step changed within the noise" if len(shown) == changed
           else f"those changed least; {changed:,} changed beyond the noise")
    return (f"{left_out:,} {'other ' if shown else ''}ranks not shown ({why}): the JSON output (--format json) "
            "holds every rank.")


# --- html --------------------------------------------------------------------------------------

def _nan(xs: list) -> list[float]:
    return [math.nan if v is None else float(v) for v in xs]


def _chart(label: str, unit: str, x_b: list, y_b: list, x_c: list, y_c: list) -> str:
    import numpy as np

    from .charts import PEER, LineChart, Series, legend, line_chart

    if not (x_b or x_c):
        return f'<p class="note">{label}: nothing logged</p>'
    c = LineChart(label=label, unit=unit, xkind="step", width=1040, height=230, series=[
        Series("baseline", np.array(_nan(x_b)), np.array(_nan(y_b)), color=PEER, width=1.6),
        Series("candidate", np.array(_nan(x_c)), np.array(_nan(y_c)), color=CANDIDATE, width=1.6),
    ])
    return legend([(PEER, "baseline", "line"), (CANDIDATE, "candidate", "line")]) + line_chart(c)


def _html(r: CompareResult) -> str:
    from .charts import ROW_BUDGET, esc
    from .html import _CSS

    s = r.series
    b, c = s.get("baseline", {}), s.get("candidate", {})
    loss = s.get("loss", {})
    thr_unit = s.get("unit", {}).get("thr", "")
    figs = [
        ("Step time per step (median over ranks), after warmup", _chart("step time", "ms", b.get("step", []), b.get("step_ms", []),
                                                                         c.get("step", []), c.get("step_ms", []))),
        (f"Throughput ({thr_unit}), after warmup", _chart("throughput", thr_unit, b.get("step", []), b.get("thr", []),
                                                          c.get("step", []), c.get("thr", []))),
        ("Loss at matched steps (mean over ranks)", _chart("loss", "loss", loss.get("step", []), loss.get("baseline", []),
                                                           loss.get("step", []), loss.get("candidate", []))),
    ]
    status = "healthy" if r.passed else ""
    rows = "".join(f"<tr><td>{esc(_check_status(x))}</td><td>{esc(x.label)}</td><td>{esc(x.text)}</td></tr>" for x in r.checks)
    metric_rows = "".join(
        f"<tr><td>{esc(m.label)}{esc(f' ({m.unit})' if m.unit and m.unit != 'share' else '')}</td><td class=num>{esc(_val(m.baseline, m.unit))}</td>"
        f"<td class=num>{esc(_val(m.candidate, m.unit))}</td><td class=num>{esc(_delta(m))}</td><td>{esc(_mark(m))}</td></tr>"
        for m in r.metrics)
    most = "".join(f"<li>{esc(next(x for x in r.ranks if x.rank == k).summary)}</li>" for k in r.changed_most) or \
        "<li>none beyond the job's own change</li>"
    finds = ""
    for title, items in (("New findings", r.new_findings), ("Resolved findings", r.resolved_findings)):
        lis = "".join(f'<li>{esc(_finding(f))} <span class="cite">{esc(", ".join(f["evidence"][:1]))}</span></li>'
                      for f in items) or "<li>none</li>"
        finds += f"<h2>{esc(title)} ({len(items)})</h2><ul>{lis}</ul>"
    head = "".join(f"<th>{esc(h)}</th>" for h in ["rank", "host", *(lab for _, lab in RANK_COLUMNS)])

    def rank_table(ranks: list) -> str:
        return f"<table><tr>{head}</tr>" + "".join(
            f'<tr class="{"hl" if rc.changed else ""}">' + "".join(f"<td>{esc(x)}</td>" for x in _rank_cells(rc)) + "</tr>"
            for rc in ranks) + "</table>"

    shown, _ = _printed_ranks(r)
    ranks_html = rank_table(r.ranks) if len(r.ranks) <= ROW_BUDGET else (
        # a big run, as the diagnosis page: the ranks that changed in sight, every rank folded
        (rank_table(shown) if shown else "")
        + f"<details><summary>the table of all {len(r.ranks):,} ranks</summary>{rank_table(r.ranks)}</details>")
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">',
        f"<title>{esc('forensics compare · ' + r.verdict[:120])}</title>", f"<style>{_CSS}</style></head><body><main>",
        f'<div class="meta">forensics compare<br>{esc(_side("baseline", r.baseline))}<br>{esc(_side("candidate", r.candidate))}</div>',
        *(f'<p class="note">note: {esc(n)}</p>' for n in r.notes),
        f'<section class="verdict {status}"><h1>{esc(r.verdict)}</h1></section>',
        f"<h2>Checks</h2><table><tr><th></th><th>check</th><th>result</th></tr>{rows}</table>",
        "<h2>The two runs together</h2>",
        *(f"<figure><figcaption>{esc(t)}</figcaption>{body}</figure>" for t, body in figs),
        f"<h2>Run level</h2><table><tr><th>figure</th><th>baseline</th><th>candidate</th><th>change</th><th></th></tr>{metric_rows}</table>",
        f"<h2>Ranks that changed most</h2><ul>{most}</ul>", finds,
        f"<h2>Per rank: candidate (change from baseline)</h2>{ranks_html}",
        "<footer>forensics compare · self-contained: no network access</footer></main></body></html>",
    ]
    return "\n".join(parts) + "\n"


__all__ = ["FORMATS", "render_compare"]
