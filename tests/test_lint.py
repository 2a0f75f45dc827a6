"""`forensics lint`: the seed's review checklist, one check per question, on clean and faulty logs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

import forensics
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_run import make_store  # noqa: E402

from forensics.cli import app  # noqa: E402
from forensics.lint import lint  # noqa: E402
from forensics.passes import hygiene  # noqa: E402
from forensics.passes.context import Context  # noqa: E402
from forensics.store import open_store  # noqa: E402

IDS = ["rank_field", "event_field", "rank_filter", "comm_ratio", "error_flood", "sampling", "hot_path_traces",
       "joint_alerts", "retention"]


def checks(store: Path) -> dict:
    return {c.id: c for c in lint(open_store(store)).checks}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    # Well-logged (rank 5 still overheats: lint judges the logs, not the run). GPU stats every 10
    # steps of ~0.26-0.38 s = every 2.6 s or more (11 samples per rank): within the seed's >= 2 s
    return make_store(tmp_path_factory.mktemp("clean"), steps=110, gpu_every=10, hostile=False)


def test_clean_logs_pass_and_unknowable_questions_say_so(clean: Path) -> None:
    c = checks(clean)
    assert list(c) == IDS
    assert {k for k, v in c.items() if v.status == "pass"} == set(IDS) - {"joint_alerts", "retention"}
    assert c["joint_alerts"].status == "n/a" and "not checkable from logs" in c["joint_alerts"].summary
    assert c["retention"].status == "n/a" and "72 h" in c["retention"].summary
    assert c["rank_field"].numbers == {"lines": 3608, "with_rank": 3608, "rank_from_path_or_prefix": 0, "no_rank": 0}
    assert c["comm_ratio"].numbers["with_both"] == 880 and 0.3 < c["comm_ratio"].numbers["median_share"] < 0.45
    assert 2.0 <= c["sampling"].numbers["median_interval_s"] < 4.0


def test_missing_rank_fails_and_cites_the_line(tmp_path: Path) -> None:
    c = checks(make_store(tmp_path, no_rank_file=True, hostile=False, gpu_every=10))
    assert c["rank_field"].status == "fail" and c["rank_field"].numbers["no_rank"] == 20
    ex = c["rank_field"].examples[0]
    assert ex.source_file.endswith("launcher.jsonl") and ex.line == 1


def test_flat_lines_have_no_event_and_rank_from_path(tmp_path: Path) -> None:
    c = checks(make_store(tmp_path, flat_file=True, hostile=False, gpu_every=10))
    assert c["event_field"].status == "warn" and c["event_field"].numbers["without_event"] == 30
    assert c["event_field"].examples[0].source_file.endswith("rank_0_trainer.jsonl")
    assert c["rank_field"].status == "warn" and c["rank_field"].numbers["rank_from_path_or_prefix"] == 30


def test_a_rank_id_on_two_hosts_cannot_name_one_card(tmp_path: Path) -> None:
    c = checks(make_store(tmp_path, dup_rank_host=True, hostile=False, gpu_every=10))
    assert c["rank_filter"].status == "fail" and c["rank_filter"].numbers["ranks_on_several_hosts"] == [0]


def test_error_flood_agrees_with_the_hygiene_pass(tmp_path: Path) -> None:
    st = make_store(tmp_path, flood=300, hostile=False, gpu_every=10)
    c = checks(st)
    found = [f for f in hygiene.find(Context.from_run(open_store(st))) if f.evidence.get("check") == "error_flood"]
    assert found and c["error_flood"].status == "warn" and c["error_flood"].summary == found[0].title
    assert c["error_flood"].numbers["errors"] == 300 and c["error_flood"].numbers["warns"] == 1


def test_fast_sampling_agrees_with_the_hygiene_pass(tmp_path: Path) -> None:
    st = make_store(tmp_path, gpu_every=2, hostile=False)
    c = checks(st)
    found = [f for f in hygiene.find(Context.from_run(open_store(st))) if f.evidence.get("check") == "sampling_interval"]
    assert found and c["sampling"].status == "warn"
    assert c["sampling"].numbers["median_interval_s"] < 1.0


def test_tracebacks_every_step_fail(tmp_path: Path) -> None:
    c = checks(make_store(tmp_path, tracebacks=True, hostile=False, gpu_every=10))
    h = c["hot_path_traces"]
    assert h.status == "fail" and h.numbers["tracebacks"] == 60 and h.numbers["per_step"] == 1.0
    assert h.examples[0].source_file.endswith("rank_0.jsonl")


def test_logs_that_begin_mid_run_lost_their_start(tmp_path: Path) -> None:
    c = checks(make_store(tmp_path, first_step=500, hostile=False, gpu_every=10))
    assert c["retention"].status == "warn" and c["retention"].numbers["first_step"] == 500


def test_no_comm_ms_fails_the_ratio(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    rows = [{"timestamp": f"2025-06-12T14:00:{s:02d}Z", "rank": r, "level": "INFO", "event": "TRAIN_STEP",
             "message": f"step={s}", "extra": {"step": s, "step_time_ms": 250.0, "loss": 2.0}} for s in range(20) for r in (0, 1)]
    (logs / "all.jsonl").write_text("\n".join(json.dumps(x) for x in rows) + "\n")
    from forensics.ingest import ingest

    ingest([str(logs)], tmp_path / "s.forensics")
    c = checks(tmp_path / "s.forensics")
    assert c["comm_ratio"].status == "fail" and "comm_ms is never logged" in c["comm_ratio"].summary
    assert c["sampling"].status == "warn" and "no GPU/resource metrics" in c["sampling"].summary


def test_cli_formats_and_exit_codes(clean: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["lint", str(clean), "--format", "json", "--fail-on", "WARN"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["worst"] == "n/a" and [c["id"] for c in d["checks"]] == IDS
    r = CliRunner().invoke(app, ["lint", str(clean)])
    assert r.exit_code == 0 and "PASS  rank_field" in r.stdout and "9 checks:" in r.stdout
    bad = make_store(tmp_path, gpu_every=2, hostile=False)            # one warn
    assert CliRunner().invoke(app, ["lint", str(bad), "--fail-on", "warn"]).exit_code == 3
    assert CliRunner().invoke(app, ["lint", str(bad), "--fail-on", "FAIL"]).exit_code == 0
    assert CliRunner().invoke(app, ["lint", str(bad)]).exit_code == 0


def test_a_multi_rank_telemetry_tables_header_is_no_rankless_event(tmp_path: Path) -> None:
    # a job's own GPU table with a rank column: every row its rank's, the header line none (the
    # file's structure, TELEMETRY_HEADER) -- counted as read, never as an event that misses a rank
    rows = ["timestamp,rank,host,gpu,gpu_util,temp_c,sm_clock_mhz"]
    rows += [f"2024-12-05T11:24:{2 * s:02d}.000Z,{r},gpu-a7,{r},97,70,1980" for s in range(20) for r in range(4)]
    (tmp_path / "gpu_telemetry.csv").write_text("\n".join(rows) + "\n")
    s = forensics.ingest([str(tmp_path / "gpu_telemetry.csv")], tmp_path / "st")
    assert s.rejected == 0 and s.ranks == [0, 1, 2, 3]
    df = open_store(tmp_path / "st").events().collect()
    assert df.filter(pl.col("event") == "GPU_STATS").group_by("rank").len().sort("rank")["len"].to_list() == [20] * 4
    c = checks(tmp_path / "st")
    assert c["rank_filter"].status == "pass" and c["rank_filter"].numbers["events_without_rank"] == 0


def test_a_loopback_name_beside_the_host_is_no_second_card(tmp_path: Path) -> None:
    # rank 1's lines name gpu-a7 (NCCL) and localhost (torch elastic's record on a machine whose
    # name maps to 127.0.0.1): one card
    (tmp_path / "a.log").write_text("[rank1]:gpu-a7:4412:4412 [1] NCCL INFO Bootstrap : Using eth0:10.1.2.7<0>\n"
                                    "[rank1]:step 10 loss 2.30\n")
    (tmp_path / "b.log").write_text("localhost: [rank1]: step 11 loss 2.29\n")
    forensics.ingest([str(tmp_path)], tmp_path / "st")
    df = open_store(tmp_path / "st").events().collect()
    assert set(df.filter(pl.col("rank") == 1)["host"].drop_nulls().to_list()) == {"gpu-a7", "localhost"}
    assert checks(tmp_path / "st")["rank_filter"].status != "fail"
