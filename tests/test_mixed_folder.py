"""One folder holding everything a real post-mortem has: JSONL rank logs, the torchrun console,
an nvidia-smi log and Flight Recorder dumps. `forensics ingest` and `forensics diagnose` must
recognise each file by its content (no file here says what it is by its extension), put all of
it on the same per-rank timelines, and let the diagnosis use all of it.

The run: 4 ranks, one step a second from 10:00:00. At step 30 rank 2 runs out of GPU memory —
only the console says so, in an untimed `[rank2]:` traceback — and hangs in its teardown; ranks
0,1,3 wait in all-reduce #31, their watchdogs fire 10 minutes later (their JSONL logs say
NCCL_TIMEOUT), the dumps show rank 2 never issued #31, and torchrun's ChildFailedError names rank
0, whose SIGABRT it saw first.
"""
from __future__ import annotations

import datetime as dt
import json
import pickle
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.store import open_store

T0 = dt.datetime(2024, 12, 18, 10, 0, 0, tzinfo=dt.timezone.utc)
RANKS = [0, 1, 2, 3]
OOM_STEP = 30
GPU_MAP = [f"{g}={g}" for g in RANKS]


def at(s: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=s)


def z(t: dt.datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def jsonl(r: int) -> str:
    rows = []
    for s in range(OOM_STEP if r == 2 else OOM_STEP + 1):
        t = s + 0.01 * r
        if s < OOM_STEP:
            rows.append({"timestamp": z(at(t + 0.80)), "rank": r, "level": "INFO", "event": "ALLREDUCE",
                         "message": f"step={s} seq={s + 1}", "extra": {"comm_ms": 120.0, "wait_ms": 8.0}})
            rows.append({"timestamp": z(at(t + 0.95)), "rank": r, "level": "INFO", "event": "TRAIN_STEP",
                         "message": f"step={s} loss={2.5 - 0.01 * s:.3f} lr=1e-4", "extra": {"step_time_ms": 950.0}})
        else:  # ranks 0,1,3 wait in all-reduce #31 until the watchdog fires
            rows.append({"timestamp": z(at(t + 600.6)), "rank": r, "level": "ERROR", "event": "NCCL_TIMEOUT",
                         "message": f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=31, "
                                    "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
                                    f"{600051 + r} milliseconds before timing out.",
                         "extra": {"collective": "allreduce", "step": s}})
    return "\n".join(json.dumps(x) for x in rows) + "\n"


def console() -> str:
    lines = [f"[rank{r}]:[2024-12-18 10:00:29,{950 + r:03d}] [INFO] [train.py:188] step 29 | loss 2.210 | 950.0 ms/step"
             for r in RANKS]
    lines += [
        "[rank2]: Traceback (most recent call last):",
        '[rank2]:   File "/workspace/train.py", line 212, in <module>',
        "[rank2]:     loss.backward()",
        "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 2 has a total capacity of "
        "79.15 GiB of which 412.00 MiB is free. Including non-PyTorch memory, this process has 78.74 GiB memory in use. "
        "Of the allocated memory 76.02 GiB is allocated by PyTorch, and 1.90 GiB is reserved by PyTorch but unallocated.",
        "[rank0]:[E1218 10:10:30.612000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=31, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
        "600051 milliseconds before timing out.",
        "W1218 10:10:31.500000 7000 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 7003 closing signal SIGTERM",
        "E1218 10:10:31.710000 7000 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -6) local_rank: 0 (pid: 7001) of binary: /usr/bin/python3",
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60, "train.py FAILED", "-" * 60, "Failures:",
    ]
    for i, r in enumerate((1, 3), start=1):
        lines += [f"[{i}]:", "  time      : 2024-12-18_10:10:31", "  host      : gpu-node-07",
                  f"  rank      : {r} (local_rank: {r})", f"  exitcode  : -6 (pid: {7001 + r})", "  error_file: <N/A>",
                  f"  traceback : Signal 6 (SIGABRT) received by PID {7001 + r}"]
    lines += ["-" * 60, "Root Cause (first observed failure):", "[0]:", "  time      : 2024-12-18_10:10:31",
              "  host      : gpu-node-07", "  rank      : 0 (local_rank: 0)", "  exitcode  : -6 (pid: 7001)",
              "  error_file: <N/A>", "  traceback : Signal 6 (SIGABRT) received by PID 7001", "=" * 60]
    return "\n".join(lines) + "\n"


def nvidia_smi() -> str:
    """`nvidia-smi --query-gpu=timestamp,index,temperature.gpu,utilization.gpu,memory.used,clocks.sm
    --format=csv -l 2` while the job trained."""
    out = ["timestamp, index, temperature.gpu, utilization.gpu [%], memory.used [MiB], clocks.sm [MHz]"]
    for k in range(15):
        t = at(2 * k).strftime("%Y/%m/%d %H:%M:%S.000")
        for g in RANKS:
            mem = 80500 if g == 2 else 61000
            out.append(f"{t}, {g}, {62 + g}, {97 + (k + g) % 3} %, {mem + 10 * k} MiB, 1980 MHz")
    return "\n".join(out) + "\n"


def dump(r: int) -> bytes:
    """A Flight Recorder dump: plain containers only (what torch writes with the NCCL trace buffer)."""
    last = OOM_STEP if r == 2 else OOM_STEP + 1
    entries = []
    for seq in range(last - 9, last + 1):
        t_ns = int(at(seq - 1 + 0.80 + 0.01 * r).timestamp() * 1e9)
        entries.append({
            "record_id": 1000 + seq, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce", "time_created_ns": t_ns,
            "input_sizes": [[1048576]], "input_dtypes": ["Float"], "output_sizes": [[1048576]],
            "output_dtypes": ["Float"], "state": "scheduled" if seq == OOM_STEP + 1 else "completed",
            "timeout_ms": 600000, "is_p2p": False, "duration_ms": None, "frames": [],
        })
    return pickle.dumps({
        "version": "2.4", "rank": r, "entries": entries,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "pg_status": {"0": {"last_enqueued_collective": last, "last_started_collective": -1,
                            "last_completed_collective": OOM_STEP}},
    }, protocol=4)


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "job-4711"
    (d / "logs").mkdir(parents=True)
    (d / "fr").mkdir()
    for r in RANKS:
        (d / "logs" / f"rank{r}.log").write_text(jsonl(r))     # JSONL, named .log
        (d / "fr" / f"_dump_{r}").write_bytes(dump(r))
    (d / "stdout.txt").write_text(console())
    (d / "gpu_metrics.log").write_text(nvidia_smi())            # a CSV, named .log
    return d


EXPECTED_FORMATS = {"rank0.log": "jsonl", "rank1.log": "jsonl", "rank2.log": "jsonl", "rank3.log": "jsonl",
                    "_dump_0": "flight_recorder", "_dump_1": "flight_recorder", "_dump_2": "flight_recorder",
                    "_dump_3": "flight_recorder", "stdout.txt": "console", "gpu_metrics.log": "nvidia_smi"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True)


def check_diagnosis(doc: dict) -> None:
    rc = doc["root_cause"]
    assert (rc["kind"], rc["layer"], rc["ranks"]) == ("oom", "resource", [2])
    findings = doc["findings"]
    root = findings[0]
    # the console's OOM explains the JSONL ranks' timeouts and the dumps' stuck all-reduce
    explained = [findings[i] for i in root["explains"]]
    timeouts = [f for f in explained if f["kind"] == "nccl_timeout" and f["rule"] == "pass.failures"]
    stuck = [f for f in explained if f["kind"] == "hang" and f["rule"] == "pass.stuck_collective"]
    assert timeouts and timeouts[0]["ranks"] == [2] and timeouts[0]["victims"] == [0, 1, 3]
    assert stuck and stuck[0]["ranks"] == [2] and stuck[0]["evidence"]["first_stalled"]["seq"] == OOM_STEP + 1
    cited = {Path(e["source_file"]).name for f in (root, timeouts[0], stuck[0]) for e in f["evidence"]["lines"]}
    assert {"stdout.txt", "rank0.log"} <= cited and any(n.startswith("_dump_") for n in cited)
    # torchrun's "first observed failure" (rank 0's SIGABRT) is named and contradicted
    fo = root["evidence"]["launcher_first_observed"]
    assert (fo["rank"], fo["agrees"]) == (0, False)
    unexplained = [f["title"] for i, f in enumerate(findings)
                   if f["severity"] == "ERROR" and i != 0 and i not in root["explains"]]
    assert unexplained == []


def test_ingest_recognises_every_file_by_content(folder: Path, tmp_path: Path) -> None:
    r = cli("ingest", str(folder), "-o", str(tmp_path / "st"), "--json", *[a for g in GPU_MAP for a in ("--gpu-map", g)])
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    got = {Path(f["path"]).name: f["format"] for f in s["per_file"]}
    assert got == EXPECTED_FORMATS
    assert s["formats"] == {"jsonl": 4, "flight_recorder": 4, "console": 1, "nvidia_smi": 1}
    assert s["ranks"] == RANKS
    by_name = {Path(f["path"]).name: f for f in s["per_file"]}
    # samples take their rank from --gpu-map (its header line has none); a dump from its own record
    assert "gpu_map" in by_name["gpu_metrics.log"]["rank_from"] and by_name["gpu_metrics.log"]["ranks"] == RANKS
    assert by_name["_dump_2"]["ranks"] == [2] and by_name["stdout.txt"]["ranks"] == RANKS


def test_everything_lands_on_the_same_per_rank_timelines(folder: Path, tmp_path: Path) -> None:
    store = tmp_path / "st"
    ingest([str(folder)], store, gpu_map=GPU_MAP)
    ev = open_store(store).events()
    per_rank = (
        ev.filter(pl.col("rank").is_not_null())
        .group_by("rank").agg(pl.col("format").unique().sort(), pl.col("timestamp").min().alias("t0"))
        .sort("rank").collect()
    )
    assert per_rank["rank"].to_list() == RANKS
    for fmts in per_rank["format"].to_list():
        assert {"jsonl", "console", "nvidia_smi", "flight_recorder"} <= set(fmts)
    # one clock: every source of a rank starts within the run's first minute
    spans = (ev.filter(pl.col("rank") == 2).group_by("format").agg(pl.col("timestamp").min().alias("t"))
             .collect())
    assert all(T0 - dt.timedelta(seconds=1) <= t <= at(60) for t in spans["t"].to_list())
    # rank 2's last collective in its dump is the last all-reduce its JSONL log completed
    r2 = ev.filter((pl.col("rank") == 2) & pl.col("seq").is_not_null())
    last = r2.group_by("format").agg(pl.col("seq").max()).collect()
    assert dict(zip(last["format"].to_list(), last["seq"].to_list())) == {"jsonl": OOM_STEP, "flight_recorder": OOM_STEP}


def test_diagnose_uses_all_of_them(folder: Path, tmp_path: Path) -> None:
    store = tmp_path / "st"
    ingest([str(folder)], store, gpu_map=GPU_MAP)
    report = diagnose(open_store(store))
    doc = report.to_json()
    check_diagnosis(doc)
    # the physical layer has the telemetry's numbers on the same ranks
    temps = {row["rank"]: row["temp_c_max"] for row in doc["per_rank"] if row["rank"] is not None}
    assert temps == {g: 62.0 + g for g in RANKS}


def test_cli_diagnose_on_the_raw_folder_and_on_the_store(folder: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))
    r = cli("diagnose", str(folder), "--format", "json")       # raw folder: ingested into the cache
    assert r.returncode == 0, r.stderr
    check_diagnosis(json.loads(r.stdout))
    st = tmp_path / "st"
    assert cli("ingest", str(folder), "-o", str(st), *[a for g in GPU_MAP for a in ("--gpu-map", g)]).returncode == 0
    r = cli("diagnose", str(st), "--format", "json", "--fail-on", "error")
    assert r.returncode == 3                                      # CI: an ERROR finding trips --fail-on
    check_diagnosis(json.loads(r.stdout))
