"""Which ranks never joined the collective the others are stuck in (Flight Recorder dumps)?

Question: per process group, is there a collective some members enqueued and others never
reached — and which ranks are behind?

Domain facts relied on:
- A Flight Recorder dump (TORCH_NCCL_DUMP_ON_TIMEOUT) holds each rank's last collectives per
  process group. collective_seq_id counts the collectives a rank enqueued in that group, so
  members that reached the same point agree on it. Who is behind is one rule,
  flight_recorder.stuck_at (fr-table and missing_ranks call it too): the group is stuck in its FIRST pending
  collective (the lowest number some member enqueued and no member completed); a member whose last
  enqueued id is below it never issued it and is at fault. A member that issued it but not the
  later ones the others went on to enqueue (NCCL enqueues asynchronously) is waiting in it like
  them: a victim. Point-to-point entries are skipped: their collective_seq_id does not advance.
- When every member issued it, its entries' states tell who never ran it (stuck_at): a member whose
  entry is still `scheduled` while others' `started` (its GPU never reached the kernel). When the
  states agree, nobody is named.
- Only groups with an entry not completed on some rank hold anybody. A member of the group
  (pg_config) whose dump has no entry in it at all is behind too; ranks without a dump are not
  judged.
- The ranks that are behind are at fault (`ranks`, kind `hang`); the members stuck waiting are
  the victims — often they are the ones whose watchdog fired first.
- Members that reached the same collective number but with another op than the majority
  (>= 3 members) — or another size, for all-reduce/broadcast where every rank sends the same
  tensor (all-to-all sizes differ per rank by design) — issued a mismatched collective.
- One missing rank stalls several groups: NCCL enqueues asynchronously, so the waiting ranks go
  on issuing collectives in other groups until those block behind the first. The group whose
  stuck collective the waiting ranks created earliest is where the job stopped first (the
  "wavefront"); the later stalls are its consequence. The title leads with that group and the
  evidence orders the groups by stall time (`stalled`, `first_stalled`).

- When the dump files are still on disk, the Flight Recorder table (forensics.fr_table, the same
  call as `forensics fr-table`) is attached: its first mismatch is cited first (file and entry)
  and the table rides in the evidence (`flight_recorder`) for the report to show. A mismatch only
  the table sees (another op, size or dtype at one number; two-rank groups) becomes the finding.

Must not: decide the root cause; read events other than COLLECTIVE and PG_STATUS (and the dump
files the run was read from, through fr_table).
"""
from __future__ import annotations

import polars as pl

from ..report.model import Evidence, Finding
from .context import Context
from .evidence import cite, iso, pass_id, ranks_phrase


def find(ctx: Context) -> list[Finding]:
    found = _find(ctx)
    table = _fr_table(ctx)
    if table is None:
        return found
    head = table.first_stalled()
    if not found and head is not None and _alarming(head):
        found = [_from_table(head)]
    for f in found:
        _attach(f, table)
    return found


def _fr_table(ctx: Context):  # -> FrTable | None
    """The Flight Recorder table of the dumps this run was read from, if they are still on disk."""
    from ..fr_table import build_from, dump_sources, read_dump

    run = ctx.run
    if run is None:
        return None
    # only the two fields it reads: `run.sources` decodes every field of every source (~0.3 s on
    # 4,096 files) for a run that usually holds no dump
    cols = run.source_columns("path", "format")
    paths = dump_sources({"path": p, "format": f} for p, f in zip(cols["path"], cols["format"]))
    if not paths:
        return None
    return build_from([read_dump(p) for p in paths])


def _alarming(line) -> bool:
    """A mismatch of op, size or dtype always is; ranks missing only when the collective is still in
    flight somewhere (a finished one holds nobody: dumps taken on a healthy job are not a hang)."""
    if line.problem in ("op", "size", "dtype"):
        return True
    return line.problem in ("missing", "ahead") and any(c.state != "completed" for c in line.cells)


def _cell_evidence(line, text: str) -> Evidence:
    c = line.lead()
    return Evidence(source_file=c.file, line=c.entry, rank=c.rank, text=text)


def _from_table(line) -> Finding:
    """A finding for a mismatch only the table sees."""
    lead = line.lead()
    what = f"{lead.op} #{line.seq} on pg {line.pg}" + (f" ({line.desc})" if line.desc else "")
    never = line.problem == "missing"
    title = (f"{ranks_phrase(line.odd)} never joined the collective the others are stuck in: {what}" if never
             else f"{ranks_phrase(line.odd)} disagree{'s' if len(line.odd) == 1 else ''} with the other ranks at {what}: {line.detail}")
    lines = [Evidence(source_file=c.file, line=c.entry, rank=c.rank, text=f"rank {c.rank}: {c.op} #{line.seq} {c.state}")
             for c in line.cells if c.rank in line.odd][:3]
    return Finding(
        rule=pass_id("stuck_collective"), kind="hang", layer="communication", severity="ERROR",
        ranks=sorted(line.odd), victims=sorted(c.rank for c in line.cells if c.rank not in line.odd),
        basis="never_joined" if never else None, title=title,
        evidence={"how": f"flight recorder table: first {line.problem} mismatch"}, lines=lines or [_cell_evidence(line, what)],
    )


def _attach(f: Finding, table) -> None:
    """The table's first mismatch, cited first, and the table itself for the report."""
    from ..fr_table import dumps_summary, ranks_text
    from ..render.fr_table import table_rows, text_block

    head = table.first_stalled()
    ev: dict = {"table": text_block(table), "rows": table_rows(table), "dumps": dumps_summary(table), "no_dump": table.no_dump}
    if head is not None:
        lead = head.lead()
        ev["first_mismatch"] = {"pg": head.pg, "desc": head.desc, "seq": head.seq, "problem": head.problem,
                                "ranks": head.odd, "missing": head.missing, "op": lead.op if lead else None,
                                "detail": head.detail}
        text = f"fr-table first mismatch: {lead.op if lead else ''} #{head.seq} pg {head.pg}: {head.detail}"
        if head.no_dump:
            text += f" (no dump from {ranks_text(head.no_dump)})"
        f.lines.insert(0, _cell_evidence(head, text))
    f.evidence["flight_recorder"] = ev


def _stuck_tops(coll: pl.DataFrame, status: pl.DataFrame, enq: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Where each group with a collective in flight is stuck (flight_recorder.stuck_at, from the
    members' last numbers, the entries' states and pg_status): (process_group -> top, the members
    it names as behind: process_group, rank)."""
    from ..ingest.flight_recorder import stuck_at

    nonp2p = coll.filter(~pl.col("p2p"))
    frame = (
        enq.group_by("process_group").agg(pl.col("rank"), pl.col("seq"))
        .join(nonp2p.filter((pl.col("state") == "completed") & pl.col("seq").is_not_null())
              .group_by("process_group").agg(pl.col("seq").unique().alias("completed")), on="process_group", how="left")
        .join(nonp2p.filter(pl.col("state").fill_null("") != "completed")
              .group_by("process_group").agg(pl.col("seq").unique().alias("unfinished")), on="process_group", how="inner")
        .join(status.group_by("process_group").agg(pl.col("done_upto").max()), on="process_group", how="left")
    )
    # per member: the states of its entries not completed
    states: dict = {}
    for pg, rank, seq, state in (nonp2p.filter((pl.col("state").fill_null("completed") != "completed") & pl.col("seq").is_not_null())
                                 .select("process_group", "rank", "seq", "state").iter_rows()):
        states.setdefault(pg, {}).setdefault(rank, {})[seq] = state
    rows, named = [], []
    for g in frame.iter_rows(named=True):
        got = stuck_at(dict(zip(g["rank"], g["seq"])), g["completed"] or (), g["unfinished"], g["done_upto"],
                       states.get(g["process_group"]))
        if got is not None:
            rows.append((g["process_group"], got[0]))
            named += [(g["process_group"], r) for r in got[1]]
    pg_t = coll.schema["process_group"]
    return (pl.DataFrame(rows, schema={"process_group": pg_t, "top": pl.Int64}, orient="row"),
            pl.DataFrame(named, schema={"process_group": pg_t, "rank": enq.schema["rank"]}, orient="row"))


def _find(ctx: Context) -> list[Finding]:
    j = pl.col("extra").str.json_path_match
    coll_lf = (
        ctx.events.select("rank", "event", "timestamp", "process_group", "seq", "collective", "tensor_size_mb", "extra",
                          "source_file", "line")
        .filter((pl.col("event") == "COLLECTIVE") & pl.col("rank").is_not_null() & pl.col("process_group").is_not_null())
        .with_columns(j("$.state").alias("state"), (j("$.is_p2p") == "true").fill_null(False).alias("p2p"),
                      j("$.pg_desc").alias("pg_desc"), j("$.input_dtypes[0]").alias("dtype"),
                      j("$.input_sizes[0]").alias("shape"))
        .drop("extra", "event")
    )
    status_lf = (
        ctx.events.select("rank", "event", "process_group", "seq", "extra", "source_file", "line")
        .filter((pl.col("event") == "PG_STATUS") & pl.col("rank").is_not_null() & pl.col("process_group").is_not_null())
        .with_columns(j("$.pg_ranks").alias("pg_ranks"), j("$.last_completed").cast(pl.Int64, strict=False).alias("done_upto"))
        .drop("event", "extra")
    )
    dumped_lf = (
        ctx.events.select("rank", "event").filter(pl.col("event").is_in(["COLLECTIVE", "PG_STATUS"]))
        .select(pl.col("rank").drop_nulls().unique())
    )
    coll, status, dumped = pl.collect_all([coll_lf, status_lf, dumped_lf])
    if coll.is_empty():
        return []
    # members of each group (pg_config), so a member with no entry at all in the group counts as behind
    members = (
        status.filter(pl.col("pg_ranks").is_not_null())
        .group_by("process_group").agg(pl.col("pg_ranks").first())
        .with_columns(pl.col("pg_ranks").str.json_decode(pl.List(pl.Int32)).alias("rank"))
        .explode("rank").select("process_group", "rank", pl.lit(-1, dtype=pl.Int64).alias("seq"))
        .join(dumped, on="rank", how="semi")    # ranks without a dump are not judged
    )
    enq = pl.concat([
        coll.filter(~pl.col("p2p") & pl.col("seq").is_not_null()).select("process_group", "rank", "seq"),
        status.filter(pl.col("seq").is_not_null()).select("process_group", "rank", "seq"),
        members,
    ], how="vertical_relaxed").group_by("process_group", "rank").agg(pl.col("seq").max())
    # where each group is stuck and who is behind: one rule (flight_recorder.stuck_at), the one
    # `fr-table` applies too — the first pending collective, which the members behind never issued
    tops, named = _stuck_tops(coll, status, enq)
    enq = enq.join(tops, on="process_group")
    behind = enq.filter(pl.col("seq") < pl.col("top"))
    # every member issued it: those whose GPU never started it while others did (its state:
    # flight_recorder.stuck_at) are behind all the same
    not_run = enq.join(named, on=["process_group", "rank"]).filter(pl.col("seq") >= pl.col("top"))
    if not not_run.is_empty():
        behind = pl.concat([behind, not_run], how="vertical_relaxed")
    # same collective number, different op or size: the minority signature is the odd rank out
    at_top = coll.join(enq.filter(pl.col("seq") == pl.col("top")).select("process_group", "rank", pl.col("top").alias("seq")),
                       on=["process_group", "rank", "seq"])
    # sizes must agree only where every rank sends the same tensor (all_to_all, all_gather with
    # uneven splits legitimately differ per rank)
    same_size = pl.col("collective").fill_null("").str.contains(r"(?i)all_?reduce|broadcast")
    sig = at_top.with_columns(pl.when(same_size).then(pl.col("tensor_size_mb")).alias("tensor_size_mb")).group_by(
        "process_group", "rank").agg(pl.col("collective").first(), pl.col("tensor_size_mb").first(),
                                     pl.col("seq").first().alias("top"))
    sig = sig.with_columns(pl.len().over("process_group", "collective", "tensor_size_mb").alias("same"),
                           pl.len().over("process_group").alias("members"))
    odd = sig.filter((pl.col("same") * 2 < pl.col("members")) & (pl.col("members") >= 3))
    if not odd.is_empty():
        behind = pl.concat([behind, odd.select("process_group", "rank", pl.col("top").cast(pl.Int64).alias("seq"),
                                               pl.col("top").cast(pl.Int64))], how="vertical_relaxed")
    if behind.is_empty():
        return []
    culprits = sorted({int(r) for r in behind.get_column("rank")})
    groups = behind.group_by("process_group").agg(pl.col("rank").sort(), pl.col("top").first()).sort("process_group")
    waiting = enq.filter((pl.col("seq") >= pl.col("top")) & pl.col("process_group").is_in(groups.get_column("process_group").implode()))
    waiting = waiting.join(behind.select("process_group", "rank"), on=["process_group", "rank"], how="anti")
    victims = sorted({int(r) for r in waiting.get_column("rank")} - set(culprits))
    # the stuck collective as the waiting ranks recorded it
    stuck = coll.join(waiting.select("process_group", "rank", pl.col("top").alias("seq")), on=["process_group", "rank", "seq"])
    stuck = stuck.sort("timestamp", nulls_last=True)
    # per group: when the waiting ranks created the collective that never completed, and what it was
    stalls = (
        stuck.group_by("process_group")
        .agg(pl.col("timestamp").filter(pl.col("state").fill_null("") != "completed").min().alias("since"),
             pl.col("collective").drop_nulls().first().alias("op"), pl.col("pg_desc").drop_nulls().first().alias("desc"),
             pl.col("dtype").drop_nulls().first(), pl.col("shape").drop_nulls().first(),
             pl.col("rank").unique().sort().alias("waiting"))
        .join(groups, on="process_group", how="right")
        .sort(pl.col("since"), pl.col("process_group"), nulls_last=True)
    )
    stalled = [
        {"process_group": g["process_group"], "desc": g["desc"], "op": g["op"], "seq": int(g["top"]),
         "missing": [int(x) for x in g["rank"]], "waiting": [int(x) for x in (g["waiting"] or [])],
         "dtype": g["dtype"], "shape": g["shape"], "since": iso(g["since"])}
        for g in stalls.iter_rows(named=True)
    ]
    lead = stalled[0]
    desc = (f"{lead['op'] or 'collective'} #{lead['seq']} on pg {lead['process_group']}"
            + (f" ({lead['desc']})" if lead["desc"] else "")
            + (f", where {ranks_phrase(lead['waiting'])} wait" if lead["waiting"] else "")
            + (f" since {lead['since'][11:23]}" if lead["since"] else "")
            + (" — the first collective to stall" if len(stalled) > 1 else ""))
    if len(stalled) > 1:
        rest = stalled[1:]
        desc += ("; behind in " + ", ".join(
            f"pg {g['process_group']}" + ("" if g["missing"] == lead["missing"] else f" ({ranks_phrase(g['missing'])})")
            for g in rest[:6]) + (f" and {len(rest) - 6} more" if len(rest) > 6 else "") + " too, stalled after it")
    last_lines = (
        coll.filter(pl.col("rank").is_in(culprits)).sort("line").group_by("rank", maintain_order=True).last()
        .sort("rank").head(3)
    )
    lines = cite([dict(r, text=f"rank {r['rank']} stuck in {r['collective']} #{r['seq']} (pg {r['process_group']})")
                  for r in stuck.head(2).iter_rows(named=True)], text="text")
    lines += cite([dict(r, text=f"rank {r['rank']} last recorded {r['collective']} #{r['seq']} (pg {r['process_group']})")
                   for r in last_lines.iter_rows(named=True)], text="text")
    t0 = stuck.get_column("timestamp").drop_nulls()
    ran = {int(r) for r in not_run.get_column("rank")}
    if ran and set(culprits) <= ran:
        # they issued it like the others, but their GPU never reached it (stuck_at: the states)
        verb = "issued but never started (its entry still scheduled while the others' started)"
        how = "flight recorder: entry state behind the group's (scheduled while others started)"
        title = f"{ranks_phrase(culprits)} {verb} the collective the others are stuck in: {desc}"
    else:
        title = f"{ranks_phrase(culprits)} never joined the collective the others are stuck in: {desc}"
        how = "flight recorder: collective_seq_id behind the group's"
    return [Finding(
        rule=pass_id("stuck_collective"), kind="hang", layer="communication", severity="ERROR",
        ranks=culprits, victims=victims, basis="never_joined",
        title=title,
        evidence={"groups": {g["process_group"]: {"missing": [int(x) for x in g["rank"]], "seq": int(g["top"])}
                             for g in groups.iter_rows(named=True)},
                  "first_stalled": lead, "stalled": stalled,
                  "how": how},
        lines=lines,
        first_seen=iso(t0.min()) if len(t0) else None, last_seen=iso(t0.max()) if len(t0) else None,
    )]
