"""Ingest on a Dask cluster (forensics/ingest/distributed.py): the same store as a local ingest.

One LocalCluster with two worker processes serves the whole module. Its scheduler runs in this
process, so `allowed-failures` set before it starts is what it uses: 1 (a unit whose worker dies
is run once more; a second death fails the ingest), which keeps the crash tests short.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import forensics
import forensics.ingest as ingest_mod
import forensics.ingest.distributed as distributed_mod
from forensics.errors import ForensicsError

dask = pytest.importorskip("dask")
dd = pytest.importorskip("distributed")

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_logs"


@pytest.fixture(scope="module")
def client():
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = dd.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0")
        c = dd.Client(cluster, set_as_default=False)
        try:
            yield c
        finally:
            c.close()
            cluster.close()


def _line(rank: int, step: int, t: float, **extra: object) -> str:
    return json.dumps({"timestamp": f"2025-06-12T14:{int(t) // 60:02d}:{t % 60:06.3f}Z", "rank": rank,
                       "level": "INFO", "event": "TRAIN_STEP", "message": f"step={step} loss={3 - step / 1e3:.4f}",
                       "extra": {"step_time_ms": 300.0 + rank, **extra}})


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sample runs of every shape, plus: one plain file big enough to be cut into byte ranges
    (RANGE_BYTES is lowered in the tests), hostile lines, a truncated tail, a gzip file."""
    d = tmp_path_factory.mktemp("dask-logs")
    (d / "big").mkdir()
    with open(d / "big" / "all_ranks.jsonl", "w") as f:
        for i in range(3000):
            f.write(_line(i % 4, i // 4, i * 0.05) + "\n")
    (d / "bad").mkdir()
    (d / "bad" / "rank_7.jsonl").write_bytes(
        (_line(7, 1, 1.0) + "\nnot json at all\n\x00\xff\xfe garbage\n" + _line(7, 2, 2.0) + "\n{\"truncated\": ").encode("latin-1"))
    with gzip.open(d / "bad" / "rank_8.jsonl.gz", "wt") as g:
        g.write("\n".join(_line(8, s, s * 0.5) for s in range(50)) + "\n")
    return d


def _inputs(logs: Path) -> list[str]:
    # three sample runs of the same ranks and steps in one store, on purpose (force=True: not one run)
    return [str(SAMPLES / "straggler"), str(SAMPLES / "hang"), str(SAMPLES / "oom_cascade"), str(logs)]


_PART_KEYS = ("parts", "part_bytes", "part", "written")


def _tables(store: Path) -> dict[str, pl.DataFrame]:
    """Every Parquet table of a store (events, rejects and whatever else ingest writes: per-step
    and per-rank summaries, ...), each read whole and sorted by all its sortable columns."""
    out: dict[str, pl.DataFrame] = {}
    groups: dict[str, list[Path]] = {}
    for p in sorted(store.rglob("*.parquet")):
        # the STEPS summary is a folder named by the summaries' key (a hash of the random part names)
        groups.setdefault(re.sub(r"-[0-9a-f]{20}$", "", str(p.parent.relative_to(store))), []).append(p)
    for name, parts in groups.items():
        df = pl.concat([pl.read_parquet(p) for p in parts], how="diagonal_relaxed")
        df = df.drop([c for c in df.columns if c.endswith(_PART_KEYS)])  # a part's (random) name
        keys = [c for c, t in df.schema.items() if not isinstance(t, (pl.List, pl.Struct, pl.Array, pl.Object))]
        out[name] = df.sort(keys, nulls_last=True)
    return out


def _manifest(store: Path) -> Any:
    """The manifest without what names a part file (random names) or the time it was written."""
    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if not any(k.endswith(s) for s in _PART_KEYS)}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x
    return clean(json.loads((store / "manifest.json").read_text()))


def _summary(s: ingest_mod.IngestSummary) -> dict[str, Any]:
    d = s.to_dict()
    for k in ("store", "seconds", "mb_per_s"):
        d.pop(k)
    return d


def assert_same_store(a: Path, b: Path) -> None:
    ta, tb = _tables(a), _tables(b)
    assert sorted(ta) == sorted(tb)
    assert "events" in ta
    for name in ta:
        assert_frame_equal(ta[name], tb[name], check_column_order=False)
    assert _manifest(a) == _manifest(b)


def test_dask_ingest_builds_the_same_store_as_a_local_one(client, logs: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ingest_mod, "RANGE_BYTES", 60_000)  # the big file becomes several units
    seen: list[dict[str, Any]] = []
    d = forensics.ingest(_inputs(logs), tmp_path / "dask", dask=client, force=True,
                         progress=lambda kind, info: seen.append({"kind": kind, **info}))
    loc = forensics.ingest(_inputs(logs), tmp_path / "local", force=True)
    assert _summary(d) == _summary(loc)
    assert d.events > 3000 + 50 + 2 and d.rejected >= 3  # the sample runs, the big file, the hostile lines
    assert_same_store(tmp_path / "dask", tmp_path / "local")
    assert {"events", "rejects"} <= set(_tables(tmp_path / "dask"))
    # the workers wrote each part's partial summaries; the summaries merged from them are the events'
    from test_summaries import _assert_stored_equal_computed

    from forensics import summaries as S
    from forensics.store import open_store

    run = open_store(tmp_path / "dask")
    assert all(S.partial_path(run.path, p, n).is_file() for p in run.event_parts() for n in S.PARTIALS)
    _assert_stored_equal_computed(run, exact=False)
    by_path = {f["path"]: f for f in d.per_file}
    big = by_path[str(logs / "big" / "all_ranks.jsonl")]
    assert big["lines_read"] == big["events"] == 3000
    bad = by_path[str(logs / "bad" / "rank_7.jsonl")]
    # "not json at all" is the file's console text (an event); the garbage and the cut line are rejects
    assert (bad["lines_read"], bad["events"], bad["rejected"]) == (5, 3, 2)
    # the progress display sees every unit as it completes (the big file's ranges are units of
    # their own; small files share units: one part per batch)
    units = [s for s in seen if s["kind"] == "unit"]
    ranges = -(-(logs / "big" / "all_ranks.jsonl").stat().st_size // 60_000)
    assert seen[0]["kind"] == "start" and len(units) == seen[0]["units"] > ranges > 1
    assert units[-1]["bytes_done"] == seen[0]["bytes"]
    assert not list(tmp_path.glob(".dask.tmp-*"))


def test_append_on_dask_matches_append_locally(client, logs: Path, tmp_path: Path) -> None:
    first = [str(SAMPLES / "straggler")]
    rest = [*first, str(logs / "bad")]
    forensics.ingest(first, tmp_path / "dask", dask=client)
    forensics.ingest(rest, tmp_path / "dask", dask=client.scheduler.address, append=True)  # an address works too
    forensics.ingest(first, tmp_path / "local")
    forensics.ingest(rest, tmp_path / "local", append=True)
    assert_same_store(tmp_path / "dask", tmp_path / "local")


def _set_failpoint(client, value: str | None, workers: list[str] | None = None, nanny: bool = False) -> None:
    def setenv(v: str | None) -> None:
        if v is None:
            os.environ.pop("FORENSICS_FAILPOINT", None)
        else:
            os.environ["FORENSICS_FAILPOINT"] = v
    client.run(setenv, value, workers=workers, nanny=nanny)


def test_a_worker_dying_mid_unit_has_its_unit_run_again(client, logs: Path, tmp_path: Path, monkeypatch) -> None:
    # many units, one a task: both workers get some (small files share units in the new layout)
    monkeypatch.setattr(ingest_mod, "RANGE_BYTES", 60_000)
    monkeypatch.setattr(distributed_mod, "BATCH_UNITS", 1)
    client.wait_for_workers(1, timeout=600)  # a loaded machine restarts slowly
    doomed = sorted(client.scheduler_info()["workers"])[0]
    _set_failpoint(client, "dask-unit-done", workers=[doomed])  # dies after writing a unit's parts
    try:
        forensics.ingest(_inputs(logs), tmp_path / "dask", dask=client, force=True)
    finally:
        _set_failpoint(client, None)
    # it did die (its restarted process has another address), and its unit was run again
    assert doomed not in client.scheduler_info()["workers"]
    forensics.ingest(_inputs(logs), tmp_path / "local", force=True)
    assert_same_store(tmp_path / "dask", tmp_path / "local")
    client.wait_for_workers(1, timeout=600)  # a loaded machine restarts slowly


def _touch(path: str) -> int:
    Path(path).write_text("x")
    return 1


def test_a_worker_that_cannot_see_a_log_folder_or_write_staging_is_named(client, tmp_path: Path) -> None:
    from forensics.ingest.distributed import DaskCluster

    cluster = DaskCluster(client)
    gone = tmp_path / "not-mounted"
    with pytest.raises(ForensicsError) as e:
        cluster.map(_touch, [str(tmp_path / "a")], [((str(gone / "rank_0.jsonl"),), (str(tmp_path),))], lambda i, r: None)
    assert e.value.code == "F310" and str(gone) in e.value.what and "cannot see" in e.value.what
    assert "mount" in (e.value.help or "")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(ForensicsError) as e:
        cluster.map(_touch, [str(tmp_path / "a")], [((str(tmp_path / "x.jsonl"),), (str(not_a_dir),))], lambda i, r: None)
    assert "cannot write" in e.value.what and str(not_a_dir) in e.value.what
    assert not (tmp_path / "a").exists()  # nothing ran
    got: list[tuple[int, int]] = []
    cluster.map(_touch, [str(tmp_path / "a")], [((str(tmp_path / "x.jsonl"),), (str(tmp_path),))],
                lambda i, r: got.append((i, r)))
    assert got == [(0, 1)] and (tmp_path / "a").exists()


def test_a_worker_that_loses_the_folder_after_the_check_is_named_too(client, tmp_path: Path, monkeypatch) -> None:
    """A worker that joins after the first check (or loses its mount) checks again before its unit:
    a log it cannot see must not be recorded as a file that vanished."""
    from forensics.ingest.distributed import DaskCluster

    cluster = DaskCluster(client)
    monkeypatch.setattr(DaskCluster, "check", lambda self, needs: None)
    gone = tmp_path / "not-mounted"
    with pytest.raises(ForensicsError) as e:
        cluster.map(_touch, [str(tmp_path / "a")], [((str(gone / "rank_0.jsonl"),), (str(tmp_path),))], lambda i, r: None)
    assert e.value.code == "F310" and f"cannot see {gone}" in e.value.what
    with pytest.raises(ForensicsError) as e:
        cluster.map(_touch, [str(tmp_path / "a")], [((str(tmp_path / "x.jsonl"),), (str(gone),))], lambda i, r: None)
    assert f"cannot write {gone}" in e.value.what
    assert not (tmp_path / "a").exists()


def test_small_units_travel_in_batches_and_every_unit_is_reported() -> None:
    from forensics.ingest.distributed import BATCH_BYTES, BATCH_UNITS, batches

    # 1,024 files of 250 kB on 2 threads: 8 batches of consecutive units, none over its share
    b = batches([250_000] * 1024, threads=2)
    assert [i for g in b for i in g] == list(range(1024))
    assert len(b) == 8 and all(len(g) == 128 for g in b)
    # a big unit is a batch of its own; a cap on units per batch and on bytes
    assert batches([10, 10, 10**9, 10], threads=1) == [[0, 1], [2], [3]]
    assert max(len(g) for g in batches([1] * 10_000, threads=1)) == BATCH_UNITS
    assert all(sum([40 << 20] * len(g)) <= BATCH_BYTES for g in batches([40 << 20] * 100, threads=1))
    assert batches([], threads=4) == []


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def test_cli_dask_option_and_environment_variable(client, tmp_path: Path) -> None:
    r = _cli("ingest", str(SAMPLES / "straggler"), "-o", str(tmp_path / "d"), "--dask", client.scheduler.address, "--json")
    assert r.returncode == 0, r.stderr
    r = _cli("ingest", str(SAMPLES / "straggler"), "-o", str(tmp_path / "e"), "--json",
             env={"FORENSICS_DASK": client.scheduler.address})
    assert r.returncode == 0, r.stderr
    forensics.ingest([str(SAMPLES / "straggler")], tmp_path / "local")
    assert_same_store(tmp_path / "d", tmp_path / "local")
    assert_same_store(tmp_path / "e", tmp_path / "local")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("how", ["option", "env"])
def test_unreachable_scheduler_is_one_error_and_writes_nothing(tmp_path: Path, how: str) -> None:
    address = f"tcp://127.0.0.1:{_closed_port()}"
    env = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}  # Dask's own setting: keep the test short
    args = ["ingest", str(SAMPLES / "straggler"), "-o", str(tmp_path / "s")]
    if how == "option":
        r = _cli(*args, "--dask", address, env=env)
    else:
        r = _cli(*args, env={**env, "FORENSICS_DASK": address})
    assert r.returncode == 1
    assert f"error[F310]: cannot reach the Dask scheduler at {address}" in r.stderr
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


MISSING_DASK = """
import sys
sys.modules["distributed"] = None  # `import distributed` now fails as if it were not installed
from forensics.cli import main
sys.argv = ["forensics", *sys.argv[1:]]
main()
"""


def test_without_dask_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", MISSING_DASK, "ingest", str(SAMPLES / "straggler"), "-o",
                        str(tmp_path / "s"), "--dask", "tcp://127.0.0.1:8786"], capture_output=True, text=True)
    assert r.returncode == 1
    assert "error[F300]" in r.stderr and "pip install 'forensics[dask]'" in r.stderr
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []
    # a local ingest does not need dask at all
    r = subprocess.run([sys.executable, "-c", MISSING_DASK, "ingest", str(SAMPLES / "straggler"), "-o",
                        str(tmp_path / "s")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_worker_that_sees_the_folder_but_not_its_files_fails_before_any_commit(client, tmp_path: Path, monkeypatch) -> None:
    """Issue 30: a worker that saw the folder but not the files in it marked every file
    "vanished", exited 0 and committed 0 events (and a local re-ingest then said "unchanged").
    The worker's files are hidden from it by moving them once planned; the client still 'sees'
    them (os.path.isfile patched in this process only: the workers are other processes)."""
    from forensics.ingest.distributed import DaskCluster

    d = tmp_path / "logs"
    d.mkdir()
    for r in range(3):
        (d / f"rank_{r}.jsonl").write_text(_line(r, 1, 1.0) + "\n")
    hidden = {str(d / f"rank_{r}.jsonl") for r in range(3)}
    real_isfile = os.path.isfile
    monkeypatch.setattr(os.path, "isfile", lambda p: str(p) in hidden or real_isfile(p))
    real = ingest_mod._dispatch

    def hide_then_dispatch(*a, **k):
        for p in hidden:
            os.rename(p, p + ".elsewhere")
        return real(*a, **k)

    monkeypatch.setattr(ingest_mod, "_dispatch", hide_then_dispatch)
    monkeypatch.setattr(ingest_mod, "CARRY_BYTES", 0)   # the units read the files (not planning's bytes)
    for skip_probe in (False, True):   # caught by the probe; and, past it, by the unit's result
        if skip_probe:
            monkeypatch.setattr(DaskCluster, "check", lambda self, needs: None)
        with pytest.raises(ForensicsError) as e:
            forensics.ingest([str(d)], tmp_path / "st", dask=client)
        assert e.value.code == "F310" and "cannot see" in e.value.what and str(d) in e.value.what
        assert not (tmp_path / "st" / "manifest.json").exists()   # nothing committed
        for p in hidden:
            os.rename(p + ".elsewhere", p)


def _silent_listener(reply: bytes | None) -> tuple[int, Any]:
    """A loopback listener that accepts and never speaks (reply None), or answers every
    connection with `reply` (an HTTP server's)."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            held.append(c)
            if reply is not None:
                c.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1], srv


@pytest.mark.parametrize("reply", [None, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"])
def test_a_listener_that_is_not_a_scheduler_times_out(tmp_path: Path, reply: bytes | None) -> None:
    """Was: past 600 s (Client's handshake has no deadline)."""
    port, srv = _silent_listener(reply)
    try:
        r = _cli("ingest", str(SAMPLES / "straggler"), "-o", str(tmp_path / "s"), "--dask", f"tcp://127.0.0.1:{port}",
                 env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}, timeout=60)
    finally:
        srv.close()
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"error[F310]: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("address, says", [
    ("tls://127.0.0.1:8786", "the tls:// scheme is not supported"),
    ("ws://127.0.0.1:8786", "the ws:// scheme is not supported"),
    ("notaurl", "'notaurl' is not a Dask scheduler address"),
    ("tcp://127.0.0.1:99999", "is not a Dask scheduler address"),
])
def test_unsupported_scheduler_addresses_are_clear_errors(tmp_path: Path, address: str, says: str) -> None:
    """Was: tracebacks (tls://, ws://), an ignored-exception traceback and 10 s (notaurl): refused
    before any connection is tried."""
    r = _cli("ingest", str(SAMPLES / "straggler"), "-o", str(tmp_path / "s"), "--dask", address, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert says in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_workers_of_an_older_forensics_whose_probe_differs_are_named(client, tmp_path: Path, monkeypatch) -> None:
    """The probe runs the workers' own forensics: an older one takes other arguments (TypeError)."""
    from forensics.ingest.distributed import DaskCluster

    cluster = DaskCluster(client)

    def old_probe(*a, **k):
        raise TypeError("_probe() takes 2 positional arguments but 3 were given")

    monkeypatch.setattr(cluster.client, "run", old_probe)
    with pytest.raises(ForensicsError) as e:
        cluster.check([((str(tmp_path / "x.jsonl"),), (str(tmp_path),))])
    assert e.value.code == "F310" and "another version of forensics" in e.value.what


def test_workers_that_keep_dying_fail_the_ingest_and_leave_the_old_store(client, tmp_path: Path, monkeypatch) -> None:
    """Last in the module: it leaves workers that die on every unit (the module's cluster is
    closed after it; restarting them waits on a loaded machine's process start-ups)."""
    store = tmp_path / "s"
    forensics.ingest([str(SAMPLES / "healthy")], store)
    before = {p.relative_to(store): p.read_bytes() for p in store.rglob("*") if p.is_file()}
    client.wait_for_workers(2, timeout=600)  # the worker killed above is back: every worker gets it
    # LocalCluster's nannies live in this process: workers they restart inherit its environment
    monkeypatch.setenv("FORENSICS_FAILPOINT", "dask-unit-done")
    _set_failpoint(client, "dask-unit-done")
    with pytest.raises(ForensicsError) as e:
        forensics.ingest([str(SAMPLES / "straggler")], store, dask=client)
    assert e.value.code == "F310" and "worker died" in e.value.what and "unchanged" in e.value.what
    after = {p.relative_to(store): p.read_bytes() for p in store.rglob("*") if p.is_file()}
    assert after == before
    assert not list(tmp_path.glob(".s.tmp-*"))
