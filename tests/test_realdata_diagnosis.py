"""The DIAGNOSIS of every real artifact in ../shared/realdata against its known truth.

The readers have their own tests; these check what a user is told: the root cause (or that
there is none), the ranks at fault, and that what the truth files and the README say is found
for the right reason. Expected values come from the truth files (reference_output.txt,
fault_injection.log) or from the raw artifact itself, never from a previous run of forensics.
Skipped when ../shared/realdata is not present.
"""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from forensics import timeline
from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.report.model import Report
from forensics.store import Run, open_store

from error_accounting import error_lines, unaccounted

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata"
SMI = REAL / "telemetry" / "nvidia_smi_8gpu.csv"
SINGLE_NODE = [f"{g}={g}" for g in range(8)]    # one node, rank i on GPU i

pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/realdata is not available")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Each artifact ingested once for the module: name -> (Run, Report)."""
    made: dict[str, tuple[Run, Report]] = {}

    def get(name: str, paths: list[Path], gpu_map: list[str] | None = None) -> tuple[Run, Report]:
        if name not in made:
            missing = [p for p in paths if not p.exists()]
            if missing:
                pytest.skip(f"realdata absent: {missing[0]}")
            out = tmp_path_factory.mktemp(name) / "run.forensics"
            ingest([str(p) for p in paths], out, gpu_map=gpu_map)
            run = open_store(out)
            made[name] = (run, diagnose(run))
        return made[name]
    return get


def errors_not_explained(report: Report) -> list[str]:
    explained = set(report.findings[0].explains) | {0} if report.root_cause else set()
    return [f.title for i, f in enumerate(report.findings) if f.severity == "ERROR" and i not in explained]


# --- Flight Recorder: two 16-rank fault injections -------------------------------------------------

def reference(d: Path) -> list[dict]:
    """reference_output.txt rows: PGID | Process Group Desc | Op Type | Size | Dtype | Missing Ranks."""
    rows = []
    for line in (d / "reference_output.txt").read_text().splitlines()[1:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 6 and cells[0].isdigit():
            rows.append({"pg": cells[0], "desc": cells[1].split(",")[0], "op": cells[2], "dtype": cells[4],
                         "missing": sorted(int(r) for r in cells[5].split(",")), "size": cells[3]})
    return rows


@pytest.mark.parametrize("case", ["gpu_error_1st", "lock_gil_1st"])
def test_flight_recorder_root_cause_is_the_reference_missing_ranks(case: str, stores) -> None:
    d = REAL / "flight_recorder" / case
    run, report = stores(f"fr_{case}", sorted(d.glob("_dump_*")))     # the dumps, not the truth files
    [ref] = reference(d)
    rc = report.root_cause
    assert rc is not None and rc.kind == "hang" and rc.layer == "communication"
    assert rc.ranks == ref["missing"]                      # gpu_error_1st: [12]; lock_gil_1st: [9, 14]
    assert rc.basis == "never_joined"                      # the dumps show they never joined (issue 10)
    injected = {int(r) for r in re.findall(r"Rank (\d+),", (d / "fault_injection.log").read_text())}
    assert set(rc.ranks) <= injected
    root = report.findings[0]
    # the process group the reference names is where the job stopped first, with its op and dtype
    first = root.evidence["first_stalled"]
    assert (first["process_group"], first["missing"], first["op"], first["dtype"], first["desc"]) == (
        ref["pg"], ref["missing"], ref["op"], ref["dtype"], ref["desc"])
    assert f"pg {ref['pg']}" in rc.summary
    # the ranks left waiting are victims, never the culprits; nothing else is blamed
    assert root.victims and not set(root.victims) & set(rc.ranks)
    assert all(set(g["missing"]) <= set(rc.ranks) for g in root.evidence["stalled"])
    assert errors_not_explained(report) == []


# --- DeepSpeed 2-rank console log: CUDA OOM on rank 0, three relaunches -----------------------------

def test_deepspeed_oom_on_rank_0_and_the_launcher_kills_are_its_cascade(stores) -> None:
    log = REAL / "console" / "deepspeed_2rank_oom.log"
    run, report = stores("deepspeed_oom", [log])
    text = log.read_text(errors="replace")
    rc = report.root_cause
    assert rc is not None and (rc.kind, rc.layer, rc.ranks) == ("oom", "resource", [0])
    root = report.findings[0]
    assert root.rule == "pass.failures"
    # every OOM of rank 0 in the log, counted once each
    assert root.evidence["occurrences"] == len(re.findall(r"(?m)^\[rank0\]: torch\.OutOfMemoryError", text))
    # the launcher's kills and failed exits after it are counted into the OOM, not reported apart
    cascade = root.evidence["cascade"]
    assert cascade["launcher_kills"] == text.count("Killing subprocess")
    assert cascade["failed_exits"] == len(re.findall(r"exits with return code = [1-9]", text))
    assert "cascade" in root.title
    # the README's truth: the GPU is shared with other processes (the allocator names them)
    held = max(sum(float(g) for g in re.findall(r"Process \d+ has ([\d.]+) GiB memory in use", line))
               for line in text.splitlines() if line.startswith("[rank0]: torch.OutOfMemoryError"))
    assert root.evidence["other_processes_mb"] == pytest.approx(held * 1024, rel=1e-3)
    assert "shared" in root.title
    assert not any(f.kind in ("nccl_timeout", "hang") for f in report.findings)
    assert errors_not_explained(report) == []
    assert report.run.crashed


# --- Megatron console logs: healthy runs --------------------------------------------------------------

@pytest.mark.parametrize("name, progress, event", [
    ("megatron_deepspeed_4node.out", r"\{'train_runtime'", "TRAIN_SUMMARY"),     # HF Trainer + DeepSpeed, 4 nodes
    ("megatron_8node_tp4_pp8.out", r"iteration\s+\d+\s*/\s*\d+\s*\|", "TRAIN_STEP"),  # Megatron timing lines
])
def test_megatron_logs_are_healthy(name: str, progress: str, event: str, stores) -> None:
    log = REAL / "console" / name
    run, report = stores(name.split(".")[0], [log])
    # it did read the run's progress lines (so "healthy" is a verdict on them, not on nothing)
    expected = len(re.findall(progress, log.read_text(errors="replace")))
    got = run.events().filter(pl.col("event") == event).select(pl.len()).collect().item()
    assert got == expected > 0
    assert not report.run.crashed
    assert [f.title for f in report.findings if f.severity == "ERROR"] == []
    # no training fault; a log that ends with Slurm's "*** JOB n ON host CANCELLED AT t ***" says
    # why it stopped (issue 10: a cancelled job is never "healthy"), and nothing else is blamed
    text = log.read_text(errors="replace")
    cancelled = re.search(r"\*\*\* JOB (\d+) ON \S+ CANCELLED AT", text)
    if cancelled:
        rc = report.root_cause
        assert rc is not None and (rc.kind, rc.layer, rc.ranks) == ("job_cancelled", "resource", [])
        assert report.findings[0].evidence["job"] == cancelled.group(1)
    else:
        assert report.root_cause is None


# --- nvidia-smi telemetry of 8 GPUs on one node ---------------------------------------------------------

def smi_truth() -> pl.DataFrame:
    """Per GPU from the CSV itself: max and median temperature while busy (util >= 50%)."""
    df = pl.read_csv(SMI, infer_schema_length=0).select(
        pl.col("gpu_index").str.strip_chars().cast(pl.Int64).alias("gpu"),
        pl.col("temperature_C").str.strip_chars().cast(pl.Float64).alias("temp"),
        pl.col("utilization_gpu_percent").str.strip_chars().cast(pl.Float64).alias("util"),
    )
    return df.group_by("gpu").agg(pl.col("temp").max().alias("tmax"),
                                  pl.col("temp").filter(pl.col("util") >= 50).median().alias("tbusy")).sort("gpu")


def test_nvidia_smi_physical_layer_has_real_numbers_per_gpu(stores) -> None:
    run, report = stores("smi_mapped", [SMI], SINGLE_NODE)
    truth = smi_truth()
    per_rank = {row["rank"]: row for row in report.per_rank}
    assert sorted(r for r in per_rank if r is not None) == truth["gpu"].to_list()
    for gpu, tmax in zip(truth["gpu"], truth["tmax"]):
        assert per_rank[gpu]["temp_c_max"] == tmax
    assert report.run.ranks == 8


def test_nvidia_smi_hot_gpu_is_a_notice_never_a_root_cause(stores) -> None:
    run, report = stores("smi_mapped", [SMI], SINGLE_NODE)
    truth = smi_truth()
    hottest = truth.sort("tbusy", descending=True).row(0, named=True)
    assert hottest["gpu"] == 1                                         # the README: one GPU runs hotter
    notes = [f for f in report.findings if f.layer == "physical" and f.rule == "pass.hot_gpu"]
    assert [f.ranks for f in notes] == [[1]]
    note = notes[0]
    assert note.severity == "INFO" and note.evidence["throttled"] is False
    assert note.evidence["temp_c_max"] == hottest["tmax"] and note.evidence["temp_c_median"] == hottest["tbusy"]
    assert "not throttled" in note.title and note.lines
    # nothing physical is wrong: no warning or error in the physical layer, and never the verdict
    assert [f.title for f in report.findings if f.layer == "physical" and f.severity != "INFO"] == []
    rc = report.root_cause
    assert rc is None or (rc.layer != "physical" and rc.kind != "thermal_throttling")


def test_nvidia_smi_healthy_run_has_no_root_cause(stores) -> None:
    run, report = stores("smi_mapped", [SMI], SINGLE_NODE)
    assert report.root_cause is None


def test_nvidia_smi_without_a_gpu_map_names_no_rank(stores) -> None:
    run, report = stores("smi_unmapped", [SMI])
    assert not [f for f in report.findings if f.ranks and f.layer == "physical"]
    assert run.events().filter(pl.col("rank").is_not_null()).select(pl.len()).collect().item() == 0


# --- Kineto traces of an 8-rank DLRM step ----------------------------------------------------------------

def test_kineto_dlrm_no_fault_and_comm_kernels_on_every_rank_timeline(stores) -> None:
    d = REAL / "kineto" / "dlrm_8rank"
    run, report = stores("kineto", sorted(d.glob("*.json*")))
    assert report.root_cause is None
    assert [f.title for f in report.findings if f.severity in ("WARN", "ERROR")] == []
    kernels = run.events().filter(pl.col("event") == "COMM_KERNEL").collect()
    assert sorted(kernels["rank"].unique().to_list()) == list(range(8))
    assert kernels["timestamp"].null_count() == 0 and kernels["comm_ms"].drop_nulls().len() == kernels.height
    # on the per-rank timelines: every rank's last seconds show its NCCL kernels
    snap = timeline.last_window(run, window_s=1.0)
    shown = snap.events.filter(pl.col("event") == "COMM_KERNEL")
    assert sorted(shown["rank"].unique().to_list()) == list(range(8))
    progress = timeline.rank_progress(run)
    assert (progress.filter(pl.col("rank").is_not_null())["events"] > 0).all()
    # and one step's all-reduce lands at about the same instant on every rank (one clock: one node)
    ar = kernels.filter(pl.col("collective").str.contains("(?i)allreduce"))
    first_ar = ar.group_by("rank").agg(pl.col("timestamp").min())["timestamp"]
    assert (first_ar.max() - first_ar.min()).total_seconds() < 0.05


# --- issue 27: every ERROR line of every real run above is cited by, or explained under, a finding ------

ACCOUNTED = [
    ("deepspeed_oom", lambda: [REAL / "console" / "deepspeed_2rank_oom.log"], None),
    ("megatron_deepspeed_4node", lambda: [REAL / "console" / "megatron_deepspeed_4node.out"], None),
    ("megatron_8node_tp4_pp8", lambda: [REAL / "console" / "megatron_8node_tp4_pp8.out"], None),
    ("smi_mapped", lambda: [SMI], SINGLE_NODE),
    ("smi_unmapped", lambda: [SMI], None),
    ("kineto", lambda: sorted((REAL / "kineto" / "dlrm_8rank").glob("*.json*")), None),
    *((f"fr_{c}", (lambda c=c: sorted((REAL / "flight_recorder" / c).glob("_dump_*"))), None)
      for c in ("gpu_error_1st", "lock_gil_1st")),
]


@pytest.mark.parametrize("name, paths, gpu_map", ACCOUNTED, ids=[a[0] for a in ACCOUNTED])
def test_every_error_line_is_accounted_for(name: str, paths, gpu_map, stores) -> None:
    run, report = stores(name, paths(), gpu_map)
    assert unaccounted(run.events(), report, run.totals.get("ranks") or []) == []
    assert report.run.error_lines == len(error_lines(run.events()))
    assert report.run.error_lines_accounted is not None
