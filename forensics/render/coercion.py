"""Command-line values turned into Python values without importing pydantic, for the plain types
the commands declare (str, int, bool, an Enum of choices, lists of these).

typer (>= 0.2x) coerces every parameter through a pydantic TypeAdapter, built on the first value
of each parameter: importing pydantic and building the adapters costs ~0.15-0.3 s of every
command's start, more than some commands take to answer. `install(p)` gives a parameter a
coercion that handles the values it is sure of exactly as typer's adapter would (a str stays
itself, "12" becomes 12 within the declared range, a choice is matched as typer matches it) and
hands every other value to typer's own coercion, so a refused value is refused with typer's
message (which render/usage.py then words) and an unusual one is read as typer reads it.

Owns nothing else; must not change what any value means. If typer's internals are not as
expected (another version), `install` leaves the parameter alone.
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Any, get_args, get_origin

try:  # private typer modules; none of them imports pydantic at import time
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_choice, routes_to_path
except ImportError:  # pragma: no cover - another typer: keep its own coercion
    RuntimeParam = None  # type: ignore[assignment,misc]

_INT = re.compile(r"[+-]?[0-9]+")   # what int() and pydantic read alike (no spaces, no "_", no "1.0")


class _Unsure(Exception):
    """A value this module does not decide: typer's own coercion takes it."""


def _leaf(kind: Any, value: Any, p: Any, ctx: Any) -> Any:
    """One value of type `kind`, or _Unsure."""
    if kind is str:
        if isinstance(value, str):
            return value
    elif kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, str) and _INT.fullmatch(value):
            n = int(value)
        elif type(value) is int:
            n = value
        else:
            raise _Unsure
        if (p.min is None or n >= p.min) and (p.max is None or n <= p.max):
            return n
    elif isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return coerce_cli_choice(value, choices=tuple(kind), case_sensitive=p.type_descriptor.case_sensitive, ctx=ctx)
        except ValueError:
            pass
    raise _Unsure


if RuntimeParam is not None:
    class PlainParam(RuntimeParam):  # type: ignore[misc,valid-type]
        """typer's RuntimeParam for a plain annotation: decided here, else by typer's adapter."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                if get_origin(self.annotation) is list:
                    kind = get_args(self.annotation)[0]
                    items = value if isinstance(value, (list, tuple)) else [value]
                    return [_leaf(kind, v, param, ctx) for v in items]
                return _leaf(self.annotation, value, param, ctx)
            except _Unsure:
                return build_runtime_param(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)


def _plain(annotation: Any) -> bool:
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return len(args) == 1 and _plain(args[0]) and get_origin(args[0]) is None
    return annotation in (str, int, bool) or (isinstance(annotation, type) and issubclass(annotation, Enum))


_WITH_PLAIN: dict[type, type] = {}


def install_command(cmd: Any) -> None:
    """Make `cmd` (a typer command or group) give each of its parameters the pydantic-free
    coercion as it parses: its declared ones, and those typer and click add later (--help, the
    completion options), whose coercion typer would otherwise also build with pydantic."""
    if RuntimeParam is None or type(cmd) in _WITH_PLAIN.values():
        return
    base = type(cmd)
    sub = _WITH_PLAIN.get(base)
    if sub is None:
        def get_params(self: Any, ctx: Any) -> list[Any]:
            params = super(sub, self).get_params(ctx)
            for p in params:
                install(p)
            return params

        # same instance layout (no new slots): the built command is switched to it in place
        sub = _WITH_PLAIN[base] = type(base.__name__, (base,), {"get_params": get_params, "__doc__": base.__doc__,
                                                               "__module__": base.__module__})
    cmd.__class__ = sub


def install(p: Any) -> None:
    """Give typer parameter `p` the pydantic-free coercion when its type is a plain one (no
    parser, no click type, no clamp, not a file or path)."""
    if RuntimeParam is None or getattr(p, "_runtime_param", "absent") is not None:
        return
    desc = getattr(p, "type_descriptor", None)
    info = getattr(desc, "parameter_info", None)
    if desc is None or info is None or desc.file_annotation is not None or not _plain(desc.annotation):
        return
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None \
            or getattr(info, "clamp", False) or routes_to_path(desc.annotation, info):
        return
    p._runtime_param = PlainParam(parameter_info=info, annotation=desc.annotation)
