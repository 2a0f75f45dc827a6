"""The report renderers: golden text/md at a fixed width, the JSON contract, redaction, and the
reading order (verdict, chain bottom-up, compressed cascade, other findings, per-rank table).

Golden files live in tests/golden/; regenerate them only on purpose:
    FORENSICS_UPDATE_GOLDEN=1 pytest tests/test_report_render.py
and read the diff before committing it.
"""
from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import ForensicsError
from forensics.report import render
from forensics.report.fmt import duration, num, ranks_text
from forensics.report.model import ChainLink, Evidence, Finding, Report, RootCause, RunInfo
from forensics.report.redact import redact_text
from forensics.rules import evaluate, load_rules
from forensics.schema import conform

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("FORENSICS_UPDATE_GOLDEN") == "1"


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path}: run with FORENSICS_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8")


def ev(rank: int, line: int, ts: str, text: str, file: str | None = None) -> Evidence:
    return Evidence(file or f"logs/rank_{rank}.jsonl", line, rank, f"2025-06-12T{ts}Z", text)


def thermal_report() -> Report:
    """Seed 000 §4.3: rank 6 overheats; the others wait; throughput falls; loss still falls."""
    f = [
        Finding("thermal_throttling", "thermal_throttling", "physical", "WARN", [6],
                "GPU hot enough to throttle: rank 6 — temp_c 92 (>= 90)", {"worst": {"temp_c": 92.0}},
                [ev(6, 120, "14:03:21.123", "GPU_STATS temp_c=92 sm_clock_mhz=1200")],
                "2025-06-12T14:03:21.123Z", "2025-06-12T14:40:00.000Z", explains=[1, 2]),
        Finding("pass.straggler", "straggler", "resource", "WARN", [6],
                "Straggler: rank 6 computes 1.9 s per step against 1.1 s on its peers and waits least",
                {}, [ev(6, 300, "14:04:00.000", "TRAIN_STEP step=1500 step_time_ms=4100")],
                "2025-06-12T14:04:00.000Z", None, victims=[0, 1, 2, 3, 4, 5, 7], explains=[2]),
        Finding("comm_share_high", "comm_bound", "communication", "WARN", [0, 1, 2, 3, 4, 5, 7],
                "Communication above 40% of step time: ranks 0–5,7 — comm_ms 2300 (> 1640) for 120 steps", {},
                [ev(0, 4410, "14:04:02.500", "ALLREDUCE comm_ms=2300 wait_ms=2250")], "2025-06-12T14:04:02.500Z", None),
        Finding("grad_norm_above_threshold", "grad_norm_spike", "training", "WARN", [3],
                "Gradient norm above its threshold: rank 3 — grad_norm 45.6 (> 10)", {},
                [ev(3, 88, "14:10:00.000", "GRAD_NORM grad_norm=45.6 threshold=10")], "2025-06-12T14:10:00.000Z", None),
        Finding("nccl_timeout", "nccl_timeout", "communication", "ERROR", [5],
                "NCCL collective timed out: rank 5 — 1 event, first on rank 5 at 14:55:00.000", {},
                [ev(5, 9001, "14:55:00.000", "NCCL_TIMEOUT: rank=5 waiting on rank=0 for 1800s")], "2025-06-12T14:55:00.000Z", None),
    ]
    rc = RootCause(
        "thermal_throttling", "physical", [6],
        "Rank 6's GPU overheated (92 °C) and throttled its SM clock to 1.2 GHz; the other seven ranks "
        "waited for it in every all-reduce and throughput fell by a third while the loss kept falling.",
        [
            ChainLink("training", "throughput 1200 → 800 samples/s; loss still falling", [], []),
            ChainLink("physical", "rank 6 at 92 °C, SM clock 1.2 GHz", [6], f[0].lines),
            ChainLink("communication", "ranks 0–5,7 wait 2.3 s per all-reduce", [0, 1, 2, 3, 4, 5, 7], f[2].lines),
            ChainLink("resource", "rank 6 utilisation 45% against 95% on its peers", [6], f[1].lines),
        ],
        finding=0,
    )
    per_rank = [{"rank": r, "host": f"node{r // 4}", "events": 15000 + r, "last_step": 2000,
                 "gpu_util": 45.0 if r == 6 else 95.0, "max_temp_c": 92.0 if r == 6 else 71.0} for r in range(8)]
    run = RunInfo(8, 2, "2025-06-12T14:00:00.000Z", "2025-06-12T15:02:11.000Z", 123456, 3, False, store="job-4711.forensics")
    return Report(run, rc, f, per_rank)


def oom_report() -> Report:
    """The cascade the brief names: rank 3 runs out of memory, everyone else times out 0.4 s later."""
    f = [
        Finding("cuda_oom", "oom", "resource", "ERROR", [3], "CUDA out of memory: rank 3 — 1 event, first on rank 3 at 02:11:07.600",
                {}, [ev(3, 2341, "02:11:07.600", "CUDA_OOM: CUDA out of memory. Tried to allocate 382.00 MiB")],
                "2025-06-12T02:11:07.600Z", "2025-06-12T02:11:07.600Z", explains=[1]),
        Finding("nccl_timeout", "nccl_timeout", "communication", "ERROR", [0, 1, 2, 4, 5, 6, 7],
                "NCCL collective timed out: ranks 0–2,4–7 — 7 events, first on rank 1 at 02:11:08.000", {},
                [ev(1, 2400, "02:11:08.000", "NCCL_TIMEOUT: rank=1 waiting on rank=3 for 1800s")],
                "2025-06-12T02:11:08.000Z", "2025-06-12T02:11:08.200Z"),
    ]
    rc = RootCause("oom", "resource", [3], "Rank 3 ran out of GPU memory at step 2340; the other ranks waited for it in the next all-reduce until NCCL timed out.",
                   [ChainLink("resource", "rank 3: CUDA out of memory (tried to allocate 382 MiB)", [3], f[0].lines),
                    ChainLink("communication", "ranks 0–2,4–7 time out in all-reduce waiting on rank 3", [0, 1, 2, 4, 5, 6, 7], f[1].lines)],
                   finding=0)
    run = RunInfo(8, 1, "2025-06-12T00:00:00.000Z", "2025-06-12T02:11:08.200Z", 52000, 0, True)
    return Report(run, rc, f, [])


def healthy_report() -> Report:
    run = RunInfo(4, 1, "2025-06-12T10:00:00.000Z", "2025-06-12T11:00:00.000Z", 9000, 0, False)
    return Report(run, None, [], [{"rank": r, "events": 2250, "last_step": 500} for r in range(4)])


def unexplained_report() -> Report:
    r = thermal_report()
    for f in r.findings:
        f.explains = []
    return Report(r.run, None, r.findings[2:4], [])


# --- golden renders ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, make", [("thermal", thermal_report), ("oom", oom_report),
                                        ("healthy", healthy_report), ("unexplained", unexplained_report)])
def test_golden_text_and_markdown(name: str, make) -> None:
    golden(f"{name}.txt", render(make(), "text", width=100))
    golden(f"{name}.md", render(make(), "md"))


def test_text_reads_top_down() -> None:
    text = render(thermal_report(), "text", width=100)
    lines = text.splitlines()
    verdict = next(i for i, ln in enumerate(lines) if ln.startswith("Root cause:"))
    assert "thermal throttling" in lines[verdict] and "rank 6" in lines[verdict] and "physical layer" in lines[verdict]
    # the chain bottom-up, whatever order the diagnosis listed it in
    order = [next(i for i, ln in enumerate(lines) if ln.startswith(layer)) for layer in ("physical", "resource", "communication", "training")]
    assert verdict < order[0] and order == sorted(order)
    assert "logs/rank_6.jsonl:120" in lines[order[0] + 1]            # each claim with its evidence line
    explained = text.index("Explained by the root cause")
    others = text.index("Other findings")
    per_rank = text.index("Per rank")
    assert order[-1] < explained < others < per_rank
    # explained findings are compressed, the unexplained ones keep their title and evidence
    assert "ranks 0–5,7: communication-bound steps — explained by rank 6 thermal throttling 41.4 s earlier" in text[explained:others]
    assert "Gradient norm above its threshold: rank 3" in text[others:per_rank]
    assert text[others:per_rank].index("ERROR") < text[others:per_rank].index("WARN")   # worst first
    assert re.search(r"^6 \*\s+node1\s+15,006", text, re.M)        # the rank at fault is marked


def test_the_cascade_line_of_the_brief() -> None:
    text = render(oom_report(), "text", width=100)
    assert "ranks 0–2,4–7: NCCL timeout — explained by rank 3 CUDA OOM 0.4 s earlier" in text
    assert "ended in a crash" in text


def test_healthy_says_so_plainly() -> None:
    text = render(healthy_report(), "text", width=100)
    assert "Healthy: nothing wrong found in 4 ranks and 9,000 events." in text
    assert "Root cause" not in text and "Other findings" not in text
    crashed = healthy_report()
    crashed.run.crashed = True
    assert "The run crashed, but no finding explains it" in render(crashed, "text")
    assert "No single root cause: 2 findings" in render(unexplained_report(), "text")


def test_fixed_width_and_no_ansi_unless_asked() -> None:
    narrow = render(thermal_report(), "text", width=60)
    assert max(len(ln) for ln in narrow.splitlines()) <= 60
    assert "\x1b[" not in narrow
    assert "\x1b[" in render(thermal_report(), "text", width=100, color=True)


# --- JSON contract ------------------------------------------------------------------------------------

def test_json_is_the_contract_of_spec_report_md() -> None:
    d = json.loads(render(thermal_report(), "json"))
    assert list(d)[:3] == ["run", "root_cause", "findings"]
    assert {"ranks", "hosts", "start", "end", "events", "rejected_lines", "crashed"} <= set(d["run"])
    rc = d["root_cause"]
    assert {"kind", "layer", "ranks", "summary", "chain"} <= set(rc)
    assert (rc["kind"], rc["layer"], rc["ranks"]) == ("thermal_throttling", "physical", [6])
    assert all({"layer", "finding"} <= set(c) for c in rc["chain"])
    for f in d["findings"]:
        assert {"rule", "kind", "layer", "severity", "ranks", "title", "evidence", "first_seen", "last_seen"} <= set(f)
        assert all({"source_file", "line"} <= set(e) for e in f["evidence"]["lines"])
    assert d["findings"][0]["evidence"]["lines"][0] == {
        "source_file": "logs/rank_6.jsonl", "line": 120, "rank": 6, "timestamp": "2025-06-12T14:03:21.123Z",
        "text": "GPU_STATS temp_c=92 sm_clock_mhz=1200"}
    healthy = json.loads(render(healthy_report(), "json"))
    assert healthy["root_cause"] is None and healthy["findings"] == []


def test_render_of_engine_findings(tmp_path: Path) -> None:
    """Rule findings straight from the engine render in every format."""
    t0 = datetime(2025, 6, 12, 14, tzinfo=timezone.utc)
    rows = [{"timestamp": t0 + timedelta(seconds=5 * i), "rank": 6, "event": "GPU_STATS", "temp_c": 92.0,
             "gpu_util": 45.0, "source_file": "logs/rank_6.jsonl", "line": i + 1} for i in range(70)]
    frame = conform(pl.DataFrame(rows).lazy())
    findings = evaluate(frame, load_rules())
    assert {f.rule for f in findings} == {"thermal_throttling", "gpu_underutilized"}
    report = Report(RunInfo(1, 1, "2025-06-12T14:00:00.000Z", "2025-06-12T14:05:45.000Z", 70, 0, False), None, findings)
    text = render(report, "text", width=100)
    assert "logs/rank_6.jsonl:1" in text and "temp_c 92 (>= 90)" in text
    assert "gpu_util 45 (&lt; 60) for 5m45s" in render(report, "md")   # `<` as an entity in Markdown prose
    assert json.loads(render(report, "json"))["findings"][0]["evidence"]["lines"][0]["line"] == 1


# --- redaction and helpers ----------------------------------------------------------------------------

SECRETS = [
    ("WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567", "WANDB_API_KEY=***"),
    ("hf_token: hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "hf_token: ***"),
    ("using key sk-abcdefghijklmnopqrstuvwxyz012345", "using key sk-***"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc", "Authorization: Bearer ***"),
    ("s3://AKIAIOSFODNN7EXAMPLE", "s3://AKIA***"),
    ("pulling https://user:hunter2pass@git.example.com/repo", "pulling https://***:***@git.example.com/repo"),
    ('"password": "correct-horse-battery"', '"password": "***"'),
]


@pytest.mark.parametrize("raw, masked", SECRETS)
def test_redact_text(raw: str, masked: str) -> None:
    assert redact_text(raw) == masked


@pytest.mark.parametrize("harmless", [
    "tokens_per_s=51234.5", "max_tokens=4096", "step=1500 loss=2.345 lr=1.2e-4", "logs/token_stats/rank_3.jsonl:88",
    "grad_norm=45.6 exceeds threshold=10.0", "num_token=5",
])
def test_redact_leaves_metrics_and_paths_alone(harmless: str) -> None:
    assert redact_text(harmless) == harmless


def test_reports_redact_by_default_in_every_format() -> None:
    r = thermal_report()
    r.findings[2].lines[0].text = "ALLREDUCE comm_ms=2300 WANDB_API_KEY=0123456789abcdef0123456789abcdef"
    r.findings[2].evidence["env"] = "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCDEFGH"
    for fmt in ("text", "md", "json"):
        out = render(r, fmt, width=200)
        assert "0123456789abcdef" not in out and "hf_abcdef" not in out, fmt
        assert "WANDB_API_KEY=***" in out and "logs/rank_0.jsonl" in out and "4410" in out, fmt
        assert "0123456789abcdef0123456789abcdef" in render(r, fmt, width=200, redact=False), fmt
    assert r.findings[2].lines[0].text.endswith("0123456789abcdef")   # the report itself is not changed


def test_unknown_format() -> None:
    with pytest.raises(ForensicsError, match="unknown report format"):
        render(healthy_report(), "pdf")


def test_format_helpers() -> None:
    assert ranks_text([0, 1, 2, 4, 5, 6, 7]) == "0–2,4–7"
    assert ranks_text([3]) == "3" and ranks_text([]) == "none" and ranks_text([5, 3, 4, 9]) == "3–5,9"
    assert duration(0.4) == "0.4 s" and duration(0.004) == "4 ms" and duration(425) == "7m05s" and duration(3720) == "1h02m"
    assert num(92.0) == "92" and num(1.2e-6) == "1.2e-06" and num(123456.0) == "123,456" and num(0.456) == "0.456"


# --- reading real diagnoses: duplicates, victims, notes, wide tables ---------------------------------

def test_cascade_names_who_waited_and_merges_what_rule_and_pass_both_saw() -> None:
    r = oom_report()
    r.findings[1].ranks, r.findings[1].victims = [3], [0, 1, 2, 4, 5, 6, 7]        # a pass: at fault 3, felt by the rest
    r.findings.append(Finding("nccl_timeout", "nccl_timeout", "communication", "ERROR", [0, 1, 2, 4, 5, 6, 7],
                              "NCCL collective timed out", {}, [], "2025-06-12T02:11:08.000Z"))
    r.findings.append(Finding("cuda_oom", "oom", "resource", "ERROR", [3], "CUDA out of memory", {}, [], "2025-06-12T02:11:07.600Z"))
    r.findings.append(Finding("pass.straggler", "straggler", "resource", "WARN", [3], "rank 3 computes longest", {}, [],
                              "2025-06-12T02:11:07.000Z", victims=[0, 1, 2]))
    r.findings[0].explains = [1, 2, 3, 4]
    text = render(r, "text", width=200)
    explained = text[text.index("Explained by the root cause"):]
    assert explained.count("NCCL timeout") == 1
    assert "ranks 0–2,4–7: NCCL timeout — explained by rank 3 CUDA OOM 0.4 s earlier (also nccl_timeout)" in explained
    assert "rank 3: CUDA OOM — the same fault, also reported by cuda_oom" in explained
    assert "rank 3: straggler — explained by rank 3 CUDA OOM 0.6 s later" in explained   # the straggler is rank 3


def test_info_findings_are_notes_on_a_healthy_run() -> None:
    r = healthy_report()
    r.findings = [Finding("pass.hygiene", "log_hygiene", "training", "INFO", [3], "252 records carry no rank field", {},
                          [Evidence("/abs/rank_3.jsonl", 1, 3, "2025-06-12T10:00:00.020000+00:00", None)])]
    text = render(r, "text")
    assert "Healthy: nothing wrong found in 4 ranks and 9,000 events. 1 note below." in text
    assert "\nNotes\n" in text
    assert "/abs/rank_3.jsonl:1  rank 3  10:00:00.020" in text                 # microseconds cut to ms
    r.findings[0].severity = "WARN"
    assert "Healthy" not in render(r, "text")


def test_a_wide_per_rank_table_is_split_not_squeezed() -> None:
    r = healthy_report()
    r.per_rank = [{"rank": k, **{f"metric_{i}": 1000.5 * i for i in range(12)}, "first_seen": "2025-06-12T10:00:00.022000+00:00"}
                  for k in range(3)]
    text = render(r, "text", width=80)
    table = text[text.index("Per rank"):].splitlines()[1:]
    assert max(len(ln) for ln in table) <= 80
    headers = [ln for ln in table if ln.startswith("rank ")]
    assert len(headers) >= 2                                          # split into several tables
    for i in range(12):
        assert sum(len(re.findall(rf"\bmetric_{i}\b", h)) for h in headers) == 1   # every column once, never cut
    assert "10:00:00.022" in text and "+00:00" not in text


def _table_ranks(text: str, start: str) -> set[int]:
    """The ranks of the per-rank table rows after the heading `start` (text or md)."""
    rows = text[text.index(start):].splitlines()
    out = set()
    for ln in rows:
        m = re.match(r"^(\d+)(?: \*)?  |^\| \**(\d+)\** \| ", ln)   # a text row, an md row
        if m:
            out.add(int(m.group(1) or m.group(2)))
    return out


@pytest.mark.parametrize("n", [64, 100, 10_240])
def test_a_big_run_prints_the_rows_of_the_ranks_its_findings_single_out(n: int) -> None:
    r = thermal_report()
    r.run.ranks = n
    r.per_rank = [{"rank": k, "host": f"node{k // 8}", "events": 15000 + k, "gpu_util": 45.0 if k == 6 else 95.0}
                  for k in range(n)]
    text, md = render(r, "text"), render(r, "md")
    if n <= 64:          # a table this size is printed whole
        assert _table_ranks(text, "Per rank") == _table_ranks(md, "## Per rank") == set(range(n))
        assert "not shown" not in text and "not shown" not in md
    else:
        # the root cause's rank 6, the NCCL timeout's rank 5, the grad-norm rank 3 and the ranks the
        # comm-bound finding names (0-5, 7: a few of a big run); no other row
        assert _table_ranks(text, "Per rank") == _table_ranks(md, "## Per rank") == set(range(8))
        note = f"{n - 8:,} other ranks not shown: `forensics ranks job-4711.forensics` lists every rank"
        assert note in " ".join(text.split()) and note in md
    # the JSON report keeps every row whatever the size
    assert len(json.loads(render(r, "json"))["per_rank"]) == n


def test_build_report_is_the_diagnosis() -> None:
    import forensics

    logs = Path(__file__).resolve().parents[1] / "sample_logs" / "oom_cascade"
    if not logs.is_dir():
        pytest.skip("sample_logs/oom_cascade not present")
    report = forensics.build_report(str(logs))
    assert isinstance(report, Report)
    assert (report.root_cause.kind, report.root_cause.ranks) == ("oom", [3])
    assert "Root cause: CUDA OOM on rank 3" in render(report, "text")


def test_markdown_escapes_html_in_log_text() -> None:
    """A host or title carrying markup reaches Markdown as text: most renderers pass raw HTML
    through, so a `node<script>` host must not become a tag (in the report and the job summary)."""
    from forensics.report.summary import render_summary

    payload = "node<script>alert(1)</script>&x"
    f = Finding("pass.straggler", "straggler", "resource", "WARN", [1], f"Straggler on {payload}", {},
                [ev(1, 5, "14:00:00.000", f"host={payload}")], "2025-06-12T14:00:00.000Z", None)
    rc = RootCause("straggler", "resource", [1], f"straggler on rank 1 (resource layer): host {payload}", finding=0)
    rep = Report(RunInfo(2, 1, None, None, 10, 0, False), rc, [f],
                 per_rank=[{"rank": 0, "host": "node0"}, {"rank": 1, "host": payload}])
    for md in (render(rep, "md", redact=False), render_summary(rep, redact=False)):
        prose = re.sub(r"`[^`]*`", "", md)          # code spans show their text, never a tag
        assert "<" not in prose
        assert "node&lt;script>alert(1)&lt;/script>&x" in prose


@pytest.mark.parametrize("kind, ending", [("hang", "hung"), ("nccl_timeout", "ended in an NCCL timeout"),
                                          ("oom", "ended in a crash"), ("crash", "ended in a crash")])
def test_header_says_how_the_run_ended_by_the_kind_of_failure(kind: str, ending: str) -> None:
    """A run that hung or timed out did not crash: the header words the ending by the failure's
    kind (the root cause's, else the first failure found), not "ended in a crash" for all."""
    from forensics.passes.rootcause import FAILURES
    from forensics.report.outline import ENDINGS, header

    assert set(ENDINGS) == FAILURES                     # every failure kind has its wording
    f = Finding(kind, kind, "communication", "ERROR", [0], "t", {}, [], "2025-06-12T02:11:08.000Z", None)
    late = Finding("crash", "crash", "resource", "ERROR", [1], "t", {}, [], "2025-06-12T02:12:00.000Z", None)
    run = RunInfo(2, 1, "2025-06-12T00:00:00.000Z", "2025-06-12T02:12:00.000Z", 100, 0, True)
    rc = RootCause(kind, "communication", [0], "s", [], finding=1)
    assert header(Report(run, rc, [late, f], [])).endswith(ending)      # the root cause's failure
    assert header(Report(run, None, [late, f], [])).endswith(ending)    # no root: the first failure
    assert ("crash" in header(Report(run, None, [f], []))) == (ending == "ended in a crash")
