"""`forensics diagnose`, `forensics rules list` and `forensics rules check` through the real CLI.

Exit codes (STYLE.md): 0 ok, 1 user-fixable error (one error block, no traceback), 2 usage error,
3 when `--fail-on LEVEL` trips. The end-to-end runs use the real diagnosis (forensics.passes) on
sample_logs/; the exit-code matrix uses a fixed report so it does not depend on what the passes
find.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import forensics.passes
from forensics.cli import app
from forensics.report.model import Finding, Report, RunInfo
from forensics.rules import load_rules

REPO = Path(__file__).resolve().parents[1]
OOM = REPO / "sample_logs" / "oom_cascade"
BUILTIN_IDS = sorted(r.id for r in load_rules())

MY_RULE = """id = "{id}"
title = "Loss above ten"
level = "{level}"
layer = "training"
kind = "loss_divergence"
description = "A user's own rule."
references = ["team runbook"]
falsepositives = []

[match]
all = [{{ col = "loss", op = ">", value = 10 }}]

[[examples]]
expect = "match"
events = [{{ event = "TRAIN_STEP", loss = 11.0 }}]

[[examples]]
expect = "no_match"
events = [{{ event = "TRAIN_STEP", loss = 2.0 }}]
"""


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True, cwd=cwd)


def loss_logs(d: Path, loss: float = 2.0) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for r in range(2):
        lines = [json.dumps({"timestamp": f"2025-06-12T14:03:{s:02d}.000Z", "rank": r, "level": "INFO",
                             "event": "TRAIN_STEP", "step": s, "loss": loss if (r, s) == (1, 3) else 2.0})
                 for s in range(5)]
        (d / f"rank_{r}.jsonl").write_text("\n".join(lines) + "\n")
    return d


# --- end to end on real logs -------------------------------------------------------------------------

@pytest.mark.skipif(not OOM.is_dir(), reason="sample_logs/oom_cascade not present")
def test_diagnose_raw_logs_in_every_format(tmp_path: Path) -> None:
    r = cli("diagnose", str(OOM))
    assert r.returncode == 0, r.stderr
    assert "Root cause: CUDA OOM on rank 3 (resource layer)." in r.stdout
    assert "rank_3.jsonl:" in r.stdout and "Traceback" not in r.stderr

    r = cli("diagnose", str(OOM), "--format", "json")
    d = json.loads(r.stdout)
    assert (d["root_cause"]["kind"], d["root_cause"]["ranks"]) == ("oom", [3])
    assert "cuda_oom" in {f["rule"] for f in d["findings"]}                     # the rules ran too
    assert all(f["evidence"]["lines"] for f in d["findings"] if f["rule"] == "cuda_oom")

    r = cli("diagnose", str(OOM), "--format", "md", "-o", str(tmp_path / "postmortem.md"))
    assert r.returncode == 0 and r.stdout == "" and "wrote" in r.stderr
    md = (tmp_path / "postmortem.md").read_text()
    assert md.startswith("# Diagnosis of ") and "**Root cause: CUDA OOM on rank 3 (resource layer).**" in md

    r = cli("diagnose", str(OOM), "--fail-on", "ERROR")
    assert r.returncode == 3 and "Root cause" in r.stdout                          # the report is still printed


def test_user_rules_folder_adds_and_overrides(tmp_path: Path) -> None:
    logs = loss_logs(tmp_path / "logs", loss=12.0)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "loss_above_ten.toml").write_text(MY_RULE.format(id="loss_above_ten", level="ERROR"))
    r = cli("diagnose", str(logs), "--rules", str(mine), "--format", "json")
    assert r.returncode == 0, r.stderr
    found = {f["rule"]: f for f in json.loads(r.stdout)["findings"]}
    assert found["loss_above_ten"]["ranks"] == [1] and found["loss_above_ten"]["severity"] == "ERROR"
    assert found["loss_above_ten"]["evidence"]["lines"][0]["line"] == 4
    r = cli("diagnose", str(logs), "--format", "json")
    assert "loss_above_ten" not in {f["rule"] for f in json.loads(r.stdout)["findings"]}


# --- exit codes -----------------------------------------------------------------------------------------

def fixed_report(*severities: str) -> Report:
    return Report(RunInfo(2, 1, "2025-06-12T14:03:00.000Z", "2025-06-12T14:03:04.000Z", 10, 0, False), None,
                  # not log_hygiene: findings about the logs never trip --fail-on unless named (tests/test_ci.py)
                  [Finding(f"r{i}", "straggler", "resource", s, [0], f"finding {i}") for i, s in enumerate(severities)])


@pytest.mark.parametrize("severities, fail_on, code", [
    ((), None, 0), ((), "INFO", 0),
    (("INFO",), "INFO", 3), (("INFO",), "WARN", 0), (("INFO",), None, 0),
    (("WARN",), "warn", 3), (("WARN",), "ERROR", 0),
    (("INFO", "ERROR"), "ERROR", 3), (("ERROR",), "WARN", 3),
])
def test_fail_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, severities: tuple[str, ...], fail_on: str | None, code: int) -> None:
    seen: dict[str, object] = {}

    def fake(run, rule_dirs=None):
        seen["rule_dirs"] = rule_dirs
        return fixed_report(*severities)

    monkeypatch.setattr(forensics.passes, "diagnose", fake)
    args = ["diagnose", str(loss_logs(tmp_path / "logs")), "--format", "json"] + (["--fail-on", fail_on] if fail_on else [])
    r = CliRunner().invoke(app, args)
    assert r.exit_code == code, r.output
    assert len(json.loads(r.stdout)["findings"]) == len(severities)
    assert seen["rule_dirs"] is None


def test_rules_option_is_passed_with_the_builtin_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    monkeypatch.setattr(forensics.passes, "diagnose", lambda run, rule_dirs=None: seen.update(d=rule_dirs) or fixed_report())
    r = CliRunner().invoke(app, ["diagnose", str(loss_logs(tmp_path / "logs")), "--rules", str(tmp_path / "a"), "--rules", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    dirs = [Path(p) for p in seen["d"]]  # type: ignore[union-attr]
    assert dirs[0].resolve() == (REPO / "rules").resolve() and dirs[1:] == [tmp_path / "a", tmp_path / "b"]
    assert "Healthy: nothing wrong found in 2 ranks and 10 events." in r.stdout


def test_width_and_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forensics.passes, "diagnose", lambda run, rule_dirs=None: fixed_report("WARN") )
    logs = str(loss_logs(tmp_path / "logs"))
    r = CliRunner().invoke(app, ["diagnose", logs, "--width", "40"])
    assert r.exit_code == 0 and max(len(x) for x in r.stdout.splitlines()) <= 40
    assert CliRunner().invoke(app, ["diagnose", logs, "--format", "pdf"]).exit_code == 2
    assert CliRunner().invoke(app, ["diagnose", logs, "--fail-on", "FATAL"]).exit_code == 2
    assert CliRunner().invoke(app, ["diagnose"]).exit_code == 2


def test_user_errors_exit_1_with_one_block(tmp_path: Path) -> None:
    r = cli("diagnose", str(tmp_path / "nothing-here"))
    assert r.returncode == 1 and r.stderr.startswith("error[") and "Traceback" not in r.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.toml").write_text(MY_RULE.format(id="not_the_stem", level="ERROR"))
    r = cli("diagnose", str(loss_logs(tmp_path / "logs")), "--rules", str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error[F400]" in r.stderr and "broken.toml:id: id 'not_the_stem' must equal the file stem 'broken'" in r.stderr
    r = cli("diagnose", str(loss_logs(tmp_path / "logs")), "-o", str(tmp_path / "no" / "such" / "dir" / "r.md"))
    assert r.returncode == 1 and "cannot write" in r.stderr


# --- rules list / check -------------------------------------------------------------------------------

def test_rules_list(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["rules", "list"], env={"COLUMNS": "160"})
    assert r.exit_code == 0
    for rid in BUILTIN_IDS:
        assert rid in r.stdout
    assert f"{len(BUILTIN_IDS)} rules" in r.stdout
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "loss_above_ten.toml").write_text(MY_RULE.format(id="loss_above_ten", level="WARN"))
    r = CliRunner().invoke(app, ["rules", "list", "--rules", str(mine), "-v"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "loss_above_ten" in r.stdout and "loss > 10" in r.stdout
    assert f"{len(BUILTIN_IDS) + 1} rules" in r.stdout


def test_rules_check_ok_and_every_error(tmp_path: Path) -> None:
    r = cli("rules", "check")
    assert r.returncode == 0 and r.stdout.startswith(f"ok: {len(BUILTIN_IDS)} rules")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.toml").write_text(MY_RULE.format(id="not_the_stem", level="FATAL").replace('"loss", op = ">"', '"los", op = ">"'))
    (bad / "wrong_example.toml").write_text(MY_RULE.format(id="wrong_example", level="WARN").replace("loss = 11.0", "loss = 9.0"))
    r = cli("rules", "check", str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = r.stdout.splitlines()
    assert any(x.endswith("broken.toml:id: id 'not_the_stem' must equal the file stem 'broken'") for x in lines)
    assert any(x.endswith("broken.toml:level: 'FATAL' is not one of WARN, ERROR") for x in lines)
    assert any("broken.toml:match.all[0].col: unknown column 'los'" in x for x in lines)
    assert any(x.endswith("wrong_example.toml:examples[0]: expected a match, the rule did not match") for x in lines)
    assert lines[-1] == "4 errors in 2 files"
    r = cli("rules", "check", str(tmp_path / "nowhere"))
    assert r.returncode == 1 and "no such rule folder" in r.stdout
