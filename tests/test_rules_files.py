"""The shipped rule files: they pass `check`, their examples discriminate, their thresholds are the
seeds', and they find what real logs hold."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from forensics.report.model import KINDS
from forensics.rules import builtin_rules_dir, check_rules, evaluate, load_rules
from forensics.rules import expr as X
from forensics.rules.examples import run_examples
from forensics.rules.spec import METADATA

REPO = Path(__file__).resolve().parents[1]
RULES = load_rules()
BY_ID = {r.id: r for r in RULES}
REALDATA = REPO.parent / "shared" / "realdata"


def test_builtin_rules_are_the_top_level_rules_folder() -> None:
    assert builtin_rules_dir().resolve() == (REPO / "rules").resolve()
    # rules/next_steps.toml is the next step per kind, not a rule (tests/test_next_steps.py)
    files = sorted(f for f in (REPO / "rules").rglob("*.toml") if f.name != "next_steps.toml")
    assert len(files) == len(RULES) >= 10
    for f in files:
        assert f.stem in BY_ID and f.parent.parent == REPO / "rules"   # rules/<component>/<id>.toml


def test_all_shipped_rules_pass_check() -> None:
    assert [str(e) for e in check_rules()] == []


@pytest.mark.parametrize("rid", sorted(BY_ID))
def test_rule_metadata_and_examples(rid: str) -> None:
    r = BY_ID[rid]
    text = r.path.read_text()
    positions = [text.index(f"\n{k} =") if not text.startswith(f"{k} =") else 0 for k in METADATA]
    assert positions == sorted(positions), "fixed metadata order"
    assert r.level in ("WARN", "ERROR") and r.kind in KINDS and r.references
    expects = [e.expect for e in r.examples]
    assert "match" in expects and "no_match" in expects
    assert run_examples(r, str(r.path)) == []


@pytest.mark.parametrize("rid", sorted(BY_ID))
def test_every_example_would_fail_if_its_expectation_were_inverted(rid: str) -> None:
    """An example that passes whatever it expects proves nothing."""
    r = BY_ID[rid]
    for ex in r.examples:
        flipped = dataclasses.replace(ex, expect="no_match" if ex.expect == "match" else "match", ranks=None)
        errors = run_examples(dataclasses.replace(r, examples=(flipped,)), str(r.path))
        assert errors, f"{rid} {ex.key} passes both ways"


def _const(leaf) -> float | None:
    return leaf.value if leaf.expr is None else X.constant(leaf.expr)


def test_thresholds_are_the_seeds() -> None:
    """seed 000 §4.2/§4.3/§4.1: the numbers a reviewer will check first."""
    util = BY_ID["gpu_underutilized"].clause
    assert (util.primary().col, util.primary().op, _const(util.primary())) == ("gpu_util", "<", 60)
    assert (util.sustain.unit, util.sustain.amount) == ("s", 300)
    for rid, col in (("pcie_low_bandwidth", "pcie_mbps"), ("nvlink_low_bandwidth", "nvlink_mbps")):
        r = BY_ID[rid]
        assert r.clause.primary().col == col and r.params["fraction"] == 0.3
        assert _const(r.clause.primary()) == pytest.approx(0.3 * r.params["theoretical_mbps"])
    comm = BY_ID["comm_share_high"]
    assert comm.params["max_share"] == 0.4 and comm.clause.by_step and comm.clause.sums == ("comm_ms",)
    thermal = BY_ID["thermal_throttling"].clause.leaves()
    assert ("temp_c", ">=", 90) in [(lf.col, lf.op, _const(lf)) for lf in thermal]
    assert ("throttle_reasons", "bits", 0x40) in [(lf.col, lf.op, lf.value) for lf in thermal]
    joint = BY_ID["low_util_slow_disk"]
    assert joint.clause.primary().col == "gpu_util" and [j.primary().col for j in joint.joins] == ["disk_read_mbps"]
    for rid in ("cuda_oom", "nccl_timeout"):
        assert BY_ID[rid].level == "ERROR"
    for rid in ("gpu_underutilized", "thermal_throttling", "comm_share_high", "grad_norm_above_threshold"):
        assert BY_ID[rid].level == "WARN"


@pytest.mark.skipif(not (REALDATA / "console" / "deepspeed_2rank_oom.log").is_file(), reason="shared realdata not present")
def test_real_deepspeed_oom_log(tmp_path: Path) -> None:
    """Known truth (realdata/README.md): CUDA OOM on rank 0, no thermal or NCCL problem."""
    from forensics.ingest import ingest
    from forensics.store import open_store

    ingest([str(REALDATA / "console" / "deepspeed_2rank_oom.log")], tmp_path / "s")
    found = {f.rule: f for f in evaluate(open_store(tmp_path / "s").events(), RULES)}
    assert set(found) == {"cuda_oom"}
    oom = found["cuda_oom"]
    assert oom.ranks == [0] and oom.severity == "ERROR"
    lines = (REALDATA / "console" / "deepspeed_2rank_oom.log").read_text(errors="replace").splitlines()
    for e in oom.lines:   # the OOM line itself, or the head of the traceback that ends in it
        assert "CUDA out of memory" in lines[e.line - 1] or "Traceback" in lines[e.line - 1]
        assert "CUDA out of memory" in (e.text or "")


def test_a_wheel_carries_the_rules(tmp_path: Path) -> None:
    """Outside a checkout the rules come from inside the package (forensics/rules/builtin)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "forensics", src / "forensics", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "rules", src / "rules")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "w"), str(src)],
                         capture_output=True, text=True)
    if out.returncode != 0 and "No module named pip" in out.stderr:
        pytest.skip("pip is not available in this interpreter")
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = (tmp_path / "w").glob("forensics-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in (REPO / "rules").rglob("*.toml"):
        assert f"forensics/rules/builtin/{f.relative_to(REPO / 'rules').as_posix()}" in names
