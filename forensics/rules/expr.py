"""The arithmetic a rule may write on the right-hand side of a condition (`expr = "0.4 * step_time_ms"`).

Owns a tiny, closed grammar and its compilation to a polars expression:

    expr   := term (('+' | '-') term)*
    term   := factor (('*' | '/') factor)*
    factor := NUMBER | PARAM | COLUMN | FUNC '(' COLUMN ')' | '(' expr ')' | '-' factor
    FUNC   := max | min | mean | median      (over the same rank: a per-rank baseline)

PARAM names come from the rule's `[params]`; COLUMN names are numeric event columns. Nothing is
ever passed to eval(): text is tokenised by one regular expression and parsed by hand, so a rule
file can name data but never run code. Must not know about rule files or findings.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Callable

import polars as pl

FUNCS = ("max", "min", "mean", "median")
# The same four operators serve numbers (constant folding) and polars expressions.
_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}

_TOKEN = re.compile(r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[-+*/()]))")


class ExprError(ValueError):
    """The text is not in the grammar, or names something that does not exist."""


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Col:
    name: str


@dataclass(frozen=True)
class Agg:
    func: str
    col: str


@dataclass(frozen=True)
class Neg:
    arg: "Node"


@dataclass(frozen=True)
class BinOp:
    op: str
    left: "Node"
    right: "Node"


Node = Num | Col | Agg | Neg | BinOp


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos:].strip()[:1]!r} at position {pos}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def parse(text: str, params: dict[str, float], columns: set[str]) -> Node:
    """Parse `text`; params are folded to numbers, unknown names are errors."""
    toks = _tokens(text)
    if not toks:
        raise ExprError("empty expression")
    i = 0

    def peek() -> tuple[str, str] | None:
        return toks[i] if i < len(toks) else None

    def take() -> tuple[str, str]:
        nonlocal i
        if i >= len(toks):
            raise ExprError("expression ends too early")
        i += 1
        return toks[i - 1]

    def expect(op: str) -> None:
        t = take()
        if t != ("op", op):
            raise ExprError(f"expected {op!r}, found {t[1]!r}")

    def column(name: str) -> str:
        if name not in columns:
            raise ExprError(f"unknown name {name!r} (not a parameter in [params] nor a numeric event column)")
        return name

    def factor() -> Node:
        kind, tok = take()
        if kind == "num":
            return Num(float(tok))
        if kind == "op" and tok == "-":
            return Neg(factor())
        if kind == "op" and tok == "(":
            node = expr()
            expect(")")
            return node
        if kind == "name":
            nxt = peek()
            if nxt == ("op", "("):
                if tok not in FUNCS:
                    raise ExprError(f"unknown function {tok!r} (allowed: {', '.join(FUNCS)})")
                take()
                k, arg = take()
                if k != "name":
                    raise ExprError(f"{tok}() takes a column name, found {arg!r}")
                expect(")")
                return Agg(tok, column(arg))
            if tok in params:
                return Num(float(params[tok]))
            return Col(column(tok))
        raise ExprError(f"unexpected {tok!r}")

    def term() -> Node:
        node = factor()
        while peek() in (("op", "*"), ("op", "/")):
            node = BinOp(take()[1], node, factor())
        return node

    def expr() -> Node:
        node = term()
        while peek() in (("op", "+"), ("op", "-")):
            node = BinOp(take()[1], node, term())
        return node

    node = expr()
    if i != len(toks):
        raise ExprError(f"unexpected {toks[i][1]!r} after the end of the expression")
    return node


def constant(node: Node) -> float | None:
    """The value when the expression names no column (a fixed threshold), else None."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Neg):
        v = constant(node.arg)
        return None if v is None else -v
    if isinstance(node, BinOp):
        a, b = constant(node.left), constant(node.right)
        if a is None or b is None or (node.op == "/" and b == 0):
            return None
        return _ARITH[node.op](a, b)
    return None


def _columns(node: Node, row: bool, agg: bool) -> set[str]:
    """The columns the expression reads from the row itself (`row`) and/or through an aggregate."""
    if isinstance(node, Col):
        return {node.name} if row else set()
    if isinstance(node, Agg):
        return {node.col} if agg else set()
    if isinstance(node, Neg):
        return _columns(node.arg, row, agg)
    if isinstance(node, BinOp):
        return _columns(node.left, row, agg) | _columns(node.right, row, agg)
    return set()


def columns_of(node: Node) -> set[str]:
    return _columns(node, True, True)


def aggregated_columns(node: Node) -> set[str]:
    """The columns read through an aggregate (the per-rank baselines)."""
    return _columns(node, False, True)


def row_columns(node: Node) -> set[str]:
    """The columns read from the row itself (not through an aggregate)."""
    return _columns(node, True, False)


def to_polars(node: Node, per: str, ref: Callable[[str], pl.Expr] = pl.col) -> pl.Expr:
    """Compile to a polars expression; aggregates are taken over the rows of the same `per` key.
    `ref` names where a column's value is (a census reads per-step values under other names)."""
    if isinstance(node, Num):
        return pl.lit(node.value, dtype=pl.Float64)
    if isinstance(node, Col):
        return ref(node.name).cast(pl.Float64)
    if isinstance(node, Agg):
        c = ref(node.col).cast(pl.Float64)
        return getattr(c, node.func)().over(per)
    if isinstance(node, Neg):
        return -to_polars(node.arg, per, ref)
    return _ARITH[node.op](to_polars(node.left, per, ref), to_polars(node.right, per, ref))
