"""The registered JSONL reader: a byte stream in blocks -> parse_block per block.

Owns block iteration and line numbering across blocks; the parsing itself is jsonl.scan_block.
A line longer than the cap (sources.max_line_bytes) never reaches the parser: it is one reject
with its first bytes and its length.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Iterator

from .formats import ReaderContext
from .jsonl import Block, empty_events, rejects_frame, scan_block
from .sources import LongLine, iter_blocks, max_line_bytes

if TYPE_CHECKING:
    from .remap import Remapper

TRUNCATED = "truncated line (no newline at end of file)"


def read(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    line = ctx.first_line
    pending: memoryview | bytes | None = None
    cap = max_line_bytes()
    remap = None
    if ctx.schema_map is not None:   # a file in another schema (seed files never import remap)
        from .remap import Remapper

        remap = Remapper(ctx.schema_map)
    # Look one block ahead so the parser knows which block is the file's last.
    for chunk in iter_blocks(stream, ctx.block_bytes, max_line=cap):
        if pending is not None:
            b = _local_ranks(scan_block(pending, line, False, ctx.rank_hint, ctx.host_hint), remap)
            line += b.lines
            pending = None
            yield b
        if isinstance(chunk, LongLine):
            # an unterminated tail at the end of the file keeps the reason the append logic
            # knows (it is read again once the file has grown)
            why = TRUNCATED if not chunk.terminated and ctx.at_eof else chunk.reason(cap)
            yield Block(empty_events(), rejects_frame([(line, why, chunk.head, chunk.length)]), 1)
            line += 1
            continue
        pending = chunk if remap is None else remap.block(chunk)
    if pending is not None:
        yield _local_ranks(scan_block(pending, line, ctx.at_eof, ctx.rank_hint, ctx.host_hint), remap)


def _local_ranks(b: Block, remap: Remapper | None) -> Block:
    """A remapped file's local rank (kept in `extra.local_rank` by remap.py) into its column."""
    if remap is None or remap.sm.local_rank is None or not b.events.num_rows:
        return b
    import polars as pl
    import pyarrow as pa

    t = b.events
    extra = pl.from_arrow(t["extra"])
    lr = extra.str.json_path_match("$.local_rank").cast(pl.Int32, strict=False).to_arrow()
    i = t.schema.get_field_index("local_rank")
    b.events = t.set_column(i, t.schema.field(i), pa.chunked_array([lr.cast(t.schema.field(i).type)]))
    return b
