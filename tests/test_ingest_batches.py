"""How small files are packed into ingest units (forensics.ingest._batches): consecutive rank
ranges, even sizes, a whole number of rounds of the workers."""
from __future__ import annotations

from forensics.ingest import BATCH_BYTES, Piece, _batches


def _pieces(weights: list[int]) -> list[tuple[Piece, int | None, int]]:
    return [(Piece(path=f"/logs/rank{i:05d}.jsonl", fmt="jsonl", compression="none"), i, w)
            for i, w in enumerate(weights)]


def _sizes(batches) -> list[int]:
    return [sum(w for _, _, w in b) for b in batches]


def test_4096_rank_files_make_even_batches_in_whole_rounds_of_two_workers() -> None:
    # 4,096 files of ~113 kB (the 4,096-rank bench): filling batches to 64 MB left 7 full ones
    # and a small eighth (on 2 workers, one core idle for a whole unit)
    batches = _batches(_pieces([113_000] * 4096), n_workers=2)
    sizes = _sizes(batches)
    assert len(batches) % 2 == 0
    assert max(sizes) - min(sizes) <= 113_000
    assert max(sizes) <= BATCH_BYTES
    ranks = [r for b in batches for _, r, _ in b]
    assert ranks == list(range(4096))                    # consecutive rank ranges, in order


def test_small_input_makes_few_batches_of_even_size() -> None:
    # 20 MB on 2 workers: two batches (at least BATCH_MIN of input per batch planned), even halves
    batches = _batches(_pieces([1 << 20] * 20), n_workers=2)
    assert len(batches) == 2 and _sizes(batches) == [10 << 20, 10 << 20]
    assert len(_batches(_pieces([1 << 20] * 8), n_workers=2)) == 1   # under BATCH_MIN: one


def test_no_batch_over_the_cap() -> None:
    batches = _batches(_pieces([(40 << 20)] * 5), n_workers=4)
    assert all(s <= BATCH_BYTES for s in _sizes(batches)) and len(batches) == 5
