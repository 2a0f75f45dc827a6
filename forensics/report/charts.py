"""Static charts for the HTML report, written as inline SVG (heatmaps carry an inline PNG).

Owns the drawing primitives: colour maps, "nice" axis ticks, a rank x column heatmap, a
time/step line chart with bands and highlighted series, a bar chart, and a legend. Every chart is
a string of SVG that needs nothing outside the file: no fonts, no scripts, no network.

Why hand-written SVG (see the note in html.py): the report must open offline, stay small on a
64-rank run, and never execute what a log line says. Heatmaps are drawn as a PNG of one pixel per
cell (stretched with `image-rendering: pixelated`), so their size does not grow with the number
of SVG elements; lines are one `<path>` per series.

Must not: read the store, know about findings, or put unescaped text into markup (every label
passes through `esc`).
"""
from __future__ import annotations

import base64
import html
import math
import struct
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

# --- text -------------------------------------------------------------------------------------


def esc(s: object) -> str:
    """Escape text for HTML and SVG content and for attribute values (quotes included)."""
    return html.escape("" if s is None else str(s), quote=True)


def fmt_num(v: float | None) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    a = abs(v)
    if a >= 10_000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    if a >= 0.01 or v == 0:
        return f"{v:.3g}"
    return f"{v:.2g}"


def fmt_nums(v: np.ndarray) -> list[str]:
    """`fmt_num` of every value, commas dropped, "" for NaN: the cells of a heatmap's data-v.
    Whole numbers (100 <= |v| < 1e15, most step times) are rounded by numpy, exactly as `.0f`
    does (half to even on the binary value); the rest go through fmt_num."""
    v = np.asarray(v, float).ravel()
    out = np.full(v.size, "", dtype=object)
    a = np.abs(v)
    big = (a >= 100) & (a < 1e15)       # False for NaN
    out[big] = list(map(str, np.round(v[big]).astype(np.int64).tolist()))
    small = np.isfinite(v) & ~big
    out[small] = [fmt_num(x).replace(",", "") for x in v[small].tolist()]
    return out.tolist()


# --- colour -----------------------------------------------------------------------------------

# Anchor colours of well-known sequential maps (matplotlib's viridis; ColorBrewer YlOrRd),
# interpolated linearly: "more is worse" quantities (time, wait, temperature) use YlOrRd,
# neutral ones (clock, utilisation) viridis.
CMAPS: dict[str, list[tuple[int, int, int]]] = {
    "viridis": [(68, 1, 84), (72, 40, 120), (62, 74, 137), (49, 104, 142), (38, 130, 142),
                (31, 158, 137), (53, 183, 121), (109, 205, 89), (180, 222, 44), (253, 231, 37)],
    "ylorrd": [(255, 255, 204), (255, 237, 160), (254, 217, 118), (254, 178, 76), (253, 141, 60),
               (252, 78, 42), (227, 26, 28), (189, 0, 38), (128, 0, 38)],
}
MISSING_RGB = (236, 238, 241)
# Distinct colours for highlighted series (Tableau 10, colour-blind friendly order).
SERIES = ["#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
PEER = "#9aa3ad"


def cmap_rgb(name: str, t: np.ndarray) -> np.ndarray:
    """Colours (N x 3 uint8) for values t in [0, 1]; NaN gets the missing colour."""
    anchors = np.array(CMAPS[name], dtype=float)
    k = len(anchors) - 1
    tt = np.clip(np.nan_to_num(t, nan=0.0), 0.0, 1.0) * k
    i = np.minimum(np.floor(tt).astype(int), k - 1)
    f = (tt - i)[..., None]
    rgb = anchors[i] * (1 - f) + anchors[i + 1] * f
    rgb[np.isnan(t)] = MISSING_RGB
    return rgb.round().astype(np.uint8)


def cmap_css(name: str, t: float) -> str:
    r, g, b = cmap_rgb(name, np.array([t]))[0]
    return f"#{r:02x}{g:02x}{b:02x}"


def png_data_uri(rgb: np.ndarray) -> str:
    """An RGB image (H x W x 3 uint8) as a data: URI, written with zlib only."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def robust_range(v: np.ndarray, lo_q: float = 2, hi_q: float = 98) -> tuple[float, float]:
    """The colour domain: 2nd..98th percentile, so one outlier cell does not wash out the rest."""
    x = v[np.isfinite(v)]
    if x.size == 0:
        return 0.0, 1.0
    lo, hi = float(np.percentile(x, lo_q)), float(np.percentile(x, hi_q))
    if hi <= lo:
        lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        hi = lo + 1.0
    return lo, hi


# --- axes -------------------------------------------------------------------------------------


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step - 1e-9) * step
    out = []
    v = start
    while v <= hi + 1e-9 * step:
        out.append(round(v, 10))
        v += step
    return out


def time_label(seconds: float) -> str:
    s = int(round(seconds))
    if abs(seconds) < 60:
        return f"{seconds:.0f}s" if abs(seconds) >= 1 or seconds == 0 else f"{seconds:.1f}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}"


def time_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """Ticks on elapsed seconds at human steps (1 s ... 6 h)."""
    span = hi - lo
    if span <= 0:
        return [lo]
    for step in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400):
        if span / step <= n:
            break
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


@dataclass
class Frame:
    """Plot area geometry and the two linear scales."""

    width: int
    height: int
    left: int = 56
    right: int = 16
    top: int = 10
    bottom: int = 30
    x0: float = 0.0
    x1: float = 1.0
    y0: float = 0.0
    y1: float = 1.0

    @property
    def pw(self) -> float:
        return self.width - self.left - self.right

    @property
    def ph(self) -> float:
        return self.height - self.top - self.bottom

    def sx(self, x: float) -> float:
        return self.left + (x - self.x0) / ((self.x1 - self.x0) or 1.0) * self.pw

    def sy(self, y: float) -> float:
        return self.top + self.ph - (y - self.y0) / ((self.y1 - self.y0) or 1.0) * self.ph


def _axes(fr: Frame, xticks: Sequence[float], xlab, yticks: Sequence[float], ylab, xtitle: str = "",
          ytitle: str = "") -> list[str]:
    out = [f'<rect class="plot" x="{fr.left}" y="{fr.top}" width="{fr.pw:.1f}" height="{fr.ph:.1f}"/>']
    for t in yticks:
        y = fr.sy(t)
        out.append(f'<line class="grid" x1="{fr.left}" x2="{fr.left + fr.pw:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{fr.left - 5}" y="{y + 3.5:.1f}" text-anchor="end">{esc(ylab(t))}</text>')
    for t in xticks:
        x = fr.sx(t)
        out.append(f'<line class="tickmark" x1="{x:.1f}" x2="{x:.1f}" y1="{fr.top + fr.ph:.1f}" y2="{fr.top + fr.ph + 4:.1f}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{fr.top + fr.ph + 16:.1f}" text-anchor="middle">{esc(xlab(t))}</text>')
    if xtitle:
        out.append(f'<text class="axis" x="{fr.left + fr.pw:.1f}" y="{fr.height - 2}" text-anchor="end">{esc(xtitle)}</text>')
    if ytitle:
        out.append(f'<text class="axis" x="12" y="{fr.top + fr.ph / 2:.1f}" text-anchor="middle" '
                   f'transform="rotate(-90 12 {fr.top + fr.ph / 2:.1f})">{esc(ytitle)}</text>')
    return out


def _svg(width: int, height: int, body: list[str], label: str, extra: str = "") -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img" aria-label="{esc(label)}"{extra}>' + "".join(body) + "</svg>")


def colorbar(cmap: str, lo: float, hi: float, unit: str, width: int = 220, gid: str = "cb") -> str:
    stops = "".join(f'<stop offset="{i / 10:.1f}" stop-color="{cmap_css(cmap, i / 10)}"/>' for i in range(11))
    ticks = nice_ticks(lo, hi, 4)
    body = [f'<defs><linearGradient id="{esc(gid)}">{stops}</linearGradient></defs>',
            f'<rect x="0" y="2" width="{width}" height="10" fill="url(#{esc(gid)})" rx="2"/>']
    # a narrow range (277.5 .. 278.5) needs decimals that fmt_num would round away
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 0.0
    decimals = max(0, -math.floor(math.log10(step))) if 0 < step < 1 else 0
    for t in ticks:
        x = (t - lo) / (hi - lo) * width if hi > lo else 0
        if 0 <= x <= width:
            label = f"{t:.{decimals}f}" if decimals else fmt_num(t)
            body.append(f'<line class="tickmark" x1="{x:.1f}" x2="{x:.1f}" y1="12" y2="15"/>')
            body.append(f'<text class="tick" x="{x:.1f}" y="26" text-anchor="middle">{esc(label)}</text>')
    body.append(f'<text class="tick" x="{width + 6}" y="11">{esc(unit)}</text>')
    return _svg(width + 60, 30, body, f"colour scale {unit}", ' class="colorbar"')


# --- rows of per-rank charts ------------------------------------------------------------------

# Rows of a per-rank chart (heatmap rows, bars): one per rank up to this many, as on a small run;
# above, a row stands for a bin of consecutive ranks. 256 rows at the heatmap's 3 px minimum is
# ~800 px, one screen, with a rank label every 4th row; a 10,240-rank run would otherwise be a
# 30,000 px picture of 1 M cells that nobody can read.
ROW_BUDGET = 256


@dataclass
class RankRows:
    """Row i stands for ranks[start[i]:stop[i]]: one rank each, or (`binned`) bins of `per`
    consecutive ranks, the highlighted ranks rows of their own. From 8 up `per` is a multiple
    of 8: whole 8-GPU nodes when ranks are numbered node by node."""

    ranks: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    per: int = 1

    @property
    def binned(self) -> bool:
        return self.per > 1

    @property
    def first(self) -> list[int]:
        return self.ranks[self.start].tolist()

    def labels(self) -> list[str]:
        """A rank, or a bin's range of ranks "0–47"."""
        last = self.ranks[self.stop - 1].tolist()
        return [str(a) if a == b else f"{a}–{b}" for a, b in zip(self.first, last)]


def rank_rows(ranks: Sequence[int], highlight: Sequence[int] = (), budget: int = ROW_BUDGET) -> RankRows:
    """The rows for `ranks` (sorted): one per rank within `budget`, else bins of consecutive
    ranks aligned to multiples of the bin size, split around the highlighted ranks, at most
    `budget` rows in all."""
    rs = np.asarray(ranks, dtype=np.int64)
    n = rs.size
    if n <= budget:
        idx = np.arange(n)
        return RankRows(rs, idx, idx + 1)
    hl = np.flatnonzero(np.isin(rs, list(highlight)))
    # each highlighted rank cuts at most one bin in two and adds its own row
    need = math.ceil(n / max(budget - 2 * hl.size, 1))
    per = 1 << (need - 1).bit_length() if need <= 8 else 8 * math.ceil(need / 8)
    cuts = np.union1d(np.arange(0, n, per), np.concatenate([hl, hl + 1]))
    cuts = cuts[cuts < n]
    return RankRows(rs, cuts, np.append(cuts[1:], n), per)


def pick_outliers(values: np.ndarray, rows: RankRows) -> tuple[np.ndarray, np.ndarray]:
    """`values` (a row per rank, a column per step bin, NaN = no value) reduced to `rows`: per
    row and column, the value of the rank farthest from that column's median over all ranks,
    and that rank (-1 where the row has no value; ties: the lowest rank). In a synchronous job a
    straggler is the one rank that waits least while everyone's step time rises with it: a bin's
    mean would wash it out and its max would hide a low one; the farthest value keeps either."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # a column without any value has no median
        med = np.nanmedian(values, axis=0)
    dev = np.abs(values - med)
    dev[np.isnan(dev)] = -1.0          # no value: never picked over one
    out = np.full((rows.start.size, values.shape[1]), np.nan)
    who = np.full(out.shape, -1, dtype=np.int64)
    cols = np.arange(values.shape[1])
    for i, (a, b) in enumerate(zip(rows.start.tolist(), rows.stop.tolist())):   # <= ROW_BUDGET rows
        k = a + np.argmax(dev[a:b], axis=0)
        out[i] = values[k, cols]
        who[i] = np.where(np.isnan(out[i]), -1, rows.ranks[k])
    return out, who


# --- heatmap ----------------------------------------------------------------------------------


def heatmap(values: np.ndarray, rows: Sequence[int], col_lo: Sequence[int], col_hi: Sequence[int], *,
            cmap: str, unit: str, label: str, highlight: Sequence[int] = (), width: int = 1040,
            gid: str = "hm", xtitle: str = "step", labels: Sequence[str] | None = None,
            who: np.ndarray | None = None) -> str:
    """Rows are ranks, columns are step bins [col_lo[j], col_hi[j]]. NaN cells are grey.

    The cell values travel in `data-v` (rounded, row-major) so the page's script can show a
    tooltip; the picture itself needs no script. Binned rows (see `rank_rows`): `rows` are their
    first ranks (the axis), `labels` their ranges (the tooltip), `who` the rank each cell's value
    is from (-1: none, or the row's only rank), which data-v carries as "rank 13: 120" (the
    tooltip reads "rank 0–47 · step 5 · rank 13: 120 ms").
    """
    nr, nc = values.shape
    row_h = max(3, min(22, 360 // max(nr, 1)))
    fr = Frame(width=width, height=row_h * nr + 40, left=64, right=12, top=6, bottom=34,
               x0=0, x1=nc, y0=0, y1=nr)
    lo, hi = robust_range(values)
    rgb = cmap_rgb(cmap, (values - lo) / (hi - lo))
    body: list[str] = []
    body.append(f'<image x="{fr.left}" y="{fr.top}" width="{fr.pw:.1f}" height="{fr.ph:.1f}" '
                f'preserveAspectRatio="none" class="px" href="{png_data_uri(rgb)}"/>')
    body.append(f'<rect class="frame" x="{fr.left}" y="{fr.top}" width="{fr.pw:.1f}" height="{fr.ph:.1f}"/>')
    # rank labels: all when they fit, else every k-th, and the highlighted ones always
    every = max(1, math.ceil(11 / row_h))
    hl = set(highlight)
    for i, r in enumerate(rows):
        y = fr.top + (i + 0.5) * row_h
        if r in hl:
            body.append(f'<text class="tick hl" x="{fr.left - 5}" y="{y + 3.5:.1f}" text-anchor="end">▶ {esc(r)}</text>')
        elif i % every == 0:
            body.append(f'<text class="tick" x="{fr.left - 5}" y="{y + 3.5:.1f}" text-anchor="end">{esc(r)}</text>')
    for j in _col_ticks(col_lo, col_hi):
        x = fr.sx(j + 0.5)
        body.append(f'<line class="tickmark" x1="{x:.1f}" x2="{x:.1f}" y1="{fr.top + fr.ph:.1f}" y2="{fr.top + fr.ph + 4:.1f}"/>')
        body.append(f'<text class="tick" x="{x:.1f}" y="{fr.top + fr.ph + 16:.1f}" text-anchor="middle">{esc(col_lo[j])}</text>')
    body.append(f'<text class="axis" x="{fr.left + fr.pw:.1f}" y="{fr.height - 2}" text-anchor="end">{esc(xtitle)}</text>')
    body.append(f'<text class="axis" x="12" y="{fr.top + fr.ph / 2:.1f}" text-anchor="middle" '
                f'transform="rotate(-90 12 {fr.top + fr.ph / 2:.1f})">rank</text>')
    cells = fmt_nums(values)
    if who is not None:
        cells = [f"rank {w}: {c}" if w >= 0 else c for w, c in zip(who.ravel().tolist(), cells)]
    data = ",".join(cells)
    attrs = (f' class="heatmap" data-rows="{esc(",".join(map(str, labels if labels is not None else rows)))}"'
             f' data-c0="{esc(",".join(map(str, col_lo)))}"'
             f' data-c1="{esc(",".join(map(str, col_hi)))}" data-v="{data}" data-unit="{esc(unit)}"'
             f' data-box="{fr.left},{fr.top},{fr.pw:.1f},{fr.ph:.1f}"')
    return _svg(width, fr.height, body, label, attrs) + colorbar(cmap, lo, hi, unit, gid=gid)


def _col_ticks(col_lo: Sequence[int], col_hi: Sequence[int], n: int = 10) -> list[int]:
    nc = len(col_lo)
    if nc == 0:
        return []
    first, last = col_lo[0], col_hi[-1]
    cand = nice_ticks(first, last, n)
    out: list[int] = []
    j = 0
    for t in cand:
        while j < nc and col_hi[j] < t:
            j += 1
        if j < nc and (not out or out[-1] != j):
            out.append(j)
    return out


# --- line chart -------------------------------------------------------------------------------


@dataclass
class Series:
    name: str
    x: np.ndarray
    y: np.ndarray
    color: str = PEER
    width: float = 1.2
    dash: str = ""
    opacity: float = 1.0


@dataclass
class Band:
    x: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    color: str = PEER
    name: str = ""


@dataclass
class LineChart:
    label: str
    unit: str
    xkind: str = "time"          # time (elapsed s) | step
    series: list[Series] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    hlines: list[tuple[float, str, str]] = field(default_factory=list)     # (y, label, colour)
    spans: list[tuple[float, float, str]] = field(default_factory=list)    # (x0, x1, label)
    ymin: float | None = None
    ymax: float | None = None
    width: int = 520
    height: int = 210
    percent: bool = False


def _path(fr: Frame, x: np.ndarray, y: np.ndarray) -> str:
    """One path; gaps (NaN) break the line."""
    parts: list[str] = []
    pen = False
    for a, b in zip(x, y):
        if not (math.isfinite(a) and math.isfinite(b)):
            pen = False
            continue
        parts.append(f"{'L' if pen else 'M'}{fr.sx(a):.1f},{fr.sy(b):.1f}")
        pen = True
    return "".join(parts)


def line_chart(c: LineChart) -> str:
    xs = [s.x for s in c.series] + [b.x for b in c.bands]
    ys = [s.y for s in c.series] + [b.lo for b in c.bands] + [b.hi for b in c.bands] + [np.array([h[0] for h in c.hlines])]
    xall = np.concatenate([np.asarray(x, float) for x in xs]) if xs else np.array([0.0, 1.0])
    yall = np.concatenate([np.asarray(y, float) for y in ys]) if ys else np.array([0.0, 1.0])
    xall, yall = xall[np.isfinite(xall)], yall[np.isfinite(yall)]
    x0, x1 = (float(xall.min()), float(xall.max())) if xall.size else (0.0, 1.0)
    y0, y1 = (float(yall.min()), float(yall.max())) if yall.size else (0.0, 1.0)
    if c.ymin is not None:
        y0 = min(y0, c.ymin)
    if c.ymax is not None:
        y1 = max(y1, c.ymax)
    if y1 <= y0:
        y1 = y0 + 1.0
    pad = (y1 - y0) * 0.05
    if c.ymin is None or y0 < c.ymin:
        y0 -= pad
    y1 += pad
    if x1 <= x0:
        x1 = x0 + 1.0
    fr = Frame(width=c.width, height=c.height, x0=x0, x1=x1, y0=y0, y1=y1)
    yt = nice_ticks(y0, y1, 4)
    ylab = (lambda t: f"{t:.0%}") if c.percent else fmt_num
    if c.xkind == "time":
        xt, xlab, xtitle = time_ticks(x0, x1), time_label, "time since start"
    else:
        xt = [t for t in nice_ticks(x0, x1, 6) if float(t).is_integer()]
        xlab, xtitle = (lambda t: f"{int(t)}"), "step"
    body = _axes(fr, xt, xlab, yt, ylab, xtitle, c.unit)
    for a, b, lab in c.spans:
        xa, xb = fr.sx(max(a, x0)), fr.sx(min(b, x1))
        body.append(f'<rect class="span" x="{xa:.1f}" y="{fr.top}" width="{max(xb - xa, 1):.1f}" height="{fr.ph:.1f}"/>')
        body.append(f'<text class="spanlabel" x="{xa + 4:.1f}" y="{fr.top + 12}">{esc(lab)}</text>')
    body.append(f'<clipPath id="clip-{id(c)}"><rect x="{fr.left}" y="{fr.top}" width="{fr.pw:.1f}" height="{fr.ph:.1f}"/></clipPath>')
    body.append(f'<g clip-path="url(#clip-{id(c)})">')
    for b in c.bands:
        ok = np.isfinite(b.x) & np.isfinite(b.lo) & np.isfinite(b.hi)
        if ok.sum() >= 2:
            top = " ".join(f"{fr.sx(x):.1f},{fr.sy(y):.1f}" for x, y in zip(b.x[ok], b.hi[ok]))
            bot = " ".join(f"{fr.sx(x):.1f},{fr.sy(y):.1f}" for x, y in zip(b.x[ok][::-1], b.lo[ok][::-1]))
            body.append(f'<polygon class="band" fill="{b.color}" points="{top} {bot}"><title>{esc(b.name)}</title></polygon>')
    for s in c.series:
        d = _path(fr, np.asarray(s.x, float), np.asarray(s.y, float))
        if d:
            dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
            body.append(f'<path d="{d}" fill="none" stroke="{s.color}" stroke-width="{s.width}" '
                        f'stroke-opacity="{s.opacity}" stroke-linejoin="round"{dash}><title>{esc(s.name)}</title></path>')
    body.append("</g>")
    for y, lab, col in c.hlines:
        if y0 <= y <= y1:
            yy = fr.sy(y)
            body.append(f'<line x1="{fr.left}" x2="{fr.left + fr.pw:.1f}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="{col}" '
                        f'stroke-dasharray="5 3" stroke-width="1.2"/>')
            body.append(f'<text class="hlabel" x="{fr.left + fr.pw - 4:.1f}" y="{yy - 4:.1f}" text-anchor="end" fill="{col}">{esc(lab)}</text>')
    return _svg(c.width, c.height, body, c.label, ' class="chart"')


def legend(items: Sequence[tuple[str, str, str]]) -> str:
    """HTML legend: (colour, label, kind) with kind line|band|dash."""
    out = []
    for color, lab, kind in items:
        sw = {"band": f'<span class="sw band" style="background:{color}"></span>',
              "dash": f'<span class="sw dash" style="border-color:{color}"></span>'}.get(
            kind, f'<span class="sw line" style="background:{color}"></span>')
        out.append(f'<span class="lg">{sw}{esc(lab)}</span>')
    return '<div class="legend">' + "".join(out) + "</div>"


# --- bars -------------------------------------------------------------------------------------


def bar_chart(ranks: Sequence[int], med: np.ndarray, p90: np.ndarray, *, unit: str, label: str,
              highlight: Sequence[int] = (), width: int = 1040, height: int = 200,
              labels: Sequence[str] | None = None, who: Sequence[int] | None = None) -> str:
    """One bar per rank (the median) with a tick at the 90th percentile. Binned rows (see
    `rank_rows`): `ranks` are their first ranks (the axis), `labels` their ranges and `who` the
    rank each bar is from (the tooltip)."""
    n = len(ranks)
    top = float(np.nanmax(np.concatenate([med, p90]))) if n and np.isfinite(np.concatenate([med, p90])).any() else 1.0
    fr = Frame(width=width, height=height, x0=-0.5, x1=n - 0.5, y0=0, y1=top * 1.08 or 1.0, left=56)
    yt = nice_ticks(0, fr.y1, 4)
    every = max(1, math.ceil(n / 40))
    xt = [i for i in range(n) if i % every == 0]
    body = _axes(fr, xt, lambda i: str(ranks[int(i)]), yt, fmt_num, "rank", unit)
    bw = min(36.0, max(1.0, fr.pw / max(n, 1) * 0.72))
    hl = set(highlight)
    for i, (r, m, p) in enumerate(zip(ranks, med, p90)):
        x = fr.sx(i)
        cls = "bar hl" if r in hl else "bar"
        if math.isfinite(m):
            y = fr.sy(m)
            name = f"rank {r}" if who is None or labels[i] == str(who[i]) else f"ranks {labels[i]}, rank {who[i]}"
            body.append(f'<rect class="{cls}" x="{x - bw / 2:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{fr.top + fr.ph - y:.1f}">'
                        f'<title>{esc(name)}: median {esc(fmt_num(float(m)))} {esc(unit)}, p90 {esc(fmt_num(float(p)))} {esc(unit)}</title></rect>')
        if math.isfinite(p):
            y = fr.sy(p)
            body.append(f'<line class="p90" x1="{x - bw / 2:.1f}" x2="{x + bw / 2:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>')
    return _svg(width, height, body, label, ' class="chart"')
