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
from .errors import BAD_ARGUMENT, NO_INPUT, ForensicsError
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

_NO_REDACT = "Show log text as logged: do not mask API keys, tokens, passwords and private keys."
_REDACT_PATTERN = "Also mask matches of this regex (repeatable)."


_HUGE = (1 << 31) - 1   # a count option's ceiling (polars' row index is 32-bit; a command may add to N): a usage error above it, not an OverflowError traceback


def _redacting(no_redact: bool, patterns: list[str] | None) -> bool:
    """Whether to mask secrets in what a command prints (report/redact.py is the one policy)."""
    from .report.redact import set_patterns

    set_patterns(patterns)
    return not no_redact


def _scanner_built() -> bool:
    """What `forensics.ingest.native.available()` answers, without importing the ingest package
    (numpy, pyarrow: most of a second): FORENSICS_NATIVE=0 turns the scanner off; else the build
    FORENSICS_SCAN_LIB names, or the extension pip built beside native.py, for this interpreter."""
    import os
    from importlib.machinery import EXTENSION_SUFFIXES
    from pathlib import Path

    if os.environ.get("FORENSICS_NATIVE", "1") == "0":
        return False
    lib = os.environ.get("FORENSICS_SCAN_LIB")
    if lib:
        return Path(lib).is_file()
    here = Path(__file__).resolve().parent / "ingest"
    return any((here / f"_scan{suffix}").is_file() for suffix in EXTENSION_SUFFIXES)


def _version(value: bool) -> None:
    if value:
        scanner = "compiled" if _scanner_built() else "pure Python (slower; the C extension is not built)"
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
    workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, metavar="N", help="Worker processes (default: all cores; not used with --dask, where the cluster's workers read the logs)."),
    gpu_map: Optional[list[str]] = typer.Option(None, "--gpu-map", metavar="HOST:GPU=RANK",
                                                help="Which rank used GPU number GPU on host HOST, for GPU telemetry that names no rank (node3:0=24); repeatable, or @FILE with one per line."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List every file: the format recognised, lines, events, rejected lines."),
    force: bool = typer.Option(False, "--force", help="Add the logs even if they look like another run (with --append: than the store's; without: two runs among them)."),
    dask: Optional[str] = typer.Option(None, "--dask", envvar="FORENSICS_DASK", metavar="ADDRESS",
                                       help="Run the ingest on the workers of this Dask scheduler (tcp://HOST:8786; default: $FORENSICS_DASK). The logs and the store must be on a file system every worker mounts at the same path. Needs: pip install 'forensics[dask]'."),
    config: Optional[str] = typer.Option(None, "--config", metavar="FILE", help="Config file whose [schema] section names JSON-lines fields by role (see README 'Any schema'); default: the first forensics.toml found upward from the logs."),
    skip_unreadable: bool = typer.Option(False, "--skip-unreadable", help="Skip files and folders that cannot be read (listed in the summary and the store) instead of stopping."),
) -> None:
    """Read logs into a store. Every line becomes an event, or a rejected line kept with its reason; a store is a folder of Parquet files."""
    from .config import load_config
    from .ingest import ingest as run_ingest
    from .render.ingest import render_schemas, render_summary

    if dask and workers is not None:
        err.print(f"note: --workers {workers} is not used with --dask: the Dask cluster's workers read the logs "
                  "(size the cluster instead)", markup=False, highlight=False)
    schema = load_config(paths, config).schema or None
    cb, stop = _progress()
    try:
        summary = run_ingest(paths, output, append=append, workers=workers, gpu_map=gpu_map, progress=cb, force=force,
                             dask=dask or None, schema=schema,
                             skip_unreadable=skip_unreadable)
    finally:
        stop()
    render_schemas(summary, err)
    if as_json:
        print(json.dumps(summary.to_dict(), default=str))
    else:
        render_summary(summary, out, verbose=verbose)


@app.command()
def rejects(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    reason: Optional[str] = typer.Option(None, "--reason", metavar="TEXT", help="Only rejects whose reason contains this text."),
    file: Optional[str] = typer.Option(None, "--file", metavar="TEXT", help="Only rejects from files whose path contains this text."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0, max=_HUGE, metavar="N", help="At most N lines (0 = all; table default 50, other formats all)."),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
    no_redact: bool = typer.Option(False, "--no-redact", help=_NO_REDACT),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help=_REDACT_PATTERN),
) -> None:
    """List the lines that did not become events. File, line, reason and the raw bytes of each."""
    from .render.ingest import render_rejects

    redact = _redacting(no_redact, redact_pattern)
    n = limit if limit is not None else (50 if fmt is RowFormat.table else 0)
    render_rejects(_open_run(paths), reason=reason, file=file, limit=n, fmt=fmt.value, console=_table_console(), redact=redact)


class ReportFormat(str, Enum):
    text = "text"
    md = "md"
    json = "json"
    html = "html"
    junit = "junit"


# `diagnose -o FILE` without --format: the format its suffix names (anything else: text)
REPORT_SUFFIXES = {".txt": "text", ".text": "text", ".md": "md", ".markdown": "md", ".json": "json",
                   ".html": "html", ".htm": "html", ".xml": "junit"}


def _report_format(fmt: "ReportFormat | None", output: str | None) -> "ReportFormat":
    from pathlib import Path

    implied = REPORT_SUFFIXES.get(Path(output).suffix.lower()) if output else None
    if fmt is None:
        return ReportFormat(implied or "text")
    if implied and implied != fmt.value:
        err.print(f"note: writing {fmt.value} to {output}, as --format says (its suffix suggests {implied})",
                  markup=False, highlight=False)
    return fmt


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


def _write(text: str, output: str | None, note: str = "") -> None:
    """A report to `output` (saying so on stderr, with `note`), else to stdout."""
    if output:
        from pathlib import Path

        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as e:
            raise ForensicsError(f"cannot write {output}", where=output, reason=e.strerror, code=BAD_ARGUMENT) from None
        err.print(f"wrote {output}{note}", markup=False, highlight=False)
    else:
        sys.stdout.write(text)


@app.command()
def diagnose(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="A store, or the log files, directories or quoted globs of one run (read once into a cache)."),
    fmt: Optional[ReportFormat] = typer.Option(None, "--format", "-f", case_sensitive=False, metavar="FORMAT",
                                               help="text, md, json, html (one self-contained file with plots) or junit (CI test report). "
                                                    "Default: the -o file's suffix (.txt, .md, .json, .html, .xml), else text."),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write the report to this file instead of stdout."),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", callback=_fail_on_option("diagnose"), metavar="LEVEL[:SEL,...]", help=_FAIL_ON_HELP),
    rules: Optional[list[str]] = typer.Option(None, "--rules", metavar="DIR", help="Another rule folder, repeatable; a rule with the id of a built-in rule replaces it."),
    width: Optional[int] = typer.Option(None, "--width", min=40, metavar="N", help="Text width (default: the terminal's; 100 when not a terminal)."),
    no_redact: bool = typer.Option(False, "--no-redact", help=_NO_REDACT),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help=_REDACT_PATTERN),
    gpu_map: Optional[list[str]] = typer.Option(None, "--gpu-map", metavar="HOST:GPU=RANK", help="Which rank used GPU number GPU on host HOST, for telemetry and local-rank console lines; repeatable, or @FILE (as ingest)."),
    summary: Optional[str] = typer.Option(None, "--summary", metavar="FILE", help=_SUMMARY_HELP),
    config: Optional[str] = typer.Option(None, "--config", metavar="FILE", help=_CONFIG_HELP),
) -> None:
    """What broke or slowed the run, and why. On which rank(s), traced up the layers: physical (GPU) -> resource -> communication -> training."""
    from pathlib import Path

    from .config import fail_policy, fails, load_config
    from .passes import diagnose as run_diagnose
    from .report import render
    from .rules import builtin_rules_dir

    fmt = _report_format(fmt, output)
    cfg = load_config(paths, config)                 # precedence: CLI > config > defaults
    policy = fail_policy(fail_on, cfg, "diagnose")
    redact = _redacting(no_redact, [*cfg.redact_patterns, *(redact_pattern or [])])
    extra = [*cfg.rule_dirs, *(rules or [])]
    rule_dirs = [builtin_rules_dir(), *map(Path, extra)] if extra else None
    try:
        run = _open_run(paths, gpu_map=gpu_map or cfg.gpu_map or None, schema=cfg.schema)
    except ForensicsError as e:
        # folders that exist but hold no file: a report (no_data, exit 3), not a usage error
        if e.code != NO_INPUT or not all(Path(p).is_dir() for p in paths) or e.what != "no log files found":
            raise
        run = None
    # a config file is passed on only when there is one: without it the defaults apply unchanged
    if run is None:
        from .passes import no_input_report

        report = no_input_report(list(paths))
    else:
        report = (run_diagnose(run, rule_dirs=rule_dirs, config=cfg) if cfg.source is not None
                  else run_diagnose(run, rule_dirs=rule_dirs))
    report.config = cfg.to_json()
    tty = output is None and sys.stdout.isatty()
    if fmt is ReportFormat.junit:
        from .report.junit import diagnosis_junit

        text = diagnosis_junit(report, policy, rule_dirs=rule_dirs, config=cfg, redact=redact)
    else:
        text = render(report, fmt.value, width=width or (out.width if tty else 100), redact=redact,
                      color=output is None and fmt is ReportFormat.text and styled(out), run=run)
    _write(text, output)
    if summary:
        from .report.summary import append_summary, render_summary

        append_summary(summary, render_summary(report, policy, redact=redact))
    if any(fails(policy, f) for f in report.findings):   # no_data fails without --fail-on too
        raise typer.Exit(3)


class CompareFormat(str, Enum):
    text = "text"
    md = "md"
    json = "json"
    html = "html"
    junit = "junit"


@app.command()
def compare(
    runs: list[str] = typer.Argument(..., metavar="[BASELINE] CANDIDATE",
                                     help="The last good run and the run to judge, each a store or a log folder (read once into a cache). "
                                          "With one path, the baseline is the config file's [compare] baseline."),
    fmt: CompareFormat = typer.Option(CompareFormat.text, "--format", "-f", case_sensitive=False, metavar="FORMAT", help="text, md, json, html or junit"),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write the comparison to this file instead of stdout."),
    max_slowdown: Optional[str] = typer.Option(None, "--max-slowdown", metavar="SHARE", help="Fail when the median step time (after warmup) grows more: 5% (default) or 0.05; off to skip."),
    max_throughput_drop: Optional[str] = typer.Option(None, "--max-throughput-drop", metavar="SHARE", help="Fail when the job's throughput falls more (default 5%; off to skip)."),
    max_loss_increase: Optional[str] = typer.Option(None, "--max-loss-increase", metavar="SHARE", help="Fail when the loss at matched steps (median of the last 10) rises more (default 5%; off to skip)."),
    fail_on_new: Optional[str] = typer.Option(None, "--fail-on-new", metavar="LEVEL", help="Fail on a new finding at this level or above: INFO, WARN (default), ERROR or off."),
    no_findings: bool = typer.Option(False, "--no-findings", help="Skip diagnosing both runs (faster; no new/resolved findings)."),
    width: Optional[int] = typer.Option(None, "--width", min=40, metavar="N", help="Text width (default: the terminal's; 100 when not a terminal)."),
    summary: Optional[str] = typer.Option(None, "--summary", metavar="FILE", help=_SUMMARY_HELP),
    config: Optional[str] = typer.Option(None, "--config", metavar="FILE", help=_CONFIG_HELP),
) -> None:
    """Compare a run with its baseline: step time, throughput, data load, communication, GPU, loss; new findings; exit 3 on a regression, 4 when the runs cannot be compared."""
    from .compare import NOT_COMPARABLE_EXIT, CompareThresholds, compare_runs, parse_share
    from .config import load_config
    from .report.compare_render import render_compare

    cfg = load_config(runs[-1:], config)             # precedence: CLI > config [compare] > defaults
    conf = cfg.compare or {}
    if len(runs) == 2:
        baseline, candidate = runs
    elif len(runs) == 1 and conf.get("baseline"):
        baseline, candidate = conf["baseline"], runs[0]
    else:
        raise ForensicsError(
            f"compare takes a baseline and a candidate run, got {len(runs)} path(s)", reason="no baseline to compare with"
            if len(runs) == 1 else "too many paths", help="forensics compare BASELINE CANDIDATE, or set baseline = \"...\" "
            "under [compare] in forensics.toml and pass only the candidate", code=BAD_ARGUMENT)

    def setting(value: Optional[str], key: str, default: str) -> str:
        return str(value if value is not None else conf.get(key, default))

    level = setting(fail_on_new, "fail_on_new", "WARN").strip().upper()
    if level not in ("INFO", "WARN", "ERROR", "OFF", "NONE"):
        raise ForensicsError(f"cannot read --fail-on-new {level!r}", reason="expected INFO, WARN, ERROR or off", code=BAD_ARGUMENT)
    th = CompareThresholds(
        max_slowdown=parse_share(setting(max_slowdown, "max_slowdown", "5%"), "--max-slowdown"),
        max_throughput_drop=parse_share(setting(max_throughput_drop, "max_throughput_drop", "5%"), "--max-throughput-drop"),
        max_loss_increase=parse_share(setting(max_loss_increase, "max_loss_increase", "5%"), "--max-loss-increase"),
        fail_on_new=None if level in ("OFF", "NONE") else level,
    )
    result = compare_runs(_open_run([baseline]), _open_run([candidate]), th, findings=not no_findings)
    tty = output is None and sys.stdout.isatty()
    text = render_compare(result, fmt.value, width=width or (out.width if tty else 100))
    _write(text, output, f": {result.verdict}")
    if summary:
        from .report.summary import append_summary, render_compare_summary

        append_summary(summary, render_compare_summary(result))
    if not result.comparable:
        raise typer.Exit(NOT_COMPARABLE_EXIT)
    if not result.passed:
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
    from .report.model import KINDS

    print(f"ok: {len(rules)} rules, {sum(len(r.examples) for r in rules)} examples pass; a next step for each of {len(KINDS)} kinds")


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


def _open_run(paths: list[str], gpu_map: list[str] | None = None, schema: dict | None = None):  # -> Run
    from .run import open_run

    _one_run(paths)
    if schema is None:   # the [schema] of the config upward from raw logs: every command reads them alike
        from .store import is_store

        if not (len(paths) == 1 and is_store(paths[0])):
            from .config import load_config

            schema = load_config(paths, None).schema
    cb, stop = _progress()
    try:
        return open_run(paths, progress=cb, gpu_map=gpu_map, schema=schema or None)
    finally:
        stop()


def _table_console() -> Console:
    """Tables are wide: when stdout is not a terminal, do not squeeze them into 80 columns
    (unless COLUMNS says how wide)."""
    import os

    return out if sys.stdout.isatty() else make_console(color_mode, width=None if os.environ.get("COLUMNS") else 240,
                                                         unpadded=True)


@app.command()
def events(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", min=0, metavar="N", help="Only this rank; repeatable."),
    event: Optional[list[str]] = typer.Option(None, "--event", "-e", metavar="EVENT", help="Only these event ids (comma-separated or repeated; NCCL_* matches every NCCL_ event)."),
    level: Optional[str] = typer.Option(None, "--level", "-l", metavar="LEVEL", help="Only this level or above: DEBUG < INFO < WARN < ERROR."),
    since: Optional[str] = typer.Option(None, "--since", metavar="TIME", help=_TIME_FORMS),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME", help="Up to this time (same forms as --since)."),
    grep: Optional[str] = typer.Option(None, "--grep", "-g", metavar="TEXT", help="Only events whose message or extra fields contain this text (any case)."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0, max=_HUGE, metavar="N", help="At most N events (0 = all; table default 100, other formats all)."),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
    no_redact: bool = typer.Option(False, "--no-redact", help=_NO_REDACT),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help=_REDACT_PATTERN),
) -> None:
    """One rank's or one event type's events, in time order. ("Filter all events of one card.")"""
    from .query import filter_events
    from .render.events import render_events
    from .report.redact import redact_frame
    from .timeline import parse_time_range

    redact = _redacting(no_redact, redact_pattern)
    run = _open_run(paths)
    t0, t1 = parse_time_range(since, until, run)
    n = limit if limit is not None else (100 if fmt is RowFormat.table else 0)
    df = filter_events(run, ranks=rank, event=event, level=level, since=t0, until=t1, grep=grep,
                       limit=n + 1 if n else None).collect()
    render_events(redact_frame(df) if redact else df, fmt.value, _table_console(), limit=n)


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
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", min=0, metavar="N", help="Show only this rank; repeatable (who arrived last is still judged among all ranks)."),
    steps: Optional[str] = typer.Option(None, "--steps", metavar="A:B", help="Steps A to B inclusive; A: or :B open, : all, or one step N (default: the last 20 steps)."),
    per_rank: Optional[bool] = typer.Option(None, "--per-rank/--per-step", help="One row per (step, rank), or one per step (default: per rank up to 8 ranks)."),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
    no_redact: bool = typer.Option(False, "--no-redact", help=_NO_REDACT),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help=_REDACT_PATTERN),
) -> None:
    """Per-step times of every rank, aligned by step. Data loading, compute, communication and waiting, and who arrived last at each collective."""
    from .render.timeline import render_timeline
    from .report.redact import redact_frame
    from .timeline import build_timeline, check_ranks, parse_step_range

    redact = _redacting(no_redact, redact_pattern)
    run = _open_run(paths)
    rank = check_ranks(run, rank)
    tl = build_timeline(run, parse_step_range(steps) if steps else None)
    render_timeline(redact_frame(tl.rows) if redact else tl.rows, fmt.value, _table_console(), offsets=tl.offsets, ranks=rank, span=tl.span, per_rank=per_rank,
                    job=tl.job)


@app.command("last-10s")
def last_10s(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    rank: Optional[list[int]] = typer.Option(None, "--rank", "-r", min=0, metavar="N", help="Only this rank; repeatable."),
    window: str = typer.Option("10s", "--window", "-w", metavar="DURATION", help="How far back from the stop, with a unit: 500ms, 10s, 2m, 1h (at most the length of the run)."),
    at: Optional[str] = typer.Option(None, "--at", metavar="TIME", help="Take this as the stop, instead of the first fatal ERROR or the last event (same forms as events --since)."),
    per_rank: int = typer.Option(10, "--per-rank", "-n", min=0, metavar="N", help="Newest events shown per rank in the window (0 = none)."),
    fmt: SnapshotFormat = typer.Option(SnapshotFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help="table or json"),
    no_redact: bool = typer.Option(False, "--no-redact", help=_NO_REDACT),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help=_REDACT_PATTERN),
) -> None:
    """What every rank did just before the run stopped. The stop is the first fatal ERROR, else the last event (or --at)."""
    from .timeline import clamp_window, parse_duration, parse_time_spec

    redact = _redacting(no_redact, redact_pattern)
    window_s = parse_duration(window)
    run = _open_run(paths)
    # imported once the store is open: a store that cannot be read fails without them
    from .render.timeline import render_snapshot
    from .timeline import last_window

    window_s, clamped = clamp_window(run, window_s)
    if clamped:
        from .render.timeline import duration_text

        err.print(f"note: --window {window} is longer than the run ({duration_text(window_s)} from its first to its last "
                  "event): the window is the whole run", markup=False, highlight=False)
    snap = last_window(run, window_s, at=parse_time_spec(at, run) if at else None, ranks=rank, limit=per_rank)
    render_snapshot(snap.redacted() if redact else snap, fmt.value, _table_console())


@app.command()
def sql(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    query: str = typer.Argument(..., metavar="QUERY", help='SQL over the tables events, rejects, ranks: "SELECT rank, count(*) FROM events GROUP BY rank".'),
    fmt: RowFormat = typer.Option(RowFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help=_ROW_FORMATS),
    no_redact: bool = typer.Option(False, "--no-redact", help=_NO_REDACT),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help=_REDACT_PATTERN),
    timeout: float = typer.Option(60.0, "--timeout", min=0.001, max=86400.0, metavar="SECONDS", help="Stop the query after this long."),
) -> None:
    """SQL over the run (DuckDB; no other file is reachable). The tables events, rejects (lines not read as events) and ranks (as `forensics ranks` shows)."""
    from .query import sql as run_sql
    from .render.events import render_frame
    from .report.redact import redact_frame

    redact = _redacting(no_redact, redact_pattern)
    df = run_sql(_open_run(paths), query, timeout=timeout)
    render_frame(redact_frame(df) if redact else df, fmt.value, _table_console())


# --- log hygiene and exports (forensics.lint, forensics.export) ---

class LintFormat(str, Enum):
    text = "text"
    json = "json"
    junit = "junit"


@app.command()
def lint(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    fmt: LintFormat = typer.Option(LintFormat.text, "--format", "-f", case_sensitive=False, metavar="FORMAT", help="text, json or junit (CI test report)"),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="FILE", help="Write the checklist to this file instead of stdout."),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", callback=_fail_on_option("lint"), metavar="LEVEL[:CHECK,...]",
                                          help="Exit 3 when a check is at least WARN or FAIL (CI): LEVEL or LEVEL:CHECK,CHECK (-CHECK leaves one out)."),
    summary: Optional[str] = typer.Option(None, "--summary", metavar="FILE", help=_SUMMARY_HELP),
    config: Optional[str] = typer.Option(None, "--config", metavar="FILE", help=_CONFIG_HELP),
    no_redact: bool = typer.Option(False, "--no-redact", help=_NO_REDACT),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help=_REDACT_PATTERN),
) -> None:
    """Check that the logs are fit for a post-mortem. A checklist: rank and event id on every line, one rank's events filterable, communication/step time plottable, no ERROR floods burying WARNs, metrics not sampled too often, no stack traces on the hot path, 72 h reach."""
    from .lint import lint as run_lint
    from .render.lint import render_lint, render_lint_json

    from .config import fail_policy, fails_check, load_config
    from .report.redact import redact_obj

    cfg = load_config(paths, config)
    redact = _redacting(no_redact, [*cfg.redact_patterns, *(redact_pattern or [])])
    result = run_lint(_open_run(paths, gpu_map=cfg.gpu_map or None))
    result = redact_obj(result) if redact else result
    policy = fail_policy(fail_on, cfg, "lint", names=[c.id for c in result.checks])
    if fmt is LintFormat.json:
        _write(render_lint_json(result), output)
    elif fmt is LintFormat.junit:
        from .report.junit import lint_junit

        _write(lint_junit(result, policy), output)
    elif output:
        import io

        from rich.console import Console

        buf = io.StringIO()
        render_lint(result, Console(file=buf, width=100, color_system=None, no_color=True, highlight=False))
        _write("\n".join(line.rstrip() for line in buf.getvalue().split("\n")), output)
    else:
        render_lint(result, _table_console())
    if summary:
        from .report.summary import append_summary, render_lint_summary

        append_summary(summary, render_lint_summary(result, policy))
    if any(fails_check(policy, c.id, c.status) for c in result.checks):   # no usable event fails without --fail-on
        raise typer.Exit(3)


class TableFormat(str, Enum):
    """A table command's output forms (trace-stats, fr-table)."""
    table = "table"
    json = "json"
    csv = "csv"


@app.command("trace-stats")
def trace_stats(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Kineto (PyTorch profiler) trace files or folders holding them (plain, gzip or zstd), or a store they were ingested into."),
    fmt: TableFormat = typer.Option(TableFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help="table, json (everything) or csv (the per-rank / per-step breakdown)."),
    top: int = typer.Option(10, "--top", min=1, max=_HUGE, metavar="N", help="Kernels listed per rank in the top-kernels list."),
    workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, metavar="N", help="Trace files read at once, each in its own process (default: the cores, fewer when their estimated memory would not fit in the budget: half the memory available, at most ~1.2 GB so that the whole run stays under ~1.4 GB; raise it with FORENSICS_TRACE_MEMORY_MB=MB, cap the count with FORENSICS_TRACE_JOBS; 1: one after another)."),
) -> None:
    """GPU time in profiler traces, per rank and step. Compute / non-compute / idle shares, idle causes (host wait, kernel wait, other), communication/computation overlap, top kernels, and which rank starts communication kernels last."""
    from .render.traces import render_trace_stats
    from .traces.stats import trace_stats as run_trace_stats

    render_trace_stats(run_trace_stats(paths, top=top, jobs=workers), fmt.value, _table_console())


export_app = typer.Typer(help="Write a run in another tool's format.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(export_app, name="export")


@export_app.command("perfetto")
def export_perfetto(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help=_STORE_OR_LOGS),
    output: str = typer.Option(..., "-o", "--output", metavar="FILE", help="Trace file (Chrome Trace Event JSON; gzip when it ends in .gz)."),
    steps: Optional[str] = typer.Option(None, "--steps", metavar="A:B", help="Steps A to B inclusive; A: or :B open (default: all steps)."),
    ranks: Optional[str] = typer.Option(None, "--ranks", metavar="LIST", help="Only these ranks: 0,3,5-7."),
    max_events: int = typer.Option(500_000, "--max-events", min=1, max=_HUGE, metavar="N", help="Largest trace: beyond it only every k-th step is kept (a note says so)."),
    no_redact: bool = typer.Option(False, "--no-redact", help="Do not mask API keys, tokens and passwords in messages."),
    redact_pattern: Optional[list[str]] = typer.Option(None, "--redact-pattern", metavar="REGEX", help="Also mask matches of this regular expression (repeatable)."),
) -> None:
    """A timeline for ui.perfetto.dev or chrome://tracing. A track per rank grouped by host: step phases, WARN/ERROR, GPU counters."""
    from .export import export_perfetto as run_export, parse_ranks, parse_steps

    redact = _redacting(no_redact, redact_pattern)
    summary = run_export(_open_run(paths), output, steps=parse_steps(steps), ranks=parse_ranks(ranks),
                         max_events=max_events, redact=redact)
    if summary.message:
        err.print(f"note: {summary.message}", markup=False, highlight=False)
    span = f"steps {summary.steps[0]}–{summary.steps[1]}" if summary.steps else "no steps"
    from .report.fmt import counted

    err.print(f"wrote {summary.path}: {counted(summary.events, 'event')}, {counted(len(summary.ranks), 'rank')} on "
              f"{counted(len(summary.hosts), 'host track')}, {span}"
              + (f", {counted(summary.gpu_activities, 'GPU activity', 'GPU activities')} of profiler traces"
                 if summary.gpu_activities else "")
              + f", {summary.bytes / 1e6:.1f} MB", markup=False, highlight=False)


@app.command("fr-table")
def fr_table(
    paths: list[str] = typer.Argument(..., metavar="DUMPS...", help="Flight Recorder dump files, folders or quoted globs (nccl_trace_rank_N, _dump_N; pickle or JSON)."),
    fmt: TableFormat = typer.Option(TableFormat.table, "--format", "-f", case_sensitive=False, metavar="FORMAT", help="table, json (every field) or csv (one row per line and rank)"),
    pg: Optional[str] = typer.Option(None, "--pg", metavar="NAME", help="Only this process group (its name, e.g. 74, or its desc)."),
    all_lines: bool = typer.Option(False, "--all", help="Every line, not only those where the ranks disagree or some never joined."),
) -> None:
    """Flight Recorder dumps as one table: per process group and collective number, each rank's op, sizes, dtypes and state; missing ranks; the first mismatch; dumps absent, empty or corrupt."""
    from .fr_table import build, select
    from .render.fr_table import render

    table = build(paths)
    render(table, select(table, pg=pg, all_lines=all_lines), fmt.value, _table_console(), all_lines=all_lines)


def _invoked(argv: list[str]) -> str | None:
    """The command or command group `argv` names (after the root options), or None."""
    rest = iter(argv)
    for tok in rest:
        if tok == "--color":
            next(rest, None)
        elif not tok.startswith("-"):
            return tok
    return None


def _one_arena(argv: list[str], env: Any) -> None:
    """polars' allocator (jemalloc) with one arena, unless the user configured it, for every
    command but an ingest. By default each thread (the passes' two, polars' pool) allocates from
    its own arena, of 4 per core, and the pages a query frees stay with its thread's arena, unused
    by the next query on another thread: `diagnose` of the 4,096-rank bench store peaks at ~460 MB
    by default, ~390 MB with one arena, for the same CPU (docs/speed.md). Not for an ingest:
    there its peak is 5% lower at the same CPU, but its writer threads share the one arena, and
    its wall time was 5-15% longer. Read when polars' library first allocates: before polars is
    imported (no import of the CLI brings it in); a process that imported it earlier keeps its own.
    The number of arenas is added to what the variable holds unless it names one: polars' import
    writes its own options there, which every child of a Python process that imported polars
    inherits (a bench, a test, a script calling the CLI), and those are no choice of arenas."""
    if _invoked(argv) != "ingest":
        conf = env.get("_RJEM_MALLOC_CONF") or ""
        if "narenas:" not in conf:
            env["_RJEM_MALLOC_CONF"] = f"{conf},narenas:1" if conf else "narenas:1"


def _only_invoked(argv: list[str]) -> tuple[list[Any], list[Any]] | None:
    """Keep registered only the command (or group) `argv` invokes, so that typer builds the
    parameters of that one command, not of all of them (typer builds the whole tree on every
    call: ~30 ms). Returns what to restore; None (nothing changed) when argv names no command,
    or in shell completion, which needs them all."""
    import os

    name = _invoked(argv)
    if name is None or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return None
    from typer.main import get_command_name

    commands = [c for c in app.registered_commands if (c.name or get_command_name(c.callback.__name__)) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if len(commands) + len(groups) != 1:
        return None   # an unknown name: typer says so, naming the commands there are
    saved = (app.registered_commands, app.registered_groups)
    app.registered_commands, app.registered_groups = commands, groups
    return saved


def main() -> None:
    import os

    # numpy's bundled OpenBLAS starts threads that busy-wait after start-up: 0.03-0.06 CPU s of every
    # command that imports numpy (the thread's own CPU time in /proc), for no work: forensics does
    # no linear algebra. Read when numpy is first imported: no import above brings it in.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import atexit
    import gc

    # At exit the interpreter's own collections walk every object the imports made (numpy,
    # pyarrow, polars: ~100,000): ~0.12 CPU s of every command's process. Frozen, they are skipped
    # (what the process holds is freed with it). At exit only: a caller's process keeps its GC.
    atexit.register(gc.freeze)
    _one_arena(sys.argv[1:], os.environ)
    # An ingest runs without cyclic GC from its imports (~110 collections, ~0.05 CPU s; the ingest
    # itself turns it off: `forensics.ingest.ingest`): what it allocates holds no cycles to free.
    gc_off = _invoked(sys.argv[1:]) == "ingest" and gc.isenabled()
    if gc_off:
        gc.disable()
    saved = _only_invoked(sys.argv[1:])
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
    except Exception as e:
        from .store import damage_error   # a store whose parts changed since written: not a bug

        damaged = damage_error(e)
        if damaged is None:
            raise
        err.print(damaged.render(), markup=False, highlight=False, emoji=False)
        sys.exit(1)
    finally:
        if saved is not None:
            app.registered_commands, app.registered_groups = saved
        if gc_off:
            gc.enable()


if __name__ == "__main__":
    main()
