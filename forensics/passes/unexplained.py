"""Does the verdict account for every error in the input? The ERROR lines no finding explains.

Question: after every pass and rule has run, which ERROR-level events (the store maps ERROR,
ERR, FATAL, CRITICAL onto ERROR: schema.LEVEL_ALIASES; tracebacks, launcher exits and kills are
ERROR events too) are neither cited by a finding nor explained under one? Each process whose
errors are left over becomes an `unexplained_error` finding: never dropped, earliest first.

An ERROR line is *explained* when
1. a finding cites it (its file:line, or its traceback's first line, is in the finding's
   evidence lines) — whatever the finding: this is all a slowdown or a training signal can
   account for, as they are an error's consequences (a rank that died lags), not its reason; or
2. it is a failure F's own or F's cascade (F at WARN or above, of a kind that ends or breaks a
   run: rootcause.FAILURES, the scheduler's cancel, a data-load error, a non-finite value, an
   unexplained error), and it can have been written at or after F's first_seen — failures
   cascade in time (seed 000 §4.3, rootcause.py); one second of slack, as hosts' clocks
   disagree by that much after alignment; a line without a time is placed between the
   timestamped lines around it in its file — and one of:
   - its rank is one of F's ranks or victims, or its (host, local rank) one of F's local ranks —
     F's ranks only when F does not name them by their silence: a rank said to have stopped or
     never joined "without an error of its own" (basis last_to_log, never_joined) that did log
     one has a fact F missed, and F does not explain it;
   - it names no process (a launcher's or a host's line), or F concerns the whole job (no rank,
     or every rank);
   - it is a cascade line, whatever its rank: a launcher's exit or kill record (CHILD_FAILED,
     PROCESS_KILLED), a teardown exception (SignalException, KeyboardInterrupt ...) or a lost
     peer / timeout (the text passes.failures reads as a victim's error). When one rank dies
     the launcher kills the others and the survivors lose their peer: those lines follow
     every failure (passes/failures/'s domain facts).

What is left is grouped per process (the rank; else host and local rank; else the host), and
the earliest process's own error (not a cascade line) explains the cascade lines after it on
other processes, as in 3. Ranks whose first error is the same (event and message, numbers
masked: a bad config every rank reads) are one finding naming them all. Domain fact for the
grouping: a rank's first error is the one that says what happened; the later ones are its
consequences, counted, not repeated.

No per-event Python loop: the accounting joins the error rows with the findings' scopes by
rank and by local rank (a scope may name every rank: rows x scopes would hold a copy of its
rank list per row) and groups per process.
Must not: change the other findings, or pick the root cause (rootcause.py ranks these after
real failures).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import polars as pl

from ..report.model import Finding, local_ranks_phrase
from .context import Context
from .evidence import cite, iso, parse_iso, pass_id, ranks_phrase, shorten
from .failures.classify import TEARDOWN_RE, TIMEOUT_RE, _placed
from .failures.rows import LAUNCHERS
from .rootcause import FAILURES, NON_CAUSAL

KIND = "unexplained_error"
# Kinds that end or break a run: what comes after them on their ranks is their cascade.
ENDING_KINDS = FAILURES | {"job_cancelled", "data_load_error", "non_finite", KIND}
# Process records a launcher writes when a worker exits or is killed.
DEATH_EVENTS = ["CHILD_FAILED", "PROCESS_KILLED", "HOST_OOM_KILL"]
SLACK = dt.timedelta(seconds=1)
# How a failure's culprit is named by its silence (spec/report.md `basis`): it stopped, or never
# joined, "without an error of its own". (A rank named by its peers may report the same failure
# from its side — a fingerprint mismatch raises on every rank — so that basis explains its errors.)
SILENT_BASES = {"last_to_log", "never_joined"}
COLUMNS = ["rank", "host", "local_rank", "timestamp", "level", "event", "message", "exit_code", "extra",
           "source_file", "line"]
_EXC = r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure|Warning))\b"
_TIME = pl.Datetime("us", "UTC")


def is_error_line() -> pl.Expr:
    """An ERROR event, or a launcher's record of a worker that exited non-zero or was killed."""
    code = pl.col("exit_code")
    return (pl.col("level") == "ERROR") | (pl.col("event").is_in(DEATH_EVENTS) & (code.is_null() | (code != 0)))


def is_cascade_line() -> pl.Expr:
    """A line every failure leaves on the other processes: an exit or kill record, a teardown
    exception, a lost peer or a timeout."""
    msg = pl.col("message").fill_null("")
    return (pl.col("event").is_in(DEATH_EVENTS) | msg.str.contains(TEARDOWN_RE) | msg.str.contains(TIMEOUT_RE)
            | pl.col("event").fill_null("").str.contains("(?i)TIMEOUT|WATCHDOG"))


def with_cascade(df: pl.DataFrame) -> pl.DataFrame:
    """`df` (error_rows) with `casc`: a cascade line (`is_cascade_line`), or a continuation line
    of a traceback whose first line is one (a traceback is one error)."""
    df = df.with_columns(is_cascade_line().alias("casc"))
    heads = df.filter(pl.col("casc")).select("source_file", pl.col("line").alias("head"), pl.lit(True).alias("_hc")).unique()
    return (df.join(heads, on=["source_file", "head"], how="left", maintain_order="left")
            .with_columns(pl.col("casc") | pl.col("_hc").fill_null(False)).drop("_hc"))


def error_rows(ctx: Context) -> pl.DataFrame:
    """The run's error lines (COLUMNS), each with the span of time it can have been written in, on
    the common clock: `t_lo`..`t_hi` (both its own time when it has one; an untimed line — a
    traceback on the console — lies between the nearest timestamped lines above and below it in
    its file, as passes.failures places it; null: unbounded on that side), `t` (its own time,
    else the earliest it can be) and `head`: the line of the traceback a continuation line
    belongs to (the reader's extra.head), else its own line."""
    if ctx.run is not None:
        from ..summaries import failures

        cand = failures(ctx.run).lazy()
    else:
        from .. import failure_rows

        cand = failure_rows.rows(ctx.events)
    df = ctx.aligned(cand.filter(is_error_line()).select(COLUMNS)).collect().with_row_index("_r")
    if df.is_empty():
        return df.drop("_r", "ts_aligned").with_columns(pl.lit(None, _TIME).alias(c) for c in ("t", "t_lo", "t_hi")) \
            .with_columns(pl.col("line").alias("head"))
    # placed once as a possible cause (the earliest it can be) and once as a victim (the latest)
    both = pl.concat([df.with_columns(pl.lit("error").alias("kind")), df.with_columns(pl.lit("timeout").alias("kind"))])
    placed = _placed(ctx, both)
    lo = placed.filter(pl.col("kind") == "error").select("_r", pl.col("t_order").alias("t_lo"))
    hi = placed.filter(pl.col("kind") == "timeout").select("_r", pl.col("t_order").alias("t_hi"))
    return (
        df.join(lo, on="_r", how="left").join(hi, on="_r", how="left").sort("_r")
        .with_columns(pl.coalesce("ts_aligned", "t_lo", "t_hi").alias("t"),
                      pl.when(pl.col("event") == "TRACEBACK_CONT")
                      .then(pl.col("extra").str.json_path_match("$.head").cast(pl.Int64, strict=False))
                      .otherwise(None).fill_null(pl.col("line")).alias("head"))
        .drop("_r", "ts_aligned")
    )


@dataclass
class Accounting:
    """How many error lines the input holds, how many the findings account for, and the
    `unexplained_error` findings for the rest."""

    total: int = 0
    accounted: int = 0
    findings: list[Finding] = field(default_factory=list)


def _scopes(findings: list[Finding], everyone: frozenset[int]) -> pl.DataFrame:
    """One row per failure finding (ENDING_KINDS, WARN or above): its index, when it began (less
    the slack), whether it is the whole job's, the ranks whose errors it explains (victims, and
    its own ranks unless named by their silence) and its local ranks as "host|local_rank"."""
    rows = []
    for i, f in enumerate(findings):
        # a slowdown or a training signal is an error's consequence (a rank that died lags),
        # never its explanation: it accounts only for the lines it cites
        if f.severity not in ("WARN", "ERROR") or f.kind in NON_CAUSAL or f.kind not in ENDING_KINDS:
            continue
        wide = (not f.ranks and not f.local_ranks) or (len(everyone) > 1 and set(f.ranks) >= everyone)
        lo = parse_iso(f.first_seen)
        # a culprit named by its silence or by its peers ("went silent first, without an error of
        # its own") does not explain an error of its own: that error is a fact the finding missed
        own = f.basis not in SILENT_BASES
        rows.append({
            "fi": i, "lo": lo - SLACK if lo else None, "wide": wide and own,
            "ranks": sorted((set(f.ranks) if own else set()) | set(f.victims)), "locals": [f"{x.get('host')}|{x.get('local_rank')}" for x in f.local_ranks],
        })
    schema = {"fi": pl.Int64, "lo": _TIME, "wide": pl.Boolean,
              "ranks": pl.List(pl.Int64), "locals": pl.List(pl.String)}
    return pl.DataFrame(rows, schema=schema)


def _cited(findings: list[Finding]) -> pl.DataFrame:
    return pl.DataFrame([{"source_file": e.source_file, "line": e.line} for f in findings for e in f.lines],
                        schema={"source_file": pl.String, "line": pl.Int64}).unique()


def explained(errors: pl.DataFrame, findings: list[Finding], everyone: frozenset[int]) -> pl.Series:
    """For each row of `errors` (error_rows), whether some finding cites or explains it (module
    docstring, 1-3): a boolean Series in the rows' order."""
    if errors.is_empty():
        return pl.Series("explained", [], pl.Boolean)
    e = errors.select("rank", "host", "local_rank", "t_lo", "t_hi", "source_file", "line", "head", "event",
                      "message").with_row_index("_i")
    # a traceback is one error: its continuation lines are cited when its head line is
    cites = _cited(findings).with_columns(pl.lit(True).alias("_c"))
    cited = (e.join(cites, on=["source_file", "line"], how="left")
             .join(cites.rename({"line": "head", "_c": "_ch"}), on=["source_file", "head"], how="left")
             .sort("_i").select(pl.col("_c").fill_null(False) | pl.col("_ch").fill_null(False)).to_series())
    scopes = _scopes(findings, everyone)
    if scopes.is_empty():
        return cited.rename("explained")
    return (cited | _in_scope_after(with_cascade(e), scopes)).rename("explained")


def _in_scope_after(e: pl.DataFrame, scopes: pl.DataFrame) -> pl.Series:
    """For each row of `e` (in order), whether some scope (`_scopes`) covers it: the scope is the
    whole job's, the line names no process or is a cascade line, its rank is one of the scope's
    ranks, or (without a rank) its "host|local_rank" one of its locals — and the line can have
    been written at or after the scope began (`lo`; null: unbounded on either side). Joined by
    rank and by local rank, never rows x scopes: a scope may list every one of 10,000 ranks."""
    hi = pl.col("t_hi")

    def after_any(s: pl.DataFrame) -> pl.Expr:
        """The line can have been written at or after one of the scopes `s` began."""
        if s.is_empty():
            return pl.lit(False)
        if s.get_column("lo").null_count():
            return pl.lit(True)
        return hi.is_null() | (hi >= pl.lit(s.get_column("lo").min(), _TIME))

    no_proc = pl.col("rank").is_null() & pl.col("local_rank").is_null()
    anyone = (pl.col("casc").fill_null(False) | no_proc) & after_any(scopes)
    wide = after_any(scopes.filter(pl.col("wide")))
    after = hi.is_null() | pl.col("lo").is_null() | (hi >= pl.col("lo"))
    by_rank = (e.select("_i", pl.col("rank").cast(pl.Int64), "t_hi").drop_nulls("rank")
               .join(scopes.select("lo", pl.col("ranks").alias("rank")).explode("rank"), on="rank")
               .filter(after).get_column("_i"))
    local_key = pl.concat_str([pl.col("host").fill_null("None"), pl.col("local_rank").cast(pl.String)], separator="|")
    by_local = (e.filter(pl.col("rank").is_null()).select("_i", local_key.alias("key"), "t_hi").drop_nulls("key")
                .join(scopes.select("lo", pl.col("locals").alias("key")).explode("key"), on="key")
                .filter(after).get_column("_i"))
    return e.sort("_i").select(anyone | wide | pl.col("_i").is_in(by_rank) | pl.col("_i").is_in(by_local)).to_series()


def account(ctx: Context, findings: list[Finding]) -> Accounting:
    """The error lines of the run against `findings` (every pass's and rule's): the counts, and
    one `unexplained_error` finding per process whose errors no finding explains, earliest first."""
    errors = error_rows(ctx)
    if errors.is_empty():
        return Accounting()
    everyone = frozenset(ctx.ranks)
    ok = explained(errors, findings, everyone)
    left = errors.filter(~ok)
    out = Accounting(total=errors.height, accounted=int(ok.sum()))
    if left.is_empty():
        return out
    out.findings = _findings(left)
    return out


def _owner() -> pl.Expr:
    """One process's identity: "rank N", else "local rank L on host H", else "host H"."""
    rank, lr, host = pl.col("rank"), pl.col("local_rank"), pl.col("host").fill_null("?")
    return (pl.when(rank.is_not_null()).then(pl.format("r|{}", rank))
            .when(lr.is_not_null()).then(pl.format("l|{}|{}", host, lr))
            .otherwise(pl.format("h|{}", host)))


def _cause_class() -> pl.Expr:
    """How much a left-over line says about a cause: 0 a process's own error, 1 a worker's death
    (an exit or signal record the launcher did not cause), 2 a cascade line (the launcher's own
    kills, teardown exceptions, lost peers, timeouts)."""
    by = pl.col("extra").str.json_path_match("$.by").fill_null("")
    death = pl.col("event").is_in(DEATH_EVENTS) & ~by.is_in(list(LAUNCHERS))
    return pl.when(~pl.col("casc")).then(0).when(death).then(1).otherwise(2).alias("cls")


def _findings(left: pl.DataFrame) -> list[Finding]:
    """The left-over error lines as findings: one per process, earliest first. The earliest line
    that says most about a cause (`_cause_class`: an own error, else a worker's death) takes the
    cascade lines of the other processes after it; each finding leads with its process's line
    that says most, the earliest of them."""
    j = pl.col("extra").str.json_path_match
    rows = (
        with_cascade(left).with_columns(_owner().alias("owner"), _cause_class(),
                          pl.coalesce(j("$.exception"), j("$.exc_type"), j("$.error_type"),
                                      pl.col("message").str.extract(_EXC, 1)).alias("exception"))
        .sort(pl.col("t").is_null(), "t", "source_file", "line")
    )
    top = int(rows.get_column("cls").min())  # type: ignore[arg-type]
    if top <= 1:
        first = rows.filter(pl.col("cls") == top).row(0, named=True)
        t0 = first["t"]
        folded = (pl.col("cls") >= 1) & (pl.col("owner") != first["owner"]) & (
            pl.col("t").is_null() | pl.lit(t0 is None) | (pl.col("t") >= pl.lit(t0 - SLACK if t0 else None, _TIME)))
        rows = rows.with_columns(pl.when(folded).then(pl.lit(first["owner"])).otherwise(pl.col("owner")).alias("group"),
                                 folded.alias("folded"))
    else:
        rows = rows.with_columns(pl.col("owner").alias("group"), pl.lit(False).alias("folded"))
    mine = ~pl.col("folded")
    lead = mine & (pl.col("cls") == pl.col("cls").filter(mine).min())
    groups = (
        rows.group_by("group", maintain_order=True)
        .agg(pl.all().filter(lead).first().name.prefix("f_"),
             pl.col("t").filter(mine).max().alias("t_last"),
             mine.sum().alias("n"),
             pl.col("rank").filter(pl.col("folded")).drop_nulls().unique().sort().alias("victims"),
             pl.col("folded").sum().alias("n_cascade"),
             *(pl.col(c).filter(lead).append(pl.col(c).filter(mine & ~lead)).head(3).alias(a)
               for c, a in (("source_file", "files"), ("line", "lines"), ("rank", "line_ranks"),
                            ("timestamp", "stamps"), ("message", "texts"))))
    )
    # the same error on many ranks (a bad config, a missing file every rank opens) is one finding
    # naming them all: its template is the event and the message with its numbers masked
    same = pl.concat_str([pl.col("f_event").fill_null(""), pl.col("f_message").fill_null("").str.replace_all(r"\d+", "#")],
                         separator="|")
    merged = (
        groups.with_columns(pl.when(pl.col("f_rank").is_not_null()).then(same).otherwise(pl.col("group")).alias("_tpl"))
        .group_by("_tpl", maintain_order=True)
        .agg(pl.all().exclude("f_rank", "t_last", "n", "n_cascade", "victims").first(),
             pl.col("f_rank").drop_nulls().unique().sort().alias("ranks"),
             pl.col("t_last").max(), pl.col("n").sum(), pl.col("n_cascade").sum(),
             pl.col("victims").explode().drop_nulls().unique().sort())
        .sort(pl.col("f_t").is_null(), "f_t")
    )
    return [_finding(g) for g in merged.iter_rows(named=True)]


def _finding(g: dict) -> Finding:
    ranks, lr, host = [int(r) for r in g["ranks"]], g["f_local_rank"], g["f_host"]
    victims = [int(v) for v in g["victims"] if int(v) not in ranks]
    who = (ranks_phrase(ranks) if ranks else local_ranks_phrase([{"host": host, "local_rank": lr}]) if lr is not None
           else f"host {host}" if host else "a process the log does not name")
    exc, msg, event = g["f_exception"], g["f_message"], g["f_event"]
    what = shorten(msg or event, 160) or "an ERROR line"
    n, nc = int(g["n"]), int(g["n_cascade"])
    where = f"{g['f_source_file']}:{g['f_line']}"
    short = f"{str(g['f_source_file']).rsplit('/', 1)[-1]}:{g['f_line']}"   # the lines cite the whole path
    title = (f"unexplained error on {who}: {what} ({short}"
             + (f"; {n} ERROR lines from it" if n > 1 else "") + ")"
             + (f"; then {nc} cascade line{'s' if nc != 1 else ''} (exits, kills, lost peers, teardown"
                + (f" on {ranks_phrase(victims)}" if victims else "") + ")" if nc else "")
             + ": no finding explains it")
    cites = [{"source_file": f, "line": ln, "rank": r, "timestamp": ts, "text": tx}
             for f, ln, r, ts, tx in zip(g["files"], g["lines"], g["line_ranks"], g["stamps"], g["texts"])]
    return Finding(
        rule=pass_id("unexplained"), kind=KIND, layer="resource", severity="ERROR",
        ranks=ranks, victims=victims, title=title,
        basis="own_error" if ranks or lr is not None else None,
        local_ranks=[{"host": host, "local_rank": int(lr)}] if not ranks and lr is not None else [],
        evidence={"message": shorten(msg, 300), "exception": exc, "event": event, "level": g["f_level"],
                  "exit_code": g["f_exit_code"], "host": host, "first": where, "error_lines": n,
                  "cascade_lines": nc or None},
        lines=cite(cites, text="text", limit=3),
        first_seen=iso(g["f_t"]), last_seen=iso(g["t_last"] or g["f_t"]),
    )


__all__ = ["account", "explained", "error_rows", "Accounting", "is_error_line", "KIND"]
