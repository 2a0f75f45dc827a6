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
        print(f"forensics {__version__}")
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
        render_summary(summary, out)


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


class FailLevel(str, Enum):
    INFO = "INFO"
    WARN = "WARN"
    ERROR = "ERROR"


@app.command()
def diagnose(
    paths: list[str] = typer.Argument(..., help="A store, or log files, directories or quoted globs (ingested into a cache)."),
    fmt: ReportFormat = typer.Option(ReportFormat.text, "--format", "-f", case_sensitive=False, help="text | md | json"),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write the report to this file instead of stdout."),
    fail_on: Optional[FailLevel] = typer.Option(None, "--fail-on", case_sensitive=False, help="Exit 3 when a finding is at least this severe (CI)."),
    rules: Optional[list[str]] = typer.Option(None, "--rules", help="Another rule folder, repeatable; a rule with a built-in id replaces it."),
    width: Optional[int] = typer.Option(None, "--width", min=40, help="Text width (default: the terminal's; 100 when not a terminal)."),
    no_redact: bool = typer.Option(False, "--no-redact", help="Do not mask API keys, tokens and passwords found in log text."),
) -> None:
    """What broke or slowed the run, on which rank(s), and why: physical -> resource -> communication -> training."""
    from pathlib import Path

    from .passes import diagnose as run_diagnose
    from .report import render
    from .report.model import SEVERITIES
    from .rules import builtin_rules_dir
    from .run import open_run

    cb, stop = _progress()
    try:
        run = open_run(paths, progress=cb)
    finally:
        stop()
    report = run_diagnose(run, rule_dirs=[builtin_rules_dir(), *map(Path, rules)] if rules else None)
    tty = output is None and sys.stdout.isatty()
    text = render(report, fmt.value, width=width or (out.width if tty else 100), redact=not no_redact,
                  color=tty and fmt is ReportFormat.text)
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
    print(f"ok: {len(rules)} rules, {sum(len(r.examples) for r in rules)} examples pass")


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
