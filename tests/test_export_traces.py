"""`export perfetto` of a store holding only profiler traces (issue 28 item 7): the GPU
activities are exported, never "nothing to export"."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.ingest import ingest

DLRM = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "kineto" / "dlrm_8rank"


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared realdata absent")
def test_a_store_of_profiler_traces_exports_its_gpu_activities(tmp_path: Path) -> None:
    ingest([str(DLRM)], tmp_path / "st")
    out = tmp_path / "t.json"
    r = CliRunner().invoke(app, ["export", "perfetto", str(tmp_path / "st"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    evs = json.loads(out.read_text())["traceEvents"]
    xs = [e for e in evs if e["ph"] == "X"]
    stats = CliRunner().invoke(app, ["trace-stats", str(tmp_path / "st"), "--format", "json"])
    total = sum(t["gpu_activities"] for t in json.loads(stats.stdout)["traces"])
    assert len(xs) == total == 2244 and "2,244 GPU activities of profiler traces" in r.output
    names = {e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert {f"rank {r} GPU (profiler trace)" for r in range(8)} <= names
    assert all(e["dur"] >= 0 and e["args"]["where"].startswith(str(DLRM.resolve())) for e in xs)
    # one rank's activities sit within a few tens of ms of each other (one DLRM step)
    r0 = [e["ts"] for e in xs if e["pid"] == xs[0]["pid"]]
    assert max(r0) - min(r0) < 100_000
