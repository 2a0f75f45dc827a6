"""Per-project settings: `forensics.toml`, or `[tool.forensics]` in `pyproject.toml`.

Owns finding the file (`--config FILE`, else upward from the logs: the first path's folder, then
each parent up to /), reading and checking it into a `Config`, and the `--fail-on` policy syntax
(`FailOn`). Must not apply anything itself: the rules engine applies rule overrides
(forensics.rules.tune_rule), the diagnosis drops disabled rules and passes, the CLI merges options.

Precedence: a command-line option beats the config file, which beats the defaults. Lists that
add up (redaction patterns, rule folders, gpu-map entries) are joined: config first, then CLI.

    # forensics.toml (in pyproject.toml the same keys go under [tool.forensics])
    gpu-map = ["node3:0=24", "node3:1=25"]         # as --gpu-map; also "@map.txt"
    redact-patterns = ['/home/[^/ ]+']              # added to --redact-pattern

    [fail-on]                                       # as --fail-on, per command
    diagnose = "WARN:communication,physical"
    lint = "FAIL"

    [rules]
    disable = ["gradient_skew", "pass.throughput"]  # rule ids, or pass.<name> for a pass
    dirs = ["ci/rules"]                             # as --rules, relative to this file

    [rules.gpu_underutilized]                       # one table per rule id
    level = "ERROR"
    params = { min_util = 50 }
    value = 50                                      # the [threshold] value of the rule
    sustain = "10m"

    [compare]                                       # read by `forensics compare`
    baseline = "runs/last-good"                     # relative to this file
    max_slowdown = "5%"

    [schema]                                        # JSON-lines fields by role (dotted paths),
    time = "@timestamp_ms"                          # over what ingest infers (forensics.ingest.roles)
    event = "logger"
    event_last_part = true                          # event values are logger names: the last part
    [schema.metrics]                                # canonical column = path (unit from its suffix)
    step_time_ms = "payload.values.iter_ms"

Bad config is a ForensicsError naming the file and the key (`rules.gpu_underutilized.level`).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .errors import BAD_ARGUMENT, BAD_CONFIG, ForensicsError

FILE_NAMES = ("forensics.toml", "pyproject.toml")
TOP_KEYS = ("gpu-map", "redact-patterns", "fail-on", "rules", "compare", "schema")
SCHEMA_ROLES = ("time", "rank", "local_rank", "host", "level", "event", "message")
RULE_KEYS = ("level", "params", "value", "sustain")
FAIL_ON_COMMANDS = ("diagnose", "lint", "compare")
RULE_LEVELS = ("WARN", "ERROR")


@dataclass
class Config:
    """The effective settings from one file (or none: the defaults)."""

    source: str | None = None                                  # the file read; None = defaults only
    disabled: list[str] = field(default_factory=list)          # rule ids and pass.<name>
    rule_dirs: list[str] = field(default_factory=list)         # absolute folders
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # rule id -> {level, params, value, sustain}
    gpu_map: list[str] = field(default_factory=list)
    compare: dict[str, Any] = field(default_factory=dict)      # {baseline: abs path, max_slowdown: ..., ...}
    redact_patterns: list[str] = field(default_factory=list)
    fail_on: dict[str, str] = field(default_factory=dict)      # command -> --fail-on text
    schema: dict[str, Any] = field(default_factory=dict)       # [schema]: role -> path, metrics -> {column: path}

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "rules": {"disable": self.disabled, "dirs": self.rule_dirs, "overrides": self.overrides},
                "gpu_map": self.gpu_map, "redact_patterns": self.redact_patterns, "fail_on": self.fail_on,
                "compare": self.compare, **({"schema": self.schema} if self.schema else {})}


def _bad(path: Path, key: str, reason: str, help: str | None = None) -> ForensicsError:
    return ForensicsError(f"bad config: {key}" if key else "bad config file", where=str(path), reason=reason,
                          help=help or "see `forensics.config` or docs/ci.md, 'Config file'", code=BAD_CONFIG)


def _read(path: Path) -> dict[str, Any] | None:
    """The forensics table of the file; None when a pyproject.toml has no [tool.forensics]."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise _bad(path, "", f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise _bad(path, "", f"not UTF-8: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise _bad(path, "", f"not valid TOML: {e}") from None
    if path.name == "pyproject.toml":
        tool = doc.get("tool", {})
        return tool.get("forensics") if isinstance(tool, dict) else None
    return doc


def find_config(paths: list[str]) -> Path | None:
    """forensics.toml, or a pyproject.toml with [tool.forensics], in the first path's folder or above."""
    if not paths:
        return None
    first = paths[0]
    if any(ch in first for ch in "*?["):        # a quoted glob: start where its fixed part is
        first = first[: min(first.find(ch) for ch in "*?[" if ch in first)] or "."
    start = Path(first).expanduser().absolute()
    folder = start if start.is_dir() else start.parent
    for d in (folder, *folder.parents):
        for name in FILE_NAMES:
            p = d / name
            if p.is_file() and (name != "pyproject.toml" or _read(p) is not None):
                return p
    return None


def _strings(path: Path, key: str, v: Any) -> list[str]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise _bad(path, key, f"must be a string or a list of non-empty strings, found {v!r}")
    return list(v)


def _rule_override(path: Path, rid: str, raw: Any) -> dict[str, Any]:
    from .rules.spec import parse_duration

    k = f"rules.{rid}"
    if not isinstance(raw, dict):
        raise _bad(path, k, "must be a table: level, params, value, sustain")
    for name in raw:
        if name not in RULE_KEYS:
            raise _bad(path, f"{k}.{name}", f"unknown key (a rule takes {', '.join(RULE_KEYS)})")
    out: dict[str, Any] = {}
    if "level" in raw:
        lv = raw["level"]
        if not isinstance(lv, str) or lv.upper() not in RULE_LEVELS:
            raise _bad(path, f"{k}.level", f"{lv!r} is not one of {', '.join(RULE_LEVELS)}")
        out["level"] = lv.upper()
    if "params" in raw:
        ps = raw["params"]
        if not isinstance(ps, dict):
            raise _bad(path, f"{k}.params", "must be a table of name = number")
        for n, v in ps.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise _bad(path, f"{k}.params.{n}", f"must be a number, found {v!r}")
        out["params"] = dict(ps)
    if "value" in raw:
        v = raw["value"]
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise _bad(path, f"{k}.value", f"must be a number, found {v!r}")
        out["value"] = v
    if "sustain" in raw:
        try:
            parse_duration(raw["sustain"], steps_ok=True)
        except ValueError as e:
            raise _bad(path, f"{k}.sustain", str(e)) from None
        out["sustain"] = raw["sustain"]
    return out


def parse_config(path: Path) -> Config:
    """Read and check one config file."""
    doc = _read(path)
    if doc is None:
        raise _bad(path, "tool.forensics", "this pyproject.toml has no [tool.forensics] table")
    if not isinstance(doc, dict):
        raise _bad(path, "tool.forensics", "must be a table")
    base = path.parent
    for k in doc:
        if k not in TOP_KEYS:
            raise _bad(path, k, f"unknown key (allowed: {', '.join(TOP_KEYS)})")
    cfg = Config(source=str(path))
    if "gpu-map" in doc:
        cfg.gpu_map = [f"@{base / s[1:]}" if s.startswith("@") else s for s in _strings(path, "gpu-map", doc["gpu-map"])]
        from .ingest import parse_gpu_map

        try:
            parse_gpu_map(cfg.gpu_map)
        except ForensicsError as e:
            raise _bad(path, "gpu-map", f"{e.what}: {e.reason}") from None
    if "redact-patterns" in doc:
        import re

        cfg.redact_patterns = _strings(path, "redact-patterns", doc["redact-patterns"])
        for i, p in enumerate(cfg.redact_patterns):
            try:
                re.compile(p)
            except re.error as e:
                raise _bad(path, f"redact-patterns[{i}]", f"not a regular expression: {e}") from None
    if "fail-on" in doc:
        fo = doc["fail-on"]
        if not isinstance(fo, dict):
            raise _bad(path, "fail-on", "must be a table: diagnose = \"WARN\", lint = \"FAIL\"")
        for c, v in fo.items():
            if c not in FAIL_ON_COMMANDS:
                raise _bad(path, f"fail-on.{c}", f"unknown command (allowed: {', '.join(FAIL_ON_COMMANDS)})")
            if not isinstance(v, str):
                raise _bad(path, f"fail-on.{c}", f"must be a string such as \"WARN\" or \"WARN:straggler,hang\", found {v!r}")
            if c != "compare":
                try:
                    parse_fail_on(v, command=c)
                except ForensicsError as e:
                    raise _bad(path, f"fail-on.{c}", e.reason or e.what) from None
            cfg.fail_on[c] = v
    if "rules" in doc:
        rules = doc["rules"]
        if not isinstance(rules, dict):
            raise _bad(path, "rules", "must be a table")
        for k, v in rules.items():
            if k == "disable":
                cfg.disabled = _strings(path, "rules.disable", v)
            elif k == "dirs":
                cfg.rule_dirs = [str((base / d).resolve()) for d in _strings(path, "rules.dirs", v)]
                for i, d in enumerate(cfg.rule_dirs):
                    if not Path(d).exists():
                        raise _bad(path, f"rules.dirs[{i}]", f"no such rule folder: {d}")
            else:
                cfg.overrides[k] = _rule_override(path, k, v)
    if "compare" in doc:
        cmp = doc["compare"]
        if not isinstance(cmp, dict):
            raise _bad(path, "compare", "must be a table, e.g. baseline = \"runs/last-good\", max_slowdown = \"5%\"")
        cfg.compare = dict(cmp)
        if "baseline" in cmp:
            if not isinstance(cmp["baseline"], str) or not cmp["baseline"].strip():
                raise _bad(path, "compare.baseline", f"must be a path, found {cmp['baseline']!r}")
            cfg.compare["baseline"] = str((base / cmp["baseline"]).resolve())
    if "schema" in doc:
        cfg.schema = _schema(path, doc["schema"])
    return cfg


def _schema(path: Path, raw: Any) -> dict[str, Any]:
    """[schema]: role = "dotted.path", event_last_part = bool, [schema.metrics] column = "path"."""
    from .schema import FIELDS

    if not isinstance(raw, dict):
        raise _bad(path, "schema", 'must be a table, e.g. time = "@timestamp_ms"')
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k == "metrics":
            if not isinstance(v, dict):
                raise _bad(path, "schema.metrics", 'must be a table of column = "path"')
            for col, p in v.items():
                if col not in FIELDS:
                    raise _bad(path, f"schema.metrics.{col}", f"no canonical column {col!r}",
                               help="the columns are listed in the README's table of columns")
                if not isinstance(p, str) or not p.strip():
                    raise _bad(path, f"schema.metrics.{col}", f"must be a dotted path, found {p!r}")
            out["metrics"] = dict(v)
        elif k == "event_last_part":
            if not isinstance(v, bool):
                raise _bad(path, "schema.event_last_part", f"must be true or false, found {v!r}")
            out[k] = v
        elif k in SCHEMA_ROLES:
            if not isinstance(v, str) or not v.strip():
                raise _bad(path, f"schema.{k}", f"must be a dotted path such as \"proc.rank\", found {v!r}")
            out[k] = v
        else:
            raise _bad(path, f"schema.{k}", f"unknown key (a role: {', '.join(SCHEMA_ROLES)}; event_last_part; metrics)")
    return out


def load_config(paths: list[str], explicit: str | None) -> Config:
    """The config for a command on `paths`: `explicit` (--config) if given, else the first
    forensics.toml / pyproject.toml [tool.forensics] found upward from the logs, else defaults."""
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise ForensicsError(f"no config file at {explicit}", where=explicit, code=BAD_CONFIG,
                                 help="--config takes a forensics.toml or a pyproject.toml with [tool.forensics]")
        return parse_config(p)
    found = find_config(paths)
    return parse_config(found) if found is not None else Config()


def check_names(cfg: Config, rule_ids: Iterable[str], pass_ids: Iterable[str]) -> None:
    """Every disabled id and every overridden rule must exist (a typo would silently do nothing)."""
    rules, passes = set(rule_ids), set(pass_ids)
    for i, name in enumerate(cfg.disabled):
        if name not in rules and name not in passes:
            raise ForensicsError(f"bad config: rules.disable[{i}]", where=cfg.source, code=BAD_CONFIG,
                                 reason=f"no rule or pass named {name!r}",
                                 help=f"rule ids: `forensics rules list`; passes: {', '.join(sorted(passes))}")
    for rid in cfg.overrides:
        if rid not in rules:
            raise ForensicsError(f"bad config: rules.{rid}", where=cfg.source, code=BAD_CONFIG,
                                 reason=f"no rule with id {rid!r}", help="rule ids: `forensics rules list`")


# --- --fail-on --------------------------------------------------------------------------------

DIAGNOSE_LEVELS = ("INFO", "WARN", "ERROR")
LINT_LEVELS = ("WARN", "FAIL")
# Findings about the logs themselves say nothing about the training: they fail a run only when
# named explicitly (`--fail-on WARN:log_hygiene`).
QUIET_KINDS = ("log_hygiene",)
# Input with nothing to diagnose (no event at all) fails a run whatever the policy, and without
# one: a job that died before writing anything must not turn CI green. Only naming it with a
# minus (`--fail-on ERROR:-no_data`) lets it pass.
ALWAYS_FAILS = ("no_data",)


@dataclass(frozen=True)
class FailOn:
    """`LEVEL[:SEL,SEL,...]`: trip on findings (checks) at LEVEL or worse, limited to the selected
    layers / kinds (lint: check ids) when any are given; `-SEL` leaves one out."""

    level: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    text: str = ""

    def trips(self, f: Any) -> bool:
        """Does a Finding fail the run?"""
        if f.kind in ALWAYS_FAILS:
            return f.kind not in self.exclude
        if DIAGNOSE_LEVELS.index(f.severity) < DIAGNOSE_LEVELS.index(self.level):
            return False
        tags = {f.kind, f.layer}
        if tags & set(self.exclude):
            return False
        if f.kind in QUIET_KINDS and f.kind not in self.include:
            return False
        return not self.include or bool(tags & set(self.include))

    def trips_check(self, check_id: str, status: str) -> bool:
        """Does a lint check with this status fail the run?"""
        if check_id in ALWAYS_FAILS and status == "fail":
            return check_id not in self.exclude
        need = {"WARN": ("warn", "fail"), "FAIL": ("fail",)}[self.level]
        if status not in need or check_id in self.exclude:
            return False
        return not self.include or check_id in self.include


def parse_fail_on(text: str, *, command: str = "diagnose", names: Iterable[str] | None = None) -> FailOn:
    """Parse --fail-on text. `names` (lint: the check ids) replaces the diagnose vocabulary
    (layers and kinds) that selectors are checked against."""
    from .report.model import KINDS, LAYERS

    levels = LINT_LEVELS if command == "lint" else DIAGNOSE_LEVELS
    allowed = list(names) if names is not None else ([] if command == "lint" else [*LAYERS, *KINDS])
    level, colon, rest = text.strip().partition(":")
    if level.upper() not in levels:
        raise ForensicsError(f"cannot use --fail-on {text!r}", code=BAD_ARGUMENT,
                             reason=f"level {level!r} is not one of {', '.join(levels)}",
                             help="LEVEL or LEVEL:SEL,SEL where SEL is a layer or kind (-SEL leaves it out), "
                                  "e.g. --fail-on WARN:communication,physical or --fail-on WARN:-throughput_drop")
    inc: list[str] = []
    exc: list[str] = []
    for s in (x.strip() for x in rest.split(",") if x.strip()) if rest else []:
        name = s[1:] if s.startswith("-") else s
        if allowed and name not in allowed:
            raise ForensicsError(f"cannot use --fail-on {text!r}", code=BAD_ARGUMENT,
                                 reason=f"{name!r} is not a {'check id' if command == 'lint' else 'layer or kind'}",
                                 help=f"choose from: {', '.join(allowed)}")
        (exc if s.startswith("-") else inc).append(name)
    if colon and not inc and not exc:
        raise ForensicsError(f"cannot use --fail-on {text!r}", code=BAD_ARGUMENT, reason="nothing after ':'",
                             help="e.g. --fail-on WARN:straggler,hang")
    return FailOn(level.upper(), tuple(inc), tuple(exc), text.strip())


def fails(policy: FailOn | None, f: Any) -> bool:
    """Does a Finding fail the run under `policy` (None: no --fail-on, where only ALWAYS_FAILS do)?"""
    return policy.trips(f) if policy is not None else f.kind in ALWAYS_FAILS


def fails_check(policy: FailOn | None, check_id: str, status: str) -> bool:
    """Does a lint check fail the run under `policy` (None: only ALWAYS_FAILS checks that fail)?"""
    return policy.trips_check(check_id, status) if policy is not None else check_id in ALWAYS_FAILS and status == "fail"


def fail_policy(cli: str | None, cfg: Config, command: str, names: Iterable[str] | None = None) -> FailOn | None:
    """--fail-on from the command line, else from the config's [fail-on], else None (never fail)."""
    text = cli if cli is not None else cfg.fail_on.get(command)
    return None if text is None else parse_fail_on(text, command=command, names=names)


__all__ = ["Config", "FailOn", "fails", "fails_check", "ALWAYS_FAILS", "load_config", "find_config", "parse_config", "parse_fail_on", "fail_policy", "check_names"]
