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

app = typer.Typer(
    name="forensics",
    help="Offline log forensics for distributed deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        from .ingest import native

        scanner = "compiled" if native.available() else "pure Python (slower; the C extension is not built)"
        print(f"forensics {__version__} (JSON-lines scanner: {scanner})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    pass


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


@app.command()
def ingest(
    paths: list[str] = typer.Argument(..., help="Log files, directories or quoted globs ('logs/**/*.jsonl.gz')."),
    output: str = typer.Option(..., "-o", "--output", help="Store directory to create or update."),
    append: bool = typer.Option(False, "--append", help="Keep files already in the store; add new files and new tails."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", help="Worker processes (default: all cores)."),
    gpu_map: Optional[list[str]] = typer.Option(None, "--gpu-map", help="HOST:GPU=RANK for telemetry, repeatable, or @FILE."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List every file: format recognised, lines, events, rejects."),
) -> None:
    """Read logs into a Parquet store; every line becomes an event or a stored reject."""
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
    store: str = typer.Argument(..., help="A store written by `forensics ingest`."),
    reason: Optional[str] = typer.Option(None, "--reason", help="Only rejects whose reason contains this text."),
    file: Optional[str] = typer.Option(None, "--file", help="Only rejects from files whose path contains this text."),
    limit: int = typer.Option(50, "--limit", "-n", help="Rows to show (0 = all)."),
    fmt: str = typer.Option("table", "--format", help="table | jsonl | csv"),
) -> None:
    """List the lines ingest could not turn into events: file, line, reason and the raw bytes."""
    from .render.ingest import render_rejects
    from .store import open_store

    run = open_store(store)
    render_rejects(run, reason=reason, file=file, limit=limit, fmt=fmt, console=out)


class ReportFormat(str, Enum):
    text = "text"
    md = "md"
    json = "json"
    html = "html"
    junit = "junit"


def _fail_on_option(command: str) -> Callable[[Optional[str]], Optional[str]]:
    """A --fail-on value checked as the command line is parsed (a bad one is a usage error, exit 2)."""
    def check(value: Optional[str]) -> Optional[str]:
        if value is not None:
            from .config import parse_fail_on

            try:
                parse_fail_on(value, command=command)
            except ForensicsError as e:
                raise typer.BadParameter(f"{e.reason}; {e.help}" if e.help else str(e.reason)) from None
        return value
    return check


_FAIL_ON_HELP = ("Exit 3 when a finding is at least this severe (CI): LEVEL, or LEVEL:SEL,SEL limited to layers / kinds "
                 "(-SEL leaves one out), e.g. WARN:communication,physical or WARN:-throughput_drop. log_hygiene "
                 "findings count only when named (WARN:log_hygiene).")
_SUMMARY_HELP = "Also append a short Markdown job summary to this file (e.g. $GITHUB_STEP_SUMMARY)."
_CONFIG_HELP = "Config file (forensics.toml or a pyproject.toml with [tool.forensics]); default: the first found upward from the logs."


def _write(output: Optional[str], text: str) -> None:
    from pathlib import Path

    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as e:
            raise ForensicsError(f"cannot write {output}", where=output, reason=e.strerror, code=BAD_ARGUMENT) from None
        err.print(f"wrote {output}", markup=False, highlight=False)
    else:
        sys.stdout.write(text)


@app.command()
def diagnose(
    paths: list[str] = typer.Argument(..., help="A store, or log files, directories or quoted globs (ingested into a cache)."),
    fmt: ReportFormat = typer.Option(ReportFormat.text, "--format", "-f", case_sensitive=False, help="text | md | json | html (one self-contained file with plots) | junit (CI test report)"),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write the report to this file instead of stdout."),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", callback=_fail_on_option("diagnose"), metavar="LEVEL[:SEL,...]", help=_FAIL_ON_HELP),
    rules: Optional[list[str]] = typer.Option(None, "--rules", help="Another rule folder, repeatable; a rule with a built-in id replaces it."),
    width: Optional[int] = typer.Option(None, "--width", min=40, help="Text width (default: the terminal's; 100 when not a terminal)."),
    no_redact: bool = typer.Option(False, "--no-redact", help="Do not mask API keys, tokens and passwords found in log text."),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", help="Also mask matches of this regex (repeatable)."),
    summary: Optional[str] = typer.Option(None, "--summary", metavar="FILE", help=_SUMMARY_HELP),
    config: Optional[str] = typer.Option(None, "--config", metavar="FILE", help=_CONFIG_HELP),
) -> None:
    """What broke or slowed the run, on which rank(s), and why: physical -> resource -> communication -> training."""
    from pathlib import Path

    from .passes import diagnose as run_diagnose
    from .report import render
    from .rules import builtin_rules_dir
    from .config import fail_policy, load_config
    from .report.redact import add_patterns
    from .run import open_run

    cfg = load_config(paths, config)                 # precedence: CLI > config > defaults
    policy = fail_policy(fail_on, cfg, "diagnose")
    add_patterns([*cfg.redact_patterns, *(redact_pattern or [])])
    cb, stop = _progress()
    try:
        run = open_run(paths, progress=cb, gpu_map=cfg.gpu_map or None)
    finally:
        stop()
    extra = [*cfg.rule_dirs, *(rules or [])]
    rule_dirs = [builtin_rules_dir(), *map(Path, extra)] if extra else None
    # a config file is passed on only when there is one: without it the defaults apply unchanged
    report = (run_diagnose(run, rule_dirs=rule_dirs, config=cfg) if cfg.source is not None
              else run_diagnose(run, rule_dirs=rule_dirs))
    report.config = cfg.to_json()
    tty = output is None and sys.stdout.isatty()
    if fmt is ReportFormat.junit:
        from .report.junit import diagnosis_junit

        text = diagnosis_junit(report, policy, rule_dirs=rule_dirs, config=cfg, redact=not no_redact)
    else:
        text = render(report, fmt.value, width=width or (out.width if tty else 100), redact=not no_redact,
                      color=tty and fmt is ReportFormat.text, run=run)
    _write(output, text)
    if summary:
        from .report.summary import append_summary, render_summary

        append_summary(summary, render_summary(report, policy, redact=not no_redact))
    if policy is not None and any(policy.trips(f) for f in report.findings):
        raise typer.Exit(3)


rules_app = typer.Typer(help="The rule files: list them, check them.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(rules_app, name="rules")


@rules_app.command("list")
def rules_list(
    rules: Optional[list[str]] = typer.Option(None, "--rules", help="Another rule folder, repeatable (added to the built-in rules)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show each rule's condition and file."),
) -> None:
    """The rules a diagnosis runs: id, level, layer, kind, title."""
    from pathlib import Path

    from .render.rules import render_rule_list
    from .rules import builtin_rules_dir, load_rules

    render_rule_list(load_rules([builtin_rules_dir(), *map(Path, rules or [])]), out, verbose=verbose)


@rules_app.command("check")
def rules_check(
    dirs: Optional[list[str]] = typer.Argument(None, help="Rule folders or files (default: the built-in rules)."),
) -> None:
    """Validate rule files and run their examples; every error as file:key: message, exit 1 if any."""
    from pathlib import Path

    from .render.rules import render_rule_errors
    from .rules import check_rules, load_rules

    paths = [Path(d) for d in dirs] if dirs else None
    errors = check_rules(paths)
    if errors:
        render_rule_errors(errors, out)
        raise typer.Exit(1)
    rules = load_rules(paths)
    from .report.model import KINDS

    print(f"ok: {len(rules)} rules, {sum(len(r.examples) for r in rules)} examples pass; a next step for each of {len(KINDS)} kinds")


# --- post-mortem queries: events, ranks, timeline, last-10s, sql (forensics.timeline/query) ---

class RowFormat(str, Enum):
    table = "table"
    jsonl = "jsonl"
    csv = "csv"
    json = "json"


class SnapshotFormat(str, Enum):
    table = "table"
    json = "json"


_STORE_OR_LOGS = "A store, or log files, directories or quoted globs (ingested once into a cache)."


def _open_run(paths: list[str], gpu_map: list[str] | None = None):  # -> Run
    from .run import open_run

    cb, stop = _progress()
    try:
        return open_run(paths, progress=cb, gpu_map=gpu_map)
    finally:
        stop()


def _table_console() -> Console:
    """Tables are wide: when stdout is not a terminal, do not squeeze them into 80 columns
    (unless COLUMNS says how wide)."""
    import os

    return out if sys.stdout.isatty() else Console(soft_wrap=True, width=None if os.environ.get("COLUMNS") else 240)


@app.command()
def events(
    paths: list[str] = typer.Argument(..., help=_STORE_OR_LOGS),
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", help="Only this rank; repeatable."),
    event: Optional[list[str]] = typer.Option(None, "--event", "-e", help="Only these event ids (comma-separated or repeated; NCCL_* wildcards)."),
    level: Optional[str] = typer.Option(None, "--level", "-l", help="Only this level or above: DEBUG < INFO < WARN < ERROR."),
    since: Optional[str] = typer.Option(None, "--since", help="From this time: ISO, -30s (before the end), step:1500."),
    until: Optional[str] = typer.Option(None, "--until", help="Up to this time (same forms as --since)."),
    grep: Optional[str] = typer.Option(None, "--grep", "-g", help="Only events whose message or extra contains this text (any case)."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0, help="At most N events (0 = all; table default 100, pipes all)."),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, help="table | jsonl | csv | json"),
) -> None:
    """One rank's or one event type's events in time order ("filter all events of one card")."""
    from .query import filter_events
    from .render.events import render_events

    run = _open_run(paths)
    n = limit if limit is not None else (100 if fmt is RowFormat.table else 0)
    df = filter_events(run, ranks=rank, event=event, level=level, since=since, until=until, grep=grep,
                       limit=n + 1 if n else None).collect()
    render_events(df, fmt.value, _table_console(), limit=n)


@app.command()
def ranks(
    paths: list[str] = typer.Argument(..., help=_STORE_OR_LOGS),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, help="table | jsonl | csv | json"),
) -> None:
    """One row per rank: progress, median phase times, GPU, warnings, who went silent first."""
    from .render.timeline import render_ranks
    from .timeline import monotonicity, rank_summary

    run = _open_run(paths)
    render_ranks(rank_summary(run), fmt.value, _table_console(),
                 monotonic=monotonicity(run) if fmt is RowFormat.table else None)


@app.command()
def timeline(
    paths: list[str] = typer.Argument(..., help=_STORE_OR_LOGS),
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", help="Show only this rank; repeatable (arrival order is still among all)."),
    steps: Optional[str] = typer.Option(None, "--steps", help="A:B inclusive, A: or :B open, : all (default: the last 20 steps)."),
    per_rank: Optional[bool] = typer.Option(None, "--per-rank/--per-step", help="One row per (step, rank), or per step (default: per rank up to 8 ranks)."),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, help="table | jsonl | csv | json"),
) -> None:
    """Per-step phases per rank, aligned by step number; who arrives last at each collective."""
    from .render.timeline import render_timeline
    from .timeline import build_timeline, parse_step_range

    run = _open_run(paths)
    tl = build_timeline(run, parse_step_range(steps) if steps else None)
    render_timeline(tl.rows, fmt.value, _table_console(), offsets=tl.offsets, ranks=rank, span=tl.span, per_rank=per_rank)


@app.command("last-10s")
def last_10s(
    paths: list[str] = typer.Argument(..., help=_STORE_OR_LOGS),
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", help="Only this rank; repeatable."),
    window: str = typer.Option("10s", "--window", "-w", help="How far back from the stop: 10s, 500ms, 2m."),
    at: Optional[str] = typer.Option(None, "--at", help="The stop, instead of the first fatal ERROR or the last event: ISO, -30s, step:1500."),
    per_rank: int = typer.Option(10, "--per-rank", "-n", min=0, help="Newest events shown per rank in the window (0 = none)."),
    fmt: SnapshotFormat = typer.Option(SnapshotFormat.table, "--format", "-f", case_sensitive=False, help="table | json"),
) -> None:
    """What every rank was doing in the last seconds before the run stopped."""
    from .render.timeline import render_snapshot
    from .timeline import last_window, parse_duration, parse_time_spec

    run = _open_run(paths)
    snap = last_window(run, parse_duration(window), at=parse_time_spec(at, run) if at else None, ranks=rank, limit=per_rank)
    render_snapshot(snap, fmt.value, _table_console())


@app.command()
def sql(
    paths: list[str] = typer.Argument(..., help=_STORE_OR_LOGS),
    query: str = typer.Argument(..., help='SQL over the tables events, rejects, ranks: "SELECT rank, count(*) FROM events GROUP BY rank".'),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, help="table | jsonl | csv | json"),
) -> None:
    """SQL over the store: tables events, rejects and ranks."""
    from .query import sql as run_sql
    from .render.events import render_frame

    render_frame(run_sql(_open_run(paths), query), fmt.value, _table_console())


# --- log hygiene and exports (forensics.lint, forensics.export) ---

class LintFormat(str, Enum):
    text = "text"
    json = "json"
    junit = "junit"


@app.command()
def lint(
    paths: list[str] = typer.Argument(..., help=_STORE_OR_LOGS),
    fmt: LintFormat = typer.Option(LintFormat.text, "--format", "-f", case_sensitive=False, help="text | json | junit"),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", callback=_fail_on_option("lint"), metavar="LEVEL[:CHECK,...]",
                                          help="Exit 3 when a check is at least WARN or FAIL (CI): LEVEL or LEVEL:CHECK,CHECK (-CHECK leaves one out)."),
    summary: Optional[str] = typer.Option(None, "--summary", metavar="FILE", help=_SUMMARY_HELP),
    config: Optional[str] = typer.Option(None, "--config", metavar="FILE", help=_CONFIG_HELP),
) -> None:
    """The log-review checklist (seed 000 §4.5): rank and event on every line, comm/step ratio, ERROR floods, sampling, ..."""
    from .lint import lint as run_lint
    from .render.lint import render_lint, render_lint_json

    from .config import fail_policy, load_config

    cfg = load_config(paths, config)
    result = run_lint(_open_run(paths, gpu_map=cfg.gpu_map or None))
    policy = fail_policy(fail_on, cfg, "lint", names=[c.id for c in result.checks])
    if fmt is LintFormat.json:
        sys.stdout.write(render_lint_json(result))
    elif fmt is LintFormat.junit:
        from .report.junit import lint_junit

        sys.stdout.write(lint_junit(result, policy))
    else:
        render_lint(result, _table_console())
    if summary:
        from .report.summary import append_summary, render_lint_summary

        append_summary(summary, render_lint_summary(result, policy))
    if policy is not None and any(policy.trips_check(c.id, c.status) for c in result.checks):
        raise typer.Exit(3)


export_app = typer.Typer(help="Write a run in another tool's format.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(export_app, name="export")


@export_app.command("perfetto")
def export_perfetto(
    paths: list[str] = typer.Argument(..., help=_STORE_OR_LOGS),
    output: str = typer.Option(..., "-o", "--output", help="Trace file (Chrome Trace Event JSON; gzip when it ends in .gz)."),
    steps: Optional[str] = typer.Option(None, "--steps", help="A:B inclusive, A: or :B open (default: all steps)."),
    ranks: Optional[str] = typer.Option(None, "--ranks", help="Only these ranks: 0,3,5-7."),
    max_events: int = typer.Option(500_000, "--max-events", help="Cut bigger traces by keeping every k-th step (a message says so)."),
    no_redact: bool = typer.Option(False, "--no-redact", help="Do not mask API keys, tokens and passwords in messages."),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", help="Also mask matches of this regex (repeatable)."),
) -> None:
    """A timeline for ui.perfetto.dev / chrome://tracing: a track per rank grouped by host, step phases, WARN/ERROR, GPU counters."""
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
