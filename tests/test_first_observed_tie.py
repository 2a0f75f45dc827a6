"""torch elastic's ChildFailedError table (torch/distributed/elastic/multiprocessing/errors/
__init__.py, ChildFailedError.format_msg) lists the other failures first and the "Root Cause
(first observed failure)" record last, every time to the second. When several records share the
same time, the first observed one is the first exit; file order is not.

Every line here is ours, in that format.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from test_failures_console import diagnosed, elastic_table, progress


@pytest.mark.parametrize("code,kind", [(1, "crash"), (-9, "host_oom"), (-11, "crash")])
def test_the_first_observed_record_wins_a_tie_in_time(tmp_path: Path, code: int, kind: str) -> None:
    t = "2024-12-18_20:31:02"
    lines = progress([0, 1, 2, 3], t="20:30:40") + elastic_table(
        [{"time": t, "rank": 1, "code": code, "pid": 5102}, {"time": t, "rank": 2, "code": code, "pid": 5103}],
        {"time": t, "rank": 3, "code": code, "pid": 5104})
    rc = diagnosed(tmp_path, lines).root_cause
    assert rc is not None and (rc.kind, rc.ranks) == (kind, [3])


def test_an_earlier_record_still_wins_over_the_first_observed_one(tmp_path: Path) -> None:
    lines = progress([0, 1, 2, 3], t="20:30:40") + elastic_table(
        [{"time": "2024-12-18_20:31:01", "rank": 1, "code": 1, "pid": 5102}],
        {"time": "2024-12-18_20:31:02", "rank": 3, "code": 1, "pid": 5104})
    rc = diagnosed(tmp_path, lines).root_cause
    assert rc is not None and (rc.kind, rc.ranks) == ("crash", [1])
