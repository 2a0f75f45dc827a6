"""How the command line presents itself: help that names values as users do, usage errors in
plain words, and colour that honours NO_COLOR and `--color`.

Owns the typer/click side of presentation that every command shares, so that commands added to
`forensics.cli` get it without asking: `ReadableGroup` (the root group class) walks every
command once built and
- shows values by what they are (`PATH...`, `N`, `TIME`, `FORMAT`) instead of Python types
  (`<list[str]>`, `<int range>`), and ranges as `[at least 0]` instead of `[x>=0]`;
- refuses a bad value in one sentence that names the option, what it takes and what it got
  ("--format must be one of: table, jsonl, csv (got 'xml')") instead of a validator's wording.
`console()` builds the rich consoles: `--color never`, or NO_COLOR set to anything but the empty
string (https://no-color.org), means no escape codes at all (rich's own NO_COLOR support drops
colours but keeps bold and dim); `--color always` styles even a pipe.
Must not define commands or options (cli.py does) nor render results.
"""
from __future__ import annotations

import os
from enum import Enum
from typing import Any

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperGroup, TyperOption

from .coercion import install_command as plain_coercion

COLOR_MODES = ("auto", "always", "never")


def colour_off(mode: str) -> bool:
    """No styles at all: `--color never`, or `auto` with NO_COLOR set (any non-empty value)."""
    return mode == "never" or (mode == "auto" and bool(os.environ.get("NO_COLOR")))


class Unpadded:
    """A text stream that writes each line without its trailing blanks. Rich pads every table
    row to the table's width; on a terminal that is invisible, in a pipe or a file it makes every
    line as long as the widest (lint: 216 characters of which 120 spaces). Resolves sys.stdout /
    sys.stderr at each write, as rich does (a test runner swaps them)."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr, self._pending = stderr, ""

    @property
    def _stream(self) -> Any:
        import sys

        return sys.stderr if self._stderr else sys.stdout

    def write(self, text: str) -> int:
        *done, self._pending = (self._pending + text).split("\n")
        if done:
            self._stream.write("".join(line.rstrip(" ") + "\n" for line in done))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending.rstrip(" "))
            self._pending = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._stream.fileno()


def console(mode: str = "auto", *, stderr: bool = False, width: int | None = None, unpadded: bool = False) -> Console:
    """A rich console for stdout (or stderr) under the colour mode; `unpadded`: for a pipe or a
    file, lines without trailing blanks (see Unpadded)."""
    file = Unpadded(stderr) if unpadded else None
    if colour_off(mode):
        return Console(file=file, stderr=stderr, soft_wrap=True, width=width, color_system=None, no_color=True)
    if mode == "always":
        return Console(file=file, stderr=stderr, soft_wrap=True, width=width, force_terminal=True, color_system="standard")
    return Console(file=file, stderr=stderr, soft_wrap=True, width=width)


def styled(c: Console) -> bool:
    """Whether `c` writes escape codes (a terminal, or forced, with a colour system)."""
    return c.is_terminal and c.color_system is not None


# --- help and usage errors ------------------------------------------------------------------------

class Refused(typer.BadParameter):
    """A usage error (exit 2) whose message is the whole sentence."""

    def format_message(self) -> str:
        return self.message


def _choices(p: Any) -> list[str]:
    desc = p.type_descriptor
    return [str(c.value if isinstance(c, Enum) else c) for c in (desc.choices or ())] if desc.is_choice else []


def _kind(p: Any) -> type | None:
    from typing import get_args, get_origin

    ann = p.type_descriptor.annotation
    if get_origin(ann) is list:
        ann = get_args(ann)[0]
    return ann if isinstance(ann, type) else None


def _range_text(lo: float | None, hi: float | None) -> str | None:
    if lo is None and hi is None:
        return None
    if hi is None:
        return f"at least {lo}"
    if lo is None:
        return f"at most {hi}"
    return f"{lo} to {hi}"


def _name(p: Any) -> str:
    if isinstance(p, TyperArgument):
        return p.metavar or p.name.upper()
    longs = [o for o in p.opts if o.startswith("--")]
    return (longs or p.opts)[0]


def refusal(p: Any, value: Any) -> str | None:
    """The one-sentence reason `value` is refused for `p`, or None when it is not a value
    problem this module words."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    items = [v for v in items if v is not None]
    name = _name(p)
    choices = _choices(p)
    if choices:
        norm = [c.casefold() for c in choices]
        bad = next((v for v in items if str(v).casefold() not in norm), None)
        if bad is not None:
            return f"{name} must be one of: {', '.join(choices)} (got {str(bad)!r})"
        return None
    kind = _kind(p)
    if kind in (int, float):
        what = "a whole number" if kind is int else "a number"
        for v in items:
            try:
                n = kind(v)
            except (TypeError, ValueError):
                return f"{name} takes {what} (got {str(v)!r})"
            if (p.min is not None and n < p.min) or (p.max is not None and n > p.max):
                return f"{name} must be {_range_text(p.min, p.max)} (got {v})"
    return None


def _worded(p: Any, ctx: Any, value: Any, coerce: Any) -> Any:
    """typer's coercion (`coerce`), with a refusal in plain words when the value is wrong."""
    try:
        return coerce(ctx, value)
    except typer.BadParameter as e:
        if isinstance(e, Refused) or type(e).__name__ == "MissingParameter":
            raise
        said = refusal(p, value)
        if said is None:
            raise
        raise Refused(said, ctx=ctx, param=p) from None


# Single inheritance and no state of their own: typer's parameters are switched to these classes
# after they are built (a class with a mixin base would not have the same instance layout).
class ReadableOption(TyperOption):
    def process_value(self, ctx: Any, value: Any) -> Any:
        return _worded(self, ctx, value, super().process_value)

    def _get_number_range_help_str(self) -> str | None:
        return _range_text(self.min, self.max)


class ReadableArgument(TyperArgument):
    """Shown by its metavar alone (`PATH...`), in help and in the usage line."""

    def process_value(self, ctx: Any, value: Any) -> Any:
        return _worded(self, ctx, value, super().process_value)

    def _get_number_range_help_str(self) -> str | None:
        return _range_text(self.min, self.max)

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _rich_display_name(self) -> str:
        return self._usage_name()

    def _usage_name(self) -> str:
        name = self.metavar or self.name.upper()
        return name if self.nargs == 1 or name.endswith("...") else name + "..."

    def _usage_display_name(self) -> str:
        name = self._usage_name()
        return name if self.required else f"[{name}]"


def _default_metavar(p: Any) -> str | None:
    if getattr(p, "is_flag", False) or getattr(p, "count", False):
        return None
    choices = _choices(p)
    if choices:
        return "|".join(choices)
    kind = _kind(p)
    if kind is int:
        return "N"
    if kind is float:
        return "NUM"
    return "TEXT"


def make_readable(cmd: Any) -> None:
    """Give every parameter of `cmd` (and of its sub-commands) the readable classes and a
    metavar a user understands, where the declaration did not give one."""
    for p in cmd.params:
        if type(p) is TyperOption:
            p.__class__ = ReadableOption
        elif type(p) is TyperArgument:
            p.__class__ = ReadableArgument
        if isinstance(p, TyperOption) and p.metavar is None:
            p.metavar = _default_metavar(p)
    plain_coercion(cmd)   # values read without pydantic (render/coercion.py)
    for sub in getattr(cmd, "commands", {}).values():
        make_readable(sub)


class ReadableGroup(TyperGroup):
    """The root group: once typer has built it, every command in it is made readable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        make_readable(self)

