"""The terminal at 80 and 200 columns and in a pipe (issue 28 item 7): paths whole, messages
readable, no padding when piped, no plural or None leaks, no "first to go silent" on a clean end."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_logs"
OOM_LOG = REPO.parent / "shared" / "realdata" / "console" / "deepspeed_2rank_oom.log"
LONG = ("CUDA out of memory. Tried to allocate 12.00 MiB. GPU 0 has a total capacity of 44.40 GiB of which "
        "12.88 MiB is free. Process 1605762 has 19.88 GiB memory in use. Of the allocated memory 15.45 GiB is "
        "allocated by PyTorch")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))


def run(*args: str, columns: int | None = None) -> str:
    env = {"COLUMNS": str(columns)} if columns else {}
    r = CliRunner().invoke(app, list(args), env=env)
    assert r.exit_code == 0, (args, r.output)
    return r.stdout


def _logs(tmp_path: Path) -> Path:
    d = tmp_path / "a_rather_long_run_folder_name_2025_06_12"
    d.mkdir()
    lines = [{"timestamp": f"2025-06-12T14:00:0{i}Z", "rank": 0, "event": "TRAIN_STEP", "step": i, "level": "INFO",
              "message": f"step {i}"} for i in range(3)]
    lines.append({"timestamp": "2025-06-12T14:00:04Z", "rank": 0, "event": "CUDA_OOM", "level": "ERROR", "message": LONG})
    (d / "rank_0_of_a_job_with_long_file_names.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


@pytest.mark.parametrize("columns", [80, 200])
def test_events_keep_paths_whole_and_messages_readable(tmp_path: Path, columns: int) -> None:
    out = run("events", str(_logs(tmp_path)), "--level", "ERROR", columns=columns)
    where = "a_rather_long_run_folder_name_2025_06_12/rank_0_of_a_job_with_long_file_names.jsonl:4"
    assert where in out                                        # on one line: it can be copied
    flat = " ".join(ln.strip(" │") for ln in out.splitlines())
    assert "Tried to allocate 12.00 MiB" in " ".join(flat.split())
    # the message lines are at least 28 characters wide (in its column or under its row), never ~10
    msg_lines = [ln for ln in out.splitlines() if "allocate" in ln or "Process" in ln]
    assert msg_lines and all(len(ln.split("│")[-2 if ln.count("│") > 1 else -1].strip()) >= 20 for ln in msg_lines)
    assert len(out.splitlines()) <= 12                         # was ~20 rows of ~10 characters at 80 columns


def test_piped_tables_are_not_padded() -> None:
    for cmd in (["ranks"], ["lint"], ["events", "--rank", "1", "-n", "20"], ["last-10s"]):
        out = run(*cmd, str(SAMPLES / "straggler"))
        padded = [ln for ln in out.splitlines() if ln != ln.rstrip()]
        assert padded == [], (cmd, padded[:2])


def test_ranks_names_the_first_to_go_silent_only_when_one_did() -> None:
    assert "first to go silent" not in run("ranks", str(SAMPLES / "healthy"))
    assert "first to go silent: rank 2, 30m01s before" in run("ranks", str(SAMPLES / "hang"))
    assert "first to go silent: rank 3" in run("ranks", str(SAMPLES / "oom_cascade"))


def test_time_going_backwards_has_no_none_rank_and_counts_in_words() -> None:
    if not OOM_LOG.exists():
        pytest.skip("../shared/realdata not present")
    out = run("ranks", str(OOM_LOG))
    assert "(rank None)" not in out and "time(s)" not in out
    assert "time goes backwards 3 times in " in out


@pytest.mark.parametrize("width", [80, 200])
def test_diagnose_never_breaks_an_evidence_path(tmp_path: Path, width: int) -> None:
    """A cited file:line too long for the evidence column used to be folded mid-name."""
    import shutil

    logs = tmp_path / ("a_very_long_directory_name_for_the_training_run_of_2025_06_12" * (1 if width == 80 else 3))
    shutil.copytree(SAMPLES / "oom_cascade", logs)
    out = run("diagnose", str(logs), "--width", str(width))
    cited = [ln for ln in out.splitlines() if "rank_3.jsonl:129" in ln]
    assert cited and all(f"{logs.name}/rank_3.jsonl:129" in ln for ln in cited)
    assert not [ln for ln in out.splitlines() if ln.strip().startswith("/rank_")]


@pytest.mark.parametrize("columns", [80, 200])
def test_trace_stats_keeps_host_wait_leaves_out_zero_columns_and_says_waits_are_summed(columns: int) -> None:
    dlrm = REPO.parent / "shared" / "realdata" / "kineto" / "dlrm_8rank"
    if not dlrm.is_dir():
        pytest.skip("../shared/realdata not present")
    out = run("trace-stats", str(dlrm), columns=columns)
    table = out[:out.index("━")]
    assert "host" in table and "other" not in table          # host wait (22.2 ms on rank 0) kept; other wait 0 everywhere
    assert "0 on every row, not shown: other wait ms" in out
    assert "summed over a rank's CUDA streams" in out and "can exceed the span" in out


def test_counts_agree_with_their_nouns(tmp_path: Path) -> None:
    """'1 ranks' in the healthy verdict of a one-rank run and in export's summary."""
    logs = tmp_path / "one"
    logs.mkdir()
    (logs / "rank_0.jsonl").write_text("".join(
        json.dumps({"timestamp": f"2025-06-12T14:00:0{i}Z", "rank": 0, "event": "TRAIN_STEP", "step": i, "level": "INFO",
                    "step_time_ms": 1000.0, "message": f"step {i}"}) + "\n" for i in range(5)))
    out = run("diagnose", str(logs))
    assert "nothing wrong found in 1 rank and 5 events" in out and "1 ranks" not in out
    r = CliRunner().invoke(app, ["export", "perfetto", str(logs), "-o", str(tmp_path / "t.json")])
    assert r.exit_code == 0 and "1 rank on 1 host track," in r.output and "(s)" not in r.output


def test_a_line_without_a_time_of_its_own_is_not_used_to_measure_an_interval() -> None:
    """An OOM traceback without a timestamp is placed after its file's last timed line (…:52.000001):
    "explained by rank 0 CUDA OOM 3.8 s earlier" measured from that placement was made up."""
    from forensics.report.model import Finding
    from forensics.report.outline import compress

    oom = Finding("pass.failures", "oom", "resource", "ERROR", [0], "rank 0 ran out of GPU memory",
                  evidence={"time_of_its_own": False}, first_seen="2025-12-23T12:36:52.000001+00:00")
    timed = Finding("pass.failures", "oom", "resource", "ERROR", [0], "rank 0 ran out of GPU memory",
                    first_seen="2025-12-23T12:36:52.000001+00:00")
    to = Finding("pass.failures", "nccl_timeout", "communication", "ERROR", [1], "rank 1 timed out",
                 first_seen="2025-12-23T12:36:55.800000+00:00")
    assert "3.8 s earlier" in compress(to, timed)
    line = compress(to, oom)
    assert "earlier" not in line and "no time of its own" in line
