"""forensics/failure_messages.py: every family's samples (written here in the upstream format the
family cites) mean what the family says, in Python and in polars, and lines that only look like
failures mean nothing."""
from __future__ import annotations

import polars as pl
import pytest

from forensics import failure_messages as fm

SAMPLES = [(f, s) for f in fm.FAMILIES for s in f.samples]


def test_table_is_well_formed():
    ids = [f.id for f in fm.FAMILIES]
    assert len(ids) == len(set(ids))
    for f in fm.FAMILIES:
        assert f.kind in fm.KINDS and f.role in fm.ROLES, f.id
        assert f.rank in ("line", "text", "job", "pid"), f.id
        assert f.samples and f.source and f.form and f.meaning, f.id
        assert ("(?P<rank>" in f.pattern) == (f.rank == "text"), f.id


@pytest.mark.parametrize("fam,sample", SAMPLES, ids=[f"{f.id}:{i}" for i, (f, _s) in enumerate(SAMPLES)])
def test_sample_means_its_family(fam, sample):
    m = fm.meaning(sample)
    assert m is not None and m.family.id == fam.id, (m and m.family.id)
    if fam.rank == "text":
        assert m.rank is not None and f"Rank {m.rank}" in sample
    if fam.rank == "pid":
        assert m.pid is not None and str(m.pid) in sample


def test_polars_pattern_matches_every_sample_and_each_kind_only_its_own():
    df = pl.DataFrame({"id": [f.id for f, _ in SAMPLES], "kind": [f.kind for f, _ in SAMPLES],
                       "role": [f.role for f, _ in SAMPLES], "text": [s for _, s in SAMPLES]})
    assert df.select(pl.col("text").str.contains(fm.pattern()).all()).item()
    for kind in fm.KINDS:
        hit = df.filter(pl.col("text").str.contains(fm.pattern(kinds=(kind,), roles=("own",))))
        # an own family of this kind matches its samples; a sample of another meaning may match
        # only when an earlier family of the table claims it first (meaning() is ordered)
        for row in hit.iter_rows(named=True):
            if row["kind"] != kind or row["role"] != "own":
                first = fm.meaning(row["text"])
                assert first is not None and first.family.id == row["id"], row


@pytest.mark.parametrize("line,kind,role,rank", [
    ("[rank3]:RuntimeError: DataLoader worker (pid 412) is killed by signal: Killed. ", "host_oom", "own", None),
    ("RuntimeError: Rank 7, node n1, device 7, iteration 3: Unexpected result inf (message='x')", "non_finite", "own", 7),
    ("NCCL error in: x.cpp:1, unhandled cuda error, NCCL version 2.1\nLast error:\nCuda failure 'out of memory'", "oom", "own", None),
    ("[deepspeed] OVERFLOW! Rank 3 Skipping step. Attempted loss scale: 2, reducing to 1", "non_finite", "benign", None),
    ("step 10 loss 2.1000 step_time_ms 500", None, None, None),
    ("args: check_for_nan_in_loss_and_grad=True, min_loss_scale=1.0", None, None, None),
    ("Killed", None, None, None),
])
def test_meaning_of_lines(line, kind, role, rank):
    m = fm.meaning(line)
    if kind is None:
        assert m is None, m and m.family.id
        return
    assert (m.kind, m.role, m.rank) == (kind, role, rank)


def test_the_failures_pass_reads_each_kind_by_the_table():
    """passes/failures/classify.py holds no wording of its own: its OOM, GPU and victim regexes are
    the unions of the table's families, so every sample of a family is read as its kind there."""
    import re

    from forensics.passes.failures import classify

    by = {("oom", "own"): classify.OOM_RE, ("gpu_error", "own"): classify.GPU_RE, ("nccl_timeout", "victim"): classify.TIMEOUT_RE}
    for f in fm.FAMILIES:
        rx = by.get((f.kind, f.role))
        for s in f.samples if rx else ():
            assert re.search(rx, s), (f.id, s)
