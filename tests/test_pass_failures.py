"""The failures pass: OOM, NCCL timeouts, hangs — the culprit, never the ranks that time out."""
from __future__ import annotations

import polars as pl
import pytest

from forensics import failure_rows
from forensics.passes import failures
from pass_helpers import Rows, at, sync_run


def progress(rows: Rows, ranks: list[int], steps: int, skip: dict[int, int] | None = None) -> None:
    """Per rank, steps 0..steps-1 with one collective (seq = step + 1); `skip` = {rank: last step}."""
    for s in range(steps):
        for r in ranks:
            if skip and r in skip and s > skip[r]:
                continue
            rows.add(float(s), r, "ALLREDUCE", step=s, seq=s + 1, comm_ms=100.0, wait_ms=1.0)


def by_kind(fs):
    return {f.kind: f for f in fs}


def test_oom_then_peer_errors_is_that_ranks_oom() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 30)
    rows.add(30.3, 3, "CUDA_OOM", level="ERROR", step=30,
             message="CUDA out of memory. Tried to allocate 2.25 GiB. this process has 78.08 GiB memory in use")
    for r in (0, 1, 2):  # 0.4 s later, the peers lose the dead rank
        rows.add(30.7, r, "NCCL_TIMEOUT", level="ERROR", step=30, message="Connection closed by peer")
    f = by_kind(failures.find(rows.ctx()))
    assert set(f) == {"oom", "nccl_timeout"}
    assert f["oom"].ranks == [3] and f["oom"].victims == [0, 1, 2]
    assert "2.25 GiB" in f["oom"].title and "0.4 s later" in f["oom"].title
    assert f["nccl_timeout"].ranks == [3] and f["nccl_timeout"].victims == [0, 1, 2]


def test_hang_the_rank_that_never_joined_not_the_first_to_time_out() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 41, skip={2: 39})
    for i, r in enumerate((0, 3, 1)):  # rank 0 times out first: it is a victim like the others
        rows.add(41.0 + 1800 + i * 0.05, r, "NCCL_TIMEOUT", level="ERROR", step=40,
                 message=f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, "
                         "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800083 milliseconds before timing out.")
    f = by_kind(failures.find(rows.ctx()))
    assert f["hang"].ranks == [2] and f["hang"].victims == [0, 1, 3]
    assert f["hang"].evidence["failing_seq"] == 41
    assert f["nccl_timeout"].ranks == [2]
    assert f["hang"].first_seen < f["nccl_timeout"].first_seen


def test_desync_report_names_the_culprit() -> None:
    rows = Rows()
    progress(rows, list(range(8)), 10)
    for r in range(8):
        msg = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=11) ...\n"
               "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
               "\t   - [7] joined but didn't finish collective #11 (count from 1)")
        rows.add(20.0 + r * 0.01, r, "NCCL_TIMEOUT", level="ERROR", message=msg)
    f = by_kind(failures.find(rows.ctx()))
    assert f["nccl_timeout"].ranks == [7]
    assert "desync" in f["nccl_timeout"].evidence["how"]


def test_peer_named_in_the_message() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2], 5)
    rows.add(9.0, 1, "NCCL_TIMEOUT", level="ERROR", message="rank=1 waiting on rank=2 for 1800s")
    rows.add(9.1, 0, "NCCL_TIMEOUT", level="ERROR", message="rank=0 waiting on rank=2 for 1800s")
    f = by_kind(failures.find(rows.ctx()))
    assert f["nccl_timeout"].ranks == [2] and f["nccl_timeout"].victims == [0, 1]


def test_smallest_last_completed_work_is_the_laggard() -> None:
    rows = Rows()
    for r, done in ((0, 160), (1, 160), (2, 158), (3, 160)):
        rows.add(5.0 + r * 0.01, r, "NCCL_TIMEOUT", level="ERROR",
                 message=f"failure detected by watchdog at work sequence id: 161 PG status: last enqueued work: 161, "
                         f"last completed work: {done}")
    f = by_kind(failures.find(rows.ctx()))
    assert f["nccl_timeout"].ranks == [2]


def test_nothing_failed() -> None:
    rows = Rows()
    progress(rows, [0, 1], 5)
    assert failures.find(rows.ctx()) == []


def test_a_host_clock_behind_does_not_put_the_timeouts_before_the_oom() -> None:
    # node0 (ranks 0,1) logs 1 s behind node1 (ranks 2,3): as logged, the victims' errors come
    # 0.6 s BEFORE rank 3's OOM; on the common clock (from the collectives) they come 0.4 s after
    rows = sync_run(Rows(host=lambda r: f"node{r // 2}", skew=lambda r: -1.0 if r < 2 else 0.0), steps=20)
    t = max(r["timestamp"] for r in rows.rows if r["rank"] == 3)
    t_oom = (t - at(0)).total_seconds() + 0.5
    rows.add(t_oom, 3, "CUDA_OOM", level="ERROR", message="CUDA out of memory. Tried to allocate 1.00 GiB")
    for r in (0, 1, 2):
        rows.add(t_oom + 0.4, r, "NCCL_TIMEOUT", level="ERROR", message="Connection closed by peer")
    logged = {r["rank"]: r["timestamp"] for r in rows.rows if r["level"] == "ERROR"}
    assert logged[0] < logged[3]                       # the trap is real
    ctx = rows.ctx()
    assert ctx.clock_offsets.height == 2               # node0 -0.5 s, node1 +0.5 s from the consensus
    f = by_kind(failures.find(ctx))
    assert f["oom"].ranks == [3] and f["nccl_timeout"].ranks == [3] and f["oom"].victims == [0, 1, 2]



def test_collective_fingerprint_mismatch_names_the_odd_rank() -> None:
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 5)
    for me, other in ((0, 3), (1, 3), (2, 3), (3, 0)):
        shape = "[20]" if me == 3 else "[10]"
        oshape = "[20]" if other == 3 else "[10]"
        rows.add(6.0 + me * 0.01, me, "TRACEBACK", level="ERROR",
                 message=f"RuntimeError: Detected mismatch between collectives on ranks. Rank {me} is running collective: "
                         f"CollectiveFingerPrint(SequenceNumber=6, OpType=ALLREDUCE, TensorShape={shape}), but Rank "
                         f"{other} is running collective: CollectiveFingerPrint(SequenceNumber=6, OpType=ALLREDUCE, "
                         f"TensorShape={oshape}).")
    f = by_kind(failures.find(rows.ctx()))
    assert f["nccl_timeout"].ranks == [3] and f["nccl_timeout"].victims == [0, 1, 2]


def test_progress_cites_the_first_line_at_a_ranks_last_time_on_the_common_clock() -> None:
    """A rank's last progress event: its last non-ERROR, step-carrying line (a later ERROR line is
    not progress); of two lines at that time, the first; with two hosts, the latest on the common
    clock. The cited line is fetched after the per-(rank, host) times, so each of these is checked."""
    rows = Rows(host=lambda r: "a" if r in (0, 1) else "b")
    for s in range(20):
        for r in (0, 1, 2, 3):
            rows.add(float(s), r, "ALLREDUCE", step=s, seq=s + 1, comm_ms=100.0, wait_ms=1.0)
    rows.add(19.0, 1, "TRAIN_STEP", step=19, loss=1.0)          # same time as rank 1's last ALLREDUCE
    rows.add(25.0, 1, "NCCL_TIMEOUT", level="ERROR", step=20, message="timed out")
    rows.add(19.5, 2, "GPU_STATS", host="c", step=19, gpu_util=90.0)   # rank 2 on another host too
    ctx = rows.ctx()
    ev = ctx.events.collect()
    maxima = failures._progress_maxima(ctx).collect()
    last = failures._progress_last(ctx, failures._progress_since(ctx)).collect()
    prog = {p["rank"]: p for p in failures._progress(ctx, maxima, last).iter_rows(named=True)}
    last_allreduce = ev.filter((pl.col("rank") == 1) & (pl.col("event") == "ALLREDUCE")).get_column("line").max()
    assert prog[1]["last_step"] == 19 and prog[1]["line"] == last_allreduce and prog[1]["file"] == "rank_1.jsonl"
    assert prog[2]["line"] == ev.filter((pl.col("rank") == 2) & (pl.col("event") == "GPU_STATS")).get_column("line")[0]
    assert prog[0]["max_seq"] == 20 and prog[3]["last_step"] == 19


def test_the_pass_loads_without_the_ingest_package() -> None:
    """The desync / fingerprint text the pass reads lives in forensics.collective_text: importing
    the pass (every diagnosis does) must not load forensics.ingest (0.5 s of a 64-rank diagnose)."""
    import json
    import subprocess
    import sys

    probe = "import forensics.passes.failures, sys, json\nprint(json.dumps('forensics.ingest' in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) is False
    # and the ingest package's readers still see the same patterns
    from forensics import collective_text
    from forensics.ingest import templates

    assert templates.DESYNC_LIST is collective_text.DESYNC_LIST and templates.mismatch_pairs is collective_text.mismatch_pairs


def test_progress_per_rank_and_host_equals_a_walk_over_every_event() -> None:
    """The per-(rank, host) maxima (step, seq) and last time with its first line, read in two
    scans, the times only after a guessed bound: against one walk over the events in store order,
    on varied runs (hosts per rank, ties of time, null times / hosts / steps, ERROR lines, rows out
    of time order); and a bound that misses a (rank, host) falls back to every event."""
    import random

    rng = random.Random(11)
    for i in range(30):
        rows = Rows(host=lambda r: rng.choice(["a", "b", None]) if i % 3 == 0 else f"h{r % 2}")
        for _ in range(rng.randint(1, 120)):
            r = rows.add(float(rng.randint(0, 40)), rng.choice([0, 1, 2, None]), rng.choice(["ALLREDUCE", "TRAIN_STEP"]),
                         level=rng.choice(["INFO", "INFO", "WARN", "ERROR"]),
                         step=rng.choice([rng.randint(0, 30), None]), seq=rng.choice([rng.randint(0, 30), None]))
            if rng.random() < 0.05:
                r["timestamp"] = None
        ctx = rows.ctx()
        want: dict = {}
        for e in ctx.events.collect().iter_rows(named=True):
            if e["rank"] is None or e["step"] is None or e["level"] == "ERROR":
                continue
            w = want.setdefault((e["rank"], e["host"]), {"step": None, "seq": None, "timestamp": None,
                                                         "source_file": None, "line": None})
            for k in ("step", "seq"):
                if e[k] is not None and (w[k] is None or e[k] > w[k]):
                    w[k] = e[k]
            if e["timestamp"] is not None and (w["timestamp"] is None or e["timestamp"] > w["timestamp"]):
                w.update(timestamp=e["timestamp"], source_file=e["source_file"], line=e["line"])
        maxima = failures._progress_maxima(ctx).collect()
        full = failures._progress_last(ctx, None).collect()
        got = {(m["rank"], m["host"]): {"step": m["step"], "seq": m["seq"], "timestamp": None, "source_file": None,
                                        "line": None} for m in maxima.iter_rows(named=True)}
        for f in full.iter_rows(named=True):
            got[(f["rank"], f["host"])].update({k: f[k] for k in ("timestamp", "source_file", "line")})
        assert got == want, i
        expect = failures._progress(ctx, maxima, full)
        for since in (failures._progress_since(ctx), at(rng.uniform(0, 45)), at(100.0)):
            assert failures._progress(ctx, maxima, failures._progress_last(ctx, since).collect()).equals(expect), i


def test_failure_names_filtered_in_the_scan_equal_re_over_every_distinct_name() -> None:
    import random
    import re

    rng = random.Random(5)
    pieces = ["nccl_timeout", "Oom", "TRAIN_STEP", "gpu_stats", "Watchdog", "xid", "cancelled", "ıd", "İ", "\u212a",
              "ſ", "KİLLED", "kılled", "mısmatch", "désync", "DUMP_SİGNAL", "step", "_", ""]
    for i in range(50):
        names = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 30))]
        events = pl.DataFrame({"event": [*names, None]}).sample(fraction=1.0, shuffle=True, seed=i).lazy()
        want = {n for n in names if re.search(failure_rows.NAMED_RE, n)}
        assert set(failure_rows.event_names(events)) == want, i


def test_first_timeout_time_is_the_earliest_timeout_that_is_no_lost_peer() -> None:
    """Whatever the order of the rows: a lost peer (its connection closed) is no timeout, even the
    earliest; without any timed timeout, the earliest exit of a rank that timed out; else None."""
    import datetime as dt
    import random

    from forensics.passes.failures.deaths import first_timeout_time

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def row(rank, s, msg, kind="timeout"):  # type: ignore[no-untyped-def]
        return {"rank": rank, "timestamp": None if s is None else t0 + dt.timedelta(seconds=s), "message": msg,
                "kind": kind, "local_rank": None, "host": None}

    tos = [row(1, 5, "Connection closed by peer"), row(2, 9, "rank=2 waiting on rank=0"),
           row(3, 7, "rank=3 waiting on rank=0"), row(4, None, "rank=4 waiting on rank=0")]
    for _ in range(5):
        random.shuffle(tos)
        assert first_timeout_time(tos, []) == t0 + dt.timedelta(seconds=7)
    untimed = [row(1, 5, "Connection closed by peer"), row(4, None, "rank=4 waiting on rank=0")]
    exits = [row(4, 20, "exit", kind="exit"), row(1, 6, "exit", kind="exit"), row(4, 12, "exit", kind="exit")]
    assert first_timeout_time(untimed, exits) == t0 + dt.timedelta(seconds=12)
    assert first_timeout_time([row(1, 5, "Connection closed by peer")], exits) is None


# Lines written here in the upstream formats: ProcessGroupNCCL.cpp (WorkNCCL::checkTimeout: "[Rank r]
# Watchdog caught collective operation timeout: WorkNCCL(...) ran for N milliseconds before timing
# out."); gloo's tcp transport (GLOO_ERROR_MSG prefixes "[file:line] ": unbound_buffer.cc waitRecv
# "Timed out waiting Nms for recv operation to complete", pair.cc "Connection closed by peer ...").
WATCHDOG = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, "
            "NumelIn=4096, NumelOut=4096, Timeout(ms)=900000) ran for 900117 milliseconds before timing out.")
GLOO_RECV = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:133] Timed out waiting "
             "900000ms for recv operation to complete")


@pytest.mark.parametrize("line, says, never", [
    (WATCHDOG, "NCCL collective timeout", ("gloo", "lost")),
    (GLOO_RECV, "gloo collective timeout", ("NCCL", "lost")),
    ("rank={r} waiting on rank=2 for 900s", "collective timeout", ("NCCL", "gloo", "lost")),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer [10.0.0.3]:4113",
     "lost their peer (connection closed/reset)", ("timeout", "NCCL")),
])
def test_the_timeout_title_names_what_its_lines_show(line: str, says: str, never: tuple[str, ...]) -> None:
    """The collective's failure keeps kind nccl_timeout (the JSON contract) and its culprit; its
    title names the library the cited lines name (NCCL, gloo, none) or a lost peer, never NCCL
    for a gloo run."""
    rows = Rows()
    progress(rows, [0, 1, 2, 3], 41, skip={2: 39})
    for i, r in enumerate((0, 1, 3)):
        rows.add(41.0 + 900 + i * 0.05, r, "LOG", level="ERROR", step=40, message=line.format(r=r))
    f = by_kind(failures.find(rows.ctx()))
    t = f["nccl_timeout"]
    assert t.ranks == [2] and t.victims == [0, 1, 3]
    assert t.title.startswith(f"ranks 0,1,3: {says}"), t.title
    assert not any(w in t.title for w in never), t.title
