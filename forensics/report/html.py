"""The self-contained HTML report: the verdict and chain first, then the pictures people look at.

Owns `render_html(report, run)`: one file with inline CSS, inline SVG charts (see charts.py), a
small inline script (tooltips), nothing fetched: it opens offline in any browser and can be
attached to a ticket or a CI run. Order: the verdict in one sentence, the chain bottom-up
(physical -> resource -> communication -> training), the findings with links to the log lines
they cite, then the plots (step-time and collective-wait heatmaps per rank x step, data-load time
per rank, communication share over the run, GPU temperature / SM clock / utilisation per rank,
loss raw and EMA with warmup marked, the last 10 s before the stop as a per-rank strip), the
per-rank table and the evidence lines with what each logged line says.

Log text is untrusted input: every string from a log (titles, messages, paths, event names) is
HTML-escaped, and a Content-Security-Policy allows only this file's own two scripts (by hash),
inline styles and data: images, so even a line that slipped through could neither run script
nor load anything. Secrets are masked by default (report/redact.py).

Why hand-written SVG rather than a plotting library: the report must be small and offline.
Plotly inlines ~3.5 MB of JS; Vega-Lite/altair ~0.8 MB of vega JS plus a runtime that renders in
the browser; matplotlib is a 40 MB dependency that this package does not otherwise need and emits
one SVG element per heatmap cell (a 64-rank x 300-step heatmap would be ~20k elements). Here a
heatmap is one PNG of one pixel per cell and a line is one <path>: a 4-rank report is ~100 KB, a
64-rank x 3000-step one stays well under 1 MB, and it renders without any script.

Must not: judge the run (passes did), query more than the plots need (it reads the step table,
the GPU metric columns, the loss series and the last window, each lazily and with only the
columns it uses), or write files (the CLI does).
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import math
import os
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import polars as pl

from .. import __version__
from .charts import (
    PEER,
    ROW_BUDGET,
    SERIES,
    Band,
    LineChart,
    Series,
    bar_chart,
    esc,
    fmt_num,
    heatmap,
    legend,
    line_chart,
    pick_outliers,
    rank_rows,
)
from .fmt import cited_clock, clock, cost_text, kind_label, rank_phrase
from .model import Evidence, Finding, Report, basis_phrase, local_ranks_phrase
from .outline import few_rank_findings, outline

if TYPE_CHECKING:
    from ..store import Run

# Columns of a heatmap: at most this many step bins (mean of the steps in a bin), so a long run
# stays a readable picture and a bounded file.
MAX_COLUMNS = 300
# Points per line in the time charts (mean per rank and time bin).
TIME_BINS = 240
# A line per peer up to this many ranks; beyond, the peers are a min-max band and a median.
MAX_PEER_LINES = 16
# Highlighted ranks (the root cause's and the findings' ranks) drawn in colour.
MAX_HIGHLIGHT = len(SERIES)
SNAPSHOT_S = 10.0          # seed 000 §4.5: "what was every card doing in the last 10 seconds?"
SNAPSHOT_EVENTS = 500      # newest events per rank in the strip (INFO as ticks of one path per rank)
SNAPSHOT_MARKS = 40        # WARN/ERROR markers with a tooltip per rank
COMM_SHARE_LIMIT = 0.40    # seed 000 §4.2: communication > 40 % of step time
LOSS_ALPHA = 0.1           # the EMA of the loss pass (passes/loss.py ALPHA)
MESSAGE_CHARS = 400

LAYER_COLORS = {"physical": "#8c564b", "resource": "#d9780b", "communication": "#1f77b4", "training": "#2ca02c"}

# ---------------------------------------------------------------------------------------------
# scripts: hashed into the CSP; the first registers error listeners before anything else loads,
# the second adds tooltips and marks the page as rendered (data-ready="ok") when it ran through.

_HEAD_JS = (
    "(function(){var d=document.documentElement;function inc(k,v){d.setAttribute(k,String((+d.getAttribute(k)||0)+1));"
    "if(v)d.setAttribute(k+'-last',String(v).slice(0,200));}"
    "window.addEventListener('error',function(e){inc('data-js-errors',e.message||(e.target&&e.target.tagName));},true);"
    "document.addEventListener('securitypolicyviolation',function(e){inc('data-csp-violations',e.violatedDirective+' '+e.blockedURI);});"
    "})();"
)

_BODY_JS = """(function(){
var tip=document.getElementById('tip');
function show(ev,text){tip.textContent=text;tip.style.display='block';
var x=ev.clientX+14,y=ev.clientY+14;if(x+tip.offsetWidth>innerWidth-8)x=ev.clientX-tip.offsetWidth-10;
tip.style.left=x+'px';tip.style.top=y+'px';}
function hide(){tip.style.display='none';}
var maps=document.querySelectorAll('svg.heatmap');
for(var i=0;i<maps.length;i++){(function(s){
var rows=s.getAttribute('data-rows').split(','),c0=s.getAttribute('data-c0').split(','),c1=s.getAttribute('data-c1').split(',');
var v=s.getAttribute('data-v').split(','),unit=s.getAttribute('data-unit'),b=s.getAttribute('data-box').split(',').map(Number);
var nc=c0.length,nr=rows.length;
s.addEventListener('mousemove',function(ev){var p=s.createSVGPoint();p.x=ev.clientX;p.y=ev.clientY;
var q=p.matrixTransform(s.getScreenCTM().inverse());var c=Math.floor((q.x-b[0])/b[2]*nc),r=Math.floor((q.y-b[1])/b[3]*nr);
if(c<0||r<0||c>=nc||r>=nr){hide();return;}var val=v[r*nc+c];
show(ev,'rank '+rows[r]+' \\u00b7 step '+(c0[c]===c1[c]?c0[c]:c0[c]+'\\u2013'+c1[c])+' \\u00b7 '+(val===''?'no data':val+' '+unit));});
s.addEventListener('mouseleave',hide);})(maps[i]);}
document.documentElement.setAttribute('data-ready','ok');
})();"""


def _sha(js: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")


CSP = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src '{_sha(_HEAD_JS)}' '{_sha(_BODY_JS)}'; "
       "base-uri 'none'; form-action 'none'")

_CSS = """
:root{--fg:#1d2430;--muted:#5f6b7a;--line:#dde2e8;--bg:#f6f7f9;--card:#fff;--err:#c62828;--warn:#b26a00;--ok:#2e7d32}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1120px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:4px 0 6px;line-height:1.3}
h2{font-size:16px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:14px;margin:0 0 4px}
.meta{color:var(--muted);font-size:13px}
.verdict{border-left:6px solid var(--err);background:var(--card);padding:12px 16px;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.06)}
.verdict.healthy{border-color:var(--ok)} .verdict.mixed{border-color:var(--warn)}
.summary{margin:6px 0 0;color:#333}
.chain{display:flex;flex-wrap:wrap;align-items:stretch;gap:0;margin-top:12px}
.link{flex:1 1 200px;background:var(--card);border:1px solid var(--line);border-top:4px solid #999;border-radius:6px;padding:8px 10px;min-width:190px;max-width:360px}
.arrow{align-self:center;color:var(--muted);font-size:20px;padding:0 6px}
.badge{display:inline-block;font-size:11px;font-weight:600;letter-spacing:.02em;text-transform:uppercase;padding:1px 6px;border-radius:3px;color:#fff}
.sev{display:inline-block;min-width:46px;text-align:center;font-size:11px;font-weight:700;padding:1px 5px;border-radius:3px;color:#fff;background:#78909c}
.sev.ERROR{background:var(--err)} .sev.WARN{background:var(--warn)}
.cite{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;color:#33507a;word-break:break-all}
a{color:#1d5fa8;text-decoration:none} a:hover{text-decoration:underline}
.finding{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px 12px;margin:6px 0}
.finding .head{display:flex;gap:8px;align-items:baseline;flex-wrap:wrap}
.finding .kind{color:var(--muted);font-size:12px}
.explained{margin:4px 0 0;padding-left:18px;color:#333}
details summary{cursor:pointer;color:#1d5fa8;font-size:12px;margin-top:4px}
table{border-collapse:collapse;width:100%;background:var(--card);font-size:12.5px}
th,td{border-bottom:1px solid var(--line);padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.hl td{background:#fff4e5}
.logline{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-word}
.lvl-ERROR{color:var(--err);font-weight:600} .lvl-WARN{color:var(--warn);font-weight:600}
.grid2{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:14px}
figure{margin:0 0 14px;background:var(--card);border:1px solid var(--line);border-radius:6px;padding:10px 12px}
figcaption{font-weight:600;margin-bottom:4px}
figcaption .sub{font-weight:400;color:var(--muted);font-size:12px;margin-left:6px}
svg{display:block;max-width:100%;height:auto;font-family:inherit}
svg .plot{fill:#fbfcfd;stroke:none} svg .frame{fill:none;stroke:#c5ccd5}
svg .grid{stroke:#e6eaef} svg .tickmark{stroke:#8a95a3}
svg .tick{font-size:10.5px;fill:#5f6b7a} svg .tick.hl{fill:#c62828;font-weight:700}
svg .axis{font-size:11px;fill:#5f6b7a} svg .hlabel{font-size:10.5px}
svg .px{image-rendering:pixelated;image-rendering:crisp-edges}
svg .span{fill:#fff3c4;opacity:.7} svg .spanlabel{font-size:10.5px;fill:#8a6d00}
svg .band{opacity:.28} svg .bar{fill:#9fb3c8} svg .bar.hl{fill:#34506e} svg .p90{stroke:#33475b;stroke-width:1.5}
svg.colorbar{margin-top:2px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#333;margin:2px 0 4px}
.lg{display:inline-flex;align-items:center;gap:5px}
.sw{display:inline-block;width:16px;height:3px} .sw.band{height:10px;opacity:.35} .sw.dash{height:0;border-top:2px dashed}
.note{color:var(--muted);font-size:12.5px;margin:2px 0}
.next{font-size:13px;margin:6px 0 0}
table.fr tr.fr-problem td{font-weight:600} table.fr tr.fr-odd td{color:var(--err)}
.strip td{padding:0 6px} .strip svg{margin:0}
#tip{position:fixed;display:none;pointer-events:none;background:#1d2430;color:#fff;font-size:12px;padding:3px 7px;border-radius:4px;z-index:9}
footer{margin-top:30px;color:var(--muted);font-size:12px}
"""


# --- public -----------------------------------------------------------------------------------


def render_html(report: Report, run: "Run | None" = None, *, redact: bool = True) -> str:
    """The report as one self-contained HTML page. Without `run` only the text parts are drawn
    (verdict, chain, findings, evidence, per-rank table); the plots need the run's events."""
    if redact:
        from .redact import redact_report, redact_text

        report = redact_report(report)
        scrub = redact_text
    else:
        def scrub(s: str) -> str:
            return s
    o = outline(report)
    highlight = _highlight(report)
    paths = _PathNames([e.source_file for f in report.findings for e in f.lines]
                       + [e.source_file for c in (report.root_cause.chain if report.root_cause else []) for e in c.lines])
    logged = _logged_lines(run, report, scrub) if run is not None else {}
    figures = _figures(run, highlight, scrub, paths) if run is not None else []

    cls = "healthy" if o.healthy else ("" if report.root_cause is not None else "mixed")
    parts: list[str] = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc('forensics · ' + o.verdict)}</title>",
        f"<script>{_HEAD_JS}</script>",
        f"<style>{_CSS}</style></head><body><main>",
        f'<div class="meta">forensics diagnosis · {esc(o.header)}'
        + (f' · store <span class="cite">{esc(report.run.store)}</span>' if report.run.store else "") + "</div>",
        f'<section class="verdict {cls}" id="verdict"><h1>{esc(o.verdict)}</h1>'
        + (f'<p class="note">{esc(o.accounting)}</p>' if o.accounting else "")
        + (f'<p class="summary">{esc(o.summary)}</p>' if o.summary else "")
        + (f'<p class="note">Why this rank: {esc(basis_phrase(report.root_cause.basis, report.root_cause.basis_weak))}.</p>'
           if report.root_cause is not None and report.root_cause.basis else "")
        + (f'<p class="next"><b>Next:</b> {esc(report.root_cause.next)}</p>' if report.root_cause and report.root_cause.next else "")
        + "</section>",
    ]
    parts.append(_chain(report, o, paths))
    parts.append(_findings(report, o, paths))
    if run is not None:
        drawn, note = _left_out(figures)
        parts.append('<h2 id="plots">Plots</h2>')
        parts.extend(drawn)
        if note:
            parts.append(note)
    else:
        parts.append('<p class="note">Plots need the run\'s events: render with the store (forensics diagnose STORE --format html).</p>')
    from ..render.fr_table import report_block, report_rows

    if fr := report_rows(report):      # the Flight Recorder table (forensics fr-table), when dumps were read
        parts.append('<h2 id="flight-recorder">Flight Recorder</h2>' + _fr_table(fr))
    elif fr_text := report_block(report):   # a report written before the table carried its rows
        parts.append(f'<h2 id="flight-recorder">Flight Recorder</h2><pre>{esc(fr_text)}</pre>')
    parts.append(_per_rank(o, highlight))
    parts.append(_evidence_section(report, logged, paths))
    parts.append(f'<footer>forensics {esc(__version__)} · generated {esc(dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))}'
                 f' · {"secrets in log text masked (--no-redact to keep them)" if redact else "NOT redacted: log text shown as logged"}'
                 " · self-contained: no network access</footer>")
    parts.append(f'</main><div id="tip"></div><script>{_BODY_JS}</script></body></html>')
    return "\n".join(parts)


# --- text parts -------------------------------------------------------------------------------


def _fr_table(fr: dict[str, Any]) -> str:
    """The Flight Recorder table as an HTML table: every column (a page has no 80-column limit),
    the problem lines bold, a rank's odd entry in red; then the notes."""
    head = "".join(f"<th>{esc(c)}</th>" for c in fr["columns"])
    body = "".join(
        f'<tr{" class=" + chr(34) + style + chr(34) if style else ""}>' + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>"
        for row, style in zip(fr["rows"], [{"bold": "fr-problem", "red": "fr-odd"}.get(s, "") for s in fr["styles"]]))
    table = f'<table class="fr"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>' if fr["rows"] else ""
    return table + "".join(f'<p class="note">{esc(n)}</p>' for n in fr["notes"])


class _PathNames:
    """Shows cited files relative to their common folder (full path in the tooltip)."""

    def __init__(self, files: Iterable[str]) -> None:
        fs = sorted({f for f in files if f})
        dirs = [os.path.dirname(f) for f in fs]
        self.base = os.path.commonpath(dirs) if len(dirs) > 0 and all(os.path.isabs(d) for d in dirs) else ""

    def short(self, f: str) -> str:
        if self.base and f.startswith(self.base + os.sep):
            return f[len(self.base) + 1:]
        return f

    def cite(self, e: Evidence) -> str:
        return (f'<span class="cite" title="{esc(e.source_file)}:{esc(e.line)}">{esc(self.short(e.source_file))}:'
                f'{esc(e.line)}</span>')


def _highlight(report: Report) -> list[int]:
    """Ranks drawn in colour: the root cause's; without one, the ranks of WARN/ERROR findings
    that single out a few ranks (a finding naming most ranks singles out nobody)."""
    if report.root_cause is not None and report.root_cause.ranks:
        return list(dict.fromkeys(int(r) for r in report.root_cause.ranks))[:MAX_HIGHLIGHT]
    return few_rank_findings(report)[:MAX_HIGHLIGHT]


def _layer(layer: str) -> str:
    return f'<span class="badge" style="background:{LAYER_COLORS.get(layer, "#777")}">{esc(layer)}</span>'


def _index(report: Report, f: Finding) -> int:
    return next(i for i, g in enumerate(report.findings) if g is f)


def _chain(report: Report, o: Any, paths: _PathNames) -> str:
    if not o.chain:
        return ""
    cards = []
    for c in o.chain:
        first = c.lines[0] if c.lines else None
        cards.append(
            f'<div class="link" style="border-top-color:{LAYER_COLORS.get(c.layer, "#999")}">{_layer(c.layer)}'
            + (f' <span class="kind">{esc(rank_phrase(c.ranks))}</span>' if c.ranks else "")
            + f"<div>{esc(c.finding)}</div>"
            + (f"<div>{paths.cite(first)}</div>" if first else "") + "</div>")
    root = report.root_cause
    link = f' <a href="#f{root.finding}">root finding and its evidence ↓</a>' if root is not None and root.finding is not None else ""
    return ('<h2 id="chain">The chain, bottom-up: physical → resource → communication → training</h2>'
            f'<div class="chain">{"<span class=arrow>→</span>".join(cards)}</div><p class="note">{link}</p>')


def _finding_card(report: Report, f: Finding, paths: _PathNames, note: str = "") -> str:
    i = _index(report, f)
    ranks = rank_phrase(f.ranks) if f.ranks else (local_ranks_phrase(f.local_ranks) if f.local_ranks else
                                                   f"victims {rank_phrase(f.victims)}" if f.victims else "all ranks")
    if phrase := basis_phrase(f.basis, f.basis_weak):
        ranks += f" · {phrase}"
    untimed = (f.evidence or {}).get("time_of_its_own") is False    # placed after its file's last timed line
    when = (f" · no time of its own (after {esc(clock(f.first_seen))})" if untimed else f" · {esc(clock(f.first_seen))}") \
        if f.first_seen else ""
    ev = (f'<a href="#ev{i}">{len(f.lines)} evidence line{"s" if len(f.lines) != 1 else ""} ↓</a>'
          if f.lines else '<span class="note">no log line cited</span>')
    return (f'<div class="finding" id="f{i}"><div class="head"><span class="sev {esc(f.severity)}">{esc(f.severity)}</span>'
            f"{_layer(f.layer)}<b>{esc(kind_label(f.kind))}</b><span class=\"kind\">{esc(f.kind)} · {esc(ranks)}{when} · "
            f"{esc(f.rule)}</span></div><div>{esc(f.title)}</div>"
            + (f'<div class="note cost">{esc(cost_text(f.cost))}</div>' if f.cost else "")
            + (f'<div class="note">{esc(note)}</div>' if note else "")
            + (f'<div class="next">next: {esc(f.next)}</div>' if f.next else "") + f"<div>{ev}</div></div>")


def _findings(report: Report, o: Any, paths: _PathNames) -> str:
    out = []
    if o.root is not None:
        out.append('<h2 id="findings">Root finding</h2>')
        out.append(_finding_card(report, o.root, paths))
    if o.explained:
        out.append(f"<h2>Explained by the root cause ({len(o.explained)})</h2>")
        for x in o.explained:
            out.append(_finding_card(report, x.finding, paths, note=x.line))
    if o.others:
        out.append(f'<h2 id="others">Other findings, not explained by the chain ({len(o.others)})</h2>')
        for f in o.others:
            out.append(_finding_card(report, f, paths))
    if not report.findings:
        out.append('<p class="note">No findings.</p>')
    return "".join(out)


def _per_rank(o: Any, highlight: Sequence[int]) -> str:
    if not o.rows:
        return ""
    hl = {str(r) for r in highlight}
    head = "".join(f"<th>{esc(c)}</th>" for c in o.columns)
    rank_col = o.columns.index("rank") if "rank" in o.columns else None
    body = []
    for row in o.rows:
        cls = ' class="hl"' if rank_col is not None and row[rank_col] in hl else ""
        body.append(f"<tr{cls}>" + "".join(
            f'<td class="num">{esc(v)}</td>' if _numeric(v) else f"<td>{esc(v)}</td>" for v in row) + "</tr>")

    def table(rows: list[str]) -> str:
        return f'<div style="overflow-x:auto"><table><tr>{head}</tr>{"".join(rows)}</table></div>'

    if len(body) <= ROW_BUDGET:
        return f'<h2 id="ranks">Per rank</h2>{table(body)}'
    # a big run: the highlighted ranks' rows in sight, the whole table (searchable) folded
    marked = [b for b in body if b.startswith('<tr class="hl">')]
    return (f'<h2 id="ranks">Per rank</h2>{table(marked) if marked else ""}'
            f"<details><summary>the table of all {len(body):,} ranks</summary>{table(body)}</details>")


def _numeric(v: str) -> bool:
    return bool(v) and v.replace(",", "").replace(".", "", 1).lstrip("-").isdigit()


def _logged_lines(run: "Run", report: Report, scrub) -> dict[tuple[str, int], dict[str, Any]]:
    """What each cited line says in the store (level, event, message), in one filtered scan."""
    cites = {(e.source_file, int(e.line)) for f in report.findings for e in f.lines}
    if report.root_cause is not None:
        cites |= {(e.source_file, int(e.line)) for c in report.root_cause.chain for e in c.lines}
    if not cites:
        return {}
    keys = pl.DataFrame({"source_file": [c[0] for c in cites], "line": [c[1] for c in cites]},
                        schema={"source_file": pl.String, "line": pl.Int64})
    df = (run.events()
          .filter(pl.col("source_file").is_in(keys["source_file"].unique().to_list())
                  & pl.col("line").is_in(keys["line"].unique().to_list()))
          .select("source_file", "line", "level", "event", "message")
          .join(keys.lazy(), on=["source_file", "line"], how="semi")
          .unique(subset=["source_file", "line"], keep="first")
          .collect())
    out = {}
    for r in df.iter_rows(named=True):
        msg = scrub(r["message"] or "")
        out[(r["source_file"], int(r["line"]))] = {
            "level": str(r["level"]) if r["level"] is not None else "", "event": r["event"] or "",
            "message": msg if len(msg) <= MESSAGE_CHARS else msg[:MESSAGE_CHARS] + "…"}
    return out


def _evidence_rows(lines: Sequence[Evidence], logged: dict, paths: _PathNames) -> str:
    rows = []
    for e in lines:
        lg = logged.get((e.source_file, int(e.line)))
        said = (f'<span class="lvl-{esc(lg["level"])}">{esc(lg["level"])}</span> {esc(lg["event"])} {esc(lg["message"])}'
                if lg else '<span class="note">(line not in the store)</span>' if logged else "")
        rows.append(f"<tr><td>{paths.cite(e)}</td><td class=num>{esc('' if e.rank is None else e.rank)}</td>"
                    f"<td>{esc(cited_clock(e.timestamp, e.aligned_timestamp) if e.timestamp else '')}</td><td>{esc(e.text or '')}</td>"
                    f'<td class="logline">{said}</td></tr>')
    return ("<table><tr><th>file:line</th><th>rank</th><th>time</th><th>what the finding reads there</th>"
            "<th>the logged line (level event message)</th></tr>" + "".join(rows) + "</table>")


def _evidence_section(report: Report, logged: dict, paths: _PathNames) -> str:
    out = ['<h2 id="evidence">Evidence: the log lines every finding cites</h2>']
    if paths.base:
        out.append(f'<p class="note">Files relative to <span class="cite">{esc(paths.base)}</span></p>')
    for i, f in enumerate(report.findings):
        if not f.lines:
            continue
        out.append(f'<div class="finding" id="ev{i}"><h3><a href="#f{i}">↑</a> <span class="sev {esc(f.severity)}">'
                   f'{esc(f.severity)}</span> {esc(f.title)}</h3>{_evidence_rows(f.lines, logged, paths)}</div>')
    if len(out) == 1 + bool(paths.base):
        out.append('<p class="note">No finding cites a log line.</p>')
    return "".join(out)


# --- plots ------------------------------------------------------------------------------------


def _figure(title: str, sub: str, body: str, fid: str = "") -> str:
    idattr = f' id="{esc(fid)}"' if fid else ""
    return (f"<figure{idattr}><figcaption>{esc(title)}<span class=\"sub\">{esc(sub)}</span></figcaption>"
            f"{body}</figure>")


class _Left(str):
    """A panel with nothing to draw: left out of the page, named in one note under the plots."""

    def __new__(cls, title: str, why: str) -> "_Left":
        obj = super().__new__(cls, f"{title} ({why.removesuffix(' (nothing to draw)')})")
        return obj


def _empty(title: str, why: str, fid: str = "") -> str:
    return _Left(title, why)


def _left_out(figures: list[str]) -> tuple[list[str], str]:
    """The panels that drew something, and one note naming those left out (and why)."""
    drawn = [f for f in figures if not isinstance(f, _Left)]
    left = [str(f) for f in figures if isinstance(f, _Left)]
    return drawn, (f'<p class="note">Not drawn, nothing in the logs for them: {esc("; ".join(left))}.</p>' if left else "")


def _figures(run: "Run", highlight: list[int], scrub, paths: _PathNames) -> list[str]:
    from .. import timeline
    from ..passes.loss import loss_series, warmup_end

    ev = run.events()
    t0, t1 = timeline.bounds(run)
    steps_q = timeline.step_table(run).select("rank", "step", "step_time_ms", "data_load_ms", "comm_ms", "wait_ms")
    gpu_q = _gpu_query(ev, t0, t1)
    steps, gpu = pl.collect_all([steps_q, gpu_q])
    ranks = sorted(int(r) for r in steps["rank"].unique().drop_nulls().to_list())
    gpu_ranks = sorted(int(r) for r in gpu["rank"].unique().drop_nulls().to_list()) if gpu.height else []
    all_ranks = sorted(set(ranks) | set(gpu_ranks))

    figs = [_heatmap(steps, col, title, gid, ranks, highlight)
            for col, title, gid in (("step_time_ms", "Step time per rank × step", "hm-step"),
                                    ("wait_ms", "Collective wait per rank × step", "hm-wait"))]

    # data load per rank + comm share over the run
    figs.append(_data_load(steps, ranks, highlight))
    figs.append(_comm_share(steps))

    # GPU metrics per rank
    gfigs = []
    for col, title, unit in (("temp_c", "GPU temperature", "°C"), ("sm_clock_mhz", "SM clock", "MHz"),
                             ("gpu_util", "GPU utilisation", "%")):
        gfigs.append(_gpu_chart(gpu, col, title, unit, highlight, t0))
    gfigs.append(_loss(loss_series(ev), warmup_end))
    figs.append('<div class="grid2">' + "".join(gfigs) + "</div>")
    figs.append(_snapshot(run, all_ranks, highlight, scrub, paths))
    return figs


def _heatmap(steps: pl.DataFrame, col: str, title: str, gid: str, ranks: list[int], highlight: list[int]) -> str:
    mat = _step_matrix(steps, col, ranks)
    if mat is None:
        return _empty(title, f"no {col} in the logs (nothing to draw)", gid)
    values, c0, c1 = mat
    sub = f"ms · {len(ranks)} ranks · steps {c0[0]}–{c1[-1]}" + (
        f" · {math.ceil((c1[-1] - c0[0] + 1) / len(c0))} steps per column (mean)" if c1[0] != c0[0] else "")
    rows = rank_rows(ranks, highlight)
    if not rows.binned:
        return _figure(title, sub, heatmap(values, ranks, c0, c1, cmap="ylorrd", unit="ms", label=title,
                                           highlight=highlight, gid=gid + "-cb"), gid)
    values, who = pick_outliers(values, rows)
    who[rows.stop - rows.start == 1] = -1         # a row of one rank (a highlighted one) names it already
    sub += f" · {rows.per} ranks per row: the rank farthest from the step's median over all ranks (hover for which)"
    return _figure(title, sub, heatmap(values, rows.first, c0, c1, cmap="ylorrd", unit="ms", label=title,
                                       highlight=highlight, gid=gid + "-cb", labels=rows.labels(), who=who), gid)


def _step_matrix(steps: pl.DataFrame, col: str, ranks: list[int]):
    d = steps.select("rank", "step", col).drop_nulls()
    if d.is_empty() or not ranks:
        return None
    s0, s1 = int(d["step"].min()), int(d["step"].max())
    per = max(1, math.ceil((s1 - s0 + 1) / MAX_COLUMNS))
    g = (d.with_columns(((pl.col("step") - s0) // per).alias("c"))
         .group_by("rank", "c").agg(pl.col(col).mean()))
    nc = (s1 - s0) // per + 1
    values = np.full((len(ranks), nc), np.nan)
    rs = np.asarray(ranks, dtype=np.int64)
    r = g["rank"].to_numpy()
    i = np.minimum(np.searchsorted(rs, r), len(rs) - 1)
    ok = rs[i] == r
    values[i[ok], g["c"].to_numpy()[ok]] = g[col].to_numpy()[ok]
    c0 = [s0 + j * per for j in range(nc)]
    c1 = [min(s0 + (j + 1) * per - 1, s1) for j in range(nc)]
    return values, c0, c1


def _data_load(steps: pl.DataFrame, ranks: list[int], highlight: list[int]) -> str:
    title = "Data-load time per rank"
    d = (steps.select("rank", "data_load_ms").drop_nulls().group_by("rank")
         .agg(pl.col("data_load_ms").median().alias("med"), pl.col("data_load_ms").quantile(0.9).alias("p90")))
    if d.is_empty():
        return _empty(title, "no data_load_ms in the logs (nothing to draw)", "data-load")
    m = dict(zip(d["rank"].to_list(), zip(d["med"].to_list(), d["p90"].to_list())))
    rs = [r for r in ranks if r in m]
    med = np.array([m[r][0] for r in rs], float)
    p90 = np.array([m[r][1] for r in rs], float)
    overall = float(np.nanmedian(med)) if med.size else float("nan")
    sub = f"ms per step · bar = median, tick = 90th percentile · median over ranks {fmt_num(overall)} ms"
    rows = rank_rows(rs, highlight)
    if not rows.binned:
        return _figure(title, sub, bar_chart(rs, med, p90, unit="ms", label=title, highlight=highlight), "data-load")
    # a bar per bin of ranks: the rank whose median lies farthest from the median over ranks
    m, who = pick_outliers(med[:, None], rows)
    who = who[:, 0]
    tick = np.where(who >= 0, p90[np.searchsorted(rows.ranks, who)], np.nan)     # that rank's p90
    sub += f" · {rows.per} ranks per bar: the rank farthest from that median (hover for which)"
    return _figure(title, sub, bar_chart(rows.first, m[:, 0], tick, unit="ms", label=title, highlight=highlight,
                                         labels=rows.labels(), who=who.tolist()), "data-load")


def _comm_share(steps: pl.DataFrame) -> str:
    title = "Communication share of step time"
    d = (steps.filter(pl.col("comm_ms").is_not_null() & (pl.col("step_time_ms") > 0))
         .select("step", (pl.col("comm_ms") / pl.col("step_time_ms")).clip(0.0, 1.0).alias("share")))
    if d.is_empty():
        return _empty(title, "needs comm_ms and step_time_ms per step; the logs do not carry both", "comm-share")
    s0, s1 = int(d["step"].min()), int(d["step"].max())
    per = max(1, math.ceil((s1 - s0 + 1) / MAX_COLUMNS))
    g = (d.with_columns((s0 + (pl.col("step") - s0) // per * per).alias("b"))
         .group_by("b").agg(pl.col("share").median().alias("med"), pl.col("share").min().alias("lo"),
                            pl.col("share").max().alias("hi"))
         .sort("b"))
    x = g["b"].to_numpy().astype(float)
    chart = LineChart(label=title, unit="share of step", xkind="step", percent=True, ymin=0.0, width=1040, height=220,
                      bands=[Band(x, g["lo"].to_numpy(), g["hi"].to_numpy(), "#1f77b4", "min–max over ranks")],
                      series=[Series("median over ranks", x, g["med"].to_numpy(), "#1f77b4", 1.8)],
                      hlines=[(COMM_SHARE_LIMIT, "40 %: communication-bound", "#c62828")])
    lg = legend([("#1f77b4", "median over ranks", "line"), ("#1f77b4", "min–max over ranks", "band"),
                 ("#c62828", "communication-bound above 40 %", "dash")])
    sub = "comm_ms / step_time_ms per step" + (f" · {per} steps per point" if per > 1 else "")
    return _figure(title, sub, lg + line_chart(chart), "comm-share")


def _gpu_query(ev: pl.LazyFrame, t0: dt.datetime | None, t1: dt.datetime | None) -> pl.LazyFrame:
    cols = ["temp_c", "sm_clock_mhz", "gpu_util"]
    if t0 is None or t1 is None:
        return ev.select("rank", *cols).head(0).with_columns(pl.lit(0.0).alias("t"))
    span_us = max((t1 - t0).total_seconds() * 1e6, 1.0)
    bin_us = max(int(span_us / TIME_BINS), 1)
    start = pl.lit(t0, dtype=pl.Datetime("us", "UTC"))
    return (ev.select("rank", "timestamp", *cols)
            .filter(pl.col("rank").is_not_null() & pl.any_horizontal([pl.col(c).is_not_null() for c in cols]))
            .with_columns(((pl.col("timestamp") - start).dt.total_microseconds() // bin_us).alias("b"))
            .group_by("rank", "b").agg(*(pl.col(c).mean() for c in cols))
            .with_columns(((pl.col("b") + 0.5) * bin_us / 1e6).alias("t"))
            .sort("rank", "b"))


def _gpu_chart(gpu: pl.DataFrame, col: str, title: str, unit: str, highlight: list[int], t0) -> str:
    d = gpu.select("rank", "t", col).drop_nulls() if gpu.height else gpu
    if d.is_empty():
        return _empty(title, f"no {col} in the logs (nothing to draw)", f"gpu-{col}")
    ranks = sorted(int(r) for r in d["rank"].unique().to_list())
    hl = [r for r in highlight if r in ranks]
    peers = [r for r in ranks if r not in hl]
    series: list[Series] = []
    bands: list[Band] = []
    items: list[tuple[str, str, str]] = []
    if peers and len(peers) <= MAX_PEER_LINES:
        for r in peers:
            s = d.filter(pl.col("rank") == r)
            series.append(Series(f"rank {r}", s["t"].to_numpy(), s[col].to_numpy(), PEER, 1.0, opacity=0.8))
        items.append((PEER, f"{'ranks' if len(peers) > 1 else 'rank'} {_ranks(peers)}", "line"))
    elif peers:
        g = (d.filter(pl.col("rank").is_in(peers)).group_by("t")
             .agg(pl.col(col).min().alias("lo"), pl.col(col).max().alias("hi"), pl.col(col).median().alias("med"))
             .sort("t"))
        x = g["t"].to_numpy()
        bands.append(Band(x, g["lo"].to_numpy(), g["hi"].to_numpy(), PEER, f"ranks {_ranks(peers)}: min–max"))
        series.append(Series(f"ranks {_ranks(peers)}: median", x, g["med"].to_numpy(), "#5f6b7a", 1.2, dash="4 2"))
        items += [(PEER, f"{len(peers)} other ranks: min–max", "band"), ("#5f6b7a", "their median", "dash")]
    for i, r in enumerate(hl):
        s = d.filter(pl.col("rank") == r)
        series.append(Series(f"rank {r}", s["t"].to_numpy(), s[col].to_numpy(), SERIES[i % len(SERIES)], 2.0))
        items.append((SERIES[i % len(SERIES)], f"rank {r}", "line"))
    chart = LineChart(label=title, unit=unit, series=series, bands=bands,
                      ymin=0.0 if col == "gpu_util" else None, ymax=100.0 if col == "gpu_util" else None)
    sub = f"{unit} · per rank, mean per time bin" + (f" · start {t0.strftime('%H:%M:%S')} UTC" if t0 else "")
    return _figure(title, sub, legend(items) + line_chart(chart), f"gpu-{col}")


def _ranks(rs: Sequence[int]) -> str:
    from .fmt import ranks_text

    return ranks_text(list(rs))


def _loss(s: pl.DataFrame, warmup_end) -> str:
    title = "Loss"
    if s.is_empty():
        return _empty(title, "no loss in the logs (nothing to draw)", "loss")
    s = s.select("step", "loss", "lr", "warm").filter(pl.col("loss").is_finite())
    if s.is_empty():
        return _empty(title, "the logged loss is never finite", "loss")
    s = s.with_columns(pl.col("loss").ewm_mean(alpha=LOSS_ALPHA, adjust=False).alias("ema"))
    wend = warmup_end(s)
    x = s["step"].to_numpy().astype(float)
    series: list[Series] = []
    bands: list[Band] = []
    if s.height > 2 * MAX_COLUMNS * 2:
        per = math.ceil(s.height / (2 * MAX_COLUMNS))
        g = (s.with_row_index().with_columns((pl.col("index") // per).alias("b")).group_by("b")
             .agg(pl.col("step").mean(), pl.col("loss").min().alias("lo"), pl.col("loss").max().alias("hi"),
                  pl.col("ema").last()).sort("b"))
        bands.append(Band(g["step"].to_numpy(), g["lo"].to_numpy(), g["hi"].to_numpy(), "#9aa3ad", "raw loss min–max"))
        series.append(Series(f"EMA (alpha {LOSS_ALPHA})", g["step"].to_numpy(), g["ema"].to_numpy(), "#d62728", 2.0))
        raw_item = ("#9aa3ad", "raw (mean over ranks): min–max per point", "band")
    else:
        series.append(Series("raw (mean over ranks)", x, s["loss"].to_numpy(), "#7f8c9b", 1.0))
        series.append(Series(f"EMA (alpha {LOSS_ALPHA})", x, s["ema"].to_numpy(), "#d62728", 2.0))
        raw_item = ("#7f8c9b", "raw (mean over ranks)", "line")
    spans = [(float(x[0]), float(wend), "warmup")] if wend is not None else []
    chart = LineChart(label=title, unit="loss", xkind="step", series=series, bands=bands, spans=spans)
    items = [raw_item, ("#d62728", f"EMA, alpha {LOSS_ALPHA}", "line")]
    if wend is not None:
        items.append(("#fff3c4", f"warmup (to step {wend}): oscillation is normal here", "band"))
    return _figure(title, "mean over ranks per step", legend(items) + line_chart(chart), "loss")


def _snapshot_bins(table: pl.DataFrame, highlight: list[int]) -> tuple[pl.DataFrame, dict[int, int]]:
    """The snapshot's rows for a run of more than ROW_BUDGET ranks: a row per bin of ranks
    (`rank_rows`), the table row of the rank whose silence lies farthest from the median (a
    rank that stopped logging early, or the one still logging in a hang) with the bin's range
    in `bin`, and which row each rank's events are drawn on (rank -> the row's rank). Ranks
    without a number keep their row."""
    ranked = table.filter(pl.col("rank").is_not_null()).sort("rank")
    rows = rank_rows(ranked["rank"].to_list(), highlight)
    silent = ranked["silent_s"].fill_null(float("inf")).to_numpy().astype(float)    # no events: the farthest
    _, who = pick_outliers(silent[:, None], rows)
    pick = who[:, 0].tolist()
    members = np.repeat(pick, rows.stop - rows.start)
    labels = [b if "–" in b else f"rank {b}" for b in rows.labels()]
    picked = (pl.DataFrame({"rank": pick, "bin": labels}, schema={"rank": table.schema["rank"], "bin": pl.String})
              .join(ranked, on="rank", how="left", maintain_order="left"))
    rest = table.filter(pl.col("rank").is_null()).with_columns(pl.lit("no rank").alias("bin"))
    return (pl.concat([picked, rest.select(picked.columns)]),
            dict(zip(ranked["rank"].to_list(), members.tolist())))


def snapshot_info(r: dict[str, Any]) -> str:
    """A row of the last-10s panel in words, from the fields `last-10s` prints and its JSON holds
    (in_window, last_event, last_level, step, silent_s, last_ts): one truth in every format."""
    n = r.get("in_window") or 0
    if not n and r.get("last_event") is None:
        return "no events at all"
    last = f'{r["last_event"] or "-"}' + (f' step {r["step"]}' if r.get("step") is not None else "")
    timed = "" if r.get("last_ts") is not None else " (no time of its own)"
    silent = r.get("silent_s")
    quiet = f"silent {silent:.1f} s · " if silent is not None and silent >= 1.0 else ""
    count = f"{n} event{'s' if n != 1 else ''} in the window" if n else "no events in the window"
    return f"{count} · {quiet}last {last}{timed}"


def _snapshot(run: "Run", ranks: list[int], highlight: list[int], scrub, paths: _PathNames) -> str:
    from .. import timeline

    title = f"The last {SNAPSHOT_S:g} seconds before the stop"
    try:
        snap = timeline.last_window(run, SNAPSHOT_S, limit=SNAPSHOT_EVENTS)
    except Exception as e:  # a run without events: the rest of the report still renders
        from ..errors import ForensicsError

        if isinstance(e, ForensicsError):
            return _empty(title, e.what, "snapshot")
        raise
    rows, bins = snap.ranks, {}
    if rows.height > ROW_BUDGET:
        rows, bins = _snapshot_bins(rows, highlight)
    width, label_w, info_w = 1040, 96 if bins else 64, 330
    pw = width - label_w - info_w - 10
    start, stop = snap.start, snap.stop
    span = (stop - start).total_seconds() or 1.0
    ev = snap.events
    row_h = 16 if rows.height <= 40 else 11
    h = rows.height * row_h + 34
    body: list[str] = [f'<rect class="plot" x="{label_w}" y="4" width="{pw}" height="{rows.height * row_h}"/>']
    for k in range(0, int(SNAPSHOT_S) + 1, 2):
        x = label_w + (SNAPSHOT_S - k) / SNAPSHOT_S * pw if span else label_w
        body.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="4" y2="{rows.height * row_h + 4}"/>')
        body.append(f'<text class="tick" x="{x:.1f}" y="{rows.height * row_h + 18}" text-anchor="middle">−{k}s</text>')
    by_rank: dict[Any, list[dict]] = {}
    for r in ev.select("rank", "timestamp", "level", "event", "message", "source_file", "line").iter_rows(named=True):
        by_rank.setdefault(bins.get(r["rank"], r["rank"]), []).append(r)
    hl = set(highlight)
    for i, r in enumerate(rows.iter_rows(named=True)):
        y = 4 + i * row_h
        rank = r["rank"]
        cls = "tick hl" if rank in hl else "tick"
        name = r["bin"] if bins else "rank " + str(rank) if rank is not None else "no rank"
        body.append(f'<text class="{cls}" x="{label_w - 6}" y="{y + row_h - 4}" text-anchor="end">'
                    f'{"▶ " if rank in hl else ""}{esc(name)}</text>')
        if i % 2:
            body.append(f'<rect x="{label_w}" y="{y}" width="{pw}" height="{row_h}" fill="#f0f2f5"/>')
        ticks: list[str] = []
        marks: list[dict] = []
        for e in by_rank.get(rank, []):
            if e["timestamp"] is None:   # placed in the window by its file's earlier lines: no x of its own
                continue
            x = label_w + ((e["timestamp"] - start).total_seconds() / span) * pw
            if str(e["level"]) in ("ERROR", "WARN"):
                marks.append(dict(e, x=x))
            else:
                ticks.append(f"M{x:.1f},{y + 3}v{row_h - 6}")
        if ticks:
            body.append(f'<path d="{"".join(ticks)}" stroke="#7d8ea3" stroke-width="1.2"/>')
        for e in marks[-SNAPSHOT_MARKS:]:
            lvl = str(e["level"])
            tip = (f'{clock(timeline.iso(e["timestamp"]))} {lvl} {e["event"] or ""} {scrub(e["message"] or "")[:MESSAGE_CHARS]}'
                   f' ({paths.short(e["source_file"] or "")}:{e["line"]})')
            color = "#c62828" if lvl == "ERROR" else "#e08a00"
            body.append(f'<circle cx="{e["x"]:.1f}" cy="{y + row_h / 2:.1f}" r="{row_h / 3:.1f}" fill="{color}" '
                        f'stroke="#fff" stroke-width="0.8"><title>{esc(tip)}</title></circle>')
        info = snapshot_info(r)
        if bins and name != f"rank {rank}":
            info = f"rank {rank}: {info}"
        color = "#c62828" if (r["silent_s"] or 0) >= 1.0 or not r["in_window"] else "#5f6b7a"
        body.append(f'<text class="tick" x="{label_w + pw + 8}" y="{y + row_h - 4}" fill="{color}" style="fill:{color}">'
                    f'{esc(info)}<title>{esc(scrub(r["last_message"] or ""))} ({esc(r["last_where"] or "")})</title></text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {h}" width="{width}" height="{h}" role="img" '
           f'aria-label="{esc(title)}">' + "".join(body) + "</svg>")
    lg = legend([("#7d8ea3", "INFO event (tick)", "line"), ("#e08a00", "WARN (hover for the line)", "line"),
                 ("#c62828", "ERROR (hover for the line)", "line")])
    cut = snap.ranks.filter(pl.col("in_window") > pl.col("shown")).height
    sub = (f"{clock(timeline.iso(start))} → {clock(timeline.iso(stop))} UTC · stop: {scrub(snap.how)}"
           + (f" · newest {SNAPSHOT_EVENTS} events per rank shown" if cut else "")
           + (" · a row per bin of ranks: all their events, the text of the rank whose silence lies farthest"
              " from the median" if bins else "")
           + (f" · quiet ranks {_ranks(snap.quiet)}" if snap.quiet else ""))
    return _figure(title, sub, lg + svg, "snapshot")
