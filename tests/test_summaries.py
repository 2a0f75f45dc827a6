"""forensics.summaries: the per-(rank, step) and per-rank tables written at ingest are the tables
the events give, are read instead of the events, and are never stale."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

import forensics
from forensics import summaries as S
from forensics import timeline as tl
from forensics.passes import context as C
from forensics.passes import diagnose, failures
from forensics.store import open_store

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(p.name for p in (REPO / "sample_logs").iterdir() if (p / "expected.toml").is_file())


def _store(tmp_path: Path, *logs: Path, append: bool = False):
    forensics.ingest([str(p) for p in logs], tmp_path / "run.forensics", append=append)
    return open_store(tmp_path / "run.forensics")


def _files(run) -> list[str]:
    """The summaries in the store (files, and the STEPS folder), the parts' partials aside."""
    d = run.path / S.SUMMARIES_DIR
    return sorted(p.name for p in d.iterdir() if p.name != S.PARTS_DIR) if d.is_dir() else []


def _all(run) -> list[str]:
    """Every summary's name for the run as it is now."""
    return sorted(S.path_of(run, name).name for name in S.COMPUTE)


def _stored(run, name: str) -> pl.DataFrame:
    """The summary `name` as stored (read, never computed)."""
    df = S._read(S.path_of(run, name))
    assert df is not None
    return df


def _assert_stored_equal_computed(run, exact: bool = True) -> None:
    """Every summary file of the store (merged at ingest from the units' partials) is the table
    `summaries.COMPUTE` computes from the committed events. `exact=False`: float columns may differ
    by rounding (a float sum over a group cut between parts adds in another order)."""
    from polars.testing import assert_frame_equal

    for name, compute in S.COMPUTE.items():
        stored = _stored(run, name)
        want = compute(run)
        if name == S.ERRORS:   # "in no particular order"
            stored, want = stored.sort(pl.all()), want.sort(pl.all())
        assert_frame_equal(stored, want, check_exact=exact, rel_tol=1e-12, abs_tol=1e-9)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_summaries_written_at_ingest_give_the_tables_the_events_give(tmp_path: Path, scenario: str) -> None:
    run = _store(tmp_path, REPO / "sample_logs" / scenario)
    assert _files(run) == _all(run)
    # merged from the ingest units' partial summaries == computed from the events after the commit
    _assert_stored_equal_computed(run)
    # the diagnosis' step table: from the summary == aggregated from the events (slices, or none)
    from_summary = C.step_table(run.events(), run)
    assert from_summary.equals(C.step_table(run.events(), run, summary=False))
    assert from_summary.equals(C.step_table(run.events()))
    assert tl.step_table(run, evidence=True).collect().equals(tl.step_table(run.events(), evidence=True).collect())
    # the per-rank table and the `ranks` command
    assert S.rank_table(run).equals(S.rank_rows(run.events()).collect())
    assert tl.rank_summary(run).equals(tl.rank_summary(run.events()))
    # the failures pass' rows: from the FAILURES summary == found in the events
    assert failures._candidates(C.Context.from_run(run)).collect().equals(
        failures._candidates(C.Context(run.events())).collect())
    # the post-mortem questions: a Run (summaries, parts pruned by rank and time) == its events
    ev = run.events()
    assert tl.stop_time(run) == tl.stop_time(ev)
    assert tl.untimed_files(run) == tl.untimed_files(ev)
    assert tl.monotonicity(run).equals(tl.monotonicity(ev))
    # (ranks named: a Run knows its ranks from the manifest, bare events only from their rows)
    every = tl.known_ranks(ev)
    assert tl.last_window(run, ranks=every).to_dict() == tl.last_window(ev, ranks=every).to_dict()
    if every:
        one = [every[-1]]
        assert tl.last_window(run, window_s=0.5, ranks=one).to_dict() == tl.last_window(ev, window_s=0.5, ranks=one).to_dict()
    assert tl.build_timeline(run).rows.equals(tl.build_timeline(ev).rows)
    steps = ev.select(pl.col("step").drop_nulls().unique().sort()).collect().to_series().to_list()
    for s in steps[:1] + steps[-1:]:
        assert tl.parse_time_spec(f"step:{s}", run) == tl.parse_time_spec(f"step:{s}", ev)


def test_a_stored_summary_is_what_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _store(tmp_path, REPO / "sample_logs" / "straggler")
    report = diagnose(run).to_json()

    def boom(_run):  # noqa: ANN001
        raise AssertionError("summary recomputed from the events")

    ranks, snap, mono = tl.rank_summary(run), tl.last_window(run).to_dict(), tl.monotonicity(run)
    for name in ("compute_step_groups", "compute_rank_table", "compute_errors", "compute_untimed", "compute_failures"):
        monkeypatch.setattr(S, name, boom)
    assert diagnose(open_store(run.path)).to_json() == report
    assert tl.rank_summary(run).equals(ranks)
    assert tl.last_window(run).to_dict() == snap
    assert tl.monotonicity(run).equals(mono)
    tl.build_timeline(run)


def test_an_appended_store_never_reads_the_summary_of_its_previous_version(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    src = sorted((REPO / "sample_logs" / "straggler").glob("*.jsonl"))
    assert len(src) >= 2
    (logs / src[0].name).write_bytes(src[0].read_bytes())
    first = _store(tmp_path, logs)
    before = S.rank_table(first)
    (logs / src[1].name).write_bytes(src[1].read_bytes())
    second = _store(tmp_path, logs, append=True)
    assert S.key(second) != S.key(first)
    after = S.rank_table(second)
    assert after.equals(S.rank_rows(second.events()).collect())
    assert after.height > before.height or after["events"].sum() > before["events"].sum()
    # only the current version's files are left
    assert _files(second) == _all(second)


def test_a_store_that_cannot_be_written_computes_its_summaries_in_memory(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORENSICS_SUMMARIES", "0")
    run = _store(tmp_path, REPO / "sample_logs" / "data_load_skew")
    assert _files(run) == []           # ingest wrote none
    st = C.Context.from_run(run).steps
    assert _files(run) == []           # nor did first use
    monkeypatch.delenv("FORENSICS_SUMMARIES")
    assert C.Context.from_run(open_store(run.path)).steps.equals(st)
    assert _files(run) == [f"steps-{S.key(run)}"]


def test_a_damaged_summary_is_computed_again(tmp_path: Path) -> None:
    run = _store(tmp_path, REPO / "sample_logs" / "thermal_throttling")
    want = C.step_table(run.events(), run, summary=False)
    p = next(S.path_of(run, S.STEPS).iterdir())   # the states file (linked: the part's partial too)
    p.write_bytes(p.read_bytes()[:100])   # cut short (a full disk, a damaged copy)
    assert C.step_table(run.events(), run).equals(want)
    assert _stored(run, S.STEPS).equals(S.compute_step_groups(run))   # and written again whole


def test_summaries_are_keyed_by_the_event_parts(tmp_path: Path) -> None:
    run = _store(tmp_path, REPO / "sample_logs" / "healthy")
    k = S.key(run)
    manifest = json.loads((run.path / "manifest.json").read_text())
    manifest["parts"] = [*manifest["parts"], {**manifest["parts"][0], "path": "events/part-other.parquet"}]
    other = type(run)(path=run.path, manifest=manifest)
    assert S.key(other) != k
    assert os.path.basename(S.path_of(other, S.RANKS)) != os.path.basename(S.path_of(run, S.RANKS))


@pytest.mark.parametrize("layout", ["events", "megatron", "deepspeed"])
def test_the_stored_layout_rows_give_the_topology_the_events_give(tmp_path: Path, layout: str) -> None:
    from pipeline_run import pipeline_rows, write_jsonl

    from forensics import topology as T

    write_jsonl(pipeline_rows(pp=2, dp=4, steps=12, layout=layout), tmp_path / "logs")
    run = _store(tmp_path, tmp_path / "logs")
    stored = C.Context.from_run(run).topology
    direct = T.read(run.events(), C.Context.from_run(run).ranks)
    assert stored is not None and direct is not None
    assert stored.table.equals(direct.table) and (stored.sizes, stored.sources) == (direct.sizes, direct.sources)
    assert S.layout(run).height < run.events().select(pl.len()).collect().item()   # only the rows that can state it


def test_last_10s_and_events_of_one_rank_read_only_that_ranks_parts(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With the summaries, `last-10s --rank N` and `events --rank N` open only the parts whose
    rank range holds N (the part table): the other parts are removed after the store is opened,
    and both still answer (and answer as before)."""
    from test_timeline import ingest

    import forensics.ingest as ing
    import forensics.store as store_mod
    from forensics.query import filter_events

    monkeypatch.setattr(ing, "BATCH_BYTES", 1)           # one part per rank file: several parts
    monkeypatch.setattr(ing, "BATCH_MIN", 1)
    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)
    run, _ = ingest(tmp_path, ranks=6, steps=8, last_step={4: 5})
    snap = tl.last_window(run, ranks=[2]).to_dict()
    ev = filter_events(run, ranks=[2]).collect()
    mine = {p["path"] for p in run.parts if p["kind"] == "events" and p["rank_min"] <= 2 <= p["rank_max"]}
    assert mine and len(mine) < len(run.event_parts())
    for p in run.event_parts():
        if os.path.relpath(p, run.path) not in mine:
            os.remove(p)
    assert tl.last_window(run, ranks=[2]).to_dict() == snap
    assert filter_events(run, ranks=[2]).collect().equals(ev)


def test_a_re_ingest_that_keeps_every_part_keeps_its_summaries(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    logs = REPO / "sample_logs" / "straggler"
    run = _store(tmp_path, logs)
    def inodes(r) -> dict[str, int]:  # noqa: ANN001  # the summaries and the parts' partial summaries
        d = r.path / S.SUMMARIES_DIR
        return {str(p.relative_to(d)): p.stat().st_ino for p in d.rglob("*") if p.is_file()}

    before = inodes(run)
    assert any(k.startswith(S.PARTS_DIR + "/") for k in before)

    def boom(_run):  # noqa: ANN001
        raise AssertionError("summary recomputed on a re-ingest that changed nothing")

    with monkeypatch.context() as m:
        for name in ("compute_step_groups", "compute_rank_table", "compute_errors", "compute_untimed", "compute_layout",
                 "compute_failures"):
            m.setattr(S, name, boom)
        m.setattr(S, "_assemble_steps", lambda *_a: boom(None))   # the STEPS folder is carried, not made again
        again = _store(tmp_path, logs)
    assert S.key(again) == S.key(run)
    # the same files (linked into the new version, not computed again)
    assert inodes(again) == before
    assert C.step_table(again.events(), again).equals(C.step_table(again.events(), again, summary=False))


def test_summaries_built_slice_by_slice_equal_one_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build collects one slice of whole ranks at a time (BUILD_SLICE_EVENTS) to bound its
    peak memory: the step groups and the per-rank table are those of one scan of every event,
    unranked events included."""
    import json as _json

    d = tmp_path / "logs"
    d.mkdir()
    for r in range(12):
        lines = [{"timestamp": f"2025-06-12T14:00:{s:02d}.{r:03d}Z", "rank": r, "level": "WARN" if s == 3 else "INFO",
                  "event": "TRAIN_STEP", "message": f"step={s}", "extra": {"step": s, "loss": 2.0 - s / 100}}
                 for s in range(20)]
        (d / f"rank_{r}.jsonl").write_text("".join(_json.dumps(x) + "\n" for x in lines))
    (d / "launcher.jsonl").write_text(_json.dumps({"timestamp": "2025-06-12T14:00:01Z", "event": "START",
                                                   "message": "no rank"}) + "\n")
    monkeypatch.setenv("FORENSICS_SUMMARIES", "0")
    run = _store(tmp_path, d)
    monkeypatch.setattr(S, "BUILD_SLICE_EVENTS", 50)
    assert len(run.rank_slices(50)) > 2   # the build really goes slice by slice here
    from forensics.timeline.steps import group_rows

    whole = group_rows(run.events()).collect().sort("rank", "step", nulls_last=True)
    assert S.compute_step_groups(run).equals(whole)
    assert S.compute_rank_table(run).equals(S.rank_rows(run.events()).collect())
    assert S.compute_rank_table(run)["rank"].null_count() == 1


def _mixed_run(d: Path, ranks: int = 6, steps: int = 40, files: str = "one") -> None:
    """JSON-lines of a small run with every kind of event the summaries aggregate: data loads
    (with disk read rates), collectives (comm, wait), gpu telemetry, TRAIN_STEP summaries (loss,
    lr, step time), warnings, errors, a host change, events without a time and without a rank,
    layout records. `files`: "one" (every rank in one file, in time order: cut into byte ranges,
    a (rank, step) falls on both sides of a cut) or "split" (a file per rank, rank 2's in two
    files: its steps are in several units)."""
    import json as _json

    def ts(s: int, r: int, k: int) -> str:
        us = (s * 1_000 + k * 100 + r) * 1_000
        return f"2025-06-12T14:{us // 60_000_000:02d}:{us % 60_000_000 / 1e6:09.6f}Z"

    rows: list[tuple[str, dict]] = []
    for s in range(steps):
        for r in range(ranks):
            host = f"node{r // 4}" if not (r == 3 and s >= steps // 2) else "node9"
            base = {"rank": r, "host": host}
            rows.append((ts(s, r, 0), {**base, "level": "INFO", "event": "DATA_LOAD", "message": "batch",
                                       "extra": {"step": s, "data_load_ms": 10.1 + r + s / 7,
                                                 "disk_read_mbps": 100.3 + s % 5 + r, "samples_per_s": 1.0 * s}}))
            rows.append((ts(s, r, 1), {**base, "level": "INFO", "event": "ALLREDUCE", "message": "allreduce",
                                       "extra": {"step": s, "comm_ms": 20.7 + (s % 3), "wait_ms": 1.1 * r,
                                                 "samples_per_s": 2.0 * s}}))
            rows.append((ts(s, r, 2), {**base, "level": "INFO", "event": "GPU_STATS", "message": "telemetry",
                                       "extra": {"step": s, "gpu_util": float((s * 7 + r) % 100),
                                                 "temp_c": 60.0 + (s + r) % 9, "sm_clock_mhz": 1400.0 - s % 4}}))
            level = "WARN" if (s + r) % 11 == 0 else ("ERROR" if (s, r) == (steps - 3, 4) else "INFO")
            rows.append((ts(s, r, 3), {**base, "level": level, "event": "TRAIN_STEP", "message": f"step={s}",
                                       "extra": {"step": s, "loss": 3.0 - s / 97, "lr": 1e-4,
                                                 "step_time_ms": 300.0 + r + s / 3, "tp_rank": r % 2,
                                                 "pp_rank": r // 2}}))
            if r == 5 and s % 9 == 4:   # an INFO line the failures pass keeps for its name
                rows.append((ts(s, r, 4), {**base, "level": "INFO", "event": "nccl_Watchdog" if s % 2 else "KİLLED",
                                           "message": "status", "extra": {"last_enqueued": s}}))
    rows.sort(key=lambda x: x[0])
    lines = {r: [] for r in range(ranks)}
    order: list[str] = []
    for t, row in rows:
        line = _json.dumps({"timestamp": t, **row})
        lines[row["rank"]].append(line)
        order.append(line)
    untimed = _json.dumps({"rank": 1, "level": "INFO", "event": "NOTE", "message": "no time here"})
    unranked = _json.dumps({"timestamp": ts(1, 0, 5), "level": "ERROR", "event": "LAUNCHER", "message": "no rank"})
    d.mkdir(parents=True, exist_ok=True)
    if files == "one":
        order[len(order) // 2:len(order) // 2] = [untimed]
        (d / "all.jsonl").write_text("\n".join([*order, unranked]) + "\n")
        return
    for r, ls in lines.items():
        if r == 2 and files == "split":   # one rank in two files, its steps interleaved between them
            (d / "rank_2.jsonl").write_text("\n".join(ls[0::2]) + "\n")
            (d / "rank_2_more.jsonl").write_text("\n".join(ls[1::2]) + "\n")
        else:
            (d / f"rank_{r}.jsonl").write_text("\n".join(ls + ([untimed] if r == 1 else [])) + "\n")
    (d / "launcher.jsonl").write_text(unranked + "\n")


def _cut_by_rank(run) -> bool:  # noqa: ANN001
    """Some rank has rows in more than one events part."""
    seen = run.events().select("rank", pl.col("source_file")).collect()  # noqa: F841
    per = [set(pl.read_parquet(p, columns=["rank"])["rank"].drop_nulls().to_list()) for p in run.event_parts()]
    return any(per[i] & per[j] for i in range(len(per)) for j in range(i + 1, len(per)))


@pytest.mark.parametrize("compact", [False, True])
def test_summaries_merged_from_a_big_file_cut_into_ranges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          compact: bool) -> None:
    """A big file read in several byte ranges (a unit each, a part each): (rank, step) groups and
    ranks fall on both sides of a cut; the summaries merged from the units' partials are those of
    the events. With compaction the small parts are merged at commit and their partials computed
    from the merged part."""
    import forensics.ingest as ing
    import forensics.store as store_mod

    _mixed_run(tmp_path / "logs", files="one")
    size = (tmp_path / "logs" / "all.jsonl").stat().st_size
    monkeypatch.setattr(ing, "RANGE_BYTES", size // 7)
    if not compact:
        monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)
    run = _store(tmp_path, tmp_path / "logs")
    assert len(run.event_parts()) == (1 if compact else 7) or (compact and len(run.event_parts()) < 7)
    if not compact:
        assert _cut_by_rank(run)
    _assert_stored_equal_computed(run, exact=False)
    # a partial per events part, none other
    stems = {Path(p).stem for p in run.event_parts()}
    assert {p.name.split(".")[0] for p in (run.path / S.SUMMARIES_DIR / S.PARTS_DIR).iterdir()} == stems


def test_summaries_merged_from_a_rank_split_over_units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One file per rank, one unit per file (rank 2 in two files, so in two parts): the merged
    summaries are those of the events."""
    import forensics.ingest as ing
    import forensics.store as store_mod

    _mixed_run(tmp_path / "logs", files="split")
    monkeypatch.setattr(ing, "BATCH_BYTES", 1)
    monkeypatch.setattr(ing, "BATCH_MIN", 1)
    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)
    run = _store(tmp_path, tmp_path / "logs")
    assert len(run.event_parts()) == 8 and _cut_by_rank(run)
    _assert_stored_equal_computed(run, exact=False)
    st = S.step_groups(run)
    assert st.filter(pl.col("rank") == 2)["events"].sum() == 4 * 40
    assert S.rank_table(run).filter(pl.col("rank") == 2)["in_order"].item() is False  # its two files interleave


def test_summaries_of_parts_of_disjoint_ranks_are_their_partials_linked_in_rank_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A part per rank file and one for the unranked launcher: the step groups are the parts'
    step groups files themselves (the same files, linked in rank order: nothing read or written at
    the commit), and equal the events' (exactly: no group is merged). Parts whose ranks overlap get
    one file of their merged states instead."""
    import forensics.ingest as ing
    import forensics.store as store_mod

    _mixed_run(tmp_path / "logs", files="per_rank")
    monkeypatch.setattr(ing, "BATCH_BYTES", 1)
    monkeypatch.setattr(ing, "BATCH_MIN", 1)
    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)
    run = _store(tmp_path, tmp_path / "logs")
    assert len(run.event_parts()) == 7 and not _cut_by_rank(run)
    linked = sorted(S.path_of(run, S.STEPS).iterdir())
    spans = {p["path"]: p["rank_min"] for p in run.parts if p["kind"] == "events"}
    order = sorted(spans, key=lambda rel: (spans[rel] is None, spans[rel] or 0))
    assert [f.stat().st_ino for f in linked] == [S.partial_path(run.path, rel, S.STEPS).stat().st_ino for rel in order]
    _assert_stored_equal_computed(run)
    # overlapping ranks: merged into one file
    _mixed_run(tmp_path / "split", files="split")
    split = _store(tmp_path / "s", tmp_path / "split")
    assert _cut_by_rank(split) and len(list(S.path_of(split, S.STEPS).iterdir())) == 1


def test_append_merges_the_kept_parts_partials_with_the_new_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--append keeps the store's parts and their partial summaries (the same files, linked) and
    merges them with the new parts'; the summaries are those of the events. A kept part whose
    partials are missing (a store written before them) gets them from its rows."""
    import forensics.store as store_mod

    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)   # the first store's part is kept as it is
    _mixed_run(tmp_path / "all", files="split")
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in ("rank_0.jsonl", "rank_1.jsonl", "rank_2.jsonl"):
        shutil.copy(tmp_path / "all" / f, logs / f)
    first = _store(tmp_path, logs)
    pdir = first.path / S.SUMMARIES_DIR / S.PARTS_DIR
    kept = {p.name: p.stat().st_ino for p in pdir.iterdir()}
    for f in ("rank_2_more.jsonl", "rank_3.jsonl"):
        shutil.copy(tmp_path / "all" / f, logs / f)
    second = _store(tmp_path, logs, append=True)
    assert S.key(second) != S.key(first)
    now = {p.name: p.stat().st_ino for p in (second.path / S.SUMMARIES_DIR / S.PARTS_DIR).iterdir()}
    assert {k: now[k] for k in kept} == kept and len(now) > len(kept)
    _assert_stored_equal_computed(second, exact=False)
    assert _files(second) == _all(second)
    # the kept parts' FAILURES partials missing (a store written before them): made from their
    # rows, the other partials linked
    for f in (second.path / S.SUMMARIES_DIR / S.PARTS_DIR).glob(f"*.{S.FAILURES}.arrow"):
        f.unlink()
    others = {p.name: p.stat().st_ino for p in (second.path / S.SUMMARIES_DIR / S.PARTS_DIR).iterdir()}
    shutil.copy(tmp_path / "all" / "rank_4.jsonl", logs / "rank_4.jsonl")
    second = _store(tmp_path, logs, append=True)
    now = {p.name: p.stat().st_ino for p in (second.path / S.SUMMARIES_DIR / S.PARTS_DIR).iterdir()}
    assert {k: now[k] for k in others} == others
    assert all(S.partial_path(second.path, p, S.FAILURES).is_file() for p in second.event_parts())
    _assert_stored_equal_computed(second, exact=False)
    # the kept parts' partials gone (an older store): computed from their rows on the next append
    shutil.rmtree(second.path / S.SUMMARIES_DIR)
    shutil.copy(tmp_path / "all" / "launcher.jsonl", logs / "launcher.jsonl")
    third = _store(tmp_path, logs, append=True)
    _assert_stored_equal_computed(third, exact=False)
    stems = {Path(p).stem for p in third.event_parts()}
    assert {p.name.split(".")[0] for p in (third.path / S.SUMMARIES_DIR / S.PARTS_DIR).iterdir()} == stems


def test_the_summaries_are_merged_from_the_units_partials_not_the_events(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The ingest does not read its parts back to build the summaries: the step groups and the
    per-rank table come from the partials the units wrote."""
    calls: list[str] = []
    real = S.Partial.of_part

    def spy(root, part):  # noqa: ANN001
        calls.append(str(part))
        return real(root, part)

    monkeypatch.setattr(S.Partial, "of_part", staticmethod(spy))
    for name in ("compute_step_groups", "compute_rank_table", "compute_errors", "compute_untimed", "compute_layout",
                 "compute_failures"):
        monkeypatch.setattr(S, name, lambda _run: (_ for _ in ()).throw(AssertionError("computed from the events")))
    _mixed_run(tmp_path / "logs", files="split")
    run = _store(tmp_path, tmp_path / "logs")
    assert calls == [] and _files(run) == _all(run)


def test_a_steps_folder_is_carried_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link that fails half-way through carrying the STEPS folder (a full disk, a file system
    without hard links) leaves no folder at all in the next version (a part of one would be read
    as the whole run), nor a temp folder; the other summaries are carried."""
    import forensics.ingest as ing
    import forensics.store as store_mod

    _mixed_run(tmp_path / "logs", files="per_rank")
    monkeypatch.setattr(ing, "BATCH_BYTES", 1)
    monkeypatch.setattr(ing, "BATCH_MIN", 1)
    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)
    run = _store(tmp_path, tmp_path / "logs")
    steps = S.path_of(run, S.STEPS)
    assert len(list(steps.iterdir())) > 2
    real, calls = os.link, []

    def link(src, dst):  # noqa: ANN001
        if Path(src).parent == steps:
            calls.append(src)
            if len(calls) == 2:
                raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(S.os, "link", link)
    staging = tmp_path / "staging"
    staging.mkdir()
    S.carry(run, staging)
    assert len(calls) == 2
    carried = sorted(p.name for p in (staging / S.SUMMARIES_DIR).iterdir())
    assert steps.name not in carried and not [n for n in carried if n.startswith(".")]
    assert S.path_of(run, S.RANKS).name in carried


def _as_version_2(root: Path, rel: str) -> None:
    """Make the STEPS partial of the part `rel` as a store of SUMMARY_VERSION 2 kept it: the
    (rank, step) states in an Arrow IPC file, the step groups in a Parquet file of their own."""
    steps = S.partial_path(root, rel, S.STEPS)
    S._read_states(steps).write_ipc(S._legacy_states(root, rel), compression="zstd")
    pl.read_parquet(steps, columns=S._step_columns()[1]).write_parquet(steps.with_name(f"{Path(rel).stem}.groups.parquet"))
    steps.unlink()


def test_step_groups_missing_from_a_store_are_made_from_what_it_has(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose parts lack their STEPS partials (SUMMARY_VERSION 2 kept the states in a file
    of their own) gets them made from the parts' states, without reading the parts; a part without
    its states either gets those alone from its narrow columns (its other partials are kept as
    they are), or every partial when another is missing too. The step groups are the events'."""
    import forensics.ingest as ing
    import forensics.store as store_mod
    from polars.testing import assert_frame_equal

    _mixed_run(tmp_path / "logs", files="per_rank")
    monkeypatch.setattr(ing, "BATCH_BYTES", 1)
    monkeypatch.setattr(ing, "BATCH_MIN", 1)
    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)
    run = _store(tmp_path, tmp_path / "logs")
    rels = sorted(p["path"] for p in run.parts if p["kind"] == "events")
    assert len(rels) > 3
    shutil.rmtree(S.path_of(run, S.STEPS))
    for rel in rels:
        _as_version_2(run.path, rel)
    for rel in rels[:2]:   # these two have no states either; the first no rank table
        S._legacy_states(run.path, rel).unlink()
    S.partial_path(run.path, rels[0], S.RANKS).unlink()
    pdir = run.path / S.SUMMARIES_DIR / S.PARTS_DIR
    before = {p.name: p.stat().st_ino for p in pdir.iterdir()}
    calls: list[tuple[str, bool]] = []
    real = S.Partial.of_part

    def spy(root, part, steps_only=False):  # noqa: ANN001
        calls.append((part, steps_only))
        return real(root, part, steps_only)

    monkeypatch.setattr(S.Partial, "of_part", staticmethod(spy))
    assert_frame_equal(S.step_groups(run), S.compute_step_groups(run))
    assert sorted(calls) == [(rels[0], False), (rels[1], True)]
    now = {p.name: p.stat().st_ino for p in pdir.iterdir()}
    stem = Path(rels[0]).stem
    assert {k: now[k] for k in before if not k.startswith(stem)} == {k: v for k, v in before.items()
                                                                   if not k.startswith(stem)}
    assert all(S.partial_path(run.path, rel, n).is_file() for rel in rels for n in S.PARTIALS)


def test_an_append_onto_a_store_of_summary_version_2_makes_its_steps_partials_from_its_states(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--append onto a store whose parts keep their (rank, step) states apart (SUMMARY_VERSION 2):
    the kept parts' other partials are linked and their STEPS partials made from their states,
    none read from its rows; the summaries are the events'."""
    import forensics.store as store_mod

    monkeypatch.setattr(store_mod, "COMPACT_ROWS", 1)   # the first store's part is kept as it is
    _mixed_run(tmp_path / "all", files="split")
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in ("rank_0.jsonl", "rank_1.jsonl"):
        shutil.copy(tmp_path / "all" / f, logs / f)
    first = _store(tmp_path, logs)
    kept = [p["path"] for p in first.parts if p["kind"] == "events"]
    for rel in kept:
        _as_version_2(first.path, rel)
    calls: list[str] = []
    real = S.Partial.of_part
    monkeypatch.setattr(S.Partial, "of_part", staticmethod(lambda root, part, *a: calls.append(part) or real(root, part, *a)))
    shutil.copy(tmp_path / "all" / "rank_3.jsonl", logs / "rank_3.jsonl")
    second = _store(tmp_path, logs, append=True)
    assert calls == [] and set(kept) <= {p["path"] for p in second.parts}
    assert all(S.partial_path(second.path, rel, S.STEPS).is_file() for rel in kept)
    _assert_stored_equal_computed(second, exact=False)


@pytest.mark.parametrize("seed", range(6))
def test_ranked_step_groups_read_in_batches_are_the_ranked_rows_of_the_step_groups(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """The step table's groups read from the summary a few columns at a time (READ_BATCH) are
    `ranked_rows` of the whole read: the same rows (unranked and unstepped groups left out), in one
    chunk per column, whatever columns are asked for in whatever order; and computed the same way
    when the store has no summary."""
    import random

    from forensics.timeline.steps import ranked_rows

    rnd = random.Random(seed)
    _mixed_run(tmp_path / "logs", ranks=rnd.randint(2, 7), steps=rnd.randint(3, 30),
               files=rnd.choice(["one", "split"]))
    if seed % 3 == 0:   # no summary stored: computed in memory
        monkeypatch.setenv("FORENSICS_SUMMARIES", "0")
    run = _store(tmp_path, tmp_path / "logs")
    monkeypatch.setattr(S, "READ_BATCH", rnd.randint(1, 5))
    cols = rnd.sample(C.GROUP_COLUMNS, rnd.randint(2, len(C.GROUP_COLUMNS)))
    got = S.ranked_step_groups(run, cols)
    want = ranked_rows(S.step_groups(run, [*cols, *(c for c in ("rank", "step") if c not in cols)])).select(cols)
    assert got.equals(want)
    assert got.height < S.step_groups(run).height     # an unranked and an untimed event's groups left out
    assert all(c.n_chunks() == 1 for c in got.get_columns())


def test_the_ranked_step_groups_are_the_same_taken_by_runs_or_by_one_filter(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary with many runs of ranked rows (an unstepped row per rank) is taken by one filter:
    the same rows, in one chunk per column, as slicing it run by run."""
    run = _store(tmp_path, REPO / "sample_logs" / "oom_cascade")
    keep = S._scan(S.path_of(run, S.STEPS)).select(pl.col("rank").is_not_null() & pl.col("step").is_not_null()).collect()
    assert not keep.to_series().all()     # the summary has unranked or unstepped rows to leave out
    got = {}
    for most in (10**9, 0):
        monkeypatch.setattr(S, "RUN_SLICES_MAX", most)
        got[most] = S.ranked_step_groups(run, C.GROUP_COLUMNS)
        assert all(c.n_chunks() == 1 for c in got[most].get_columns())
    assert got[0].height > 0 and got[0].equals(got[10**9])
    assert got[0].select(pl.col("rank").is_null().any() | pl.col("step").is_null().any()).item() is False
