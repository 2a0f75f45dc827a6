"""An ingest that reads two runs says so (forensics/ingest/runs.py): never merged silently.

The case that made it: two runs of the same 8 ranks (a baseline and a copy with rank 5 slowed),
`ingest base8/logs slow8/logs`, were merged; the diagnosis cited base8's line for slow8's value.
A restart is one run: it resumes in the same folder, or in torchelastic's attempt_<N> folders.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import subprocess
import sys

import pytest

from forensics.errors import ForensicsError
from forensics.ingest import ingest
from forensics.store import open_store

from slowdown import inject_slowdown
from synthetic_run import write_run


def _shift(src: Path, dst: Path, *, hours: float = 0.0, ms: float = 0.0, host: str | None = None,
           steps: range | None = None) -> None:
    """Copy the run's JSON lines to dst, times moved, host renamed, only `steps` kept."""
    for f in src.rglob("*.jsonl"):
        out = []
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            step = (rec.get("extra") or {}).get("step")
            if steps is not None and step is not None and step not in steps:
                continue
            t = dt.datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00"))
            t += dt.timedelta(hours=hours, milliseconds=ms)
            rec["timestamp"] = t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
            if host:
                rec["host"] = host
            out.append(json.dumps(rec))
        target = dst / (f.parent.name if host is None else host) / f.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(out) + "\n")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    base = write_run(root / "base8", hot=None, hostile=False, steps=80)
    inject_slowdown(base, root / "slow8" / "logs", rank=5, pct=0.5, from_step=30)
    return root


def test_two_runs_of_the_same_ranks_are_refused_naming_both_folders(two_runs: Path, tmp_path: Path) -> None:
    with pytest.raises(ForensicsError) as e:
        ingest([str(two_runs / "base8" / "logs"), str(two_runs / "slow8" / "logs")], tmp_path / "mixed")
    err = e.value
    assert err.code == "F212"
    text = str(err.where) + err.reason
    assert "base8/logs" in text and "slow8/logs" in text
    assert "forensics ingest" in err.help and "base8" in err.help and "slow8" in err.help
    assert not (tmp_path / "mixed").exists()


def test_the_cli_refuses_the_mixed_ingest_and_each_run_ingests_on_its_own(two_runs: Path, tmp_path: Path) -> None:
    r = cli("ingest", "base8/logs", "slow8/logs", "-o", str(tmp_path / "mixed"), cwd=two_runs)
    assert r.returncode == 1, r.stderr
    assert "error[F212]: these logs hold two runs" in r.stderr and "Traceback" not in r.stderr
    assert "base8/logs/node-a and slow8/logs/node-a" in r.stderr
    for name in ("base8", "slow8"):   # what the help says to run
        assert f"forensics ingest {name} -o {name}.forensics" in " ".join(r.stderr.split())
        ok = cli("ingest", name, "-o", f"{name}.forensics", cwd=two_runs)
        assert ok.returncode == 0, ok.stderr
    same = cli("diagnose", "base8/logs", "slow8/logs", cwd=two_runs)   # raw paths: the same refusal
    assert same.returncode == 1 and "two runs" in same.stderr


def test_a_restart_in_the_same_folder_is_one_run(tmp_path: Path) -> None:
    """The job dies at step 59 and resumes from the step-40 checkpoint an hour later, its ranks
    writing new files beside the old ones: steps 40-59 are logged twice, at different times."""
    first = write_run(tmp_path / "a", hot=None, hostile=False, steps=60, ranks=4, hosts=1)
    logs = tmp_path / "job" / "logs"
    shutil.copytree(first, logs)
    again = tmp_path / "b"
    write_run(again, hot=None, hostile=False, steps=40, first_step=40, ranks=4, hosts=1)
    for f in (again / "logs").rglob("rank_*.jsonl"):
        lines = [json.loads(x) for x in f.read_text().splitlines()]
        for rec in lines:
            t = dt.datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")) + dt.timedelta(hours=1)
            rec["timestamp"] = t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
        (logs / f.parent.name / f.name.replace(".jsonl", ".restart1.jsonl")).write_text(
            "\n".join(json.dumps(x) for x in lines) + "\n")
    s = ingest([str(logs)], tmp_path / "store")
    assert s.ranks == [0, 1, 2, 3]


def test_torchelastic_attempt_folders_are_one_run(tmp_path: Path) -> None:
    src = write_run(tmp_path / "src", hot=None, hostile=False, steps=60, ranks=4, hosts=1)
    run = tmp_path / "run-1234"
    _shift(src, run / "attempt_0", steps=range(0, 50))
    _shift(src, run / "attempt_1", hours=1, steps=range(40, 60))
    ingest([str(run)], tmp_path / "store")


def test_a_local_rank_logged_as_global_on_two_hosts_is_one_run(tmp_path: Path) -> None:
    """Each node's processes log their local rank as `rank`: node-a and node-b both log ranks
    0-3, the same steps at nearly the same instants -- one run with a logging fault, not two."""
    src = write_run(tmp_path / "src", hot=None, hostile=False, steps=40, ranks=4, hosts=1)
    logs = tmp_path / "logs"
    _shift(src, logs, host="node-a")
    _shift(src, logs, ms=3, host="node-b")
    ingest([str(logs)], tmp_path / "store")
    assert open_store(tmp_path / "store")


def test_local_ranks_logged_as_global_without_host_names_are_one_run(tmp_path: Path) -> None:
    """As above, in per-node folders and with no host field: the same rank numbers at the same
    steps a few ms apart (one synchronous run), not two runs."""
    src = write_run(tmp_path / "src", hot=None, hostile=False, steps=40, ranks=4, hosts=1)
    logs = tmp_path / "logs"
    for name, shift in (("node-a", 0), ("node-b", 3)):
        _shift(src, logs / name, ms=shift)
    for f in logs.rglob("*.jsonl"):
        f.write_text("\n".join(json.dumps({k: v for k, v in json.loads(x).items() if k != "host"})
                               for x in f.read_text().splitlines()) + "\n")
    ingest([str(logs)], tmp_path / "store")


def test_the_same_ranks_a_day_later_on_other_hosts_are_two_runs(tmp_path: Path) -> None:
    src = write_run(tmp_path / "src", hot=None, hostile=False, steps=40, ranks=4, hosts=1)
    _shift(src, tmp_path / "monday", host="node-a")
    _shift(src, tmp_path / "tuesday", hours=24, host="node-q")
    with pytest.raises(ForensicsError, match="two runs") as e:
        ingest([str(tmp_path / "monday"), str(tmp_path / "tuesday")], tmp_path / "store")
    assert "monday" in e.value.help and "tuesday" in e.value.help
