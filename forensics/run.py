"""Opening a run: a store, or raw log paths ingested first into a cache keyed by their identity.

Owns the "point it at a log folder" convenience of every query command. Must not parse logs
(ingest does) or answer questions (timeline/passes do).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

from .store import Run, is_store, open_store


def cache_dir() -> Path:
    base = os.environ.get("FORENSICS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "forensics"
    )
    return Path(base)


def open_run(paths: str | os.PathLike[str] | list[str], progress: Callable | None = None,
             gpu_map: list[str] | None = None) -> Run:
    """A store path opens directly; anything else is ingested (once) into the cache. `gpu_map`
    (HOST:GPU=RANK entries, as `ingest --gpu-map`) is part of the cache key: another map, another store."""
    items = [str(p) for p in paths] if isinstance(paths, list) else [str(paths)]
    if len(items) == 1 and is_store(items[0]):
        return open_store(items[0])
    from .ingest import ingest
    from .ingest.sources import expand, file_info

    files = expand(items)
    from .schema import SCHEMA_VERSION

    h = hashlib.blake2b(digest_size=12)
    h.update(f"schema {SCHEMA_VERSION}\n".encode())  # a newer schema never reads an older cache
    if gpu_map:  # the parsed entries, so that an edited @file is another cache entry too
        from .ingest import parse_gpu_map

        h.update(f"gpu_map {parse_gpu_map(gpu_map)!r}\n".encode())
    for f in sorted(files, key=str):
        i = file_info(f)
        h.update(f"{i.path}\0{i.size}\0{i.mtime}\0{i.fingerprint}\n".encode())
    target = cache_dir() / f"{h.hexdigest()}.forensics"
    if not is_store(target):
        ingest(items, target, progress=progress, gpu_map=gpu_map)
    run = open_store(target)
    run.inputs = items
    return run
