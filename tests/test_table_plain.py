"""`render.layout.print_fitted` writes a table as plain text when rich would print exactly that
text (no colours, no title, every cell on one line within its column), byte for byte what rich
prints; everything else still goes through rich."""
from __future__ import annotations

import io
import random

from rich.console import Console
from rich.text import Text

from forensics.render import layout
from forensics.render.layout import Col, fitted_table, plain_table, print_fitted


def _console(width: int, **kw: object) -> Console:
    return Console(file=io.StringIO(), width=width, soft_wrap=True, color_system=None, no_color=True, **kw)  # type: ignore[arg-type]


def _rich(cols: list[Col], rows: list[list[object]], width: int) -> str:
    c = _console(width)
    t, _, needed = fitted_table(cols, rows, width, row_styles=["dim"] * len(rows))
    c.print(t, width=max(width, needed), crop=False)
    return c.file.getvalue()  # type: ignore[attr-defined]


WORDS = ["", "0", "12", "node3", "GRAD_READY", "step=119 loss=0.6748 lr=8.08e-6", "02:01:45.775", "ERROR", "30m00s",
         "node1/rank_12.jsonl:503", "x" * 45, "日本語テキスト", "naïve café", "a  b", "ünïcödé ok", "12345678901234567890"]


def _table(rng: random.Random) -> tuple[list[Col], list[list[object]]]:
    cols = [Col("rank", "right", key=True), Col("host", drop=5), Col("in window", "right", drop=3),
            Col("message", wrap=8, cap=40, one_line=True, drop=1), Col("file:line", key=True, path=True),
            Col("level", key=True)][: rng.randint(2, 6)]
    rows: list[list[object]] = []
    for _ in range(rng.randint(1, 30)):
        row: list[object] = []
        for c in cols:
            w = rng.choice(WORDS)
            row.append(Text(w, style=rng.choice(["", "bold red", "yellow"])) if rng.random() < 0.3 else w)
        rows.append(row)
    return cols, rows


def test_plain_text_is_what_rich_prints() -> None:
    taken = 0
    for seed in range(120):
        rng = random.Random(seed)
        cols, rows = _table(rng)
        width = rng.choice([40, 60, 80, 120, 240])
        plain = plain_table(_console(width), cols, rows, width)
        if plain is not None:
            taken += 1
            assert plain[0] == _rich(cols, rows, width), seed
            assert plain[1] == layout.fit(cols, rows, width)[2]
    assert taken >= 20   # the comparison ran on many tables, not on none


def test_the_plain_path_is_taken_for_a_plain_wide_table_and_not_otherwise() -> None:
    cols = [Col("rank", "right", key=True), Col("event", key=True), Col("message", wrap=8, cap=40, one_line=True)]
    rows = [[str(r), "GRAD_READY", f"step={r}" + " y" * r] for r in range(50)]
    assert plain_table(_console(240), cols, rows, 240) is not None
    assert plain_table(_console(30), cols, rows, 30) is None                    # the message wraps
    assert plain_table(Console(file=io.StringIO(), width=240, force_terminal=True, color_system="standard"),
                       cols, rows, 240) is None                                  # colours: rich prints them
    assert plain_table(_console(240), cols, [[*r[:2], "two\nlines"] for r in rows], 240) is None
    assert plain_table(_console(240), cols, [[*r[:2], " padded"] for r in rows], 240) is None
    # and print_fitted prints it, with the note on the columns left out as before
    for width in (240, 60, 30):
        c = _console(width)
        print_fitted(c, cols, rows, hint="see more")
        expect = _rich(cols, rows, width)
        dropped = layout.fit(cols, rows, width)[2]
        if dropped:
            expect += f"not shown at {width} columns: {', '.join(dropped)} (see more)\n"
        assert c.file.getvalue() == expect  # type: ignore[attr-defined]
