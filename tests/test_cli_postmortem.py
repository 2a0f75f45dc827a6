"""The post-mortem commands through the CLI: events, ranks, timeline, last-10s, sql, every format."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.schema import EVENT_SCHEMA
from test_timeline import ingest

runner = CliRunner()


def run(*args: str) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 6-rank run on 3 hosts: rank 4 computes 200 ms longer, rank 5 dies after step 7, node1's
    clock runs 80 ms ahead, rank 1 logs an NCCL timeout long after the others went quiet."""
    tmp = tmp_path_factory.mktemp("pm")
    err = {"t": 60.0, "level": "ERROR", "event": "NCCL_TIMEOUT", "message": "rank=1 waiting on rank=5 for 50s",
           "extra": {"collective": "allreduce", "timeout_s": 50}}
    run_, _ = ingest(tmp, ranks=6, steps=12, slow_ms={4: 200.0}, last_step={5: 7}, offsets_ms={"node1": 80.0},
                     extra={1: [err]})
    return run_.path, tmp / "logs"


def test_events_formats(store: tuple[Path, Path]) -> None:
    st, _ = store
    rows = [json.loads(x) for x in run("events", str(st), "--rank", "2", "--format", "jsonl").splitlines()]
    assert rows and {r["rank"] for r in rows} == {2}
    assert list(rows[0]) == list(EVENT_SCHEMA)           # keyed by the store's column names
    assert all(r["timestamp"].endswith("Z") for r in rows)
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    arr = json.loads(run("events", str(st), "-r", "2", "-e", "ALLREDUCE", "-f", "json"))
    assert len(arr) == 8 and {a["event"] for a in arr} == {"ALLREDUCE"} and arr[0]["comm_ms"] > 0
    table = list(csv.DictReader(io.StringIO(run("events", str(st), "--level", "ERROR", "--format", "csv"))))
    assert [(t["rank"], t["event"]) for t in table] == [("1", "NCCL_TIMEOUT")]
    out = run("events", str(st), "-r", "3", "-e", "DATA_LOAD_TIME", "--limit", "2")
    assert "DATA_LOAD_TIME" in out and "data_load_ms" in out and "first 2 events shown" in out
    assert "temp_c" not in out                            # all-null metrics are not columns
    out = run("events", str(st), "--grep", "waiting on", "--since", "step:3", "--until", "-0s")
    assert "NCCL_TIMEOUT" in out and "rank_1.jsonl:" in out
    assert "no events match" in run("events", str(st), "--event", "NOPE")


def test_ranks_formats(store: tuple[Path, Path]) -> None:
    st, _ = store
    out = run("ranks", str(st))
    assert "first to go silent: rank 5" in out and "1 step(s) behind" in out
    assert "node1 +" in out                               # the skewed clock is reported
    rows = json.loads(run("ranks", str(st), "--format", "json"))
    assert [r["rank"] for r in rows] == list(range(6))
    r5 = rows[5]
    assert r5["lag_steps"] == 1 and r5["silent_order"] == 1 and r5["last_ts"].endswith("Z")
    assert rows[4]["wait_ms"] == 0.0 and rows[0]["wait_ms"] > 150
    assert rows[1]["error"] == 1
    lines = run("ranks", str(st), "-f", "jsonl").splitlines()
    assert len(lines) == 6
    assert next(csv.DictReader(io.StringIO(run("ranks", str(st), "-f", "csv"))))["rank"] == "0"


def test_timeline_formats(store: tuple[Path, Path]) -> None:
    st, _ = store
    out = run("timeline", str(st), "--steps", "2:5")
    assert "steps 2-5" in out and "arrived last: rank 4 in 4 of 4 steps" in out
    out = run("timeline", str(st), "--steps", "2:5", "--per-step")
    assert "last to arrive" in out
    rows = [json.loads(x) for x in run("timeline", str(st), "--steps", "3:3", "-f", "jsonl").splitlines()]
    assert {r["rank"] for r in rows} == set(range(6)) and {r["last_rank"] for r in rows} == {4}
    assert all(r["t_end"].endswith("Z") for r in rows)
    one = json.loads(run("timeline", str(st), "--steps", "3:4", "--rank", "0", "-f", "json"))
    assert {r["rank"] for r in one} == {0} and {r["last_rank"] for r in one} == {4}   # last among all ranks
    out = run("timeline", str(st))                        # default: the last steps, incl. the unfinished one
    assert "never finished" in out
    assert "step,rank" in run("timeline", str(st), "-f", "csv").splitlines()[0]


def test_last_10s_formats(store: tuple[Path, Path]) -> None:
    st, _ = store
    out = run("last-10s", str(st))
    assert "first fatal ERROR: NCCL_TIMEOUT on rank 1" in out
    assert "no events in the window: rank(s) 0,2-5" in out
    snap = json.loads(run("last-10s", str(st), "--format", "json"))
    assert snap["quiet_ranks"] == [0, 2, 3, 4, 5] and snap["missing_ranks"] == []
    ranks = {r["rank"]: r for r in snap["ranks"]}
    assert ranks[5]["step"] == 7 and ranks[0]["step"] == 8 and ranks[1]["last_event"] == "NCCL_TIMEOUT"
    assert ranks[5]["silent_s"] > ranks[0]["silent_s"] > 40
    snap = json.loads(run("last-10s", str(st), "--rank", "4", "--rank", "5", "--window", "2s", "--at", "step:6", "-f", "json"))
    assert snap["how"] == "given (--at)" and [r["rank"] for r in snap["ranks"]] == [4, 5]
    assert snap["window_s"] == 2.0 and {e["rank"] for e in snap["events"]} == {4, 5}
    assert all(e["timestamp"] <= snap["stop"] for e in snap["events"])


def test_sql_formats(store: tuple[Path, Path]) -> None:
    st, _ = store
    out = run("sql", str(st), "SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank")
    assert "6 rows" in out
    rows = json.loads(run("sql", str(st), "SELECT rank, lag_steps FROM ranks WHERE lag_steps > 0", "-f", "json"))
    assert rows == [{"rank": 5, "lag_steps": 1}]
    assert run("sql", str(st), "SELECT event FROM events WHERE level = 'ERROR'", "-f", "csv") == "event\nNCCL_TIMEOUT\n"
    assert json.loads(run("sql", str(st), "SELECT max(step) AS s FROM events", "-f", "jsonl")) == {"s": 8}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True)


def test_raw_log_paths_errors_and_usage(store: tuple[Path, Path], tmp_path: Path) -> None:
    st, logs = store
    r = cli("last-10s", str(logs), "--format", "json")     # a log folder, ingested into the cache
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["quiet_ranks"] == [0, 2, 3, 4, 5]
    r = cli("sql", str(st), "SELECT nope FROM events")
    assert r.returncode == 1 and "error[F500]" in r.stderr and "Traceback" not in r.stderr
    r = cli("events", str(st), "--since", "last tuesday")
    assert r.returncode == 1 and "error[F300]" in r.stderr
    r = cli("ranks", str(st), "--format", "xml")
    assert r.returncode == 2
    r = cli("last-10s", str(tmp_path / "nothing-here"))
    assert r.returncode == 1 and "error[" in r.stderr


REPO = Path(__file__).resolve().parents[1]
POSTMORTEM_DOC = REPO / "docs" / "post-mortem.md"


def readme_postmortem_blocks() -> list[tuple[str, list[str]]]:
    """(command line, printed lines) for each `$ forensics ...` shown in docs/post-mortem.md."""
    text = POSTMORTEM_DOC.read_text()
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("    $ forensics "):
            blocks.append((line[len("    $ forensics "):], []))
        elif blocks and line.startswith("    "):
            blocks[-1][1].append(line[4:].rstrip())
        elif blocks and line.strip():
            blocks.append(("", []))   # prose ends a block
    return [(c, out) for c, out in blocks if c and out]


def test_readme_postmortem_output_is_real(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk-through in the README is what the commands print (at 150 columns). When a change
    alters it on purpose, run the commands again and paste their output."""
    import shlex

    monkeypatch.chdir(REPO)
    blocks = readme_postmortem_blocks()
    assert {shlex.split(c)[0] for c, _ in blocks} >= {"last-10s", "ranks", "events", "timeline", "sql"}
    for cmd, shown in blocks:
        r = runner.invoke(app, shlex.split(cmd), env={"COLUMNS": "150"})
        assert r.exit_code == 0, (cmd, r.output)
        got = [x.rstrip() for x in r.stdout.replace(str(REPO) + "/", "/work/main/").splitlines()]
        assert got == shown, cmd


@pytest.mark.parametrize("args", [
    ("timeline", "--rank", "99"),
    ("events", "--rank", "12"),
    ("last-10s", "--rank", "6"),
])
def test_a_rank_the_run_does_not_have_is_an_error_naming_the_ranks(store: tuple[Path, Path], args: tuple[str, ...]) -> None:
    st, _ = store
    r = cli(args[0], str(st), *args[1:])
    assert r.returncode == 1 and "error[F300]" in r.stderr and "the run has ranks 0-5" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.parametrize("cmd", ["timeline", "events", "last-10s"])
def test_a_negative_rank_is_a_usage_error(store: tuple[Path, Path], cmd: str) -> None:
    st, _ = store
    assert cli(cmd, str(st), "--rank", "-1").returncode == 2


def _snapshot(n: int):
    """A snapshot of `n` ranks: rank 7 stopped a step early (hung), rank 50 timed out at the stop,
    the others are waiting in the collective of step 42."""
    import datetime as dt

    import polars as pl

    from forensics.timeline import Snapshot

    stop = dt.datetime(2025, 6, 12, 3, 0, 0, tzinfo=dt.timezone.utc)
    rows = []
    for r in range(n):
        state = ("TRAIN_STEP", "INFO", 41, 600.0) if r == 7 else ("NCCL_TIMEOUT", "ERROR", 42, 0.0) if r == 50 else \
            ("GRAD_READY", "INFO", 42, 599.0 - r / 1000)
        rows.append({"rank": r, "host": f"node{r // 8}", "in_window": int(r == 50), "shown": int(r == 50),
                     "last_ts": stop - dt.timedelta(seconds=state[3]), "last_event": state[0], "last_level": state[1],
                     "last_message": f"rank {r}", "last_where": f"node{r // 8}/rank_{r}.jsonl:{400 + r}",
                     "silent_s": state[3], "step": state[2], "after_stop": 0})
    ranks = pl.DataFrame(rows, schema_overrides={"rank": pl.Int32, "step": pl.Int64, "in_window": pl.UInt32,
                                                 "shown": pl.UInt32, "after_stop": pl.UInt32})
    return Snapshot(stop=stop, how="given", window_s=10.0, start=stop - dt.timedelta(seconds=10), ranks=ranks,
                    events=pl.DataFrame())


@pytest.mark.parametrize("n", [64, 100, 10_240])
def test_last_10s_of_many_ranks_shows_a_row_per_group_in_the_same_state_smallest_first(n: int) -> None:
    from rich.console import Console

    from forensics.render.timeline import render_snapshot

    buf = io.StringIO()
    render_snapshot(_snapshot(n), "table", Console(file=buf, width=240, no_color=True))
    lines = buf.getvalue().splitlines()
    body = [ln for ln in lines[4:] if "│" in ln]
    if n <= 64:                 # a row per rank, as before
        assert [ln.split("│")[0].strip() for ln in body] == [str(r) for r in range(n)]
        return
    # the hung rank first, then the one that timed out, then everyone else in one row
    assert [ln.split("│")[0].strip() for ln in body] == ["7", "50", f"0-6,8-49,51-{n - 1} ({n - 2:,})"]
    assert "41" in body[0].split("│")[2] and "ERROR" in body[1]
    assert f"{len({r // 8 for r in range(n) if r not in (7, 50)}):,} hosts" in body[2]
    assert f"{n:,} ranks in 3 groups of the same step, level and last event" in buf.getvalue()
