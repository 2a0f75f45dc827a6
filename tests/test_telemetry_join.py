"""Telemetry no rank can be joined to (issue 10): a finding that says how to fix it, never "Healthy";
`diagnose --gpu-map` joins it (and is part of the cache key)."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.passes import diagnose
from forensics.report import render
from pass_helpers import Rows

SMI = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "telemetry" / "nvidia_smi_8gpu.csv"
HEADER = "timestamp, index, temperature.gpu [C], utilization.gpu [%]\n"


def smi(path: Path, rows: list[tuple[str, int, int]]) -> Path:
    """An nvidia-smi --query-gpu CSV: (time, gpu index, temperature)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"2025/06/12 {t}.000, {g}, {c}, 90 %\n" for t, g, c in rows))
    return path


def unjoined(report):
    return [f for f in report.findings if f.rule == "pass.telemetry_join"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))


def test_two_hosts_without_a_map_name_every_gpu_and_the_options(tmp_path: Path) -> None:
    smi(tmp_path / "logs" / "node3" / "smi.csv", [("14:00:00", 0, 50), ("14:00:00", 1, 51), ("14:00:01", 0, 52)])
    smi(tmp_path / "logs" / "node4" / "smi.csv", [("14:00:00", 0, 60), ("14:00:00", 1, 61)])
    rep = diagnose([str(tmp_path / "logs")])
    [f] = unjoined(rep)
    assert (f.kind, f.severity, f.layer) == ("log_hygiene", "WARN", "physical")
    assert f.evidence["unjoined_rows"] == 5
    assert [(g["host"], g["local_rank"], g["rows"]) for g in f.evidence["gpus"]] == [
        ("node3", 0, 2), ("node3", 1, 1), ("node4", 0, 1), ("node4", 1, 1)]
    assert "--gpu-map node3:0=RANK --gpu-map node3:1=RANK --gpu-map node4:0=RANK --gpu-map node4:1=RANK" in f.title
    assert "rank i on GPU i" not in f.title           # two hosts: never offered
    assert "Healthy" not in render(rep, "text")


def test_a_partial_map_leaves_only_the_unmapped_gpu(tmp_path: Path) -> None:
    smi(tmp_path / "logs" / "node3" / "smi.csv", [("14:00:00", 0, 50), ("14:00:00", 1, 51), ("14:00:01", 0, 52)])
    rep = diagnose([str(tmp_path / "logs")], gpu_map=["node3:0=0"])
    [f] = unjoined(rep)
    assert f.evidence["unjoined_rows"] == 1 and f.evidence["gpus"] == [{"host": "node3", "local_rank": 1, "rows": 1}]
    assert rep.run.ranks == 1
    assert unjoined(diagnose([str(tmp_path / "logs")], gpu_map=["node3:0=0", "node3:1=1"])) == []


def test_rows_with_a_rank_or_without_gpu_metrics_are_not_counted() -> None:
    rows = Rows()
    rows.add(0.0, 0, "GPU_STATS", temp_c=50.0)                     # joined
    r = rows.add(0.0, None, "LOG", message="NCCL INFO Channel 00")   # a local rank but no GPU sample
    r["local_rank"] = 3
    from forensics.passes import telemetry_join

    assert telemetry_join.find(rows.ctx()) == []


def test_real_nvidia_smi_csv_without_map_is_a_finding_and_with_map_joins() -> None:
    if not SMI.is_file():
        pytest.skip("../shared/realdata is not available")
    data_rows = sum(1 for ln in SMI.read_text().splitlines()[1:] if ln.strip())
    gpus = sorted({int(ln.split(",")[1]) for ln in SMI.read_text().splitlines()[1:] if ln.strip()})
    rep = diagnose([str(SMI)])
    [f] = unjoined(rep)
    assert f.evidence["unjoined_rows"] == data_rows
    assert [g["local_rank"] for g in f.evidence["gpus"]] == gpus
    assert " ".join(f"--gpu-map {g}={g}" for g in gpus) in f.title       # one node: the identity map offered
    assert rep.run.ranks == 0 and "Healthy" not in render(rep, "text")
    mapped = diagnose([str(SMI)], gpu_map=[f"{g}={g}" for g in gpus])
    assert unjoined(mapped) == [] and mapped.run.ranks == len(gpus)


def test_cli_diagnose_gpu_map_is_part_of_the_cache_key(tmp_path: Path) -> None:
    csv = smi(tmp_path / "logs" / "node3" / "smi.csv", [("14:00:00", 0, 50), ("14:00:00", 1, 51)])
    runner = CliRunner()
    plain = runner.invoke(app, ["diagnose", str(csv), "--format", "json"])
    mapped = runner.invoke(app, ["diagnose", str(csv), "--format", "json", "--gpu-map", "node3:0=4", "--gpu-map", "node3:1=5"])
    again = runner.invoke(app, ["diagnose", str(csv), "--format", "json"])
    assert plain.exit_code == mapped.exit_code == again.exit_code == 0
    assert '"pass.telemetry_join"' in plain.stdout and '"pass.telemetry_join"' not in mapped.stdout
    assert '"ranks": 2' in mapped.stdout and plain.stdout == again.stdout
    (tmp_path / "map.txt").write_text("node3:0=4\nnode3:1=5\n")
    from_file = runner.invoke(app, ["diagnose", str(csv), "--format", "json", "--gpu-map", f"@{tmp_path / 'map.txt'}"])
    assert from_file.exit_code == 0 and '"pass.telemetry_join"' not in from_file.stdout


def test_cli_diagnose_gpu_map_errors_are_one_block(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    csv = smi(tmp_path / "logs" / "smi.csv", [("14:00:00", 0, 50)])

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True,
                              env={**os.environ, "FORENSICS_CACHE": str(tmp_path / "cache")})

    bad = cli("diagnose", str(csv), "--gpu-map", "node3:zero=1")
    assert bad.returncode == 1 and "error[F300]" in bad.stderr and "Traceback" not in bad.stderr
    store = tmp_path / "run.forensics"
    assert cli("ingest", str(csv), "-o", str(store)).returncode == 0
    on_store = cli("diagnose", str(store), "--gpu-map", "0=0")
    assert on_store.returncode == 1 and "error[F300]" in on_store.stderr and "forensics ingest " in on_store.stderr \
        and "--gpu-map 0=0" in on_store.stderr
