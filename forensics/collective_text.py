"""The text PyTorch's c10d prints about collectives that went wrong on other ranks: the desync
report (TraceUtils.h) and the collective fingerprint mismatch (ProcessGroupWrapper.cpp), with the
small functions that take the ranks and fingerprints out of it.

Owns these patterns, the one place that knows this text: forensics/ingest/console/ types such
lines, forensics/passes/failures/ reads the same text in messages of any source (and must not
load the ingest package to do so: this module imports nothing of forensics). Must not read files
or build events; the samples of these templates live in forensics/ingest/templates.py.
"""
from __future__ import annotations

import re
from typing import Any

# TraceUtils.h retrieveDesyncReport / analyzeMissingRanks / analyzeLaggingRanks (and the older
# "lagging/dead/mismatched ranks" wording): the ranks a desync report names as the cause.
DESYNC_LIST = re.compile(
    r"ranks \[([\d,\s]+)\] are the lagging ranks"
    r"|lagging/dead/mismatched ranks[^\[]*\[([\d,\s]+)\]"
    r"|\[(\d+(?:\s*,\s*\d+)*)\]\s*(?:joined but didn't finish|finished collective #\d+, but didn't join|have not joined|didn't join)"
)
DESYNC_SEQ = re.compile(r"collective #(\d+)")
# the reporting rank's own line: `- [3] Timeout at collective: ALLREDUCE, #41`
DESYNC_TIMEOUT_AT = re.compile(r"-\s*\[(\d+)\] Timeout at collective: ([^,]+), #(\d+)")
# ... as a (Rust / polars) regex: does a message carry a desync report or a fingerprint mismatch
DESYNC_TEXT = (r"(?i)lagging/dead/mismatched|are the lagging ranks|joined but didn't finish collective|"
               r"but didn't join collective|have not joined|Detected mismatch between collectives")
MISMATCH_TEXT = r"(?i)Detected mismatch between collectives"

# ProcessGroupWrapper.cpp (TORCH_DISTRIBUTED_DEBUG=DETAIL), CollectiveFingerPrint::verify:
#   "Detected mismatch between collectives on ranks. Rank " << getRank() << " is running collective: "
#   << *this << ", but Rank " << rank << " is running collective: " << rank_fingerprint << "."
#   then compute_collective_diff: "Collectives differ in the following aspects: " + "\t Sequence
#   number: {a}vs {b}", "  Op type: {a}vs {b}", "  Tensor Tensor shapes: {a}vs {b}", ".. dtypes", ".. devices"
# operator<< of a fingerprint: "CollectiveFingerPrint(SequenceNumber=N, OpType=OP, TensorShape=[a, b],
#   TensorDtypes=<dtypes>, TensorDeviceTypes=<devices>)", or without tensors
#   "CollectiveFingerPrint(SequenceNumber=NOpType=OP)" (no separator upstream). Older releases
#   printed no SequenceNumber and a TensorOptions(...) for the devices.
# runCollectiveChecks logs each rank's own fingerprint: LOG(INFO) "[Rank N] Running collective: <fp>".
_FP = r"CollectiveFingerPrint\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)"   # parentheses nest two deep (TensorOptions(.. (default)))
MISMATCH_PAIR = re.compile(r"Rank (\d+) is running collective: (" + _FP + r"|[^,]*), but Rank (\d+) is running collective: ("
                           + _FP + r"|[^.]*)")
FINGERPRINT = re.compile(_FP)
RUNNING_COLLECTIVE = re.compile(r"Running collective: (" + _FP + ")")
_FP_SEQ = re.compile(r"SequenceNumber=(\d+)")
_FP_OP = re.compile(r"OpType=(\w+)")
_FP_SHAPE = re.compile(r"TensorShape=\[([^\]]*)\]")
_FP_DTYPES = re.compile(r"TensorDtypes=(\[[^\]]*\]|[^,)]*)")


def fingerprint(text: str) -> dict[str, Any]:
    """The fields of one CollectiveFingerPrint(...): seq, op, shape (list of ints), dtypes (list)."""
    out: dict[str, Any] = {}
    m = _FP_SEQ.search(text)
    if m:
        out["seq"] = int(m.group(1))
    m = _FP_OP.search(text)
    if m:
        out["op"] = m.group(1)
    m = _FP_SHAPE.search(text)
    if m:
        out["shape"] = [int(t) for t in re.findall(r"-?\d+", m.group(1))]
    m = _FP_DTYPES.search(text)
    if m:
        out["dtypes"] = [t for t in re.split(r"[\s,\[\]]+", m.group(1)) if t]
    return out


FP_ASPECTS = (("seq", "sequence number"), ("op", "op type"), ("shape", "tensor shape"), ("dtypes", "tensor dtype"))


def fingerprint_diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The aspects two fingerprints differ in (as compute_collective_diff reports them)."""
    return [k for k, _ in FP_ASPECTS if k in a and k in b and a[k] != b[k]]


def desync_ranks(text: str) -> list[int]:
    """Every rank a desync report in `text` names (sorted, unique)."""
    out: set[int] = set()
    for groups in DESYNC_LIST.findall(text):
        for g in groups:
            out.update(int(t) for t in re.findall(r"\d+", g))
    return sorted(out)


def mismatch_pairs(text: str) -> list[tuple[int, dict[str, Any], int, dict[str, Any]]]:
    """(rank, its fingerprint, peer rank, the peer's fingerprint) for each mismatch in `text`."""
    return [(int(a), fingerprint(fa), int(b), fingerprint(fb)) for a, fa, b, fb in MISMATCH_PAIR.findall(text)]
