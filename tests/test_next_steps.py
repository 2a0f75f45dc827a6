"""What to do next (rules/next_steps.toml, forensics.rules.next_steps): a sentence for every kind,
validated like a rule file, filled from the finding, and shown under the root cause in every format."""
from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import forensics.rules as rules_mod
from forensics.cli import app
from forensics.report import render
from forensics.report.model import KINDS, Evidence, Finding, RootCause
from forensics.rules import check_rules, load_next_steps, load_rules
from forensics.rules.next_steps import attach_next, fill
from forensics.rules.spec import NEXT_PLACEHOLDERS, next_step_error, parse_next_steps

REPO = Path(__file__).resolve().parents[1]
STEPS_FILE = REPO / "rules" / "next_steps.toml"
SAMPLES = REPO / "sample_logs"


def test_every_kind_has_exactly_one_valid_next_step() -> None:
    steps, errors = parse_next_steps(STEPS_FILE)
    assert errors == []
    assert sorted(steps) == sorted(KINDS)
    for kind, text in steps.items():
        assert next_step_error(text) is None, kind
        assert text.rstrip().endswith("."), kind          # one sentence


@pytest.mark.parametrize("text, why", [
    ("", "non-empty"),
    (3, "non-empty string"),
    ("line one\nline two.", "one line"),
    ("Inspect {gpu_nr} on {host}.", "unknown placeholder {gpu_nr}"),
    ("Inspect {host.", "cannot read"),
])
def test_bad_sentences_are_rejected(text: object, why: str) -> None:
    assert why in (next_step_error(text) or "")


def test_next_steps_file_errors_name_file_and_key(tmp_path: Path) -> None:
    f = tmp_path / "next_steps.toml"
    f.write_text('thermal = "x."\nhang = "Dump {pidd}."\n')
    steps, errors = parse_next_steps(f, "next_steps.toml")
    assert steps == {}
    assert [str(e) for e in errors] == [
        "next_steps.toml:thermal: 'thermal' is not a kind of the vocabulary (forensics/report/model.py KINDS)",
        f"next_steps.toml:hang: unknown placeholder {{pidd}} (allowed: {', '.join('{' + p + '}' for p in NEXT_PLACEHOLDERS)})",
    ]


def test_rules_check_fails_when_a_kind_has_no_next_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_rules() == []
    copy = tmp_path / "rules"
    shutil.copytree(REPO / "rules", copy)
    doc = tomllib.loads(STEPS_FILE.read_text())
    (copy / "next_steps.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in doc.items() if k != "gpu_error"))
    monkeypatch.setattr(rules_mod, "builtin_rules_dir", lambda: copy)
    errors = [str(e) for e in check_rules()]
    assert len(errors) == 1 and errors[0].endswith("next_steps.toml:gpu_error: no next step for this kind (every kind of the vocabulary needs one)")
    r = CliRunner().invoke(app, ["rules", "check"])
    assert r.exit_code == 1 and "gpu_error" in r.stdout


def test_a_rule_file_may_say_something_more_specific(tmp_path: Path) -> None:
    d = tmp_path / "mine" / "gpu"
    d.mkdir(parents=True)
    text = (REPO / "rules" / "gpu" / "thermal_throttling.toml").read_text()
    head, rest = text.split("\n[params]", 1)
    (d / "thermal_throttling.toml").write_text(head + '\nnext = "Page the {host} on-call about {gpu}."\n\n[params]' + rest)
    rule = {r.id: r for r in load_rules([REPO / "rules", tmp_path / "mine"])}["thermal_throttling"]
    assert rule.next == "Page the {host} on-call about {gpu}."
    (d / "thermal_throttling.toml").write_text(head + '\nnext = "Page {hots}."\n\n[params]' + rest)
    errors = [str(e) for e in check_rules([tmp_path / "mine"])]
    assert any(e.endswith("thermal_throttling.toml:next: unknown placeholder {hots} (allowed: "
                          + ", ".join("{" + p + "}" for p in NEXT_PLACEHOLDERS) + ")") for e in errors), errors


def _events() -> pl.LazyFrame:
    return pl.LazyFrame({
        "rank": [6, 6, 6, 2], "timestamp": [1, 2, 3, 1], "host": [None, "node1", "node1", "node0"],
        "local_rank": [None, 2, 2, 2], "path": ["/data/shard-0006.bin", None, "/data/shard-0106.bin", None],
        "collective": [None, "allreduce", None, None], "seq": [None, 40, 41, None],
    })


def test_placeholders_are_filled_from_the_finding_and_its_rank() -> None:
    f = Finding("pass.data_load_skew", "data_load_skew", "resource", "WARN", [6], "slow data", evidence={"first_step": 12},
                lines=[Evidence("/abs/logs/rank_6.jsonl", 40, 6)])
    attach_next([f], None, _events(), {"data_load_skew": "Check {path} of {rank} on {host} ({gpu}), seq {seq} in "
                                                         "{collective} at step {step}, {where}, rank id {rank_id}, pid {pid}."})
    assert f.next == ("Check /data/shard-0106.bin of rank 6 on node1 (GPU 2 (rank 6)), seq 41 in allreduce at step 12, "
                      "/abs/logs/rank_6.jsonl:40, rank id 6, pid PID.")


def test_every_sentence_reads_without_gaps_when_the_logs_say_nothing() -> None:
    steps = load_next_steps()
    empty = pl.LazyFrame(schema={"rank": pl.Int32, "timestamp": pl.Int64})
    for kind, template in steps.items():
        for ranks in ([], [3], [1, 2, 3, 7]):
            f = Finding("r", kind, "physical", "WARN", ranks, "t")
            attach_next([f], None, empty, steps)
            text = f.next or ""
            assert text and text[0].isupper(), kind
            assert not re.search(r"\{|\}|None|\bnan\b", text), (kind, text)
            assert "the host of" not in text, (kind, text)      # an unknown host is never made a location
            if ranks and "{rank}" in template:
                assert "rank 3" in text.lower() or "rank 1" in text.lower()


def test_root_cause_takes_its_finding_sentence_or_its_kind() -> None:
    f = Finding("pass.hang", "hang", "communication", "ERROR", [2], "rank 2 hangs", evidence={"pid": 4242})
    rc = RootCause("hang", "communication", [2], "rank 2 hangs", finding=0)
    attach_next([f], rc, _events(), load_next_steps())
    assert rc.next == f.next and "py-spy dump --pid 4242" in (rc.next or "") and "rank 2 on node0" in (rc.next or "")
    orphan = RootCause("gpu_error", "physical", [6], "Xid 79 on rank 6")
    attach_next([], orphan, _events(), load_next_steps())
    assert (orphan.next or "").startswith("Drain node1 and inspect GPU 2 (rank 6)")


@pytest.mark.parametrize("sample, must", [
    ("thermal_throttling", ["On node1, inspect the GPU of rank 6", "Clocks Event Reasons", "Clocks Throttle Reasons"]),
    ("hang", ["py-spy dump --pid", "of rank 2", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT=1"]),
    ("data_load_skew", ["Check the data rank 5 reads on node1", "iostat -x"]),
])
def test_next_is_shown_under_the_root_cause_in_every_format(sample: str, must: list[str]) -> None:
    r = CliRunner().invoke(app, ["diagnose", str(SAMPLES / sample), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    nxt = d["root_cause"]["next"]
    for m in must:
        assert m in nxt, (m, nxt)
    assert all(f["next"] for f in d["findings"])
    from forensics.passes import diagnose

    report = diagnose(SAMPLES / sample)
    text = render(report, "text", width=200)
    assert "\nNext   " + report.root_cause.next[:60] in text   # type: ignore[union-attr]
    md = render(report, "md")
    assert "## Next\n\n" + report.root_cause.next in md        # type: ignore[union-attr]
    html = render(report, "html")
    assert '<p class="next"><b>Next:</b> ' in html and html.count('<div class="next">next: ') >= 1


# -- next steps from the facts the finding holds (issue 28 item 4) --------------------------------

def _one(kind: str, **kw) -> Finding:
    f = Finding("r", kind, "resource", "ERROR", kw.pop("ranks", [0]), "t", **kw)
    attach_next([f], None, pl.LazyFrame(schema={"rank": pl.Int32, "timestamp": pl.Int64}), load_next_steps())
    return f


def test_an_oom_on_a_shared_gpu_names_the_other_processes_not_the_peers() -> None:
    shared = {"shared_gpu": True, "other_processes": 2, "failing_pid": 10, "device": 0,
              "listed_processes": [{"pid": 10, "mb": 9000.0}, {"pid": 11, "mb": 20380.0}, {"pid": 12, "mb": 512.0}]}
    f = _one("oom", evidence=shared, lines=[Evidence("/l/train.log", 185, 0)])
    assert "2 other processes (pid 11 (19.9 GiB), pid 12 (512 MiB)) held memory on GPU 0 (rank 0)" in f.next
    assert "pid 10" not in f.next and "peers'" not in f.next and "host" not in f.next
    alone = _one("oom", evidence={"shared_gpu": False}, lines=[Evidence("/l/train.log", 185, 0)])
    assert "against its peers'" in alone.next and "other processes" not in alone.next


def test_a_known_host_is_named_and_an_unknown_one_is_left_out() -> None:
    f = _one("straggler", evidence={"host": "gpu-node-7"})
    assert f.next.startswith("Rank 0 on gpu-node-7 computes slowest") and "CPU load of gpu-node-7" in f.next
    g = _one("straggler")
    assert g.next.startswith("Rank 0 computes slowest") and "the host of" not in g.next


def test_a_scheduler_end_uses_the_job_id_and_reason_of_the_finding() -> None:
    f = _one("job_cancelled", ranks=[], evidence={"job": "4471", "reason": "TIME LIMIT"})
    assert "job 4471 (time limit)" in f.next and "sacct -j 4471 " in f.next and "JOBID" not in f.next
    g = _one("job_cancelled", ranks=[], evidence={"job": "4471"})
    assert "Ask the scheduler why job 4471 ended (`sacct -j 4471 " in g.next


def test_a_timeout_names_its_collective_and_sequence_from_the_watchdog_line() -> None:
    line = ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, "
            "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600032 milliseconds before timing out.")
    f = _one("nccl_timeout", ranks=[], lines=[Evidence("/l/rank_3.log", 88, 3, text=line)])
    assert f.next.startswith("The ranks that timed out in allreduce (seq 41) waited")
    g = _one("nccl_timeout", ranks=[])
    assert g.next.startswith("The ranks that timed out waited") and "unknown" not in g.next


def test_optional_segments_are_validated() -> None:
    assert next_step_error("[On {host}, i|I]nspect {gpu}.") is None
    assert "optional segment" in next_step_error("[a [b] c].")
    assert "optional segment" in next_step_error("On {host}].")


def test_the_real_deepspeed_oom_names_the_three_processes_on_its_gpu() -> None:
    log = REPO.parent / "shared" / "realdata" / "console" / "deepspeed_2rank_oom.log"
    if not log.exists():
        pytest.skip("../shared/realdata not present")
    r = CliRunner().invoke(app, ["diagnose", str(log), "--format", "json"])
    nxt = json.loads(r.stdout)["root_cause"]["next"]
    assert "3 other processes (pid 1605762 (19.9 GiB), pid 1612264 (4.7 GiB), pid 1612549 (3.5 GiB))" in nxt
    assert "the host of" not in nxt and "peers'" not in nxt
