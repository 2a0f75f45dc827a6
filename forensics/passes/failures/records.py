"""Whose is a per-rank file: its local rank and its host, joined with the launcher's exit record.

`torchrun --log-dir D` writes each worker's output to D/<run_id>/attempt_<n>/<local rank>/
{stdout,stderr}.log (torch/distributed/elastic/multiprocessing/api.py, DefaultLogsSpecs.reify;
marks.LOG_DIR_LOCAL): the file gives the LOCAL rank only. The node's launcher states, for a
worker that failed, its global rank, local rank and host (the ChildFailedError table:
"host : H", "rank : R (local_rank: L)"). A row known as (host, local rank L) is that record's
rank R, basis `own_error` (its own failure; `evidence.launcher_record` says how the rank was found).

The row's host, in order: the host its line carries; the one host the rest of its file names; a
folder of its path that names a recorded host ("hpc101" for "hpc101.cluster.local" too); else the
launcher console next to it (the deepest folder above the row's file that holds exit records,
when those records name one host and that folder holds one --log-dir tree at most). No host, or
two records for one (host, local rank) that disagree: the row keeps its local rank.

An error line that carries no rank at all (a worker's traceback printed through the launcher's
console with no rank prefix: torchrun without --tee/--log-dir, accelerate) is the worker's the
launcher then saw fail, when that is the only reading the output allows (`join_unowned`): in
that file the launcher records exactly one worker that failed on its own (own_exit: a positive
code or a fault signal; the others' ends are its SIGTERMs, not failures), exactly one fatal
error with no rank precedes its first record, and the error agrees with the exit — CPython exits
with status 1 on an uncaught exception (Modules/main.c, pymain_run_python -> pymain_exit_error);
a CUDA error's process may instead abort in teardown (SIGABRT: c10's destructors and the NCCL
watchdog rethrow the sticky error, std::terminate). Basis `own_error`, with
`evidence.launcher_record.how` saying so. Two failed workers, two such errors, a code the error
does not explain: nothing is joined (the finding keeps "a rank the log does not name").
"""
from __future__ import annotations

import os
import re
from typing import Any

import polars as pl

from ... import failure_facts as facts

# the attempt_<n> folder of a --log-dir file's path (the reader's full rule: marks.LOG_DIR_LOCAL;
# the pass does not import the ingest package)
_ATTEMPT = re.compile(r"[/\\]attempt_\d+[/\\]")

BASIS = "own_error"   # the rank's own failure, its global rank from the launcher's record (evidence.launcher_record)


def _short(h: str) -> str:
    return h.split(".", 1)[0].lower()


def _records(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(short host, local rank) -> the launcher's exit record stating the global rank; a pair
    whose records disagree is dropped."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    bad: set[tuple[str, int]] = set()
    for r in rows:
        if r["kind"] != "exit" or r["rank"] is None or r.get("local_rank") is None or not r.get("host"):
            continue
        k = (_short(r["host"]), int(r["local_rank"]))
        if k in out and out[k]["rank"] != r["rank"]:
            bad.add(k)
        out.setdefault(k, r)
    return {k: v for k, v in out.items() if k not in bad}


def _tree(path: str) -> str | None:
    """The --log-dir tree a file belongs to (the folder above attempt_<n>), or None."""
    m = _ATTEMPT.search(path)
    return path[:m.start()] if m else None


def _host_of(r: dict[str, Any], recs: dict[tuple[str, int], dict[str, Any]], file_hosts: dict[str, list[str]],
             rec_dirs: dict[str, set[str]], trees: set[str]) -> tuple[str | None, str]:
    """The row's host (short name) and how it is known."""
    if r.get("host"):
        return _short(r["host"]), "its line"
    src = r["source_file"] or ""
    named = file_hosts.get(src) or []
    if len(named) == 1:
        return _short(named[0]), "its file"
    known = {h for h, _ in recs}
    for part in reversed(os.path.dirname(src).replace("\\", "/").split("/")):
        if part and _short(part) in known:
            return _short(part), f"its folder {part}/"
    d = os.path.dirname(src)
    while True:
        hosts = rec_dirs.get(d)
        if hosts is not None:
            below = {t for t in trees if t == d or t.startswith(d.rstrip("/\\") + os.sep)}
            if len(hosts) == 1 and len(below) <= 1:
                return next(iter(hosts)), f"the launcher console in {d or '.'}"
            return None, ""
        up = os.path.dirname(d)
        if up == d:
            return None, ""
        d = up


def join(ctx: Any, rows: list[dict[str, Any]], kinds: tuple[str, ...]) -> None:
    """Give each row of `kinds` known only by (host, local rank) the global rank of the launcher's
    exit record for that pair (in place): `rank_basis` own_error, `record` the evidence."""
    todo = [r for r in rows if r["rank"] is None and r.get("local_rank") is not None and r["kind"] in kinds]
    if not todo:
        return
    recs = _records(rows)
    if not recs:
        return
    files = ctx.events.group_by("source_file").agg(pl.col("host").drop_nulls().unique().alias("hosts")).collect()
    file_hosts = {f: list(h) for f, h in files.iter_rows() if f is not None}
    trees = {t for t in (_tree(f) for f in file_hosts) if t is not None}
    rec_dirs: dict[str, set[str]] = {}
    for (h, _), rec in recs.items():
        rec_dirs.setdefault(os.path.dirname(rec["source_file"] or ""), set()).add(h)
    for r in todo:
        host, how = _host_of(r, recs, file_hosts, rec_dirs, trees)
        rec = recs.get((host, int(r["local_rank"]))) if host else None
        if rec is None:
            continue
        r["rank"], r["rank_basis"] = int(rec["rank"]), BASIS
        r["record"] = {"host": rec["host"], "local_rank": int(r["local_rank"]), "rank": int(rec["rank"]),
                       "host_from": how}
        r["record_row"] = rec


_EXCEPTION_CODES = {"oom": (1,), "traceback": (1,), "gpu": (1, -6, 134)}


def _process(r: dict[str, Any]) -> Any:
    return ("pid", r["pid"]) if r["pid"] is not None else ("rank", r["rank"], r.get("host"), r.get("local_rank"))


def join_unowned(rows: list[dict[str, Any]], kinds: tuple[str, ...], own_exit: Any, teardown_re: str) -> None:
    """Give the one fatal error of a file that carries neither rank nor local rank the rank of
    the one worker the launcher in that file saw fail on its own (module docstring), in place."""
    by_file: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["source_file"] is not None:
            by_file.setdefault(r["source_file"], []).append(r)
    for mine in by_file.values():
        exits = [r for r in mine if own_exit(r) and (r["rank"] is not None or r.get("local_rank") is not None)]
        procs = {_process(r) for r in exits}
        if len(procs) != 1:
            continue
        first_rec = min(r["line"] or 0 for r in exits)
        errs = [r for r in mine if r["kind"] in kinds and r["rank"] is None and r.get("local_rank") is None
                and (r["line"] or 0) < first_rec and not re.search(teardown_re, r.get("message") or "")]
        heads = {r["traceback_head"] if r.get("traceback_head") is not None else r["line"] for r in errs}
        if len(heads) != 1:
            continue
        rec = next((r for r in exits if r.get("logged_rank", r["rank"]) is not None), exits[0])
        code = rec["exit_code"]
        sig = facts.signal_of(code, rec["signal"])
        if any(code not in _EXCEPTION_CODES.get(r["kind"], ()) and not (r["kind"] == "gpu" and sig == "SIGABRT") for r in errs):
            continue
        for r in errs:
            if rec["rank"] is not None:
                r["rank"], r["rank_basis"] = int(rec["rank"]), BASIS
            else:
                r["local_rank"], r["host"] = rec["local_rank"], r.get("host") or rec.get("host")
            r["record"] = {"host": rec.get("host"), "local_rank": rec.get("local_rank"), "rank": rec["rank"],
                           "how": f"its rank from the launcher's record: the only worker it saw fail, with "
                                  f"{facts.code_phrase(code, rec['signal'])}, and the only error with no rank before it"}
            r["record_row"] = rec


def evidence(r: dict[str, Any]) -> dict[str, Any]:
    """A finding's evidence of the join, where its row's rank came from the launcher's record."""
    return {"launcher_record": r["record"]} if r.get("record") else {}


def cited(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The launcher's record a row was joined with, to cite next to the row (or nothing)."""
    return [r["record_row"]] if r.get("record_row") else []
