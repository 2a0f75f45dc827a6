"""Workers that log with the standard library's `logging` to stderr only: their records reach the
launcher's console with no prefix, the rank tagged in the message by the format ("[rank 3]",
"rank=3"). Each record is its rank's (rank_source "text"); a record that names another rank
("waiting for rank 2") or none is nobody's. Lines are ours, in logging's default pieces
(asctime, levelname, name) in two layouts."""
from __future__ import annotations

import polars as pl

from forensics.run import open_run


def _events(tmp_path, lines: list[str]) -> pl.DataFrame:
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    run = open_run(str(tmp_path / "console.log"))
    ev = run.events() if callable(run.events) else run.events
    return ev.select("rank", "rank_source", "step", "message").collect()


def test_a_logging_record_tagged_with_its_rank_is_that_ranks(tmp_path) -> None:
    ev = _events(tmp_path, [
        "2026-12-06 10:00:01,100 INFO trainer.loop: [rank 0] step 4 loss 2.3001 step_time_ms=210.5",
        "2026-12-06 10:00:01,102 INFO trainer.loop: [rank 1] step 4 loss 2.2990 step_time_ms=212.0",
        "[2026-12-06 10:00:01,104][trainer.loop][WARNING] - rank=2 step=4 loss=2.31 slow input",
        "2026-12-06 10:00:01,200 INFO trainer.loop: waiting for rank 2 before the barrier",
        "2026-12-06 10:00:01,300 INFO trainer.loop: step 5 loss 2.29",
    ])
    got = {r["message"][-20:]: (r["rank"], r["rank_source"]) for r in ev.iter_rows(named=True)}
    assert [v for k, v in got.items() if "210.5" in k] == [(0, "text")]
    assert [v for k, v in got.items() if "212.0" in k] == [(1, "text")]
    assert [v for k, v in got.items() if "slow input" in k] == [(2, "text")]
    assert [v[0] for k, v in got.items() if "barrier" in k] == [None]
    assert [v[0] for k, v in got.items() if "loss 2.29" in k] == [None]
