"""Where does a NaN or an Inf first appear: on which rank, at which step?

Question: does any rank's own value — the loss, a gradient norm, any metric, typed or kept in
`extra`/`fields` — or any message report a non-finite number; and if so, where first?

Domain facts relied on (spec/report.md `non_finite`):
- A loss is never legitimately NaN/Inf: one non-finite loss value is a fact.
- A gradient norm (or another metric) that is Inf/NaN once and finite again on the same rank is
  fp16 dynamic loss scaling at work: the scaler skips the step and lowers the scale (DeepSpeed
  "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: ...", apex "Gradient
  overflow. Skipping step"). Such a transient value, and the overflow messages, are not facts by
  themselves; a non-finite value that the rank never logs finite again is.
- GPU/host telemetry (temperature, power, clocks, utilisation, link and disk rates) that reads
  NaN is a sensor or exporter that could not read, not a number the training computed: not a
  fact here.
- Messages that report one: Megatron-LM's DDP check `Rank {r}: found NaN in local grad norm in
  backward pass before data-parallel communication collective` (param_and_grad_buffer.py; the
  newer rerun-state machine says "found NaN in local grad norm for bucket #i ..."),
  torch.nn.utils.clip_grad_norm_'s "The total norm of order 2.0 for gradients from `parameters`
  is non-finite, so it cannot be clipped", "loss is nan", "NaN detected". Megatron's counter
  "number of nan iterations: N" and loss-scale overflow lines are not.
- The rank where a non-finite value appears first (lowest step, then earliest time) is the
  culprit of the divergence that follows (rootcause.py CAUSES: non_finite -> loss_divergence,
  grad_norm_spike, and the crash a NaN check raises): a NaN in one rank's local gradients reaches
  every rank through the all-reduce, so the other ranks are its victims. Without a step, the
  record's own progress counter orders it: the fractional `epoch` HF Trainer puts in every log
  record (transformers trainer.py Trainer.log: logs["epoch"] = self.state.epoch, which the
  training loop sets to epoch + (step + 1) / steps_in_epoch), the same on every rank at one
  step. Never the names of the files the values are in (a --log-dir tree's local-rank folders
  sort local rank 0 first whatever happened): values in different files that no step, epoch or
  time orders are all named, the log not showing which came first. A line without a rank
  that names one in its text gives that rank (basis named_in_text); a value on its rank's own
  line is own_error.

Must not: decide the root cause; judge the loss's trend (loss.py) or spikes (grad_norm.py).
"""
from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import orjson
import polars as pl

from .. import failure_facts as facts
from .. import failure_messages as fm
from .. import failure_rows
from ..report.model import Finding
from ..schema import ALIASES, FIELDS
from .context import Context
from .evidence import cite, iso, pass_id, ranks_phrase, shorten

# Typed float metrics whose non-finite values are facts: all but the GPU/host telemetry readings
# (a NaN temperature or power draw is a sensor or exporter that could not read, not a number the
# training computed); the loss is judged at once, the others when they persist
_TELEMETRY = {"gpu_util", "mem_alloc_mb", "temp_c", "sm_clock_mhz", "power_w", "pcie_mbps", "nvlink_mbps",
              "disk_read_mbps", "disk_read_bytes"}
_FLOATS = [n for n, m in FIELDS.items() if isinstance(m.dtype, pl.Float64) and n not in _TELEMETRY]
_LOSS = re.compile(r"(?i)loss")
# a non-finite value in a JSON object's text: NaN / Infinity as the JSON-lines reader keeps them
# ("NaN", "Infinity", "-Infinity" strings) or as a program wrote them ("nan", "inf")
_JSON_NONFINITE = r'(?i)"[^"]{1,80}"\s*:\s*"?(?:nan|[+-]?inf(?:inity)?)"?\s*[,}]'
_KEY_VALUE = re.compile(r'(?i)"([^"]{1,80})"\s*:\s*"?(nan|[+-]?inf(?:inity)?)"?\s*[,}]')
# messages reporting a non-finite value, by meaning (forensics/failure_messages.py: Megatron's
# checks, DeepSpeed's loss scale at its minimum, autograd anomaly mode, clip_grad_norm_, Lightning's
# check_finite, the common wording), not the overflow/skip lines of loss scaling (benign)
_TEXT = fm.pattern(kinds=("non_finite",), roles=("own", "job"))
_NOT_TEXT = fm.pattern(kinds=("non_finite",), roles=("benign",))


def _value_rows(ctx: Context) -> pl.DataFrame:
    """Events with a non-finite typed float, with the first such column and its value."""
    names = ctx.events.collect_schema().names()
    cols = [c for c in _FLOATS if c in names]
    if not cols:
        return pl.DataFrame()
    bad = [(~pl.col(c).is_finite()).fill_null(False) for c in cols]
    epoch = pl.col("epoch") if "epoch" in names else pl.lit(None, pl.Float64)
    which = pl.coalesce([pl.when(b).then(pl.lit(c)) for b, c in zip(bad, cols)])
    value = pl.coalesce([pl.when(b).then(pl.col(c)) for b, c in zip(bad, cols)])
    return (ctx.events.select("rank", "host", "step", *(["epoch"] if "epoch" in names and "epoch" not in cols else []),
                              "timestamp", "source_file", "line", "event", *cols)
            .filter(pl.any_horizontal(bad))
            .select("rank", "host", "step", epoch.alias("epoch"), "timestamp", "source_file", "line", "event",
                    which.alias("field"), value.alias("value"))
            .collect())


def _json_rows(ctx: Context) -> pl.DataFrame:
    """Events whose `extra` or `fields` text holds a non-finite value of a key the typed columns
    do not read."""
    def hit(pattern: str) -> pl.Expr:
        return (pl.col("extra").str.contains(pattern) | pl.col("fields").str.contains(pattern)).fill_null(False)

    # the whole pattern only on the texts that hold a "nan" or an "inf" at all (a literal search:
    # ~3x cheaper on a store of finite values); the scan is collected first, as polars would
    # otherwise fold both filters into one and run the whole pattern on every text
    epoch = pl.col("epoch") if "epoch" in ctx.events.collect_schema().names() else pl.lit(None, pl.Float64)
    return (ctx.events.select("rank", "host", "step", epoch.alias("epoch"), "timestamp", "source_file", "line", "event",
                              "extra", "fields")
            .filter(hit("(?i)nan|inf")).collect().filter(hit(_JSON_NONFINITE)))


def _text_rows(ctx: Context) -> pl.DataFrame:
    """WARN/ERROR lines (the failure candidates) whose message reports a non-finite value."""
    if ctx.run is not None:
        from ..summaries import failures

        cand = failures(ctx.run)
    else:
        cand = failure_rows.rows(ctx.events).collect()
    msg = pl.col("message").fill_null("")
    # a traceback's exception line is its TRACEBACK head's message too: counted once
    return cand.filter(msg.str.contains(_TEXT) & ~msg.str.contains(_NOT_TEXT)
                       & (pl.col("event") != "TRACEBACK_CONT"))


def _facts(ctx: Context) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    vals = _value_rows(ctx)
    for r in vals.iter_rows(named=True):
        out.append({**r, "how": "value"})
    typed = {k.lower() for k in (*FIELDS, *ALIASES)}
    for r in _json_rows(ctx).iter_rows(named=True):
        for src in (r["extra"], r["fields"]):
            for m in _KEY_VALUE.finditer(src or ""):
                key = m.group(1)
                if key.lower().rsplit(".", 1)[-1] in typed:      # (`extra.loss`: a flattened path)
                    continue          # read by the typed column (above)
                out.append({**{k: r[k] for k in ("rank", "host", "step", "epoch", "timestamp", "source_file", "line", "event")},
                            "field": key, "value": m.group(2), "how": "value", "untyped": True})
                break
    tasks = facts.SrunTasks(ctx.events)
    for r in _text_rows(ctx).iter_rows(named=True):
        rank, basis = r["rank"], "named_in_text" if r.get("rank_source") == "text" else "own_error"
        if (named := facts.text_over_task(r, tasks)) is not None:
            rank, basis = named, "named_in_text"       # an srun task id that is no rank
        m = fm.meaning(r["message"], kinds=("non_finite",))
        if m is not None and m.role == "job":
            # the loss scaler's overflow flag is all-reduced: every rank raises it at once, so the
            # message alone names nobody; the line's own rank is kept (find: job-wide when every
            # rank said it, else the rank it came from)
            basis = basis if rank is not None else None
        elif rank is None and r.get("local_rank") is None:
            rank = m.rank if m is not None and m.rank is not None else facts.rank_in_text(r["message"])
            basis = "named_in_text" if rank is not None else None
        out.append({"rank": rank, "host": r["host"], "step": r["step"], "epoch": r.get("epoch"), "timestamp": r["timestamp"],
                    "source_file": r["source_file"], "line": r["line"], "event": r["event"], "field": None,
                    "value": None, "message": r["message"], "how": "text", "basis": basis,
                    "job_wide": m is not None and m.role == "job"})
    return out


def _transient(ctx: Context, f: dict[str, Any]) -> bool:
    """A non-loss value the same rank logs finite again later (a loss-scaling skip)."""
    field = f["field"]
    if field is None or _LOSS.search(field) or f["step"] is None:
        return False
    rank = pl.col("rank").is_null() if f["rank"] is None else pl.col("rank") == f["rank"]
    if not f.get("untyped"):
        later = ctx.events.select("rank", "step", field).filter(rank & (pl.col("step") > f["step"]) & pl.col(field).is_finite())
        return later.select(pl.len()).collect().item() > 0
    rows = (ctx.events.select("rank", "step", "extra", "fields")
            .filter(rank & (pl.col("step") > f["step"])
                    & (pl.col("extra").str.contains(f'"{field}"', literal=True)
                       | pl.col("fields").str.contains(f'"{field}"', literal=True)).fill_null(False))
            .collect())
    for r in rows.iter_rows(named=True):
        for src in (r["extra"], r["fields"]):
            try:
                v = orjson.loads(src) if src else None
            except orjson.JSONDecodeError:
                continue
            if isinstance(v, dict) and isinstance(v.get(field), (int, float)) and not isinstance(v.get(field), bool):
                return True
    return False


def _position(f: dict[str, Any]) -> tuple[int, float] | None:
    """How far the run was when the value was logged: its step, else the epoch its record carries
    (fractional: the steps done), else unknown."""
    if f["step"] is not None:
        return (0, float(f["step"]))
    e = f.get("epoch")
    if e is not None and math.isfinite(e):
        return (1, float(e))
    return None


def _unordered(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Nothing says which of two values came first: no step or epoch, not both timed, other files."""
    return (_position(a) is None and _position(b) is None and (a["timestamp"] is None or b["timestamp"] is None)
            and a["source_file"] != b["source_file"])


def _order(f: dict[str, Any]) -> tuple:
    t = f["timestamp"]
    p = _position(f)
    return (p is None, p or (0, 0.0), t is None, t or dt.datetime.min.replace(tzinfo=dt.timezone.utc),
            f["source_file"] or "", f["line"] or 0)


def find(ctx: Context) -> list[Finding]:
    found = _facts(ctx)
    if not found:
        return []
    found.sort(key=_order)
    checked: dict[tuple, bool] = {}
    kept = []
    for f in found:
        key = (f["rank"], f["field"])
        if key not in checked:
            checked[key] = _transient(ctx, f)
        if not checked[key]:
            kept.append(f)
    if not kept:
        return []
    first = kept[0]
    # the first step (or, without steps, the first line) and every rank that shows one there
    pos = _position(first)
    at_first = [f for f in kept if (_position(f) == pos if pos is not None else f is first or _unordered(f, first))]
    culprits = sorted({int(f["rank"]) for f in at_first if f["rank"] is not None})
    if first.get("job_wide"):
        # a job-wide message (the fp16 loss scaler at its minimum): every rank of the run saying it
        # names nobody; only some ranks' saying it (the others' output is not here) keeps the rank
        # it came from, the first to say it (ties: the lowest rank)
        said = [f for f in kept if f.get("job_wide") and f["rank"] is not None]
        everyone = set(ctx.ranks)
        if not said or (everyone and {int(f["rank"]) for f in said} >= everyone):
            culprits = []
        else:
            one_file = len({f["source_file"] for f in said}) == 1     # (file order is time order there)
            culprits = [int(min(said, key=lambda f: (_order(f)[:4], f["line"] if one_file else 0, f["rank"]))["rank"])]
    affected = sorted({int(f["rank"]) for f in kept if f["rank"] is not None})
    victims = sorted(set(ctx.ranks) - set(culprits)) if culprits else []
    basis = next((f.get("basis") or "own_error" for f in [*at_first, *kept] if f["rank"] is not None and int(f["rank"]) in culprits), None)
    if first["how"] == "text":
        what = f"a NaN/Inf is reported: {shorten(first.get('message'), 160)}"
    else:
        what = f"{first['field']} is {_show(first['value'])}"
    job_wide = not culprits and any(f.get("job_wide") for f in at_first)
    who = (ranks_phrase(culprits) if culprits else
           "every rank (job-wide: the message names no rank)" if job_wide else "a process the line does not name")
    step = (f" at step {first['step']}" if first["step"] is not None
            else f" at epoch {first['epoch']:g} (the record's own progress; no step is logged)" if pos is not None else "")
    rest = sorted(set(affected) - set(culprits))
    if len(culprits) > 1 and pos is None:
        who += " (which of them first, the log does not show: no step, epoch or time orders them)"
    title = (f"first non-finite value: {what} on {who}{step}"
             + (f"; later on {ranks_phrase(rest)} too" if rest else "")
             + f" ({len(kept)} non-finite value{'s' if len(kept) != 1 else ''} or report{'s' if len(kept) != 1 else ''} in all)")
    t_first = _step_start(ctx, first) or first["timestamp"]
    return [Finding(
        rule=pass_id("non_finite"), kind="non_finite", layer="training", severity="ERROR",
        ranks=culprits, victims=victims, basis=basis, title=title,
        evidence={"field": first["field"], "value": _show(first["value"]), "step": first["step"],
                  **({"epoch": first["epoch"]} if first["step"] is None and pos is not None else {}),
                  "first_ranks": culprits, "ranks_affected": affected, "occurrences": len(kept),
                  "how": first["how"], "message": shorten(first.get("message"), 300), "job_wide": job_wide},
        lines=cite([{"source_file": f["source_file"], "line": f["line"], "rank": f["rank"], "timestamp": f["timestamp"],
                     "text": (f"{f['field']}={_show(f['value'])}" if f["how"] == "value" else shorten(f.get("message"), 140))}
                    for f in kept[:3]], text="text"),
        first_seen=iso(t_first), last_seen=iso(max((f["timestamp"] for f in kept if f["timestamp"]), default=t_first)),
    )]


def _show(v: Any) -> str:
    if isinstance(v, float):
        return "NaN" if v != v else ("Inf" if v > 0 else "-Inf")
    return str(v) if v is not None else "?"


def _step_start(ctx: Context, f: dict[str, Any]) -> dt.datetime | None:
    """When the first non-finite step began (its earliest event on any rank): the divergence
    that follows is judged from that step's first time."""
    if f["step"] is None:
        return None
    return (ctx.events.select("step", "timestamp").filter(pl.col("step") == f["step"])
            .select(pl.col("timestamp").min()).collect().item())
