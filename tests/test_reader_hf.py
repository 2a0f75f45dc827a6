"""HF Trainer state reader, and ms-swift flat lines through the JSONL parser."""
from __future__ import annotations

import io
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import schema
from forensics.ingest import formats
from forensics.ingest.formats import ReaderContext, sniff
from forensics.ingest.hf_state import read_hf_state
from forensics.ingest.jsonl import parse_block

STATE = {
    "best_metric": 1.9,
    "best_model_checkpoint": "out/checkpoint-20",
    "epoch": 1.0,
    "global_step": 30,
    "is_world_process_zero": True,
    "log_history": [
        {"epoch": 0.33, "grad_norm": 1.5, "learning_rate": 5e-05, "loss": 2.1, "step": 10},
        {"epoch": 0.66, "grad_norm": float("nan"), "learning_rate": 4e-05, "loss": float("nan"), "step": 20},
        {"epoch": 0.66, "eval_loss": 1.9, "eval_accuracy": 0.71, "eval_runtime": 3.2,
         "eval_samples_per_second": 100.0, "step": 20},
        {"epoch": 1.0, "step": 30, "total_flos": 1e15, "train_loss": 2.0, "train_runtime": 100.0,
         "train_samples_per_second": 9.9},
    ],
    "max_steps": 30,
    "trial_params": None,
}


def _read(data: bytes, rank_hint: int | None = None):
    ctx = ReaderContext(path="/run/out/trainer_state.json", rank_hint=rank_hint, host_hint="n0")
    blocks = list(read_hf_state(ctx.path, io.BytesIO(data), ctx))
    assert len(blocks) == 1
    b = blocks[0]
    assert b.lines == b.events.height + b.rejects.height
    schema.conform(b.events)
    return b


def test_registered_and_sniffed():
    assert formats.reader_for("hf_state") is read_hf_state
    assert sniff(json.dumps(STATE, indent=2).encode(), "trainer_state.json") == "hf_state"


def test_log_history_becomes_events():
    # json.dumps writes NaN literals, exactly as the Trainer does for a diverged loss
    b = _read(json.dumps(STATE, indent=2).encode())
    ev = b.events.sort("line")
    assert b.lines == 5 and b.rejects.height == 0
    assert ev["event"].to_list() == ["TRAIN_STEP", "TRAIN_STEP", "EVAL", "TRAIN_SUMMARY", "TRAINER_STATE"]
    assert ev["line"].to_list() == [1, 2, 3, 4, 5]
    assert ev["step"].to_list() == [10, 20, 20, 30, 30]
    assert ev["lr"].to_list()[:2] == [5e-05, 4e-05] and ev["grad_norm"][0] == 1.5
    assert ev["loss"][0] == 2.1 and math.isnan(ev["loss"][1]) and ev["level"][1] == "WARN"
    assert ev["loss"][2] == 1.9 and ev["samples_per_s"][2] == 100.0
    assert json.loads(ev["extra"][2]) == {"eval_accuracy": 0.71, "eval_runtime": 3.2}
    assert (ev["loss"][3], ev["samples_per_s"][3], ev["duration_s"][3]) == (2.0, 9.9, 100.0)
    assert ev["epoch"].to_list() == [0.33, 0.66, 0.66, 1.0, 1.0]
    state = json.loads(ev["extra"][4])
    assert state["best_model_checkpoint"] == "out/checkpoint-20" and "log_history" not in state
    assert (ev["rank"] == 0).all() and (ev["rank_source"] == "record").all() and (ev["host"] == "n0").all()
    assert schema.conform(ev)["timestamp"].null_count() == ev.height  # the state has no clock


def test_rank_source_without_the_world_zero_flag_and_with_a_path_rank():
    old = {k: v for k, v in STATE.items() if k != "is_world_process_zero"}
    ev = _read(json.dumps(old).encode()).events
    assert (ev["rank"] == 0).all() and (ev["rank_source"] == "path").all()
    ev = _read(json.dumps(old).encode(), rank_hint=4).events
    assert (ev["rank"] == 4).all()


def test_broken_files_are_rejects_not_crashes():
    b = _read(b'{"log_history": [{"loss": 1.0, "step": 1}')
    assert b.lines == 1 and b.events.height == 0 and b.rejects["reason"][0].startswith("invalid JSON")
    b = _read(b"[1, 2]")
    assert b.rejects["reason"].to_list() == ["JSON value is not an object"]
    b = _read(json.dumps({"log_history": [{"loss": 1.0, "step": 1}, 7, None], "global_step": 1}).encode())
    assert b.lines == 4 and b.rejects["line"].to_list() == [2, 3] and b.events["line"].to_list() == [1, 4]


@given(st.lists(st.fixed_dictionaries(
    {"step": st.integers(0, 10**6)},
    optional={"loss": st.floats(allow_infinity=True), "learning_rate": st.floats(0, 1), "epoch": st.floats(0, 100),
              "grad_norm": st.floats(0, 1e6), "custom_metric": st.text(max_size=5)},
), max_size=30))
@settings(max_examples=100, deadline=None)
def test_property_every_record_is_one_event(history):
    b = _read(json.dumps({"log_history": history, "global_step": 1}).encode())
    assert b.lines == len(history) + 1 and b.events.height == len(history) + 1
    steps = b.events.sort("line")["step"].to_list()
    assert steps[:-1] == [h["step"] for h in history]


def test_ms_swift_flat_line_goes_through_the_jsonl_parser():
    line = (b'{"loss": 2.458, "grad_norm": 1.37, "learning_rate": 3.2e-05, "memory(GiB)": 18.33, '
            b'"train_speed(iter/s)": 0.41, "epoch": 0.12, "global_step/max_steps": "120/1000", '
            b'"step": 120, "gpu_memory_mb": 18765, "timestamp": "2025-04-05T10:23:12Z"}\n')
    b = parse_block(line, 1, True, None, None)
    assert b.lines == 1 and b.rejects.height == 0
    row = b.events.row(0, named=True)
    assert (row["event"], row["step"], row["loss"], row["lr"], row["grad_norm"]) == ("TRAIN_STEP", 120, 2.458, 3.2e-05, 1.37)
    assert row["mem_alloc_mb"] == 18765.0 and row["rank"] is None and row["rank_source"] == "none"
    assert str(row["timestamp"]) == "2025-04-05 10:23:12+00:00"
    assert "memory(GiB)" in json.loads(row["fields"])
