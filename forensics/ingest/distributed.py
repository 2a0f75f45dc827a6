"""Ingest units on a Dask cluster: the same units as a local ingest, run on the cluster's workers.

Owns: connecting to a scheduler (an address such as tcp://host:8786, or a `distributed.Client`
the caller holds), checking that every worker sees the log files and can write the store's
staging folder (a shared file system: NFS, Lustre), running the unit function there and handing
each result back as it completes. A worker that dies mid-unit has its unit run again on another
worker (the scheduler's `allowed-failures`, default 3); past that the ingest fails with one
ForensicsError and the caller aborts the staging folder, so the old store is untouched.

It must not plan units, merge counts or write the manifest: `forensics.ingest` does that on the
client, exactly as for a local ingest. Dask is optional (`pip install 'forensics[dask]'`): it is
imported only here, and only when a cluster is asked for.
"""
from __future__ import annotations

import os
import re
import socket
import uuid
from typing import Any, Callable, Sequence

from ..errors import BAD_ARGUMENT, CLUSTER, ForensicsError

INSTALL = "pip install 'forensics[dask]'"
WORKER_WAIT_S = 120           # a scheduler without workers yet (Slurm jobs still queued)
# Small units travel in batches: a task costs ~10 ms of scheduler, worker and client CPU (measured:
# 1,024 units of 250 kB took 3x the CPU of a local ingest one unit per task). A batch stays small
# enough that every worker thread gets several (the last ones finish together).
BATCH_BYTES = 64 << 20
BATCHES_PER_THREAD = 4
BATCH_UNITS = 256

# (paths the unit reads, folders it writes) for every unit: what a worker must see
Needs = tuple[Sequence[str], Sequence[str]]


class NotVisible(Exception):
    """Raised on a worker: a path the unit needs is not there (args: path, access, host)."""


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as e:
        raise ForensicsError(
            "ingest on a Dask cluster needs dask.distributed, which is not installed",
            reason=str(e),
            help=f"install it with: {INSTALL}  (or: pip install 'dask[distributed]')",
            code=BAD_ARGUMENT,
        ) from None
    return distributed


def _probe(read_dirs: list[str], write_dirs: list[str], read_files: Sequence[str] = ()) -> dict[str, Any]:
    """Runs on each worker: which folders (and files: one per folder) it cannot see or write,
    and its forensics version. A folder seen without its files (another file system mounted at
    the path, a stale NFS handle) read as every file "vanished": 0 events, exit 0."""
    from .. import __version__

    missing = [d for d in read_dirs if not os.path.isdir(d)] + [f for f in read_files if not os.path.isfile(f)]
    unwritable: list[str] = []
    for d in write_dirs:
        probe = os.path.join(d, f".probe-{uuid.uuid4().hex}")
        try:  # a real write: os.access says yes on read-only and root-squashed NFS mounts
            with open(probe, "wb"):
                pass
            os.unlink(probe)
        except OSError:
            unwritable.append(d)
    return {"host": socket.gethostname(), "version": __version__, "missing": missing, "unwritable": unwritable}


def _work(fn: Callable[[Any], Any], units: list[Any], reads: Sequence[str], writes: Sequence[str]) -> list[Any]:
    """Runs on a worker: a batch of units, after checking this worker sees what they need (a
    worker that joined after the first check, or lost its mount, must not record a log as
    vanished)."""
    from ..store import _failpoint

    for d in sorted({os.path.dirname(p) for p in reads}):
        if not os.path.isdir(d):
            raise NotVisible(d, "read", socket.gethostname())
    for d in writes:
        if not os.path.isdir(d):
            raise NotVisible(d, "write", socket.gethostname())
    results = [fn(u) for u in units]
    _failpoint("dask-unit-done")  # crash tests: the parts are written, the results never arrive
    return socket.gethostname(), results


def _unseen(result: Any) -> str | None:
    """A file a unit's result says vanished that the client still sees: the worker cannot see it."""
    for piece in getattr(result, "pieces", None) or ():
        if not getattr(piece, "complete", True) and "vanished" in (piece.problem or "") and os.path.isfile(piece.path):
            return piece.path
    return None


# Schemes a scheduler address may name: plain TCP (tls:// needs certificates forensics does not
# configure, ws:// and ucx:// other stacks)
SCHEMES = ("tcp",)
_ADDRESS = re.compile(r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\s\[\]]+):(?P<port>\d{1,5})/?$")


def scheduler_address(address: str) -> str:
    """`address` as tcp://HOST:PORT (a bare HOST:PORT is TCP), or a ForensicsError saying why not."""
    m = _ADDRESS.match(address)
    if m is None or not 0 < int(m["port"]) < 65536:
        raise ForensicsError(
            f"{address!r} is not a Dask scheduler address",
            reason="expected tcp://HOST:PORT",
            help="pass the address the scheduler prints (tcp://HOST:8786, or cluster.scheduler_address); nothing was written",
            code=BAD_ARGUMENT,
        )
    scheme = (m["scheme"] or "tcp").lower()
    if scheme not in SCHEMES:
        raise ForensicsError(
            f"Dask scheduler address {address}: the {scheme}:// scheme is not supported",
            reason="forensics connects to a scheduler over plain TCP only",
            help="start the scheduler with a tcp:// address (dask scheduler --protocol tcp) and pass tcp://HOST:PORT; "
                 "nothing was written",
            code=BAD_ARGUMENT,
        )
    return f"tcp://{m['host']}:{m['port']}"


def connect_timeout() -> float:
    """Dask's distributed.comm.timeouts.connect, in seconds (30 s by default; env
    DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT)."""
    import dask.config
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect", 30), default="s") or 30)


def handshake(address: str, timeout: float) -> None:
    """Connect to `address` and ask it who it is, all within `timeout` seconds; a ForensicsError
    unless a Dask scheduler answers. distributed's Client has no deadline on its handshake: a
    listener that accepts and never speaks (or an HTTP server) kept it waiting past 600 s."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect

    async def ask() -> Any:
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def run() -> Any:
        return asyncio.run(asyncio.wait_for(ask(), timeout))

    why: str | None = None
    with ThreadPoolExecutor(1) as pool:   # its own event loop, whatever the caller runs
        try:
            who = pool.submit(run).result()
            if not (isinstance(who, dict) and who.get("type") == "Scheduler"):
                why = f"it answered, but not as a Dask scheduler ({str(who)[:120]!r})"
        except (asyncio.TimeoutError, TimeoutError):
            why = f"no Dask handshake within {timeout:g} s (distributed.comm.timeouts.connect)"
        except Exception as e:  # noqa: BLE001 - refused, reset, garbage on the wire: all "not reachable"
            why = f"{type(e).__name__}: {e}"
    if why is not None:
        raise ForensicsError(
            f"cannot reach the Dask scheduler at {address}",
            reason=why,
            help=("check the address (tcp://HOST:8786, as the scheduler or cluster.scheduler_address prints it) and "
                  "that the scheduler is running; nothing was written"),
            code=CLUSTER,
        )


def batches(weights: list[int], threads: int) -> list[list[int]]:
    """Consecutive units (the plan's order: a folder's files together) grouped into batches of
    at most BATCH_BYTES, BATCH_UNITS units, and 1/BATCHES_PER_THREAD of a thread's share."""
    cap = max(1, min(BATCH_BYTES, sum(weights) // max(1, threads * BATCHES_PER_THREAD)))
    out: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i, w in enumerate(weights):
        if cur and (size + w > cap or len(cur) >= BATCH_UNITS):
            out.append(cur)
            cur, size = [], 0
        cur.append(i)
        size += w
    if cur:
        out.append(cur)
    return out


def _not_visible(worker: str | None, host: str, path: str, access: str) -> ForensicsError:
    what = "cannot see" if access == "read" else "cannot write"
    return ForensicsError(
        f"Dask worker {worker + ' ' if worker else ''}on {host} {what} {path}",
        where=path,
        help=("the logs and the store's folder (-o) must be on a file system every worker mounts at the same "
              "path (NFS, Lustre): mount it there on the workers, or put the logs and -o on such a file system; "
              "nothing was written"),
        code=CLUSTER,
    )


class DaskCluster:
    """A connection to a scheduler for one ingest; `close()` closes it only if we opened it."""

    def __init__(self, cluster: Any, timeout: float | None = None) -> None:
        if isinstance(cluster, str):   # a bad address is refused before dask is imported (~2 s)
            cluster = scheduler_address(cluster.strip())
        dd = _distributed()
        if isinstance(cluster, dd.Client):
            self.client, self._own = cluster, False
        else:
            address = scheduler_address(str(cluster).strip())   # (an object whose str is an address)
            handshake(address, timeout if timeout is not None else connect_timeout())
            try:
                # timeout None: Dask's own distributed.comm.timeouts.connect (30 s; env
                # DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT)
                kw = {} if timeout is None else {"timeout": timeout}
                self.client = dd.Client(address, set_as_default=False, **kw)
            except (OSError, ValueError, TimeoutError) as e:
                raise ForensicsError(
                    f"cannot reach the Dask scheduler at {address}",
                    reason=str(e),
                    help=("check the address (tcp://HOST:8786, as the scheduler or cluster.scheduler_address "
                          "prints it) and that the scheduler is running; nothing was written"),
                    code=CLUSTER,
                ) from None
            self._own = True
        self.address = self.client.scheduler.address

    def close(self) -> None:
        if self._own:
            self.client.close()

    def check(self, needs: list[Needs]) -> None:
        """Every worker sees every log folder and can write every staging folder, and runs the
        same forensics version; else one ForensicsError naming the worker and the path."""
        from .. import __version__

        try:
            self.client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except (TimeoutError, OSError):
            raise ForensicsError(
                f"the Dask scheduler at {self.address} has no workers",
                reason=f"none joined in {WORKER_WAIT_S} s",
                help="start workers (dask-jobqueue: cluster.scale(jobs=N); check the queue with squeue), then run again",
                code=CLUSTER,
            ) from None
        read_dirs = sorted({os.path.dirname(p) for r, _ in needs for p in r})
        write_dirs = sorted({d for _, w in needs for d in w})
        # one file per folder: a worker that sees the folder must see its files
        first: dict[str, str] = {}
        for r, _ in needs:
            for p in r:
                first.setdefault(os.path.dirname(p), p)
        read_files = sorted(first.values())
        try:
            seen = self.client.run(_probe, read_dirs, write_dirs, read_files)
        except (ImportError, TypeError) as e:
            # the probe unpickles and runs on the worker: forensics must be installed there, and
            # this version of it (an older one's probe takes other arguments: TypeError)
            raise ForensicsError(
                f"forensics is not installed on the Dask workers of {self.address}" if isinstance(e, ImportError)
                else f"the Dask workers of {self.address} run another version of forensics than this client ({__version__})",
                reason=str(e),
                help=f"install forensics {__version__} in the workers' Python environment",
                code=CLUSTER,
            ) from None
        for worker, s in sorted(seen.items()):
            if s["version"] != __version__:
                raise ForensicsError(
                    f"Dask worker {worker} on {s['host']} runs forensics {s['version']}, this client {__version__}",
                    help=f"install forensics {__version__} in the workers' Python environment",
                    code=CLUSTER,
                )
            # (a file gone here too vanished since planning: its unit says so, as a local ingest would)
            missing = [p for p in s["missing"] if p not in first.values() or os.path.isfile(p)]
            if missing:
                raise _not_visible(worker, s["host"], missing[0], "read")
            if s["unwritable"]:
                raise _not_visible(worker, s["host"], s["unwritable"][0], "write")

    def map(self, fn: Callable[[Any], Any], units: list[Any], needs: list[Needs],
            on_result: Callable[[int, Any], None], weights: list[int] | None = None) -> None:
        """Run fn(unit) for every unit on the workers, in batches by `weights` (bytes; default:
        one unit per task); on_result(i, result) for each unit as its batch completes. On any
        failure the batches not yet run are cancelled and the error raised."""
        dd = _distributed()
        for r, w in needs:  # a worker's working directory is not ours: only absolute paths travel
            assert all(os.path.isabs(p) for p in [*r, *w]), (r, w)
        self.check(needs)
        threads = sum(self.client.nthreads().values()) or 1
        groups = batches(weights, threads) if weights is not None else [[i] for i in range(len(units))]
        futures = [self.client.submit(_work, fn, [units[i] for i in g], sorted({p for i in g for p in needs[i][0]}),
                                      sorted({d for i in g for d in needs[i][1]}), pure=False)
                   for g in groups]
        index = {f.key: g for f, g in zip(futures, groups)}
        try:
            for f in dd.as_completed(futures, loop=self.client.loop):
                g = index[f.key]
                i = g[0]
                try:
                    host, results = f.result()
                except dd.KilledWorker as e:
                    raise ForensicsError(
                        "a Dask worker died while ingesting; the store is unchanged",
                        where=str(getattr(units[i], "path", "")) or None,
                        reason=str(e),
                        help=("look in the workers' logs for why they died (a worker past its memory limit is "
                              "killed: give workers more memory); then run the ingest again"),
                        code=CLUSTER,
                    ) from None
                except NotVisible as e:
                    path, access, host = e.args
                    raise _not_visible(None, host, path, access) from None
                for j, result in zip(g, results):
                    unseen = _unseen(result)
                    if unseen is not None:   # before anything is committed
                        raise _not_visible(None, host, unseen, "read")
                    on_result(j, result)
        except BaseException:
            self.client.cancel(futures)
            raise
