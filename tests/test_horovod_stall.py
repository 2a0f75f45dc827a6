"""Horovod's stall inspector names the ranks that did not submit a tensor the others wait on.

Lines here are ours, in the formats horovod writes: horovod/common/stall_inspector.cc
(CheckForStalledTensors: the warning, "Stalled ranks:", then "%d: [%s, ...]" per missing rank,
"%d!: [...]" past the shutdown time, then "... Will shutdown."), and the older
horovod/common/operations.cc per-tensor "<tensor> [missing ranks: %s]"; horovodrun / mpirun's
"[1,R]<stderr>:" tag in front.
"""
from __future__ import annotations

import io
import json

import polars as pl
import pytest

from forensics.ingest.console import read_console
from forensics.ingest.formats import ReaderContext

_WARN = ("One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
         "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying "
         "to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. ")


def _events(*lines: str) -> pl.DataFrame:
    data = ("\n".join(lines) + "\n").encode()
    blocks = list(read_console("c.log", io.BytesIO(data), ReaderContext("c.log", None, None)))
    return pl.concat([b.events for b in blocks], how="diagonal_relaxed")


def _diagnose(tmp_path, lines: list[str]) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "hvd.log").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def _steps(world: int, steps: range) -> list[str]:
    return [f"[1,{r}]<stdout>:epoch 1 step {s} loss {1.5 - s / 1000:.3f}" for s in steps for r in range(world)]


def _stall(writer: int, missing: int, bang: str) -> list[str]:
    return [f"[1,{writer}]<stderr>:[2024-06-11 08:41:17.000321: W /opt/horovod/common/stall_inspector.cc:107] {_WARN}",
            f"[1,{writer}]<stderr>:Stalled ranks:",
            f"[1,{writer}]<stderr>:{missing}{bang}: [allreduce.encoder.w, allreduce.encoder.b]"]


@pytest.mark.parametrize("world,missing", [(4, 2), (8, 5)])
def test_a_rank_stalled_past_shutdown_is_the_hang(tmp_path, world, missing):
    lines = (_steps(world, range(10, 60, 10)) + _stall(0, missing, "") + _stall(0, missing, "!")
             + ['[1,0]<stderr>:One or more rank (marked by "!") is stalled for longer than 300 seconds. Will shutdown.'])
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert rc["kind"] == "hang" and rc["ranks"] == [missing]


def test_a_stall_the_run_outlives_is_no_fault(tmp_path):
    lines = _steps(4, range(10, 40, 10)) + _stall(0, 3, "") + _steps(4, range(40, 90, 10))
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert rc is None or rc["kind"] != "hang"


def test_the_older_per_tensor_form_names_the_missing_ranks():
    ev = _events("[1,0]<stderr>:[2019-05-02 10:00:01.000001: W horovod/common/operations.cc:588] "
                 "HorovodAllreduce_grad_dense_1_0 [missing ranks: 1, 3]")
    row = ev.row(0, named=True)
    assert row["event"] == "COLLECTIVE_STALL" and row["rank"] == 0
    assert json.loads(row["extra"])["missing_ranks"] == [1, 3]


def test_a_label_like_line_outside_a_stall_list_is_plain_text():
    ev = _events("[1,0]<stdout>:2: [0.5, 0.25]")
    assert ev.row(0, named=True)["event"] == "LOG"


@pytest.mark.parametrize("world,missing", [(4, 3), (6, 1)])
def test_older_stall_warnings_the_run_never_got_past_are_the_hang(tmp_path, world, missing):
    stall = [f"[1,0]<stderr>:[2019-05-02 10:{m}:01.000001: W horovod/common/operations.cc:588] {_WARN}"
             for m in (31, 32)]
    lines = _steps(world, range(10, 40, 10))
    for head in stall:
        lines += [head, f"[1,0]<stderr>:Stalled ops:HorovodAllreduce_grad_dense_1_0 [missing ranks: {missing}]"]
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert rc["kind"] == "hang" and rc["ranks"] == [missing]


def test_a_stall_after_which_only_the_other_ranks_go_on_is_the_hang(tmp_path):
    # the named rank never progresses again; the others still write step lines (their own loop's
    # progress up to the collective): the run stopped at the named rank
    lines = (_steps(4, range(10, 40, 10)) + _stall(0, 2, "")
             + [f"[1,{r}]<stdout>:epoch 1 step {s} loss 1.4" for s in (40, 50) for r in (0, 1, 3)])
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert rc["kind"] == "hang" and rc["ranks"] == [2]


def test_a_stall_the_named_rank_outlives_is_no_fault(tmp_path):
    lines = (_steps(4, range(10, 40, 10)) + _stall(0, 2, "")
             + [f"[1,2]<stdout>:epoch 1 step 40 loss 1.4"] + _steps(4, range(50, 90, 10)))
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert rc is None or rc["kind"] != "hang"
