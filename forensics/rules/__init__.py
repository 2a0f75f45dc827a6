"""The rule ENGINE: load rule files, check them (every error, every example), evaluate them.

Owns `load_rules`, `check_rules`, `evaluate` and where the built-in rules live. The rule FILES
are data in the repository's top-level `rules/<component>/<id>.toml` (shipped inside the package
as `forensics/rules/builtin`, a link to that folder). Must not hold thresholds itself, and must
not reason across ranks: a rule looks at one rank's events; logic spanning ranks is a pass.

A rule file, in full (fixed metadata first, in this order):

    id = "gpu_underutilized"                 # = the file stem
    title = "GPU utilisation below 60% for 5 minutes"
    level = "WARN"                           # WARN heals itself, ERROR needs a person (seed 000 §4.5)
    layer = "resource"                       # physical | resource | communication | training
    kind = "gpu_underutilized"               # the vocabulary of spec/report.md
    description = "..."
    references = ["seed 000 §4.2: GPU 利用率 < 60% 持续 5min"]
    falsepositives = ["evaluation or checkpoint phases"]
    next = "Find what starves {gpu} on {host}."   # optional: what to do next, when more specific than
                                             # the kind's sentence in rules/next_steps.toml

    [params]                                 # named numbers, usable in `expr`
    min_util = 60

    [threshold]                              # sugar for a [match] with one condition
    event = "GPU_STATS"                      # optional event filter (a name or a list)
    metric = "gpu_util"
    op = "<"
    expr = "min_util"                        # or: value = 60
    sustain = "5m"                           # held from first to last sample for 5 min, per rank
    per = "rank"

    [[join]]                                 # optional: also true on the same rank, nearby in time
    metric = "disk_read_mbps"
    op = "<"
    value = 200
    within = "5m"

    [[examples]]                             # at least one match and one no_match
    expect = "match"
    ranks = [0]
    events = [{event = "GPU_STATS", gpu_util = 40, repeat = 61, every = "5s"}]

`[match]` takes `event`, `all = [...]` and/or `any = [...]` of conditions
`{col = "temp_c", op = ">=", value = 90}` (groups nest: `{any = [...]}`), `sustain`, `max_gap`,
`by = "step"` with `sum = ["comm_ms"]` (rows of a rank's step combined first). Operators:
< <= > >= == != in not_in contains regex bits is_null not_null not_finite. `expr` is arithmetic
over params, numeric columns and per-rank baselines (`0.9 * max(sm_clock_mhz)`), parsed by
`forensics.rules.expr` — never eval(). Columns are the event columns of `forensics.schema`, or
`extra.KEY` / `fields.KEY` for keys kept in those JSON objects.
"""
from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from ..errors import BAD_RULE, ForensicsError
from ..report.model import KINDS, Finding
from .evaluate import evaluate as _evaluate
from .spec import NEXT_STEPS_FILE, Rule, RuleError, parse_next_steps, parse_rule

__all__ = ["Rule", "RuleError", "builtin_rules_dir", "display_path", "load_rules", "check_rules", "evaluate", "rule_files",
           "load_next_steps"]

_PACKAGED = Path(__file__).parent / "builtin"


def builtin_rules_dir() -> Path:
    """The shipped rules: `forensics/rules/builtin` (in a checkout, a link to the top-level rules/)."""
    if _PACKAGED.is_dir():
        return _PACKAGED
    repo = Path(__file__).resolve().parents[2] / "rules"
    if repo.is_dir():
        return repo
    raise ForensicsError(
        "the built-in rules are missing from this installation",
        where=str(_PACKAGED),
        help="reinstall forensics; a checkout needs the top-level rules/ folder",
        code=BAD_RULE,
    )


def display_path(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)


def rule_files(dirs: list[Path]) -> tuple[list[Path], list[RuleError]]:
    """Every *.toml under the folders, in a stable order; missing folders are errors."""
    files: list[Path] = []
    errors: list[RuleError] = []
    for d in dirs:
        d = Path(d)
        if d.is_file() and d.suffix == ".toml":
            files.append(d)
        elif not d.is_dir():
            errors.append(RuleError(display_path(d), "", "no such rule folder"))
        else:
            # next_steps.toml beside the rules is data of another shape (kind = sentence)
            found = sorted(f for f in d.rglob("*.toml") if f.name != NEXT_STEPS_FILE)
            if not found:
                errors.append(RuleError(display_path(d), "", "folder holds no *.toml rule files"))
            files.extend(found)
    return files, errors


def _load(dirs: list[Path], overrides: dict[str, dict] | None = None,
          override_source: str | None = None) -> tuple[list[Rule], list[Rule], list[RuleError]]:
    """Parse every file: (the rule set, every rule parsed, every error). `overrides` (rule id ->
    level/params/value/sustain, from a config file) are applied to the file before validation.

    A later folder's rule replaces an earlier one with the same id (tuning a shipped threshold =
    copying its file into your folder); two files with one id in the same folder are an error.
    """
    chosen: dict[str, Rule] = {}
    origin: dict[str, tuple[int, Path]] = {}
    parsed: list[Rule] = []
    files, errors = rule_files(dirs)
    for f in files:
        ov = (overrides or {}).get(f.stem)
        rule, errs = parse_rule(f, display_path(f), ov, override_source)
        errors.extend(errs)
        if rule is None:
            continue
        parsed.append(rule)
        top = next((i for i, d in enumerate(dirs) if f == Path(d) or Path(d) in f.parents), -1)
        if rule.id in origin and origin[rule.id][0] == top:
            errors.append(RuleError(display_path(f), "id", f"id {rule.id!r} is also used by {display_path(origin[rule.id][1])}"))
            continue
        chosen.pop(rule.id, None)
        chosen[rule.id] = rule
        origin[rule.id] = (top, f)
    return list(chosen.values()), parsed, errors


def load_rules(dirs: list[Path] | None = None, overrides: dict[str, dict] | None = None,
               override_source: str | None = None) -> list[Rule]:
    """The rules in `dirs` (default: the built-in rules). Raises ForensicsError listing every
    error when any file is malformed: a diagnosis never runs on half a rule set. `overrides`
    come from a config file (forensics.config), `override_source` names it in errors."""
    dirs = [builtin_rules_dir()] if dirs is None else [Path(d) for d in dirs]
    rules, _, errors = _load(dirs, overrides, override_source)
    if errors:
        shown = "\n    ".join(str(e) for e in errors[:20])
        more = f"\n    ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise ForensicsError(
            f"{len(errors)} error{'s' if len(errors) != 1 else ''} in rule files",
            where=errors[0].file,
            reason=f"\n    {shown}{more}",
            help="list them all with: forensics rules check " + " ".join(display_path(d) for d in dirs),
            code=BAD_RULE,
        )
    return rules


def check_rules(dirs: list[Path] | None = None) -> list[RuleError]:
    """Every error in every rule file under `dirs`, and every example run through the compiler."""
    from .examples import run_examples

    dirs = [builtin_rules_dir()] if dirs is None else [Path(d) for d in dirs]
    _, parsed, errors = _load(dirs)
    for rule in parsed:
        errors.extend(run_examples(rule, display_path(rule.path)))
    steps, step_errors = _next_steps([builtin_rules_dir(), *dirs])
    errors.extend(step_errors)
    missing = [k for k in KINDS if k not in steps]
    if missing:
        where = display_path(Path(builtin_rules_dir()) / NEXT_STEPS_FILE)
        errors.extend(RuleError(where, k, "no next step for this kind (every kind of the vocabulary needs one)") for k in missing)
    return errors


def _next_steps(dirs: list[Path]) -> tuple[dict[str, str], list[RuleError]]:
    """kind -> next-step sentence from each folder's next_steps.toml; a later folder's wins."""
    steps: dict[str, str] = {}
    errors: list[RuleError] = []
    seen: set[Path] = set()
    for d in dirs:
        f = Path(d) / NEXT_STEPS_FILE if Path(d).is_dir() else None
        if f is None or not f.is_file() or f.resolve() in seen:
            continue
        seen.add(f.resolve())
        got, errs = parse_next_steps(f, display_path(f))
        steps.update(got)
        errors.extend(errs)
    return steps, errors


def load_next_steps(dirs: list[Path] | None = None) -> dict[str, str]:
    """kind -> next step (built-in rules folder first, then `dirs`); ForensicsError when malformed."""
    steps, errors = _next_steps([builtin_rules_dir(), *[Path(d) for d in dirs or []]])
    if errors:
        raise ForensicsError(f"{len(errors)} error{'s' if len(errors) != 1 else ''} in next-step files",
                             where=errors[0].file, reason="\n    " + "\n    ".join(map(str, errors[:20])),
                             help="list them all with: forensics rules check", code=BAD_RULE)
    return steps


def evaluate(events: pl.LazyFrame, rules: list[Rule], *, census: bool = True) -> list[Finding]:
    """Every rule over a run's events (a LazyFrame of EVENT_SCHEMA); one Finding per rule that matched.
    Two scans of the events whatever the number of rules (forensics.rules.plan); `census=False`
    runs each rule over all the events instead (the definition, which tests hold the census to)."""
    return _evaluate(events, rules, census=census)
