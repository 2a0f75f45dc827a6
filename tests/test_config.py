"""The config file (forensics.config): found upward from the logs or given, checked key by key,
applied to the rules (overrides before validation, disabled rules and passes), merged with the CLI
(CLI > config > defaults), and shown in the JSON report."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.config import Config, find_config, load_config, parse_config
from forensics.errors import ForensicsError
from forensics.rules import load_rules
from forensics.rules.examples import run_examples

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_logs"


def logs_below(root: Path, sample: str = "thermal_throttling") -> Path:
    """A copy of a sample run at root/runs/job/logs (the config goes in root or above)."""
    dst = root / "runs" / "job" / "logs"
    shutil.copytree(SAMPLES / sample, dst)
    return dst


def test_found_upward_from_the_logs_forensics_toml_first(tmp_path: Path) -> None:
    logs = tmp_path / "a" / "b" / "logs"
    logs.mkdir(parents=True)
    (logs / "rank_0.jsonl").write_text("{}\n")
    assert find_config([str(logs)]) is None or not str(find_config([str(logs)])).startswith(str(tmp_path))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')          # no [tool.forensics]: skipped
    assert find_config([str(logs)]) is None or not str(find_config([str(logs)])).startswith(str(tmp_path))
    (tmp_path / "a" / "pyproject.toml").write_text('[tool.forensics]\nredact-patterns = ["secret"]\n')
    assert find_config([str(logs / "rank_0.jsonl")]) == tmp_path / "a" / "pyproject.toml"
    (tmp_path / "a" / "b" / "forensics.toml").write_text('redact-patterns = ["x"]\n')
    assert find_config([str(logs)]) == tmp_path / "a" / "b" / "forensics.toml"
    assert find_config([str(logs) + "/*.jsonl"]) == tmp_path / "a" / "b" / "forensics.toml"   # a quoted glob
    assert load_config([str(logs)], str(tmp_path / "a" / "pyproject.toml")).redact_patterns == ["secret"]  # --config wins


def test_paths_in_the_file_are_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "my-rules").mkdir()
    (tmp_path / "map.txt").write_text("node0:0=0\n")
    f = tmp_path / "forensics.toml"
    f.write_text('gpu-map = ["@map.txt", "node1:0=4"]\n[rules]\ndirs = ["my-rules"]\n'
                 '[compare]\nbaseline = "runs/good"\nmax_slowdown = "5%"\n[fail-on]\ndiagnose = "warn:physical"\n')
    cfg = parse_config(f)
    assert cfg.rule_dirs == [str((tmp_path / "my-rules").resolve())]
    assert cfg.gpu_map == [f"@{tmp_path / 'map.txt'}", "node1:0=4"]
    assert cfg.compare == {"baseline": str((tmp_path / "runs" / "good").resolve()), "max_slowdown": "5%"}
    assert cfg.fail_on == {"diagnose": "warn:physical"}


@pytest.mark.parametrize("text, key, reason", [
    ("colour = 1\n", "colour", "unknown key"),
    ('[rules.gpu_underutilized]\nlevel = "FATAL"\n', "rules.gpu_underutilized.level", "not one of WARN, ERROR"),
    ('[rules.gpu_underutilized]\nparams = { min_util = "low" }\n', "rules.gpu_underutilized.params.min_util", "must be a number"),
    ('[rules.gpu_underutilized]\nsustain = "five minutes"\n', "rules.gpu_underutilized.sustain", "cannot read duration"),
    ('[rules.gpu_underutilized]\nthreshold = 3\n', "rules.gpu_underutilized.threshold", "unknown key"),
    ('[rules]\ndisable = [1]\n', "rules.disable", "list of non-empty strings"),
    ('[rules]\ndirs = ["nowhere"]\n', "rules.dirs[0]", "no such rule folder"),
    ('redact-patterns = ["(unclosed"]\n', "redact-patterns[0]", "not a regular expression"),
    ('gpu-map = ["node0:x=1"]\n', "gpu-map", "HOST:GPU=RANK"),
    ('[fail-on]\ndiagnose = "WARN:bogus"\n', "fail-on.diagnose", "not a layer or kind"),
    ('[fail-on]\ndeploy = "WARN"\n', "fail-on.deploy", "unknown command"),
    ('[compare]\nbaseline = 3\n', "compare.baseline", "must be a path"),
    ("rules = [\n", "", "not valid TOML"),
])
def test_bad_config_names_file_and_key(tmp_path: Path, text: str, key: str, reason: str) -> None:
    f = tmp_path / "forensics.toml"
    f.write_text(text)
    with pytest.raises(ForensicsError) as e:
        parse_config(f)
    assert e.value.where == str(f) and e.value.code == "F600"
    assert (key in e.value.what) if key else True
    assert reason in (e.value.reason or "")


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ForensicsError, match="no config file"):
        load_config([str(tmp_path)], str(tmp_path / "nope.toml"))
    r = CliRunner().invoke(app, ["diagnose", str(SAMPLES / "healthy"), "--config", str(tmp_path / "nope.toml")])
    assert r.exit_code == 1


def test_rule_overrides_are_applied_before_validation() -> None:
    base = {r.id: r for r in load_rules()}
    tuned = {r.id: r for r in load_rules(overrides={"gpu_underutilized": {"params": {"min_util": 50}, "level": "ERROR",
                                                                           "sustain": "10m"}})}
    g, g0 = tuned["gpu_underutilized"], base["gpu_underutilized"]
    assert (g0.params["min_util"], g0.level, g0.clause.sustain.amount) == (60, "WARN", 300)   # type: ignore[union-attr]
    assert (g.params["min_util"], g.level, g.clause.sustain.amount) == (50, "ERROR", 600)     # type: ignore[union-attr]
    # behaviour, not just fields: the rule's own "55% for five minutes matches" example no longer does
    assert run_examples(g0, "x") == []
    assert any("examples[0]" in str(e) for e in run_examples(g, "x"))


def test_overrides_naming_what_a_rule_lacks_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ForensicsError) as e:
        load_rules(overrides={"gpu_underutilized": {"params": {"min_utl": 50}}}, override_source="cfg.toml")
    assert e.value.what == "bad config: rules.gpu_underutilized.params.min_utl" and e.value.where == "cfg.toml"
    assert "it has: min_util" in (e.value.reason or "")
    with pytest.raises(ForensicsError, match="value"):
        load_rules(overrides={"gpu_underutilized": {"value": 50}})       # its threshold is an expr over params
    with pytest.raises(ForensicsError, match="sustain"):
        load_rules(overrides={"thermal_throttling": {"sustain": "5m"}})
    # a rule whose [threshold] has a plain value takes `value`
    d = tmp_path / "r" / "x"
    d.mkdir(parents=True)
    (d / "hot.toml").write_text('''id = "hot"
title = "hot"
level = "WARN"
layer = "physical"
kind = "thermal_throttling"
description = "hot"
references = ["test"]
falsepositives = []

[threshold]
metric = "temp_c"
op = ">="
value = 90

[[examples]]
expect = "match"
events = [{ event = "GPU_STATS", rank = 0, temp_c = 91.0 }]

[[examples]]
expect = "no_match"
events = [{ event = "GPU_STATS", rank = 0, temp_c = 80.0 }]
''')
    rule = load_rules([tmp_path / "r"], overrides={"hot": {"value": 95}})[0]
    assert any("examples[0]" in str(e) for e in run_examples(rule, "x"))


def _diagnose_json(args: list[str]) -> tuple[int, dict]:
    r = CliRunner().invoke(app, ["diagnose", *args, "--format", "json"])
    assert r.exit_code in (0, 3), r.output
    return r.exit_code, json.loads(r.stdout)


def test_config_disables_overrides_and_shows_in_the_json_report(tmp_path: Path) -> None:
    logs = logs_below(tmp_path)
    code, plain = _diagnose_json([str(logs)])
    assert plain["config"]["source"] is None
    rules = {f["rule"] for f in plain["findings"]}
    assert {"thermal_throttling", "pass.throughput"} <= rules
    assert next(f for f in plain["findings"] if f["rule"] == "thermal_throttling")["severity"] == "WARN"
    (tmp_path / "forensics.toml").write_text('[rules]\ndisable = ["pass.throughput", "sm_clock_drop"]\n'
                                             '[rules.thermal_throttling]\nlevel = "ERROR"\n')
    code, tuned = _diagnose_json([str(logs)])
    assert tuned["config"]["source"] == str(tmp_path / "forensics.toml")
    assert tuned["config"]["rules"]["disable"] == ["pass.throughput", "sm_clock_drop"]
    assert tuned["config"]["rules"]["overrides"] == {"thermal_throttling": {"level": "ERROR"}}
    rules = {f["rule"] for f in tuned["findings"]}
    assert "pass.throughput" not in rules and "sm_clock_drop" not in rules
    assert next(f for f in tuned["findings"] if f["rule"] == "thermal_throttling")["severity"] == "ERROR"
    assert tuned["root_cause"]["kind"] == "thermal_throttling" and tuned["root_cause"]["ranks"] == [6]


def test_unknown_names_in_disable_are_errors(tmp_path: Path) -> None:
    logs = logs_below(tmp_path, "healthy")
    (tmp_path / "forensics.toml").write_text('[rules]\ndisable = ["pass.thruput"]\n')
    r = CliRunner().invoke(app, ["diagnose", str(logs)])
    assert r.exit_code == 1
    assert "rules.disable[0]" in str(r.exception) and "pass.throughput" in str(r.exception)


def test_precedence_cli_over_config_over_defaults(tmp_path: Path) -> None:
    logs = logs_below(tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["diagnose", str(logs)]).exit_code == 0                   # default: never fail
    (tmp_path / "forensics.toml").write_text('[fail-on]\ndiagnose = "WARN:physical"\nlint = "FAIL"\n')
    assert runner.invoke(app, ["diagnose", str(logs)]).exit_code == 3                   # config
    assert runner.invoke(app, ["diagnose", str(logs), "--fail-on", "ERROR"]).exit_code == 0   # CLI beats config
    assert runner.invoke(app, ["diagnose", str(logs), "--fail-on", "WARN:data_load_skew"]).exit_code == 0


def test_config_redaction_adds_to_the_cli_patterns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics.report import redact

    monkeypatch.setattr(redact, "_EXTRA", [])          # patterns are process-wide: keep them out of other tests
    logs = logs_below(tmp_path)
    (tmp_path / "forensics.toml").write_text("redact-patterns = ['node1']\n")
    r = CliRunner().invoke(app, ["diagnose", str(logs), "--format", "md", "--redact-pattern", "node0"])
    assert r.exit_code == 0, r.output
    # host names masked in the next step and the per-rank table; file paths are citations and stay
    assert "On ***, inspect" in r.stdout and "On node1" not in r.stdout
    assert "| node0 |" not in r.stdout and "| node1 |" not in r.stdout and "| *** |" in r.stdout


def test_default_config_to_json_is_stable() -> None:
    assert Config().to_json() == {"source": None, "rules": {"disable": [], "dirs": [], "overrides": {}}, "gpu_map": [],
                                  "redact_patterns": [], "fail_on": {}, "compare": {}}


def test_config_gpu_map_gives_telemetry_its_ranks(tmp_path: Path) -> None:
    from forensics.run import open_run

    csv = REPO.parent / "shared" / "realdata" / "telemetry" / "nvidia_smi_8gpu.csv"
    if not csv.is_file():
        pytest.skip("shared real data not present")
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(csv, logs / "gpu.csv")
    plain = open_run([str(logs)]).events().select("rank").collect()
    assert plain.get_column("rank").null_count() == plain.height           # a telemetry file names no rank
    (tmp_path / "forensics.toml").write_text('gpu-map = ["0=10", "1=11"]\n')
    cfg = load_config([str(logs)], None)
    mapped = open_run([str(logs)], gpu_map=cfg.gpu_map).events().select("rank").collect()
    assert set(mapped.get_column("rank").drop_nulls().unique().to_list()) == {10, 11}
    code, d = _diagnose_json([str(logs)])
    assert {r["rank"] for r in d["per_rank"]} >= {10, 11} and d["config"]["gpu_map"] == ["0=10", "1=11"]
