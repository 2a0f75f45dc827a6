"""Finding, opening and identifying input files.

Owns: expanding paths/globs/directories into files, transparent gzip/zstd, content sniffing,
file fingerprints (for no-op re-ingest and duplicate detection), and what a path says about rank
and host. Must not parse log lines (readers do).
"""
from __future__ import annotations

import functools
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
# A folder names the rank of the files in it only when its whole name is a rank's (`rank3/`,
# `rank_00012/`): a rank inside a longer folder name is part of something else's name — pytest's
# tmp_path appends a counter to the test's name (`test_one_rank` -> `test_one_rank0/`), and a run's
# folder (`rank0_baseline/`) holds every rank's files.
_RANK_FOLDER = re.compile(r"(?i)^rank[_\-=]?0*(\d+)$")
_HOST_PATTERN = re.compile(r"(?i)^(?:node|host|worker-node)[_\-=]?[a-z0-9.\-]*\d[a-z0-9.\-]*$")


def compression_of(head: bytes) -> str:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return "none"


SKIP_HELP = ("make it readable (permissions, mount), or pass --skip-unreadable to ingest without it "
             "(the paths skipped are listed in the summary and kept in the store's manifest)")


def unreadable(path: str, why: str) -> ForensicsError:
    """The error of a file or folder that exists but cannot be read: the same for both."""
    return ForensicsError(f"cannot read {path}", where=path, reason=why, help=SKIP_HELP, code=UNREADABLE)


def expand(inputs: list[str]) -> list[Path]:
    """Files named by paths, directories (recursively) and globs, in a stable order, deduplicated,
    as resolved paths (absolute, no symlinks).

    A path that matches nothing is a user error: it is reported, not skipped silently.
    """
    return [Path(p) for p in expand_names(inputs)]


def expand_names(inputs: list[str], skipped: list[dict[str, str]] | None = None) -> list[str]:
    """expand's files as strings (ingest's: a Path costs ~4x its string, per file).

    A folder that cannot be listed is an error (`unreadable`), as a file that cannot be read is;
    with `skipped` (a list), it is added there ({"path", "reason"}) and the walk goes on."""
    out: dict[str, str] = {}
    missing: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_file():
            rp = str(p.resolve())
            out.setdefault(rp, rp)
        elif p.is_dir():
            if (p / "manifest.json").is_file() and (p / "events").is_dir():
                raise ForensicsError(
                    f"{p} is a forensics store, not a log folder",
                    where=str(p),
                    help="pass the store to the query commands, or the raw logs to ingest",
                    code=NO_INPUT,
                )
            for fp in _walk(str(p.resolve()), skipped):
                out.setdefault(fp, fp)
        else:
            hits = sorted(glob.glob(item, recursive=True))
            files = [Path(h) for h in hits if Path(h).is_file()]
            if not files:
                missing.append(item)
            for f in files:
                rp = str(f.resolve())
                out.setdefault(rp, rp)
    if missing:
        raise ForensicsError(
            f"no such file, directory or glob match: {', '.join(missing)}",
            where=missing[0],
            help="check the path; quote globs so the shell passes them through ('logs/**/*.jsonl')",
            code=NO_INPUT,
        )
    if not out:
        raise ForensicsError("no log files found", where=", ".join(inputs), code=NO_INPUT,
                             reason=f"{len(skipped)} unreadable path(s) skipped" if skipped else None)
    return list(out.values())


def _walk(root: str, skipped: list[dict[str, str]] | None = None) -> Iterator[str]:
    """The files under a resolved folder, as resolved paths, in os.walk's order (a folder's files
    by name, then its subfolders by name). One scandir per folder: the entry types come with the
    listing, and only a symlink is resolved (resolving every path cost one lstat per component
    of every path: most of the listing of 100,000 small files). A folder that cannot be listed:
    `unreadable`, or (with `skipped`) recorded there (it was skipped with no word)."""
    files: list[tuple[str, str]] = []
    dirs: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError as e:
        if skipped is None:
            raise unreadable(root, f"the folder cannot be listed: {e.strerror or e}") from None
        skipped.append({"path": root, "reason": f"folder cannot be listed: {e.strerror or e}"})
        return
    for e in entries:
        name = e.name
        try:
            if e.is_dir():   # follows a symlink, as os.walk lists it (and does not descend it)
                if not e.is_symlink() and name not in _SKIP_DIRS and not name.endswith(".forensics") and not name.startswith("."):
                    dirs.append(name)
            elif not name.startswith(".") and not name.endswith(_SKIP_SUFFIXES) and e.is_file():
                files.append((name, os.path.realpath(e.path) if e.is_symlink() else e.path))
        except OSError:
            continue
    for _, fp in sorted(files, key=lambda x: x[0]):
        yield fp
    for d in sorted(dirs):
        yield from _walk(os.path.join(root, d), skipped)


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str            # absolute
    size: int
    mtime: float
    compression: str
    fingerprint: str     # content identity: size + head + tail hashes
    head_hash: str       # hash of the first min(size, HEAD_BYTES) bytes


def file_info(path: Path) -> FileInfo:
    return file_info_and_head(path)[0]


def file_info_and_head(path: str | Path, resolved: bool = False) -> tuple[FileInfo, bytes, bytes]:
    """file_info, plus the raw bytes it read (the first HEAD_BYTES, and the last TAIL_BYTES of a
    longer file), so planning reads a small file once: its head, format and complete end come
    from these bytes (the caller must not keep them: up to 1 MiB a file). `resolved`: `path`
    is already absolute and free of symlinks (expand's paths)."""
    p = str(path) if resolved else str(Path(path).resolve())
    try:
        # os-level calls, not open(): no file objects (half the CPU of a one-line file's read)
        fd = os.open(p, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            # no more than the file holds: a 1 MiB read buffer for a 150-byte file cost more
            # than the rest of its planning
            head = _read_at(fd, min(HEAD_BYTES, st.st_size + 1), 0, st.st_size)
            tail = (_read_at(fd, TAIL_BYTES, max(HEAD_BYTES, st.st_size - TAIL_BYTES), st.st_size)
                    if st.st_size > HEAD_BYTES else b"")
        finally:
            os.close(fd)
    except OSError as e:
        raise unreadable(str(path), e.strerror or str(e)) from None
    h = hashlib.blake2b(head, digest_size=16)
    hh = h.hexdigest()
    h.update(tail)                    # = the hash of head + tail + size: each byte hashed once
    h.update(str(st.st_size).encode())
    fp = h.hexdigest()
    return FileInfo(p, st.st_size, st.st_mtime, compression_of(head[:4]), fp, hh), head, tail


def _read_at(fd: int, n: int, at: int, size: int) -> bytes:
    """Up to n bytes from offset `at` (fewer only at the end of the file; `size`: its size)."""
    out = os.pread(fd, n, at)
    if 0 < len(out) < n and at + len(out) < size:   # a short read before the end (rare): read on
        out += _read_at(fd, n - len(out), at + len(out), size)
    return out


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
    """The first n decompressed bytes (fewer if the file is short or its stream is damaged:
    then what decodes before the damage)."""
    try:
        g = GuardedStream(open_binary(path, compression), compression)
    except (OSError, EOFError, ValueError) as e:
        if compression == "none":
            raise ForensicsError(f"cannot read {path}", where=path, reason=str(e), code=UNREADABLE) from None
        return b""
    try:
        head = g.read(n)
    finally:
        g.close()
    if g.problem and compression == "none":
        raise ForensicsError(f"cannot read {path}", where=path, reason=g.problem, code=UNREADABLE)
    return head


def rank_from_path(path: str) -> int | None:
    """The rank a file's path names: its file name's (`rank_12.jsonl`, `trainer_rank3.log`), else
    its folder's when the folder's whole name is a rank's (`rank12/stdout.log`, _RANK_FOLDER)."""
    folder, name = os.path.split(str(path))
    r = _rank_in(name)
    if r is not None:
        return r
    m = _RANK_FOLDER.match(os.path.basename(folder))
    return int(m.group(1)) if m else None


@functools.lru_cache(maxsize=4096)
def _rank_in(stem: str) -> int | None:
    for pat in _RANK_PATTERNS:
        m = pat.search(stem)
        if m:
            return int(m.group(1))
    return None


def host_from_path(path: str) -> str | None:
    return _host_in(os.path.dirname(str(path)))


@functools.lru_cache(maxsize=4096)
def _host_in(folder: str) -> str | None:
    """The host a folder path names (cached: the files of one folder share it)."""
    for part in reversed(Path(folder).parts):
        if _HOST_PATTERN.match(part):
            return part
    return None


MAX_LINE_BYTES = 64 << 20   # a line longer than this is skipped as it streams by: one reject
LONG_LINE_HEAD = 4096       # bytes of an over-long line kept (the store keeps raw[:RAW_LIMIT] too)


def max_line_bytes() -> int:
    """The line cap: MAX_LINE_BYTES, or FORENSICS_MAX_LINE_BYTES (tests and the reliability
    script use small caps to run fast)."""
    v = os.environ.get("FORENSICS_MAX_LINE_BYTES")
    return max(1, int(v)) if v else MAX_LINE_BYTES


@dataclass(frozen=True)
class LongLine:
    """An over-long line seen by iter_blocks: its first bytes and its length. It was never held
    in memory whole. `terminated`: it ended with a newline (else the stream ended inside it)."""

    head: bytes
    length: int
    terminated: bool

    def reason(self, cap: int) -> str:
        return f"line longer than {_mib(cap)} (skipped)"


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def iter_chunks(stream: BinaryIO, size: int, max_line: int | None = None) -> Iterator[bytes]:
    """Blocks of about `size` bytes that end on a newline (the last one may not), as bytes the
    caller may keep (iter_blocks on buffers of its own, one copy per block).

    Bounded like iter_blocks: a line longer than the cap is replaced by its first LONG_LINE_HEAD
    bytes and a newline, so the reader sees one (cut) line where there was one line -- line
    numbers stay right -- and memory never holds more than the cap of one line."""
    pending: list[bytes] = []
    for item in iter_blocks(stream, size, reuse=False, max_line=max_line):
        if isinstance(item, LongLine):
            pending.append(item.head.replace(b"\n", b" ") + (b"\n" if item.terminated else b""))
            continue
        if pending:
            yield b"".join(pending)
            pending = []
        yield bytes(item)
    if pending:
        yield b"".join(pending)


_LOCAL = threading.local()


def _thread_buffers(size: int) -> list[bytearray]:
    """This thread's two block buffers (allocated once per thread, not once per file)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None or len(bufs[0]) < size or len(bufs[0]) > 4 * size or len(bufs[1]) > 4 * size:
        bufs = _LOCAL.bufs = [bytearray(size), bytearray(size)]
    return bufs


def _fill(stream: BinaryIO, view: memoryview, filled: int, need: int) -> tuple[int, bool]:
    """readinto view[filled:need] until full or end of stream: (filled, eof)."""
    while filled < need:
        got = stream.readinto(view[filled:need])
        if not got:
            return filled, True
        filled += got
    return filled, False


def iter_blocks(stream: BinaryIO, size: int, reuse: bool = True,
                max_line: int | None = None) -> Iterator[memoryview | LongLine]:
    """Blocks of about `size` bytes that end on a newline (the last one may not), without copies:
    views of two buffers used in turn, filled with readinto. A block stays valid until the
    next-but-one block is produced -- the JSON-lines reader looks one block ahead and is done
    with a block before it asks for the one after. `reuse`: this thread's buffers (one reader at
    a time per thread, as in run_unit), else new ones.

    A line longer than `max_line` (default max_line_bytes()) is not gathered: once the cap is
    reached without a newline, its first LONG_LINE_HEAD bytes are kept and the rest is read and
    dropped up to its newline, and a LongLine is yielded in its place. Time is linear in the
    input (a growing line is searched for a newline only in the bytes just read, and the buffer
    grows by doubling) and memory is bounded by about cap + 2 * size."""
    cap = max_line or max_line_bytes()
    size = max(1, min(size, cap // 2))  # a line crossing from a carried rest stays <= cap
    n = size + (1 << 16)
    bufs = _thread_buffers(n) if reuse else [bytearray(n), bytearray(n)]
    turn = 0
    rest = b""
    clean = True  # rest holds no newline (false after a skipped line: rest is what followed it)
    eof = False
    while not eof:
        buf = bufs[turn]
        need = len(rest) + size
        if len(buf) < need:  # a long line carried over: this buffer grows (for this file)
            buf = bufs[turn] = bytearray(need + (1 << 16))
        buf[: len(rest)] = rest
        scanned = len(rest) if clean else 0
        view = memoryview(buf)
        filled, eof = _fill(stream, view, len(rest), need)
        cut = buf.rfind(b"\n", scanned, filled)
        while cut < 0 and not eof and filled <= cap:
            # no newline yet: double the buffer (amortised linear), search only the new bytes
            need = min(max(2 * filled, filled + size), cap + 1)
            if len(buf) < need:
                nb = bytearray(need + (1 << 16))
                nb[:filled] = view[:filled]
                view.release()
                buf = bufs[turn] = nb
                view = memoryview(buf)
            scanned = filled
            filled, eof = _fill(stream, view, filled, need)
            cut = buf.rfind(b"\n", scanned, filled)
        if filled == 0:
            return
        first = buf.find(b"\n", scanned, filled) if rest else -1
        if first > cap:  # the carried line ended here, past the cap: one over-long line
            head = bytes(buf[: min(LONG_LINE_HEAD, first)])
            rest = bytes(buf[first + 1 : filled])
            view.release()
            eof, clean = False, False  # rest is read on the next turn; the stream says eof again
            yield LongLine(head, first + 1, True)
            continue
        if cut < 0 and filled > cap:
            head = bytes(buf[: min(LONG_LINE_HEAD, filled)])
            length = filled
            view.release()
            rest, eof, length, done = _skip_line(stream, buf, length, size)
            clean = False
            if len(bufs[turn]) > 4 * n:  # give the grown buffer back
                bufs[turn] = bytearray(n)
            yield LongLine(head, length, done)
            continue
        if eof:
            yield view[:filled]
            return
        rest = bytes(buf[cut + 1 : filled])
        clean = True
        yield view[: cut + 1]
        turn ^= 1


def _skip_line(stream: BinaryIO, buf: bytearray, length: int, size: int) -> tuple[bytes, bool, int, bool]:
    """Read and drop the rest of an over-long line. Returns (bytes after its newline, eof,
    the line's full length, whether a newline ended it)."""
    view = memoryview(buf)[:size]
    try:
        while True:
            got = stream.readinto(view)
            if not got:
                return b"", True, length, False
            i = buf.find(b"\n", 0, got)
            if i >= 0:
                return bytes(buf[i + 1 : got]), False, length + i + 1, True
            length += got
    finally:
        view.release()


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


class GuardedStream(io.RawIOBase):
    """A source stream whose read errors end the stream instead of the ingest.

    A truncated gzip stream (EOFError), a bad CRC, trailing garbage, a damaged zstd frame, an
    I/O error: every byte decoded before the damage is handed on, the stream then reports its
    end, and `problem` says what happened and where (the decompressed byte offset; the caller
    adds the line) -- the ingest summary and the manifest carry it for that file. `bytes`
    counts what was read (a plain file that shrank while read is found by comparing it with the
    listed size). `transient`: the error was the file system's (an I/O error), not the bytes':
    reading again may succeed.

    A compressed stream is read DECODE_STEP bytes at a time with read1 (one decompression call
    each): an error raised inside a buffered read of a whole block lost every byte the block had
    decoded (a half-truncated gzip of 970 lines kept none of them, a 50 MB one lost its last
    2 MiB). A UTF-8 byte order mark at the start (`skip_bom`) is dropped: it is no part of the
    first line (and turned a JSON-lines file into console text)."""

    DECODE_STEP = 1 << 16

    def __init__(self, stream: BinaryIO, kind: str, skip_bom: bool = False) -> None:
        self._s = stream
        self._kind = kind
        self.bytes = 0
        self.problem: str | None = None
        self.transient = False
        self._bom = skip_bom
        self._pending = b""

    def readable(self) -> bool:
        return True

    def _fail(self, e: BaseException) -> None:
        what = {"gzip": "gzip stream", "zstd": "zstd stream"}.get(self._kind, "file")
        at = (f"after {self.bytes:,} decompressed bytes" if self._kind in ("gzip", "zstd")
              else f"at byte {self.bytes:,}")
        if isinstance(e, EOFError):
            self.problem = f"{what} truncated: {e} ({at})"
        else:
            self.problem = f"{what} damaged, read stopped: {type(e).__name__}: {e} ({at})"
        # an OS error of the file system (not gzip's BadGzipFile, an OSError too): reading
        # again may succeed
        self.transient = isinstance(e, OSError) and type(e).__name__ != "BadGzipFile"

    def _raw_read(self, n: int) -> bytes:
        if self._kind in ("gzip", "zstd"):
            return self._s.read1(min(n, self.DECODE_STEP))
        return self._s.read(n)

    def _start(self) -> None:
        """Drop a leading UTF-8 BOM (its 3 bytes still count as read)."""
        self._bom = False
        head = b""
        while len(head) < 3:
            b = self._raw_read(3 - len(head))
            if not b:
                break
            head += b
        if head == b"\xef\xbb\xbf":
            self.bytes += 3
        else:
            self._pending = head

    def readinto(self, b) -> int:  # type: ignore[override]
        if self.problem:
            return 0
        mv = memoryview(b).cast("B")
        n = 0
        try:
            if self._bom:
                self._start()
            if self._pending:
                n = min(len(self._pending), len(mv))
                mv[:n] = self._pending[:n]
                self._pending = self._pending[n:]
                self.bytes += n
            if self._kind in ("gzip", "zstd"):
                while n < len(mv):
                    chunk = self._s.read1(min(len(mv) - n, self.DECODE_STEP))
                    if not chunk:
                        break
                    mv[n:n + len(chunk)] = chunk
                    n += len(chunk)
                    self.bytes += len(chunk)
            elif n < len(mv):
                got = self._s.readinto(mv[n:]) or 0
                n += got
                self.bytes += got
        except Exception as e:  # noqa: BLE001 - gzip/zstd/OS errors of one source file
            self._fail(e)
        return n

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        if self.problem:
            return b""
        if self._kind not in ("gzip", "zstd") and not self._bom and not self._pending:
            try:   # a plain stream: one read, no buffer of n bytes (readers ask for up to 64 MiB)
                b = self._s.read(n) if n is not None and n >= 0 else self._s.read()
            except Exception as e:  # noqa: BLE001
                self._fail(e)
                return b""
            self.bytes += len(b)
            return b
        out: list[bytes] = []
        left = n if n is not None and n >= 0 else -1
        buf = bytearray(self.DECODE_STEP)
        while left:
            got = self.readinto(buf if left < 0 or left >= len(buf) else memoryview(buf)[:left])
            if not got:
                break
            out.append(bytes(buf[:got]))
            left = left - got if left > 0 else left
        return b"".join(out)

    def close(self) -> None:
        try:
            self._s.close()
        finally:
            super().close()


_ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)


def zstd_damage(path: str) -> str | None:
    """Why a zstd file is not a sequence of complete frames, or None.

    The zstandard stream reader ends quietly at a frame cut short (measured: half a file reads as
    half the data, no error), so the frames are walked here by their headers and block sizes
    (RFC 8878), without decompressing: a few reads per 128 KiB block."""
    import struct

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            f.seek(pos)
            hdr = f.read(4)
            if len(hdr) < 4:
                return f"zstd stream truncated: {len(hdr)} stray byte(s) at offset {pos}"
            magic = struct.unpack("<I", hdr)[0]
            if magic in _ZSTD_SKIPPABLE:
                n = f.read(4)
                if len(n) < 4:
                    return f"zstd stream truncated in a skippable frame at offset {pos}"
                pos += 8 + struct.unpack("<I", n)[0]
                continue
            if hdr != ZSTD_MAGIC:
                return f"zstd stream damaged: no frame at offset {pos}"
            d = f.read(1)
            if not d:
                return f"zstd stream truncated in a frame header at offset {pos}"
            fhd = d[0]
            fcs_flag, single, checksum, did_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
            fcs = (1 if single else 0) if fcs_flag == 0 else (2, 4, 8)[fcs_flag - 1]
            p = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag] + fcs
            while True:
                f.seek(p)
                bh = f.read(3)
                if len(bh) < 3:
                    return f"zstd stream truncated: the frame at offset {pos} ends inside a block header"
                v = bh[0] | bh[1] << 8 | bh[2] << 16
                last, btype, bsize = v & 1, (v >> 1) & 3, v >> 3
                if btype == 3:
                    return f"zstd stream damaged: reserved block type at offset {p}"
                p += 3 + (1 if btype == 1 else bsize)
                if p > size:
                    return f"zstd stream truncated: the frame at offset {pos} is cut short ({size} of {p} bytes)"
                if last:
                    break
            pos = p + (4 if checksum else 0)
            if pos > size:
                return f"zstd stream truncated: the checksum of the frame at offset {pos} is missing"
    return None
