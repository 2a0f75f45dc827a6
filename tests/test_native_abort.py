"""A worker aborted by an uncaught C++ exception (SIGABRT): the launcher's record names its rank,
the unprefixed "terminate called after throwing ..." / "what(): ..." lines before it say why.
The launcher's own ChildFailedError traceback is its teardown, never the worker's error. Lines
written here in the formats of libstdc++'s verbose terminate handler and torch elastic's
failure table (multiprocessing/errors/__init__.py _FAILURE_FORMAT_TEMPLATE)."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from forensics.passes import diagnose

T0 = dt.datetime(2026, 4, 2, 9, 0, 0, tzinfo=dt.timezone.utc)


def _failure(idx: int, rank: int, code: int, sig: str) -> list[str]:
    return [f"[{idx}]:", "  time      : 2026-04-02_09:00:09", "  host      : node-a",
            f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : {code} (pid: {5100 + rank})  ({sig})",
            "  error_file: <N/A>", f"  traceback : Signal {-code} ({sig}) received by PID {5100 + rank}"]


def _lost_peer(rank: int) -> list[str]:
    # gloo's transport error on a peer of the dead rank, as torchrun prefixes a worker's stderr
    return [f"[rank{rank}]: Traceback (most recent call last):",
            f'[rank{rank}]:   File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce',
            f"[rank{rank}]:     work.wait()",
            f"[rank{rank}]: RuntimeError: [/build/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:19341. This is typically caused by a remote worker crashing."]


def test_an_abort_is_explained_by_the_uncaught_exception_printed_before_it(tmp_path: Path) -> None:
    for r in range(3):
        lines = [json.dumps({"timestamp": (T0 + dt.timedelta(seconds=1 + s * 0.2)).isoformat(), "rank": r, "level": "INFO",
                             "event": "TRAIN_STEP", "message": f"step {s}", "extra": {"step": s, "loss": 2.0}})
                 for s in range(5 + (r != 1))]
        (tmp_path / f"rank_{r}.jsonl").write_text("\n".join(lines) + "\n")
    con = ["terminate called after throwing an instance of 'gloo::EnforceNotMet'",
           "  what():  [enforce fail at /build/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= "
           "op.nbytes. 668 vs 336. Received data size doesn't match expected size.",
           "Traceback (most recent call last):",
           '  File "/usr/lib/python3/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent',
           "    raise ChildFailedError(",
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "=" * 40, "train.py FAILED", "-" * 40, "Failures:"]
    con += _failure(1, 0, -15, "SIGTERM") + _failure(2, 2, -15, "SIGTERM")
    con += ["-" * 40, "Root Cause (first observed failure):"] + _failure(0, 1, -6, "SIGABRT") + ["=" * 40]
    (tmp_path / "console.log").write_text("\n".join(con) + "\n")
    rc = diagnose([str(tmp_path)]).root_cause
    assert rc is not None and rc.kind == "crash" and rc.ranks == [1] and "SIGABRT" in rc.summary
    assert "gloo::EnforceNotMet" in rc.summary and "doesn't match expected size" in rc.summary
    assert "…/pair.cc:456" in rc.summary and "ChildFailedError" not in rc.summary
    # its peers' lost connections, printed before the launcher's record of the abort, are its
    # consequence: an abort after a lost peer is no watchdog's teardown of a hang
    text = (tmp_path / "console.log").read_text().splitlines()
    (tmp_path / "console.log").write_text("\n".join(text[:2] + _lost_peer(2) + _lost_peer(0) + text[2:]) + "\n")
    rc = diagnose([str(tmp_path)]).root_cause
    assert rc is not None and rc.kind == "crash" and rc.ranks == [1] and "SIGABRT" in rc.summary
