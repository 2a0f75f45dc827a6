"""Masking secrets that log lines carry into a report (API keys, tokens, passwords, URL credentials).

Owns the patterns and `redact_report`, which returns a redacted deep copy. Seed 003 asks that API
keys and internal credentials stay out of logs; when they did not, a report pasted into a ticket
must not spread them further. Must not change numbers, ranks, file names or line numbers: a
redacted report still cites the same evidence.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from .model import Report

MASK = "***"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # NAME=value / NAME: value where NAME ends in a secret-ish word (WANDB_API_KEY, hf_token, password)
    (re.compile(r"(?i)(?<![A-Za-z0-9])([A-Za-z0-9_.-]*(?:api[_-]?key|secret|password|passwd|access[_-]?key|token))"
                r"(\"?\s*[:=]\s*\"?)([^\s\"',;]{8,})"), rf"\1\2{MASK}"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {MASK}"),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), f"hf_{MASK}"),                  # Hugging Face
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"), f"sk-{MASK}"),                # OpenAI-style
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), f"AKIA{MASK}"),           # AWS access key id
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"), f"gh_{MASK}"),           # GitHub
    (re.compile(r"\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), rf"\1{MASK}:{MASK}@"),  # user:pass@host
]

# Keys whose values are citations, never free text from a log.
_KEEP = {"source_file", "store", "timestamp", "first_seen", "last_seen", "start", "end"}


# Patterns a user added (--redact-pattern): every match is replaced by MASK.
_EXTRA: list[re.Pattern[str]] = []


def add_patterns(patterns: list[str] | None) -> None:
    """Also mask every match of these regular expressions (site-specific hostnames, paths ...)."""
    from ..errors import BAD_ARGUMENT, ForensicsError

    for p in patterns or []:
        try:
            _EXTRA.append(re.compile(p))
        except re.error as e:
            raise ForensicsError(f"cannot use --redact-pattern {p!r}", reason=f"not a regular expression: {e}",
                                 help="Python regex syntax, e.g. --redact-pattern '/home/[^/ ]+'",
                                 code=BAD_ARGUMENT) from None


def redact_text(s: str) -> str:
    for pat, rep in _PATTERNS:
        s = pat.sub(rep, s)
    for pat in _EXTRA:
        s = pat.sub(MASK, s)
    return s


def _walk(v: Any) -> Any:
    if isinstance(v, str):
        return redact_text(v)
    if isinstance(v, list):
        return [_walk(x) for x in v]
    if isinstance(v, dict):
        return {k: (x if k in _KEEP else _walk(x)) for k, x in v.items()}
    return v


def redact_json(d: dict[str, Any]) -> dict[str, Any]:
    """A redacted copy of a report's JSON form."""
    return _walk(d)


def redact_report(report: Report) -> Report:
    """A redacted deep copy: titles, evidence texts and values, chain sentences, per-rank rows."""
    r = copy.deepcopy(report)
    for f in r.findings:
        f.title = redact_text(f.title)
        f.next = redact_text(f.next) if f.next else f.next
        f.evidence = _walk(f.evidence)
        for e in f.lines:
            e.text = redact_text(e.text) if e.text else e.text
    if r.root_cause is not None:
        r.root_cause.summary = redact_text(r.root_cause.summary)
        r.root_cause.next = redact_text(r.root_cause.next) if r.root_cause.next else r.root_cause.next
        for c in r.root_cause.chain:
            c.finding = redact_text(c.finding)
            for e in c.lines:
                e.text = redact_text(e.text) if e.text else e.text
    r.per_rank = _walk(r.per_rank)
    return r
