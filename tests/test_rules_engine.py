"""The rule engine: the expression parser, the compiler (every condition type, sustain windows,
joins), findings with their citations, and `check_rules` finding every kind of broken rule."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from forensics.errors import ForensicsError
from forensics.rules import check_rules, evaluate, load_rules
from forensics.rules import expr as X
from forensics.rules.spec import NUMERIC_COLUMNS, parse_rule
from forensics.schema import conform

T0 = datetime(2025, 6, 12, 14, 0, tzinfo=timezone.utc)

META = """id = "{id}"
title = "{title}"
level = "{level}"
layer = "physical"
kind = "thermal_throttling"
description = "test rule"
references = ["test"]
falsepositives = []
"""

EXAMPLES = """
[[examples]]
expect = "match"
events = [{ event = "X" }]

[[examples]]
expect = "no_match"
events = [{ event = "Y" }]
"""


def write_rule(d: Path, body: str, rid: str = "r", *, examples: str = EXAMPLES, title: str = "Test rule", level: str = "WARN") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{rid}.toml"
    p.write_text(META.format(id=rid, title=title, level=level) + body + examples)
    return p


def rule(tmp_path: Path, body: str, rid: str = "r"):
    r, errors = parse_rule(write_rule(tmp_path, body, rid))
    assert not errors, [str(e) for e in errors]
    assert r is not None
    return r


def events(rows: list[dict[str, Any]]) -> pl.LazyFrame:
    """Rows with `t` = seconds after T0 (None = no timestamp); rank 0, file f.jsonl, line = position."""
    out = []
    for i, r in enumerate(rows):
        r = dict(r)
        t = r.pop("t", i)
        out.append({"timestamp": None if t is None else T0 + timedelta(seconds=t), "rank": 0,
                    "source_file": "f.jsonl", "line": i + 1, **r})
    cols = list(dict.fromkeys(c for r in out for c in r))
    df = pl.DataFrame({c: [r.get(c) for r in out] for c in cols}, strict=False)
    if "level" in df.columns:
        df = df.with_columns(pl.col("level").cast(pl.String))
    return conform(df.lazy())  # type: ignore[return-value]


def series(metric: str, values: list[float], every: float = 5.0, start: float = 0.0, **fixed: Any) -> list[dict[str, Any]]:
    return [{"t": start + i * every, metric: v, **fixed} for i, v in enumerate(values)]


def matched(tmp_path: Path, body: str, rows: list[dict[str, Any]]):
    found = evaluate(events(rows), [rule(tmp_path, body)])
    assert len(found) <= 1
    return found[0] if found else None


# --- the expression language ----------------------------------------------------------------

def test_expr_folds_params_and_compiles_columns_and_per_rank_baselines() -> None:
    node = X.parse("0.9 * median(sm_clock_mhz) - offset / 2", {"offset": 10.0}, NUMERIC_COLUMNS)
    df = pl.DataFrame({"rank": [0, 0, 0, 1], "sm_clock_mhz": [1000.0, 1400.0, 1410.0, 500.0]})
    got = df.select(X.to_polars(node, "rank").alias("v"))["v"].to_list()
    assert got == pytest.approx([0.9 * 1400 - 5] * 3 + [0.9 * 500 - 5])
    assert X.constant(X.parse("fraction * theoretical", {"fraction": 0.3, "theoretical": 32000}, NUMERIC_COLUMNS)) == pytest.approx(9600)
    assert X.constant(X.parse("0.4 * step_time_ms", {}, NUMERIC_COLUMNS)) is None
    assert X.columns_of(X.parse("comm_ms + max(wait_ms)", {}, NUMERIC_COLUMNS)) == {"comm_ms", "wait_ms"}
    assert X.constant(X.parse("-(2 + 3) * 2", {}, NUMERIC_COLUMNS)) == -10


@pytest.mark.parametrize("text, why", [
    ("__import__('os').system('x')", "unexpected character"),
    ("open(step)", "unknown function"),
    ("nosuchcolumn * 2", "unknown name"),
    ("message * 2", "unknown name"),          # a text column is not a number
    ("2 +", "ends too early"),
    ("(2 + 3", "ends too early"),
    ("2 3", "after the end"),
    ("max(2)", "takes a column name"),
    ("", "empty"),
])
def test_expr_rejects_anything_outside_the_grammar(text: str, why: str) -> None:
    with pytest.raises(X.ExprError, match=why):
        X.parse(text, {}, NUMERIC_COLUMNS)


# --- condition types ------------------------------------------------------------------------

@pytest.mark.parametrize("cond, row, expect", [
    ('{ col = "temp_c", op = ">=", value = 90 }', {"temp_c": 90.0}, True),
    ('{ col = "temp_c", op = ">=", value = 90 }', {"temp_c": 89.9}, False),
    ('{ col = "temp_c", op = ">", value = 90 }', {"temp_c": 90.0}, False),
    ('{ col = "gpu_util", op = "<", value = 60 }', {"gpu_util": 59.0}, True),
    ('{ col = "gpu_util", op = "<=", value = 60 }', {"gpu_util": 60.0}, True),
    ('{ col = "gpu_util", op = "<", value = 60 }', {"gpu_util": 60.0}, False),
    ('{ col = "event", op = "==", value = "CUDA_OOM" }', {"event": "CUDA_OOM"}, True),
    ('{ col = "event", op = "!=", value = "CUDA_OOM" }', {"event": "CUDA_OOM"}, False),
    ('{ col = "step", op = "==", value = 7 }', {"step": 7}, True),
    ('{ col = "level", op = "==", value = "ERROR" }', {"level": "ERROR"}, True),
    ('{ col = "level", op = "in", value = ["WARN", "ERROR"] }', {"level": "INFO"}, False),
    ('{ col = "collective", op = "in", value = ["allreduce", "allgather"] }', {"collective": "allgather"}, True),
    ('{ col = "collective", op = "not_in", value = ["allreduce"] }', {"collective": "broadcast"}, True),
    ('{ col = "collective", op = "not_in", value = ["allreduce"] }', {"collective": "allreduce"}, False),
    ('{ col = "rank", op = "in", value = [0, 3] }', {"rank": 3}, True),
    ('{ col = "message", op = "contains", value = "out of memory" }', {"message": "CUDA out of memory. Tried"}, True),
    ('{ col = "message", op = "contains", value = "a.c" }', {"message": "abc"}, False),   # literal, not a regex
    ('{ col = "message", op = "regex", value = "^rank=\\\\d+ waiting on rank=3" }', {"message": "rank=1 waiting on rank=3 for 1800s"}, True),
    ('{ col = "message", op = "regex", value = "^rank=\\\\d+ waiting on rank=3" }', {"message": "rank=1 waiting on rank=2"}, False),
    ('{ col = "throttle_reasons", op = "bits", value = 0x40 }', {"throttle_reasons": 0x44}, True),
    ('{ col = "throttle_reasons", op = "bits", value = 0x40 }', {"throttle_reasons": 0x24}, False),
    ('{ col = "threshold", op = "is_null" }', {"threshold": None, "loss": 1.0}, True),
    ('{ col = "threshold", op = "not_null" }', {"threshold": 10.0}, True),
    ('{ col = "loss", op = "not_finite" }', {"loss": float("nan")}, True),
    ('{ col = "loss", op = "not_finite" }', {"loss": float("inf")}, True),
    ('{ col = "loss", op = "not_finite" }', {"loss": 2.3}, False),
    ('{ col = "grad_norm", op = ">", expr = "threshold" }', {"grad_norm": 45.6, "threshold": 10.0}, True),
    ('{ col = "grad_norm", op = ">", expr = "threshold" }', {"grad_norm": 4.6, "threshold": 10.0}, False),
    ('{ col = "comm_ms", op = ">", expr = "0.4 * step_time_ms" }', {"comm_ms": 2000.0, "step_time_ms": 4000.0}, True),
    ('{ col = "extra.fan_rpm", op = "<", value = 1000 }', {"extra": '{"fan_rpm": 300}'}, True),
    ('{ col = "extra.fan_rpm", op = "<", value = 1000 }', {"extra": '{"fan_rpm": 3000}'}, False),
    ('{ col = "fields.model_name", op = "contains", value = "lora" }', {"fields": '{"model_name": "llama3-lora"}'}, True),
])
def test_every_condition_type(tmp_path: Path, cond: str, row: dict[str, Any], expect: bool) -> None:
    body = f'[match]\nall = [{cond}]\n'
    f = matched(tmp_path, body, [{"event": "E", **row}])
    assert (f is not None) is expect


def test_groups_nest_with_kleene_logic(tmp_path: Path) -> None:
    body = """[match]
event = "GPU_STATS"
any = [
    { col = "temp_c", op = ">=", value = 90 },
    { all = [{ col = "sm_clock_mhz", op = "<", value = 1300 }, { col = "power_w", op = ">", value = 300 }] },
]
"""
    assert matched(tmp_path, body, [{"event": "GPU_STATS", "temp_c": 70.0, "sm_clock_mhz": 1200.0, "power_w": 350.0}])
    assert not matched(tmp_path, body, [{"event": "GPU_STATS", "temp_c": 70.0, "sm_clock_mhz": 1200.0, "power_w": 250.0}])
    assert not matched(tmp_path, body, [{"event": "GPU_STATS", "sm_clock_mhz": 1200.0}])       # power unknown
    assert not matched(tmp_path, body, [{"event": "OTHER", "temp_c": 99.0}])                   # event filter


# --- sustain windows ----------------------------------------------------------------------------

UTIL = """[threshold]
event = "GPU_STATS"
metric = "gpu_util"
op = "<"
value = 60
sustain = "5m"
per = "rank"
"""


def gpu(values: list[float], every: float = 5.0, start: float = 0.0, rank: int = 0) -> list[dict[str, Any]]:
    return series("gpu_util", values, every, start, event="GPU_STATS", rank=rank)


def test_sustain_needs_the_whole_window(tmp_path: Path) -> None:
    assert matched(tmp_path, UTIL, gpu([40.0] * 61))               # 0 .. 300 s
    assert not matched(tmp_path, UTIL, gpu([40.0] * 60))           # 0 .. 295 s


def test_one_good_sample_breaks_the_window(tmp_path: Path) -> None:
    assert not matched(tmp_path, UTIL, gpu([40.0] * 40 + [95.0] + [40.0] * 40))
    assert matched(tmp_path, UTIL, gpu([95.0] * 5 + [40.0] * 61 + [95.0] * 5))


def test_rows_without_the_metric_neither_break_nor_extend_a_window(tmp_path: Path) -> None:
    rows = gpu([40.0] * 61)
    # TRAIN_STEP lines in between carry no gpu_util (and are filtered by event anyway); a GPU_STATS
    # line without the metric is unknown, not "good"
    rows.insert(30, {"t": 150.5, "event": "GPU_STATS", "temp_c": 70.0})
    assert matched(tmp_path, UTIL, rows)


def test_a_gap_longer_than_the_window_ends_the_episode(tmp_path: Path) -> None:
    assert not matched(tmp_path, UTIL, [{"t": 0, "event": "GPU_STATS", "gpu_util": 40.0},
                                        {"t": 600, "event": "GPU_STATS", "gpu_util": 40.0}])
    body = UTIL + 'max_gap = "20m"\n'
    assert matched(tmp_path, body, [{"t": 0, "event": "GPU_STATS", "gpu_util": 40.0},
                                    {"t": 600, "event": "GPU_STATS", "gpu_util": 40.0}])


def test_windows_are_per_rank(tmp_path: Path) -> None:
    # rank 0 low for the second half, rank 1 for the first: in (rank, time) order the two low
    # stretches touch, 5 minutes of low utilisation in total, but on no single rank
    rows = gpu([95.0] * 31, rank=0) + gpu([40.0] * 30, start=155.0, rank=0)
    rows += gpu([40.0] * 31, rank=1) + gpu([95.0] * 30, start=155.0, rank=1)
    assert not matched(tmp_path, UTIL, rows)
    rows += gpu([40.0] * 61, rank=4)
    f = matched(tmp_path, UTIL, rows)
    assert f is not None and f.ranks == [4]


def test_sustain_in_steps(tmp_path: Path) -> None:
    body = """[match]
all = [{ col = "grad_norm_adapter", op = "<", value = 1e-5 }]
sustain = "100 steps"
"""
    rows = [{"t": i, "event": "TRAIN_STEP", "step": 1000 + 10 * i, "grad_norm_adapter": 1.2e-6} for i in range(11)]
    assert matched(tmp_path, body, rows)                          # steps 1000 .. 1100
    assert not matched(tmp_path, body, rows[:10])                 # steps 1000 .. 1090


def test_by_step_sums_collectives_before_comparing(tmp_path: Path) -> None:
    body = """[match]
by = "step"
sum = ["comm_ms"]
all = [{ col = "comm_ms", op = ">", expr = "0.4 * step_time_ms" }]
"""
    rows = [{"event": "ALLREDUCE", "step": 5, "comm_ms": 900.0, "t": 0},
            {"event": "ALLREDUCE", "step": 5, "comm_ms": 900.0, "t": 1},
            {"event": "TRAIN_STEP", "step": 5, "step_time_ms": 4000.0, "t": 3}]
    f = matched(tmp_path, body, rows)
    assert f is not None
    assert f.evidence["worst"]["comm_ms"] == 1800.0 and f.evidence["worst"]["step_time_ms"] == 4000.0
    assert f.lines[0].line == 3                                   # the step's own line is cited
    rows[1]["comm_ms"] = 600.0
    assert not matched(tmp_path, body, rows)


def test_per_rank_baseline_from_the_rank_itself(tmp_path: Path) -> None:
    body = """[match]
all = [{ col = "sm_clock_mhz", op = "<", expr = "0.9 * median(sm_clock_mhz)" }]
"""
    fast = series("sm_clock_mhz", [1980.0] * 10, rank=0)
    slow_gpu = series("sm_clock_mhz", [1410.0] * 10, rank=1)      # another GPU model: its own baseline
    assert not matched(tmp_path, body, fast + slow_gpu)
    dropped = series("sm_clock_mhz", [1410.0] * 10 + [1200.0], rank=2)
    f = matched(tmp_path, body, fast + slow_gpu + dropped)
    assert f is not None and f.ranks == [2]


# --- joins ----------------------------------------------------------------------------------------

JOINT = UTIL + """
[[join]]
metric = "disk_read_mbps"
op = "<"
value = 200
within = "1m"
"""


def disk(values: list[float], every: float = 10.0, start: float = 0.0, rank: int = 0) -> list[dict[str, Any]]:
    return series("disk_read_mbps", values, every, start, event="DATA_LOAD_TIME", rank=rank)


def test_joint_rule_needs_both_on_the_same_rank_near_in_time(tmp_path: Path) -> None:
    f = matched(tmp_path, JOINT, gpu([55.0] * 61, rank=12) + disk([40.0] * 31, rank=12))
    assert f is not None and f.ranks == [12]
    assert f.evidence["joined"][0]["worst"]["disk_read_mbps"] == 40.0
    cited = {(e.rank, e.text.split()[0]) for e in f.lines}
    assert (12, "GPU_STATS") in cited and (12, "DATA_LOAD_TIME") in cited
    # low utilisation alone, or a slow disk alone, is not the joint condition
    assert not matched(tmp_path, JOINT, gpu([55.0] * 61, rank=12) + disk([1200.0] * 31, rank=12))
    assert not matched(tmp_path, JOINT, gpu([95.0] * 61, rank=12) + disk([40.0] * 31, rank=12))
    # both, but on different ranks
    assert not matched(tmp_path, JOINT, gpu([55.0] * 61, rank=3) + disk([40.0] * 31, rank=12))
    # both on rank 12, slow reads ending 2 minutes before the GPU went idle (within = 1m)
    assert not matched(tmp_path, JOINT, disk([40.0] * 3, rank=12) + gpu([55.0] * 61, start=140.0, rank=12))
    assert matched(tmp_path, JOINT, disk([40.0] * 3, rank=12) + gpu([55.0] * 61, start=70.0, rank=12))


# --- findings and their citations -----------------------------------------------------------------

def test_finding_names_ranks_values_and_cites_first_and_worst_lines(tmp_path: Path) -> None:
    body = '[match]\nall = [{ col = "temp_c", op = ">=", value = 90 }]\n'
    rows = [{"event": "GPU_STATS", "rank": 6, "temp_c": v, "t": i} for i, v in enumerate([85.0, 91.0, 95.5, 92.0])]
    rows += [{"event": "GPU_STATS", "rank": 2, "temp_c": 90.0, "t": 10}]
    f = matched(tmp_path, body, rows)
    assert f is not None
    assert (f.rule, f.kind, f.layer, f.severity, f.ranks) == ("r", "thermal_throttling", "physical", "WARN", [2, 6])
    assert f.evidence["worst"] == {"rank": 6, "timestamp": "2025-06-12T14:00:02.000Z", "temp_c": 95.5}
    assert f.evidence["threshold"] == 90
    assert [e.where for e in f.lines][:2] == ["f.jsonl:2", "f.jsonl:3"]      # first, then worst
    assert "f.jsonl:5" in [e.where for e in f.lines]                          # rank 2's first
    assert f.first_seen == "2025-06-12T14:00:01.000Z" and f.last_seen == "2025-06-12T14:00:10.000Z"
    assert "95.5" in f.title and "rank" in f.title
    per = {p["rank"]: p for p in f.evidence["per_rank"]}
    assert per[6]["samples"] == 3 and per[6]["worst"] == 95.5 and per[2]["samples"] == 1


def test_lines_without_time_or_rank(tmp_path: Path) -> None:
    body = '[match]\nevent = "CUDA_OOM"\n'
    rows = [{"event": "CUDA_OOM", "t": None, "rank": 3, "message": "CUDA out of memory"},
            {"event": "CUDA_OOM", "t": None, "rank": None, "message": "CUDA out of memory"}]
    f = matched(tmp_path, body, rows)
    # a console line without a timestamp is still evidence; a line without a rank is not put on rank 0
    assert f is not None and f.ranks == [3] and f.first_seen is None and f.lines[0].where == "f.jsonl:1"


def test_no_rows_no_finding_and_all_rules_in_one_call(tmp_path: Path) -> None:
    a = rule(tmp_path / "a", '[match]\nevent = "CUDA_OOM"\n', "a")
    b = rule(tmp_path / "b", '[match]\nevent = "NCCL_TIMEOUT"\n', "b")
    rows = [{"event": "NCCL_TIMEOUT", "rank": 1, "t": 5}, {"event": "CUDA_OOM", "rank": 3, "t": 4}]
    found = evaluate(events(rows), [a, b])
    assert [(f.rule, f.ranks) for f in found] == [("a", [3]), ("b", [1])]     # ordered by first seen
    assert evaluate(events([{"event": "TRAIN_STEP"}]), [a, b]) == []
    assert evaluate(events([]), [a, b]) == []


# --- check_rules: every error, with file and key ----------------------------------------------------

def keys(errors) -> set[tuple[str, str]]:
    return {(Path(e.file).name, e.key) for e in errors}


def test_check_reports_every_error_with_file_and_key(tmp_path: Path) -> None:
    d = tmp_path / "rules"
    d.mkdir()
    (d / "stem.toml").write_text(META.format(id="other_id", title="t", level="FATAL") + """
[match]
all = [
    { col = "tempc", op = ">=", value = 90 },
    { col = "temp_c", op = "=~", value = 90 },
    { col = "temp_c", op = ">", value = "hot" },
    { col = "message", op = "regex", value = "(unclosed" },
    { col = "temp_c", op = "contains", value = "x" },
    { col = "temp_c", op = ">", expr = "undefined_param * 2" },
]
sustain = "5 minutes"
""" + EXAMPLES)
    (d / "missing.toml").write_text('id = "missing"\ntitle = "t"\n[match]\nevent = "X"\n' + EXAMPLES)
    (d / "order.toml").write_text(META.replace('level = "{level}"\nlayer = "physical"\n', 'layer = "physical"\nlevel = "{level}"\n')
                                  .format(id="order", title="t", level="WARN") + '[match]\nevent = "X"\n' + EXAMPLES)
    (d / "broken.toml").write_text('id = "broken"\ntitle = "unterminated\n')
    write_rule(d, '[match]\nevent = "X"\n', "onlymatch", examples='\n[[examples]]\nexpect = "match"\nevents = [{ event = "X" }]\n')
    write_rule(d, '[threshold]\nmetric = "gpu_util"\nop = "<"\nvalue = 60\n\n[[join]]\nmetric = "disk_read_mbps"\nop = "<"\nvalue = 1\n', "nowithin")
    write_rule(d, '[match]\nevent = "X"\nby = "minute"\nper = "host"\n', "badkeys")
    write_rule(d, '[match]\nevent = "X"\n[surprise]\na = 1\n', "extra_section")
    errors = check_rules([d])
    got = keys(errors)
    expected = {
        ("stem.toml", "id"), ("stem.toml", "level"),
        ("stem.toml", "match.all[0].col"), ("stem.toml", "match.all[1].op"), ("stem.toml", "match.all[2].value"),
        ("stem.toml", "match.all[3].value"), ("stem.toml", "match.all[4].op"), ("stem.toml", "match.all[5].expr"),
        ("stem.toml", "match.sustain"),
        ("missing.toml", "level"), ("missing.toml", "layer"), ("missing.toml", "kind"), ("missing.toml", "description"),
        ("missing.toml", "references"), ("missing.toml", "falsepositives"),
        ("order.toml", "id"),
        ("broken.toml", ""),
        ("onlymatch.toml", "examples"),
        ("nowithin.toml", "join[0].within"),
        ("badkeys.toml", "match.by"), ("badkeys.toml", "match.per"),
        ("extra_section.toml", "surprise"),
    }
    assert expected <= got, sorted(expected - got)
    msgs = {(Path(e.file).name, e.key): e.message for e in errors}
    assert "must equal the file stem" in msgs[("stem.toml", "id")]
    assert "unknown column 'tempc'" in msgs[("stem.toml", "match.all[0].col")]
    assert "unknown operator" in msgs[("stem.toml", "match.all[1].op")]
    assert "unclosed group" in msgs[("stem.toml", "match.all[3].value")]
    assert "undefined_param" in msgs[("stem.toml", "match.all[5].expr")]
    assert "order" in msgs[("order.toml", "id")]
    assert "not valid TOML" in msgs[("broken.toml", "")]
    # str(RuleError) is the file:key: message line `forensics rules check` prints
    assert any(str(e).endswith("stem.toml:match.sustain: cannot read duration '5 minutes' (use ms, s, m, h or steps)") for e in errors)


def test_check_runs_the_examples_through_the_compiler(tmp_path: Path) -> None:
    body = '[threshold]\nmetric = "temp_c"\nop = ">="\nvalue = 90\n'
    wrong = """
[[examples]]
expect = "match"
events = [{ event = "GPU_STATS", temp_c = 80.0 }]

[[examples]]
expect = "no_match"
events = [{ event = "GPU_STATS", temp_c = 95.0 }]

[[examples]]
expect = "match"
ranks = [1]
events = [{ event = "GPU_STATS", rank = 2, temp_c = 95.0 }]

[[examples]]
expect = "match"
events = [{ event = "GPU_STATS", temp_c = "hot" }]
"""
    write_rule(tmp_path, body, "hot", examples=wrong)
    errors = check_rules([tmp_path])
    msgs = {e.key: e.message for e in errors}
    assert "did not match" in msgs["examples[0]"]
    assert "expected no match" in msgs["examples[1]"]
    assert "expected ranks [1], matched ranks [2]" in msgs["examples[2]"]
    assert "temp_c" in msgs["examples[3].events"]
    right = """
[[examples]]
expect = "match"
events = [{ event = "GPU_STATS", temp_c = 90.0 }]

[[examples]]
expect = "no_match"
events = [{ event = "GPU_STATS", temp_c = 85.0 }]

[[examples]]
expect = "match"
ranks = [2]
events = [{ event = "GPU_STATS", rank = 2, temp_c = 95.0 }]
"""
    write_rule(tmp_path, body, "hot", examples=right)
    assert check_rules([tmp_path]) == []


def test_duplicate_ids_in_one_folder_but_a_later_folder_overrides(tmp_path: Path) -> None:
    write_rule(tmp_path / "a" / "gpu", '[match]\nevent = "X"\n', "same", title="first")
    write_rule(tmp_path / "a" / "other", '[match]\nevent = "X"\n', "same", title="second")
    errors = check_rules([tmp_path / "a"])
    assert [e.key for e in errors] == ["id"] and "also used by" in errors[0].message
    write_rule(tmp_path / "base", '[match]\nevent = "X"\n', "same", title="shipped")
    write_rule(tmp_path / "mine", '[match]\nevent = "X"\n', "same", title="tuned")
    rules = load_rules([tmp_path / "base", tmp_path / "mine"])
    assert [(r.id, r.title) for r in rules] == [("same", "tuned")]


def test_load_rules_refuses_a_broken_set_with_one_error_block(tmp_path: Path) -> None:
    write_rule(tmp_path, '[match]\nall = [{ col = "nope", op = ">", value = 1 }]\n', "bad")
    with pytest.raises(ForensicsError) as e:
        load_rules([tmp_path])
    assert e.value.code == "F400"
    assert "bad.toml:match.all[0].col" in e.value.render()
    with pytest.raises(ForensicsError, match="no such rule folder"):
        load_rules([tmp_path / "nowhere"])


def test_ranks_are_affected_names_victims_not_culprits(tmp_path: Path) -> None:
    body = 'ranks_are = "affected"\n[match]\nevent = ["NCCL_TIMEOUT"]\n'
    rows = [{"event": "NCCL_TIMEOUT", "rank": 0}, {"event": "NCCL_TIMEOUT", "rank": 0}]
    f = matched(tmp_path, body, rows)
    assert f is not None and f.ranks == [] and f.victims == [0]
    f = matched(tmp_path / "b", '[match]\nevent = ["NCCL_TIMEOUT"]\n', rows)
    assert f is not None and f.ranks == [0] and f.victims == []


def test_ranks_are_takes_only_known_values(tmp_path: Path) -> None:
    _, errors = parse_rule(write_rule(tmp_path, 'ranks_are = "culprits"\n[match]\nevent = ["X"]\n'))
    assert [e.key for e in errors] == ["ranks_are"]


# --- the census (forensics.rules.plan) changes where rules look, never what they find -------------

import dataclasses  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402

# One rule of each shape the engine evaluates differently: per row, baselines, per step, joins,
# text and JSON keys, sustain in time and in steps, gaps, conditions true on missing values.
CENSUS_RULES = {
    "util": '[threshold]\nevent = "GPU_STATS"\nmetric = "gpu_util"\nop = "<"\nvalue = 60\nsustain = "10s"\n',
    "gap": '[threshold]\nmetric = "gpu_util"\nop = "<"\nvalue = 90\nsustain = "10s"\nmax_gap = "8s"\n',
    "hot": '[match]\nany = [{ col = "temp_c", op = ">=", value = 90 }, { col = "throttle_reasons", op = "bits", value = 0x40 }]\n',
    "clock": ('[match]\nall = [{ col = "sm_clock_mhz", op = "<", expr = "0.9 * median(sm_clock_mhz)" },\n'
              '       { col = "sm_clock_mhz", op = ">=", expr = "0.5 * median(sm_clock_mhz)" }]\nsustain = "1s"\n'),
    "clock_hot": '[match]\nall = [{ col = "sm_clock_mhz", op = "<", expr = "0.95 * median(sm_clock_mhz)" }, { col = "temp_c", op = ">", value = 80 }]\n',
    "util_clock_hot": '[match]\nall = [{ col = "gpu_util", op = "<", expr = "0.05 * max(sm_clock_mhz)" }, { col = "temp_c", op = ">", value = 80 }]\n',
    "util_vs_clock": '[match]\nevent = "GPU_STATS"\nall = [{ col = "gpu_util", op = "<", expr = "0.05 * max(sm_clock_mhz)" }]\n',
    "clock_or": '[match]\nany = [{ col = "sm_clock_mhz", op = "<", expr = "0.95 * max(sm_clock_mhz)" }, { col = "temp_c", op = "<", value = 75 }]\n',
    "share": ('[match]\nby = "step"\nsum = ["comm_ms"]\nall = [{ col = "comm_ms", op = ">", expr = "0.4 * step_time_ms" }]\n'
              'sustain = "2 steps"\n'),
    "slow_step": '[match]\nby = "step"\nall = [{ col = "step_time_ms", op = ">", expr = "1.1 * median(step_time_ms)" }]\n',
    "step_text": '[match]\nby = "step"\nsum = ["comm_ms"]\nall = [{ col = "comm_ms", op = ">", value = 50 }, { col = "event", op = "==", value = "TRAIN_STEP" }]\n',
    "oom": '[match]\nany = [{ col = "event", op = "==", value = "CUDA_OOM" }, { col = "message", op = "contains", value = "out of memory" }]\n',
    "grad": ('[match]\nany = [{ col = "grad_norm", op = ">", expr = "threshold" },\n'
             '       { all = [{ col = "event", op = "==", value = "GRAD_NORM" }, { col = "level", op = "in", value = ["WARN", "ERROR"] }] }]\n'),
    "no_threshold": '[match]\nevent = ["GRAD_NORM", "TRAIN_STEP"]\nall = [{ col = "threshold", op = "is_null" }]\nsustain = "3 steps"\n',
    "nan": '[match]\nall = [{ col = "loss", op = "not_finite" }]\n',
    "json": '[match]\nall = [{ col = "extra.k", op = ">", value = 5 }, { col = "fields.tag", op = "not_in", value = ["ok"] }]\n',
    "coll": '[match]\nevent = "ALLREDUCE"\nall = [{ col = "collective", op = "not_in", value = ["allreduce"] }, { col = "message", op = "regex", value = "^slow" }]\n',
    "timeout": '[match]\nevent = ["NCCL_TIMEOUT"]\n',
    "joint": ('[threshold]\nmetric = "gpu_util"\nop = "<"\nvalue = 70\nsustain = "10s"\n\n'
              '[[join]]\nmetric = "temp_c"\nop = ">"\nvalue = 85\nwithin = "20s"\n'),
}


def random_run(seed: int) -> pl.LazyFrame:
    """A few ranks of mixed events: values missing, NaN, tied line numbers in two files, lines
    without a time or a rank; how often a condition holds varies from seed to seed."""
    rnd = random.Random(seed)
    hot, bad = rnd.random(), rnd.random()
    rows: list[dict[str, Any]] = []
    for rank in [*range(rnd.randint(1, 6)), None]:
        t = rnd.uniform(0, 5)
        for i in range(rnd.randint(0, 120)):
            t += rnd.choice([0.0, 0.5, 1.0, 2.0, 4.0])
            ev = rnd.choice(["GPU_STATS", "GPU_STATS", "ALLREDUCE", "TRAIN_STEP", "GRAD_NORM", "CUDA_OOM", "NCCL_TIMEOUT", "X"])
            r: dict[str, Any] = {"event": ev, "rank": rank, "line": rnd.randint(1, 60), "t": None if rnd.random() < 0.05 else t,
                                 "source_file": rnd.choice(["a.jsonl", "b.log"]), "step": None if rnd.random() < 0.1 else int(t // 6),
                                 "level": rnd.choice(["INFO", "INFO", "WARN", "ERROR"])}
            maybe = lambda p: rnd.random() < p  # noqa: E731
            if ev == "GPU_STATS":
                r |= {"gpu_util": rnd.choice([None, rnd.uniform(0, 100) if maybe(bad) else rnd.uniform(80, 100)]),
                      "temp_c": None if maybe(0.2) else rnd.uniform(70, 100) if maybe(hot) else rnd.uniform(60, 85),
                      "sm_clock_mhz": rnd.choice([None, 1400.0, 1400.0, rnd.uniform(500, 1500)]),
                      "throttle_reasons": rnd.choice([0, 0x40, 0x44, None])}
            elif ev == "ALLREDUCE":
                r |= {"comm_ms": rnd.choice([None, rnd.uniform(0, 100)]), "collective": rnd.choice(["allreduce", "broadcast"]),
                      "message": rnd.choice(["slow ring", "ok", None])}
            elif ev == "TRAIN_STEP":
                r |= {"step_time_ms": rnd.uniform(80, 200), "loss": rnd.choice([1.0, float("nan"), float("inf"), None]),
                      "grad_norm": rnd.uniform(0, 20), "threshold": rnd.choice([None, 10.0]), "comm_ms": rnd.choice([None, 30.0])}
            elif ev == "GRAD_NORM":
                r |= {"grad_norm": rnd.uniform(0, 20), "threshold": rnd.choice([None, 10.0])}
            else:
                r |= {"message": rnd.choice(["CUDA out of memory. Tried", "fine", None]),
                      "extra": json.dumps({"k": rnd.randint(0, 10)}) if maybe(0.5) else None,
                      "fields": json.dumps({"tag": rnd.choice(["ok", "bad"])}) if maybe(0.5) else None}
            rows.append(r)
    out = [{**{k: v for k, v in r.items() if k != "t"}, "timestamp": None if r["t"] is None else T0 + timedelta(seconds=r["t"])}
           for r in rows]
    return conform(pl.DataFrame(out, strict=False, infer_schema_length=None).lazy()) if out else events([])  # type: ignore[return-value]


@pytest.fixture(scope="module")
def census_rules(tmp_path_factory: pytest.TempPathFactory) -> list:
    d = tmp_path_factory.mktemp("census")
    return [rule(d / rid, body, rid) for rid, body in CENSUS_RULES.items()]


@pytest.mark.parametrize("seed", range(12))
def test_census_finds_what_every_rule_finds_over_all_the_events(census_rules: list, seed: int) -> None:
    """Each rule over all the events (its definition) against the census and the rows it fetches."""
    run = random_run(seed)
    def text(found: list) -> list[str]:     # NaN values compare equal as text
        return [json.dumps(dataclasses.asdict(f), sort_keys=True, default=str) for f in found]

    direct = text(evaluate(run, census_rules, census=False))
    assert text(evaluate(run, census_rules)) == direct
    assert seed > 2 or direct          # the generator does make rules match


def test_census_bounds_per_rank_baselines_and_per_step_values(census_rules: list) -> None:
    """Where a clause can hold: exact for baselines, per step, and within a sustain span."""
    from forensics.rules.plan import census

    rows = series("sm_clock_mhz", [1400.0] * 9 + [1200.0], every=1.0, rank=0)      # rank 0 drops
    rows += series("sm_clock_mhz", [1400.0] * 10, every=1.0, rank=1)               # rank 1 steady
    rows += [{"t": 1, "rank": 2, "event": "ALLREDUCE", "step": 1, "comm_ms": 30.0},
             {"t": 2, "rank": 2, "event": "ALLREDUCE", "step": 1, "comm_ms": 30.0},   # 60 ms in all
             {"t": 3, "rank": 2, "event": "TRAIN_STEP", "step": 1, "step_time_ms": 100.0}]
    by_id = {r.id: r for r in census_rules}
    got = census(events(rows), [by_id["clock_or"], by_id["share"]])
    n = dict(zip(got["rank"].to_list(), zip(got["_c0_0_n"].to_list(), got["_c1_0_n"].to_list())))
    assert n[0][0] == 1 and n.get(1, (0, 0))[0] == 0       # the rank's own max, not every row with a clock
    assert n[2][1] == 1                                     # 60 > 0.4 * 100 only once the step's rows are summed


def test_census_keeps_the_rows_that_end_an_episode_through_a_baseline(census_rules: list) -> None:
    """A row where the baseline comparison is false and the other condition unknown is false
    (Kleene), so it ends the episode: the rows the census fetches must include it."""
    rule_ = next(r for r in census_rules if r.id == "util_clock_hot")
    hit = {"event": "GPU_STATS", "gpu_util": 10.0, "sm_clock_mhz": 1400.0, "temp_c": 90.0}
    rows = [{"t": 0, **hit}, {"t": 1, "event": "GPU_STATS", "gpu_util": 90.0}, {"t": 2, **hit}]
    for census in (False, True):
        (f,) = evaluate(events(rows), [rule_], census=census)
        assert f.evidence["episodes"] == 2


@pytest.mark.parametrize("op, value", [("==", "WARN"), ("!=", "WARN"), ("==", "FATAL"), ("!=", "FATAL"),
                                       ("in", ["WARN", "ERROR"]), ("not_in", ["WARN", "ERROR"]),
                                       ("in", ["FATAL", "INFO"]), ("not_in", ["FATAL"]), ("in", ["FATAL"])])
def test_level_is_compared_as_the_text_it_stands_for(op: str, value: Any) -> None:
    """`level` is a fixed vocabulary (an Enum): compared without casting every row to text, with
    the same answers as the text, a value outside the vocabulary included, null kept unknown."""
    from forensics.rules.compile import compile_leaf
    from forensics.rules.spec import Leaf

    df = conform(pl.DataFrame({"level": ["DEBUG", "INFO", "WARN", "ERROR", None]}).lazy()).collect()
    as_text = Leaf("message", op, value)        # the same test on a text column holding the same words
    got = df.select(compile_leaf(Leaf("level", op, value)).alias("x"))["x"].to_list()
    want = df.select(pl.col("level").cast(pl.String).alias("message")).select(compile_leaf(as_text).alias("x"))["x"].to_list()
    assert got == want and got[-1] is None


def _step(rank: int, step: int, t: float, comm: float | None, step_ms: float | None) -> list[dict[str, Any]]:
    rows = [{"t": t, "rank": rank, "event": "ALLREDUCE", "step": step, "comm_ms": comm}] if comm is not None else []
    return rows + [{"t": t + 0.5, "rank": rank, "event": "TRAIN_STEP", "step": step, "step_time_ms": step_ms}]


def test_census_needs_a_run_of_steps_for_a_sustain_in_steps(census_rules: list) -> None:
    """`sustain = "2 steps"`: steps high and low by turns span many steps from first to last high
    one, but no run does; the census rules the rank out and fetches nothing (it fetched every
    step of the rank before). A step whose value is unknown does not end a run, and where two
    steps end at the same time (their order unknown to the census) the rank is kept."""
    from forensics.rules.plan import candidate_rows

    share = next(r for r in census_rules if r.id == "share")
    turns = [row for s in range(10) for row in _step(0, s, 2.0 * s, 60.0, 100.0 if s % 2 == 0 else 1000.0)]
    assert candidate_rows(events(turns), [share]) == [None]
    assert evaluate(events(turns), [share], census=False) == []
    # step 1 carries no step time: unknown, so steps 0 and 2 (both high) are one run of 2 steps
    gap = [row for s in range(3) for row in _step(1, s, 2.0 * s, 60.0, None if s == 1 else 100.0)]
    (f,) = evaluate(events(gap), [share])
    assert f.ranks == [1] and [dataclasses.asdict(f)] == [dataclasses.asdict(g) for g in evaluate(events(gap), [share], census=False)]
    # two steps ending at the same time: the census cannot order them, so it keeps the rank
    tied = turns + _step(0, 10, 18.0, 60.0, 100.0)
    assert candidate_rows(events(tied), [share]) != [None]
    assert evaluate(events(tied), [share]) == evaluate(events(tied), [share], census=False)


@pytest.mark.parametrize("seed", range(4))
def test_census_per_step_values_do_not_depend_on_the_row_order(census_rules: list, seed: int) -> None:
    """The census cuts a by-step clause's steps where (rank, step) changes when each rank's rows
    are one block with steps never going back (a store's order), and sorts them first otherwise:
    rows in any order (parts of one rank interleaved, a restarted step count) give the same
    census, and the same findings as every rule over all the events."""
    from forensics.rules.plan import census

    by_step = [r for r in census_rules if r.clause.by_step]
    run = random_run(seed).collect()
    shuffled = run.sample(fraction=1.0, shuffle=True, seed=seed).lazy()
    key = ["rank"]
    a, b = census(run.lazy(), by_step).sort(key), census(shuffled, by_step).sort(key)
    assert a.equals(b)
    direct = evaluate(shuffled, by_step, census=False)
    assert [dataclasses.asdict(f) for f in evaluate(shuffled, by_step)] == [dataclasses.asdict(f) for f in direct]
