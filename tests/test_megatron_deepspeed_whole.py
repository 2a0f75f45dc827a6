"""Megatron and DeepSpeed runs read whole: steps from the iteration lines, ranks from every
per-rank report (two on one line too) and from the launcher's rank list, and the world size the
log states held against the ranks found (passes/world_size.py).

Measured before: `timeline` of the real 8-node Megatron log said "no steps: no event carries a
step number"; 29 of its 32 ranks were found (two ranks' memory reports share a line three times)
and nothing said the log printed `world size: 32`; the 2-rank DeepSpeed log whose launcher
printed `{'localhost': [0, 1]}` reported 1 rank.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.store import open_store

from megatron_log import write_megatron

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "console"


def _world(report) -> list:
    return [f for f in report.findings if f.rule == "pass.world_size"]


def test_two_memory_reports_on_one_line_are_two_ranks_and_the_counts_add_up(tmp_path: Path) -> None:
    log = write_megatron(tmp_path / "m.out", glue=(3, 5))
    s = ingest([str(log)], tmp_path / "st")
    assert s.ranks == list(range(8))
    assert s.lines_read == log.read_bytes().count(b"\n") == s.events + s.rejected
    assert not _world(diagnose(open_store(tmp_path / "st")))


def test_ranks_the_stated_world_size_counts_and_no_line_shows_are_a_hygiene_finding(tmp_path: Path) -> None:
    log = write_megatron(tmp_path / "m.out", reporters=[0, 1, 2, 4, 6, 7])
    ingest([str(log)], tmp_path / "st")
    (f,) = _world(diagnose(open_store(tmp_path / "st")))
    assert f.kind == "log_hygiene" and f.severity == "WARN" and f.ranks == []
    assert f.evidence["missing"] == [3, 5] and f.evidence["world_size"] == 8
    assert "world size 8" in f.title and "ranks 3,5" in f.title and "log_hygiene" in f.title
    assert f.lines[0].line == 1 and "using world size: 8" in f.lines[0].text


def test_with_data_parallelism_only_data_parallel_rank_0_is_expected(tmp_path: Path) -> None:
    # world 8 = tp 2 x dp 2 x pp 2: report_memory prints on dp rank 0 only -- ranks 0,1 and 4,5
    ok = write_megatron(tmp_path / "ok.out", world=8, tp=2, pp=2, dp=2)
    ingest([str(ok)], tmp_path / "ok")
    assert not _world(diagnose(open_store(tmp_path / "ok")))
    gap = write_megatron(tmp_path / "gap.out", world=8, tp=2, pp=2, dp=2, reporters=[0, 1, 5])
    ingest([str(gap)], tmp_path / "gap")
    (f,) = _world(diagnose(open_store(tmp_path / "gap")))
    assert f.evidence["missing"] == [4] and f.evidence["expected"] == 4


def test_the_deepspeed_launchers_rank_list_counts_as_ranks(tmp_path: Path) -> None:
    # deepspeed/launcher/launch.py main(): the world info, the mapping, the world size
    log = tmp_path / "ds.log"
    log.write_text(
        "[2026-11-30 10:00:00,000] [INFO] [launch.py:146:main] WORLD INFO DICT: {'localhost': [0, 1]}\n"
        "[2026-11-30 10:00:00,000] [INFO] [launch.py:163:main] global_rank_mapping=defaultdict(<class 'list'>, "
        "{'localhost': [0, 1]})\n"
        "[2026-11-30 10:00:00,000] [INFO] [launch.py:164:main] dist_world_size=2\n"
        "[2026-11-30 10:00:05,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]\n")
    s = ingest([str(log)], tmp_path / "st")
    assert s.ranks == [0, 1]


def test_timeline_of_a_megatron_log_shows_the_iteration_lines(tmp_path: Path) -> None:
    log = write_megatron(tmp_path / "m.out", iters=300)
    r = subprocess.run([sys.executable, "-m", "forensics", "timeline", str(log)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "no steps" not in r.stdout
    assert "steps 110-300 (the run logged steps 10-300)" in r.stdout    # the last 20 logged
    assert "m.out:" in r.stdout
    csv = subprocess.run([sys.executable, "-m", "forensics", "timeline", str(log), "--steps", "50:70", "--format", "csv"],
                         capture_output=True, text=True).stdout.splitlines()
    assert csv[0].startswith("step,step_time_ms") and [x.split(",")[0] for x in csv[1:]] == ["50", "60", "70"]


@pytest.mark.skipif(not REAL.is_dir(), reason="realdata absent")
def test_the_real_logs_read_whole(tmp_path: Path) -> None:
    s = ingest([str(REAL / "megatron_8node_tp4_pp8.out")], tmp_path / "meg")
    assert s.ranks == list(range(32))                      # 29 before: 3 lines hold two reports
    assert not _world(diagnose(open_store(tmp_path / "meg")))
    ds = ingest([str(REAL / "deepspeed_2rank_oom.log")], tmp_path / "ds")
    assert ds.ranks == [0, 1]                              # 1 before
    r = subprocess.run([sys.executable, "-m", "forensics", "timeline", str(tmp_path / "meg")], capture_output=True, text=True)
    assert "steps 10-200" in r.stdout and "no steps" not in r.stdout
