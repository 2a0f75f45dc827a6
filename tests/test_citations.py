"""Every citation checks itself: each (file, line) a finding cites is read back and holds what the
finding says of it.

Over every sample run (sample_logs/*), every fixture run (tests/fixtures/*/*) and every real
artifact in ../shared/realdata the suite diagnoses: each evidence line of each finding is read
back from its file (the raw line, and the store's events of that line: the reader's reading of
it) and must hold
- the rank the citation names (a rank of that line),
- the time the citation names: the line's OWN time, to the millisecond (the time on the common
  clock, when the host's clock was moved, is `aligned_timestamp` beside it),
- the values the citation's text states of that line: its step (`step 228`, `at step 12`,
  `step=12`), `key=value` of a logged field, `comm / wait / data_load X ms`, `loss X`, and a
  `compute X ms` no larger than the step time the line logs (a part is not larger than its whole).
A value the line does not carry (a derived one, as compute) is only held to what the line does
carry; the test counts the values it checked and requires some in every run that cites steps.
"""
from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import re
from pathlib import Path

import polars as pl
import pytest

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.store import open_store

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "realdata"


def _runs() -> list[Path]:
    runs = [d for d in sorted((REPO / "sample_logs").iterdir()) if (d / "expected.toml").is_file()]
    runs += [d for g in sorted((REPO / "tests" / "fixtures").iterdir()) if g.is_dir()
             for d in sorted(g.iterdir()) if d.is_dir()]
    if REAL.is_dir():
        runs += sorted(p for p in (REAL / "console").iterdir() if p.suffix in (".log", ".out"))
        runs += sorted(d for d in (REAL / "flight_recorder").iterdir() if d.is_dir())
        runs += sorted(d for d in (REAL / "kineto").iterdir() if d.is_dir())
        runs += [REAL / "telemetry" / "nvidia_smi_8gpu.csv"]
    return runs


# as the real-data suite diagnoses it too: one node, rank i on GPU i
SMI_MAP = [f"{g}={g}" for g in range(8)]


def _params() -> list:
    out = [pytest.param(p, None, id=f"{p.parent.name}/{p.name}") for p in _runs()]
    if REAL.is_dir():
        out.append(pytest.param(REAL / "telemetry" / "nvidia_smi_8gpu.csv", SMI_MAP, id="telemetry/smi-gpu-map"))
    return out


def _raw_line(path: Path, n: int) -> str | None:
    """Line n (1-based) of a text file, None for a binary one (a pickled dump: its 'lines' are
    entries, read back through the store only)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if b"\0" in data[:4096] or data[:1] == b"\x80":
        return None
    lines = data.split(b"\n")
    assert 1 <= n <= len(lines), f"{path}:{n}: the file has {len(lines)} lines"
    return lines[n - 1].decode("utf-8", "replace")


_NUM = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
_UNIT = {"ms": 1.0, "s": 1000.0}


def _close(stated: str, actual: float, factor: float = 1.0) -> bool:
    """`stated` (as printed: its digits say how it was rounded) is `actual` rounded."""
    if actual is None or (isinstance(actual, float) and math.isnan(actual)):
        return False
    mant = stated.lower().split("e")[0]
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    exp = int(stated.lower().split("e")[1]) if "e" in stated.lower() else 0
    tol = 0.5 * 10 ** (exp - decimals) * factor
    value = float(stated) * factor
    # 3 significant digits (evidence.num) or the printed decimals, whichever is coarser
    return abs(value - actual) <= max(tol, 0.005 * abs(actual)) + 1e-9


def _claims(text: str) -> list[tuple[str, str, float]]:
    """(field, stated number, unit factor) the text states of its line."""
    out: list[tuple[str, str, float]] = []
    for m in re.finditer(r"\b(?:at |last )?step[ =](\d+)\b", text):
        out.append(("step", m.group(1), 1.0))
    for m in re.finditer(r"\b([a-z_]+)=" + _NUM, text):
        out.append((m.group(1), m.group(2), 1.0))
    for name, field in (("comm", "comm_ms"), ("wait", "wait_ms"), ("waits", "wait_ms"), ("data_load", "data_load_ms"),
                        ("compute", "compute_ms")):
        for m in re.finditer(rf"\b{name} {_NUM} (ms|s)\b", text):
            out.append((field, m.group(1), _UNIT[m.group(2)]))
    for m in re.finditer(r"\bloss " + _NUM, text):
        out.append(("loss", m.group(1), 1.0))
    return out


def _quotes(text: str | None, raw: str | None, rows: list[dict]) -> bool:
    """The text is the line's own message, quoted (`rank=3` in "waiting on rank=3" is what the
    line says, not a rank the finding claims)."""
    if not text:
        return False
    body = re.sub(r"^[A-Z][A-Z_]+: ", "", text).rstrip("…").strip()
    said = [" ".join(str(r.get("message") or "").split()) for r in rows]
    if raw is not None:
        said.append(" ".join(raw.split()))
    return bool(body) and any(body in s for s in said)


def _line_values(rows: list[dict], raw: str | None) -> dict:
    """The line's values: the reader's typed columns and fields, and a JSON line's own keys."""
    vals: dict = {}
    for r in rows:
        for k, v in r.items():
            if v is not None and k not in ("extra", "fields"):
                vals.setdefault(k, v)
        for blob in (r.get("fields"), r.get("extra")):
            if blob:
                try:
                    d = json.loads(blob)
                except ValueError:
                    continue
                if isinstance(d, dict):
                    for k, v in d.items():
                        vals.setdefault(k, v)
    if raw and raw.lstrip().startswith("{"):
        try:
            rec = json.loads(raw)
        except ValueError:
            rec = None
        if isinstance(rec, dict):
            for k, v in {**rec, **(rec.get("extra") if isinstance(rec.get("extra"), dict) else {})}.items():
                vals[k] = v
    return vals


def _ms(t: str | dt.datetime | None) -> int | None:
    if t is None:
        return None
    if isinstance(t, str):
        t = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return round(t.timestamp() * 1000)


def check_citations(store: Path, base: Path) -> tuple[list[str], int]:
    """Every citation of the store's diagnosis read back: (the faults found, values checked)."""
    run = open_store(store)
    report = diagnose(run)
    cited = {(e.source_file, e.line) for f in report.findings for e in f.lines}
    if not cited:
        return [], 0
    keys = pl.DataFrame({"source_file": [c[0] for c in cited], "line": [c[1] for c in cited]},
                        schema={"source_file": pl.String, "line": pl.Int64})
    events = (run.events().with_columns(pl.col("source_file").cast(pl.String))
              .join(keys.lazy(), on=["source_file", "line"]).collect())
    by_line: dict[tuple[str, int], list[dict]] = {}
    for r in events.iter_rows(named=True):
        by_line.setdefault((r["source_file"], r["line"]), []).append(r)
    faults: list[str] = []
    checked = 0
    for f in report.findings:
        for e in f.lines:
            where = f"{f.kind} [{e.source_file}:{e.line}] {e.text!r}"
            path = Path(e.source_file)
            path = path if path.is_absolute() else base / path
            if not path.is_file():
                faults.append(f"{where}: no such file")
                continue
            raw = _raw_line(path, e.line)
            rows = by_line.get((e.source_file, e.line), [])
            if not rows:
                faults.append(f"{where}: the line holds no event")
                continue
            vals = _line_values(rows, raw)
            ranks = {r["rank"] for r in rows if r["rank"] is not None}
            if isinstance(vals.get("rank"), int):
                ranks.add(vals["rank"])
            if e.rank is not None and e.rank not in ranks:
                faults.append(f"{where}: cites rank {e.rank}, the line is rank(s) {sorted(ranks)}")
            own = {_ms(r["timestamp"]) for r in rows if r["timestamp"] is not None}
            if e.timestamp is not None and _ms(e.timestamp) not in own:
                faults.append(f"{where}: cites time {e.timestamp}, the line's own time is "
                              f"{sorted(own) and dt.datetime.fromtimestamp(min(own) / 1000, dt.timezone.utc)}")
            for field, stated, factor in ([] if _quotes(e.text, raw, rows) else _claims(e.text or "")):
                actual = vals.get(field)
                if field == "compute_ms" and actual is None and isinstance(vals.get("step_time_ms"), (int, float)):
                    checked += 1
                    if float(stated) * factor > vals["step_time_ms"] * 1.005 + 0.5 * factor:
                        faults.append(f"{where}: compute {stated} is more than the step time the line logs "
                                      f"({vals['step_time_ms']} ms)")
                    continue
                if isinstance(actual, bool) or not isinstance(actual, (int, float)):
                    continue
                checked += 1
                if not _close(stated, float(actual), factor):
                    faults.append(f"{where}: states {field} {stated}, the line holds {actual}")
    return faults, checked


@pytest.mark.parametrize(("src", "gpu_map"), _params())
def test_every_citation_reads_back(src: Path, gpu_map: list[str] | None, tmp_path: Path) -> None:
    store = tmp_path / "run.forensics"
    ingest([str(src)], store, gpu_map=gpu_map)
    faults, _ = check_citations(store, Path.cwd())
    assert not faults, "\n".join(faults[:20])


def test_a_moved_clock_cites_the_lines_own_time_and_the_aligned_one_beside_it(tmp_path: Path) -> None:
    """realrun_varied/v1: a host's clock is off and moved to the common clock for the diagnosis;
    the citation prints the time written in the line, and the aligned time beside it."""
    from forensics.report.text import render_text

    store = tmp_path / "run.forensics"
    ingest([str(REPO / "tests" / "fixtures" / "realrun_varied" / "v1")], store)
    report = diagnose(open_store(store))
    moved = [e for f in report.findings for e in f.lines if e.aligned_timestamp]
    assert moved, "v1 has a host clock moved by the diagnosis"
    for e in moved:
        raw = _raw_line(Path(e.source_file), e.line)
        own = json.loads(raw)["timestamp"]
        assert _ms(e.timestamp) == _ms(own) != _ms(e.aligned_timestamp)
        assert e.to_json()["aligned_timestamp"] == e.aligned_timestamp
    plain = [e for f in report.findings for e in f.lines if not e.aligned_timestamp]
    assert all("aligned_timestamp" not in e.to_json() for e in plain)
    assert "(aligned " in render_text(report, width=200)


def test_own_times_cites_a_line_at_its_own_time_and_an_untimed_line_at_none() -> None:
    """evidence.own_times on in-memory events: the pass's time (a step's end) is replaced by the
    line's own; a line the log wrote without a time is cited without one (the pass's placement
    is not in the file)."""
    from forensics.passes.context import Context
    from forensics.passes.evidence import own_times
    from forensics.report.model import Evidence, Finding

    t0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    ctx = Context.from_frame(pl.DataFrame({
        "timestamp": [t0, None], "rank": [0, 1], "level": ["INFO", "ERROR"], "event": ["ALLREDUCE", "CUDA_OOM"],
        "source_file": ["a.jsonl", "console.log"], "line": [7, 3]}))
    f = Finding(rule="pass.x", kind="oom", layer="resource", severity="ERROR", ranks=[1], title="t", lines=[
        Evidence("a.jsonl", 7, rank=0, timestamp=(t0 + dt.timedelta(milliseconds=30)).isoformat()),
        Evidence("console.log", 3, rank=1, timestamp=(t0 + dt.timedelta(seconds=2)).isoformat())])
    own_times([f], ctx)
    assert _ms(f.lines[0].timestamp) == _ms(t0) and f.lines[0].aligned_timestamp is None
    assert f.lines[1].timestamp is None and f.lines[1].aligned_timestamp is None
