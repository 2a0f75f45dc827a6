"""sample_logs/ is exactly what sample_logs/generate.py writes (seeded, stdlib only)."""
from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def _generator():
    spec = importlib.util.spec_from_file_location("sample_generate", SAMPLES / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses resolve their module while it loads
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_committed_samples_are_the_generators_output(tmp_path: Path) -> None:
    names = _generator().generate(tmp_path)
    assert sorted(names) == sorted(p.parent.name for p in SAMPLES.glob("*/expected.toml"))
    for f in tmp_path.rglob("*"):
        if f.is_file():
            committed = SAMPLES / f.relative_to(tmp_path)
            assert committed.read_bytes() == f.read_bytes(), f"{committed} differs: rerun python sample_logs/generate.py"


def test_expected_files_use_the_report_vocabulary() -> None:
    from forensics.report.model import KINDS

    for p in SAMPLES.glob("*/expected.toml"):
        exp = tomllib.loads(p.read_text())["expect"]
        assert exp["root_cause"] in [*KINDS, "none"], p
        assert all(k in KINDS for k in exp["must_not"]), p
        assert exp["ranks"] == sorted(set(exp["ranks"])), p
