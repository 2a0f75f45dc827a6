"""Opening a run: a store, or raw log paths ingested first into a cache keyed by their identity.

Owns the "point it at a log folder" convenience of every query command. Must not parse logs
(ingest does) or answer questions (timeline/passes do).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

from .errors import STORE_WRITE, ForensicsError
from .store import Run, is_store, open_store


def cache_dir() -> Path:
    base = os.environ.get("FORENSICS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "forensics"
    )
    return Path(base)


def open_run(paths: str | os.PathLike[str] | list[str], progress: Callable | None = None) -> Run:
    """A store path opens directly; anything else is ingested (once) into the cache."""
    items = [str(p) for p in paths] if isinstance(paths, list) else [str(paths)]
    if len(items) == 1 and is_store(items[0]):
        return open_store(items[0])
    from .ingest import ingest
    from .ingest.sources import expand, file_info

    files = expand(items)
    from .schema import SCHEMA_VERSION

    h = hashlib.blake2b(digest_size=12)
    h.update(f"schema {SCHEMA_VERSION}\n".encode())  # a newer schema never reads an older cache
    for f in sorted(files, key=str):
        i = file_info(f)
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
            ingest(items, target, progress=progress)
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
