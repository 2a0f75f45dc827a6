"""Is what one ingest read one run? Two runs merged into one store are never silent.

Owns `mixed_runs(sources, staging)`: the refusal (ForensicsError F212) of an ingest whose files
hold two runs, naming both folders. Must not read raw logs (it reads the freshly written parts)
nor decide anything about `--append` against the store (ingest._other_run does).

The domain fact: one run logs each step of a rank once, at one moment. The same rank's same
step (a TRAIN_STEP with a rank and a time) in files of two different folders, far apart in time
(below), is two runs (a baseline and a slowed copy of the same 8 ranks, `ingest base8/logs slow8/logs`): merged,
the diagnosis cites one folder's line for the other's value. A restart is not two runs: it
resumes in the same folder (the rank's file appended, or a new file beside it), repeating the
steps since the last checkpoint; torchelastic writes each restart to `attempt_<N>/` of one run
folder (torch.distributed.elastic.multiprocessing.api.DefaultLogsSpecs), so folders that differ
only in an `attempt_<N>` component are one origin. The same step at the same instant in two
folders is a copy of the same line (a duplicate), not another run; a step in a rank's JSON
lines and in the console (`[rank1]: step 29 ...`, stamped when the launcher read it) is the
same step told twice, so only lines of one format are compared. Synchronous training keeps
every rank within a step of the others, so one rank number at the same step in two folders a
few ms apart is one run too -- local ranks logged as global on two nodes (the hygiene pass's
finding) -- while more than two step times (and 1 s) apart is two runs.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import OTHER_RUN, ForensicsError

_ATTEMPT = re.compile(r"^attempt_\d+$")
SAME_MOMENT_US = 1_000_000   # a rank's same step this close in two folders is one moment of one run


def origin(path: str) -> str:
    """The folder a file comes from, with torchelastic's per-restart `attempt_<N>` left out."""
    parts = Path(path).parent.parts
    return str(Path(*[p for p in parts if not _ATTEMPT.match(p)])) if parts else "."


def mixed_runs(sources: list[tuple[str, Any, Any]], staging: Path) -> ForensicsError | None:
    """The refusal when `sources` (just read, their parts in `staging`) hold two runs: a rank's
    step logged at different times in two folders. None when they are one run. A source is
    (path, its ranks, its event parts), those without event parts left out or not."""
    import polars as pl

    with_steps = [(p, r, e) for p, r, e in sources if e]
    # a file's origin is its folder's: found once per folder (the folder as a path's text up to
    # its last "/", as the query below cuts source_file), and mapped per folder, not per file (a
    # map of 100,000 files' paths cost ~100 MB in the query)
    origin_of: dict[str, str] = {}
    origins = {}
    for p, _, _ in with_steps:
        folder = p.rsplit("/", 1)[0]
        if folder not in origin_of:
            origin_of[folder] = origin(p)
        origins[p] = origin_of[folder]
    # only a rank found in two folders can be logged twice: the usual layouts (a folder per host,
    # a file per rank) have none, and nothing is scanned
    where: dict[int, set[str]] = {}
    for p, ranks, _ in with_steps:
        for r in ranks or ():
            where.setdefault(int(r), set()).add(origins[p])
    shared = sorted(r for r, o in where.items() if len(o) > 1)
    if not shared:
        return None
    shared_set = set(shared)
    parts = sorted({str(staging / rel) for _, ranks, e in with_steps if not shared_set.isdisjoint(ranks or ())
                    for rel in e})
    logged = (pl.scan_parquet(parts)
              .filter((pl.col("event") == "TRAIN_STEP") & pl.col("rank").is_in(shared)
                      & pl.col("step").is_not_null() & pl.col("timestamp").is_not_null()))
    # two runs need a (rank, step) logged twice in one format: none (one-line files of distinct
    # steps), and no row's file and time are read (100,000 rows of paths: ~60 MB)
    if logged.group_by("rank", "step", "format").len().filter(pl.col("len") > 1).limit(1).collect().is_empty():
        return None
    steps = logged.select("rank", "step", "timestamp", "host", "format", pl.col("source_file").cast(pl.String),
                          "line").collect()
    if steps.is_empty():
        return None
    judged = pl.Series(list(origins), dtype=pl.String).implode()
    steps = (steps.filter(pl.col("source_file").is_in(judged))   # a part may hold files not judged here
             .with_columns(pl.col("source_file").str.replace(r"/[^/]*$", "")
                           .replace_strict(origin_of, default=None, return_dtype=pl.String).alias("origin")))
    # Synchronous training keeps every rank within a step of the others: one rank number in two
    # folders at the same step a few ms apart is one run (local ranks logged as global on two
    # nodes, with or without host names); a step apart by more than two step times (and 1 s) is
    # not the same moment of one run
    # a rank's time per step in each folder: the median over its consecutive logged steps (a
    # restart's gap in one folder does not move it)
    per_step = (steps.unique(["rank", "origin", "step"], keep="first").sort("rank", "origin", "step")
                .with_columns((pl.col("timestamp").diff().dt.total_microseconds() / pl.col("step").diff())
                              .over("rank", "origin").alias("d"))
                .filter(pl.col("d") > 0).group_by("rank").agg(pl.col("d").median().alias("us_per_step")))
    both = (steps.group_by("rank", "step", "format")
            .agg(pl.col("origin").n_unique().alias("origins"),
                 (pl.col("timestamp").max() - pl.col("timestamp").min()).dt.total_microseconds().alias("apart_us"))
            .join(per_step, on="rank", how="left")
            .filter((pl.col("origins") > 1)
                    & (pl.col("apart_us") > pl.max_horizontal(2 * pl.col("us_per_step").fill_null(0), pl.lit(SAME_MOMENT_US)))))
    if both.is_empty():
        return None
    first = both.sort("rank", "step").row(0, named=True)
    seen = (steps.filter((pl.col("rank") == first["rank"]) & (pl.col("step") == first["step"])
                         & (pl.col("format") == first["format"]))
            .sort("timestamp", "source_file").unique("origin", keep="first", maintain_order=True).head(2))
    a, b = seen.row(0, named=True), seen.row(1, named=True)
    folders = sorted({str(o) for o in steps.get_column("origin").unique().drop_nulls()})
    tops = _roots([a["origin"], b["origin"]])

    def at(r: dict[str, Any]) -> str:
        return f"{_rel(r['source_file'])}:{r['line']} ({r['timestamp']:%H:%M:%S.%f}"[:-3] + ")"

    return ForensicsError(
        "these logs hold two runs",
        where=f"{_rel(a['origin'])} and {_rel(b['origin'])}",
        reason=(f"rank {first['rank']} logged step {first['step']} in two folders {first['apart_us'] / 1e6:,.2f} s apart: "
                f"{at(a)} and {at(b)}; {both.height:,} (rank, step) pair(s) are more than two step times (and 1 s) "
                f"apart (of {len(folders)} folders read). In one run a rank is at one step at one moment; merged, "
                "a diagnosis would cite one run's line for the other's value"),
        help=("ingest each run into its own store, then compare them: "
              + " ; ".join(f"forensics ingest {t} -o {_store_name(t)}" for t in tops)
              + (f" ; forensics compare {_store_name(tops[0])} {_store_name(tops[1])}" if len(tops) == 2 else "")
              + ". A restart of one run resumes in the same folder (or torchelastic's attempt_N) and is read as one run; "
                "to keep these together anyway, add --force"),
        code=OTHER_RUN,
    )


def _roots(folders: list[str]) -> list[str]:
    """The two folders, each cut to where it stops sharing its path with the other ("base8/logs",
    "slow8/logs" from base8/logs/node-b and slow8/logs/node-b): what to ingest on its own."""
    pa, pb = Path(folders[0]).parts, Path(folders[1]).parts
    k = 0
    while k < min(len(pa), len(pb)) and pa[k] == pb[k]:
        k += 1
    # keep the distinguishing component and what sits above it; drop the shared tail below
    tail = 0
    while tail < min(len(pa), len(pb)) - k and pa[-1 - tail] == pb[-1 - tail]:
        tail += 1
    cut = lambda p: str(Path(*p[: len(p) - tail])) if len(p) - tail > 0 else str(Path(*p))  # noqa: E731
    return [_rel(cut(pa)), _rel(cut(pb))]


def _rel(p: str) -> str:
    if os.path.isabs(p):
        r = os.path.relpath(p)
        return p if r.startswith("..") else r
    return p


def _store_name(folder: str) -> str:
    name = "-".join(x for x in Path(folder).parts[-2:] if x not in ("/", "logs")) or "run"
    return f"{name}.forensics"
