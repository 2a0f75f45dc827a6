"""Secrets never leave in a report: every renderer masks them by default, --no-redact turns it off,
--redact-pattern adds site-specific patterns."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.report import render
from forensics.report.model import Evidence, Finding, Report, RootCause, RunInfo
from forensics.report import redact

SECRETS = [
    "sk-abcdefghijklmnopqrstuvwx0123456789",
    "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH12",
    "AKIAABCDEFGHIJKLMNOP",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789AB",
]


def report_with_secrets() -> Report:
    texts = [
        f"WANDB_API_KEY={SECRETS[0]} failed to upload",
        f"token: {SECRETS[1]}",
        f"aws key {SECRETS[2]} and password=hunter2hunter2",
        f"git clone https://user:pa55word@git.internal/x {SECRETS[3]} from /home/alice/run",
    ]
    lines = [Evidence(source_file="logs/rank_3.jsonl", line=10 + i, rank=3, timestamp="2025-06-12T14:00:00.000Z", text=t)
             for i, t in enumerate(texts)]
    f = Finding(rule="cuda_oom", kind="oom", layer="resource", severity="ERROR", ranks=[3],
                title=f"rank 3: CUDA OOM ({texts[0]})", evidence={"message": texts[1]}, lines=lines,
                first_seen="2025-06-12T14:00:00.000Z", last_seen="2025-06-12T14:00:01.000Z")
    rc = RootCause(kind="oom", layer="resource", ranks=[3], summary=f"rank 3 ran out of memory: {texts[2]}", finding=0)
    return Report(run=RunInfo(ranks=4, hosts=1, start="2025-06-12T14:00:00.000Z", end="2025-06-12T14:01:00.000Z",
                              events=100, rejected_lines=0, crashed=True),
                  root_cause=rc, findings=[f], per_rank=[{"rank": 3, "last": texts[3]}])


@pytest.fixture(autouse=True)
def _no_extra_patterns():
    yield
    redact._EXTRA.clear()


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_every_report_format_masks_secrets_by_default(fmt: str) -> None:
    rep = report_with_secrets()
    out = render(rep, fmt, width=200)
    for s in SECRETS + ["hunter2hunter2", "pa55word"]:
        assert s not in out, (fmt, s)
    assert "logs/rank_3.jsonl" in out  # citations survive
    raw = render(rep, fmt, width=200, redact=False)
    assert SECRETS[0] in raw  # and --no-redact really turns it off


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_redact_pattern_adds_a_site_pattern(fmt: str) -> None:
    rep = report_with_secrets()
    assert "/home/alice" in render(rep, fmt, width=200)
    redact.set_patterns([r"/home/[^/ ]+"])
    assert "/home/alice" not in render(rep, fmt, width=200)


def test_bad_redact_pattern_is_a_user_error() -> None:
    from forensics.errors import ForensicsError

    with pytest.raises(ForensicsError):
        redact.set_patterns(["(unclosed"])


def test_patterns_are_the_current_commands_not_every_earlier_ones() -> None:
    """A second command (same process) with other patterns masks its own, not the first's too:
    the patterns were a module-level list every call appended to."""
    redact.set_patterns([r"node\d+"])
    assert redact.redact_text("node3 at /home/alice") == "*** at /home/alice"
    redact.set_patterns([r"/home/[^/ ]+"])
    assert redact.redact_text("node3 at /home/alice") == "node3 at ***"
    with pytest.raises(Exception):
        redact.set_patterns(["(unclosed"])
    assert redact.redact_text("node3 at /home/alice") == "node3 at ***"     # a bad pattern changes nothing
    redact.set_patterns(None)
    assert redact.redact_text("node3 at /home/alice") == "node3 at /home/alice"


def test_perfetto_export_masks_secrets(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_run import SECRET, write_run

    logs = write_run(tmp_path)
    out = tmp_path / "t.json.gz"
    cmd = [sys.executable, "-m", "forensics", "export", "perfetto", str(logs), "-o", str(out)]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    body = gzip.decompress(out.read_bytes()).decode()
    assert SECRET not in body and "s3://bucket/x" in body
    r = subprocess.run(cmd + ["--redact-pattern", r"s3://\S+"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "s3://bucket/x" not in gzip.decompress(out.read_bytes()).decode()
    assert subprocess.run(cmd + ["--no-redact"], capture_output=True).returncode == 0
    assert SECRET in gzip.decompress(out.read_bytes()).decode()


def test_cli_diagnose_redact_pattern(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_run import SECRET, write_run

    logs = write_run(tmp_path)
    base = [sys.executable, "-m", "forensics", "diagnose", str(logs), "--format", "json"]
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout
    r = subprocess.run(base + ["--redact-pattern", "(unclosed"], capture_output=True, text=True)
    assert r.returncode == 1 and "error[F300]" in r.stderr and "Traceback" not in r.stderr
    json.loads(subprocess.run(base + ["--redact-pattern", "node-[a-z]"], capture_output=True, text=True).stdout)


# --- one policy, every command and format -------------------------------------------------------------

# (log text, the secret part that must not be printed). Test tokens built for this test, in the
# shapes the providers document; none is real.
PEM = ("ssl key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM\n"
       "KeYbodYOuZ8gh2XbQ\n-----END RSA PRIVATE KEY-----\nloaded")
SECRET_LINES = [
    ("WANDB_API_KEY=Zq3xVb7NmK2pLw9R upload failed", ["Zq3xVb7NmK2pLw9R"]),
    ("cache at redis://:r3disPassw0rd@10.0.0.5:6379/0 refused", ["r3disPassw0rd"]),
    ("git fetch https://bob:p@ssW0rd@git.example.com/repo.git failed", ["ssW0rd"]),
    ("login with password=hunt3r rejected", ["hunt3r"]),
    ("env AWS_SECRET_ACCESS_KEY wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY set", ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]),
    ("s3 client AKIAIOSFODNN7EXAMPLE Zx9kLmNoPqRsTuVwXyZa0123456789AbCdEfGhIj denied",
     ["AKIAIOSFODNN7EXAMPLE", "Zx9kLmNoPqRsTuVwXyZa0123456789AbCdEfGhIj"]),
    ("hub login hf_AbC123xyz expired", ["AbC123xyz"]),
    ("slack xoxb-1111-2222-aBcDeFgHiJ xoxp-3333-4444-kLmNoPqRsT xoxa-2-5555-uVwXyZaBcD "
     "xoxr-6666-eFgHiJkLmN xoxs-7777-oPqRsTuVwX unreachable",
     ["aBcDeFgHiJ", "kLmNoPqRsT", "uVwXyZaBcD", "eFgHiJkLmN", "oPqRsTuVwX"]),
    ("auth header Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl0 refused", ["eyJhbGciOiJIUzI1NiJ9"]),
    ("clone ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 denied", ["aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"]),
    (PEM, ["MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM", "KeYbodYOuZ8gh2XbQ"]),
    # by structure, not by shape (issue 30): the value an auth scheme or a secret-named key announces,
    # to its delimiter
    ("proxy Authorization: Bearer abcdefghijklmnopqrstuvwx refused", ["abcdefghijklmnopqrstuvwx"]),
    ("header Authorization: Basic dXNlcjpzZWNyZXRwYXNz sent", ["dXNlcjpzZWNyZXRwYXNz"]),
    ("fetch https://alice:pa/ss9wd@files.example.com/x failed", ["ss9wd"]),
    ('db password="correct horse staple" rejected', ["horse staple"]),
    ("db password=abc,dEf9 rejected", [",dEf9"]),
    ("env DB_PASSWORD hunter2 exported", ["hunter2"]),
    ("prompt PASSWORD Xyzzy given", ["Xyzzy"]),
    ('dsn "postgres:\\/\\/admin:S3cretPg@db\\/x" refused', ["S3cretPg"]),
]
EXTRA_SECRET = "Pw0rdXtra9"       # in extra: {"db_password": ...}
FIELD_SECRET = "Tk9FieldSecret"   # a top-level key outside the envelope: the fields column
STAGE_SECRET = "St4geTok3n99"     # in a per-step value the timeline prints (stage)
REJECT_SECRET = "Trunc4tedPw"     # in a line ingest rejects (cut off without a newline)
ALL_SECRETS = [s for _, ss in SECRET_LINES for s in ss] + [EXTRA_SECRET, FIELD_SECRET, STAGE_SECRET, REJECT_SECRET]


def _secret_logs(d: Path) -> Path:
    import datetime as dt

    t0 = dt.datetime(2025, 6, 12, 14, 0, 0, tzinfo=dt.timezone.utc)
    ts = lambda s: (t0 + dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: E731
    d.mkdir(parents=True)
    for r in range(2):
        recs = []
        for s in range(6):
            recs.append({"timestamp": ts(s + 0.5 + 0.01 * r), "rank": r, "host": "node0", "level": "INFO",
                         "event": "ALLREDUCE", "message": f"step={s}",
                         "extra": {"step": s, "comm_ms": 40.0, "wait_ms": 5.0 * r, "collective": "allreduce"}})
            recs.append({"timestamp": ts(s + 0.9), "rank": r, "host": "node0", "level": "INFO", "event": "TRAIN_STEP",
                         "message": f"step={s} loss=2.0", "extra": {"step": s, "step_time_ms": 900.0, "loss": 2.0,
                                                                   "stage": f"warmup token={STAGE_SECRET}"}})
        if r == 1:
            for i, (text, _) in enumerate(SECRET_LINES):
                recs.append({"timestamp": ts(6 + 0.1 * i), "rank": 1, "host": "node0", "level": "ERROR",
                             "event": "CUDA_ERROR", "message": f"CUDA out of memory. {text}",
                             "extra": {"db_password": EXTRA_SECRET}, "api_token": FIELD_SECRET})
        body = "".join(json.dumps(x) + "\n" for x in recs)
        if r == 0:
            body += '{"timestamp": "2025-06-12T14:00:07Z", "rank": 0, "message": "password=' + REJECT_SECRET
        (d / f"rank_{r}.jsonl").write_text(body)
    return d


@pytest.fixture(scope="module")
def secret_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import forensics

    tmp = tmp_path_factory.mktemp("secrets")
    forensics.ingest([str(_secret_logs(tmp / "logs"))], tmp / "st")
    return tmp / "st"


OUTPUTS = [
    *(("events", f) for f in ("table", "jsonl", "csv", "json")),
    *(("last-10s", f) for f in ("table", "json")),
    *(("timeline", f) for f in ("table", "jsonl", "csv", "json")),
    *(("sql", f) for f in ("table", "jsonl", "csv", "json")),
    *(("rejects", f) for f in ("table", "jsonl", "csv")),
    *(("diagnose", f) for f in ("text", "md", "json", "html")),
    ("export perfetto", "trace"),
    *(("lint", f) for f in ("text", "json")),
]


# Outputs that show no log message of this run (see the test below).
NO_LOG_TEXT = {("timeline", "table"), ("lint", "text"), ("lint", "json")}


def _output(store: Path, tmp: Path, cmd: str, fmt: str, *more: str) -> str:
    """What the command prints or writes, run in-process with a wide terminal (no wrapping)."""
    from typer.testing import CliRunner

    from forensics.cli import app

    args = {
        "events": ["events", str(store), "--limit", "0", "--format", fmt],
        "last-10s": ["last-10s", str(store), "--window", "30s", "--per-rank", "20", "--format", fmt],
        "timeline": ["timeline", str(store), "--format", fmt],
        "sql": ["sql", str(store), "SELECT message, extra, fields, stage FROM events", "--format", fmt],
        "rejects": ["rejects", str(store), "--format", fmt],
        "diagnose": ["diagnose", str(store), "--format", fmt, "--width", "400"],
        "export perfetto": ["export", "perfetto", str(store), "-o", str(tmp / "t.json")],
        "lint": ["lint", str(store), "--format", fmt],
    }[cmd]
    r = CliRunner().invoke(app, [*args, *more], env={"COLUMNS": "4000"})
    assert r.exit_code in (0, 3), (r.output, r.exception)
    return (tmp / "t.json").read_text() if cmd == "export perfetto" else r.stdout


@pytest.mark.parametrize("cmd,fmt", OUTPUTS)
def test_no_secret_survives_any_output(secret_store: Path, tmp_path: Path, cmd: str, fmt: str) -> None:
    """One log holding every kind of secret; every command that prints or writes log text, in
    every format, masks all of them; --no-redact shows them as logged."""
    masked = _output(secret_store, tmp_path, cmd, fmt)
    assert [s for s in ALL_SECRETS if s in masked] == []
    raw = _output(secret_store, tmp_path, cmd, fmt, "--no-redact")
    shown = [s for s in ALL_SECRETS if s in raw]
    if (cmd, fmt) in NO_LOG_TEXT:
        # prints no log message for this run (lint cites lines by file:line; the timeline table
        # shows numbers): the check above guards that it never starts to unmasked
        assert shown == []
        return
    assert shown, "--no-redact must show the log text as logged"   # and so this test can fail
    if fmt in ("jsonl", "json", "csv") and cmd in ("events", "sql"):
        assert sorted(shown) == sorted(set(ALL_SECRETS) - {REJECT_SECRET}), set(ALL_SECRETS) - set(shown)
    if cmd == "rejects":
        assert REJECT_SECRET in raw


def test_frame_redaction_is_the_text_redaction() -> None:
    """redact_frame runs a vectorised trigger and the exact patterns on what it hits: the same
    result as redact_text on every value, for text columns and text inside lists and structs."""
    import polars as pl

    texts = [t for t, _ in SECRET_LINES] + ["step=3 loss=2.0", "", "tcp://10.0.0.1:29500 user@x", "hf_transfer on",
                                             "commit 0123456789abcdef0123456789abcdef01234567", "HF_TOKEN not set"]
    df = pl.DataFrame({"message": texts, "source_file": ["/logs/password=abc/rank_0.jsonl"] * len(texts),
                       "l": [[t, None] for t in texts], "s": [{"a": t, "n": 1} for t in texts]})
    out = redact.redact_frame(df)
    want = [redact.redact_text(t) for t in texts]
    assert out["message"].to_list() == want
    assert out["l"].to_list() == [[w, None] for w in want]
    assert [x["a"] for x in out["s"].to_list()] == want
    assert out["source_file"].to_list() == df["source_file"].to_list()     # citations are never touched
    # what is not a secret stays: words after a key name, paths, hashes, addresses, identifiers
    for keep in texts[-5:]:
        assert redact.redact_text(keep) == keep


@pytest.mark.parametrize("text,secret", [(t, s) for t, ss in SECRET_LINES for s in ss])
def test_each_secret_kind_is_masked(text: str, secret: str) -> None:
    assert secret not in redact.redact_text(text)


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_every_report_format_masks_every_secret_kind(fmt: str) -> None:
    """The report renderers apply the same policy to every kind (the CLI run above cites one line)."""
    rep = report_with_secrets()
    rep.findings[0].lines = [Evidence(source_file="logs/rank_1.jsonl", line=20 + i, rank=1, text=t)
                             for i, (t, _) in enumerate(SECRET_LINES)]
    out = render(rep, fmt, width=400)
    assert [s for _, ss in SECRET_LINES for s in ss if s in out] == []
    raw = render(rep, fmt, width=400, redact=False)
    assert SECRET_LINES[0][1][0] in raw   # the first line is shown in every format


def test_lint_results_are_redacted_and_keep_their_citations() -> None:
    from forensics.lint import Check, LintResult

    text = " ".join(t for t, _ in SECRET_LINES)
    res = LintResult(store="/runs/password=x/st", events=10, checks=[
        Check("error_flood", "q?", "warn", f"repeated: {text}", {"example": text},
              [Evidence(source_file="/logs/token=abc/rank_1.jsonl", line=7, rank=1, text=text)])])
    red = redact.redact_obj(res)
    dumped = json.dumps(red.to_json())
    assert [s for _, ss in SECRET_LINES for s in ss if s in dumped] == []
    assert red.store == res.store and red.checks[0].examples[0].source_file == "/logs/token=abc/rank_1.jsonl"
    assert red.checks[0].examples[0].line == 7 and res.checks[0].summary.endswith(text)   # a copy


from hypothesis import given, settings, strategies as st  # noqa: E402

_FRAGMENTS = [t for t, _ in SECRET_LINES] + [
    "password", "=", ":", " ", "\n", '"', "\\", "@", "://", "redis", "https", "token", "Token", "KEY", "key", "hf_",
    "sk-", "xoxb-", "AKIA", "Bearer ", "basic ", "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----",
    "abcDEF123", "/", "+", "0123456789", "step=3", "loss=2.5", "é", "ñ",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=12).map("".join), min_size=1, max_size=20))
def test_frame_and_text_redaction_agree_on_any_text(texts: list[str]) -> None:
    """The vectorised trigger must let through every value a pattern would change."""
    import polars as pl

    out = redact.redact_frame(pl.DataFrame({"message": texts}))["message"].to_list()
    assert out == [redact.redact_text(t) for t in texts]


def test_sql_over_rejects_masks_the_rejected_lines(tmp_path: Path) -> None:
    """`sql "SELECT raw FROM rejects"`: the rejected bytes come back as text and are masked like any
    other text (they were a BLOB, printed as logged, hf_ tokens included)."""
    import forensics
    from typer.testing import CliRunner

    from forensics.cli import app

    d = tmp_path / "logs"
    d.mkdir()
    (d / "rank_0.jsonl").write_bytes(b'{"timestamp": "2025-06-12T14:00:00Z", "rank": 0, "message": "step=1"}\n'
                                     b"\x00\xff\xfe login hf_AbC123xyzQ9 password=Rej3cted9 done\n")   # control bytes: a reject
    forensics.ingest([str(d)], tmp_path / "st")
    for fmt in ("table", "csv", "json", "jsonl"):
        r = CliRunner().invoke(app, ["sql", str(tmp_path / "st"), "SELECT raw FROM rejects", "--format", fmt],
                               env={"COLUMNS": "400"})
        assert r.exit_code == 0, r.output
        assert "login hf_***" in r.stdout and "AbC123xyzQ9" not in r.stdout and "Rej3cted9" not in r.stdout
    r = CliRunner().invoke(app, ["sql", str(tmp_path / "st"), "SELECT raw FROM rejects", "--format", "csv", "--no-redact"])
    assert "AbC123xyzQ9" in r.stdout
