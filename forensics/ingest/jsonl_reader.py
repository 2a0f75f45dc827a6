"""The registered JSONL reader: a byte stream in blocks -> parse_block per block.

Owns block iteration and line numbering across blocks; the parsing itself is jsonl.scan_block.
A line longer than the cap (sources.max_line_bytes) never reaches the parser: it is one reject
with its first bytes and its length.
"""
from __future__ import annotations

from typing import BinaryIO, Iterator

from .formats import ReaderContext
from .jsonl import Block, empty_events, rejects_frame, scan_block
from .sources import LongLine, iter_blocks, max_line_bytes

TRUNCATED = "truncated line (no newline at end of file)"


def read(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    line = ctx.first_line
    pending: memoryview | None = None
    cap = max_line_bytes()
    # Look one block ahead so the parser knows which block is the file's last.
    for chunk in iter_blocks(stream, ctx.block_bytes, max_line=cap):
        if pending is not None:
            b = scan_block(pending, line, False, ctx.rank_hint, ctx.host_hint)
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
        pending = chunk
    if pending is not None:
        yield scan_block(pending, line, ctx.at_eof, ctx.rank_hint, ctx.host_hint)
