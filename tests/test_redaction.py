"""Secrets never leave in a report: every renderer masks them by default, --no-redact turns it off,
--redact-pattern adds site-specific patterns."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.report import render
from forensics.report.model import Evidence, Finding, Report, RootCause, RunInfo
from forensics.report import redact

SECRETS = [
    "sk-abcdefghijklmnopqrstuvwx0123456789",
    "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH12",
    "AKIAABCDEFGHIJKLMNOP",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789AB",
]


def report_with_secrets() -> Report:
    texts = [
        f"WANDB_API_KEY={SECRETS[0]} failed to upload",
        f"token: {SECRETS[1]}",
        f"aws key {SECRETS[2]} and password=hunter2hunter2",
        f"git clone https://user:pa55word@git.internal/x {SECRETS[3]} from /home/alice/run",
    ]
    lines = [Evidence(source_file="logs/rank_3.jsonl", line=10 + i, rank=3, timestamp="2025-06-12T14:00:00.000Z", text=t)
             for i, t in enumerate(texts)]
    f = Finding(rule="cuda_oom", kind="oom", layer="resource", severity="ERROR", ranks=[3],
                title=f"rank 3: CUDA OOM ({texts[0]})", evidence={"message": texts[1]}, lines=lines,
                first_seen="2025-06-12T14:00:00.000Z", last_seen="2025-06-12T14:00:01.000Z")
    rc = RootCause(kind="oom", layer="resource", ranks=[3], summary=f"rank 3 ran out of memory: {texts[2]}", finding=0)
    return Report(run=RunInfo(ranks=4, hosts=1, start="2025-06-12T14:00:00.000Z", end="2025-06-12T14:01:00.000Z",
                              events=100, rejected_lines=0, crashed=True),
                  root_cause=rc, findings=[f], per_rank=[{"rank": 3, "last": texts[3]}])


@pytest.fixture(autouse=True)
def _no_extra_patterns():
    yield
    redact._EXTRA.clear()


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_every_report_format_masks_secrets_by_default(fmt: str) -> None:
    rep = report_with_secrets()
    out = render(rep, fmt, width=200)
    for s in SECRETS + ["hunter2hunter2", "pa55word"]:
        assert s not in out, (fmt, s)
    assert "logs/rank_3.jsonl" in out  # citations survive
    raw = render(rep, fmt, width=200, redact=False)
    assert SECRETS[0] in raw  # and --no-redact really turns it off


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_redact_pattern_adds_a_site_pattern(fmt: str) -> None:
    rep = report_with_secrets()
    assert "/home/alice" in render(rep, fmt, width=200)
    redact.add_patterns([r"/home/[^/ ]+"])
    assert "/home/alice" not in render(rep, fmt, width=200)


def test_bad_redact_pattern_is_a_user_error() -> None:
    from forensics.errors import ForensicsError

    with pytest.raises(ForensicsError):
        redact.add_patterns(["(unclosed"])


def test_perfetto_export_masks_secrets(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_run import SECRET, write_run

    logs = write_run(tmp_path)
    out = tmp_path / "t.json.gz"
    cmd = [sys.executable, "-m", "forensics", "export", "perfetto", str(logs), "-o", str(out)]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    body = gzip.decompress(out.read_bytes()).decode()
    assert SECRET not in body and "s3://bucket/x" in body
    r = subprocess.run(cmd + ["--redact-pattern", r"s3://\S+"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "s3://bucket/x" not in gzip.decompress(out.read_bytes()).decode()
    assert subprocess.run(cmd + ["--no-redact"], capture_output=True).returncode == 0
    assert SECRET in gzip.decompress(out.read_bytes()).decode()


def test_cli_diagnose_redact_pattern(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_run import SECRET, write_run

    logs = write_run(tmp_path)
    base = [sys.executable, "-m", "forensics", "diagnose", str(logs), "--format", "json"]
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout
    r = subprocess.run(base + ["--redact-pattern", "(unclosed"], capture_output=True, text=True)
    assert r.returncode == 1 and "error[F300]" in r.stderr and "Traceback" not in r.stderr
    json.loads(subprocess.run(base + ["--redact-pattern", "node-[a-z]"], capture_output=True, text=True).stdout)
