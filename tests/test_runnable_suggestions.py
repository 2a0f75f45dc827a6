"""Every command the tool prints is runnable (issue 28 item 3): the command of a finding is
taken from the report itself, run as printed (only its placeholders filled), and must succeed."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.ingest import ingest
from forensics.passes import diagnose

HEADER = "timestamp, index, temperature.gpu [C], utilization.gpu [%]\n"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))


def _smi(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"2025/06/12 14:00:0{t}.000, {g}, {50 + g}, 90 %\n" for t in range(3) for g in (0, 1)))
    return path


def _commands(text: str) -> list[str]:
    return re.findall(r"`(forensics [^`]+)`", text)


def _run(command: str) -> tuple[int, str]:
    argv = shlex.split(command)[1:]
    r = CliRunner().invoke(app, argv)
    return r.exit_code, r.output


@pytest.mark.parametrize("as_store", [True, False])
def test_the_gpu_map_command_of_a_telemetry_finding_runs_as_printed(tmp_path: Path, as_store: bool) -> None:
    """On a store the advice used to be `forensics diagnose … --gpu-map 0=RANK`, and the command
    on the store failed with F300: it now names the logs, where the map is applied."""
    _smi(tmp_path / "logs" / "smi.csv")
    target = str(tmp_path / "logs")
    if as_store:
        ingest([target], tmp_path / "st")
        target = str(tmp_path / "st")
    [f] = [f for f in diagnose([target]).findings if f.rule == "pass.telemetry_join"]
    cmds = _commands(f.title)
    assert len(cmds) == 2, f.title                        # with RANK to fill in, and the one-node identity
    assert "…" not in " ".join(cmds)
    filled = cmds[0].replace("=RANK", "=7", 1).replace("=RANK", "=8")
    for cmd in (filled, cmds[1]):
        code, out = _run(cmd + " --format json")
        assert code == 0, (cmd, out)
        assert "error[" not in out and "could not be joined" not in out, cmd


def _next_step_commands() -> list[str]:
    from forensics.rules import load_next_steps

    return sorted({c for t in load_next_steps().values() for c in _commands(t)})


@pytest.mark.parametrize("command", _next_step_commands())
def test_every_forensics_command_of_a_next_step_runs(command: str) -> None:
    """The sentences of rules/next_steps.toml name forensics commands with LOGS, BASELINE and the
    rank to fill in: filled with a sample run and one of its ranks, each runs."""
    sample = str(Path(__file__).resolve().parents[1] / "sample_logs" / "straggler")
    filled = command.replace("{rank_id}", "3").replace("LOGS", sample).replace("BASELINE", sample)
    assert "{" not in filled, filled
    code, out = _run(filled)
    assert code == 0, (filled, out)


def _suggested_commands() -> list[tuple[str, str, bool]]:
    """Every `forensics SUBCOMMAND ...` the package's own strings suggest (error help lines,
    finding titles, notes): (module, command text up to the end of the command, quoted in
    backticks: then it is a command for certain, not prose such as "forensics connects to")."""
    import ast

    pkg = Path(__file__).resolve().parents[1] / "forensics"
    found = []
    for py in sorted(pkg.rglob("*.py")):
        tree = ast.parse(py.read_text())
        for node in ast.walk(tree):
            parts: list[str] = []
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                parts = [node.value]
            elif isinstance(node, ast.JoinedStr):
                parts = ["".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)]
            for s in parts:
                for m in re.finditer(r"(`|with: |run: |, or |\(|^)(forensics [a-z][a-z0-9-]*(?: [^`'\"()\n;]*)?)", s):
                    found.append((str(py.relative_to(pkg.parent)), m.group(2).strip(), m.group(1) == "`"))
    return sorted(set(found))


def test_every_suggested_command_names_a_real_command_and_its_options() -> None:
    """A help line or a finding that says "forensics ranks STORE --foo" must name a command that
    exists and options that command takes."""
    from typer.main import get_command

    root = get_command(app)
    cmds = _suggested_commands()
    assert len(cmds) > 20 and sum(q for *_, q in cmds) > 10
    bad = []
    for where, text, quoted in cmds:
        words = text.split()
        cmd = root.commands.get(words[1]) if hasattr(root, "commands") else None
        if cmd is None:
            if quoted:      # unquoted, an unknown word is prose ("forensics is not installed on ...")
                bad.append((where, text, "no such command"))
            continue
        rest = words[2:]
        if hasattr(cmd, "commands") and rest and rest[0] in cmd.commands:
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])} | {"--help"}
        for w in rest:
            if w.startswith("--"):
                name = w.split("=", 1)[0].rstrip(",.:…")
                if name not in opts:
                    bad.append((where, text, f"{name} is not an option of {words[1]}"))
    assert bad == []


def test_the_help_of_gpu_map_on_a_store_is_a_command_that_runs(tmp_path: Path) -> None:
    """`diagnose STORE --gpu-map` is refused (F300); its help used to say `forensics ingest
    --gpu-map …` (no logs, no store): it now is the whole command, and it runs."""
    _smi(tmp_path / "logs" / "smi.csv")
    ingest([str(tmp_path / "logs")], tmp_path / "st")
    r = CliRunner().invoke(app, ["diagnose", str(tmp_path / "st"), "--gpu-map", "0=4", "--gpu-map", "1=5"])
    assert r.exit_code == 1 and getattr(r.exception, "code", None) == "F300"
    [cmd] = _commands(r.exception.help)
    assert "…" not in cmd and "--gpu-map 0=4 --gpu-map 1=5" in cmd
    code, out = _run(cmd)
    assert code == 0, out
    mapped = cmd.split(" -o ", 1)[1].split()[0]
    code, out = _run(f"forensics ranks {mapped} --format json")
    assert code == 0 and {r["rank"] for r in __import__("json").loads(out)} >= {4, 5}


@pytest.mark.parametrize("argv", [
    ["events", "{run}", "--rank", "99"],
    ["timeline", "{run}", "--rank", "99"],
    ["export", "perfetto", "{run}", "-o", "{tmp}/t.json", "--steps", "9000:9001"],
    ["sql", "{run}", "SELECT * FROM nope"],
    ["compare", "{run}"],
])
def test_the_command_of_an_error_help_line_runs(argv: list[str], tmp_path: Path) -> None:
    """An error's `help:` names a command with STORE (or BASELINE CANDIDATE) to fill in: filled
    with the run the failing command was given, it runs."""
    run = str(Path(__file__).resolve().parents[1] / "sample_logs" / "straggler")
    r = CliRunner().invoke(app, [a.format(run=run, tmp=tmp_path) for a in argv])
    assert r.exit_code == 1, r.output
    help_ = r.exception.help
    m = re.search(r"(forensics [a-z][a-z0-9-]*(?: (?:[A-Z]+|\"[^\"]*\"|--?[a-z]+))*)", help_)
    assert m, help_
    cmd = m.group(1).replace("STORE", run).replace("BASELINE", run).replace("CANDIDATE", run)
    code, out = _run(cmd)
    assert code in (0, 3), (help_, cmd, out)
