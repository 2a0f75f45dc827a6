"""Masking secrets that log lines carry into any output (API keys, tokens, passwords, URL
credentials, private keys): the one redaction policy of every command.

Owns the patterns and the functions that apply them: `redact_text` (one string), `redact_frame`
(every text column of a frame a command prints or writes: events, last-10s, timeline, sql,
rejects), `redact_obj` (the strings of a result object, e.g. lint's) and `redact_report` (a
report). Seed 003 asks that API keys and internal credentials stay out of logs; when they did
not, an output pasted into a ticket must not spread them further.

What is a secret here: credentials (values of *_API_KEY / *SECRET* / *PASSWORD* / *TOKEN* keys,
bearer/basic auth values, user:password in URLs, provider tokens with a known shape, PEM private
keys, bare 40-character AWS secret keys). What is not: file paths, host names and IP addresses
(private ones included): they are how a reader finds the node and the line, and an NCCL error
naming the peer's address is evidence; a site that must hide them adds `--redact-pattern`.

Must not change numbers, ranks, file names or line numbers: a redacted output still cites the
same evidence (citation columns/keys are never touched).
"""
from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import polars as pl

from .model import Report

MASK = "***"

# Redaction by structure, not by word: a value is masked up to its own delimiter wherever a secret
# is announced by the text around it: the value after a secret-named key (up to its closing
# quote, or to the end of an unquoted value), after an auth scheme, and a URL's userinfo (to its
# last '@'). Shapes only where nothing announces the secret (provider tokens, PEM blocks, bare AWS
# keys). Every pattern runs in time linear in the text: a run it could start anywhere in is
# entered only at its start (look-behind), consumed without backtracking (possessive), and a
# value is bounded (tests/test_regex_linear.py runs each on 1 MB adversarial lines).
#
# Secret-ish key names (WANDB_API_KEY, aws_secret_access_key, hf_token, db.password): the match
# starts at the key word, so the name before it is kept as logged. A password is masked whatever
# its length; a key or token value from 8 characters (`num_token=5` is a count, not a secret).
_PASSWORD = r"secret|password|passwd|credentials?"
_KEY = r"api[_-]?key|access[_-]?key|token"
# A value that looks generated (has a digit, / or +), not a word: "HF_TOKEN not set" stays.
_B64 = r"[A-Za-z0-9/+=_.-]"
# After the key: its closing quote (JSON, also escaped inside a JSON string), then = or :.
_SEP = r"""(\\?["']?\s*+[:=]\s*+)"""
# The value: quoted (to the closing quote: "correct horse staple" is one password), escaped-quoted
# (\"...\" inside a JSON string), or bare, to a blank, quote, ; & ) } ] or backslash (abc,def is
# one password). A quoted value longer than 1 KiB is taken as bare (its first word masked).
_VALUE = (r"""(\\"(?:[^"\\]|\\[^"]){0,1024}+\\"|"(?:[^"\\\n]|\\.){0,1024}+"|'[^'\n]{0,1024}+'"""
          r"""|[^\s"'<>;&)}\]\\]++)""")


def _mask_value(m: re.Match[str], least: int = 0) -> str:
    """key + separator + the value masked inside its quotes; unchanged when the value is shorter
    than `least` characters (a count, not a key)."""
    v = m.group(3)
    q = 2 if v.startswith('\\"') else 1 if v[0] in "\"'" else 0
    inner = v[q:len(v) - q] if q else v
    if len(inner) < least:
        return m.group(0)
    return f"{m.group(1)}{m.group(2)}{v[:q]}{MASK}{v[len(v) - q:] if q else ''}"


# (guard, pattern, replacement): a pattern runs only on text that holds one of its guard's
# literals (lower-cased) or matches its guard regex; most log lines hold none of them.
_PATTERNS: list[tuple[tuple[str, ...] | re.Pattern[str], re.Pattern[str], Any]] = [
    # PEM private keys, the whole block (several lines in one message); an unterminated block is
    # masked to the end of the text (a line cut at 4 KiB keeps its head only)
    (("private key",),
     re.compile(r"-----BEGIN ([A-Z0-9 ]{0,32})PRIVATE KEY-----[^-]*+(?:-(?!----END )[^-]*+)*+"
                r"(-----END [A-Z0-9 ]{0,32}PRIVATE KEY-----|\Z)"),
     rf"-----BEGIN \1PRIVATE KEY-----{MASK}\2"),
    # user:password@ in URLs: empty user (redis://:pw@h), '@' or '/' inside the password
    # (u:p@ss@h, u:pa/ss@h: to the last '@' of the address), slashes escaped in JSON (:\/\/)
    (("//", "\\/\\/"), re.compile(r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]{0,31}+:(?:\\?/){2})[^/\\\s:@\"'<>]{0,256}+:"
                        r"(?:[^\s\"'<>@]{0,256}+@){1,8}"), rf"\1{MASK}:{MASK}@"),
    # Authorization: <scheme> <credentials> (HTTP headers, curl -H, a request dump): whatever the
    # credentials look like
    (("authorization",),
     re.compile(r"""(?i)(\b(?:proxy-)?authorization\\?["']?\s*+[:=]\s*+\\?["']?)"""
                r"((?:bearer|basic|digest|negotiate|token|apikey|aws4-hmac-sha256|ntlm)\s++)?([^\s\"'\\]++)"),
     lambda m: f"{m.group(1)}{m.group(2) or ''}{MASK}"),
    # NAME=value / NAME: value / "NAME": "value" (also JSON escaped inside a string), any length
    (("secret", "passw", "credential"), re.compile(rf"(?i)({_PASSWORD}){_SEP}{_VALUE}"), _mask_value),
    (("key", "token"), re.compile(rf"(?i)({_KEY}){_SEP}{_VALUE}"), lambda m: _mask_value(m, 8)),
    # DB_PASSWORD hunter2 / PASSWORD Xyz (an environment dump, a prompt): upper-case name, blank, value
    (("passw", "secret"), re.compile(r"(PASSWORD|PASSWD|SECRET)([ \t]++)(?![:=])([^\s\"'<>]++)"), rf"\1\2{MASK}"),
    # AWS_SECRET_ACCESS_KEY value (an environment dump, a shell trace): upper-case name, blank
    (("key", "token"),
     re.compile(rf"(API_KEY|ACCESS_KEY|TOKEN)(\s++)(?={_B64}*[0-9/+]){_B64}{{8,}}"),
     rf"\1\2{MASK}"),
    # a bearer token: a generated value from 8 characters, any value from 16 ("Bearer token" stays)
    (("bearer", "basic"),
     re.compile(r"(?i)\b(bearer|basic)\s++(?:(?=[A-Za-z0-9._~+/=-]*[0-9=+/])[A-Za-z0-9._~+/=-]{8,}+"
                r"|(?<=[Bb][Ee][Aa][Rr][Ee][Rr] )[A-Za-z0-9._~+/=-]{16,}+)"),
     rf"\1 {MASK}"),
    (("hf_",), re.compile(r"\bhf_(?=[A-Za-z0-9]*[A-Z0-9])[A-Za-z0-9]{6,}\b"), f"hf_{MASK}"),       # Hugging Face
    (("sk-",), re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}+"), f"sk-{MASK}"),              # OpenAI-style
    (("akia", "asia"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), f"AKIA{MASK}"),               # AWS key id
    (("gh",), re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"), f"gh_{MASK}"),                        # GitHub
    (("github_pat_",), re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,}+"), f"github_pat_{MASK}"),
    (("xox",), re.compile(r"(?<![A-Za-z0-9-])(xox[abprs])-[A-Za-z0-9-]{10,}+"), rf"\1-{MASK}"),    # Slack
    # a bare AWS secret access key: 40 of [A-Za-z0-9/+] with upper, lower and a digit (a git hash
    # is lower-case hex, a path starts with '/')
    (re.compile(r"[A-Za-z0-9/+]{40}"),
     re.compile(r"(?<![A-Za-z0-9/+=])(?!/)(?=[A-Za-z0-9/+]*[A-Z])(?=[A-Za-z0-9/+]*[a-z])(?=[A-Za-z0-9/+]*[0-9])"
                r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), MASK),
]

# A cheap necessary condition for any built-in pattern to match, in the regex dialect polars
# runs (no look-around): frames test it on whole columns at once and run the exact patterns only
# on the rows it hits. Each alternative is a literal every pattern of the list above needs.
_TRIGGER = (r"(?i)key|secret|passw|token|credential|authorization|bearer|basic|hf_|sk-|akia|asia|gh[pousr]_|github_pat_"
            r"|xox[abprs]-|:(?:\\?/){2}\S*@|[A-Za-z0-9/+]{40}")

# Columns and keys whose values are citations or times, never free text from a log.
_KEEP = {"source_file", "store", "timestamp", "first_seen", "last_seen", "start", "end", "where",
         "last_where", "file", "path_given"}
# Not secrets by the built-in policy, but a site's own --redact-pattern (a host naming scheme) applies.
_USER_ONLY = {"host"}


# The current command's own patterns (--redact-pattern, a config's redact-patterns): every match
# is replaced by MASK. Set whole by each command (set_patterns), never added to across commands.
_EXTRA: list[re.Pattern[str]] = []


def set_patterns(patterns: list[str] | None) -> None:
    """Mask every match of these regular expressions too (site-specific hostnames, paths ...),
    instead of the patterns an earlier call set: one command's patterns never leak into the next
    one run in the same process (a notebook, a test). A bad pattern changes nothing."""
    from ..errors import BAD_ARGUMENT, ForensicsError

    compiled: list[re.Pattern[str]] = []
    for p in patterns or []:
        try:
            compiled.append(re.compile(p))
        except re.error as e:
            raise ForensicsError(f"cannot use --redact-pattern {p!r}", reason=f"not a regular expression: {e}",
                                 help="Python regex syntax, e.g. --redact-pattern '/home/[^/ ]+'",
                                 code=BAD_ARGUMENT) from None
    _EXTRA[:] = compiled


def redact_text(s: str) -> str:
    """`s` with every secret of the policy (and every --redact-pattern match) replaced by ***."""
    low = s.lower()
    for guard, pat, rep in _PATTERNS:
        if guard.search(s) if isinstance(guard, re.Pattern) else any(g in low for g in guard):
            s = pat.sub(rep, s)
    for pat in _EXTRA:
        s = pat.sub(MASK, s)
    return s


def _series(s: pl.Series) -> pl.Series:
    """A String series redacted: the trigger on the whole column (vectorised), the exact
    patterns only on the values it hits."""
    if _EXTRA:
        hit = s.is_not_null()
    else:
        hit = s.str.contains(_TRIGGER).fill_null(False)
    if not hit.any():
        return s
    idx = hit.arg_true()
    return s.clone().scatter(idx, pl.Series([redact_text(v) for v in s.gather(idx).to_list()], dtype=pl.String))


def _has_text(dtype: pl.DataType) -> bool:
    if dtype == pl.String:
        return True
    if isinstance(dtype, (pl.List, pl.Array)):
        return _has_text(dtype.inner)
    if isinstance(dtype, pl.Struct):
        return any(_has_text(f.dtype) for f in dtype.fields)
    return False


def _any(s: pl.Series) -> pl.Series:
    """Redact a column of any type: strings, and strings inside lists and structs (SQL results)."""
    if s.dtype == pl.String:
        return _series(s)
    if isinstance(s.dtype, pl.List) and _has_text(s.dtype.inner):
        inner = s.dtype.inner
        return s.list.eval(pl.element().map_batches(_any, return_dtype=inner)).alias(s.name)
    if isinstance(s.dtype, pl.Struct) and _has_text(s.dtype):
        fields = [_any(f) for f in s.struct.unnest().iter_columns()]
        out = pl.DataFrame(fields).to_struct(s.name)
        return out if not s.null_count() else pl.select(pl.when(s.is_not_null()).then(out)).to_series().alias(s.name)
    return s


def redact_frame(df: pl.DataFrame, columns: list[str] | None = None) -> pl.DataFrame:
    """`df` with every text column (or only `columns`) redacted; citation columns (source_file,
    host, where ...) are left as they are. Nothing is copied when no value needs masking."""
    cols = columns if columns is not None else [c for c, t in df.schema.items() if c not in _KEEP and _has_text(t)]
    changed = [_any(df[c]) for c in cols if c in df.columns]
    return df.with_columns(changed) if changed else df


def redact_obj(obj: Any) -> Any:
    """A redacted deep copy of a result object (dataclasses, dicts, lists): every string but
    the citation fields (see _KEEP)."""
    return _walk(copy.deepcopy(obj))


_NUMBERS = (int, float, bool)


def _walk(v: Any) -> Any:
    if v is None or type(v) in _NUMBERS:     # most values of a report (per-rank numbers): nothing to mask
        return v
    if isinstance(v, str):
        return redact_text(v)
    # numbers and None inline (a call per value was most of the walk over 4,096 per-rank rows)
    if isinstance(v, list):
        return [x if x is None or type(x) in _NUMBERS else _walk(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_walk(x) for x in v)
    if isinstance(v, dict):
        return {k: x if x is None or type(x) in _NUMBERS else _field(k, x) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        for f in dataclasses.fields(v):
            setattr(v, f.name, _field(f.name, getattr(v, f.name)))
        return v
    return v


def _field(name: str, v: Any) -> Any:
    if name in _KEEP:
        return v
    if name in _USER_ONLY:
        return _user_only(v) if isinstance(v, str) else v
    return _walk(v)


def _user_only(s: str) -> str:
    for pat in _EXTRA:
        s = pat.sub(MASK, s)
    return s


def redact_json(d: dict[str, Any]) -> dict[str, Any]:
    """A redacted copy of a report's JSON form."""
    return _walk(d)


def redact_report(report: Report) -> Report:
    """A redacted deep copy: titles, evidence texts and values, chain sentences, per-rank rows."""
    # per_rank (a row per rank: 10,240 on a big run) is not deep-copied first: _walk builds new rows
    r = copy.deepcopy(dataclasses.replace(report, per_rank=[]))
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
    r.per_rank = _walk(report.per_rank)
    return r
