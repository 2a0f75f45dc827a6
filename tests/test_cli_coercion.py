"""The pydantic-free coercion of command-line values (render/coercion.py) decides every value as
typer's own pydantic adapter does: the same Python value, or the same refusal."""
from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import typer
import typer.main
from typer._coercion import build_runtime_param

from forensics.cli import app
from forensics.render.coercion import PlainParam

SAMPLES: list[Any] = [None, "", "0", "12", "-1", "+3", "007", " 5", "5 ", "1_000", "1.0", "1e3", "abc", "table", "TABLE",
                      "Json", "csv", "text", "auto", "never", "xml", 0, 7, -2, True, False, ("3", "4"), ["1", "x"],
                      ("a", "b"), ("json",), "é", b"bytes"]


def _params(cmd: Any, path: str = "forensics") -> list[tuple[str, Any]]:
    """Every parameter of `cmd` and its sub-commands (--help and the completion options too)."""
    params = cmd.get_params(typer.Context(cmd))   # as parsing does: the plain coercion is installed here
    out = [(f"{path} {p.name}", p) for p in params if isinstance(getattr(p, "_runtime_param", None), PlainParam)]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _params(sub, f"{path} {name}")
    return out


def _outcome(coerce: Any, value: Any) -> tuple[str, Any]:
    try:
        v = coerce(value)
    except Exception as e:  # noqa: BLE001 - the refusal itself is what is compared
        return "refused", (type(e).__name__, str(e))
    return "value", (type(v).__name__, v if not isinstance(v, (list, tuple)) else [(type(x).__name__, x) for x in v])


PARAMS = _params(typer.main.get_command(app))


def test_every_plain_parameter_is_covered() -> None:
    names = {n for n, _ in PARAMS}
    assert "forensics last-10s per_rank" in names and "forensics last-10s rank" in names
    assert "forensics color" in names and "forensics help" in names and "forensics last-10s help" in names
    assert "forensics install_completion" in names and len(names) > 80


_TYPERS: dict[Any, Any] = {}


def _typers(p: Any) -> Any:
    """typer's own (pydantic) coercion for `p`; one per kind of parameter (each takes ~0.1 s to build)."""
    info = p.type_descriptor.parameter_info
    key = (str(p.type_descriptor.annotation), info.min, info.max, info.case_sensitive)
    if key not in _TYPERS:
        _TYPERS[key] = build_runtime_param(p.type_descriptor)
    return _TYPERS[key]


@pytest.mark.parametrize("name,p", PARAMS, ids=[n for n, _ in PARAMS])
def test_plain_coercion_matches_typers(name: str, p: Any) -> None:
    ctx = typer.Context(typer.main.get_command(app))
    typers = _typers(p)
    for value in SAMPLES:
        ours = _outcome(lambda v: p._runtime_param.coerce(v, param=p, ctx=ctx), value)
        theirs = _outcome(lambda v: typers.coerce(v, param=p, ctx=ctx), value)
        assert ours == theirs, (name, value)


def test_a_command_line_is_parsed_without_pydantic() -> None:
    code = ("import sys\nfrom forensics.cli import app\n"
            "try:\n    app(['last-10s', '/nonexistent', '--rank', '3', '-n', '5', '-f', 'JSON', '--window', '2s'])\n"
            "except BaseException:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
