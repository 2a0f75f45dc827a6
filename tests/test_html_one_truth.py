"""The HTML page says what the text and JSON say (issue 28 item 5): the last-10s panel from the
fields of `last-10s --format json`, the Flight Recorder table as an HTML table with every column,
and no empty "nothing to draw" boxes."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app

REPO = Path(__file__).resolve().parents[1]
FR = REPO.parent / "shared" / "realdata" / "flight_recorder" / "gpu_error_1st"
SAMPLES = REPO / "sample_logs"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))


def _html(logs: Path, tmp_path: Path) -> str:
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["diagnose", str(logs), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_text()


def _last10s(logs: Path) -> dict:
    r = CliRunner().invoke(app, ["last-10s", str(logs), "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _panel_rows(html: str) -> list[tuple[str, str]]:
    seg = html[html.index('id="snapshot"'):]
    seg = seg[:seg.index("</figure>")]
    labels = re.findall(r'text-anchor="end">(?:▶ )?(rank \d+|no rank|[\d–]+)</text>', seg)
    infos = re.findall(r'style="fill:#[0-9a-f]+">([^<]*)<title>', seg)
    assert len(labels) == len(infos)
    return list(zip(labels, infos))


def _check(html: str, snap: dict) -> None:
    rows = _panel_rows(html)
    assert len(rows) == len(snap["ranks"])
    for (label, info), r in zip(rows, snap["ranks"]):
        assert label == ("no rank" if r["rank"] is None else f"rank {r['rank']}")
        n = r["in_window"]
        if n:
            assert info.startswith(f"{n} event{'s' if n != 1 else ''} in the window"), (label, info, r)
            assert "no events" not in info
        else:
            assert "no events" in info, (label, info)
        if r["last_event"]:
            assert f"last {r['last_event']}" in info
        if r["last_ts"] is None and n:
            assert "(no time of its own)" in info


def test_last_10s_panel_matches_json_on_the_flight_recorder_run(tmp_path: Path) -> None:
    """Was: "no events at all" on all 16 ranks, while last-10s counts 20-56 events for each."""
    if not FR.exists():
        pytest.skip("../shared/realdata not present")
    html = _html(FR, tmp_path)
    snap = _last10s(FR)
    assert sum(r["in_window"] > 0 for r in snap["ranks"]) >= 14
    _check(html, snap)
    assert "no events at all" not in html


@pytest.mark.parametrize("sample", ["hang", "oom_cascade"])
def test_last_10s_panel_matches_json_on_samples(sample: str, tmp_path: Path) -> None:
    _check(_html(SAMPLES / sample, tmp_path), _last10s(SAMPLES / sample))


def test_the_flight_recorder_table_is_an_html_table_with_every_column(tmp_path: Path) -> None:
    if not FR.exists():
        pytest.skip("../shared/realdata not present")
    html = _html(FR, tmp_path)
    seg = html[html.index('id="flight-recorder"'):]
    assert seg.index("<table") < seg.index("</h2>") + 10
    heads = re.findall(r"<th>([^<]*)</th>", seg[:seg.index("</thead>")])
    assert {"desc", "dtype", "state", "file:entry"} <= set(heads)
    assert "not shown at 80 columns" not in html and "<pre>" not in seg[:seg.index("</table>")]


def test_empty_panels_are_left_out_and_named_once(tmp_path: Path) -> None:
    """A small run without step metrics used to show one "nothing to draw" box per plot."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for rank in (0, 1):
        (logs / f"rank_{rank}.jsonl").write_text("".join(
            json.dumps({"timestamp": f"2025-06-12T14:00:0{i}Z", "rank": rank, "event": "HEARTBEAT", "level": "INFO",
                        "message": f"alive {i}"}) + "\n" for i in range(4)))
    html = _html(logs, tmp_path)
    assert "nothing to draw" not in html
    assert html.count("Not drawn, nothing in the logs for them: ") == 1 and "Step time per rank" in html
    for fig in re.findall(r"<figure.*?</figure>", html, flags=re.S):
        assert "<svg" in fig or "<table" in fig or "<img" in fig, fig[:200]


def test_the_no_rank_row_says_what_last_10s_says(tmp_path: Path) -> None:
    """The DeepSpeed OOM log has lines without a rank: their row plotted dots and said "no events at all"."""
    log = REPO.parent / "shared" / "realdata" / "console" / "deepspeed_2rank_oom.log"
    if not log.exists():
        pytest.skip("../shared/realdata not present")
    snap = _last10s(log)
    assert any(r["rank"] is None and r["in_window"] for r in snap["ranks"])
    html = _html(log, tmp_path)
    _check(html, snap)
    no_rank = [info for label, info in _panel_rows(html) if label == "no rank"]
    assert no_rank and "no events" not in no_rank[0]


def test_a_finding_without_a_time_of_its_own_is_not_shown_at_its_placement(tmp_path: Path) -> None:
    """The DeepSpeed OOM traceback has no timestamp; its card said "12:36:39.000" (its placement)."""
    log = REPO.parent / "shared" / "realdata" / "console" / "deepspeed_2rank_oom.log"
    if not log.exists():
        pytest.skip("../shared/realdata not present")
    html = _html(log, tmp_path)
    assert "oom · rank 0 · named by its own error · no time of its own (after 12:36:39.000)" in html
