"""The README's and docs' promises: the front page is short and holds the set-up CI runs, the
column table matches the schema, every command named exists, every link resolves, and every
`$ forensics ...` example of README.md and docs/*.md runs (placeholders such as `logs/` and
`job.forensics` made real in a scratch folder)."""
from __future__ import annotations

import gzip
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.schema import columns_markdown

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
REAL = REPO.parent / "shared" / "realdata"
FR = REAL / "flight_recorder" / "gpu_error_1st"
KINETO = REAL / "kineto" / "dlrm_8rank"


def test_column_table_matches_schema() -> None:
    text = (DOCS / "store.md").read_text()
    block = text.split("<!-- columns:start -->", 1)[1].split("<!-- columns:end -->", 1)[0].strip()
    assert block == columns_markdown(), "regenerate with: python -c 'from forensics.schema import columns_markdown; print(columns_markdown())'"


def test_setup_commands_are_the_ones_ci_runs() -> None:
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    test_cmd = "pip install -e '.[test]' && pytest -q"
    assert test_cmd in text and test_cmd in ci
    assert "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && forensics diagnose sample_logs/thermal_throttling" in text


def test_the_front_page_is_short_and_links_every_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 80
    linked = set(re.findall(r"\]\((docs/[a-z0-9-]+\.md)\)", text))
    assert linked == {f"docs/{p.name}" for p in PAGES}
    assert len(re.findall(r"^\| `forensics [a-z0-9-]+", text, flags=re.M)) == 5


def test_every_link_of_the_docs_resolves() -> None:
    for page in [README, *PAGES]:
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), (page.name, target)


def test_every_command_in_a_table_is_a_cli_command() -> None:
    from typer.main import get_command

    from forensics.cli import app

    names = set(get_command(app).commands)  # type: ignore[attr-defined]
    shown = {n for p in [README, DOCS / "commands.md"] for n in re.findall(r"^\| `forensics ([a-z0-9-]+)", p.read_text(), flags=re.M)}
    assert shown and shown <= names, shown - names
    assert names <= shown, names - shown           # docs/commands.md names every command


def test_main_command_runs_on_the_shipped_sample(tmp_path: Path) -> None:
    import subprocess
    import sys

    text = README.read_text()
    line = next(ln for ln in text.splitlines() if "pip install -e . && forensics " in ln)
    cmd = shlex.split(line.split("&& forensics ", 1)[1])
    r = subprocess.run([sys.executable, "-m", "forensics", *cmd], capture_output=True, text=True, cwd=README.parent)
    assert r.returncode == 0, r.stderr
    assert "thermal" in r.stdout.lower() and "rank" in r.stdout


# -- every example runs ------------------------------------------------------------------------

def _examples() -> list[tuple[str, int, str]]:
    out = []
    for page in [README, *PAGES]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            m = re.match(r"^\s+\$ (forensics .*)$", line)
            if m:
                out.append((str(page.relative_to(REPO)), n, m.group(1)))
    return out


# Examples that cannot run here, and why (each still names a real command and real options).
SKIP = {
    "--dask": "needs a Dask scheduler at that address",
    "--install-completion": "would edit this machine's shell start-up file",
}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder where the docs' placeholder paths exist."""
    from forensics.ingest import ingest

    d = tmp_path_factory.mktemp("docs")
    samples = REPO / "sample_logs"
    (d / "sample_logs").symlink_to(samples)
    for name, sample in (("logs", "straggler"), ("runs/job-4711/logs", "straggler"),
                         ("runs/nightly-1203/logs", "healthy"), ("runs/nightly-1204/logs", "straggler")):
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).symlink_to(samples / sample)
    gz = d / "logs-gz"
    gz.mkdir()
    for f in (samples / "straggler").glob("*.jsonl"):
        (gz / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes()))
    ingest([str(samples / "straggler")], d / "job.forensics")
    ingest([str(samples / "healthy")], d / "last-good.forensics")
    (d / "my-rules" / "gpu").mkdir(parents=True)
    shutil.copy(REPO / "rules" / "gpu" / "thermal_throttling.toml", d / "my-rules" / "gpu")
    (d / "node3").mkdir()
    (d / "node3" / "nvidia_smi.csv").write_text("timestamp, index, temperature.gpu [C], utilization.gpu [%]\n"
                                               "2025/06/12 14:00:01.000, 0, 60, 90 %\n2025/06/12 14:00:01.000, 1, 61, 91 %\n")
    if KINETO.is_dir():
        ingest([str(KINETO)], d / "traces.forensics")
    return d


def _argv(command: str, scratch: Path) -> list[str] | str:
    """The example's arguments with its placeholders made real, or why it cannot run here."""
    for flag, why in SKIP.items():
        if flag in command:
            return why
    command = re.split(r"\s+[|>]\s+", re.split(r"\s+#\s", command)[0])[0]      # no comment, pipe or redirection
    argv = shlex.split(command)[1:]
    subst = {"'logs/**/*.jsonl.gz'": None, "logs/**/*.jsonl.gz": str(scratch / "logs-gz" / "**" / "*.jsonl.gz")}
    out = []
    for a in argv:
        a = subst.get(a, a)
        if a.startswith("/tmp/fr-dumps"):
            if not FR.is_dir():
                return "../shared/realdata absent"
            a = str(FR)
        elif a.startswith("runs/job-4711/profiler"):
            if not KINETO.is_dir():
                return "../shared/realdata absent"
            a = str(KINETO)
        elif a == "job.forensics" and argv[0] == "trace-stats":
            if not KINETO.is_dir():
                return "../shared/realdata absent"
            a = str(scratch / "traces.forensics")
        elif a == "job-4711.forensics":
            a = str(scratch / "job-4711.forensics")
        out.append(a)
    return out


@pytest.mark.parametrize("where, line, command", _examples(), ids=[f"{w}:{n}" for w, n, _ in _examples()])
def test_every_example_runs(where: str, line: int, command: str, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _argv(command, scratch)
    if isinstance(argv, str):
        pytest.skip(argv)
    from forensics.cli import app

    monkeypatch.chdir(scratch)
    monkeypatch.setenv("FORENSICS_CACHE", str(scratch / "cache"))
    if "--append" in argv:      # a later batch into a store an earlier example wrote
        CliRunner().invoke(app, ["ingest", str(scratch / "logs"), "-o", argv[argv.index("-o") + 1]])
    r = CliRunner().invoke(app, argv)
    assert r.exit_code in (0, 3), (where, line, command, r.output[-2000:])
    assert "error[" not in r.output and "Traceback" not in r.output, (where, line, r.output[-2000:])
