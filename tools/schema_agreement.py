#!/usr/bin/env python3
"""Same run, other schema, same diagnosis? Agreement of every sample rewritten into other schemas.

For every dir of sample_logs/ with an expected.toml, every schema and every message mode, the
seed-schema logs are rewritten line for line and diagnosed (`diagnose DIR --format json`, through
the CLI in this process); the root cause kind, its ranks and the sorted list of finding kinds are
compared with the seed-schema diagnosis of the same dir. Prints agreed/total and each disagreement.

    python tools/schema_agreement.py [--schemas ecs,structlog,...|all] [--messages keep,prose]
                                     [--samples straggler,hang,...] [--keep DIR]

Schemas: the six families of ../shared/tools/reschema.py, and three written here from loggers'
own conventions (issue 27's example `logger`, OpenTelemetry log records `otel`, Bunyan `bunyan`).
The invented ones take no --messages (they keep the seed's message text; `prose` mode drops
key=value pairs the same way reschema does).

A `prose` rewrite keeps only the fields: a value the seed logged only as key=value in its message
text (the loss of loss_divergence) is in no line of the rewrite. Such a case is compared with the
seed's own schema given the same prose messages (the same information, only the spelling differs);
when that reference gives the rewrite's diagnosis and not the seed's, the input lacks the data the
seed's diagnosis read: the case is listed as not comparable, with the keys it lacks, and is not
counted in agreed/total. Every other difference is a disagreement.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import io
import json
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path[:1]:
    sys.path.insert(0, str(REPO))   # this tree's forensics, not an installed one
RESCHEMA = REPO.parent / "shared" / "tools" / "reschema.py"
RESCHEMA_FAMILIES = ("ecs", "structlog", "loguru", "pythonjson", "nested", "flat_seconds")

_LEVEL_NUM = {"TRACE": 10, "DEBUG": 20, "INFO": 30, "WARN": 40, "WARNING": 40, "ERROR": 50, "CRITICAL": 60, "FATAL": 60}
_OTEL_SEV = {"TRACE": 1, "DEBUG": 5, "INFO": 9, "WARN": 13, "WARNING": 13, "ERROR": 17, "CRITICAL": 21, "FATAL": 21}
_KV = re.compile(r"\s*\b[A-Za-z_][\w.]*=\S+")


def prose(msg: str) -> str:
    """The message without its key=value pairs (only the fields carry the numbers)."""
    return re.sub(r"\s{2,}", " ", _KV.sub("", msg or "")).strip(" ,;:")


def _epoch(ts: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _host(extra: dict, rec: dict) -> str | None:
    return extra.pop("host", None) or rec.get("host")


def logger_schema(rec: dict, msg: str) -> dict:
    """Issue 27's example: epoch-ms `@timestamp_ms`, `severity`, the event as a logger name,
    `text`, `proc` {rank, node}, `payload` {iter, values {...}} with durations as `*_ms` words."""
    extra = dict(rec.get("extra") or {})
    step = extra.pop("step", None)
    node = _host(extra, rec)
    values = {{"step_time_ms": "iter_ms", "data_load_ms": "data_load_time_ms", "comm_ms": "allreduce_time_ms",
               "wait_ms": "wait_time_ms", "mem_alloc_mb": "mem_allocated_mb"}.get(k, k): v for k, v in extra.items()}
    t = _epoch(rec.get("timestamp"))
    return {"@timestamp_ms": None if t is None else int(round(t * 1000)), "severity": str(rec.get("level", "")).lower(),
            "logger": f"trainer.{str(rec.get('event', '')).lower()}", "text": msg,
            "proc": {"rank": rec.get("rank"), "node": node}, "payload": {"iter": step, "values": values}}


def otel_schema(rec: dict, msg: str) -> dict:
    """An OpenTelemetry log record as the OTLP JSON exporter writes it (flattened attributes):
    `timeUnixNano` (a string of integer ns), `severityText`/`severityNumber`, `body`, the event as
    `attributes["event.name"]`, rank and host as resource-ish attributes, metrics as attributes
    with their units in seconds (`*.duration_s`)."""
    extra = dict(rec.get("extra") or {})
    host = _host(extra, rec)
    t = _epoch(rec.get("timestamp"))
    attrs: dict = {"event.name": str(rec.get("event", "")).lower()}
    if rec.get("rank") is not None:
        attrs["process.rank"] = rec["rank"]
    for k, v in extra.items():
        if k.endswith("_ms") and isinstance(v, (int, float)) and not isinstance(v, bool):
            attrs[f"train.{k[:-3]}.duration_s"] = v / 1000
        else:
            attrs[f"train.{k}"] = v
    lvl = str(rec.get("level", "INFO")).upper()
    out = {"timeUnixNano": None if t is None else str(int(round(t * 1e6)) * 1000),
           "severityText": lvl, "severityNumber": _OTEL_SEV.get(lvl, 9), "body": msg, "attributes": attrs,
           "resource": {"host.name": host, "service.name": "trainer"}}
    return out


def bunyan_schema(rec: dict, msg: str) -> dict:
    """Bunyan (node-bunyan's core fields): `v`, numeric `level` (30 info, 40 warn, 50 error),
    `name` (the app, one value), `hostname`, `pid`, `time` (ISO), `msg`; the rest is the caller's
    own fields: here `evt`, `rank` under `ctx`, and the metrics at the top level."""
    extra = dict(rec.get("extra") or {})
    host = _host(extra, rec)
    rank = rec.get("rank")
    out = {"v": 0, "level": _LEVEL_NUM.get(str(rec.get("level", "INFO")).upper(), 30), "name": "trainer",
           "hostname": host or "localhost", "pid": 4000 + (rank or 0), "time": rec.get("timestamp"), "msg": msg,
           "evt": rec.get("event"), "ctx": {"worker_rank": rank}}
    out.update(extra)
    return out


_SYSLOG = {"DEBUG": "7", "INFO": "6", "WARN": "4", "WARNING": "4", "ERROR": "3", "CRITICAL": "2", "FATAL": "2"}


def journald_schema(rec: dict, msg: str) -> dict:
    """systemd-journald's JSON export (`journalctl -o json`): every value a string;
    `__REALTIME_TIMESTAMP` in epoch microseconds, `PRIORITY` a syslog number (6 info, 4 warning,
    3 err), `MESSAGE`, `_HOSTNAME`, `SYSLOG_IDENTIFIER`, `_PID`; the caller's own fields in upper
    case (`RANK`, `EVENT`, `STEP`, `STEP_TIME_MS`, ...)."""
    extra = dict(rec.get("extra") or {})
    host = _host(extra, rec)
    t = _epoch(rec.get("timestamp"))
    out = {"__REALTIME_TIMESTAMP": None if t is None else str(int(round(t * 1e6))),
           "PRIORITY": _SYSLOG.get(str(rec.get("level", "INFO")).upper(), "6"), "MESSAGE": msg,
           "_HOSTNAME": host or "localhost", "SYSLOG_IDENTIFIER": "trainer", "_PID": str(4000 + (rec.get("rank") or 0)),
           "TRAINER_EVENT": rec.get("event"), "RANK": None if rec.get("rank") is None else str(rec["rank"])}
    for k, v in extra.items():
        out[k.upper()] = v if isinstance(v, str) else json.dumps(v)
    return out


def gcp_schema(rec: dict, msg: str) -> dict:
    """A Google Cloud Logging LogEntry as exported (`gcloud logging read --format json`, one a
    line): `timestamp` ISO with nanoseconds, `severity`, `jsonPayload` {message, event, step,
    metrics in seconds}, `labels` {rank}, `resource.labels.node_id`, `logName`, `insertId`."""
    extra = dict(rec.get("extra") or {})
    host = _host(extra, rec)
    t = rec.get("timestamp") or ""
    payload: dict = {"message": msg, "event": str(rec.get("event", "")).lower()}
    for k, v in extra.items():
        if k.endswith("_ms") and isinstance(v, (int, float)) and not isinstance(v, bool):
            payload[k[:-3] + "_seconds"] = v / 1000
        else:
            payload[k] = v
    return {"insertId": f"{abs(hash((t, msg))) % 10**12:012d}", "jsonPayload": payload,
            "resource": {"type": "gce_instance", "labels": {"node_id": host, "zone": "us-central1-a"}},
            "timestamp": t.replace("Z", "000000Z") if t.endswith("Z") else t,
            "severity": {"WARN": "WARNING"}.get(str(rec.get("level", "INFO")).upper(), str(rec.get("level", "INFO")).upper()),
            "labels": {"rank": None if rec.get("rank") is None else str(rec["rank"])},
            "logName": "projects/p/logs/trainer"}


def pylogrecord_schema(rec: dict, msg: str) -> dict:
    """python-json-logger with LogRecord attributes in its format string
    (`%(created)f %(levelno)d %(name)s %(process)d %(message)s`) and the caller's
    `extra={"dist": {...}, "metrics": {...}}`: `created` epoch seconds, `levelno` 20/30/40, `name` the
    logger (one per event: `train.<event>`), rank and host under `dist`."""
    extra = dict(rec.get("extra") or {})
    host = _host(extra, rec)
    step = extra.pop("step", None)
    t = _epoch(rec.get("timestamp"))
    lv = {"DEBUG": 10, "INFO": 20, "WARN": 30, "WARNING": 30, "ERROR": 40, "CRITICAL": 50, "FATAL": 50}
    return {"created": t, "levelno": lv.get(str(rec.get("level", "INFO")).upper(), 20),
            "name": f"train.{str(rec.get('event', '')).lower()}", "process": 4000 + (rec.get("rank") or 0),
            "message": msg, "dist": {"rank": rec.get("rank"), "hostname": host}, "iteration": step, "metrics": extra}


_GLOG = {"DEBUG": "D", "INFO": "I", "WARN": "W", "WARNING": "W", "ERROR": "E", "CRITICAL": "F", "FATAL": "F"}


def glog_ns_schema(rec: dict, msg: str) -> dict:
    """Epoch-ns integer `ts_ns`, glog-style one-letter `sev` (I W E F), the event under `op`,
    rank as `worker.global_rank`, host as `worker.node`, durations grouped as `durations_us`
    {step, data, comm, wait} in microseconds, the rest under `stats`."""
    extra = dict(rec.get("extra") or {})
    host = _host(extra, rec)
    step = extra.pop("step", None)
    t = _epoch(rec.get("timestamp"))
    dur = {}
    for k, short in (("step_time_ms", "step"), ("data_load_ms", "data"), ("comm_ms", "comm"), ("wait_ms", "wait")):
        if k in extra:
            dur[short] = round(extra.pop(k) * 1000)
    return {"ts_ns": None if t is None else int(round(t * 1e6)) * 1000, "sev": _GLOG.get(str(rec.get("level", "INFO")).upper(), "I"),
            "op": str(rec.get("event", "")).lower(), "msg": msg, "worker": {"global_rank": rec.get("rank"), "node": host},
            "step": step, **({"durations_us": dur} if dur else {}), "stats": extra}


def fluentbit_schema(rec: dict, msg: str) -> dict:
    """Fluent Bit's kubernetes filter with Merge_Log on (Merge_Log_Key log_processed): `date`
    epoch seconds (float), `stream`, the raw `log` line, the app's own JSON parsed under
    `log_processed` (ISO `ts`, `lvl`, `evt`, `message`, `rank`, `metrics` {...}), and
    `kubernetes` {pod_name, namespace_name, host, container_name}."""
    extra = dict(rec.get("extra") or {})
    host = _host(extra, rec)
    rank = rec.get("rank")
    app = {"ts": rec.get("timestamp"), "lvl": str(rec.get("level", "INFO")).lower(), "evt": rec.get("event"),
           "message": msg, "rank": rank, "metrics": extra}
    t = _epoch(rec.get("timestamp"))
    return {"date": t, "stream": "stderr" if str(rec.get("level")).upper() in ("ERROR", "FATAL", "CRITICAL") else "stdout",
            "log": json.dumps(app), "log_processed": app,
            "kubernetes": {"pod_name": f"trainer-worker-{rank}", "namespace_name": "ml", "host": host or "gke-node-1",
                           "container_name": "trainer"}}


INVENTED = {"pylogrecord": pylogrecord_schema, "glog_ns": glog_ns_schema, "logger": logger_schema, "bunyan": bunyan_schema, "journald": journald_schema, "gcp": gcp_schema,
            "otel": otel_schema, "fluentbit": fluentbit_schema}
ALL = RESCHEMA_FAMILIES + tuple(INVENTED)


def _load_reschema():
    spec = importlib.util.spec_from_file_location("reschema", RESCHEMA)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _each_seed_record(src: Path, out: Path, convert, suffix: str | None = None, copy: bool = False) -> None:
    """Each seed file line for line at the same relative path, its seed records through `convert`
    (renamed to `suffix` where one is given); lines that are not seed records, and files that are
    not JSON lines (every file, with `copy`), stay as they are."""
    for f in sorted(src.rglob("*")):
        if not f.is_file() or f.name == "expected.toml":
            continue
        dst = out / f.relative_to(src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if f.suffix != ".jsonl" or copy:
            dst.write_bytes(f.read_bytes())
            continue
        lines = []
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            lines.append(json.dumps(convert(rec)) if isinstance(rec, dict) and "event" in rec else line)
        (dst.with_suffix(suffix) if suffix else dst).write_text("\n".join(lines) + "\n")


def write_invented(src: Path, out: Path, convert, messages: str = "keep") -> None:
    """Each seed file line for line through `convert` at the same relative path (`.jsonl` -> `.log`);
    lines that are not seed records and files that are not JSON lines stay as they are."""
    def one(rec: dict) -> dict:
        msg = rec.get("message") or ""
        return convert(rec, prose(msg) if messages == "prose" else msg)
    _each_seed_record(src, out, one, ".log")


def rewrite(src: Path, out: Path, schema: str, messages: str) -> None:
    if schema in INVENTED:
        write_invented(src, out, INVENTED[schema], messages)
        return
    rs = _load_reschema()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        rs.main([str(src), str(out), "--family", schema, "--messages", messages])


def message_only_keys(src: Path) -> list[str]:
    """Keys of the key=value pairs in the seed's messages that no seed record holds as a field:
    what a `prose` rewrite loses (it keeps fields and drops those pairs)."""
    in_text: set[str] = set()
    in_fields: set[str] = set()
    for f in sorted(src.rglob("*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or "event" not in rec:
                continue
            in_fields.update(rec)
            in_fields.update(rec.get("extra") or {})
            in_text.update(m.group(0).strip().split("=", 1)[0] for m in _KV.finditer(str(rec.get("message") or "")))
    return sorted(in_text - in_fields)


def write_reference(src: Path, out: Path, schema: str, messages: str) -> None:
    """The seed's own schema with the messages `schema` writes in mode `messages`: the information
    of the rewrite, in the spelling of the seed (files and lines as they were, `.jsonl` kept)."""
    plain = _load_reschema().plain if schema in RESCHEMA_FAMILIES else None

    def one(rec: dict) -> dict:
        msg = rec.get("message") or ""
        return {**rec, "message": plain(msg, rec.get("event"), (rec.get("extra") or {}).get("step")) if plain else prose(msg)}
    _each_seed_record(src, out, one, copy=messages != "prose")


def verdict(want: tuple, got: tuple, reference: tuple | None, lost: list[str]) -> str:
    """`agree` when the rewrite gets the seed's diagnosis; `lacks` when it does not, keys are lost
    from the messages, and the seed's schema with the same messages gets the rewrite's diagnosis
    (the input lacks what the seed's diagnosis read); else `disagree`."""
    if got == want:
        return "agree"
    if lost and reference is not None and reference == got and reference != want:
        return "lacks"
    return "disagree"


def signature(path: Path) -> tuple:
    """(root cause kind, its ranks, sorted finding kinds) of `diagnose PATH --format json`."""
    from typer.testing import CliRunner

    from forensics.cli import app

    res = CliRunner().invoke(app, ["diagnose", str(path), "--format", "json"])
    try:
        doc = json.loads(res.output)
    except ValueError:
        return ("<error>", [], [f"exit {res.exit_code}: {res.output.strip()[-200:]}"])
    rc = doc.get("root_cause") or {}
    return (rc.get("kind"), sorted(rc.get("ranks") or []), sorted({f["kind"] for f in doc.get("findings", [])}))


def samples(names: list[str] | None = None) -> list[Path]:
    found = sorted(p.parent for p in (REPO / "sample_logs").glob("*/expected.toml"))
    return [p for p in found if not names or p.name in names]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", default=",".join(RESCHEMA_FAMILIES), help="comma list, or 'all' (adds the invented ones)")
    ap.add_argument("--messages", default="keep,prose")
    ap.add_argument("--samples", default="", help="comma list of sample_logs dirs (default: all)")
    ap.add_argument("--keep", default="", help="write the rewritten runs under this dir")
    a = ap.parse_args(argv)
    schemas = ALL if a.schemas == "all" else tuple(s for s in a.schemas.split(",") if s)
    unknown = [s for s in schemas if s not in ALL]
    if unknown:
        ap.error(f"unknown schema(s) {unknown}; known: {', '.join(ALL)}")
    modes = [m for m in a.messages.split(",") if m]
    dirs = samples([s for s in a.samples.split(",") if s] or None)
    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="schema-agreement-"))
    agreed = total = 0
    bad: list[str] = []
    lacking: list[str] = []
    refs: dict[tuple, tuple] = {}
    for d in dirs:
        want = signature(d)
        lost = message_only_keys(d)
        for schema in schemas:
            for mode in modes:
                out = root / f"{d.name}.{schema}.{mode}"
                rewrite(d, out, schema, mode)
                got = signature(out)
                reference = None
                if got != want and mode != "keep" and lost:
                    key = (d.name, schema in RESCHEMA_FAMILIES, mode)
                    if key not in refs:
                        ref_dir = root / f"{d.name}.seed.{mode}.{'reschema' if key[1] else 'invented'}"
                        write_reference(d, ref_dir, schema, mode)
                        refs[key] = signature(ref_dir)
                    reference = refs[key]
                v = verdict(want, got, reference, lost)
                line = (f"{d.name:20} {schema:12} {mode:5} seed={want[0]}{want[1]} got={got[0]}{got[1]}"
                        f"  kinds -{sorted(set(want[2]) - set(got[2]))} +{sorted(set(got[2]) - set(want[2]))}")
                if v == "lacks":
                    lacking.append(f"{line}  (the rewrite holds no value of {lost}, only in the seed's message text;"
                                   f" the seed's schema without them also gives {got[0]}{got[1]})")
                    print(f"--- {d.name} {schema} {mode} (input lacks {lost})", file=sys.stderr, flush=True)
                    continue
                total += 1
                agreed += v == "agree"
                if v != "agree":
                    bad.append(line)
                print(f"{'ok ' if v == 'agree' else 'BAD'} {d.name} {schema} {mode}", file=sys.stderr, flush=True)
    for line in bad:
        print(line)
    if lacking:
        print(f"not counted, the input lacks the data ({len(lacking)}):")
        for line in lacking:
            print(f"  {line}")
    print(f"agreed {agreed}/{total}" + (f" ({len(lacking)} not counted: input lacks the data)" if lacking else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
