"""The command line: parse arguments, call the library, render. Nothing else lives here.

Each command is a few lines; the work is in the library. Reports go to stdout, progress and
diagnostics to stderr. A ForensicsError is printed as one block and exits 1; usage errors exit 2
(typer); `--fail-on` trips exit 3.
"""
from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Any, Callable, Optional

import typer
from rich.console import Console

from . import __version__
from .errors import BAD_ARGUMENT, ForensicsError
from .render.usage import ReadableGroup, console as make_console, styled

app = typer.Typer(
    name="forensics",
    help="Offline log forensics for distributed deep-learning training. Every command reads a store "
         "(written by `forensics ingest`) or the log files themselves.",
    no_args_is_help=True,
    add_completion=True,     # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    cls=ReadableGroup,       # help and usage errors in plain words, for every command (render/usage.py)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
color_mode = "auto"          # set by --color before any command runs
out = make_console()
err = make_console(stderr=True)


def _version(value: bool) -> None:
    if value:
        from .ingest import native

        scanner = "compiled" if native.available() else "pure Python (slower; the C extension is not built)"
        print(f"forensics {__version__} (JSON-lines scanner: {scanner})")
        raise typer.Exit()


class ColorMode(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    color: ColorMode = typer.Option(ColorMode.auto, "--color", case_sensitive=False, metavar="WHEN",
                                    help="Colour and bold in the output: auto (on a terminal, unless NO_COLOR is set), always or never."),
) -> None:
    global color_mode, out, err
    color_mode = color.value
    out = make_console(color_mode)
    err = make_console(color_mode, stderr=True)


def _progress() -> tuple[Callable[[str, dict[str, Any]], None] | None, Callable[[], None]]:
    """A rich progress bar on stderr when it is a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TextColumn("{task.fields[lines]:,} lines"), TextColumn("{task.fields[units]}"),
                   TimeRemainingColumn(), console=err, transient=True)
    state: dict[str, Any] = {}

    def cb(kind: str, d: dict[str, Any]) -> None:
        if kind == "start":
            bar.start()
            state["task"] = bar.add_task("ingest", total=d["bytes"], lines=0, units=f"0/{d['units']} parts")
            state["lines"] = 0
            state["units"] = (0, d["units"])
        elif kind == "unit":
            state["lines"] += d["lines"]
            done, total = state["units"][0] + 1, state["units"][1]
            state["units"] = (done, total)
            bar.update(state["task"], completed=d["bytes_done"], lines=state["lines"], units=f"{done}/{total} parts",
                       description=f"ingest {d['path'].rsplit('/', 1)[-1][:30]}")

    return cb, bar.stop


class RowFormat(str, Enum):
    table = "table"
    jsonl = "jsonl"
    csv = "csv"
    json = "json"


_STORE_OR_LOGS = "A store, or log files, directories or quoted globs (read once into a cache)."
_ROW_FORMATS = "table, jsonl (one JSON object per line), csv or json (one array)"
_TIME_FORMS = ("From this time: 2025-06-12T14:30:00Z (ISO-8601; no zone = UTC), 14:30:00 (time of day, UTC, on the "
               "day of the run's last event), -30s (before the last event) or step:1500 (when the first rank logged it).")


@app.command()
def ingest(
    paths: list[str] = typer.Argument(..., metavar="LOGS...", help="Log files, directories or quoted globs ('logs/**/*.jsonl.gz')."),
    output: str = typer.Option(..., "-o", "--output", metavar="STORE", help="Store directory to create or update."),
    append: bool = typer.Option(False, "--append", help="Keep what the store holds; read only new files and the new end of files that grew."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, metavar="N", help="Worker processes (default: all cores)."),
    gpu_map: Optional[list[str]] = typer.Option(None, "--gpu-map", metavar="HOST:GPU=RANK",
                                                help="Which rank used GPU number GPU on host HOST, for GPU telemetry that names no rank (node3:0=24); repeatable, or @FILE with one per line."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List every file: the format recognised, lines, events, rejected lines."),
) -> None:
    """Read logs into a store. Every line becomes an event, or a rejected line kept with its reason; a store is a folder of Parquet files."""
    from .ingest import ingest as run_ingest
    from .render.ingest import render_summary

    cb, stop = _progress()
    try:
        summary = run_ingest(paths, output, append=append, workers=workers, gpu_map=gpu_map, progress=cb)
    finally:
        stop()
    if as_json:
        print(json.dumps(summary.to_dict(), default=str))
    else:
        render_summary(summary, out, verbose=verbose)


@app.command()
def rejects(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    reason: Optional[str] = typer.Option(None, "--reason", metavar="TEXT", help="Only rejects whose reason contains this text."),
    file: Optional[str] = typer.Option(None, "--file", metavar="TEXT", help="Only rejects from files whose path contains this text."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0, metavar="N", help="At most N lines (0 = all; table default 50, other formats all)."),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
) -> None:
    """List the lines that did not become events. File, line, reason and the raw bytes of each."""
    from .render.ingest import render_rejects

    n = limit if limit is not None else (50 if fmt is RowFormat.table else 0)
    render_rejects(_open_run(paths), reason=reason, file=file, limit=n, fmt=fmt.value, console=_table_console())


class ReportFormat(str, Enum):
    text = "text"
    md = "md"
    json = "json"
    html = "html"


# `diagnose -o FILE` without --format: the format its suffix names (anything else: text)
REPORT_SUFFIXES = {".txt": "text", ".text": "text", ".md": "md", ".markdown": "md", ".json": "json",
                   ".html": "html", ".htm": "html"}


def _report_format(fmt: "ReportFormat | None", output: str | None) -> "ReportFormat":
    from pathlib import Path

    implied = REPORT_SUFFIXES.get(Path(output).suffix.lower()) if output else None
    if fmt is None:
        return ReportFormat(implied or "text")
    if implied and implied != fmt.value:
        err.print(f"note: writing {fmt.value} to {output}, as --format says (its suffix suggests {implied})",
                  markup=False, highlight=False)
    return fmt


class FailLevel(str, Enum):
    INFO = "INFO"
    WARN = "WARN"
    ERROR = "ERROR"


@app.command()
def diagnose(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="A store, or the log files, directories or quoted globs of one run (read once into a cache)."),
    fmt: Optional[ReportFormat] = typer.Option(None, "--format", "-f", case_sensitive=False, metavar="FORMAT",
                                               help="text, md, json or html (one self-contained file with plots). Default: the -o file's suffix (.txt, .md, .json, .html), else text."),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write the report to this file instead of stdout."),
    fail_on: Optional[FailLevel] = typer.Option(None, "--fail-on", case_sensitive=False, metavar="LEVEL", help="Exit 3 when a finding is at least this severe: INFO, WARN or ERROR (for CI)."),
    rules: Optional[list[str]] = typer.Option(None, "--rules", metavar="DIR", help="Another rule folder, repeatable; a rule with the id of a built-in rule replaces it."),
    width: Optional[int] = typer.Option(None, "--width", min=40, metavar="N", help="Text width (default: the terminal's; 100 when not a terminal)."),
    no_redact: bool = typer.Option(False, "--no-redact", help="Do not mask API keys, tokens and passwords found in log text."),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help="Also mask matches of this regular expression (repeatable)."),
) -> None:
    """What broke or slowed the run, and why. On which rank(s), traced up the layers: physical (GPU) -> resource -> communication -> training."""
    from pathlib import Path

    from .passes import diagnose as run_diagnose
    from .report import render
    from .report.model import SEVERITIES
    from .rules import builtin_rules_dir
    from .report.redact import add_patterns

    fmt = _report_format(fmt, output)
    add_patterns(redact_pattern)
    run = _open_run(paths)
    report = run_diagnose(run, rule_dirs=[builtin_rules_dir(), *map(Path, rules)] if rules else None)
    tty = output is None and sys.stdout.isatty()
    text = render(report, fmt.value, width=width or (out.width if tty else 100), redact=not no_redact,
                  color=output is None and fmt is ReportFormat.text and styled(out), run=run)
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as e:
            raise ForensicsError(f"cannot write {output}", where=output, reason=e.strerror, code=BAD_ARGUMENT) from None
        err.print(f"wrote {output}", markup=False, highlight=False)
    else:
        sys.stdout.write(text)
    if fail_on is not None and any(SEVERITIES.index(f.severity) >= SEVERITIES.index(fail_on.value) for f in report.findings):
        raise typer.Exit(3)


rules_app = typer.Typer(help="The rules a diagnosis applies. Thresholds and conditions kept as TOML files: list them, check them.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(rules_app, name="rules")


@rules_app.command("list")
def rules_list(
    rules: Optional[list[str]] = typer.Option(None, "--rules", metavar="DIR", help="Another rule folder, repeatable (added to the built-in rules)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show each rule's condition and file."),
) -> None:
    """List the rules a diagnosis applies. Id, level, layer, kind and title of each."""
    from pathlib import Path

    from .render.rules import render_rule_list
    from .rules import builtin_rules_dir, load_rules

    render_rule_list(load_rules([builtin_rules_dir(), *map(Path, rules or [])]), out, verbose=verbose)


@rules_app.command("check")
def rules_check(
    dirs: Optional[list[str]] = typer.Argument(None, metavar="PATH...", help="Rule folders or files (default: the built-in rules)."),
) -> None:
    """Validate rule files and run their examples. Every error as file:key: message; exit 1 if any."""
    from pathlib import Path

    from .render.rules import render_rule_errors
    from .rules import check_rules, load_rules

    paths = [Path(d) for d in dirs] if dirs else None
    errors = check_rules(paths)
    if errors:
        render_rule_errors(errors, out)
        raise typer.Exit(1)
    rules = load_rules(paths)
    print(f"ok: {len(rules)} rules, {sum(len(r.examples) for r in rules)} examples pass")


# --- post-mortem queries: events, ranks, timeline, last-10s, sql (forensics.timeline/query) ---

class SnapshotFormat(str, Enum):
    table = "table"
    json = "json"


def _one_run(paths: list[str]) -> None:
    """A command reads one run: one store, or the log files of one run. A store given with
    other paths would be read as if it were a log folder."""
    from .store import is_store

    stores = [p for p in paths if is_store(p)] if len(paths) > 1 else []
    if stores:
        what = (f"{len(stores)} stores given: {', '.join(stores)}" if len(stores) > 1
                else f"{stores[0]} is a store, given together with other paths")
        raise ForensicsError(
            what, where=stores[0],
            reason="a command reads one run: a single store, or the log files of one run",
            help="run the command once per store; to read logs from several folders as one run, "
                 "give the log folders (not stores), or ingest them into one store: forensics ingest LOGS... -o STORE",
            code=BAD_ARGUMENT)


def _open_run(paths: list[str]):  # -> Run
    from .run import open_run

    _one_run(paths)
    cb, stop = _progress()
    try:
        return open_run(paths, progress=cb)
    finally:
        stop()


def _table_console() -> Console:
    """Tables are wide: when stdout is not a terminal, do not squeeze them into 80 columns
    (unless COLUMNS says how wide)."""
    import os

    return out if sys.stdout.isatty() else make_console(color_mode, width=None if os.environ.get("COLUMNS") else 240)


@app.command()
def events(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", metavar="N", help="Only this rank; repeatable."),
    event: Optional[list[str]] = typer.Option(None, "--event", "-e", metavar="EVENT", help="Only these event ids (comma-separated or repeated; NCCL_* matches every NCCL_ event)."),
    level: Optional[str] = typer.Option(None, "--level", "-l", metavar="LEVEL", help="Only this level or above: DEBUG < INFO < WARN < ERROR."),
    since: Optional[str] = typer.Option(None, "--since", metavar="TIME", help=_TIME_FORMS),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME", help="Up to this time (same forms as --since)."),
    grep: Optional[str] = typer.Option(None, "--grep", "-g", metavar="TEXT", help="Only events whose message or extra fields contain this text (any case)."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0, metavar="N", help="At most N events (0 = all; table default 100, other formats all)."),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
) -> None:
    """One rank's or one event type's events, in time order. ("Filter all events of one card.")"""
    from .query import filter_events
    from .render.events import render_events
    from .timeline import parse_time_range

    run = _open_run(paths)
    t0, t1 = parse_time_range(since, until, run)
    n = limit if limit is not None else (100 if fmt is RowFormat.table else 0)
    df = filter_events(run, ranks=rank, event=event, level=level, since=t0, until=t1, grep=grep,
                       limit=n + 1 if n else None).collect()
    render_events(df, fmt.value, _table_console(), limit=n)


@app.command()
def ranks(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
) -> None:
    """One row per rank: progress, timings, GPU and silence. Last step and event, median step, data-loading, communication and wait times, GPU, warnings, who went silent first."""
    from .render.timeline import render_ranks
    from .timeline import monotonicity, rank_summary

    run = _open_run(paths)
    render_ranks(rank_summary(run), fmt.value, _table_console(),
                 monotonic=monotonicity(run) if fmt is RowFormat.table else None)


@app.command()
def timeline(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", metavar="N", help="Show only this rank; repeatable (who arrived last is still judged among all ranks)."),
    steps: Optional[str] = typer.Option(None, "--steps", metavar="A:B", help="Steps A to B inclusive; A: or :B open, : all, or one step N (default: the last 20 steps)."),
    per_rank: Optional[bool] = typer.Option(None, "--per-rank/--per-step", help="One row per (step, rank), or one per step (default: per rank up to 8 ranks)."),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
) -> None:
    """Per-step times of every rank, aligned by step. Data loading, compute, communication and waiting, and who arrived last at each collective."""
    from .render.timeline import render_timeline
    from .timeline import build_timeline, parse_step_range

    run = _open_run(paths)
    tl = build_timeline(run, parse_step_range(steps) if steps else None)
    render_timeline(tl.rows, fmt.value, _table_console(), offsets=tl.offsets, ranks=rank, span=tl.span, per_rank=per_rank)


@app.command("last-10s")
def last_10s(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", metavar="N", help="Only this rank; repeatable."),
    window: str = typer.Option("10s", "--window", "-w", metavar="DURATION", help="How far back from the stop, with a unit: 500ms, 10s, 2m, 1h (at most the length of the run)."),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME", help="Take this as the stop, instead of the first fatal ERROR or the last event (same forms as events --since)."),
    per_rank: int = typer.Option(10, "--per-rank", "-n", min=0, metavar="N", help="Newest events shown per rank in the window (0 = none)."),
    fmt: SnapshotFormat = typer.Option(SnapshotFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help="table or json"),
) -> None:
    """What every rank did just before the run stopped. The stop is the first fatal ERROR, else the last event (or --at)."""
    from .render.timeline import render_snapshot
    from .timeline import clamp_window, last_window, parse_duration, parse_time_spec

    window_s = parse_duration(window)
    run = _open_run(paths)
    window_s, clamped = clamp_window(run, window_s)
    if clamped:
        from .render.timeline import duration_text

        err.print(f"note: --window {window} is longer than the run ({duration_text(window_s)} from its first to its last "
                  "event): the window is the whole run", markup=False, highlight=False)
    snap = last_window(run, window_s, at=parse_time_spec(at, run) if at else None, ranks=rank, limit=per_rank)
    render_snapshot(snap, fmt.value, _table_console())


@app.command()
def sql(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    query: str = typer.Argument(..., metavar="QUERY", help='SQL over the tables events, rejects, ranks: "SELECT rank, count(*) FROM events GROUP BY rank".'),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
) -> None:
    """SQL over the run. The tables events, rejects (lines not read as events) and ranks (as `forensics ranks` shows)."""
    from .query import sql as run_sql
    from .render.events import render_frame

    render_frame(run_sql(_open_run(paths), query), fmt.value, _table_console())


# --- log hygiene and exports (forensics.lint, forensics.export) ---

class LintFormat(str, Enum):
    text = "text"
    json = "json"


class LintFail(str, Enum):
    WARN = "WARN"
    FAIL = "FAIL"


@app.command()
def lint(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    fmt: LintFormat = typer.Option(LintFormat.text, "--format", "-f", case_sensitive=False, metavar="FORMAT", help="text or json"),
    fail_on: Optional[LintFail] = typer.Option(None, "--fail-on", case_sensitive=False, metavar="LEVEL", help="Exit 3 when a check is at least WARN or FAIL (for CI)."),
) -> None:
    """Check that the logs are fit for a post-mortem. A checklist: rank and event id on every line, one rank's events filterable, communication/step time plottable, no ERROR floods burying WARNs, metrics not sampled too often, no stack traces on the hot path, 72 h reach."""
    from .lint import lint as run_lint
    from .render.lint import render_lint, render_lint_json

    result = run_lint(_open_run(paths))
    if fmt is LintFormat.json:
        sys.stdout.write(render_lint_json(result))
    else:
        render_lint(result, _table_console())
    if fail_on is not None and result.trips(fail_on.value):
        raise typer.Exit(3)


export_app = typer.Typer(help="Write a run in another tool's format.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(export_app, name="export")


@export_app.command("perfetto")
def export_perfetto(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    output: str = typer.Option(..., "-o", "--output", metavar="FILE", help="Trace file (Chrome Trace Event JSON; gzip when it ends in .gz)."),
    steps: Optional[str] = typer.Option(None, "--steps", metavar="A:B", help="Steps A to B inclusive; A: or :B open (default: all steps)."),
    ranks: Optional[str] = typer.Option(None, "--ranks", metavar="LIST", help="Only these ranks: 0,3,5-7."),
    max_events: int = typer.Option(500_000, "--max-events", min=1, metavar="N", help="Largest trace: beyond it only every k-th step is kept (a note says so)."),
    no_redact: bool = typer.Option(False, "--no-redact", help="Do not mask API keys, tokens and passwords in messages."),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help="Also mask matches of this regular expression (repeatable)."),
) -> None:
    """A timeline for ui.perfetto.dev or chrome://tracing. A track per rank grouped by host: step phases, WARN/ERROR, GPU counters."""
    from .export import export_perfetto as run_export, parse_ranks, parse_steps
    from .report.redact import add_patterns

    add_patterns(redact_pattern)
    summary = run_export(_open_run(paths), output, steps=parse_steps(steps), ranks=parse_ranks(ranks),
                         max_events=max_events, redact=not no_redact)
    if summary.message:
        err.print(f"note: {summary.message}", markup=False, highlight=False)
    span = f"steps {summary.steps[0]}–{summary.steps[1]}" if summary.steps else "no steps"
    err.print(f"wrote {summary.path}: {summary.events:,} events, {len(summary.ranks)} ranks on {len(summary.hosts)} "
              f"host track(s), {span}, {summary.bytes / 1e6:.1f} MB", markup=False, highlight=False)


def main() -> None:
    try:
        app()
    except ForensicsError as e:
        err.print(e.render(), markup=False, highlight=False, emoji=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
