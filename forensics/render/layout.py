"""Fitting a table to the terminal: which columns to show, how wide, what was left out.

Owns the column layout every query table shares (`events`, `ranks`, `timeline`, `last-10s`):
key columns (rank, step, level, event, time, file:line) are always shown with their values whole;
free text (messages, metrics) wraps down to a minimum width; headers wrap at spaces; and when
that is not enough, the least useful optional columns are left out and named in a one-line note.
Without this, rich squeezes every column alike and a narrow terminal shows `…` in place of the
numbers. Must not compute anything about the run; it only measures text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

# A table without outer edges: one divider and one space either side between columns.
SEPARATOR = 3
# Free text (messages, metrics) narrower than this reads poorly: headers wrap before it shrinks further.
COMFORTABLE = 28
# A one-line column (Col.one_line) narrower than this wraps its (capped) text instead of cutting it.
ONE_LINE_MIN = 20


@dataclass
class Col:
    """One column. `key` columns are never left out and never cut; optional columns give way in
    order of `drop` (higher first). `wrap` is the width free text may wrap down to (None: the
    values are shown whole on one line); `cap` bounds how wide such text grows."""

    head: str
    justify: str = "left"
    key: bool = False
    drop: int = 0
    wrap: int | None = None
    cap: int | None = None
    path: bool = False        # file:line values: never broken (a path cut in two cannot be copied)
    one_line: bool = False    # free text cut (with …) to one line when the column is wide enough
    below: bool = False       # free text that, rather than be left out, is printed under its row


def _text(v: Any) -> str:
    return v.plain if isinstance(v, Text) else ("" if v is None else str(v))


def _cells(s: str) -> int:
    """Terminal cells of `s`: its length when it is printable ASCII (the cells of a 4,096-row
    table are measured twice; rich's cell_len is the slow part)."""
    return len(s) if s.isascii() and s.isprintable() else cell_len(s)


def _longest_line(s: str) -> int:
    return _cells(s) if "\n" not in s else max((cell_len(x) for x in s.split("\n")), default=0)


def _longest(texts: list[str]) -> int:
    """The widest line among `texts` (0 for none): one pass in C when all are printable ASCII."""
    joined = "".join(texts)
    if joined.isascii() and joined.isprintable():
        return max(map(len, texts), default=0)
    return max(map(_longest_line, texts), default=0)


def _widths(cols: Sequence[Col], rows: Sequence[Sequence[Any]]) -> tuple[list[int], list[int]]:
    """Natural and minimum content width of each column."""
    nat: list[int] = []
    low: list[int] = []
    for i, c in enumerate(cols):
        texts = [_text(r[i]) for r in rows]
        values = _longest(texts)
        head_min = max((cell_len(w) for w in c.head.split()), default=0)
        natural = max(values if c.cap is None else min(values, c.cap), cell_len(c.head))
        if c.wrap is not None:
            least = max(min(c.wrap, natural), head_min)
        else:
            least = max(values, head_min)
        nat.append(natural)
        low.append(min(least, natural))
    return nat, low


def fit(cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int) -> tuple[list[int], list[int], list[str]]:
    """(indices of the columns shown, their widths, heads of the columns left out) for a table of
    at most `width` cells. When even the key columns do not fit, they keep their minimum widths
    (the table is then wider than `width`: whole values beat a tidy edge)."""
    nat, low = _widths(cols, rows)
    shown = list(range(len(cols)))
    is_flex = [c.wrap is not None for c in cols]
    comfortable = [max(low[i], min(nat[i], COMFORTABLE)) if is_flex[i] else low[i] for i in range(len(cols))]

    def need(idx: list[int], w: Sequence[int]) -> int:
        return sum(w[i] for i in idx) + SEPARATOR * max(len(idx) - 1, 0)

    dropped: list[int] = []
    # Columns less useful than all the free text go before that text is squeezed below a
    # comfortable width; then anything optional, least useful first, before a key is cut.
    text_rank = max((cols[i].drop for i in shown if is_flex[i] and not cols[i].key), default=-1)
    for floor, may_go in ((comfortable, lambda i: cols[i].drop > text_rank), (low, lambda i: True)):
        while need(shown, floor) > width:
            optional = [i for i in shown if not cols[i].key and may_go(i)]
            if not optional:
                break
            worst = max(optional, key=lambda i: (cols[i].drop, i))
            shown.remove(worst)
            dropped.append(worst)
    w = {i: nat[i] for i in shown}
    excess = need(shown, nat) - width
    flexible = [i for i in shown if is_flex[i]]
    fixed = [i for i in shown if not is_flex[i]]
    # free text first gives up what it has beyond a comfortable width, then headers wrap (one
    # more header line), then free text wraps further (more lines in every row); widest first
    for group, floor in ((flexible, comfortable), (fixed, low), (flexible, low)):
        while excess > 0:
            slack = [i for i in group if w[i] > floor[i]]
            if not slack:
                break
            i = max(slack, key=lambda j: (w[j] - floor[j], w[j]))
            # a wrapped header is as narrow as its longest word: wrap it all the way, once
            step = w[i] - floor[i] if group is fixed else 1
            w[i] -= step
            excess -= step
    return shown, [w[i] for i in shown], [cols[i].head for i in sorted(dropped)]


def _one_line(v: Any, width: int, cap: int | None) -> Any:
    """Text cut with … to one line of `width`, or, in a column too narrow for a useful line, to
    `cap` characters that then wrap."""
    s = _text(v)
    n = width if width >= ONE_LINE_MIN else (cap or len(s))
    if len(s) <= n:
        return v
    return Text(s[:n - 1] + "…", style=v.style if isinstance(v, Text) else "")


def _build(cols: Sequence[Col], shown: list[int], widths: list[int], rows: Sequence[Sequence[Any]], *,
           row_styles: Sequence[str] | None = None, title: str | None = None, header: bool = True) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, show_header=header)
    for i, w in zip(shown, widths):
        c = cols[i]
        # values of a column without `wrap` fit its width: only its header wraps (at spaces)
        t.add_column(c.head, justify=c.justify, width=w, overflow="fold")  # type: ignore[arg-type]
    for n, r in enumerate(rows):
        cells = [_one_line(r[i], w, cols[i].cap) if cols[i].one_line else r[i] for i, w in zip(shown, widths)]
        t.add_row(*(Text(c) if isinstance(c, str) else c for c in cells),
                  style=row_styles[n] if row_styles else None)
    return t


def fitted_table(cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int, *,
                 row_styles: Sequence[str] | None = None, title: str | None = None) -> tuple[Table, list[str], int]:
    """A rich table of the columns that fit `width`, the heads left out, and the width it needs
    (print it at least that wide)."""
    shown, widths, dropped = fit(cols, rows, width)
    t = _build(cols, shown, widths, rows, row_styles=row_styles, title=title)
    return t, dropped, sum(widths) + SEPARATOR * max(len(widths) - 1, 0)


# Text printed under its row: indented past the first column's start, at most this many characters
BELOW_INDENT = 4
BELOW_CHARS = 2000


def _print_wide(console: Console, renderable: Any, needed: int) -> None:
    """Print at least `needed` cells wide: rich clamps `print(width=)` to the console's width and
    would then squeeze whole-valued key columns (a path) to nothing; the terminal wraps instead."""
    width = console.width
    console.width = max(width, needed)
    try:
        console.print(renderable, crop=False)
    finally:
        console.width = width


def _print_below(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[Any]], under: list[int], *,
                 row_styles: Sequence[str] | None, title: str | None) -> None:
    """The table without the `under` columns, each row followed by their text (wrapped to the
    width, indented): a message too wide for a column of its own stays readable."""
    from rich.padding import Padding

    keep = [i for i in range(len(cols)) if i not in under]
    cols2 = [cols[i] for i in keep]
    rows2 = [[r[i] for i in keep] for r in rows]
    shown, widths, _ = fit(cols2, rows2, console.width)
    needed = sum(widths) + SEPARATOR * max(len(widths) - 1, 0)
    for n, (r, r2) in enumerate(zip(rows, rows2)):
        style = [row_styles[n]] if row_styles else None
        _print_wide(console, _build(cols2, shown, widths, [r2], row_styles=style, title=title if n == 0 else None,
                                    header=n == 0), needed)
        for i in under:
            text = _text(r[i]).strip()
            if text:
                if len(text) > BELOW_CHARS:
                    text = text[:BELOW_CHARS - 1] + "…"
                console.print(Padding(Text(text, style="dim"), (0, 0, 0, BELOW_INDENT)), width=console.width, soft_wrap=False)


def _plain_column(values: list[Any], width: int, right: bool) -> list[str] | None:
    """The cells of one column padded to `width` as rich pads them, when rich would print each
    unchanged (one printable line within the width, no edge spaces, no justify or overflow of
    its own), else None."""
    texts: list[str] = []
    for v in values:
        if isinstance(v, Text):
            if v.justify is not None or v.overflow is not None or v.no_wrap is not None or v.end != "\n":
                return None
            v = v.plain
        elif not isinstance(v, str):
            return None
        texts.append(v)
    joined = "".join(texts)
    if not joined.isprintable() or any(t != t.strip() for t in texts):
        return None
    if joined.isascii():   # a character per cell
        if max(map(len, texts), default=0) > width:
            return None
        return [t.rjust(width) if right else t.ljust(width) for t in texts]
    out = []
    for t in texts:
        n = cell_len(t)
        if n > width:
            return None
        out.append(" " * (width - n) + t if right else t + " " * (width - n))
    return out


def plain_table(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[Any]],
                width: int) -> tuple[str, list[str]] | None:
    """What `print_fitted` prints for the table (without its note) and the heads left out, the
    table built as plain text when rich would print exactly that text: a console without
    colours and no title, every header and every cell on one line within its column. Rich lays
    out a table cell by cell (~9 s for the 4,096-rank `last-10s` table); this pads a column at a
    time and joins each row once. None when it does not apply."""
    if console.color_system is not None or console.record or console.legacy_windows or not rows:
        return None
    shown, widths, dropped = fit(cols, rows, width)
    if sum(widths) + SEPARATOR * max(len(widths) - 1, 0) > width \
            or any(cols[i].justify not in ("left", "right") for i in shown):
        return None
    last = len(shown) - 1
    columns: list[list[str]] = []
    for k, (i, w) in enumerate(zip(shown, widths)):
        c = cols[i]
        values = [c.head, *((_one_line(r[i], w, c.cap) for r in rows) if c.one_line else (r[i] for r in rows))]
        padded = _plain_column(values, w, c.justify == "right")
        if padded is None:
            return None
        # one space either side of each divider, none at the table's edges
        columns.append(padded if last == 0 else [p + " " for p in padded] if k == 0 else
                       [" " + p for p in padded] if k == last else [f" {p} " for p in padded])
    lines = ["┃".join(cells) if n == 0 else "│".join(cells) for n, cells in enumerate(zip(*columns))]
    lines.insert(1, "╇".join("━" * (w + (k > 0) + (k < last)) for k, w in enumerate(widths)))
    return "\n".join(lines) + "\n", dropped


def print_fitted(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[Any]], *,
                 row_styles: Sequence[str] | None = None, title: str | None = None, hint: str = "") -> None:
    """Print the table fitted to the console; then, if columns were left out, one line naming
    them (and `hint`, where the rest can be seen)."""
    width = console.width
    under = [i for i, c in enumerate(cols) if c.below and c.head in fit(cols, rows, width)[2]] if rows else []
    plain = plain_table(console, cols, rows, width) if title is None and not under else None
    if under:
        _print_below(console, cols, rows, under, row_styles=row_styles, title=title)
        dropped = fit([c for i, c in enumerate(cols) if i not in under],
                      [[x for i, x in enumerate(r) if i not in under] for r in rows], width)[2]
    elif plain is not None:
        text, dropped = plain
        console.file.write(text)   # what rich would write (row styles need colours: there are none)
        console.file.flush()
    else:
        t, dropped, needed = fitted_table(cols, rows, width, row_styles=row_styles, title=title)
        _print_wide(console, t, needed)
    if dropped:
        names = ", ".join(dropped)
        console.print(f"not shown at {width} columns: {names}" + (f" ({hint})" if hint else ""),
                      markup=False, highlight=False)
