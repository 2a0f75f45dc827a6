"""The Flight Recorder table (forensics.fr_table, `forensics fr-table`): missing ranks, first
mismatch, bad dumps listed and never fatal; JSON and CSV forms; the table in `diagnose`.

Expected values come from the reference outputs next to the shared dumps (PyTorch's analyser
output, reference_output.txt) or from the fault each generated set is built with (tests/fr_dumps.py
writes dumps in the recorder's format), never from a previous run of forensics.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics import fr_table
from forensics.cli import app
from forensics.render.fr_table import csv_rows, text_block

from fr_dumps import make_dumps, write_set
from test_realdata_diagnosis import reference   # reference_output.txt rows, read one way for all tests

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "flight_recorder"
runner = CliRunner()


@pytest.mark.parametrize("case", ["gpu_error_1st", "lock_gil_1st"])
def test_shared_dumps_name_the_reference_missing_ranks_and_first_mismatch(case: str) -> None:
    d = REAL / case
    if not d.is_dir():
        pytest.skip(f"realdata absent: {d}")
    table = fr_table.build([str(p) for p in sorted(d.glob("_dump_*"))])
    [ref] = reference(d)
    line = table.first[ref["pg"]]                     # the group the reference names: its first mismatch
    lead = line.lead()
    assert (line.problem, line.missing, line.odd) == ("missing", ref["missing"], ref["missing"])
    assert (lead.op, fr_table.fmt_sizes(lead.input_sizes), lead.input_dtypes[0], line.desc) == (
        ref["op"], ref["size"], ref["dtype"], ref["desc"])
    # ... and it is where the job stopped first (created earliest of the groups' first mismatches)
    assert table.first_stalled() is line
    assert lead.file.endswith(f"_dump_{lead.rank}") and lead.entry >= 1
    # lock_gil_1st: ranks 9 and 14 dumped no entries at all; they are listed, not dropped
    empty = sorted(x.rank for x in table.dumps if x.status == "no_entries")
    assert empty == ([9, 14] if case == "lock_gil_1st" else [])


def _set(tmp: Path, **kw) -> fr_table.FrTable:
    io_kw = {k: kw.pop(k) for k in ("no_dump", "empty", "corrupt", "fmt") if k in kw}
    write_set(tmp, make_dumps(**kw), **io_kw)
    return fr_table.build([str(tmp)])


def test_missing_empty_and_corrupt_dumps_still_give_a_table_listing_them(tmp_path: Path) -> None:
    t = _set(tmp_path, world=8, n=12, behind={3: 1}, no_dump={7}, empty={6}, corrupt={5})
    status = {d.rank: d.status for d in t.dumps}
    assert (status[5], status[6], 7 in status) == ("corrupt", "empty", False)
    assert t.no_dump == [5, 6, 7]
    line = t.first["0"]
    assert (line.seq, line.problem, line.missing, line.no_dump) == (12, "missing", [3], [5, 6, 7])
    assert all(d.host == "node-00" for d in t.dumps)            # the folder names the host
    said = " ".join(fr_table.dumps_summary(t))
    assert "no dump from rank 7" in said and "empty: rank 6" in said and "corrupt: rank 5" in said


def test_only_bad_dumps_is_a_table_not_an_error(tmp_path: Path) -> None:
    for r in range(3):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(b"" if r else b"\x80\x04garbage")
    t = fr_table.build([str(tmp_path)])
    assert [d.status for d in t.dumps] == ["corrupt", "empty", "empty"] and t.lines == []


@pytest.mark.parametrize("fault, kind", [
    ({"behind": {3: 2}}, "missing"),       # rank 3 stopped two collectives early
    ({"ahead": {5: 1}}, "ahead"),          # rank 5 issued one more than everybody else
    ({"swap_op": {2: 5}}, "op"),           # rank 2 issued another op at #5
    ({"swap_dtype": {6: 7}}, "dtype"),     # rank 6 sent Half at #7
    ({"swap_size": {1: 4}}, "size"),       # rank 1 sent a smaller tensor at #4
])
def test_a_desync_names_the_odd_rank(tmp_path: Path, fault: dict, kind: str) -> None:
    t = _set(tmp_path, world=8, n=12, **fault)
    [(rank, value)] = next(iter(fault.values())).items()
    line = t.first["0"]
    assert line.problem == kind and line.odd == [rank]
    if kind in ("op", "dtype", "size"):
        assert line.seq == value and not line.missing
    assert f"rank {rank}" in (line.detail or "") or f"rank {rank} " in line.detail + " "
    assert t.first_stalled() is line


def test_a_healthy_set_has_no_mismatch_and_json_dumps_read(tmp_path: Path) -> None:
    t = _set(tmp_path, world=8, n=12, fmt="json")
    assert t.first == {} and t.lines and all(not ln.missing for ln in t.lines)
    assert all(d.status == "ok" for d in t.dumps)


def test_a_rolled_ring_buffer_is_unrecorded_not_missing(tmp_path: Path) -> None:
    # rank 0 is one behind with a 5-entry buffer: older numbers are simply gone from every buffer
    t = _set(tmp_path, world=4, n=12, behind={0: 1}, buffer=5)
    assert [ln.seq for ln in t.lines if ln.missing and not ln.p2p and ln.pg == "0"] == [12]


def test_cli_json_and_csv_parse(tmp_path: Path) -> None:
    write_set(tmp_path, make_dumps(8, 12, behind={3: 1}), empty={6})
    r = runner.invoke(app, ["fr-table", str(tmp_path), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["first_mismatch"]["0"]["missing"] == [3] and doc["no_dump"] == [6]
    assert {d["status"] for d in doc["dumps"]} == {"ok", "empty"}
    r = runner.invoke(app, ["fr-table", str(tmp_path), "--format", "csv", "--all", "--pg", "0"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert {x["pg"] for x in rows} == {"0"} and len({x["seq"] for x in rows}) == 12
    gone = [x for x in rows if x["seq"] == "12" and x["state"] in ("missing", "no dump")]
    assert sorted((int(x["rank"]), x["state"]) for x in gone) == [(3, "missing"), (6, "no dump")]
    assert all(x["file"].endswith(f"nccl_trace_rank_{x['rank']}") for x in rows if x["state"] not in ("missing", "no dump"))


def test_cli_table_fits_80_columns_and_names_bad_dumps(tmp_path: Path) -> None:
    write_set(tmp_path, make_dumps(8, 12, swap_dtype={6: 7}), corrupt={2})
    r = runner.invoke(app, ["fr-table", str(tmp_path)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines if "│" in x) <= 80
    assert any("odd" in x and " 6 " in x + " " for x in lines)
    assert any(x.startswith("corrupt: rank 2") for x in lines)


def test_cli_no_dump_among_the_paths_is_an_error_block(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    r = runner.invoke(app, ["fr-table", str(tmp_path / "notes.txt")])
    assert r.exit_code == 1 and "no Flight Recorder dumps" in str(r.exception or r.output)


def test_diagnose_shows_the_table_and_cites_the_first_mismatch(tmp_path: Path) -> None:
    from forensics.passes import diagnose
    from forensics.report import render

    write_set(tmp_path / "dumps", make_dumps(8, 12, behind={3: 1}), no_dump={7})
    report = diagnose([str(tmp_path / "dumps")])
    f = next(f for f in report.findings if "flight_recorder" in f.evidence)
    assert f.ranks == [3]
    first = f.evidence["flight_recorder"]["first_mismatch"]
    assert (first["pg"], first["seq"], first["missing"]) == ("0", 12, [3])
    assert f.lines[0].source_file.endswith("nccl_trace_rank_0") and f.lines[0].line >= 1
    text = render(report, "text", width=100)
    assert "Flight Recorder (forensics fr-table)" in text and "no dump from rank 7" in text
    assert "## Flight Recorder" in render(report, "md")


def test_diagnose_reports_a_dtype_desync_only_the_table_sees(tmp_path: Path) -> None:
    # all ranks reach the same number, one sent another dtype: the store-based rule sees no hang
    from forensics.passes import diagnose

    write_set(tmp_path / "dumps", make_dumps(4, 12, behind={}, swap_dtype={1: 12}))
    report = diagnose([str(tmp_path / "dumps")])
    f = next(f for f in report.findings if "flight_recorder" in f.evidence)
    assert f.ranks == [1] and "dtype" in f.title


def test_text_block_is_plain_and_bounded(tmp_path: Path) -> None:
    t = _set(tmp_path, world=8, n=40, behind={2: 30})
    block = text_block(t, width=80, limit=5)
    assert "more line(s): forensics fr-table" in block and max(len(x) for x in block.splitlines()) <= 80
    assert len(csv_rows(t, t.lines)) >= 8 * 40


def test_readme_example_is_what_the_command_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = (Path(__file__).resolve().parents[1] / "docs" / "fr-table.md").read_text()
    block = readme.split("    $ COLUMNS=80 forensics fr-table frdemo\n", 1)[1].split("\n\n", 1)[0]
    shown = [x[4:].rstrip() for x in block.splitlines()]
    monkeypatch.chdir(tmp_path)
    write_set(Path("frdemo"), make_dumps(8, 12, behind={3: 1}, swap_dtype={5: 11}), per_host=4, empty={6}, corrupt={2})
    r = runner.invoke(app, ["fr-table", "frdemo"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert [x.rstrip() for x in r.stdout.splitlines()] == shown


def test_cli_a_group_without_problems_says_so(tmp_path: Path) -> None:
    write_set(tmp_path, make_dumps(8, 12, behind={3: 1}))
    r = runner.invoke(app, ["fr-table", str(tmp_path), "--pg", "TENSOR_MODEL_PARALLEL_GROUP"])
    assert r.exit_code == 0 and "no mismatch in the lines selected" in r.stdout
    assert "first mismatch (earliest created): pg 0" in r.stdout     # the whole set's, still said


@pytest.mark.parametrize("case", ["gpu_error_1st", "lock_gil_1st"])
def test_html_report_of_a_dump_set_renders(case: str, tmp_path: Path) -> None:
    # a dump's status events (PG_STATUS) carry no time of their own; the snapshot plot drew
    # every event at its timestamp and raised on them

    d = REAL / case
    if not d.is_dir():
        pytest.skip(f"realdata absent: {d}")
    out = tmp_path / "report.html"
    res = runner.invoke(app, ["diagnose", str(d), "-f", "html", "-o", str(out)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    html = out.read_text()
    assert html.lower().startswith("<!doctype html>") and html.rstrip().endswith("</html>")


def _waits_in_11(**kw) -> dict:
    """Every rank issued #11 of the world group and nobody completed it; rank 6 stopped there while
    the others went on to enqueue #12 (NCCL enqueues asynchronously)."""
    dumps = make_dumps(8, 12, behind={6: 1}, **kw)
    for d in dumps.values():
        for e in d["entries"]:
            if e["process_group"][0] == "0" and e["collective_seq_id"] == 11:
                e["state"], e["retired"], e["time_discovered_completed_ns"] = "scheduled", False, None
        d["pg_status"]["0"]["last_completed_collective"] = 10
    return dumps


def test_a_rank_that_issued_the_first_pending_collective_waits_in_it_not_missing(tmp_path: Path) -> None:
    """The group is stuck in its first pending collective; who never issued it is missing, who issued
    it and stopped (not issuing the later ones the others enqueued) waits in it. The old rule,
    everyone below the highest number, named rank 6 too."""
    # rank 3 never issued #11 (the first pending), rank 6 issued it and stopped
    write_set(tmp_path / "a", make_dumps(8, 12, behind={3: 2, 6: 1}))
    t = fr_table.build([str(tmp_path / "a")])
    at = {ln.seq: ln for ln in t.lines if ln.pg == "0" and not ln.p2p}
    assert (at[11].missing, at[11].waiting) == ([3], [])
    assert (at[12].missing, at[12].waiting) == ([3], [6]) and at[12].odd == [3]
    assert t.first["0"] is at[11] and t.first_stalled() is at[11]
    res = runner.invoke(app, ["fr-table", str(tmp_path / "a"), "--format", "json"])
    assert res.exit_code == 0, res.output
    j = {ln["seq"]: ln for ln in json.loads(res.output)["lines"] if ln["pg"] == "0" and not ln["p2p"]}
    assert (j[12]["missing"], j[12]["waiting"]) == ([3], [6])
    # every rank issued #11, rank 6 stopped there: nobody is missing, no group has a first mismatch
    write_set(tmp_path / "b", _waits_in_11())
    t = fr_table.build([str(tmp_path / "b")])
    at = {ln.seq: ln for ln in t.lines if ln.pg == "0" and not ln.p2p}
    assert (at[12].missing, at[12].waiting, at[12].problem) == ([], [6], None)
    assert "0" not in t.first and t.first_stalled() is None


def test_diagnose_names_who_never_issued_the_first_pending_collective_not_who_stopped_after(tmp_path: Path) -> None:
    """The pass stuck_collective, fr-table and missing_ranks apply one rule (flight_recorder.stuck_at)."""
    from forensics.ingest.flight_recorder import missing_ranks
    from forensics.passes import diagnose

    dumps = make_dumps(8, 12, behind={3: 2, 6: 1})
    write_set(tmp_path / "a", dumps)
    [f] = [f for f in diagnose([str(tmp_path / "a")]).findings if f.rule == "pass.stuck_collective"]
    assert f.ranks == [3] and 6 in f.victims
    assert f.evidence["groups"]["0"] == {"missing": [3], "seq": 11}
    assert f.evidence["flight_recorder"]["first_mismatch"]["missing"] == [3]
    assert missing_ranks(dumps) == {"0": [3]}
    # rank 6 issued the collective everybody waits in: not the culprit (the table's old rule named it)
    dumps = _waits_in_11()
    write_set(tmp_path / "b", dumps)
    report = diagnose([str(tmp_path / "b")])
    assert not [f for f in report.findings if f.rule == "pass.stuck_collective"]
    assert not any(6 in f.ranks and f.kind == "hang" for f in report.findings)
    assert missing_ranks(dumps) == {}
