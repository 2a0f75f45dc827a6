"""TORCH_DISTRIBUTED_DEBUG=DETAIL's ProcessGroupWrapper (torch/csrc/distributed/c10d/
ProcessGroupWrapper.cpp, CollectiveFingerPrint::verify) gathers every rank's fingerprint and
each rank raises "Detected mismatch between collectives on ranks. Rank {own} is running
collective: {own fp}, but Rank {peer} is running collective: {peer fp}. Collectives differ in the
following aspects: ..." for the first peer whose fingerprint differs from its own. The odd ranks
are those whose fingerprint differs from the majority's, whatever the order of comparisons, and a
comparison printed again (a rethrow, every rank repeating it) counts once.

Every line here is ours, in that format.
"""
from __future__ import annotations

import json

import pytest


def _fp(seq: int, shape: str) -> str:
    return (f"CollectiveFingerPrint(SequenceNumber={seq}, OpType=ALLREDUCE, TensorShape=[{shape}], TensorDtypes=Float, "
            "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
            "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt)))")


def _line(writer: int, own: int, peer: int, odd: set[int]) -> str:
    shape = {True: "4096", False: "4352"}
    return (f"[rank{writer}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {own} is running collective: "
            f"{_fp(212, shape[own in odd])}, but Rank {peer} is running collective: {_fp(212, shape[peer in odd])}. "
            f"Collectives differ in the following aspects: \tTensor Tensor shapes: {shape[own in odd]}vs {shape[peer in odd]}")


def _diagnose(tmp_path, lines: list[str]) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def test_two_odd_ranks_are_named_by_the_majoritys_fingerprint(tmp_path):
    # the majority compares with rank 5 (its first differing peer); 5 and 6 compare with rank 0:
    # rank 6 is in one comparison only, yet its fingerprint is the odd one
    odd = {5, 6}
    lines = [_line(r, r, 0 if r in odd else 5, odd) for r in range(8)]
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("collective_mismatch", [5, 6])


@pytest.mark.parametrize("repeat", [1, 3])
def test_a_comparison_printed_again_counts_once(tmp_path, repeat):
    odd = {2}
    lines = [_line(r, r, 0 if r in odd else 2, odd) for r in range(4) for _ in range(repeat)]
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("collective_mismatch", [2])


def test_two_ranks_alone_name_no_majority():
    from forensics.passes.failures.culprit import _odd_fingerprints

    a, b = {"seq": 3, "op": "ALLREDUCE", "shape": [8]}, {"seq": 3, "op": "ALLREDUCE", "shape": [9]}
    assert _odd_fingerprints({0: [a], 1: [b]}) == []
    assert _odd_fingerprints({0: [a], 1: [a], 2: [b]}) == [2]
    assert _odd_fingerprints({0: [a], 1: [a, b], 2: [b]}) == []      # rank 1 seen with two collectives


def test_one_comparison_names_both_of_its_ranks(tmp_path):
    # rank 1's error, printed as its traceback's last line: one comparison, whichever way it is
    # printed; it cannot say which of ranks 0 and 1 is the odd one
    odd = {1}
    lines = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/srv/sft/train.py", line 40, in <module>',
             _line(1, 1, 0, odd)]
    rc = _diagnose(tmp_path, lines)["root_cause"]
    assert (rc["kind"], rc["ranks"]) == ("collective_mismatch", [0, 1])
