"""Failure facts from any text, whatever the names (issue 27, items 2 and 4).

Each test writes a small run in the formats upstream code prints (PyTorch's gloo backend,
torch elastic's agent, Megatron-LM's grad-norm check, DeepSpeed's launcher, Slurm's srun) with
event names and fields of the run's own choosing, and diagnoses it.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from forensics import failure_facts as facts
from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.store import open_store

T0 = "2025-03-04T10:00:{:02d}.{:03d}Z"


def _ts(s: float) -> str:
    return T0.format(int(s), int(round((s % 1) * 1000)))


def _step_lines(rank: int, steps: range, t0: float = 0.0) -> list[str]:
    return [json.dumps({"timestamp": _ts(t0 + 0.5 * s), "rank": rank, "level": "INFO", "event": "TRAIN_STEP",
                        "message": f"step={s} loss={2.5 - 0.01 * s:.3f}", "extra": {"step_time_ms": 500.0}})
            for s in steps]


GLOO_PEER_LOST = ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.0.3]:44631: "
                  "Connection reset by peer")
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 88, in <module>',
    "    main()",
    '  File "/work/train.py", line 61, in main',
    "    batch = collate(samples)",
    "ValueError: expected a batch of 32 sequences, got 31",
]


def _gloo_run(d: Path, *, stderr: bool, own_event: dict | None) -> None:
    """4 gloo ranks; rank 2 logs an error of its own at step 20 and dies; the others lose it."""
    d.mkdir(parents=True, exist_ok=True)
    for r in range(4):
        lines = _step_lines(r, range(21 if r != 2 else 20))
        if r == 2:
            if own_event is not None:
                lines.append(json.dumps({"timestamp": _ts(10.1), "rank": 2, **own_event}))
            if stderr:
                lines += TRACEBACK
        else:
            lines.append(json.dumps({"timestamp": _ts(12.0 + r * 0.01), "rank": r, "level": "ERROR",
                                     "event": "allreduce_failed", "message": GLOO_PEER_LOST}))
        (d / f"worker_{r}.jsonl").write_text("\n".join(lines) + "\n")


def test_text_in_a_jsonl_file_is_the_files_console_text(tmp_path: Path) -> None:
    """A traceback written into a rank's JSON-lines file (stderr redirected) is that rank's
    TRACEBACK event, not 6 rejects; lines read = events + rejects per file."""
    _gloo_run(tmp_path / "logs", stderr=True, own_event=None)
    s = ingest([str(tmp_path / "logs")], tmp_path / "st")
    assert s.lines_read == s.events + s.rejected and s.rejected == 0, s.rejected_by_reason
    ev = open_store(tmp_path / "st").events().filter(pl.col("event").str.starts_with("TRACEBACK")).collect()
    head = ev.filter(pl.col("event") == "TRACEBACK").row(0, named=True)
    assert head["rank"] == 2 and head["message"] == TRACEBACK[-1] and head["line"] == 21
    assert ev.height == len(TRACEBACK) and set(ev["rank"].to_list()) == {2}


def test_a_traceback_in_a_jsonl_file_is_the_ranks_crash(tmp_path: Path) -> None:
    _gloo_run(tmp_path / "logs", stderr=True, own_event=None)
    rep = diagnose([str(tmp_path / "logs")])
    assert rep.root_cause is not None and rep.root_cause.kind == "crash" and rep.root_cause.ranks == [2]
    f = rep.findings[0]
    assert "ValueError" in f.title and f.basis == "own_error"
    assert any(ln.where.endswith("worker_2.jsonl:21") for ln in f.lines), f.lines


@pytest.mark.parametrize("own", [
    # structlog / python-json-logger style: an event name of the run's own, the exception in a field
    {"level": "error", "event": "batch_rejected", "message": "collate failed",
     "extra": {"exc_type": "ValueError", "exc_info": "\n".join(TRACEBACK)}},
    # a top-level stack (kept in `fields`), level CRITICAL
    {"level": "CRITICAL", "event": "worker.fatal", "message": "unrecoverable",
     "stack_trace": "\n".join(TRACEBACK)},
])
def test_an_error_event_of_any_name_is_the_ranks_own_error(tmp_path: Path, own: dict) -> None:
    """Rank 2 logs an ERROR under a name nobody here knows, with its exception, and dies: its
    crash (own_error, with the exception type and message), not 'went silent first'."""
    _gloo_run(tmp_path / "logs", stderr=False, own_event=own)
    rep = diagnose([str(tmp_path / "logs")])
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.ranks, rc.basis) == ("crash", [2], "own_error"), rc
    f = rep.findings[0]
    assert "ValueError" in f.title and "32 sequences" in f.title
    assert f.evidence["exception"] == "ValueError"
    assert any(ln.where.endswith("worker_2.jsonl:21") for ln in f.lines), f.lines
    assert not any(x.kind == "hang" for x in rep.findings)


def test_an_error_the_rank_survives_is_not_a_crash(tmp_path: Path) -> None:
    """An ERROR event the rank trains on after (a skipped sample) kills nobody."""
    d = tmp_path / "logs"
    d.mkdir()
    for r in range(2):
        lines = _step_lines(r, range(10))
        if r == 1:
            lines.insert(3, json.dumps({"timestamp": _ts(1.6), "rank": 1, "level": "ERROR", "event": "sample_skipped",
                                        "message": "bad sample", "extra": {"exc_type": "UnicodeDecodeError"}}))
        (d / f"worker_{r}.jsonl").write_text("\n".join(lines) + "\n")
    rep = diagnose([str(d)])
    assert not any(f.kind == "crash" for f in rep.findings)


@pytest.mark.parametrize("text,rank", [
    ("AssertionError: Rank 11: found NaN in local grad norm in backward pass before data-parallel communication "
     "collective. Device: 3, node: node-02", 11),
    ("RuntimeError: [Rank 3] unexpected key in checkpoint", 3),
    ("RuntimeError: failed on rank 3 while loading shard", 3),
    ("error in global rank 5: CUDA kernel failed", 5),
    ("worker exited RANK=2 status=1", 2),
    ("fatal: rank=7 lost its data loader", 7),
    ("waiting on rank 3 for 1800 s", None),
    ("local rank 3: exception", None),
    ("RuntimeError: Rank 1 and Rank 2 disagree", None),
    ("ValueError: bad shape", None),
])
def test_rank_in_text(text: str, rank: int | None) -> None:
    assert facts.rank_in_text(text) == rank


MEGATRON_TB = [
    "Traceback (most recent call last):",
    '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 231, in <module>',
    "    pretrain(",
    '  File "/workspace/Megatron-LM/megatron/core/distributed/param_and_grad_buffer.py", line 114, in start_grad_sync',
    "    assert not norm.isnan(), (",
    "AssertionError: Rank 11: found NaN in local grad norm in backward pass before data-parallel communication "
    "collective. Device: 3, node: node-02",
]


def test_a_rank_named_in_the_error_text_is_the_culprit(tmp_path: Path) -> None:
    """Megatron's grad-norm check names the rank in its own text; the line carries no rank."""
    d = tmp_path / "logs"
    d.mkdir()
    lines = [f" [2025-03-04 10:00:{s:02d}] iteration       {s}/     100 | consumed samples: {s * 64} | "
             f"elapsed time per iteration (ms): 512.3 | learning rate: 1.0E-04 | global batch size:    64 | "
             f"lm loss: {7.0 - 0.05 * s:.6E} | loss scale: 1.0 | grad norm: 1.234 |" for s in range(1, 11)]
    (d / "train.out").write_text("\n".join(lines + MEGATRON_TB) + "\n")
    rep = diagnose([str(d)])
    crash = [f for f in rep.findings if f.kind == "crash"]
    assert crash and crash[0].ranks == [11] and crash[0].basis == "named_in_text", [(f.kind, f.ranks) for f in rep.findings]
    # the NaN the assertion reports is the fact the crash follows from
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.ranks, rc.basis) == ("non_finite", [11], "named_in_text"), rc
    assert rep.findings[0].explains


@pytest.mark.parametrize("code,sig", [(-9, "SIGKILL"), (-11, "SIGSEGV"), (-7, "SIGBUS"), (-6, "SIGABRT"),
                                      (137, "SIGKILL"), (139, "SIGSEGV"), (134, "SIGABRT"), (1, None), (-15, "SIGTERM")])
def test_signal_of_exit_codes(code: int, sig: str | None) -> None:
    assert facts.signal_of(code) == sig


def _torchrun_one_node(d: Path, code: int) -> Path:
    """A one-node torchrun launch (host from the folder), 8 workers tee'd as [defaultN]:, local
    rank 5 dies: torch elastic's agent line (torch/distributed/elastic/multiprocessing/api.py)."""
    d.mkdir(parents=True)
    lines = []
    for s in range(1, 6):
        for lr in range(8):
            lines.append(f"[default{lr}]:[2025-03-04 10:00:{s:02d},{lr:03d}] step {s} | loss 2.{lr} | 500.0 ms/step")
    lines.append(f"E0304 10:00:09.123000 4200 torch/distributed/elastic/multiprocessing/api.py:869] failed "
                 f"(exitcode: {code}) local_rank: 5 (pid: 4245) of binary: /usr/bin/python3")
    p = d / "torchrun.log"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("code,kind,sig", [(-9, "host_oom", "SIGKILL"), (-11, "crash", "SIGSEGV"), (-7, "crash", "SIGBUS")])
def test_one_node_launch_names_the_global_rank(tmp_path: Path, code: int, kind: str, sig: str) -> None:
    """Every worker on one host, no second node: local rank 5 is rank 5 (basis one_node); the
    finding names the signal."""
    _torchrun_one_node(tmp_path / "logs" / "node-01", code)
    rep = diagnose([str(tmp_path / "logs")])
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.ranks, rc.basis) == (kind, [5], "one_node"), (rc, [f.title for f in rep.findings])
    assert sig in rep.findings[0].title


def test_two_nodes_keep_local_rank_and_host(tmp_path: Path) -> None:
    """A second host anywhere: local rank 5 stays local rank 5 on its host."""
    _torchrun_one_node(tmp_path / "logs" / "node-01", -11)
    other = tmp_path / "logs" / "node-02"
    other.mkdir()
    (other / "torchrun.log").write_text("[default0]:[2025-03-04 10:00:01,000] step 1 | loss 2.0 | 500.0 ms/step\n")
    rep = diagnose([str(tmp_path / "logs")])
    rc = rep.root_cause
    assert rc is not None and rc.kind == "crash" and rc.ranks == [] and rc.local_ranks == [{"host": "node-01", "local_rank": 5}]
    assert "SIGSEGV" in rep.findings[0].title


def test_one_node_is_not_claimed_when_world_size_is_larger(tmp_path: Path) -> None:
    d = tmp_path / "logs" / "node-01"
    p = _torchrun_one_node(d, -11)
    p.write_text("[default0]:world_size=16 rank=0\n" + p.read_text())
    rep = diagnose([str(tmp_path / "logs")])
    assert rep.root_cause is not None and rep.root_cause.ranks == [] and rep.root_cause.basis != "one_node"


# -- non-finite values ----------------------------------------------------------------------------

def test_python_json_nan_is_a_value_not_a_reject() -> None:
    """json.dumps writes NaN / Infinity (allow_nan=True): not JSON, but a value the run logged.
    Both scanner paths read it the same (tests/test_native_scan.py's rule)."""
    import math

    from forensics.ingest.jsonl import _to_table, parse_block_py, scan_block

    buf = (json.dumps({"timestamp": _ts(1), "rank": 1, "event": "train_step", "extra": {"step": 3, "loss": float("nan"),
                                                                                        "val_ppl": float("inf")}})
           + "\n" + json.dumps({"timestamp": _ts(2), "rank": 1, "step": 4, "loss": float("-inf")}) + "\n").encode()
    b = scan_block(buf, 1, True, None, None)
    assert b.rejects.height == 0 and b.events.num_rows == 2
    loss = b.events["loss"].to_pylist()
    assert math.isnan(loss[0]) and loss[1] == float("-inf")
    ref = _to_table(parse_block_py(buf, 1, True, None, None).events)
    assert [str(x) for x in ref["loss"].to_pylist()] == [str(x) for x in loss]
    assert ref["extra"].to_pylist() == b.events["extra"].to_pylist()


def _nan_run(d: Path, *, nan_rank: int | None, transient: bool = False) -> None:
    """4 ranks, loss falling; from step 30 rank `nan_rank`'s local grad norm is NaN and the
    all-reduced loss is NaN on every rank after it (json.dumps writes NaN)."""
    d.mkdir(parents=True)
    for r in range(4):
        lines = []
        for s in range(60):
            loss = 3.0 - 0.02 * s
            gn = 1.0
            if nan_rank is not None and s >= 30:
                if transient:
                    gn = float("inf") if (r == nan_rank and s == 30) else 1.0
                else:
                    gn = float("nan") if (r == nan_rank or s > 30) else 1.0
                    loss = float("nan") if s > 30 else loss
            lines.append(json.dumps({"timestamp": _ts(s * 0.5 + r * 0.01), "rank": r, "level": "INFO",
                                     "event": "optimizer.step", "extra": {"step": s, "loss": loss, "grad_norm": gn}}))
            if transient and r == nan_rank and s == 30:
                lines.append(json.dumps({"timestamp": _ts(s * 0.5 + 0.2), "rank": r, "level": "INFO", "event": "LOG",
                                         "message": "[deepspeed] OVERFLOW! Rank 2 Skipping step. Attempted loss scale: "
                                                    "65536, reducing to 32768"}))
        (d / f"rank_{r}.jsonl").write_text("\n".join(lines) + "\n")


def test_the_first_non_finite_value_names_its_rank_and_step(tmp_path: Path) -> None:
    _nan_run(tmp_path / "logs", nan_rank=2)
    rep = diagnose([str(tmp_path / "logs")])
    nf = [f for f in rep.findings if f.kind == "non_finite"]
    assert nf and nf[0].ranks == [2] and nf[0].evidence["step"] == 30 and nf[0].evidence["field"] == "grad_norm"
    assert nf[0].basis == "own_error" and any(ln.where.endswith("rank_2.jsonl:31") for ln in nf[0].lines)
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("non_finite", [2]), [(f.kind, f.ranks) for f in rep.findings]
    div = [i for i, f in enumerate(rep.findings) if f.kind == "loss_divergence"]
    assert div and div[0] in rep.findings[0].explains


def test_a_loss_scaling_skip_is_not_a_non_finite_fact(tmp_path: Path) -> None:
    """fp16 dynamic loss scaling: one Inf grad norm, DeepSpeed's OVERFLOW line, then finite again."""
    _nan_run(tmp_path / "logs", nan_rank=2, transient=True)
    rep = diagnose([str(tmp_path / "logs")])
    assert not any(f.kind == "non_finite" for f in rep.findings), [f.title for f in rep.findings]


def test_healthy_run_has_no_non_finite(tmp_path: Path) -> None:
    _nan_run(tmp_path / "logs", nan_rank=None)
    rep = diagnose([str(tmp_path / "logs")])
    assert not any(f.kind == "non_finite" for f in rep.findings)


DS_LAUNCH = [
    "[2025-03-04 10:00:00,000] [INFO] [launch.py:152:main] nnodes=1, num_local_procs=4, node_rank=0",
    "[2025-03-04 10:00:00,003] [INFO] [launch.py:164:main] dist_world_size=4",
    "[2025-03-04 10:00:01,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=1, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]",
    "[2025-03-04 10:00:02,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=2, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]",
    *(f"[2025-03-04 10:00:05,00{i}] [INFO] [launch.py:315:sigkill_handler] Killing subprocess {4242 + i}" for i in range(4)),
]


@pytest.mark.parametrize("code,kind,sig", [(-11, "crash", "SIGSEGV"), (-7, "crash", "SIGBUS"), (-9, "host_oom", "SIGKILL")])
def test_deepspeed_launcher_exit_is_a_workers_death(tmp_path: Path, code: int, kind: str, sig: str) -> None:
    """DeepSpeed's sigkill_handler: it kills the other workers, then reports the failed one's code
    (deepspeed/launcher/launch.py). Its line quotes the last spawned command, so no rank is named —
    but the run is not healthy, and the finding names the signal."""
    d = tmp_path / "logs"
    d.mkdir()
    (d / "ds.log").write_text("\n".join([*DS_LAUNCH, "[2025-03-04 10:00:05,100] [ERROR] [launch.py:321:sigkill_handler] "
                                         "['/usr/bin/python3', '-u', 'train.py', '--local_rank=3'] exits with return "
                                         f"code = {code}"]) + "\n")
    rep = diagnose([str(d)])
    rc = rep.root_cause
    assert rc is not None and rc.kind == kind and rc.ranks == [], [(f.kind, f.title) for f in rep.findings]
    assert sig in rep.findings[0].title or sig == "SIGKILL"


def test_srun_exit_code_128_plus_n_is_named(tmp_path: Path) -> None:
    """srun reports a task killed by a signal as the shell does: 128+N (139 = SIGSEGV)."""
    d = tmp_path / "logs"
    d.mkdir()
    (d / "slurm-4711.out").write_text("srun: error: gpu-node-3: task 5: Exited with exit code 139\n")
    rep = diagnose([str(d)])
    assert rep.root_cause is not None and rep.root_cause.kind == "crash"
    assert "SIGSEGV" in rep.findings[0].title and "139" in rep.findings[0].title


def _schema_run(d: Path, record) -> None:
    """4 ranks; rank 3 runs out of GPU memory at step 30, the others time out at step 31; each
    line written by `record(rank, t, level, kind, text, step)` in some logging library's schema."""
    d.mkdir(parents=True)
    oom = ("CUDA out of memory. Tried to allocate 2.25 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.06 GiB "
           "is free. Including non-PyTorch memory, this process has 78.08 GiB memory in use.")
    for r in range(4):
        lines = [record(r, 1749736800.0 + s + r * 0.01, "info", "train_step", f"finished step {s}", s)
                 for s in range(30 + (r != 3))]
        if r == 3:
            lines.append(record(r, 1749736831.0, "error", "out_of_memory", oom, 30))
        else:
            lines.append(record(r, 1749738641.0 + r * 0.05, "error", "collective_timeout",
                                f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=31, "
                                "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for "
                                "1800083 milliseconds before timing out.", 31))
        (d / f"rank_{r}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


@pytest.mark.parametrize("record", [
    # structlog's JSONRenderer: the message is `event`
    lambda r, t, lvl, kind, text, s: {"timestamp": t, "level": lvl, "event": text, "kind": kind, "rank": r, "step": s},
    # a hand-written schema: `severity`, `type`, the text under `text`
    lambda r, t, lvl, kind, text, s: {"time_ms": int(t * 1000), "rank": r, "severity": lvl.upper(), "type": kind,
                                      "text": text, "step": s},
], ids=["structlog", "text_key"])
def test_failures_are_read_from_the_text_whatever_its_key(tmp_path: Path, record) -> None:
    """The OOM and the timeouts are recognised by their text when it is not under `message`: rank
    3's OOM is the cause, not 'healthy' and not a crash of a rank that timed out."""
    _schema_run(tmp_path / "logs", record)
    rep = diagnose([str(tmp_path / "logs")])
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("oom", [3]), [(f.kind, f.ranks, f.title) for f in rep.findings]
    assert not any(f.kind == "crash" for f in rep.findings)


def test_hf_trainer_printed_dicts_are_read_and_a_nan_loss_is_a_fact(tmp_path: Path) -> None:
    """HF Trainer prints `{'loss': 1.99, 'grad_norm': 1.2, 'learning_rate': 1e-05, 'epoch': 0.03}`
    (a Python dict, not JSON; `nan` when the loss is NaN). A file of them starts with `{`, so it
    is read as JSON lines: each line is console text for the console reader, not a reject."""
    d = tmp_path / "logs"
    d.mkdir()
    lines = [f"{{'loss': {2.0 - 0.01 * s:.4f}, 'grad_norm': 1.2, 'learning_rate': 1e-05, 'epoch': {s / 40:.3f}}}"
             for s in range(1, 30)]
    lines += [f"{{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': {s / 40:.3f}}}" for s in range(30, 40)]
    (d / "train.log").write_text("\n".join(lines) + "\n")
    s = ingest([str(d)], tmp_path / "st")
    assert (s.events, s.rejected) == (39, 0), s.rejected_by_reason
    rep = diagnose([str(d)])
    assert rep.root_cause is not None and rep.root_cause.kind == "non_finite"
    assert "loss is NaN" in rep.findings[0].title and rep.findings[0].lines[0].line == 30


def test_an_oom_event_and_its_stderr_traceback_are_one_oom() -> None:
    """sample_logs/oom_cascade: rank 3's CUDA_OOM event, then the traceback its stderr wrote into
    the same file (now read as events too): one OOM, not "2 times"."""
    rep = diagnose([str(Path(__file__).resolve().parents[1] / "sample_logs" / "oom_cascade")])
    oom = rep.findings[0]
    assert (oom.kind, oom.ranks, oom.evidence["occurrences"]) == ("oom", [3], 1) and "times" not in oom.title


def test_a_last_error_line_as_every_rank_ends_is_not_a_crash(tmp_path: Path) -> None:
    """Rank 1's last line is an ERROR of its own (an upload that failed) while every rank ends
    its run together: not a death — nothing went on without it, no peer failed after it."""
    d = tmp_path / "logs"
    d.mkdir()
    for r in range(4):
        lines = _step_lines(r, range(20))
        if r == 1:
            lines.append(json.dumps({"timestamp": _ts(9.6), "rank": 1, "level": "ERROR", "event": "metrics.upload",
                                     "message": "could not reach the tracking server",
                                     "extra": {"exc_type": "ConnectionError"}}))
        (d / f"worker_{r}.jsonl").write_text("\n".join(lines) + "\n")
    rep = diagnose([str(d)])
    assert not any(f.kind == "crash" for f in rep.findings), [f.title for f in rep.findings]


def test_a_one_node_hang_known_by_local_ranks_is_still_found(tmp_path: Path) -> None:
    """One node, torchrun --tee lines (local ranks only), local rank 1 stops, the others time out
    in gloo: the hang is still named (by local rank and host), not lost by the one-node mapping."""
    d = tmp_path / "logs" / "node-01"
    d.mkdir(parents=True)
    lines = []
    for step in range(1, 7):
        for lr in range(4):
            if lr == 1 and step > 4:
                continue
            lines.append(f"[default{lr}]:[2024-11-20 14:37:{step * 4 + lr:02d},000] step {step} | loss 2.{step}{lr} | 500.0 ms/step")
    for lr in (0, 2, 3):
        lines += [f"[default{lr}]:Traceback (most recent call last):",
                  f'[default{lr}]:  File "/srv/train.py", line 88, in <module>',
                  f"[default{lr}]:RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                  "Timed out waiting 60000ms for recv operation to complete"]
    (d / "torchrun.log").write_text("\n".join(lines) + "\n")
    rc = diagnose([str(tmp_path / "logs")]).root_cause
    assert rc is not None and rc.kind == "hang" and rc.local_ranks == [{"host": "node-01", "local_rank": 1}], rc


def test_a_launcher_exit_cites_the_untagged_traceback_before_it(tmp_path: Path) -> None:
    """Workers' stderr without a [rankN]: prefix, then torch elastic's agent line: the traceback is
    the worker's the agent saw fail (the only failed worker, the only unranked error before its
    record, exit 1 of an uncaught exception: records.join_unowned), instead of "its error is not in
    these logs"; the rank stays the local rank the record gives."""
    d = tmp_path / "logs"
    d.mkdir()
    (d / "torchrun.log").write_text("\n".join([
        "[2024-12-18 10:12:20,000] [INFO] [train.py:88] step 10 | loss 2.301 | 500.0 ms/step",
        "Traceback (most recent call last):", '  File "/work/train.py", line 30, in <module>', "    fused_op(x)",
        "RuntimeError: expected scalar type Float but found Half",
        "E1218 10:12:31.000000 4200 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 3 (pid: 5678) of binary: /usr/bin/python3"]) + "\n")
    rep = diagnose([str(d)])
    f = rep.findings[0]
    assert f.kind == "crash" and f.local_ranks == [{"host": None, "local_rank": 3}]
    assert "crashed with a Python exception: RuntimeError: expected scalar type Float" in f.title
    assert f.evidence["launcher_record"]["local_rank"] == 3
    assert any(ln.line == 2 for ln in f.lines) and any(ln.line == 6 for ln in f.lines)


def test_a_nan_telemetry_reading_is_not_a_non_finite_fact(tmp_path: Path) -> None:
    """A GPU whose power sensor reads NaN throughout (an exporter that cannot read it): not a
    number the training computed."""
    d = tmp_path / "logs"
    d.mkdir()
    for r in range(2):
        lines = _step_lines(r, range(20))
        lines += [json.dumps({"timestamp": _ts(s * 0.5 + 0.1), "rank": r, "level": "INFO", "event": "GPU_STATS",
                              "extra": {"gpu_util": 97.0, "power_w": float("nan"), "temp_c": 61.0}}) for s in range(20)]
        (d / f"rank_{r}.jsonl").write_text("\n".join(lines) + "\n")
    rep = diagnose([str(d)])
    assert not any(f.kind == "non_finite" for f in rep.findings), [f.title for f in rep.findings]
