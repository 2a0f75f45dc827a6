"""Every regular expression the text readers (console, telemetry, templates) and the redaction of
every output (report/redact.py) run on untrusted lines takes time linear in the line: each module-level pattern (found by walking the
module, so a new pattern is covered without editing this file) is searched through 1 MB lines
built to make a backtracking regex quadratic (runs of digits, blanks, one separator, one word).
The bound is on the CPU time of this process (a timer that counts it stops a search past the
bound), so a machine loaded by other work does not make a linear pattern fail.

Measured on the 2-core shared build machine (2026-12-04, load 15): most patterns 1-20 ms per 1 MB
line, the slowest 50-300 ms; before the fix a line of 8,000 digits behind `CUDA error: out of memory`
took 5.9-21 s (_FREE_MS, _MEM) and a 1 MB one would take hours. The bound is generous for a
loaded machine and still far below what a quadratic pattern needs."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import signal
import time
from types import ModuleType

import pytest

from forensics.ingest import console, telemetry, templates
from forensics.report import redact

LINE = 1 << 20
BOUND_S = 2.0
# one character class or separator repeated: what makes `X+Y` patterns restart at every position
UNITS = ["1", " ", "\t", "a", "_", "1.", ".", "a.b-c_d", ":", "[", "=", "-", '"', 'a="']


def _patterns(mod: ModuleType, own: bool = False) -> dict[str, re.Pattern[str]]:
    """`own`: only the names the module assigns (not those it imports from a sibling)."""
    out: dict[str, re.Pattern[str]] = {}
    mine = {t.id for st in ast.parse(inspect.getsource(mod)).body if isinstance(st, (ast.Assign, ast.AnnAssign))
            for t in (st.targets if isinstance(st, ast.Assign) else [st.target]) if isinstance(t, ast.Name)}

    def walk(name: str, v: object, depth: int) -> None:
        if isinstance(v, re.Pattern):
            out[name] = v
        elif depth < 3 and isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{name}[{i}]", x, depth + 1)
        elif depth < 3 and isinstance(v, dict):
            for k, x in v.items():
                walk(f"{name}[{k!r}]", x, depth + 1)

    name = mod.__name__.removeprefix("forensics.ingest.").removeprefix("forensics.report.")
    for k, v in vars(mod).items():
        if not own or k in mine:
            walk(f"{name}.{k}", v, 0)
    return out


# the console reader is a package: every module of it (prefixes, timestamps, exits, ...)
CONSOLE = [importlib.import_module(f"{console.__name__}.{m.name}") for m in pkgutil.iter_modules(console.__path__)]
PATTERNS = {k: v for m, own in [*((c, True) for c in CONSOLE), (telemetry, False), (templates, False), (redact, False)]
            for k, v in _patterns(m, own).items() if isinstance(v.pattern, str)}


def test_the_walk_finds_the_patterns() -> None:
    assert len(PATTERNS) > 50 and "console.progress._FREE_MS" in PATTERNS and "telemetry._LABEL" in PATTERNS
    assert "redact._PATTERNS[0][1]" in PATTERNS


class _Slow(Exception):
    pass


def _stop(*_: object) -> None:
    raise _Slow   # the regex engine checks for signals while it matches: a quadratic search ends here


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_each_pattern_is_linear_on_a_1mb_adversarial_line(name: str) -> None:
    pat = PATTERNS[name]
    slow = []
    old = signal.signal(signal.SIGVTALRM, _stop)
    try:
        for unit in UNITS:
            line = (unit * (LINE // len(unit) + 1))[:LINE]
            t = time.process_time()
            signal.setitimer(signal.ITIMER_VIRTUAL, BOUND_S)
            try:
                for _ in pat.finditer(line):
                    pass
            except _Slow:
                slow.append(f"{unit!r}: stopped after {time.process_time() - t:.1f} s")
            finally:
                signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    finally:
        signal.signal(signal.SIGVTALRM, old)
    assert not slow, f"{name} ({pat.pattern!r}) on 1 MB lines of " + ", ".join(slow)
