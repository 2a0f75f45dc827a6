"""The parallel layout of a run: per rank its pipeline stage (pp), data-, tensor-, context- and
expert-parallel ranks (dp, tp, cp, ep), and the peer groups it is compared in.

Owns reading the layout from what the logs state and the two groupings the timing passes use:
- `peer`: the ranks that do the same work per step — the same pipeline stage. Compute times
  are only comparable inside it: the stages of a pipeline run different layers (the last one
  also computes the loss head, the first the embedding), so they differ by design.
- `dgroup`: the data-parallel group — same stage, same tp / cp rank, different data. Its
  members load the same shape of batch and meet in the same gradient all-reduce, so data
  loading and gradient-ready times are compared inside it.

Must not judge anything (passes do), print, or read raw logs: it reads the events table.

Where the layout comes from, strongest first (a rank's own statement wins over a printed plan):
1. events: keys of `extra` / top-level fields on a rank's events — dp_rank, tp_rank, pp_rank,
   pp_stage, stage_id, pipeline_stage, cp_rank, ep_rank (and a few synonyms, KEYS), or an
   integer `stage` (a string `stage` such as "warmup" is the training stage, not a pipeline one);
2. DeepSpeed's printed topology (deepspeed/runtime/pipe/topology.py, printed by global rank 0):
   `Using topology: {ProcessCoord(pipe=0, data=0): 0, ...}` (the full map), `RANK=0 building
   pipeline group: [0, 4]` (one list per pipeline, in stage order), and the engine's
   `RANK=r STAGE=s LAYERS=...` (pipe/engine.py, data-parallel id 0 only);
3. sizes the log states — Megatron's `using world size: N, data-parallel size: D,
   context-parallel size: C, ... tensor-model-parallel size: T, pipeline-model-parallel size: P`
   (megatron/training/arguments.py, printed by rank 0), its argument dump
   (`  pipeline_model_parallel_size ..... 2`), or `key=value` / extra keys such as
   tensor_model_parallel_size, pipeline_model_parallel_size, tp_size, pp_size — laid out in
   Megatron's default rank order "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py RankGenerator:
   tp varies fastest, then cp, dp, pp; the dense layers' generator has ep = 1). DeepSpeed's
   PipeDataParallelTopology / PipeModelDataParallelTopology (axes pipe, data, model, row-major)
   give the same order.
A layout with one stage and one data-parallel group is plain data parallelism: no topology
(`read` returns None) and every pass behaves as without one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import polars as pl

AXES = ("pp", "dp", "tp", "cp", "ep")

# Per-rank keys in events (`extra` or top-level fields), by axis.
KEYS: dict[str, tuple[str, ...]] = {
    "pp": ("pp_rank", "pp_stage", "pipeline_stage", "pipe_stage", "stage_id", "pipeline_rank",
           "pipeline_parallel_rank", "pipeline_model_parallel_rank", "pipe_rank"),
    "dp": ("dp_rank", "data_parallel_rank", "dp_id", "data_parallel_id"),
    "tp": ("tp_rank", "tensor_parallel_rank", "tensor_model_parallel_rank", "mp_rank", "model_parallel_rank"),
    "cp": ("cp_rank", "context_parallel_rank"),
    "ep": ("ep_rank", "expert_parallel_rank", "expert_model_parallel_rank"),
}
# A pipeline stage under the plain name `stage`, only when it is an integer.
STAGE_KEY = "stage"

# Sizes stated as keys (`extra`, fields, `key=value` / Megatron's `key ..... value` in text).
SIZE_KEYS: dict[str, tuple[str, ...]] = {
    "world": ("world_size",),
    "pp": ("pipeline_model_parallel_size", "pipeline_parallel_size", "pipe_parallel_size", "pp_size", "num_stages"),
    "tp": ("tensor_model_parallel_size", "tensor_parallel_size", "tp_size", "model_parallel_size", "mp_size"),
    "cp": ("context_parallel_size", "cp_size"),
    "dp": ("data_parallel_size", "dp_size"),
}


def _num_after(keys: Iterable[str]) -> str:
    """A regex: one of `keys` as a JSON key, `key=value` or Megatron's `key ...... value`,
    then an integer (group 1)."""
    alt = "|".join(sorted(keys, key=len, reverse=True))
    return rf'(?:"(?:{alt})"\s*:\s*"?|\b(?:{alt})\s*(?:=|\.{{2,}})\s*)(-?\d+)\b'


_AXIS_RE = {a: _num_after(k) for a, k in KEYS.items()}
_STAGE_RE = r'"stage"\s*:\s*"?(\d+)\b'
_SIZE_RE = {a: _num_after(k) for a, k in SIZE_KEYS.items()}
_ANY_AXIS = "|".join(f"(?:{p})" for p in [*_AXIS_RE.values(), _STAGE_RE])
_ANY_SIZE = "|".join(f"(?:{p})" for p in _SIZE_RE.values())

# Megatron: "using world size: 8, data-parallel size: 2, context-parallel size: 1, ...
# tensor-model-parallel size: 2, pipeline-model-parallel size: 2" (separators and extra fields
# differ between versions: each size is read on its own; "encoder-" and "hierarchical" ones are
# other sizes).
_MEGATRON = {
    "world": re.compile(r"using world size:\s*(\d+)"),
    "dp": re.compile(r"(?<![\w-])data-parallel size:\s*(\d+)"),
    "cp": re.compile(r"(?<![\w-])context-parallel size:\s*(\d+)"),
    "tp": re.compile(r"(?<![\w-])tensor-model-parallel size:\s*(\d+)"),
    "pp": re.compile(r"(?<![\w-])pipeline-model-parallel size:\s*(\d+)"),
}
# DeepSpeed (runtime/pipe/topology.py, engine.py)
_DS_COORD = re.compile(r"ProcessCoord\(([^)]*)\)\s*:\s*(\d+)")
_DS_AXIS = {"pipe": "pp", "data": "dp", "model": "tp"}
_DS_PIPE_GROUP = re.compile(r"building pipeline group:\s*\[([\d,\s]+)\]")
_DS_STAGE = re.compile(r"\bRANK=(\d+)\s+STAGE=(\d+)\b")
# PipelineModule._partition_layers (rank 0): "stage=1 layers=3", one line per stage
_DS_PARTITION = re.compile(r"^\s*stage=(\d+) layers=\d+\s*$")
_TEXT_HINT = ("using world size:|Using topology:|building pipeline group:|STAGE=|model_parallel_size|"
              "parallel_size|pp_size|tp_size|stage=\\d+ layers=")


@dataclass(frozen=True)
class Topology:
    """The layout: `table` has one row per rank (rank, pp, dp, tp, cp, ep; Int32, null where
    unknown); `sizes` what the log stated (world, pp, dp, tp, cp); `sources` where it came from."""

    table: pl.DataFrame
    sizes: dict[str, int]
    sources: tuple[str, ...]

    def stages(self) -> dict[int, list[int]]:
        """Pipeline stage -> its ranks (ranks of unknown stage left out)."""
        out: dict[int, list[int]] = {}
        for r, s in self.table.select("rank", "pp").iter_rows():
            if s is not None:
                out.setdefault(int(s), []).append(int(r))
        return {s: sorted(v) for s, v in sorted(out.items())}

    @property
    def n_stages(self) -> int:
        return len(self.stages())

    def stage_of(self, rank: int) -> int | None:
        v = self.table.filter(pl.col("rank") == rank).get_column("pp")
        return int(v[0]) if len(v) and v[0] is not None else None

    def groups(self) -> pl.DataFrame:
        """rank, pp, dp, peer (Int64: the compute peer group = pipeline stage, -1 unknown) and
        dgroup (String: the data-parallel group, "pp/tp/cp")."""
        t = self.table
        return t.select(
            pl.col("rank"), pl.col("pp"), pl.col("dp"),
            pl.col("pp").fill_null(-1).cast(pl.Int64).alias("peer"),
            pl.concat_str([pl.col(c).cast(pl.String).fill_null("?") for c in ("pp", "tp", "cp")],
                          separator="/").alias("dgroup"),
        )

    def describe_group(self, peer: int) -> str:
        return f"pipeline stage {peer}" if peer >= 0 else "ranks of unknown stage"

    def to_dict(self) -> dict:
        return {"sizes": self.sizes, "sources": list(self.sources), "stages": {str(k): v for k, v in self.stages().items()}}


def with_groups(df: pl.DataFrame, topo: Topology | None) -> pl.DataFrame:
    """`df` (with a `rank` column) with `peer` (Int64) and `dgroup` (String): the groups ranks
    are compared in. Without a topology every rank is in one group (peer 0, dgroup "all"): the
    comparison of the whole job, as before topologies existed."""
    if topo is None:
        return df.with_columns(pl.lit(0, dtype=pl.Int64).alias("peer"), pl.lit("all").alias("dgroup"))
    g = topo.groups().select("rank", "peer", "dgroup").with_columns(pl.col("rank").cast(df.schema["rank"]))
    return df.join(g, on="rank", how="left").with_columns(pl.col("peer").fill_null(-1), pl.col("dgroup").fill_null("?"))


# --- reading ---------------------------------------------------------------------------------

def _first_int(pattern: str, col: pl.Expr) -> pl.Expr:
    return col.str.extract(pattern, 1).cast(pl.Int64, strict=False)


# Literal pre-filters (Aho-Corasick) before the layout regexes: most rows name no layout key.
# The keys themselves (every match of _ANY_AXIS / _ANY_SIZE contains one): fragments such as
# "_size" or "_rank" also passed every collective's tensor_size_mb and peer_rank to the regexes.
EVENT_HINTS = sorted({k for ks in (*KEYS.values(), *SIZE_KEYS.values()) for k in ks} | {f'"{STAGE_KEY}"'})
TEXT_HINTS = ["world size:", "topology:", "pipeline group:", "STAGE=", "parallel_size", "pp_size", "tp_size", " layers="]


def candidates(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The rows `read` can take anything from (rank, extra, fields, message), in their order: a
    superset of what either reader keeps, so `read(candidates(lf), ranks)` == `read(lf, ranks)`
    (forensics.summaries stores them at ingest)."""
    text = pl.concat_str([pl.col("extra").fill_null(""), pl.col("fields").fill_null("")], separator=" ")
    msg = pl.col("message")
    # the two readers' own filters (`_from_events`, `_from_text`), cheap literal test first
    # one regex pass for both alternatives (contains(a|b) == contains(a) | contains(b)): the
    # ingest runs this over every event (forensics.summaries' layout)
    keys = text.str.contains_any(EVENT_HINTS) & text.str.contains(f"{_ANY_AXIS}|{_ANY_SIZE}")
    said = msg.str.contains_any(TEXT_HINTS) & msg.str.contains(_TEXT_HINT)
    return lf.select("rank", "extra", "fields", "message").filter(keys.fill_null(False) | said.fill_null(False))


def _from_events(lf: pl.LazyFrame) -> tuple[dict[int, dict[str, int]], dict[str, int]]:
    """Per-rank coordinates and stated sizes from `extra` / `fields` keys (one regex scan)."""
    text = pl.concat_str([pl.col("extra").fill_null(""), pl.col("fields").fill_null("")], separator=" ")
    rows = (
        lf.select("rank", text.alias("t"))
        .filter(pl.col("t").str.contains_any(EVENT_HINTS))
        .filter(pl.col("t").str.contains(_ANY_AXIS) | pl.col("t").str.contains(_ANY_SIZE))
        .select(
            "rank",
            *(_first_int(p, pl.col("t")).alias(a) for a, p in _AXIS_RE.items()),
            _first_int(_STAGE_RE, pl.col("t")).alias("stage"),
            *(_first_int(p, pl.col("t")).alias(f"size_{a}") for a, p in _SIZE_RE.items()),
        )
        .with_columns(pl.coalesce("pp", "stage").alias("pp"))
        .collect()
    )
    coords: dict[int, dict[str, int]] = {}
    ranked = rows.filter(pl.col("rank").is_not_null())
    if ranked.height:
        # a rank's value on most of its events (a stray number in one record does not move it)
        per = ranked.group_by("rank").agg(*(pl.col(a).drop_nulls().mode().min().alias(a) for a in AXES))
        for row in per.iter_rows(named=True):
            c = {a: int(row[a]) for a in AXES if row[a] is not None}
            if c:
                coords[int(row["rank"])] = c
    sizes: dict[str, int] = {}
    for a in SIZE_KEYS:
        v = rows.get_column(f"size_{a}").drop_nulls()
        if len(v):
            sizes[a] = int(v.mode().max())
    return coords, sizes


def _from_text(lf: pl.LazyFrame) -> tuple[dict[int, dict[str, int]], dict[str, int], list[str]]:
    """Coordinates and sizes printed by DeepSpeed / Megatron on the console (messages)."""
    msgs = (
        lf.filter(pl.col("message").str.contains_any(TEXT_HINTS))
        .filter(pl.col("message").str.contains(_TEXT_HINT))
        .select("message").collect().get_column("message").to_list()
    )
    coords: dict[int, dict[str, int]] = {}
    sizes: dict[str, int] = {}
    found: list[str] = []
    stage_ids: set[int] = set()
    for m in msgs:
        if m is None:
            continue
        hits = _DS_COORD.findall(m)
        for body, r in hits:
            c: dict[str, int] = {}
            for part in body.split(","):
                k, _, v = part.partition("=")
                ax = _DS_AXIS.get(k.strip())
                if ax and v.strip().isdigit():
                    c[ax] = int(v)
            if c:
                coords.setdefault(int(r), {}).update(c)
        if hits:
            found.append("deepspeed")
        g = _DS_PIPE_GROUP.search(m)
        if g:
            for stage, r in enumerate(int(x) for x in g.group(1).replace(" ", "").split(",") if x):
                coords.setdefault(r, {}).setdefault("pp", stage)
            found.append("deepspeed")
        for r, s in _DS_STAGE.findall(m):
            coords.setdefault(int(r), {}).setdefault("pp", int(s))
            stage_ids.add(int(s))
            found.append("deepspeed")
        x = _DS_PARTITION.search(m) if "layers=" in m else None
        if x:
            stage_ids.add(int(x.group(1)))
            found.append("deepspeed")
        if "using world size:" in m:
            for a, p in _MEGATRON.items():
                x = p.search(m)
                if x:
                    sizes[a] = int(x.group(1))
            found.append("megatron")
            continue
        for a, p in _SIZE_RE.items():
            x = re.search(p, m)
            if x and a not in sizes:
                sizes[a] = int(x.group(1))
                found.append("sizes")
    if stage_ids and "pp" not in sizes:
        # DeepSpeed names the stage of data-parallel id 0 only (and rank 0 lists every stage's
        # layers): the number of stages, laid out as PipeDataParallelTopology (data fastest)
        sizes["pp"] = max(stage_ids) + 1
    return coords, sizes, found


def stated_sizes(events: pl.LazyFrame) -> dict[str, int]:
    """The sizes the logs state (world, dp, tp, pp, cp, ep): keys on events, then the console's
    printed ones (which win, as in `read`)."""
    rows = candidates(events)
    return {**_from_events(rows)[1], **_from_text(rows)[1]}


def layout_from_sizes(sizes: dict[str, int], world: int | None) -> dict[int, dict[str, int]]:
    """Rank -> coordinates in Megatron's default order tp-cp-ep-dp-pp (tp fastest); {} when the
    sizes do not describe a world (product mismatch, nothing but data parallelism)."""
    tp, cp, pp = sizes.get("tp", 1), sizes.get("cp", 1), sizes.get("pp", 1)
    world = sizes.get("world") or world
    if tp < 1 or cp < 1 or pp < 1 or not world:
        return {}
    dp = sizes.get("dp") or (world // (tp * cp * pp) if world % (tp * cp * pp) == 0 else 0)
    if dp < 1 or tp * cp * dp * pp != world or (tp == 1 and pp == 1 and cp == 1):
        return {}
    out = {}
    for r in range(world):
        out[r] = {"tp": r % tp, "cp": (r // tp) % cp, "dp": (r // (tp * cp)) % dp, "pp": r // (tp * cp * dp)}
    return out


def read(events: pl.LazyFrame, ranks: Iterable[int]) -> Topology | None:
    """The run's layout (see the module docstring), or None when the logs state none beyond
    plain data parallelism."""
    ranks = sorted(set(int(r) for r in ranks))
    if not ranks:
        return None
    ev_coords, ev_sizes = _from_events(events)
    tx_coords, tx_sizes, found = _from_text(events)
    sizes = {**ev_sizes, **tx_sizes}
    sources: list[str] = []
    layout: dict[int, dict[str, int]] = {}
    planned = layout_from_sizes(sizes, max(ranks) + 1)
    if planned:
        sources.append("megatron" if "megatron" in found else "sizes")
    for r, c in planned.items():
        layout.setdefault(r, {}).update(c)
    if tx_coords:
        sources.append("deepspeed")
    for r, c in tx_coords.items():
        layout.setdefault(r, {}).update(c)
    if ev_coords:
        sources.append("events")
    for r, c in ev_coords.items():
        layout.setdefault(r, {}).update(c)
    # only what concerns ranks of this run (a printed plan may name more) and has a stage or dp
    layout = {r: c for r, c in layout.items() if r in set(ranks)}
    if not layout:
        return None
    table = pl.DataFrame(
        [{"rank": r, **{a: layout.get(r, {}).get(a) for a in AXES}} for r in ranks],
        schema={"rank": pl.Int32, **{a: pl.Int32 for a in AXES}},
    )
    topo = Topology(table=table, sizes=sizes, sources=tuple(dict.fromkeys(sources)))
    g = topo.groups()
    if g.get_column("peer").n_unique() < 2 and g.get_column("dgroup").n_unique() < 2:
        return None   # one stage, one data-parallel group: plain data parallelism
    return topo


__all__ = ["Topology", "read", "with_groups", "layout_from_sizes", "AXES", "KEYS"]
