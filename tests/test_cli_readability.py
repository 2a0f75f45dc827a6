"""The command line as a new user meets it: tables that fit the terminal, help and errors in plain
words, colour that honours NO_COLOR, time specs that read like times, the user's own paths.

Each test failed on the code before issue 13's "readable and consistent" fixes.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from forensics import timeline as tl
from forensics.cli import app
from test_timeline import ingest

REPO = Path(__file__).resolve().parents[1]
HANG = REPO / "sample_logs" / "hang"
runner = CliRunner()


def run(*args: str, columns: int = 150, **env: str) -> str:
    r = runner.invoke(app, list(args), env={"COLUMNS": str(columns), **env})
    assert r.exit_code == 0, (args, r.output, r.exception)
    return r.stdout


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 ranks on 3 hosts; rank 1 logs an NCCL timeout long after the others stopped."""
    tmp = tmp_path_factory.mktemp("read")
    err = {"t": 60.0, "level": "ERROR", "event": "NCCL_TIMEOUT", "message": "rank=1 waiting on rank=5 for 50s",
           "extra": {"collective": "allreduce", "timeout_s": 50}}
    r, _ = ingest(tmp, ranks=6, steps=12, last_step={5: 7}, extra={1: [err]})
    return r.path


# --- 1. tables fitted to the terminal ------------------------------------------------------------

def row_of(out: str, pattern: str) -> str:
    """The first table line matching `pattern` (cells joined by │)."""
    return next(ln for ln in out.splitlines() if re.search(pattern, ln))


@pytest.mark.parametrize("columns", [80, 120])
def test_ranks_key_columns_are_whole(columns: int) -> None:
    out = run("ranks", str(HANG), columns=columns)
    lines = out.splitlines()
    table = [ln for ln in lines if "│" in ln or "┃" in ln]
    assert max(len(ln) for ln in table) <= columns
    assert "…" not in "".join(table)                       # no value squeezed to an ellipsis
    assert re.search(r"^rank ┃.*last event.*┃ step ┃", lines[1] if lines[0].startswith(" ") else lines[0])
    last = {0: "14:30:41.352", 1: "14:30:41.432", 2: "14:00:40.642", 3: "14:30:41.392"}
    for rank, t in last.items():
        row = row_of(out, rf"^\s+{rank} │")
        assert f"│ {t} │" in row and "│   40 │" in row       # rank, time, step whole
    if columns == 80:   # what gave way is named, in one line
        note = row_of(out, "^not shown at 80 columns: ")
        assert "first" in note and "--format csv" in note
    assert "first to go silent: rank 2" in out


@pytest.mark.parametrize("columns", [80, 120])
def test_last_10s_keeps_the_message_and_key_columns(columns: int) -> None:
    out = run("last-10s", str(HANG), "--per-rank", "1", columns=columns)
    table = [ln for ln in out.splitlines() if "│" in ln or "┃" in ln]
    assert max(len(ln) for ln in table) <= columns
    row = row_of(out, r"^\s+0 │")
    # the message in its column, or (too narrow for a readable column) on the lines under its row
    assert re.search(r"^\s+0 │\s+40 │.*14:30:41\.352 │ ERROR │ NCCL_TIMEOUT │ (\[Rank 0\]|.*rank_0\.jsonl:172\n\s+\[Rank 0\])",
                     out[out.index(row):])
    assert "hang/rank_0.jsonl:172" in out                  # file:line whole, never broken
    # the events of the window below: rank and level are real columns, not squeezed to nothing
    assert re.search(r"14:30:41\.352\s+│\s+0 │ ERROR │ NCCL_TIMEOUT │", out)


@pytest.mark.parametrize("columns", [80, 120])
def test_events_rank_and_level_are_whole(columns: int, store: Path) -> None:
    out = run("events", str(HANG), "--rank", "2", "--since", "step:40", columns=columns)
    assert re.search(r"14:00:40\.462\s+│\s+2 │ INFO\s+│ DATA_LOAD_TIME │", out)
    assert "hang/rank_2.jsonl:169" in out and "hang/rank_2.jsonl:170" in out
    assert max(len(ln) for ln in out.splitlines() if "│" in ln) <= columns
    out = run("events", str(store), "--rank", "1", "--level", "ERROR", columns=columns)   # with hosts
    assert re.search(r"│\s+1 │ (.*│ )?ERROR │ NCCL_TIMEOUT │", out) and "rank=1 waiting" in out.replace("\n", " ")


def test_timeline_tables_fit_80_columns(store: Path) -> None:
    for per in ("--per-rank", "--per-step"):
        out = run("timeline", str(store), "--steps", "2:4", per, columns=80)
        table = [ln for ln in out.splitlines() if "│" in ln or "┃" in ln]
        assert max(len(ln) for ln in table) <= 80 and "…" not in "".join(table)
        for s in (2, 3, 4):
            assert re.search(rf"^\s+{s} │", out, flags=re.M)


# --- 2. rejects, diagnose -o, several stores -------------------------------------------------------

def bad_logs(d: Path) -> Path:
    d.mkdir()
    for r in range(2):
        lines = [json.dumps({"timestamp": f"2025-06-12T14:03:{s:02d}.000Z", "rank": r, "level": "INFO",
                             "event": "TRAIN_STEP", "step": s, "loss": 2.0}) for s in range(4)]
        # a damaged line (binary garbage: a text line would be the file's console text, an event)
        text = "\n".join(lines) + "\n" + ("\x00\x01\x02\x03 garbage\n" if r == 1 else "")
        (d / f"rank_{r}.jsonl").write_text(text)
    return d


def test_rejects_reads_raw_logs_and_refuses_unknown_formats(tmp_path: Path) -> None:
    logs = bad_logs(tmp_path / "logs")
    rows = json.loads(run("rejects", str(logs), "--format", "json"))
    assert [(Path(r["source_file"]).name, r["line"]) for r in rows] == [("rank_1.jsonl", 5)]
    assert "rank_1.jsonl:5" in run("rejects", str(logs))
    assert not (logs / "manifest.json").exists()          # nothing was written into the log folder
    r = cli("rejects", str(logs), "--format", "xml")
    assert r.returncode == 2 and "--format must be one of: table, jsonl, csv, json (got 'xml')" in r.stderr
    assert "written by" not in run("rejects", "--help")


def test_diagnose_takes_the_format_from_the_output_suffix(tmp_path: Path) -> None:
    logs = bad_logs(tmp_path / "logs")
    for name, check in (("r.html", lambda t: t.lstrip().lower().startswith("<!doctype html")),
                        ("r.json", lambda t: isinstance(json.loads(t), dict)),
                        ("r.md", lambda t: t.startswith("#"))):
        r = cli("diagnose", str(logs), "-o", str(tmp_path / name))
        assert r.returncode == 0, r.stderr
        assert check((tmp_path / name).read_text()), name
    r = cli("diagnose", str(logs), "--format", "md", "-o", str(tmp_path / "x.html"))   # --format wins, and says so
    assert (tmp_path / "x.html").read_text().startswith("#") and "note: writing md to" in r.stderr


def test_two_stores_say_what_is_wrong(tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert cli("ingest", str(bad_logs(tmp_path / name)), "-o", str(tmp_path / f"{name}.forensics")).returncode == 0
    r = cli("diagnose", str(tmp_path / "a.forensics"), str(tmp_path / "b.forensics"))
    assert r.returncode == 1 and r.stderr.startswith("error[F300]") and "Traceback" not in r.stderr
    assert "2 stores given" in r.stderr and "once per store" in r.stderr
    assert "pass the store to the query commands" not in r.stderr
    r = cli("events", str(tmp_path / "a.forensics"), str(tmp_path / "b"))
    assert r.returncode == 1 and "is a store, given together with other paths" in r.stderr


# --- 3. help and usage errors in user words -------------------------------------------------------

def all_commands() -> list[list[str]]:
    root = get_command(app)
    out: list[list[str]] = [[]]
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        out.append([name])
        out += [[name, sub] for sub in getattr(cmd, "commands", {})]
    return out


def test_help_names_values_as_users_do() -> None:
    for path in all_commands():
        text = run(*path, "--help")
        assert not re.search(r"<(list|int|str|float|bool|path)\b|range>|\{\w+\}", text), (path, text)
        assert "seed" not in text.lower() and "§" not in text, path
    text = run("events", "--help")
    for shown in ("PATH...", "--rank N", "--since TIME", "--format FORMAT", "--limit N", "[at least 0]"):
        assert shown in text, shown
    assert "Usage: forensics events [OPTIONS] PATH..." in text


def test_usage_errors_in_one_sentence() -> None:
    cases = [(("ranks", "x", "--format", "xml"), "--format must be one of: table, jsonl, csv, json (got 'xml')"),
             (("last-10s", "x", "-f", "csv"), "--format must be one of: table, json (got 'csv')"),
             (("events", "x", "--limit", "-1"), "--limit must be 0 to 2147483647 (got -1)"),
             (("events", "x", "--rank", "1", "--rank", "two"), "--rank takes a whole number (got 'two')"),
             (("diagnose", "x", "--fail-on", "LOUD"), "level 'LOUD' is not one of INFO, WARN, ERROR")]
    for args, said in cases:
        r = runner.invoke(app, list(args))
        assert r.exit_code == 2, args
        assert said in r.output and "Value error" not in r.output and "Input should" not in r.output, r.output


def test_lint_checklist_speaks_to_users(store: Path) -> None:
    checks = json.loads(run("lint", str(store), "--format", "json"))["checks"]
    for c in checks:
        assert not re.search(r"seed|§|[\u4e00-\u9fff]", c["question"] + c["summary"]), c


# --- 4. completion and colour ---------------------------------------------------------------------

def test_shell_completion_is_offered_and_works() -> None:
    text = run("--help")
    assert "--install-completion" in text and "--show-completion" in text
    exe = Path(sys.executable).parent / "forensics"       # the installed command: completion keys on its name

    def complete(words: str, cword: int) -> list[str]:
        env = {**os.environ, "_FORENSICS_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        return subprocess.run([str(exe)], capture_output=True, text=True, env=env).stdout.split()

    assert complete("forensics la", 1) == ["last-10s"]
    assert complete("forensics ranks x --format ", 4) == ["table", "jsonl", "csv", "json"]


def on_a_terminal(*args: str, env: dict[str, str]) -> bytes:
    """What the CLI writes to stdout when stdout is a terminal (a pseudo-terminal here)."""
    master, slave = pty.openpty()
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    p = subprocess.Popen([sys.executable, "-m", "forensics", *args], stdout=slave, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL, env={**base, "TERM": "xterm-256color", "COLUMNS": "160", **env},
                         cwd=REPO)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not b:
            break
        chunks.append(b)
    os.close(master)
    assert p.wait(timeout=120) == 0
    return b"".join(chunks)


def test_no_color_means_no_escape_codes() -> None:
    assert b"\x1b[" in on_a_terminal("ranks", str(HANG), env={})            # a terminal gets styles ...
    assert b"\x1b[" not in on_a_terminal("ranks", str(HANG), env={"NO_COLOR": "1"})          # ... unless NO_COLOR
    assert b"\x1b[" in on_a_terminal("ranks", str(HANG), env={"NO_COLOR": ""})               # empty: not set
    assert b"\x1b[" not in on_a_terminal("--color", "never", "last-10s", str(HANG), env={})
    assert b"\x1b[" in on_a_terminal("--color", "always", "ranks", str(HANG), env={"NO_COLOR": "1"})  # the flag wins
    text = on_a_terminal("diagnose", str(REPO / "sample_logs" / "oom_cascade"), env={"NO_COLOR": "x"})
    assert b"Root cause" in text and b"\x1b[" not in text
    r = cli("--color", "always", "ranks", str(HANG))                        # always: even into a pipe
    assert r.returncode == 0 and "\x1b[" in r.stdout


# --- 5. time specs --------------------------------------------------------------------------------

def frame(times: list[str]) -> pl.DataFrame:
    ts = [dt.datetime.fromisoformat(t) for t in times]
    return pl.DataFrame({"timestamp": ts, "rank": [0] * len(ts), "step": list(range(len(ts)))},
                        schema={"timestamp": pl.Datetime("us", "UTC"), "rank": pl.Int32, "step": pl.Int64})


def test_time_of_day_is_on_the_last_day_of_the_run() -> None:
    day = frame(["2025-06-12T14:00:00+00:00", "2025-06-12T14:30:41+00:00"])
    assert tl.parse_time_spec("14:30:00", day) == dt.datetime(2025, 6, 12, 14, 30, tzinfo=dt.timezone.utc)
    assert tl.parse_time_spec("14:05", day) == dt.datetime(2025, 6, 12, 14, 5, tzinfo=dt.timezone.utc)
    assert tl.parse_time_spec("16:30:00.5+02:00", day) == dt.datetime(2025, 6, 12, 14, 30, 0, 500000, tzinfo=dt.timezone.utc)
    # a run over midnight: the latest such time not after the run's last event
    night = frame(["2025-06-12T23:50:00+00:00", "2025-06-13T00:10:00+00:00"])
    assert tl.parse_time_spec("23:55", night) == dt.datetime(2025, 6, 12, 23, 55, tzinfo=dt.timezone.utc)
    assert tl.parse_time_spec("00:05", night) == dt.datetime(2025, 6, 13, 0, 5, tzinfo=dt.timezone.utc)
    with pytest.raises(Exception, match="time of day"):
        tl.parse_time_spec("25:99", day)


def test_time_specs_through_the_cli() -> None:
    rows = [json.loads(x) for x in run("events", str(HANG), "--since", "14:30:41", "--format", "jsonl").splitlines()]
    assert rows and all(r["timestamp"] >= "2025-06-12T14:30:41" for r in rows)
    assert "NCCL_TIMEOUT" in {r["event"] for r in rows}

    r = cli("last-10s", str(HANG), "--window", "10")
    assert r.returncode == 1 and "error[F300]" in r.stderr and "no unit" in r.stderr
    r = cli("last-10s", str(HANG), "--window", "999999h", "--format", "json")
    assert r.returncode == 0, r.stderr
    snap = json.loads(r.stdout)
    assert snap["window_s"] <= 31 * 60 and snap["start"] >= "2025-06-12T13:59"     # not 1911
    assert "note: --window 999999h is longer than the run" in r.stderr
    r = cli("last-10s", str(HANG), "--at", "-99999999999999h", "--format", "json")  # no overflow traceback
    assert r.returncode == 0 and "Traceback" not in r.stderr

    r = cli("events", str(HANG), "--since", "14:30:41", "--until", "14:00:00")
    assert r.returncode == 1 and "--since 14:30:41 is after --until 14:00:00" in r.stderr
    r = cli("timeline", str(HANG), "--steps", "40:30")
    assert r.returncode == 1 and "'40:30' runs backwards: step 40 is after step 30" in r.stderr


# --- 6. the user's paths, rounded CSV ---------------------------------------------------------------

def test_lint_names_the_logs_given(tmp_path: Path) -> None:
    out = run("lint", "sample_logs/hang")
    cache = os.environ["FORENSICS_CACHE"]
    assert "sample_logs/hang" in out.splitlines()[0] and cache not in out
    assert json.loads(run("lint", "sample_logs/hang", "-f", "json"))["store"] == "sample_logs/hang"


def test_csv_rounds_floats_and_jsonl_keeps_them() -> None:
    full = [json.loads(x) for x in run("timeline", str(HANG), "--format", "jsonl").splitlines()]
    noisy = [(i, k) for i, r in enumerate(full) for k, v in r.items()
             if isinstance(v, float) and abs(v) < 1e6 and len(repr(v).replace("-", "").lstrip("0.")) > 14]
    assert noisy, "the sample has binary-arithmetic noise to round (else this test proves nothing)"
    rows = list(csv.DictReader(io.StringIO(run("timeline", str(HANG), "--format", "csv"))))
    for i, k in noisy:
        v = rows[i][k]
        assert float(v) == pytest.approx(full[i][k], rel=1e-11) and len(v.replace(".", "").lstrip("0")) <= 13, (k, v)
    assert not re.search(r"\d\.\d*(0{6,}|9{6,})\d", run("timeline", str(HANG), "--format", "csv"))


def test_fit_gives_way_in_order_and_never_cuts_a_key_column() -> None:
    from forensics.render.layout import SEPARATOR, Col, fit

    cols = [Col("rank", "right", key=True), Col("host", drop=9), Col("silent", drop=1),
            Col("message", wrap=8, drop=2), Col("file:line", key=True, path=True)]
    rows = [["12", "node-017", "30m01s", "a message of some forty characters, long", "run7/rank_12.jsonl:1234"]]
    total = lambda w: sum(w) + SEPARATOR * (len(w) - 1)                   # noqa: E731
    shown, widths, dropped = fit(cols, rows, 200)
    assert dropped == [] and widths == [4, 8, 6, 40, 23]                  # room: natural widths
    shown, widths, dropped = fit(cols, rows, 60)
    assert dropped == ["host"] and total(widths) <= 60 and widths[0] == 4  # less useful than the text: first
    assert widths[2] >= 8                                                 # the message wraps, not cut
    shown, widths, dropped = fit(cols, rows, 40)
    assert [cols[i].head for i in shown] == ["rank", "silent", "file:line"] and total(widths) <= 40
    assert dropped == ["host", "message"]
    assert widths[-1] == len("run7/rank_12.jsonl:1234")                   # the path is never broken
    shown, widths, dropped = fit(cols, rows, 10)                          # too narrow even for the keys:
    assert [cols[i].head for i in shown] == ["rank", "file:line"] and widths == [4, 23]   # whole, wider than asked
