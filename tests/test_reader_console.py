"""Console reader: prefixes, typed events, traceback folding, accounting, real logs."""
from __future__ import annotations

import io
import json
import pathlib
import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import schema
from forensics.ingest import formats
from forensics.ingest.binary import BINARY, SHORT, is_binary_text
from forensics.ingest.console import read_console
from forensics.ingest.formats import ReaderContext

REAL = pathlib.Path(__file__).resolve().parents[2] / "shared" / "realdata"


def _read(data: bytes | str, path: str = "/logs/console.log", **ctx_kw) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    if isinstance(data, str):
        data = data.encode()
    kw = {"rank_hint": None, "host_hint": None, **ctx_kw}
    ctx = ReaderContext(path=path, **kw)
    blocks = list(read_console(path, io.BytesIO(data), ctx))
    for b in blocks:
        assert b.lines == b.events.height + b.rejects.height
        schema.conform(b.events)  # raises on a column outside the schema
    events = pl.concat([b.events for b in blocks], how="diagonal_relaxed") if blocks else schema.empty_events()
    rejects = pl.concat([b.rejects for b in blocks]) if blocks else schema.empty_rejects().drop("source_file")
    lines = sum(b.lines for b in blocks)
    expected = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    assert lines == expected
    if events.height:
        assert events["line"].is_unique().all()
    return events, rejects, lines


def _one(data: str, **kw) -> dict:
    ev, _, _ = _read(data, **kw)
    assert ev.height == 1, ev
    row = ev.row(0, named=True)
    row["x"] = json.loads(row["extra"]) if row.get("extra") else {}
    return row


def test_registered_for_console():
    assert formats.reader_for("console") is read_console


# --- rank attribution -------------------------------------------------------------------------

def test_torchrun_rank_prefix_is_global_rank():
    r = _one("[rank3]: Traceback is not here, just text\n")
    assert (r["rank"], r["rank_source"], r["message"]) == (3, "prefix", "Traceback is not here, just text")


def test_torchrun_tee_prefix_is_local_rank():
    # no host, no topology: the number is torchrun's LOCAL rank; the global one is not known
    r = _one("[default5]:loading data\n")
    assert (r["rank"], r["local_rank"], r["rank_source"], r["message"]) == (None, 5, "none", "loading data")


def test_tee_prefix_behind_a_host_is_not_a_global_rank():
    r = _one("node7: [default2]:loading data\n")
    assert (r["host"], r["local_rank"], r["rank"], r["rank_source"]) == ("node7", 2, None, "none")
    r = _one("node7: [default2]:loading data\n", gpu_map={("node7", 2): 26})
    assert (r["rank"], r["rank_source"]) == (26, "gpu_map")


def test_rank_template_prefix():
    assert _one("[12]:step done\n")["rank"] == 12


def test_glog_rank_inside_line_and_timestamp_year_from_file():
    text = (
        "[2023-12-18 20:00:00,000] [INFO] [launch.py:1:main] starting\n"
        "[E1218 20:27:21.426 ProcessGroupNCCL.cpp:629] [Rank 3] something broke\n"
    )
    ev, _, _ = _read(text)
    r = ev.row(1, named=True)
    assert (r["rank"], r["rank_source"], r["level"]) == (3, "prefix", "ERROR")
    assert str(r["timestamp"]) == "2023-12-18 20:27:21.426000+00:00"
    assert ev.row(0, named=True)["rank"] is None and ev.row(0, named=True)["rank_source"] == "none"


def test_glog_without_any_year_in_file_has_null_timestamp():
    r = _one("[E1218 20:27:21.426 ProcessGroupNCCL.cpp:629] [Rank 3] something broke\n")
    assert r["timestamp"] is None and r["rank"] == 3


def test_glog_year_rolls_over_new_year():
    text = "2023-12-31 23:59:59 start\nE0101 00:00:05.000000 1 file.cc:1] [Rank 0] late\n"
    ev, _, _ = _read(text)
    assert str(ev["timestamp"][1]) == "2024-01-01 00:00:05+00:00"


def test_nccl_prefix_gives_host_and_device_not_rank():
    r = _one("gpu-node-3:12345:12400 [6] NCCL INFO Channel 00/02 : 0 1 2 3\n")
    assert (r["host"], r["local_rank"], r["rank"], r["rank_source"], r["level"]) == ("gpu-node-3", 6, None, "none", "INFO")
    assert r["x"]["pid"] == 12345
    r = _one("gpu-node-3:12345:12400 [6] NCCL WARN Net : Connection closed by remote peer\n",
             gpu_map={("gpu-node-3", 6): 30})
    assert (r["rank"], r["rank_source"], r["level"]) == (30, "gpu_map", "WARN")


def test_ray_prefix_gives_host_and_pid():
    r = _one("(RayTrainWorker pid=4242, ip=10.0.0.7) [rank1]: epoch 3 done\n")
    assert (r["host"], r["rank"], r["x"]["pid"], r["x"]["actor"]) == ("10.0.0.7", 1, 4242, "RayTrainWorker")


def test_pdsh_host_prefix_and_words_that_are_not_hosts():
    r = _one("worker-1: [2023-05-01 10:00:00,123] [INFO] [engine.py:10:fn] hello\n")
    assert (r["host"], r["rank"], r["rank_source"]) == ("worker-1", None, "none")
    assert str(r["timestamp"]) == "2023-05-01 10:00:00.123000+00:00"
    for line in ("wandb: Syncing run x\n", "torch.OutOfMemoryError: CUDA out of memory.\n", "srun: error: foo\n",
                 "python3.9: can't open file\n"):
        assert _one(line)["host"] is None


def test_launcher_lines_have_no_rank_and_path_hint_is_used():
    r = _one("Killing subprocess 1234\n")
    assert (r["rank"], r["rank_source"]) == (None, "none")
    r = _one("plain text\n", rank_hint=7, host_hint="n1")
    assert (r["rank"], r["rank_source"], r["host"]) == (7, "path", "n1")


def test_group_rank_of_non_default_pg_is_not_a_global_rank():
    r = _one("[PG ID 3 PG GUID 7(TENSOR_MODEL_PARALLEL_GROUP) Rank 1] Watchdog caught collective operation "
             "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for "
             "600050 milliseconds before timing out.\n")
    assert r["rank"] is None and r["x"]["pg_rank"] == 1 and r["process_group"] == "TENSOR_MODEL_PARALLEL_GROUP"


@given(rank=st.integers(0, 100_000), msg=st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=80))
@settings(max_examples=150, deadline=None)
def test_property_rank_prefix_round_trip(rank, msg):
    msg = msg.strip() or "x"
    r = _one(f"[rank{rank}]: {msg}\n")
    assert r["rank"] == rank and r["rank_source"] == "prefix"
    r = _one(f"[default{rank}]:{msg}\n")
    assert r["local_rank"] == rank


@given(st.lists(st.one_of(
    st.text(max_size=60).map(lambda s: s.replace("\n", " ")),
    st.sampled_from(["", "   ", "Traceback (most recent call last):", '  File "a.py", line 1, in f', "    x()",
                     "ValueError: boom", "[rank1]: Traceback (most recent call last):", "[rank1]:   File \"b.py\", line 2",
                     "[rank1]: KeyError: 3", "Failures:", "[0]:", "  exitcode  : -9 (pid: 5)",
                     " iteration       10/    1000 | lm loss: 1.0E+00 |"]),
), max_size=40), st.booleans(), st.integers(32, 4096))
@settings(max_examples=150, deadline=None)
def test_property_every_line_is_an_event_or_a_reject(lines, trailing_newline, block_bytes):
    data = "\n".join(lines) + ("\n" if trailing_newline and lines else "")
    ev, rej, n = _read(data, block_bytes=block_bytes)
    assert ev.height + rej.height == n
    # only blank lines and binary garbage are rejected; a line is binary by the rule, or is a
    # short fragment between binary lines
    assert set(rej["reason"].to_list()) <= {"blank line", BINARY}
    for reason, raw in zip(rej["reason"].to_list(), rej["raw"].to_list()):
        if reason == BINARY:
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            assert is_binary_text(text) or len(text) < SHORT, text


def test_block_size_does_not_change_the_events():
    path = REAL / "console" / "deepspeed_2rank_oom.log"
    if not path.exists():
        pytest.skip("realdata absent")
    data = path.read_bytes()
    big, _, _ = _read(data)
    small, _, _ = _read(data, block_bytes=4096)
    cols = ["line", "rank", "event", "message", "extra", "mem_alloc_mb"]
    assert big.select(cols).equals(small.select(cols))


# --- typed events -----------------------------------------------------------------------------

def test_nccl_watchdog_timeout():
    r = _one("[rank1]:[E1218 20:27:21.426911144 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
             "operation timeout: WorkNCCL(SeqNum=12345, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
             "Timeout(ms)=600000) ran for 600023 milliseconds before timing out.\n")
    assert r["event"] == "NCCL_TIMEOUT" and r["level"] == "ERROR"
    assert (r["rank"], r["seq"], r["collective"], r["timeout_s"], r["duration_s"]) == (1, 12345, "ALLREDUCE", 600.0, 600.023)
    assert (r["x"]["numel_in"], r["x"]["numel_out"]) == (1048576, 1048576)


def test_watchdog_failure_sequence_ids():
    r = _one("[PG ID 0 PG GUID 0(default_pg) Rank 2] failure detected by watchdog at work sequence id: 77 "
             "PG status: last enqueued work: 78, last completed work: 76\n")
    assert (r["event"], r["rank"], r["seq"], r["x"]["last_enqueued"], r["x"]["last_completed"]) == (
        "NCCL_WATCHDOG", 2, 77, 78, 76)
    r = _one("[Rank 0] Timeout at NCCL work: 12, last enqueued NCCL work: 13, last completed NCCL work: 11.\n")
    assert (r["event"], r["seq"], r["x"]["last_enqueued"]) == ("NCCL_WATCHDOG", 12, 13)


def test_desync_report_names_the_culprits():
    r = _one("[Rank 0]  - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are: [7]\n")
    assert (r["event"], r["x"]["culprit_ranks"], r["peer_rank"]) == ("NCCL_DESYNC", [7], 7)
    r = _one("\t - To our best knowledge, ranks [3, 5] are the lagging ranks that caused this timeout. They never joined any collectives\n")
    assert r["x"]["culprit_ranks"] == [3, 5] and r.get("peer_rank") is None


def test_collective_fingerprint_mismatch():
    r = _one("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=23, OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float, "
             "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)), but Rank 1 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=23, OpType=REDUCE, TensorShape=[20, 10]).\n")
    assert (r["event"], r["rank"], r["rank_source"], r["seq"], r["collective"], r["peer_rank"]) == (
        "COLLECTIVE_MISMATCH", 0, "record", 23, "ALLREDUCE", 1)
    assert r["x"]["peer_collective"] == "REDUCE"


def test_cuda_oom_old_format():
    r = _one("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 15.78 GiB total capacity; "
             "14.56 GiB already allocated; 4.75 MiB free; 14.64 GiB reserved in total by PyTorch)\n")
    assert r["event"] == "CUDA_OOM" and r["mem_alloc_mb"] == pytest.approx(14.56 * 1024)
    x = r["x"]
    assert x["tried_mb"] == 2048 and x["total_mb"] == pytest.approx(15.78 * 1024) and x["free_mb"] == 4.75
    assert x["reserved_mb"] == pytest.approx(14.64 * 1024) and x["device"] == 3


def test_nccl_error_and_cuda_error():
    r = _one("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
             "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n")
    assert r["event"] == "NCCL_ERROR" and r["x"]["nccl_version"] == "2.18.1"
    assert _one("ncclRemoteError: A call failed possibly due to a network error\n")["x"]["nccl_error"] == "ncclRemoteError"
    r = _one("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert (r["event"], r["x"]["cuda_error"]) == ("CUDA_ERROR", "an illegal memory access was encountered")
    r = _one("kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n")
    assert (r["event"], r["x"]["xid"]) == ("GPU_XID", 79)


def test_traceback_is_folded_and_every_line_kept():
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 10, in <module>\n'
        "    main()\n"
        '  File "train.py", line 5, in main\n'
        "    raise ValueError('bad batch')\n"
        "ValueError: bad batch\n"
        "after\n"
    )
    ev, rej, n = _read(text)
    assert n == 7 and ev.height == 7 and rej.height == 0
    head = ev.row(0, named=True)
    x = json.loads(head["extra"])
    assert (head["event"], head["level"], head["message"], head["line"]) == ("TRACEBACK", "ERROR", "ValueError: bad batch", 1)
    assert x["frames"] == ["train.py:10 in <module>", "train.py:5 in main"] and x["line_count"] == 6
    assert x["exception"] == "ValueError"
    assert ev["event"].to_list()[1:] == ["TRACEBACK_CONT"] * 5 + ["LOG"]
    assert all(json.loads(e)["head"] == 1 for e in ev["extra"].to_list()[1:6])


def test_interleaved_tracebacks_of_two_ranks_do_not_mix():
    text = (
        "[rank0]: Traceback (most recent call last):\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank0]:   File "a.py", line 1, in f\n'
        '[rank1]:   File "b.py", line 2, in g\n'
        "[rank1]: KeyError: 'k'\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
        "capacity of 79.15 GiB of which 3.75 MiB is free. Of the allocated memory 77.10 GiB is allocated by PyTorch, "
        "and 1.02 GiB is reserved by PyTorch but unallocated.\n"
    )
    ev, _, _ = _read(text)
    heads = ev.filter(pl.col("event") == "TRACEBACK").sort("rank")
    assert heads["message"].to_list()[1] == "KeyError: 'k'"
    assert heads["message"].to_list()[0].startswith("torch.OutOfMemoryError")
    assert json.loads(heads["extra"][0])["frames"] == ["a.py:1 in f"]
    oom = ev.filter(pl.col("event") == "CUDA_OOM").row(0, named=True)
    assert (oom["rank"], oom["line"], json.loads(oom["extra"])["traceback"]) == (0, 6, 1)
    assert oom["mem_alloc_mb"] == pytest.approx(77.10 * 1024)


def test_traceback_across_a_block_boundary_is_completed():
    lines = ["noise line %d" % i for i in range(50)] + ["Traceback (most recent call last):"]
    lines += ['  File "x.py", line %d, in f' % i for i in range(200)] + ["RuntimeError: late", "tail"]
    ev, _, _ = _read("\n".join(lines) + "\n", block_bytes=1024)
    head = ev.filter(pl.col("event") == "TRACEBACK").row(0, named=True)
    assert head["message"] == "RuntimeError: late" and head["line"] == 51
    assert json.loads(head["extra"])["line_count"] == 202


def test_traceback_glued_to_a_progress_bar():
    text = "  0%|          | 0/78 [00:00<?, ?it/s]Traceback (most recent call last):\n  File \"t.py\", line 1, in m\nOSError: x\n"
    ev, _, _ = _read(text)
    assert ev["event"].to_list() == ["TRACEBACK", "TRACEBACK_CONT", "TRACEBACK_CONT"]
    assert ev["message"][0] == "OSError: x"


def test_child_failed_error_table():
    text = """Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-01-15_10:23:45
  host      : node-1
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 12345)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 12345
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-01-15_10:23:44
  host      : node-1
  rank      : 2 (local_rank: 2)
  exitcode  : 1 (pid: 12344)
  error_file: /tmp/torchelastic/error.json
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
    ev, rej, n = _read(text)
    assert ev.height == n and rej.height == 0
    cf = ev.filter(pl.col("event") == "CHILD_FAILED").sort("line")
    assert cf["rank"].to_list() == [3, 2] and cf["exit_code"].to_list() == [-9, 1]
    assert cf["rank_source"].to_list() == ["record", "record"] and cf["host"].to_list() == ["node-1", "node-1"]
    x0, x1 = (json.loads(e) for e in cf["extra"])
    assert (x0["signal"], x0["first_observed"], x1["first_observed"]) == ("SIGKILL", False, True)
    assert x1["error_file"] == "/tmp/torchelastic/error.json"
    assert str(cf["timestamp"][1]) == "2024-01-15 10:23:44+00:00"
    killed = ev.filter(pl.col("event") == "PROCESS_KILLED").row(0, named=True)
    assert (killed["rank"], json.loads(killed["extra"])["pid"]) == (3, 12345)
    # the record header "[1]:" inside the table is not a rank prefix
    assert ev.filter(pl.col("line") == 9)["rank"][0] is None
    assert ev.filter(pl.col("event") == "TRACEBACK")["message"][0].startswith("torch.distributed.elastic")


def test_kills_and_cancellations():
    assert json.loads(_one("[ 1234.5] Out of memory: Killed process 4242 (python) total-vm:1kB\n")["extra"])["by"] == "oom_killer"
    assert _one("bash: line 1: 98765 Killed                  python train.py\n")["event"] == "PROCESS_KILLED"
    r = _one("slurmstepd: error: *** JOB 1809562 ON r6i5n1 CANCELLED AT 2021-05-23T08:29:53 DUE TO TIME LIMIT ***\n")
    assert (r["event"], r["host"], r["x"]["reason"], str(r["timestamp"])) == (
        "JOB_CANCELLED", "r6i5n1", "TIME LIMIT", "2021-05-23 08:29:53+00:00")
    r = _one("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4243 closing signal SIGTERM\n")
    assert (r["event"], r["x"]["signal"], r["x"]["by"]) == ("PROCESS_KILLED", "SIGTERM", "launcher")
    r = _one("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 4244) of binary: /usr/bin/python\n")
    assert (r["event"], r["local_rank"], r["exit_code"], r["x"]["signal"]) == ("CHILD_FAILED", 3, -9, "SIGKILL")


def test_megatron_iteration_line():
    r = _one(" iteration      100/    1000 | consumed samples:          400 | elapsed time per iteration (ms): 1623.5 | "
             "learning rate: 1.471E-04 | global batch size:     4 | lm loss: 8.085403E+00 | loss scale: 16384.0 | "
             "grad norm: 3.767 | samples per second: 2.464 | number of skipped iterations:   0 |\n")
    assert r["event"] == "TRAIN_STEP"
    assert (r["step"], r["step_time_ms"], r["lr"], r["loss"], r["grad_norm"], r["samples_per_s"]) == (
        100, 1623.5, 1.471e-4, 8.085403, 3.767, 2.464)
    assert r["x"]["train_iters"] == 1000 and r["x"]["consumed_samples"] == 400


def test_hf_printed_dict_and_deepspeed_step():
    r = _one(" 5%|▌ | 10/218 [00:52<18:07,  5.23s/it]{'loss': 1.7658, 'grad_norm': 0.5, 'learning_rate': 0.001, 'epoch': 0.05}\n")
    assert (r["event"], r["loss"], r["lr"], r["grad_norm"], r["epoch"]) == ("TRAIN_STEP", 1.7658, 0.001, 0.5, 0.05)
    r = _one("{'eval_loss': 2.5, 'eval_runtime': 3.0, 'epoch': 1.0}\n")
    assert (r["event"], r["loss"]) == ("EVAL", 2.5)
    r = _one("[2021-05-25 06:38:26,358] [INFO] [logging.py:60:log_dist] [Rank 0] step=10, skipped=1, lr=[5e-05], mom=[[0.9, 0.999]]\n")
    assert (r["event"], r["rank"], r["step"], r["lr"], r["x"]["skipped"]) == ("TRAIN_STEP", 0, 10, 5e-05, 1)


def test_levels_blank_lines_and_garbage():
    text = b"FutureWarning: old api\nsomething Error happened\nall good\n\n   \n\x00\x01\xff\xfe garbage\n"
    ev, rej, n = _read(text)
    assert ev["level"].to_list() == ["WARN", "ERROR", "INFO"]
    # a NUL byte makes the last line binary garbage: rejected with its bytes as written
    assert rej["reason"].to_list() == ["blank line", "blank line", BINARY] and rej["line"].to_list() == [4, 5, 6]
    assert rej["raw"][2] == b"\x00\x01\xff\xfe garbage\n"
    assert ev["line"].to_list() == [1, 2, 3]
    # a non-UTF-8 byte in a text line is not garbage: the line stays an event
    ev, rej, _ = _read(b"loss went up \xe9t\xe9 again\n")
    assert rej.height == 0 and "\ufffd" in ev["message"][0]


def test_last_line_without_newline_and_crlf():
    ev, _, n = _read("a\r\n[rank2]: b")
    assert n == 2 and ev["message"].to_list() == ["a", "b"] and ev["rank"].to_list() == [None, 2]


def test_empty_input():
    ev, rej, n = _read(b"")
    assert n == 0 and ev.height == 0


# --- real logs ----------------------------------------------------------------------------------

def _real(name: str) -> pathlib.Path:
    p = REAL / "console" / name
    if not p.exists():
        pytest.skip(f"realdata absent: {p}")
    return p


def test_deepspeed_oom_log_rank0_oom_then_launcher_kills():
    p = _real("deepspeed_2rank_oom.log")
    raw = p.read_text(errors="replace").splitlines()
    ev, _, _ = _read(p.read_bytes(), path=str(p))
    oom0 = ev.filter((pl.col("event") == "CUDA_OOM") & (pl.col("rank") == 0)).sort("line")
    raw_oom0 = [i + 1 for i, ln in enumerate(raw) if ln.startswith("[rank0]: torch.OutOfMemoryError")]
    assert len(raw_oom0) >= 3 and oom0["line"].to_list() == raw_oom0
    # the numbers of the first one, against the raw text
    first = raw[raw_oom0[0] - 1]
    alloc = float(re.search(r"([\d.]+) GiB is allocated by PyTorch", first).group(1))
    tried = float(re.search(r"Tried to allocate ([\d.]+) MiB", first).group(1))
    x = json.loads(oom0["extra"][0])
    assert oom0["mem_alloc_mb"][0] == pytest.approx(alloc * 1024)
    assert x["tried_mb"] == pytest.approx(tried) and x["total_mb"] == pytest.approx(44.40 * 1024) and x["device"] == 0
    assert [o["pid"] for o in x["other_processes"]] == [1605762, 1612264, 1612549]
    # no OOM is pinned on rank 1
    assert ev.filter((pl.col("event") == "CUDA_OOM") & (pl.col("rank") == 1)).height == 0
    # after each rank-0 OOM the launcher kills its children and reports the exit code
    kills = ev.filter(pl.col("event") == "PROCESS_KILLED")
    failed = ev.filter(pl.col("event") == "CHILD_FAILED")
    assert failed.height == len(raw_oom0) and failed["exit_code"].to_list() == [1] * len(raw_oom0)
    assert failed["local_rank"].null_count() == failed.height  # DeepSpeed prints the wrong process's cmd
    for line in raw_oom0:
        assert kills.filter((pl.col("line") > line) & (pl.col("line") < line + 60)).height == 2
    assert (kills["rank"].null_count(), set(kills["rank_source"].to_list())) == (kills.height, {"none"})
    tb0 = ev.filter((pl.col("event") == "TRACEBACK") & (pl.col("rank") == 0))
    assert tb0.height == len(raw_oom0) and all(m.startswith("torch.OutOfMemoryError") for m in tb0["message"])


def test_megatron_8node_iterations_against_raw_text():
    p = _real("megatron_8node_tp4_pp8.out")
    raw = p.read_text(errors="replace").splitlines()
    ev, _, _ = _read(p.read_bytes(), path=str(p))
    steps = ev.filter(pl.col("event") == "TRAIN_STEP").sort("line")
    raw_iter = [(i + 1, ln) for i, ln in enumerate(raw) if re.match(r"^\s*iteration\s+\d+/", ln)]
    assert steps["line"].to_list() == [i for i, _ in raw_iter]
    assert steps["step"].to_list() == list(range(10, 10 * len(raw_iter) + 1, 10))
    for line_no, ln in raw_iter[2::5]:
        row = steps.filter(pl.col("line") == line_no).row(0, named=True)
        assert row["step_time_ms"] == float(re.search(r"elapsed time per iteration \(ms\): ([\d.]+)", ln).group(1))
        assert row["lr"] == float(re.search(r"learning rate: ([\d.E+-]+)", ln).group(1))
        assert row["loss"] == float(re.search(r"lm loss: ([\d.E+-]+)", ln).group(1))
        assert row["grad_norm"] == float(re.search(r"grad norm: ([\d.]+)", ln).group(1))
    assert steps.filter(pl.col("step") == 10)["loss"][0] is None  # first report had no lm loss yet
    assert steps["step_time_ms"].min() > 1000 and steps["lr"].max() < 2e-4
    mem = ev.filter(pl.col("event") == "GPU_MEMORY")
    assert (mem["rank_source"] == "prefix").all()
    # three physical lines hold two interleaved reports each: the second rides in extra
    glued = [json.loads(x)["interleaved"] for x in mem["extra"] if "interleaved" in json.loads(x)]
    assert len(glued) == 3
    reported = set(mem["rank"].to_list()) | {g["rank"] for gs in glued for g in gs}
    assert reported == set(range(32))
    evals = ev.filter(pl.col("event") == "EVAL")
    assert evals["step"].to_list() == [100, 200] and evals["loss"].to_list() == [8.095942, 7.645013]
    cancelled = ev.filter(pl.col("event") == "JOB_CANCELLED")
    assert set(cancelled["host"].to_list()) == {"r6i5n1"} and cancelled["timestamp"].null_count() == 0


def test_megatron_deepspeed_4node_summary_and_ranks():
    p = _real("megatron_deepspeed_4node.out")
    ev, rej, n = _read(p.read_bytes(), path=str(p))
    assert ev.height + rej.height == n == p.read_bytes().count(b"\n")
    summary = ev.filter(pl.col("event") == "TRAIN_SUMMARY")
    assert summary.height == 4 and summary["samples_per_s"].to_list() == [1.088] * 4
    assert summary["epoch"].to_list() == [1.0] * 4
    ds = ev.filter(pl.col("event") == "TRAIN_STEP").row(0, named=True)
    assert (ds["rank"], ds["step"], ds["lr"]) == (0, 0, 5e-05)
    # DeepSpeed's own lines carry no rank: nobody is silently rank 0
    ds_lines = ev.filter(pl.col("message").str.contains(r"\[INFO\] \[distributed.py"))
    assert ds_lines.height == 16 and ds_lines["rank"].null_count() == 16
    assert ev.filter(pl.col("timestamp").is_not_null()).height > 100


def test_a_scripts_own_progress_line_is_a_train_step() -> None:
    """Training scripts print their own progress ("step 88 | loss 2.301 | 512.3 ms/step",
    "Step 88/1000, loss: 2.3, lr: 1e-4"): a step number with a loss is a TRAIN_STEP; a step
    number alone is not."""
    ev, _, _ = _read("\n".join([
        "[rank0]:[2024-12-18 20:17:16,002] [INFO] step 88 | loss 2.301 | 512.3 ms/step",
        "2024-12-18 20:17:17 [rank1]: Step 88/1000, loss: 2.3, lr: 1e-4",
        "[rank0]: saving checkpoint at step 90",
    ]) + "\n")
    rows = ev.select("rank", "event", "step", "loss", "lr", "step_time_ms").to_dicts()
    assert rows[0] == {"rank": 0, "event": "TRAIN_STEP", "step": 88, "loss": 2.301, "lr": None, "step_time_ms": 512.3}
    assert rows[1] == {"rank": 1, "event": "TRAIN_STEP", "step": 88, "loss": 2.3, "lr": 1e-4, "step_time_ms": None}
    assert rows[2]["event"] == "LOG"
