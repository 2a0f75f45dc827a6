"""Console text inside a JSON-lines file: the lines that are not JSON -> console events.

Question: what does the text between a rank's JSON lines say? Fact (spec/log-formats.md §3): in
a JSON-lines file such text is most often the process's stderr redirected into it — a Python
traceback, NCCL's or the launcher's lines. It is that file's console text: read by the console
reader (forensics/ingest/console/, a traceback becomes the rank's TRACEBACK event), counted as
events; only what no reader can use (blank lines, binary garbage) stays a reject.

Owns: taking the lines the JSON parser rejected as text, reading each run of consecutive ones
with the console reader (a traceback spans lines: a run is read as one piece of text), and the
rank they belong to: the console reader's own (a `[rank3]:` prefix), else the path's, else the
one rank the block's JSON lines carry (rank_source "mapped"); with none or several, no rank.
Both scanner paths (native and pure Python) call it on the same rejects, numbered as in the file,
so they agree. A traceback cut by a block boundary is read as two pieces (each still an event).
Must not: parse JSON, or drop a line (lines in = events out + rejects out).
"""
from __future__ import annotations

import polars as pl

from ..schema import conform

# the JSON parser's reasons for a line that is text (jsonl._reason)
TEXT_REASONS = ("not JSON: Python traceback", "not JSON: text line")


def is_text_line() -> pl.Expr:
    """A reject that is text: not JSON at all, or a Python dict's repr (`{'loss': 1.76, ...}`,
    what HF Trainer prints to stdout: single quotes, `nan`), which the console reader reads."""
    return (pl.col("reason").is_in(TEXT_REASONS)
            | (pl.col("reason").str.starts_with("invalid JSON") & pl.col("raw").bin.starts_with(b"{'")))


def file_rank(ranks: pl.Series | None) -> int | None:
    """The rank of a block's JSON lines, when they carry exactly one."""
    if ranks is None:
        return None
    u = ranks.drop_nulls().unique()
    return int(u[0]) if len(u) == 1 else None


def read_text(rej: pl.DataFrame, rank_hint: int | None, host_hint: str | None,
              json_rank: int | None) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """(events read from the text rejects of `rej`, or None; the rejects left). `rej` is numbered
    as in the file (BLOCK_REJECT_SCHEMA); events are conformed to the event schema, without
    source_file/format (the caller's)."""
    if not rej.height:
        return None, rej
    is_text = rej.select(is_text_line()).to_series()
    if not is_text.any():
        return None, rej
    # imported here: console imports jsonl (Block), and a JSON-lines ingest without text lines
    # does not pay for the console reader
    from .console.frames import _to_block
    from .console.parser import _Parser
    from .formats import ReaderContext

    text = rej.filter(is_text).sort("line")
    rank = rank_hint if rank_hint is not None else json_rank
    parser = _Parser(ReaderContext(path="", rank_hint=rank, host_hint=host_hint))
    lines = text["line"].to_list()
    raws = text["raw"].to_list()
    rows = []
    start = 0
    for k in range(1, len(lines) + 1):
        if k == len(lines) or lines[k] != lines[k - 1] + 1:
            buf = b"".join(r.rstrip(b"\n") + b"\n" for r in raws[start:k])
            rows += parser.feed(buf, lines[start], final=True)
            start = k
    b = _to_block(rows)
    ev = b.events
    if rank_hint is None and json_rank is not None:
        # the rank came from the file's JSON lines, not from its path
        ev = ev.with_columns(pl.when(pl.col("rank_source") == "path").then(pl.lit("mapped"))
                             .otherwise(pl.col("rank_source").cast(pl.String)).alias("rank_source"))
    left = pl.concat([rej.filter(~is_text), b.rejects.select(rej.columns).cast(rej.schema)]).sort("line")
    assert ev.height + b.rejects.height == text.height, (ev.height, b.rejects.height, text.height)
    return conform(ev), left


def merged(events: pl.DataFrame, text_events: pl.DataFrame) -> pl.DataFrame:
    """A block's JSON events and its text events, in line order (both conformed)."""
    return pl.concat([conform(events), text_events]).sort("line")
