"""`forensics ingest`, `forensics rejects`, `--version` and error rendering through the real CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import forensics


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True, cwd=cwd)


def make_logs(d: Path) -> None:
    d.mkdir()
    for r in range(3):
        lines = [
            json.dumps({"timestamp": f"2025-06-12T14:03:{s:02d}.000Z", "rank": r, "level": "INFO",
                        "event": "TRAIN_STEP", "message": f"step={s} loss=2.0"})
            for s in range(5)
        ]
        text = "\n".join(lines) + "\n"
        if r == 2:
            # crash debris: binary garbage, then a line cut in half (a traceback would be read as
            # the file's console text: see test_traceback_in_a_jsonl_file_is_the_ranks_error)
            text += "\x00\x01\x02\x03 garbage\n" + '{"timestamp": "2025-06-12T14:0'
        (d / f"rank_{r}.jsonl").write_text(text)


def test_version() -> None:
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith(f"forensics {forensics.__version__} (JSON-lines scanner: ")


def test_ingest_json_summary_and_rejects(tmp_path: Path) -> None:
    make_logs(tmp_path / "logs")
    r = cli("ingest", str(tmp_path / "logs"), "-o", str(tmp_path / "st"), "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    for key in ("files", "lines_read", "events", "rejected", "rejected_by_reason", "ranks", "hosts", "start", "end", "seconds"):
        assert key in s
    assert (s["files"], s["events"], s["rejected"], s["lines_read"]) == (3, 15, 2, 17)
    assert s["ranks"] == [0, 1, 2]
    assert s["rejected_by_reason"] == {"binary data": 1, "truncated line (no newline at end of file)": 1}

    r = cli("rejects", str(tmp_path / "st"), "--format", "jsonl")
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(Path(x["source_file"]).name, x["line"]) for x in rows] == [("rank_2.jsonl", 6), ("rank_2.jsonl", 7)]
    assert "garbage" in rows[0]["text"]

    r = cli("rejects", str(tmp_path / "st"), "--reason", "truncated", "--format", "csv")
    assert r.stdout.count("\n") == 2 and "truncated line" in r.stdout

    r = cli("rejects", str(tmp_path / "st"))
    assert "rank_2.jsonl:6" in r.stdout.replace("\n", "") or "rank_2.jsonl" in r.stdout


def test_human_summary(tmp_path: Path) -> None:
    make_logs(tmp_path / "logs")
    r = cli("ingest", str(tmp_path / "logs"), "-o", str(tmp_path / "st"))
    assert r.returncode == 0
    for text in ("lines read", "events kept", "lines rejected", "binary data", "forensics rejects"):
        assert text in r.stdout


def test_user_errors_are_one_block_and_exit_1(tmp_path: Path) -> None:
    r = cli("ingest", str(tmp_path / "missing"), "-o", str(tmp_path / "st"))
    assert r.returncode == 1
    assert r.stderr.startswith("error[F100]") and "Traceback" not in r.stderr
    r = cli("rejects", str(tmp_path))       # an empty folder: no logs to read (not "not a store")
    assert r.returncode == 1 and r.stderr.startswith("error[F") and "Traceback" not in r.stderr
    assert f"-o {tmp_path}" not in r.stderr   # never suggests writing a store into the log folder


def test_usage_error_exits_2(tmp_path: Path) -> None:
    r = cli("ingest", str(tmp_path))  # no -o
    assert r.returncode == 2
    r = cli("no-such-command")
    assert r.returncode == 2


def test_verbose_lists_what_was_recognised_per_file(tmp_path: Path) -> None:
    make_logs(tmp_path / "logs")
    (tmp_path / "logs" / "console.log").write_text("[rank1]: Traceback (most recent call last):\n[rank1]: RuntimeError: boom\n")
    r = cli("ingest", str(tmp_path / "logs"), "-o", str(tmp_path / "st"), "-v")
    assert r.returncode == 0, r.stderr
    rows = {line.split("│")[1].strip(): line for line in r.stdout.splitlines() if line.count("│") > 5}
    assert "console" in rows["console.log"] and "jsonl" in rows["rank_0.jsonl"]


def test_workers_with_dask_is_said_to_be_unused(tmp_path: Path, monkeypatch) -> None:
    """`--workers N --dask ADDR`: the Dask workers read, N is not used; the CLI says so (it used
    to drop it silently), and says nothing without --dask."""
    from typer.testing import CliRunner

    import forensics.ingest as ingest_mod
    from forensics.cli import app
    from forensics.errors import ForensicsError

    calls: list[dict] = []

    def stub(paths, output, **kw):     # no cluster here: stop where the ingest would start
        calls.append(kw)
        raise ForensicsError("stub ingest", where=str(output))

    monkeypatch.setattr(ingest_mod, "ingest", stub)
    monkeypatch.delenv("FORENSICS_DASK", raising=False)
    runner = CliRunner()
    r = runner.invoke(app, ["ingest", str(tmp_path), "-o", str(tmp_path / "st"), "--workers", "3",
                            "--dask", "tcp://127.0.0.1:8786"])
    assert r.exit_code == 1 and calls[-1]["dask"] == "tcp://127.0.0.1:8786"
    assert "--workers 3 is not used with --dask" in r.stderr
    r = runner.invoke(app, ["ingest", str(tmp_path), "-o", str(tmp_path / "st"), "--workers", "3"])
    assert r.exit_code == 1 and calls[-1]["workers"] == 3 and "not used" not in r.stderr
