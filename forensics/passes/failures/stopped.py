"""A job stopped from outside with no failure of its own: did one rank stop progressing first (a hang)?

Question: the run ended because something outside it stopped it — the scheduler (a cancel or a
time limit: not a node failure, which is a fault of its own) or a signal to the launcher (torch
elastic's SignalException "got signal: 15" after "Received Signals.SIGTERM death signal",
DeepSpeed's "Main process received SIGTERM", a KeyboardInterrupt) — and no rank failed on its own
(no OOM, crash, device error, timeout or kill). Was a rank already stuck?

Domain facts relied on:
- In synchronous training every rank joins every step's collectives: a rank that stops (a
  deadlock, a stuck read, an endless loop) blocks the others in the next collective, so they
  stop within a step of it, and nothing more is printed when the collectives have no timeout or
  a longer one. The job then waits until the scheduler's limit or a person stops it. The stop
  is the consequence; the rank that stopped first is the hang's culprit.
- Which rank stopped first: the one whose highest logged step is below the step every other
  rank reached (the others agree: they are blocked at the same collective); without steps,
  the one whose last progress line is earlier than the others' by more than the silent margin
  (progress.SILENT_MARGIN_S, or half a step) [last_to_log]. A minority only: when most ranks
  are behind, the ones ahead are not a hang's victims and nothing is named.
- When every rank stopped progressing long before the stop (`HANG_STEPS` steps, or the silent
  margin), the job was hung, whatever the step numbers say. If then a minority of ranks (one of
  three at most) logged a step the others never reached, those ranks left the common path: the
  others finished their last step and wait in the next step's collective, which the rank ahead
  — whatever it logged at that step (a checkpoint, an evaluation) — never joined [last_to_log].
  Likewise a minority that, after its last step line, logged something else (a line of its own:
  "waiting for all ranks before saving a checkpoint") and then nothing more, while every other
  rank's last line is its step line: it went where the others did not follow [last_to_log].
  Nobody ahead: the stop still ended a hung job, and the job_cancelled finding says so (never
  "still making progress").

Must not: fire when the job failed on its own (passes/failures/ reads that failure), or when no
outside stop is in the logs (a log that simply ends is judged by rank_lag / silent_rank).
"""
from __future__ import annotations

import re
from typing import Any

import polars as pl

from ...report.model import Finding
from ..context import Context
from ..evidence import cite, iso, pass_id, ranks_phrase
from .progress import SILENT_MARGIN_S
from .rows import _ev_row, _extra, _key
from ...failure_facts import signal_name

# A signal that reached the launcher or the job from outside (torch/distributed/elastic/
# multiprocessing/api.py _terminate_process_handler: "Process %d got signal: %d"; deepspeed
# launcher/launch.py sigkill_handler: "Main process received %s, exiting"; Python's Ctrl-C).
# The agent's "Received %s death signal, shutting down workers" prints the signal as
# "Signals.SIGTERM" up to Python 3.10 and as its number ("15") from 3.11 (IntEnum.__str__).
STOP_RE = re.compile(r"SignalException: Process \d+ got signal: (\d+)|Main process received (SIG[A-Z]+)|"
                     r"\bKeyboardInterrupt\b|Received (?:Signals\.)?(SIG[A-Z]+|\d+) death signal")
# A rank one step behind the others when the stop arrives is the ordinary spread of a step's
# end across ranks, not a hang: a hung rank's peers wait in the next collective for longer than
# this many steps (or SILENT_MARGIN_S) before anyone stops the job.
HANG_STEPS = 3


def _stop(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first outside stop among the failure rows: a scheduler's cancel (not a node failure)
    or a signal the launcher received."""
    found = []
    for r in rows:
        if r["kind"] == "cancel":
            reason = (_extra(r).get("reason") or "").strip().upper()
            if reason != "NODE FAILURE":
                found.append(r)
        elif r.get("message") and STOP_RE.search(r["message"]):
            found.append(r)
    return min(found, key=_key) if found else None


def _behind(last: dict[int, Any], what: str) -> tuple[list[int], str, bool] | None:
    """The rank(s) whose last progress value is below the one every other rank reached."""
    if len(last) < 2:
        return None
    top = max(last.values())
    behind = {k: s for k, s in last.items() if s < top}
    if not behind or not (len(behind) * 2 < len(last) or len(behind) == 1):
        return None
    low = min(behind.values())
    ranks = sorted(k for k, s in behind.items() if s == low)
    return ranks, f"its last {what} is {low:g} while {ranks_phrase(sorted(set(last) - set(behind)))} reached {what} {top:g}", False


def _ahead(last: dict[int, Any]) -> tuple[list[int], str, bool] | None:
    """The minority of ranks whose last step is above every other rank's (one of three at most)."""
    if len(last) < 3:
        return None
    top = max(last.values())
    ahead = sorted(k for k, s in last.items() if s == top)
    rest = [s for k, s in last.items() if s != top]
    if not rest or len(ahead) * 3 > len(last):
        return None
    return ahead, f"it logged step {top:g}, which {ranks_phrase(sorted(set(last) - set(ahead)))} never reached", False


def _left_path(ctx: Context, progress: dict[int, dict[str, Any]]) -> tuple[list[int], str, bool] | None:
    """The minority of ranks (one of three at most) that logged a line below ERROR after their
    last progress line, when the others logged nothing after theirs; how, with the line's text."""
    last = {k: p["last_ts"] for k, p in progress.items() if p.get("last_ts") is not None}
    if len(last) < 3 or len(last) < len(progress):
        return None
    lf = ctx.aligned(ctx.events.select("rank", "host", "timestamp", "level", "message")
                     .filter(pl.col("rank").is_in(list(last)) & (pl.col("level").fill_null("INFO") != "ERROR")))
    after = (lf.join(pl.LazyFrame({"rank": list(last), "last_ts": list(last.values())},
                                  schema_overrides={"rank": lf.collect_schema()["rank"]}), on="rank")
             .filter(pl.col("ts_aligned") > pl.col("last_ts"))
             .group_by("rank").agg(pl.col("message").sort_by("ts_aligned").last())
             .collect())
    ranks = sorted(int(k) for k in after.get_column("rank"))
    if not ranks or len(ranks) * 3 > len(last):
        return None
    said = after.sort("rank").get_column("message").to_list()[0] or ""
    return ranks, (f"after its last step it logged \"{said[:100]}\" and nothing more, while "
                   f"{ranks_phrase(sorted(set(last) - set(ranks)))} logged nothing after their step line"), False


def _stalled(stop_t: Any, progress: dict[int, dict[str, Any]], ctx: Context) -> float | None:
    """Seconds from every rank's last progress to the stop, when that is a hang's wait (longer
    than `HANG_STEPS` steps and the silent margin); else None."""
    waited = _waited_s(stop_t, list(progress), progress)
    if waited is None or waited < max(SILENT_MARGIN_S, HANG_STEPS * (ctx.median_step_ms or 0.0) / 1000):
        return None
    return waited


def _epochs(ctx: Context) -> dict[int, dict[str, Any]]:
    """Per rank, the highest fractional epoch of its progress lines (HF Trainer's logged 'epoch')
    and the line that logged it, for runs whose lines carry no step."""
    if "epoch" not in ctx.events.collect_schema().names():
        return {}
    at = pl.col("epoch").arg_max()
    df = (ctx.events.filter(pl.col("rank").is_not_null() & pl.col("epoch").is_not_null() & (pl.col("level") != "ERROR"))
          .group_by("rank").agg(pl.col("epoch").max(), pl.col("source_file").get(at).alias("file"), pl.col("line").get(at),
                                pl.col("timestamp").get(at).alias("last_ts"))
          .collect())
    return {int(r["rank"]): {**r, "last_step": None} for r in df.iter_rows(named=True)}


def _first_stopped(ctx: Context, progress: dict[int, dict[str, Any]]) -> tuple[list[int], str, bool] | None:
    """The rank(s) that stopped progressing first: (ranks, how, weak), or None."""
    steps = {k: p["last_step"] for k, p in progress.items() if p["last_step"] is not None}
    if len(steps) >= 2 and len(steps) == len(progress):
        return _behind(steps, "step")
    if not progress:
        epochs = _epochs(ctx)
        progress.update(epochs)       # what the finding cites: each rank's last epoch line
        return _behind({k: e["epoch"] for k, e in epochs.items()}, "epoch")
    timed = {k: p["last_ts"] for k, p in progress.items() if p["last_ts"] is not None}
    if len(timed) < 2:
        return None
    t_min = min(timed.values())
    ranks = sorted(k for k, t in timed.items() if t == t_min)
    rest = [t for t in timed.values() if t != t_min]
    if not rest or len(ranks) * 2 >= len(timed):
        return None
    gap = (min(rest) - t_min).total_seconds()
    if gap < max(SILENT_MARGIN_S, (ctx.median_step_ms or 0.0) / 2000):
        return None
    return ranks, f"its progress stopped {gap:.1f} s before the others'", False


# torch elastic prints its SignalException's traceback (no time of its own) right after the
# "Sending process N closing signal SIGTERM" lines of the workers it stops because of it
SHUTDOWN_LINES = 64


def _stop_time(stop: dict[str, Any], rows: list[dict[str, Any]]) -> Any:
    """When the stop happened: its own time, else the time of the launcher's kills of its
    workers just above it in its file (the shutdown the stop caused), else None."""
    if stop.get("exact") and stop.get("t_show") is not None:
        return stop["t_show"]
    if stop.get("line") is None:
        return None
    kills = [r["t_show"] for r in rows if r["kind"] == "kill" and r.get("exact") and r.get("t_show") is not None
             and r["source_file"] == stop["source_file"] and r["line"] is not None
             and stop["line"] - SHUTDOWN_LINES <= r["line"] < stop["line"]]
    return min(kills) if kills else None


def _waited_s(stop_t: Any, culprits: list[int], progress: dict[int, dict[str, Any]]) -> float | None:
    """How long the stop came after the culprits' last progress (None: the stop's time is not
    known, or the culprits' last progress)."""
    last = [progress[k]["last_ts"] for k in culprits if progress.get(k, {}).get("last_ts") is not None]
    if stop_t is None or not last:
        return None
    waited = (stop_t - max(last)).total_seconds()
    # a stop before the progress it ended is two clocks that disagree (a console in local time
    # beside ranks in UTC): then its time says nothing
    return waited if waited > -SILENT_MARGIN_S else None


def _signal_stop(stop: dict[str, Any], rows: list[dict[str, Any]], progress: dict[int, dict[str, Any]],
                 waited: float | None, stalled: float | None = None) -> Finding:
    """A signal from outside stopped a job whose ranks were all still progressing: the job was
    ended (job_cancelled), no rank at fault. The workers' exits by the launcher's SIGTERM after
    it are its cascade."""
    m = STOP_RE.search(stop.get("message") or "")
    sig = next((g for g in (m.groups() if m else ()) if g), None)
    name = ("SIGINT (Ctrl-C)" if m and "KeyboardInterrupt" in m.group(0) else
            signal_name(int(sig)) if sig and sig.isdigit() else sig or "a signal")
    steps = sorted({p["last_step"] for p in progress.values() if p.get("last_step") is not None})
    still = (f"; every rank had stopped progressing {stalled:.1f} s before it (a hung job)" if stalled is not None
             else "; every rank was still making progress")
    at = (f"{still} (last steps {steps[0]:g}–{steps[-1]:g})" if len(steps) > 1 else
          f"{still} (last step {steps[0]:g})" if steps else
          "" if progress else "; no rank had logged any progress yet (it was still starting up)")
    after = [r for r in rows if r["kind"] in ("kill", "exit") and _key(r) >= _key(stop)]
    return Finding(
        rule=pass_id("failures"), kind="job_cancelled", layer="resource", severity="WARN", ranks=[],
        title=(f"the job was stopped from outside: the launcher received {name} and shut its workers down{at}"
               + (f"; the {len(after)} worker exit{'s' if len(after) != 1 else ''} after it are its cascade" if after else "")),
        evidence={"stopped_by": "signal", "signal": name, "seconds_after_last_progress": waited},
        lines=cite([_ev_row(stop)] + [_ev_row(r) for r in after[:2]], text="text"),
        first_seen=iso(stop["t_show"]), last_seen=iso(stop["t_show"]),
    )


def stopped_hang(ctx: Context, rows: list[dict[str, Any]], progress: dict[int, dict[str, Any]]) -> list[Finding]:
    """The `hang` finding of a job stopped from outside; a signal that stopped a job every rank
    was still progressing in is the job's end from outside (job_cancelled); or nothing."""
    stop = _stop(rows)
    if stop is None:
        return []
    progress = dict(progress)     # _first_stopped may add the epoch lines it judged by
    got = _first_stopped(ctx, progress)
    is_signal = stop["kind"] != "cancel"
    if got is not None:
        waited = _waited_s(_stop_time(stop, rows), got[0], progress)
        if waited is not None and waited < max(SILENT_MARGIN_S, HANG_STEPS * (ctx.median_step_ms or 0.0) / 1000):
            got = None            # its peers had not waited: the stop caught it a step behind
    stalled = _stalled(_stop_time(stop, rows), progress, ctx) if got is None else None
    if got is None and stalled is not None:
        steps = {k: p["last_step"] for k, p in progress.items() if p["last_step"] is not None}
        got = (_ahead(steps) if len(steps) == len(progress) else None) or _left_path(ctx, progress)
        if got is not None:
            got = got[0], f"{got[1]}; every rank stopped progressing {stalled:.1f} s before the stop", got[2]
    if got is None:
        # (no progress at all: stopped while starting up, before any rank logged a step — still
        # the job's end from outside, never an error nobody explains)
        if is_signal:
            return [_signal_stop(stop, rows, progress, _waited_s(_stop_time(stop, rows), list(progress), progress),
                                 stalled)]
        return []
    culprits, how, weak = got
    victims = sorted((set(progress) or set(ctx.ranks)) - set(culprits))
    what = ("the scheduler ended it" if stop["kind"] == "cancel" else "the launcher received a signal and stopped it")
    steps = ", ".join(str(progress[k]["last_step"]) for k in culprits if progress.get(k, {}).get("last_step") is not None)
    title = (f"{ranks_phrase(culprits)} stopped making progress" + (f" after step {steps}" if steps else "")
             + f" ({how}): the others waited for it in the next collective until {what}; a hang")
    lines = [_ev_row({"source_file": progress[k]["file"], "line": progress[k]["line"], "rank": k,
                      "timestamp": progress[k]["last_ts"]}, f"last progress line of rank {k}")
             for k in culprits if progress.get(k, {}).get("file")]
    t_first = min((progress[k]["last_ts"] for k in culprits if progress.get(k, {}).get("last_ts") is not None),
                  default=None) or stop["t_show"]
    return [Finding(
        rule=pass_id("failures"), kind="hang", layer="communication", severity="ERROR",
        ranks=culprits, victims=victims, basis="last_to_log", basis_weak=weak, title=title,
        evidence={"how": how, "last_step": {str(k): progress.get(k, {}).get("last_step") for k in culprits},
                  "stopped_by": "scheduler" if stop["kind"] == "cancel" else "signal", "victims": victims},
        lines=cite(lines + [_ev_row(stop)], text="text"),
        first_seen=iso(t_first), last_seen=iso(stop["t_show"]),
    )]
