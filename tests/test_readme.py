"""The README's promises: its column table matches the schema, its commands exist."""
from __future__ import annotations

import re
from pathlib import Path

from forensics.schema import columns_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_column_table_matches_schema() -> None:
    text = README.read_text()
    block = text.split("<!-- columns:start -->", 1)[1].split("<!-- columns:end -->", 1)[0].strip()
    assert block == columns_markdown(), "regenerate with: python -c 'from forensics.schema import columns_markdown; print(columns_markdown())'"


def test_setup_commands_are_the_ones_ci_runs() -> None:
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    test_cmd = "pip install -e '.[test]' && pytest -q"
    assert test_cmd in text and test_cmd in ci


def test_every_command_in_the_table_is_a_cli_command() -> None:
    from typer.main import get_command

    from forensics.cli import app

    names = set(get_command(app).commands)  # type: ignore[attr-defined]
    shown = set(re.findall(r"^\| `forensics ([a-z0-9-]+)", README.read_text(), flags=re.M))
    assert shown and shown <= names, shown - names


def test_main_command_runs_on_the_shipped_sample(tmp_path: Path) -> None:
    import shlex
    import subprocess
    import sys

    text = README.read_text()
    line = next(ln for ln in text.splitlines() if "pip install -e . && forensics " in ln)
    cmd = shlex.split(line.split("&& forensics ", 1)[1])
    r = subprocess.run([sys.executable, "-m", "forensics", *cmd], capture_output=True, text=True, cwd=README.parent)
    assert r.returncode == 0, r.stderr
    assert "thermal" in r.stdout.lower() and "rank" in r.stdout
