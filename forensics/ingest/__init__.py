"""Ingest: raw logs -> a forensics store. The only code that reads raw logs lives in this package.

This module plans and dispatches: it expands inputs into files, decides per file what is new,
unchanged, grown or a duplicate, cuts big plain files into newline-aligned byte ranges, runs the
unit function (`unit.run_unit`) inline or in a process pool, and publishes the new store version
atomically (`store.StoreWriter`). It must not parse log lines itself.
"""
from __future__ import annotations

import errno
import gc
import os
import re
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BAD_ARGUMENT, NOT_A_STORE, OTHER_RUN, STORE_VERSION, STORE_WRITE, ForensicsError
from ..store import (
    EVENTS_DIR,
    KERNELS_DIR,
    MANIFEST,
    REJECTS_DIR,
    StoreWriter,
    concat_columns,
    damaged_parts,
    damaged_sources,
    is_store,
    locked,
    open_store,
    recover,
    source_columns,
)
from .formats import BOM, reader_for, sniff
from .ledger import Ledger
from .runs import mixed_runs
from .sources import (
    TAIL_BYTES,
    FileInfo,
    expand_names,
    file_info_and_head,
    host_from_path,
    prefix_hash,
    rank_from_path,
    read_head,
)
from .unit import Piece, PieceResult, Unit, UnitResult, run_unit

OTHER_RUN_GAP_S = 24 * 3600   # --append: logs this far apart in time from the store are another run
RANGE_BYTES = 64 << 20        # plain files above this are cut into ranges for parallel work
INLINE_BYTES = 48 << 20       # below this much input, a process pool costs more than it saves
# Small files are read in batches of consecutive ranks, a batch one unit writing one part: 4,096
# one-rank files made 4,096 parts (a query paid ~0.5 s opening them; diagnose 54 s vs 13 s).
BATCH_BYTES = 64 << 20        # input per batch at most (a unit sorts its batch in memory)
BATCH_MIN = 16 << 20          # ... and at least (unless the input is smaller)
COMPRESSED_WEIGHT = 8         # a compressed byte weighs this many input bytes in a batch
# A file's fixed cost (open, stat, hash, its counts and its row in the table of sources), as
# bytes of input in a batch: 100,000 one-line files (13 MB) are ~200 MB of work, not 13 MB.
FILE_WEIGHT = 2048
INFO_CHUNK = 256              # files per planning task (fingerprint, format, hints)
# A file this small goes to its unit with the bytes planning read (a second open and read cost
# as much as the file's parse), up to CARRY_TOTAL bytes in all.
CARRY_BYTES = 16 << 10
CARRY_TOTAL = 64 << 20

Progress = Callable[[str, dict[str, Any]], None]


@dataclass
class IngestSummary:
    store: str
    files: int                         # source files in the store
    lines_read: int
    events: int
    rejected: int
    rejected_by_reason: dict[str, int]
    ranks: list[int]
    hosts: list[str]
    start: str | None
    end: str | None
    seconds: float
    bytes_read: int                    # bytes read by this call (new files and new tails)
    new_files: int = 0
    unchanged_files: int = 0
    appended_files: int = 0
    duplicate_files: list[dict[str, str]] = field(default_factory=list)
    formats: dict[str, int] = field(default_factory=dict)
    per_file: list[dict[str, Any]] = field(default_factory=list)
    # files not read to their end (truncated stream, shrank, vanished): {"path", "problem"}
    problems: list[dict[str, str]] = field(default_factory=list)
    repaired_files: int = 0            # sources re-read because their parts were damaged
    warnings: list[str] = field(default_factory=list)
    # JSON-lines files read in another schema: the map chosen (SchemaMap.describe) -> their paths
    schemas: dict[str, list[str]] = field(default_factory=dict)
    # files and folders that could not be read, skipped (skip_unreadable): {"path", "reason"}
    skipped: list[dict[str, str]] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["mb_per_s"] = round(self.mb_per_s, 1)
        d["seconds"] = round(self.seconds, 3)
        return d


def parse_gpu_map(items: list[str] | None) -> tuple[tuple[str | None, int, int], ...]:
    """`host:gpu=rank` (or `gpu=rank`) pairs, or @file with one pair per line."""
    out: list[tuple[str | None, int, int]] = []
    for item in items or []:
        lines = [item]
        if item.startswith("@"):
            try:
                lines = Path(item[1:]).read_text().split()
            except OSError as e:
                raise ForensicsError(f"cannot read gpu map {item[1:]}", reason=e.strerror, code=BAD_ARGUMENT) from None
        for s in lines:
            s = s.strip()
            if not s or s.startswith("#"):
                continue
            try:
                left, rank = s.split("=")
                host, _, gpu = left.rpartition(":")
                out.append((host or None, int(gpu), int(rank)))
            except ValueError:
                raise ForensicsError(
                    f"cannot read gpu map entry {s!r}",
                    reason="expected HOST:GPU=RANK or GPU=RANK",
                    help="e.g. --gpu-map node3:0=24 --gpu-map node3:1=25, or --gpu-map @map.txt",
                    code=BAD_ARGUMENT,
                ) from None
    return tuple(out)


def _complete_end(path: str, size: int) -> int:
    """Offset just past the last newline of a plain file (size if it ends with one)."""
    if size == 0:
        return 0
    with open(path, "rb") as f:
        pos = size
        while pos > 0:
            step = min(1 << 16, pos)
            f.seek(pos - step)
            chunk = f.read(step)
            i = chunk.rfind(b"\n")
            if i >= 0:
                return pos - step + i + 1
            pos -= step
    return 0


def _stream_damage(path: str, compression: str) -> str | None:
    """Why a compressed file that yields no bytes cannot be read (None: it is just empty)."""
    from .sources import GuardedStream, open_binary, zstd_damage

    if compression == "zstd":
        return zstd_damage(path)
    g = GuardedStream(open_binary(path, compression), compression)
    try:
        while g.read(1 << 16):
            pass
    finally:
        g.close()
    return g.problem


HEAD_SNIFF = 64 * 1024   # the head sniff() and _rank_key() see (read_head's default)


@dataclass(frozen=True, slots=True)
class _Looked:
    """What planning needs of a plain file, taken from the bytes file_info read (one read of a
    small file before the reader's): its format, the rank key its first line names, the offset
    past its last newline (None: not known from those bytes)."""
    fmt: str
    rank_key: int | None
    complete_end: int | None
    data: bytes | None = None   # the whole file, when it is at most CARRY_BYTES
    schema_map: Any = None      # roles.SchemaMap of a JSON-lines file in another schema (None: the seed's)


def _infos(paths: list[str], schema: dict[str, Any] | None = None,
           skip: bool = False) -> list[tuple[FileInfo, _Looked | None, int | None, str | None] | str | ForensicsError]:
    """_file_info_or_gone of each path (one pool task per many files: a task per file cost more
    in futures and locks than a small file's planning), with the path's rank and host hints.
    `skip`: a file that cannot be read is returned as its error (else the error is raised)."""
    out: list[tuple[FileInfo, _Looked | None, int | None, str | None] | str | ForensicsError] = []
    for path in paths:
        rank = rank_from_path(path)   # expand's paths are the sources' (resolved)
        try:
            item = _file_info_or_gone(path, rank, schema)
        except ForensicsError as e:
            if not skip:
                raise
            out.append(e)
            continue
        out.append(item if isinstance(item, str) else (*item, rank, host_from_path(path)))
    return out


def _file_info_or_gone(path: str, rank_hint: int | None,
                       schema: dict[str, Any] | None = None) -> tuple[FileInfo, _Looked | None] | str:
    """file_info (and, for a plain file, a _Looked), or the path when the file vanished since
    it was listed. `rank_hint`: the rank the path names."""
    try:
        info, head, tail = file_info_and_head(path, resolved=True)   # expand's paths are resolved
    except ForensicsError:
        if not os.path.exists(path):
            return os.path.realpath(path)
        raise
    if info.compression != "none":
        return info, None
    first = head[:HEAD_SNIFF]   # what read_head(path, "none") returns
    fmt = sniff(first, info.path)
    if info.size == 0:
        end: int | None = 0
    elif len(head) == info.size:                       # the whole file is in `head`
        end = head.rfind(b"\n") + 1
    elif len(tail) == info.size - max(len(head), info.size - TAIL_BYTES) and tail.rfind(b"\n") >= 0:
        end = info.size - len(tail) + tail.rfind(b"\n") + 1   # the last newline is in the tail read
    else:
        end = None
    return info, _Looked(fmt, _rank_key(first, fmt, rank_hint), end,
                         head if len(head) == info.size <= CARRY_BYTES else None,
                         _schema_map(first.removeprefix(BOM), fmt, schema))   # (the readers skip a BOM)


def _schema_map(head: bytes, fmt: str, schema: dict[str, Any] | None):
    """A JSON-lines file's SchemaMap (roles.infer on its head; None: the seed's schema)."""
    if fmt != "jsonl":
        return None
    from .roles import infer

    return infer(head, schema)


def _same_origin(src: dict[str, Any], rank: int | None, host: str | None) -> bool:
    """Could a file whose path names `rank` and `host` be a copy of `src` (the same bytes)? Not
    when both paths name a rank, or both a host, and they differ."""
    r, h = src.get("rank_hint"), src.get("host_hint")
    return not ((r is not None and rank is not None and r != rank) or (h is not None and host is not None and h != host))


def _ranges(path: str, start: int, end: int, first_line: int) -> list[tuple[int, int, int]]:
    """Cut [start, end) of a plain file into pieces of at least ~RANGE_BYTES with line bases.

    Every piece but the first starts just after a newline that really ends a line: the cut is
    the first newline at or after the target, however far that is (a line longer than a range
    stays in one piece, where the reader rejects it once). One streaming pass in 4 MiB reads:
    time linear, memory bounded."""
    out: list[tuple[int, int, int]] = []
    step = 4 << 20
    a, line = start, first_line
    target = start + RANGE_BYTES
    pos, lines_before = start, first_line  # lines_before: number of the line that starts at pos+off
    with open(path, "rb") as f:
        f.seek(start)
        while pos < end:
            data = f.read(min(step, end - pos))
            if not data:
                break
            off = 0
            while pos + len(data) > target:
                i = data.find(b"\n", max(off, target - 1 - pos))
                if i < 0:
                    break
                lines_before += data.count(b"\n", off, i + 1)
                off = i + 1
                if pos + off >= end:
                    break
                out.append((a, pos + off, line))
                a, line = pos + off, lines_before
                target = a + RANGE_BYTES
            lines_before += data.count(b"\n", off)
            pos += len(data)
    out.append((a, -1, line))
    return out


def ingest(
    inputs: list[str],
    out: str | os.PathLike[str],
    *,
    append: bool = False,
    workers: int | None = None,
    gpu_map: list[str] | None = None,
    progress: Progress | None = None,
    force: bool = False,
    dask: Any = None,
    schema: dict[str, Any] | None = None,
    skip_unreadable: bool = False,
) -> IngestSummary:
    """Ingest log files into the store at `out` and return what is now in it.

    Without `append`, the store afterwards holds exactly `inputs` (files unchanged since the last
    ingest are reused, not re-read). With `append`, files already in the store are kept, new files
    are added and grown plain files are read from where the last ingest stopped.
    With `dask` (a scheduler address such as "tcp://host:8786", or a `distributed.Client`), the
    units run on that cluster's workers (`ingest.distributed`); the logs and `out` must be on a
    file system every worker mounts at the same path. The store is the same as a local ingest's.
    `schema`: the config's [schema] section (role = dotted path, and `metrics` = {column: path}),
    over the roles inferred per JSON-lines file (ingest.roles); the maps used are in the summary.
    A file or folder that cannot be read stops the ingest (UNREADABLE) before anything is
    written; with `skip_unreadable` it is skipped, listed in the summary's and the manifest's
    `skipped`.
    """
    t0 = time.perf_counter()
    target = Path(out)
    cluster = None
    if dask is not None:
        from .distributed import DaskCluster

        cluster = DaskCluster(dask)  # before the lock: an unreachable scheduler writes nothing
        target = target.absolute()   # parts are written by workers whose working directory is not ours
    gmap = parse_gpu_map(gpu_map)
    skipped: list[dict[str, str]] | None = [] if skip_unreadable else None
    files = expand_names(inputs) if skipped is None else expand_names(inputs, skipped)
    try:
        with locked(target):
            recover(target)
            previous = _previous(target)
            if target.exists() and previous is None and any(target.iterdir()) and not _ours(target):
                raise ForensicsError(
                    f"{target} exists and is not a forensics store",
                    where=str(target),
                    help="choose another -o path; forensics never writes into a foreign directory",
                    code=BAD_ARGUMENT,
                )
            writer = StoreWriter(target, previous)
            _carry_summaries(previous, writer.staging)
            try:
                # No cyclic GC while ingesting: the per-file dicts (100,000 of them for 100,000
                # files) hold no cycles, but each full collection walked them all (a third of
                # the CPU at 100,000 files).
                gc_was = gc.isenabled()
                gc.disable()
                try:
                    summary = _ingest_locked(files, writer, previous, append, workers, gmap, progress, force, cluster,
                                             schema, skipped)
                finally:
                    if gc_was:
                        gc.enable()
            except BaseException:
                writer.abort()
                raise
            _write_summaries(target)
    except OSError as e:
        raise _write_error(target, e) from None
    finally:
        if cluster is not None:
            cluster.close()
    summary.seconds = time.perf_counter() - t0
    return summary


def _carry_summaries(previous, staging: Path) -> None:
    """The previous version's summaries into the next one (kept when its parts are)."""
    from ..summaries import carry

    carry(previous, staging)


def _summaries_enabled() -> bool:
    from ..summaries import enabled

    return enabled()


def _assemble_summaries(writer: StoreWriter, table: list[dict[str, Any]]) -> None:
    """The new version's summaries, merged from its parts' partial summaries (forensics.summaries)."""
    from ..summaries import assemble

    assemble(writer.staging, table, writer.previous)


def _write_summaries(target: Path) -> None:
    """The committed store's per-(rank, step) and per-rank summaries (forensics.summaries), so
    that every later query reads them instead of scanning the events."""
    from ..summaries import build

    build(open_store(target, verify=False))


def _previous(target: Path):
    """The store at target to build on: None when there is none, or when its manifest (or its
    table of sources) cannot be read or is of another schema version (then it is rebuilt whole;
    its parts are ours)."""
    if not is_store(target):
        return None
    try:
        run = open_store(target, verify=False)
    except ForensicsError as e:
        if e.code in (NOT_A_STORE, STORE_VERSION):
            return None
        raise
    table = run.manifest.get("sources_table")
    if table and damaged_parts(target, {"sources_table": table}, deep=True):
        return None  # the table of sources is damaged: nothing says which part holds what
    return run


def _ours(target: Path) -> bool:
    """A directory this tool wrote (a manifest, damaged or not, beside events/ and rejects/)."""
    return (target / MANIFEST).is_file() and (target / EVENTS_DIR).is_dir()


def _write_error(target: Path, e: OSError) -> ForensicsError:
    full = e.errno in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(e)
    return ForensicsError(
        f"cannot write the store {target}" + (": the disk is full" if full else ""),
        where=str(getattr(e, "filename", None) or target),
        reason=e.strerror or str(e),
        help=("free space on that file system or write the store elsewhere with -o; "
              if full else "check the permissions and the file system of the -o path; ")
             + "the previous version of the store (if any) is intact",
        code=STORE_WRITE,
    )


def _rank_key(head: bytes, fmt: str, rank_hint: int | None) -> int | None:
    """Where a file goes in rank order when files are batched into parts: the rank its first
    JSON line names, else the rank its path names, else None (last). Only an ordering hint:
    parts are sorted by the ranks read, whatever this says (a path may name a local rank)."""
    if fmt == "jsonl":
        nl = head.find(b"\n")
        m = _RANK_IN_LINE.search(head, 0, nl if nl >= 0 else len(head))   # the first line, not copied
        if m:
            return int(m.group(1))
    return rank_hint


_RANK_IN_LINE = re.compile(rb'"rank"\s*:\s*"?(\d{1,9})\b')


def _batches(pieces: list[tuple[Piece, int | None, int]], n_workers: int) -> list[list[tuple[Piece, int | None, int]]]:
    """Small files in rank order, packed into batches of about BATCH_BYTES of input (fewer
    when there is little input: at least two batches per worker, none under BATCH_MIN), each
    one unit that writes one part. `pieces`: (piece, rank key, weight in bytes)."""
    total = sum(w for _, _, w in pieces)
    target = min(BATCH_BYTES, max(BATCH_MIN, total // max(1, 2 * n_workers)))
    # Even batches, as many as a whole number of rounds of the workers where that keeps them
    # above BATCH_MIN: filling each to `target` left a small last batch (454 MB of 4,096 files:
    # 7 full units and a small one), and an odd count on 2 workers one core idle for a unit.
    n = max(1, -(-total // max(1, target)))
    if n_workers > 1 and n % n_workers and total // (n + n_workers - n % n_workers) >= BATCH_MIN:
        n += n_workers - n % n_workers
    ordered = sorted(pieces, key=lambda x: (x[1] is None, x[1] if x[1] is not None else 0, x[0].path))
    out: list[list[tuple[Piece, int | None, int]]] = []
    size = done = 0
    for item in ordered:
        # a new batch where the input so far passes the next n-th of the total (or the cap)
        if not out or (out[-1] and (done * n // max(1, total) >= len(out) or size + item[2] > BATCH_BYTES)):
            out.append([])
            size = 0
        out[-1].append(item)
        size += item[2]
        done += item[2]
    return out


def _ingest_locked(files: list[str], writer: StoreWriter, previous, append: bool, workers: int | None,
                   gmap, progress: Progress | None, force: bool = False, cluster=None,
                   schema: dict[str, Any] | None = None,
                   skipped: list[dict[str, str]] | None = None) -> IngestSummary:
    prev_sources: dict[str, dict[str, Any]] = {s["path"]: s for s in (previous.sources if previous else [])}
    # parts checked against their checksums (not sizes alone): a part overwritten with bytes of
    # the same size was kept as it was, and every later query failed on it
    bad_parts = damaged_parts(previous.path, previous.manifest, deep=True) if previous else {}
    damaged = damaged_sources(previous, bad_parts) if previous else set()
    problems: list[dict[str, str]] = []
    # the store's sources as dicts (kept from the previous version, or grown), and the files read
    # whole now as the ledger's columns (a dict per file cost ~2 KB: 100,000 one-line files)
    sources: dict[str, dict[str, Any]] = {}
    ledger = Ledger()
    if append:
        listed = set(files)   # expand's paths are resolved, as the sources' are
        for p, s in prev_sources.items():
            if p in damaged:  # read again below if it still exists, else dropped (and said so)
                if os.path.isfile(p):
                    if p not in listed:
                        files = [*files, p]
                        listed.add(p)
                else:
                    problems.append({"path": p, "problem": "dropped from the store: its parts were damaged "
                                                            "and the file is gone"})
                continue
            sources[p] = s
    # the files of each content: identical bytes under paths that name other ranks or hosts are
    # two ranks' logs (both logged the same OOM line), not one file twice
    by_fingerprint: dict[str, list[str]] = {}
    for s in sources.values():
        by_fingerprint.setdefault(s["fingerprint"], []).append(s["path"])
    duplicates: list[dict[str, str]] = []
    new = unchanged = appended = 0
    bytes_planned = 0
    drop_rejects_after: dict[str, int] = {}
    grown_paths: set[str] = set()
    schemas: dict[str, list[str]] = {}
    big: list[Piece] = []                              # ranges of big plain files: a unit each
    small: list[tuple[Piece, int | None, int]] = []    # whole files (or tails): batched

    # Fingerprints read 1 MiB per file: on all cores (hashing and reads release the GIL).
    n_plan = min(len(files), workers or os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(max_workers=n_plan) as pool:
        # a task per INFO_CHUNK files, and at least one per thread: 32 files of 7 MB were one
        # task, fingerprinted on one core while the other waited
        step = max(1, min(INFO_CHUNK, -(-len(files) // n_plan)))
        chunks = [files[i : i + step] for i in range(0, len(files), step)]
        listed = [item for chunk in pool.map(_infos, chunks, [schema] * len(chunks),
                                             [skipped is not None] * len(chunks)) for item in chunk]
    del chunks
    infos: list[tuple[FileInfo, _Looked | None, int | None, str | None]] = []
    for item in listed:
        if isinstance(item, ForensicsError):
            assert skipped is not None
            skipped.append({"path": item.where or "", "reason": item.reason or item.what})
        elif isinstance(item, str):
            problems.append({"path": item, "problem": "file vanished between listing and reading: not read"})
        else:
            infos.append(item)
    del listed
    repaired = carried = 0
    for info, looked, rank_hint, host_hint in infos:
        old = prev_sources.get(info.path)
        if old and info.path in damaged:
            old, repaired = None, repaired + 1  # its parts are damaged: read it again, whole
        if old and old["size"] == info.size and old["fingerprint"] == info.fingerprint and old.get("read_complete", True):
            sources[info.path] = old
            by_fingerprint.setdefault(info.fingerprint, []).append(info.path)
            unchanged += 1
            continue
        dup = next((p for p in by_fingerprint.get(info.fingerprint, ())
                    if p != info.path and _same_origin(sources[p] if p in sources else ledger.hints(p),
                                                       rank_hint, host_hint)), None)
        if dup:
            duplicates.append({"path": info.path, "duplicate_of": dup})
            continue
        if looked is None:
            head = read_head(info.path, info.compression)
            fmt = sniff(head, info.path)
            smap = _schema_map(head, fmt, schema)
        else:
            fmt = looked.fmt
            smap = looked.schema_map
        if fmt != "empty" and reader_for(fmt) is None:
            fmt = "console" if reader_for("console") else "jsonl"
        start, first_line = 0, 1
        grown = (
            old is not None and info.compression == "none" and old.get("compression") == "none"
            and fmt != "kineto"   # one JSON document: a grown trace is read again whole
            and info.size > old["size"] and old.get("complete_end", 0) > 0 and old.get("read_complete", True)
            and prefix_hash(info.path, old["size"]) == old["head_hash"]
        )
        if grown:
            assert old is not None
            src: dict[str, Any] | None = {
                "path": info.path, "size": info.size, "mtime": info.mtime, "fingerprint": info.fingerprint,
                "head_hash": info.head_hash, "compression": info.compression, "format": fmt,
                "rank_hint": rank_hint, "host_hint": host_hint,
                "lines_read": 0, "events": 0, "rejected": 0, "rejected_by_reason": {},
                "ranks": [], "hosts": [], "rank_sources": {}, "start": None, "end": None,
                "event_parts": [], "reject_parts": [], "complete_end": 0, "complete_lines": 0,
                "bytes_read": 0, "read_complete": True,
            }
            start, first_line = old["complete_end"], old["complete_lines"] + 1
            for k in ("lines_read", "events", "rejected", "ranks", "hosts", "start", "end",
                      "event_parts", "reject_parts", "rejected_by_reason", "rank_sources"):
                src[k] = old[k].copy() if isinstance(old[k], (list, dict)) else old[k]
            grown_paths.add(info.path)
            src["bytes_read"] = start   # read again from there
            # the old truncated tail line is read again now that the file has grown
            src["lines_read"] = old["complete_lines"]
            if old["rejected_by_reason"].get("truncated line (no newline at end of file)"):
                drop_rejects_after[info.path] = old["complete_lines"]
            appended += 1
            sources[info.path] = src
        else:
            src = None
            sources.pop(info.path, None)   # (--append: the store's row of a file changed since)
            ledger.add(info, fmt, rank_hint, host_hint)
            new += 1
        by_fingerprint.setdefault(info.fingerprint, []).append(info.path)
        if fmt == "empty":
            if info.compression != "none":  # nothing decompressed: an empty stream, or a damaged one
                bad = _stream_damage(info.path, info.compression)
                if bad:
                    if src is not None:
                        src["problems"] = [bad]
                    else:
                        ledger.add_problem(info.path, bad)
                    problems.append({"path": info.path, "problem": bad})
            continue
        if info.compression == "none":
            end = info.size
            complete_end = (looked.complete_end if looked is not None and looked.complete_end is not None
                            else _complete_end(info.path, info.size))
            if src is not None:
                src["complete_end"] = complete_end
            else:
                ledger.complete_end[ledger.row[info.path]] = complete_end
            pieces = _ranges(info.path, start, end, first_line) if fmt == "jsonl" and end - start > RANGE_BYTES else [(start, -1, first_line)]
        else:
            pieces = [(0, -1, 1)]
        bytes_planned += info.size - start
        if smap is not None:
            schemas.setdefault(smap.describe(), []).append(info.path)
        data = looked.data if looked is not None and start == 0 and carried + info.size <= CARRY_TOTAL else None
        carried += len(data) if data is not None else 0
        for a, b, line in pieces:
            piece = Piece(path=info.path, fmt=fmt, compression=info.compression, start=a, end=b if b >= 0 else -1,
                          first_line=line, rank_hint=rank_hint, host_hint=host_hint, size=info.size,
                          data=data,
                          # profiler traces: their GPU activities go to a kernels part of their own
                          kernels_part=str(writer.new_part(KERNELS_DIR)[0]) if fmt == "kineto" else "",
                          schema_map=smap)
            weight = (info.size - a) * (1 if info.compression == "none" else COMPRESSED_WEIGHT) + FILE_WEIGHT
            if len(pieces) > 1 or weight >= BATCH_BYTES:
                big.append(piece)
            else:
                key = _rank_key(head, fmt, rank_hint) if looked is None else looked.rank_key
                small.append((piece, key, weight))

    del infos   # planning is done: what it kept of each file is in `sources`, the ledger and the pieces
    units: list[Unit] = []
    n_workers = workers or os.cpu_count() or 1
    work = sum(w for _, _, w in small) + sum(_piece_bytes(p) for p in big)   # bytes, and files' fixed costs
    summaries_on = _summaries_enabled()
    for group in [[p] for p in big] + [[p for p, _, _ in b] for b in _batches(small, n_workers)]:
        ep, _ = writer.new_part(EVENTS_DIR)
        rp, _ = writer.new_part(REJECTS_DIR)
        weight = sum(_piece_bytes(p) for p in group)
        units.append(Unit(pieces=tuple(group), events_part=str(ep), rejects_part=str(rp), gpu_map=gmap, weight=weight,
                          summaries=summaries_on))

    kept = {p for p, src in sources.items() if src is prev_sources.get(p)} | grown_paths
    parts = _carry_parts(writer, previous, prev_sources, sources, kept, drop_rejects_after, bad_parts)

    def absorb(u: Unit, res: UnitResult) -> None:
        """A finished unit's parts and counts into the part table and its sources (as units
        finish: 100,000 files' counts are not all held at once)."""
        ev_rel, rj_rel = os.path.relpath(u.events_part, writer.staging), os.path.relpath(u.rejects_part, writer.staging)
        for rel, entry in ((ev_rel, res.events_part), (rj_rel, res.rejects_part)):
            if entry is not None:
                parts[rel] = {"path": rel, **entry}
        for piece, pr in zip(u.pieces, res.pieces):
            src = sources.get(piece.path)
            if src is not None:
                _merge(src, pr, ev_rel, rj_rel)
            else:
                ledger.merge(piece.path, pr, ev_rel, rj_rel)
            if pr.kernel_rows:   # a trace's GPU activities: one part, one source, no rank range
                rel = os.path.relpath(piece.kernels_part, writer.staging)
                if src is not None:
                    src.setdefault("kernel_parts", []).append(rel)
                else:
                    ledger.add_kernel_part(piece.path, rel)
                parts[rel] = {"path": rel, "kind": "kernels", "rows": pr.kernel_rows,
                              "rank_min": None, "rank_max": None, "ts_min": None, "ts_max": None}

    # a file read in ranges lists its parts in file order, whatever order its units finished in
    unit_of = {os.path.relpath(p, writer.staging): i for i, u in enumerate(units) for p in (u.events_part, u.rejects_part)}
    read_now = {p.path for u in units for p in u.pieces}
    del small   # the units hold the pieces now, each let go once absorbed (with the bytes carried)
    _dispatch(units, workers, bytes_planned, progress, cluster, absorb, work)
    for p in {p.path for p in big}:
        if p in sources:
            for k in ("event_parts", "reject_parts"):
                sources[p][k].sort(key=lambda rel: unit_of.get(rel, -1))
        else:
            ledger.order_parts(p, lambda rel: unit_of.get(rel, -1))
    warnings: list[str] = []
    if append and previous is not None:
        fresh = [s for p, s in sources.items() if p not in prev_sources or p in damaged] + list(ledger.sources())
        kept = [s for p, s in sources.items() if p in prev_sources and p not in damaged]
        if fresh and kept:
            refusal, warnings = _other_run(kept, fresh, writer.staging)
            if refusal is not None and not force:
                raise refusal
    # what was read now is one run, or the ingest says which two it holds (ingest/runs.py)
    read_now_sources = [(p, s.get("ranks") or (), s.get("event_parts") or ()) for p, s in sources.items()
                        if s.get("event_parts") and (not append or p not in prev_sources or p in damaged)]
    if not force and (refusal := mixed_runs(read_now_sources + ledger.runs_view(), writer.staging)) is not None:
        raise refusal
    table, moved = writer.compact(list(parts.values()))
    if summaries_on:   # merged from the units' partials, published with the parts (before the
        # table of sources is made: the two at once were the ingest's peak of memory)
        _assemble_summaries(writer, table)
    if moved:
        for s in sources.values():
            for k in ("event_parts", "reject_parts"):
                s[k] = list(dict.fromkeys(moved.get(rel, rel) for rel in s[k]))
        ledger.rename_parts(moved)
    ledger.finish()
    for s in sources.values():
        if s["format"] != "empty" and s["compression"] == "none" and s["complete_end"]:
            tail = 1 if s["rejected_by_reason"].get("truncated line (no newline at end of file)") else 0
            s["complete_lines"] = s["lines_read"] - tail
    ordered = sorted(sources.values(), key=lambda s: s["path"])
    # in path order (a file's own in the order found)
    problems += sorted([{"path": s["path"], "problem": p} for s in ordered for p in s.get("problems", [])
                        if s["path"] in read_now] + [p for p in ledger.problem_rows() if p["path"] in read_now],
                       key=lambda p: p["path"])
    del read_now
    from ..store import SOURCES_INLINE   # (read now: tests lower it)

    if len(ordered) + len(ledger) <= SOURCES_INLINE:   # inline in the manifest: dicts
        ordered = sorted([*ordered, *ledger.sources()], key=lambda s: s["path"])
        listed_sources: Any = ordered
        summary = _summarize(str(writer.target), ordered, bytes_planned, new, unchanged, appended, duplicates)
    else:   # the table of sources, from the ledger's columns (and those of the dicts)
        listed_sources = concat_columns([ledger.columns(list(range(len(ledger)))), source_columns(ordered)])
        # the summary's per-file rows after the commit: not held while the summaries and the
        # table are made (100,000 dicts, ~40 MB, at the ingest's peak)
        summary = _summarize(str(writer.target), _rows_of(listed_sources), bytes_planned, new, unchanged, appended,
                             duplicates, per_file=False)
    del ledger, ordered
    summary.problems = problems
    summary.repaired_files = repaired
    summary.warnings = warnings
    summary.schemas = schemas
    summary.skipped = list(skipped or [])
    writer.commit({"sources": listed_sources, "parts": table, "duplicates": duplicates, "problems": problems,
                   **({"skipped": summary.skipped} if summary.skipped else {}), "totals": {
        k: summary.to_dict()[k] for k in ("files", "lines_read", "events", "rejected", "rejected_by_reason",
                                          "ranks", "hosts", "start", "end")}})
    if isinstance(listed_sources, dict):
        summary.per_file = [_file_entry(s) for s in _rows_of(listed_sources)]
    return summary


def _carry_parts(writer: StoreWriter, previous, prev_sources: dict[str, dict[str, Any]],
                 sources: dict[str, dict[str, Any]], kept: set[str],
                 drop_rejects_after: dict[str, int], damaged: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The previous version's parts that the new one keeps, as its part table {rel: entry}.

    `kept`: the previous sources whose rows stay (unchanged, grown, or kept by --append). A part
    is shared by many files: a part none of whose files is kept is dropped (a damaged part's
    files are all read again); a part that also holds rows of files not kept (changed, damaged
    elsewhere, or gone without --append) is rewritten without those rows; a grown file's stale
    truncated-tail reject is dropped the same way (and uncounted). Kept sources' part lists are
    renamed to the rewritten parts."""
    if previous is None:
        return {}
    gone = set(prev_sources) - kept
    holders: dict[str, set[str]] = {}
    for p, s in prev_sources.items():
        for rel in s.get("event_parts", []) + s.get("reject_parts", []) + s.get("kernel_parts", []):
            holders.setdefault(rel, set()).add(p)
    out: dict[str, dict[str, Any]] = {}
    renamed: dict[str, str | None] = {}
    tail_dropped: dict[str, dict[str, int]] = {}      # path -> {reason: rejects dropped}
    for part in previous.parts:
        rel, kind = part["path"], part["kind"]
        who = holders.get(rel, set())
        if rel in damaged or not (who & kept):
            continue
        cut = {p: k for p, k in drop_rejects_after.items() if p in who} if kind == "rejects" else {}
        drop = sorted(who & gone)
        if not drop and not cut:
            writer.keep(rel)
            out[rel] = {k: v for k, v in part.items() if k != "bytes"}
            continue

        def keep_rows(t: pa.Table, drop: list[str] = drop, cut: dict[str, int] = cut) -> pa.Array:
            f = t["source_file"]
            mask = pc.invert(pc.is_in(f, value_set=pa.array(drop, f.type))) if drop else pc.is_valid(t["line"])
            for path, k in cut.items():
                stale = pc.fill_null(pc.and_(pc.equal(f, path), pc.greater(t["line"], k)), False)
                for reason, n in pl.from_arrow(t.filter(stale).select(["reason"]))["reason"].value_counts().iter_rows():
                    d = tail_dropped.setdefault(path, {})
                    d[reason] = d.get(reason, 0) + n
                mask = pc.and_(mask, pc.invert(stale))
            return pc.fill_null(mask, True)

        entry = writer.rewrite(rel, kind, keep_rows)
        renamed[rel] = entry["path"] if entry else None
        if entry:
            out[entry["path"]] = entry
    for path, by_reason in tail_dropped.items():
        s = sources[path]
        for reason, n in by_reason.items():
            s["rejected"] -= n
            left = s["rejected_by_reason"].get(reason, 0) - n
            if left > 0:
                s["rejected_by_reason"][reason] = left
            else:
                s["rejected_by_reason"].pop(reason, None)
    for p in kept:
        s = sources[p]
        for key in ("event_parts", "reject_parts", "kernel_parts"):
            s[key] = [r for r in (renamed.get(rel, rel) for rel in s.get(key, []) if rel not in damaged) if r is not None]
    return out


def _other_run(kept: list[dict[str, Any]], fresh: list[dict[str, Any]], staging: Path) -> tuple[ForensicsError | None, list[str]]:
    """Do the files added by --append (`fresh`) belong to the run already in the store (`kept`)?

    The rule (README, Ingest): they are another run when
      1. a rank logged the same step (TRAIN_STEP named by the record) in both, at different
         times: one attempt logs each step of a rank once; the same step at the same instant is
         the same line in two files (a duplicate: a warning, not a refusal); or
      2. both have times and their spans are disjoint and more than OTHER_RUN_GAP_S apart.
    Disjoint ranks or hosts alone are not evidence (a later batch may add the other nodes'
    logs), and the world size is not in every log, so neither is used. Returns (the refusal or
    None, warnings)."""
    import polars as pl

    def steps(group: list[dict[str, Any]]) -> pl.DataFrame:
        # a part holds many files: each once (both groups' parts are disjoint: new files are in new parts)
        parts = sorted({str(staging / rel) for s in group for rel in s.get("event_parts", [])})
        if not parts:
            return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "timestamp": pl.Datetime("us", "UTC"),
                                        "source_file": pl.String})
        return (pl.scan_parquet(parts)
                # a step logged without a time cannot show another time (and has none to name)
                .filter((pl.col("event") == "TRAIN_STEP") & (pl.col("event_source") == "record")
                        & pl.col("rank").is_not_null() & pl.col("step").is_not_null()
                        & pl.col("timestamp").is_not_null())
                .select("rank", "step", "timestamp", pl.col("source_file").cast(pl.String))
                .unique(["rank", "step", "timestamp"]).collect())

    warnings: list[str] = []
    a, b = steps(kept), steps(fresh)
    shared = a.join(b, on=["rank", "step"], suffix="_new")
    if shared.height:
        same = shared.filter(pl.col("timestamp") == pl.col("timestamp_new")).select("rank", "step").unique()
        other = shared.select("rank", "step").unique().join(same, on=["rank", "step"], how="anti")
        if same.height:
            warnings.append(f"{same.height:,} (rank, step) pair(s) are logged at the same time in the store and in "
                            "the new files (the same lines in two files?): step figures may count them twice")
        if other.height:
            r = shared.join(other, on=["rank", "step"]).sort("rank", "step").row(0, named=True)
            return ForensicsError(
                "the new logs look like another run than the one in the store",
                where=r["source_file_new"],
                reason=(f"rank {r['rank']} logged step {r['step']} at {r['timestamp']:%Y-%m-%d %H:%M:%S.%f} in the store "
                        f"({r['source_file']}) and at {r['timestamp_new']:%Y-%m-%d %H:%M:%S.%f} here; "
                        f"{other.height:,} (rank, step) pair(s) differ: one run logs each step of a rank once"),
                help="ingest each run into its own store (-o); if these logs do belong together (a restart "
                     "that repeated steps), add --force",
                code=OTHER_RUN,
            ), warnings
    spans = []
    for group in (kept, fresh):
        st = [s["start"] for s in group if s.get("start")]
        en = [s["end"] for s in group if s.get("end")]
        spans.append((min(st), max(en)) if st and en else None)
    if spans[0] and spans[1]:
        from datetime import datetime

        (a0, a1), (b0, b1) = [(datetime.fromisoformat(x), datetime.fromisoformat(y)) for x, y in spans]  # type: ignore[misc]
        gap = max((b0 - a1).total_seconds(), (a0 - b1).total_seconds())
        if gap > OTHER_RUN_GAP_S:
            return ForensicsError(
                "the new logs look like another run than the one in the store",
                where=next(s["path"] for s in fresh if s.get("start")),
                reason=(f"the store spans {spans[0][0]} .. {spans[0][1]}, the new logs {spans[1][0]} .. {spans[1][1]}: "
                        f"{gap / 3600:.0f} h apart (more than {OTHER_RUN_GAP_S // 3600} h)"),
                help="ingest each run into its own store (-o); if these logs do belong together, add --force",
                code=OTHER_RUN,
            ), warnings
    return None, warnings


def _piece_bytes(p: Piece) -> int:
    """Input bytes a piece stands for (a compressed file: its compressed size)."""
    return (p.end if p.end >= 0 else p.size) - p.start if p.compression == "none" else p.size


def _dispatch(units: list[Unit], workers: int | None, total_bytes: int, progress: Progress | None,
              cluster, absorb: Callable[[Unit, UnitResult], None], work: int) -> None:
    """Run the units (inline, on a thread pool, or on a Dask cluster) and hand each result to
    `absorb` as it comes, in the calling thread. `work`: the units' planned weight (bytes and
    per-file costs): little work runs inline."""
    n = workers or os.cpu_count() or 1
    done_bytes = 0
    if progress:
        progress("start", {"units": len(units), "bytes": total_bytes})

    def report(i: int, r: UnitResult) -> None:
        nonlocal done_bytes
        done_bytes += r.bytes
        if progress:
            progress("unit", {"path": r.path, "bytes_done": done_bytes, "lines": r.lines, "events": r.events,
                              "rejected": r.rejected})

    if cluster is not None:  # on a Dask cluster's workers (ingest/distributed.py)
        def done(i: int, r: UnitResult) -> None:
            report(i, r)
            absorb(units[i], r)

        # what each unit reads (its files) and where it writes (the staging folders: kernels/
        # sits beside events/ in the same folder)
        needs = [(tuple(dict.fromkeys(p.path for p in u.pieces)),
                  (os.path.dirname(u.events_part), os.path.dirname(u.rejects_part))) for u in units]
        cluster.map(run_unit, units, needs, done, [u.weight for u in units])
    elif n <= 1 or len(units) <= 1 or work < INLINE_BYTES:
        for i in range(len(units)):
            r = run_unit(units[i])
            report(i, r)
            absorb(units[i], r)
            units[i] = None   # type: ignore[call-overload]   # its pieces (and their bytes) go
    else:
        # Threads, not processes: the hot path is polars/numpy/pyarrow code that releases the GIL,
        # and one process keeps one copy of the libraries in memory (a process pool tripled the
        # peak RSS and paid ~1 s of imports per worker).
        # ... except units of profiler traces: their reading is Python work per trace event
        # that holds the GIL, so they go to processes, as many as memory allows (traces/pool.py)
        from ..traces.pool import trace_units

        procs, in_procs = trace_units(units, workers)
        try:
            with ThreadPoolExecutor(max_workers=n) as pool:
                futs = {(procs.submit if procs is not None and i in in_procs else pool.submit)(run_unit, u): i
                        for i, u in enumerate(units)}
                for f in as_completed(futs):
                    i = futs[f]
                    r = f.result()
                    del futs[f]   # the result goes once absorbed
                    report(i, r)
                    absorb(units[i], r)
                    units[i] = None   # type: ignore[call-overload]   # its pieces (and their bytes) go
        finally:
            if procs is not None:
                procs.shutdown(cancel_futures=True)


def _merge(s: dict[str, Any], r: PieceResult, events_part: str, rejects_part: str) -> None:
    """Add one piece's counts to its source, and its unit's parts (paths in the store) to the
    source's part lists."""
    s["lines_read"] += r.lines
    s["events"] += r.events
    s["rejected"] += r.rejected
    for k, v in r.rejected_by_reason.items():
        s["rejected_by_reason"][k] = s["rejected_by_reason"].get(k, 0) + v
    for k, v in r.rank_sources.items():
        s["rank_sources"][k] = s["rank_sources"].get(k, 0) + v
    # a file read in one piece (the common case) takes the piece's sorted lists as they are
    s["ranks"] = sorted(set(s["ranks"]) | set(r.ranks)) if s["ranks"] else r.ranks
    s["hosts"] = sorted(set(s["hosts"]) | set(r.hosts)) if s["hosts"] else r.hosts
    if r.start_ts and (s["start"] is None or r.start_ts < s["start"]):
        s["start"] = r.start_ts
    if r.end_ts and (s["end"] is None or r.end_ts > s["end"]):
        s["end"] = r.end_ts
    if r.wrote_events:
        s["event_parts"].append(events_part)
    if r.wrote_rejects:
        s["reject_parts"].append(rejects_part)
    if r.problem:
        s["problems"] = [*s.get("problems", []), r.problem]
    # the bytes read (a plain file: the range read; compressed: the bytes its stream gave)
    s["bytes_read"] = s.get("bytes_read", 0) + (r.end - r.start)
    if not r.complete:
        s["read_complete"] = False


def _summarize(store: str, sources: Iterable[dict[str, Any]], nbytes: int, new: int, unchanged: int, appended: int,
               duplicates: list[dict[str, str]], per_file: bool = True) -> IngestSummary:
    """The summary of the store's sources (dicts, in path order: read once); `per_file`: with
    its row per file (`_file_entry`)."""
    by_reason: dict[str, int] = {}
    formats: dict[str, int] = {}
    files = lines = events = rejected = 0
    start = end = None
    ranks: set[int] = set()
    hosts: set[str] = set()
    files_: list[dict[str, Any]] = []
    for s in sources:
        for k, v in s["rejected_by_reason"].items():
            by_reason[k] = by_reason.get(k, 0) + v
        formats[s["format"]] = formats.get(s["format"], 0) + 1
        files += 1
        lines += s["lines_read"]
        events += s["events"]
        rejected += s["rejected"]
        if s["start"] and (start is None or s["start"] < start):
            start = s["start"]
        if s["end"] and (end is None or s["end"] > end):
            end = s["end"]
        ranks.update(s["ranks"])
        hosts.update(s["hosts"])
        if per_file:
            files_.append(_file_entry(s))
    return IngestSummary(
        store=store,
        files=files,
        lines_read=lines,
        events=events,
        rejected=rejected,
        rejected_by_reason=dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
        ranks=sorted(ranks),
        hosts=sorted(hosts),
        start=start,
        end=end,
        seconds=0.0,
        bytes_read=nbytes,
        new_files=new,
        unchanged_files=unchanged,
        appended_files=appended,
        duplicate_files=duplicates,
        formats=formats,
        per_file=files_,
    )


def _file_entry(s: dict[str, Any]) -> dict[str, Any]:
    """A source's row in the summary's per_file."""
    return {"path": s["path"], "format": s["format"], "lines_read": s["lines_read"], "events": s["events"],
            "rejected": s["rejected"], "rank_from": _rank_from(s), "ranks": list(s["ranks"][:16])}


def _rows_of(cols: dict[str, list[Any]]) -> Iterator[dict[str, Any]]:
    """The fields _summarize reads of each source, from the columns of the table of sources (a
    dict at a time; the JSON texts of the count fields decoded once each)."""
    import orjson

    decoded: dict[str, dict[str, int]] = {}

    def counts(text: str) -> dict[str, int]:
        if text not in decoded:
            decoded[text] = orjson.loads(text)
        return decoded[text]

    keys = ("path", "format", "lines_read", "events", "rejected", "start", "end", "ranks", "hosts")
    for row in zip(*(cols[k] for k in keys), cols["rejected_by_reason"], cols["rank_sources"]):
        d = dict(zip(keys, row))
        d["ranks"] = d["ranks"] or ()
        d["hosts"] = d["hosts"] or ()
        d["rejected_by_reason"], d["rank_sources"] = counts(row[-2]), counts(row[-1])
        yield d


def _rank_from(s: dict[str, Any]) -> str:
    rs = {k for k, v in s.get("rank_sources", {}).items() if v}
    if not rs:
        return "none"
    return next(iter(rs)) if len(rs) == 1 else "mixed(" + ",".join(sorted(rs)) + ")"


__all__ = ["ingest", "IngestSummary", "parse_gpu_map"]


class _CallableModule(types.ModuleType):
    """The package doubles as the library function `forensics.ingest(...)`."""

    def __call__(self, *args: Any, **kwargs: Any) -> IngestSummary:
        return ingest(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
