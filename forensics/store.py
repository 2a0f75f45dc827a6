"""The on-disk store: a directory of Parquet parts plus a manifest, committed atomically.

Owns the layout, the manifest, locking and the atomic swap. It must not parse raw logs (that is
`forensics.ingest`) nor answer questions about a run (that is `timeline` and `passes`).

Layout (readable by DuckDB/Spark/polars without this code):

    STORE/manifest.json          tool/schema version, sources (size, mtime, fingerprint, counts)
    STORE/events/*.parquet       EVENT_SCHEMA; each part sorted by (rank, timestamp, line)
    STORE/rejects/*.parquet      REJECT_SCHEMA; every line that did not become an event

A store is only ever published whole: a new version is assembled in a sibling temp directory
(existing parts are hard-linked, not copied), its manifest written last, then swapped into place
with renameat2(RENAME_EXCHANGE). A directory without a manifest is never taken for a store.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from . import __version__
from .errors import NOT_A_STORE, STORE_BUSY, STORE_DAMAGED, STORE_VERSION, ForensicsError
from .schema import EVENT_SCHEMA, REJECT_SCHEMA, SCHEMA_VERSION

MANIFEST = "manifest.json"
EVENTS_DIR = "events"
REJECTS_DIR = "rejects"
KERNELS_DIR = "kernels"   # profiler traces: one row per GPU activity (schema.KERNEL_STORE_SCHEMA)


def is_store(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / MANIFEST).is_file()


@dataclass
class Run:
    """An opened store. Queries start from `events()` (a LazyFrame) and read only what they need."""

    path: Path
    manifest: dict[str, Any] = field(repr=False)
    inputs: list[str] | None = None   # the raw log paths, when the store is a cache of them

    @property
    def label(self) -> str:
        """What a report names: the logs the user pointed at, else the store."""
        return ", ".join(self.inputs) if self.inputs else str(self.path)

    def _parts(self, key: str) -> list[str]:
        return sorted(str(self.path / p) for s in self.manifest["sources"] for p in s.get(key, []))

    def event_parts(self) -> list[str]:
        """Absolute paths of the event parts, sorted (what `events()` scans)."""
        return self._parts("event_parts")

    def reject_parts(self) -> list[str]:
        """Absolute paths of the reject parts, sorted (what `rejects()` scans)."""
        return self._parts("reject_parts")

    def kernel_parts(self) -> list[str]:
        """Absolute paths of the kernel parts (profiler traces' GPU activities), sorted."""
        return self._parts("kernel_parts")

    def kernels(self) -> pl.LazyFrame:
        """The GPU activities of the run's profiler traces (empty without traces)."""
        from .schema import KERNEL_STORE_SCHEMA

        parts = self.kernel_parts()
        if not parts:
            return pl.LazyFrame(schema=KERNEL_STORE_SCHEMA)
        return pl.scan_parquet(parts, schema=KERNEL_STORE_SCHEMA)

    def events(self) -> pl.LazyFrame:
        parts = self.event_parts()
        if not parts:
            return pl.LazyFrame(schema=EVENT_SCHEMA)
        return pl.scan_parquet(parts, schema=EVENT_SCHEMA)

    def rejects(self) -> pl.LazyFrame:
        parts = self.reject_parts()
        if not parts:
            return pl.LazyFrame(schema=REJECT_SCHEMA)
        return pl.scan_parquet(parts, schema=REJECT_SCHEMA)

    @property
    def sources(self) -> list[dict[str, Any]]:
        return self.manifest["sources"]

    @property
    def totals(self) -> dict[str, Any]:
        return self.manifest.get("totals", {})


def recover(target: Path) -> None:
    """Undo a publication that died between the two renames of the fallback swap."""
    if target.exists():
        return
    for old in sorted(target.parent.glob(f".{target.name}.tmp-old-*")):
        if (old / MANIFEST).is_file():
            os.rename(old, target)
            return


def damaged_parts(path: str | os.PathLike[str], manifest: dict[str, Any]) -> dict[str, str]:
    """Parts the manifest lists that are missing or not the size they were written at
    (`part_bytes` per source; stores written before it was recorded: existence only).
    Returns {part (relative): what is wrong}."""
    p = Path(path)
    out: dict[str, str] = {}
    for s in manifest.get("sources", []):
        sizes = s.get("part_bytes") or {}
        for rel in s.get("event_parts", []) + s.get("reject_parts", []) + s.get("kernel_parts", []):
            try:
                n = os.stat(p / rel).st_size
            except OSError:
                out[rel] = "missing"
                continue
            want = sizes.get(rel)
            if want is not None and n != want:
                out[rel] = f"{n:,} bytes, written as {want:,}"
    return out


def damaged_sources(path: str | os.PathLike[str], manifest: dict[str, Any]) -> set[str]:
    """Source files (absolute paths) with at least one damaged part: re-read on re-ingest."""
    bad = damaged_parts(path, manifest)
    return {s["path"] for s in manifest.get("sources", [])
            if any(rel in bad for rel in s.get("event_parts", []) + s.get("reject_parts", []) + s.get("kernel_parts", []))}


def open_store(path: str | os.PathLike[str], verify: bool = True) -> Run:
    """Open a store. `verify`: every part the manifest lists must be there at its written size,
    else a STORE_DAMAGED error names the first bad part (re-ingest repairs the store)."""
    p = Path(path)
    recover(p)
    mf = p / MANIFEST
    if not mf.is_file():
        raise ForensicsError(
            f"{p} is not a forensics store",
            where=str(p),
            reason="no manifest.json (a store is only complete once its manifest is written)",
            help=f"create one with: forensics ingest LOGS -o {p}",
            code=NOT_A_STORE,
        )
    try:
        manifest = json.loads(mf.read_text())
    except (OSError, ValueError) as e:
        raise ForensicsError(f"cannot read {mf}", where=str(mf), reason=str(e), code=NOT_A_STORE) from None
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ForensicsError(
            f"store {p} has schema version {manifest.get('schema_version')}, this forensics reads {SCHEMA_VERSION}",
            where=str(mf),
            help="re-ingest the logs with this version of forensics",
            code=STORE_VERSION,
        )
    if verify:
        bad = damaged_parts(p, manifest)
        if bad:
            rel, what = next(iter(bad.items()))
            src = next((s["path"] for s in manifest["sources"] if rel in s.get("event_parts", []) + s.get("reject_parts", []) + s.get("kernel_parts", [])), "?")
            raise ForensicsError(
                f"store {p} is damaged: {len(bad)} part(s) missing or cut short",
                where=str(p / rel),
                reason=f"{what} (events of {src})",
                help=f"ingest the logs again into the same store (forensics ingest LOGS -o {p}): the files "
                     "whose parts are damaged are read again, the rest is kept",
                code=STORE_DAMAGED,
            )
    return Run(path=p, manifest=manifest)


# --- atomic publication ---------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two directories (Linux renameat2). False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    if ctypes.get_errno() in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(a))


def _failpoint(name: str) -> None:
    """Die here, as kill -9 would, when FORENSICS_FAILPOINT names this point (crash tests)."""
    if os.environ.get("FORENSICS_FAILPOINT") == name:
        os._exit(137)


def _fsync_dir(p: Path) -> None:
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """One writer per store: a lock file beside it, released when the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ForensicsError(
                f"another forensics process is writing {path}",
                where=str(lock),
                help="wait for it to finish, or write to another store with -o",
                code=STORE_BUSY,
            ) from None
        yield
    finally:
        os.close(fd)


class StoreWriter:
    """Assembles the next version of a store in a staging directory, then publishes it.

    Usage: with locked(path): w = StoreWriter(path, previous_run); ...; w.commit(manifest)
    Killed anywhere before commit's swap: the old store is untouched and the staging directory
    (a dot-directory beside the store) is removed by the next writer.
    """

    def __init__(self, target: Path, previous: Run | None) -> None:
        self.target = target
        self.previous = previous
        recover(target)
        for stale in target.parent.glob(f".{target.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.staging = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        (self.staging / EVENTS_DIR).mkdir(parents=True)
        (self.staging / REJECTS_DIR).mkdir(parents=True)

    def new_part(self, sub: str) -> tuple[Path, str]:
        """A fresh part path in staging, and its name relative to the store."""
        rel = f"{sub}/part-{uuid.uuid4().hex}.parquet"
        return self.staging / rel, rel

    def keep(self, rel: str) -> None:
        """Carry a part of the previous version into the new one (hard link, no copy)."""
        assert self.previous is not None
        src = self.previous.path / rel
        dst = self.staging / rel
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    def commit(self, manifest: dict[str, Any]) -> None:
        manifest = {
            "tool": "forensics",
            "tool_version": __version__,
            "schema_version": SCHEMA_VERSION,
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **manifest,
        }
        for s in manifest.get("sources", []):  # what every part weighs: damage is found on open
            s["part_bytes"] = {rel: os.stat(self.staging / rel).st_size
                               for rel in s.get("event_parts", []) + s.get("reject_parts", []) + s.get("kernel_parts", [])}
        _failpoint("before-manifest")
        tmp = self.staging / (MANIFEST + ".tmp")
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.staging / MANIFEST)
        _fsync_dir(self.staging)
        _failpoint("before-swap")
        if self.target.exists():
            if not _exchange(self.staging, self.target):
                # Fallback: two renames; a crash between them leaves the old store at .old
                old = self.target.parent / f".{self.target.name}.tmp-old-{uuid.uuid4().hex[:8]}"
                os.rename(self.target, old)
                _failpoint("between-renames")
                os.rename(self.staging, self.target)
                self.staging = old
            _failpoint("after-swap")
            shutil.rmtree(self.staging, ignore_errors=True)
        else:
            os.rename(self.staging, self.target)
        _fsync_dir(self.target.parent)

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
