"""The registered JSONL reader: a byte stream in blocks -> parse_block per block.

Owns block iteration and line numbering across blocks; the parsing itself is jsonl.scan_block.
"""
from __future__ import annotations

from typing import BinaryIO, Iterator

from .formats import ReaderContext
from .jsonl import Block, scan_block
from .sources import iter_blocks


def read(path: str, stream: BinaryIO, ctx: ReaderContext) -> Iterator[Block]:
    line = ctx.first_line
    pending: bytes | None = None
    # Look one block ahead so the parser knows which block is the file's last.
    for chunk in iter_blocks(stream, ctx.block_bytes):
        if pending is not None:
            b = scan_block(pending, line, False, ctx.rank_hint, ctx.host_hint)
            line += b.lines
            yield b
        pending = chunk
    if pending is not None:
        yield scan_block(pending, line, ctx.at_eof, ctx.rank_hint, ctx.host_hint)
