"""The HTML report of a big run: above ROW_BUDGET ranks the per-rank charts draw bins of
consecutive ranks, a bin's cell is the value of its rank farthest from the median (so a single
outlier, too high or too low, stays in sight), the highlighted ranks keep rows of their own, and
under the budget nothing changes. Also: the vectorised _step_matrix and fmt_nums against the
per-cell code they replace."""
from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from forensics.report.charts import ROW_BUDGET, fmt_num, fmt_nums, pick_outliers, rank_rows
from forensics.report.html import _data_load, _heatmap, _per_rank, _snapshot_bins, _step_matrix

N = 10_240
STEPS = 100
STRAGGLER = 7_777          # slow: the longest step time, the shortest wait
HOT = 4_242                # highlighted by a finding


def _steps(n: int = N, seed: int = 0) -> pl.DataFrame:
    """A synchronous job: every rank's step time ~800 ms (all wait for the slowest), waits
    ~120 ms; from step 40 the straggler computes 300 ms longer and waits ~0."""
    rng = np.random.default_rng(seed)
    rank = np.repeat(np.arange(n), STEPS)
    step = np.tile(np.arange(STEPS), n)
    late = (rank == STRAGGLER) & (step >= 40)
    return pl.DataFrame({
        "rank": rank, "step": step,
        "step_time_ms": rng.normal(800, 8, rank.size) + np.where(late, 300.0, 0.0),
        "wait_ms": np.where(late, rng.uniform(0, 2, rank.size), rng.normal(120, 6, rank.size)),
        "data_load_ms": rng.normal(20, 1, rank.size) + np.where(rank == STRAGGLER, 60.0, 0.0),
    })


def _attrs(svg_html: str) -> dict[str, str]:
    tag = re.search(r'<svg[^>]*class="heatmap"[^>]*>', svg_html).group(0)
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag))


@pytest.fixture(scope="module")
def big() -> pl.DataFrame:
    return _steps()


@pytest.mark.parametrize("col, high", [("step_time_ms", True), ("wait_ms", False)])
def test_one_outlier_rank_stays_visible_in_its_bin_at_10240_ranks(big: pl.DataFrame, col: str, high: bool) -> None:
    ranks = list(range(N))
    a = _attrs(_heatmap(big, col, "t", "hm", ranks, [HOT]))
    rows = a["data-rows"].split(",")
    nc = len(a["data-c0"].split(","))
    cells = a["data-v"].split(",")
    assert len(rows) <= ROW_BUDGET and len(cells) == len(rows) * nc
    assert int(a["height"]) < 800                      # one screen, not 30,000 px
    i = next(i for i, r in enumerate(rows) if "–" in r and int(r.split("–")[0]) <= STRAGGLER <= int(r.split("–")[1]))
    late = [cells[i * nc + c] for c in range(40, STEPS)]
    assert all(v.startswith(f"rank {STRAGGLER}: ") for v in late), late[:3]
    vals = [float(v.split(": ")[1]) for v in late]
    assert all(v > 1000 for v in vals) if high else all(v < 5 for v in vals)
    # the other bins show a value of the crowd, not the straggler's
    others = [float(cells[j * nc + 50].split(": ")[-1]) for j in range(len(rows)) if j != i]
    assert all(700 < v < 900 for v in others) if high else all(90 < v < 150 for v in others)


def test_highlighted_ranks_keep_their_own_marked_rows_in_rank_order(big: pl.DataFrame) -> None:
    page = _heatmap(big, "wait_ms", "t", "hm", list(range(N)), [HOT, 5])
    rows = _attrs(page)["data-rows"].split(",")
    assert "5" in rows and str(HOT) in rows
    assert "▶ 5<" in page and f"▶ {HOT}<" in page
    nc = len(_attrs(page)["data-c0"].split(","))
    own = _attrs(page)["data-v"].split(",")[rows.index("5") * nc]
    assert 90 < float(own) < 150                     # its own value, no "rank 5: " before it
    first = [int(r.split("–")[0]) for r in rows]
    last = [int(r.split("–")[-1]) for r in rows]
    assert first == sorted(first) and first[0] == 0 and last[-1] == N - 1
    assert all(b == a + 1 for a, b in zip(last, first[1:]))          # every rank in exactly one row


@pytest.mark.parametrize("n, hl", [(257, []), (300, [0, 299]), (4096, [17, 18, 4000]), (N, [3, 8, 9, 5000, 10_239]),
                                   (100_000, list(range(0, 80_000, 10_000)))])
def test_rank_rows_cover_every_rank_once_within_the_budget(n: int, hl: list[int]) -> None:
    rng = np.random.default_rng(n)
    ranks = np.sort(rng.choice(3 * n, n, replace=False))           # gaps: ranks that logged nothing
    hl = [int(ranks[i]) for i in hl]
    rows = rank_rows(ranks.tolist(), hl)
    assert rows.binned and rows.start.size <= ROW_BUDGET
    assert rows.start[0] == 0 and rows.stop[-1] == n and (rows.start[1:] == rows.stop[:-1]).all()
    assert (rows.stop - rows.start <= rows.per).all()
    assert rows.per <= 8 and 8 % rows.per == 0 or rows.per % 8 == 0     # whole 8-GPU nodes per bin
    single = {int(rows.ranks[a]) for a, b in zip(rows.start, rows.stop) if b - a == 1}
    assert set(hl) <= single


def test_under_the_budget_one_row_per_rank() -> None:
    rows = rank_rows(list(range(ROW_BUDGET)), [3])
    assert not rows.binned and rows.labels() == [str(r) for r in range(ROW_BUDGET)]


def test_pick_outliers_is_the_farthest_from_the_column_median_per_bin() -> None:
    rng = np.random.default_rng(1)
    n, nc = 1000, 7
    v = rng.normal(0, 1, (n, nc)).round(1)           # ties
    v[rng.random((n, nc)) < 0.2] = np.nan            # gaps
    v[:, 6] = np.nan                                 # a column without values
    v[100:140, 3] = np.nan                           # a bin without values in a column
    rows = rank_rows(list(range(n)), [], budget=50)
    out, who = pick_outliers(v, rows)
    med = np.nanmedian(v[:, :6], axis=0)
    for i, (a, b) in enumerate(zip(rows.start, rows.stop)):
        for c in range(nc):
            col = v[a:b, c]
            if np.isnan(col).all():
                assert math.isnan(out[i, c]) and who[i, c] == -1
                continue
            dev = np.abs(col - med[c])
            k = a + int(np.flatnonzero(dev == np.nanmax(dev))[0])      # ties: the lowest rank
            assert who[i, c] == k and out[i, c] == v[k, c]


def _step_matrix_loop(steps: pl.DataFrame, col: str, ranks: list[int]):
    """The per-row loop _step_matrix replaced."""
    d = steps.select("rank", "step", col).drop_nulls()
    s0, s1 = int(d["step"].min()), int(d["step"].max())
    per = max(1, math.ceil((s1 - s0 + 1) / 300))
    g = d.with_columns(((pl.col("step") - s0) // per).alias("c")).group_by("rank", "c").agg(pl.col(col).mean())
    values = np.full((len(ranks), (s1 - s0) // per + 1), np.nan)
    ri = {r: i for i, r in enumerate(ranks)}
    for r, c, v in g.iter_rows():
        if r in ri:
            values[ri[r], int(c)] = v
    return values


@pytest.mark.parametrize("seed", range(4))
def test_step_matrix_equals_the_row_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = 5000
    rank = rng.choice(range(0, 40, 3), m).tolist()                              # unsorted, gaps
    wait = rng.normal(100, 30, m).round(0).tolist()
    for i in rng.choice(m, 500, replace=False).tolist():                      # nulls
        rank[i] = None
        wait[(i * 7) % m] = None
    steps = pl.DataFrame({"rank": rank, "step": rng.integers(5, 5 + [50, 700, 3000, 1][seed], m),   # bins of steps
                          "wait_ms": wait}, schema={"rank": pl.Int64, "step": pl.Int64, "wait_ms": pl.Float64})
    ranks = sorted({int(r) for r in steps["rank"].drop_nulls()} - {6})        # a rank not asked for
    values, c0, c1 = _step_matrix(steps, "wait_ms", ranks)
    np.testing.assert_array_equal(values, _step_matrix_loop(steps, "wait_ms", ranks))


def test_fmt_nums_equals_fmt_num() -> None:
    rng = np.random.default_rng(2)
    v = np.concatenate([rng.lognormal(3, 3, 50_000) * rng.choice([-1, 1], 50_000),
                        np.arange(-400, 400) + 0.5,                               # halves: round half to even
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, 99.5, 99.95, 100.0, 9_999.5, 10_000.5, 1e15, 1e17, 1e-9]])
    ref = ["" if not math.isfinite(x) else fmt_num(x).replace(",", "") for x in v.tolist()]
    assert fmt_nums(v) == ref


def test_data_load_bars_keep_the_slow_loader_in_its_bin(big: pl.DataFrame) -> None:
    fig = _data_load(big, list(range(N)), [HOT])
    bars = re.findall(r"<rect class=\"bar[^\"]*\"[^>]*><title>([^<]*)</title>", fig)
    assert len(bars) <= ROW_BUDGET
    slow = [t for t in bars if f"rank {STRAGGLER}:" in t]
    assert len(slow) == 1 and float(re.search(r"median ([\d.]+)", slow[0]).group(1)) > 70
    assert f"rank {HOT}: median" in fig and 'class="bar hl"' in fig


def test_snapshot_bins_show_the_rank_silent_longest() -> None:
    n = 2000
    silent = np.full(n, 0.2)
    silent[1234] = 30.0
    table = pl.DataFrame({"rank": [*range(n), None], "silent_s": [*silent.tolist(), None],
                          "last_event": ["STEP"] * n + ["X"]}, schema={"rank": pl.Int64, "silent_s": pl.Float64,
                                                                      "last_event": pl.String})
    rows, row_of = _snapshot_bins(table, [7])
    assert rows.height <= ROW_BUDGET + 1 and rows["bin"][-1] == "no rank" and rows["rank"][-1] is None
    assert "rank 7" in rows["bin"].to_list()
    hit = rows.filter(pl.col("rank") == 1234)
    assert hit.height == 1 and "–" in hit["bin"][0]
    a, b = map(int, hit["bin"][0].split("–"))
    assert all(row_of[r] == 1234 for r in range(a, b + 1))      # the bin's events are drawn on its row


def test_per_rank_table_of_a_big_run_is_folded_with_the_highlighted_rows_in_sight() -> None:
    def page(n: int) -> str:     # the outline's columns and rows, which is all _per_rank reads
        return _per_rank(SimpleNamespace(columns=["rank", "step_time_ms"], rows=[[str(r), "800"] for r in range(n)]), [7])

    small, large = page(ROW_BUDGET), page(N)
    assert "<details>" not in small and small.count("<tr") == ROW_BUDGET + 1
    shown, folded = large.split("<details>")
    assert shown.count("<tr") == 2 and '<tr class="hl"><td class="num">7</td>' in shown
    assert folded.count("<tr") == N + 1
