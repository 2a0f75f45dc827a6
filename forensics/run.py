"""Opening a run: a store, or raw log paths ingested first into a cache keyed by their identity.

Owns the "point it at a log folder" convenience of every query command. Must not parse logs
(ingest does) or answer questions (timeline/passes do).
"""
from __future__ import annotations

import functools
import hashlib
import os
import shlex
from pathlib import Path
from typing import Any, Callable

from .errors import BAD_ARGUMENT, STORE_WRITE, ForensicsError
from .store import Run, is_store, open_store


def _reader_files() -> list[Path]:
    """The code that decides what a store holds: the readers (the whole ingest package, its
    subpackages such as the console reader, ingest/console/, included), the store and its summaries."""
    pkg = Path(__file__).resolve().parent
    return sorted([*(pkg / "ingest").rglob("*.py"), *(pkg / "ingest").rglob("*.c")]) + [
        pkg / n for n in ("schema.py", "store.py", "summaries.py", "failure_rows.py", "failure_facts.py", "topology.py",
          "collective_text.py")]


@functools.lru_cache(maxsize=1)
def _reader_digest() -> bytes:
    """A digest of the code that decides what a store holds (`_reader_files`): a cache written by
    other code is another entry, so an upgrade never serves the old reading of the same logs.
    ~40 small files, read once per process; each named by its path (two `__init__.py` are two)."""
    pkg = Path(__file__).resolve().parent
    h = hashlib.blake2b(digest_size=12)
    for f in _reader_files():
        name = f.relative_to(pkg).as_posix().encode()
        try:
            h.update(name + b"\0" + f.read_bytes())
        except OSError:
            h.update(name + b"\0-")
    return b"code " + h.hexdigest().encode() + b"\n"


def cache_dir() -> Path:
    base = os.environ.get("FORENSICS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "forensics"
    )
    return Path(base)


def source_args(run: Run) -> str:
    """The logs a run was read from, shell-quoted, for a command to copy: the paths the user gave
    (a cache), else the store's source files, or their common folder when there are more than 4;
    LOGS when the store names none."""
    paths = list(run.inputs or []) or [p for p in run.source_columns("path").get("path", []) if p]
    if len(paths) > 4:
        paths = [os.path.commonpath(paths)]   # a long list of files is not a command to copy
    return " ".join(shlex.quote(str(p)) for p in paths) if paths else "LOGS"


# Files whose identities one thread reads in a row: a task per file costs more than a small file's read
IDENTITY_CHUNK = 128


def _identities(files: list[Path], info: Callable[[Path], Any]) -> list[Any]:
    """`info(f)` of each file (its size, time and content fingerprint: the cache key), in order.
    Many files are read on as many threads as there are cores: the reads and the hashing release
    the GIL (4,096 files of 110 KB: ~0.9 CPU s of blake2b and reads, one core's wall time alone)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        cores = os.cpu_count() or 1
    if cores < 2 or len(files) <= IDENTITY_CHUNK:
        return [info(f) for f in files]
    from concurrent.futures import ThreadPoolExecutor

    chunks = [files[a:a + IDENTITY_CHUNK] for a in range(0, len(files), IDENTITY_CHUNK)]
    with ThreadPoolExecutor(min(cores, 4)) as pool:
        return [i for part in pool.map(lambda c: [info(f) for f in c], chunks) for i in part]


def open_run(paths: str | os.PathLike[str] | list[str], progress: Callable | None = None,
             gpu_map: list[str] | None = None, schema: dict | None = None) -> Run:
    """A store path opens directly; anything else is ingested (once) into the cache.

    `gpu_map`: `HOST:GPU=RANK` items or @FILE, as `forensics ingest --gpu-map` (it joins
    telemetry and local-rank console lines to ranks at ingest, so it is part of the cache key).
    `schema`: the config's [schema] section (field roles over the inferred ones; cache key too)."""
    items = [str(p) for p in paths] if isinstance(paths, list) else [str(paths)]
    if len(items) == 1 and not gpu_map and not schema and is_store(items[0]):
        return open_store(items[0])       # without the ingest package (a second of imports)
    from .ingest import ingest, parse_gpu_map

    gmap = parse_gpu_map(gpu_map)
    if len(items) == 1 and is_store(items[0]):
        if gmap:
            store = open_store(items[0])
            opts = " ".join(f"--gpu-map {shlex.quote(g)}" for g in gpu_map or [])
            raise ForensicsError(
                f"--gpu-map cannot change the store {items[0]}", where=items[0],
                reason="a store was already ingested; the map is applied when raw logs are read",
                help=f"pass the log files instead of the store ({source_args(store)} {opts}), or ingest them again with "
                     f"the map: `forensics ingest {source_args(store)} -o {shlex.quote(items[0].rstrip('/') + '-mapped')} {opts}`",
                code=BAD_ARGUMENT)
        return open_store(items[0])
    from .ingest.sources import expand, file_info

    files = expand(items)
    from .schema import SCHEMA_VERSION

    h = hashlib.blake2b(digest_size=12)
    h.update(f"schema {SCHEMA_VERSION}\n".encode())  # a newer schema never reads an older cache
    h.update(_reader_digest())                      # nor does newer reading code (a fix to a reader)
    if gmap:
        # the same logs read with another map are another run (ranks differ): another cache entry
        h.update(("gpu_map " + ";".join(f"{hst or ''}:{g}={r}" for hst, g, r in sorted(gmap, key=str)) + "\n").encode())
    if schema:
        import json

        h.update(("schema-map " + json.dumps(schema, sort_keys=True) + "\n").encode())
    for i in _identities(sorted(files, key=str), file_info):
        h.update(f"{i.path}\0{i.size}\0{i.mtime}\0{i.fingerprint}\n".encode())
    target = cache_dir() / f"{h.hexdigest()}.forensics"
    run = None
    if is_store(target):
        try:
            run = open_store(target)
        except ForensicsError:
            run = None  # a damaged cache entry: ingest below repairs (or rebuilds) it
    if run is None:
        try:
            ingest(items, target, progress=progress,
                   gpu_map=[f"{hst + ':' if hst else ''}{g}={r}" for hst, g, r in gmap] or None, schema=schema or None)
        except ForensicsError as e:
            if e.code != STORE_WRITE:
                raise
            raise ForensicsError(
                f"cannot write the cache {cache_dir()}",
                where=e.where,
                reason=e.reason,
                help="set FORENSICS_CACHE to a writable directory, or ingest the logs into a store "
                     "first (forensics ingest LOGS -o STORE) and pass the store",
                code=STORE_WRITE,
            ) from None
        run = open_store(target)
    run.inputs = items
    return run
