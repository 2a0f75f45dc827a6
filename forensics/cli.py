"""The command line: parse arguments, call the library, render. Nothing else lives here.

Each command is a few lines; the work is in the library. Reports go to stdout, progress and
diagnostics to stderr. A ForensicsError is printed as one block and exits 1; usage errors exit 2
(typer); `--fail-on` trips exit 3.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Callable, Optional

import typer
from rich.console import Console

from . import __version__
from .errors import ForensicsError

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
                   TextColumn("{task.fields[lines]:,} lines"), TimeRemainingColumn(), console=err, transient=True)
    state: dict[str, Any] = {}

    def cb(kind: str, d: dict[str, Any]) -> None:
        if kind == "start":
            bar.start()
            state["task"] = bar.add_task("ingest", total=d["bytes"], lines=0)
            state["lines"] = 0
        elif kind == "unit":
            state["lines"] += d["lines"]
            bar.update(state["task"], completed=d["bytes_done"], lines=state["lines"],
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


def main() -> None:
    try:
        app()
    except ForensicsError as e:
        err.print(e.render(), markup=False, highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
