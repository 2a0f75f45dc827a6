"""Finding, opening and identifying input files.

Owns: expanding paths/globs/directories into files, transparent gzip/zstd, content sniffing,
file fingerprints (for no-op re-ingest and duplicate detection), and what a path says about rank
and host. Must not parse log lines (readers do).
"""
from __future__ import annotations

import glob
import gzip
import hashlib
import io
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from ..errors import NO_INPUT, UNREADABLE, ForensicsError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
HEAD_BYTES = 1 << 20      # fingerprint covers the first MiB ...
TAIL_BYTES = 1 << 16      # ... and the last 64 KiB

# Names that are never logs: our own stores, VCS, caches.
_SKIP_DIRS = {".git", "__pycache__", ".forensics-cache"}
_SKIP_SUFFIXES = (".parquet", ".pyc", ".png", ".jpg", ".svg", ".html", ".toml", ".md", ".sh")

_RANK_PATTERNS = [
    re.compile(r"(?i)(?:^|[^a-z])rank[_\-=]?0*(\d+)(?!.*rank)"),
    re.compile(r"(?i)_dump_0*(\d+)$"),
]
_HOST_PATTERN = re.compile(r"(?i)^(?:node|host|worker-node)[_\-=]?[a-z0-9.\-]*\d[a-z0-9.\-]*$")


def compression_of(head: bytes) -> str:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return "none"


def expand(inputs: list[str]) -> list[Path]:
    """Files named by paths, directories (recursively) and globs, in a stable order, deduplicated.

    A path that matches nothing is a user error: it is reported, not skipped silently.
    """
    out: dict[str, Path] = {}
    missing: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_file():
            out.setdefault(str(p.resolve()), p)
        elif p.is_dir():
            if (p / "manifest.json").is_file() and (p / "events").is_dir():
                raise ForensicsError(
                    f"{p} is a forensics store, not a log folder",
                    where=str(p),
                    help="pass the store to the query commands, or the raw logs to ingest",
                    code=NO_INPUT,
                )
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".forensics") and not d.startswith("."))
                for f in sorted(files):
                    if f.startswith(".") or f.endswith(_SKIP_SUFFIXES):
                        continue
                    fp = Path(root) / f
                    if fp.is_file():
                        out.setdefault(str(fp.resolve()), fp)
        else:
            hits = sorted(glob.glob(item, recursive=True))
            files = [Path(h) for h in hits if Path(h).is_file()]
            if not files:
                missing.append(item)
            for fp in files:
                out.setdefault(str(fp.resolve()), fp)
    if missing:
        raise ForensicsError(
            f"no such file, directory or glob match: {', '.join(missing)}",
            where=missing[0],
            help="check the path; quote globs so the shell passes them through ('logs/**/*.jsonl')",
            code=NO_INPUT,
        )
    if not out:
        raise ForensicsError("no log files found", where=", ".join(inputs), code=NO_INPUT)
    return list(out.values())


@dataclass(frozen=True)
class FileInfo:
    path: str            # absolute
    size: int
    mtime: float
    compression: str
    fingerprint: str     # content identity: size + head + tail hashes
    head_hash: str       # hash of the first min(size, HEAD_BYTES) bytes


def file_info(path: Path) -> FileInfo:
    p = path.resolve()
    try:
        st = p.stat()
        with open(p, "rb") as f:
            head = f.read(HEAD_BYTES)
            if st.st_size > HEAD_BYTES:
                f.seek(max(HEAD_BYTES, st.st_size - TAIL_BYTES))
                tail = f.read(TAIL_BYTES)
            else:
                tail = b""
    except OSError as e:
        raise ForensicsError(f"cannot read {path}", where=str(path), reason=e.strerror, code=UNREADABLE) from None
    hh = hashlib.blake2b(head, digest_size=16).hexdigest()
    fp = hashlib.blake2b(head + tail + str(st.st_size).encode(), digest_size=16).hexdigest()
    return FileInfo(str(p), st.st_size, st.st_mtime, compression_of(head[:4]), fp, hh)


def prefix_hash(path: str, n: int) -> str:
    """Hash of the first min(n, HEAD_BYTES) bytes, to check a grown file still starts the same."""
    with open(path, "rb") as f:
        return hashlib.blake2b(f.read(min(n, HEAD_BYTES)), digest_size=16).hexdigest()


def open_binary(path: str, compression: str) -> BinaryIO:
    """A readable stream of the file's decompressed bytes."""
    if compression == "gzip":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), read_across_frames=True)  # type: ignore[return-value]
    return open(path, "rb")


def read_head(path: str, compression: str, n: int = 64 * 1024) -> bytes:
    """The first n decompressed bytes (fewer if the file is short or its stream is damaged)."""
    try:
        with open_binary(path, compression) as f:
            return f.read(n)
    except (OSError, EOFError, ValueError) as e:
        if compression == "none":
            raise ForensicsError(f"cannot read {path}", where=path, reason=str(e), code=UNREADABLE) from None
        return b""
    except Exception:  # zstandard.ZstdError and friends: a damaged stream is data, not a crash
        return b""


def rank_from_path(path: str) -> int | None:
    name = Path(path).name
    for stem in (name, str(Path(path).parent.name)):
        for pat in _RANK_PATTERNS:
            m = pat.search(stem)
            if m:
                return int(m.group(1))
    return None


def host_from_path(path: str) -> str | None:
    for part in reversed(Path(path).parent.parts):
        if _HOST_PATTERN.match(part):
            return part
    return None


def iter_chunks(stream: BinaryIO, size: int) -> Iterator[bytes]:
    """Blocks of about `size` bytes that end on a newline (the last one may not), as bytes the
    caller may keep (iter_blocks on buffers of its own, one copy per block)."""
    for view in iter_blocks(stream, size, reuse=False):
        yield bytes(view)


_LOCAL = threading.local()


def _thread_buffers(size: int) -> list[bytearray]:
    """This thread's two block buffers (allocated once per thread, not once per file)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None or len(bufs[0]) < size or len(bufs[0]) > 4 * size:
        bufs = _LOCAL.bufs = [bytearray(size), bytearray(size)]
    return bufs


def iter_blocks(stream: BinaryIO, size: int, reuse: bool = True) -> Iterator[memoryview]:
    """Blocks of about `size` bytes that end on a newline (the last one may not), without copies:
    views of two buffers used in turn, filled with readinto. A block stays valid until the
    next-but-one block is produced -- the JSON-lines reader looks one block ahead and is done
    with a block before it asks for the one after. `reuse`: this thread's buffers (one reader at
    a time per thread, as in run_unit), else new ones."""
    n = size + (1 << 16)
    bufs = _thread_buffers(n) if reuse else [bytearray(n), bytearray(n)]
    turn = 0
    rest = b""
    eof = False
    while not eof:
        buf = bufs[turn]
        need = len(rest) + size
        if len(buf) < need:  # a line longer than a block: this buffer grows (for this file)
            buf = bufs[turn] = bytearray(need + (1 << 16))
        buf[: len(rest)] = rest
        filled = len(rest)
        view = memoryview(buf)
        while filled < need:
            got = stream.readinto(view[filled:need])
            if not got:
                eof = True
                break
            filled += got
        if filled == 0:
            return
        cut = buf.rfind(b"\n", 0, filled)
        if eof:
            yield view[:filled]
            return
        if cut < 0:  # no newline yet: keep reading into a bigger buffer
            rest = bytes(buf[:filled])
            continue
        rest = bytes(buf[cut + 1 : filled])
        yield view[: cut + 1]
        turn ^= 1


class RangeReader(io.RawIOBase):
    """A plain file restricted to [start, end): lets a worker read its chunk of a big file."""

    def __init__(self, path: str, start: int, end: int) -> None:
        self._f = open(path, "rb")
        self._f.seek(start)
        self._left = end - start

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        if self._left <= 0:
            return b""
        n = self._left if n is None or n < 0 else min(n, self._left)
        b = self._f.read(n)
        self._left -= len(b)
        return b

    def readinto(self, b) -> int:  # type: ignore[override]
        if self._left <= 0:
            return 0
        mv = memoryview(b)
        if len(mv) > self._left:
            mv = mv[: self._left]
        n = self._f.readinto(mv) or 0
        self._left -= n
        return n

    def close(self) -> None:
        self._f.close()
        super().close()
