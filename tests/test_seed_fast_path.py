"""The seed-schema fast path (ingest.roles._seed_lines): a file is called "seed schema" without a
JSON parse only when a parse would say the same; what the pattern alone cannot tell (a top-level
key after `extra`, an over-long event id) goes to schema inference and keeps its fields."""
from __future__ import annotations

from pathlib import Path

from forensics.ingest.roles import _seed_lines, infer
from forensics.passes import diagnose


def _line(step: int, extra: str, tail: str = "", event: str = "STEP_END") -> str:
    return (f'{{"timestamp":"2026-03-02T10:00:{step:02d}.000Z","level":"INFO","event":"{event}",'
            f'"message":"step {step}","extra":{extra}{tail}}}\n')


def _head(lines: list[str]) -> bytes:
    return "".join(lines).encode()


def test_seed_lines_with_nested_extra_take_the_fast_path() -> None:
    head = _head([_line(s, f'{{"step":{s},"mem":{{"gpu":1.5}},"tags":{{"a":"b"}}}}') for s in range(5)])
    assert infer(head) is None


def test_a_top_level_key_after_extra_is_not_swallowed_by_the_pattern() -> None:
    head = _head([_line(s, f'{{"step":{s}}}', ',"proc":{"rank":6}') for s in range(5)])
    assert not _seed_lines(head)   # the pattern alone reads `extra` as `{"step":0},"proc":{"rank":6}`
    assert _seed_lines(_head([_line(s, f'{{"step":{s}}}') for s in range(5)]))


def test_an_event_id_over_80_characters_is_not_a_seed_event() -> None:
    # _seed_like (the parsed check) takes event ids of at most 80 characters; the pattern too
    assert not _seed_lines(_head([_line(s, f'{{"step":{s}}}', event="E" * 81) for s in range(3)]))
    assert _seed_lines(_head([_line(s, f'{{"step":{s}}}', event="E" * 80) for s in range(3)]))


def test_the_rank_after_extra_names_the_rank_end_to_end(tmp_path: Path) -> None:
    # files named without a rank; the rank and host exist only in an object after `extra`
    for i, rank in enumerate((5, 3, 9)):
        (tmp_path / f"worker-{'abc'[i]}.log").write_text(
            "".join(_line(s, f'{{"step":{s},"step_time_ms":1000}}', f',"proc":{{"rank":{rank},"node":"n{i}"}}')
                    for s in range(20)))
    r = diagnose([str(tmp_path)])
    rows = {row["rank"]: row for row in r.per_rank if row["events"]}
    assert sorted(rows) == [3, 5, 9]
    assert rows[3]["host"] == "n1"
