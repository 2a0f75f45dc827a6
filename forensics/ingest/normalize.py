"""Turning a reader's raw string columns into the canonical event table.

Owns: envelope aliases (time/ts, levelname, msg ...), timestamp typing (ISO with or without zone,
epoch s/ms/us/ns), level normalisation, metric aliases and unit scaling, `key=value` metrics
found in `message`, and where the rank came from. Must not read files.

Input: a DataFrame whose columns are raw JSON keys as strings (top-level keys, `extra` verbatim)
plus `line`. Output: columns of EVENT_SCHEMA (not yet conformed: the caller adds file columns).
"""
from __future__ import annotations

import io
import json

import polars as pl

from ..schema import ALIASES, ENVELOPE_ALIASES, FIELDS, LEVEL_ALIASES, Level

# Every top-level key the JSONL reader asks polars for. Anything else (flat metric lines' loss,
# step, ...) goes verbatim to the `fields` JSON column, from which known metrics are typed.
# Keep this list short: the NDJSON parser's cost grows with the width of the schema.
KNOWN_TOP: list[str] = list(ENVELOPE_ALIASES)

# Metric names looked for as `key=value` in free text.
MESSAGE_KEYS: dict[str, tuple[str, float]] = {
    k: v for k, v in ALIASES.items() if FIELDS.get(v[0]) is not None and k.isidentifier() and k not in ("path", "file", "op", "pg", "phase", "util", "temp", "power", "duration", "iter")
}


def parse_timestamp(col: pl.Expr) -> pl.Expr:
    """ISO-8601 (zone or not, 'T' or ' ') or epoch seconds/ms/us/ns -> Datetime(us, UTC).

    Naive times are taken as UTC: the logs do not say otherwise and we never guess a zone.
    """
    s = col.str.strip_chars().str.replace(" ", "T", literal=True)
    with_zone = s.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%#z", strict=False, time_unit="us", time_zone="UTC")
    naive = s.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", strict=False, time_unit="us").dt.replace_time_zone("UTC")
    num = col.cast(pl.Float64, strict=False)
    a = num.abs()
    # Epoch magnitude decides the unit: 1.7e9 s, 1.7e12 ms, 1.7e15 us, 1.7e18 ns.
    us = (
        pl.when(a < 1e11).then(num * 1e6)
        .when(a < 1e14).then(num * 1e3)
        .when(a < 1e17).then(num)
        .otherwise(num / 1e3)
    )
    epoch = pl.when(num.is_finite()).then(us.round(0).cast(pl.Int64, strict=False)).cast(pl.Datetime("us", "UTC"))
    return pl.coalesce(with_zone, naive, epoch)


def _num(col: pl.Expr) -> pl.Expr:
    """String -> Float64, tolerating "nan", "inf", "1e-4", "3" and quoted numbers."""
    return col.str.strip_chars().str.strip_chars('"').cast(pl.Float64, strict=False)


def _alias_expr(name: str, sources: list[tuple[str, float]], cols: set[str]) -> pl.Expr | None:
    """coalesce(source_i * factor_i) for the sources present in this frame."""
    dtype = FIELDS[name].dtype
    parts: list[pl.Expr] = []
    for col, factor in sources:
        if col not in cols:
            continue
        if dtype == pl.String():
            parts.append(pl.col(col))
        else:
            v = _num(pl.col(col))
            parts.append(v * factor if factor != 1.0 else v)
    if not parts:
        return None
    e = pl.coalesce(parts) if len(parts) > 1 else parts[0]
    if dtype.is_integer():
        e = pl.when(e.is_finite()).then(e).round(0).cast(dtype, strict=False)
    return e.alias(name)


def extract_object(obj: pl.Series, prefix: str) -> pl.DataFrame:
    """Known metric keys of JSON-object strings (`extra`, `fields`), as string columns.

    The keys present are found first (a cheap regex; nested keys only add empty columns), so the
    parser is asked for just those: its cost grows with the width of the schema.
    """
    keys = obj.str.extract_all(r'"([^"\\]{1,64})"\s*:').explode().drop_nulls().unique().to_list()
    wanted = {k[1:].split('"', 1)[0]: pl.String for k in keys}
    wanted = {k: v for k, v in wanted.items() if k in ALIASES}
    if not wanted:
        return pl.DataFrame()
    obj = pl.select(
        pl.when(obj.str.starts_with("{")).then(obj).otherwise(pl.lit("{}")).alias("x")
    ).to_series().fill_null("{}")
    blob = obj.str.join("\n").item()
    try:
        df = pl.read_ndjson(io.BytesIO(blob.encode()), schema=wanted)
        if df.height != len(obj):
            raise ValueError(f"{prefix} parse lost rows")
    except Exception:  # noqa: BLE001 - polars re-serialises control characters raw; parse leniently
        df = _lenient_objects(obj, list(wanted))
    df = df.select([c for c in df.columns if df[c].null_count() < df.height])
    return df.rename({c: f"{prefix}.{c}" for c in df.columns})


def _lenient_objects(obj: pl.Series, keys: list[str]) -> pl.DataFrame:
    """Row-by-row fallback for object strings the NDJSON parser refuses (raw control characters)."""
    from .jsonl import _stringify

    cols: dict[str, list[str | None]] = {k: [] for k in keys}
    for s in obj.to_list():
        try:
            o = json.loads(s, strict=False)
        except ValueError:
            o = {}
        if not isinstance(o, dict):
            o = {}
        for k in keys:
            cols[k].append(_stringify(o.get(k)))
    return pl.DataFrame(cols, schema={k: pl.String for k in keys})


def extract_message_metrics(message: pl.Series) -> pl.DataFrame:
    """`key=value` pairs of known metric names in free text ("step=1500 loss=2.345 lr=1.2e-4")."""
    present = (
        message.str.extract_all(r"[A-Za-z_][A-Za-z0-9_]*=").explode().drop_nulls().unique().to_list()
    )
    keys = [k[:-1] for k in present if k[:-1] in MESSAGE_KEYS]
    if not keys:
        return pl.DataFrame()
    frame = pl.DataFrame({"m": message})
    return frame.select(
        [
            pl.col("m").str.extract(rf"(?:^|[\s,;(\[{{|])" + k + r"=([^\s,;)\]}|]+)", 1).alias(f"msg.{k}")
            for k in keys
        ]
    )


def canonical(raw: pl.DataFrame, rank_hint: int | None, host_hint: str | None) -> pl.DataFrame:
    """Raw string columns -> canonical columns (without source_file/format; caller adds them)."""
    parts = [raw]
    for obj in ("extra", "fields"):
        if obj in raw.columns and raw[obj].null_count() < raw.height:
            got = extract_object(raw[obj], obj)
            if got.width:
                parts.append(got)
    if "message" in raw.columns and raw["message"].null_count() < raw.height:
        mm = extract_message_metrics(raw["message"])
        if mm.width:
            parts.append(mm)
    df = pl.concat(parts, how="horizontal") if len(parts) > 1 else raw
    cols = set(df.columns)

    # envelope: first alias present wins
    env: dict[str, list[str]] = {}
    for alias, canon in ENVELOPE_ALIASES.items():
        if alias in cols and canon != "extra":
            env.setdefault(canon, []).append(alias)

    def first(canon: str) -> pl.Expr:
        names = env.get(canon, [])
        if not names:
            return pl.lit(None, dtype=pl.String)
        return pl.coalesce([pl.col(n) for n in names]) if len(names) > 1 else pl.col(names[0])

    rank_rec = _num(first("rank"))
    rank_rec = pl.when(rank_rec.is_finite() & (rank_rec >= 0) & (rank_rec == rank_rec.floor())).then(rank_rec).cast(pl.Int32, strict=False)
    exprs: list[pl.Expr] = [
        parse_timestamp(first("timestamp")).alias("timestamp"),
        rank_rec.fill_null(pl.lit(rank_hint, dtype=pl.Int32)).alias("rank"),
        pl.when(rank_rec.is_not_null()).then(pl.lit("record"))
        .when(pl.lit(rank_hint is not None)).then(pl.lit("path"))
        .otherwise(pl.lit("none")).alias("rank_source"),
        first("host").fill_null(pl.lit(host_hint, dtype=pl.String)).alias("host"),
        first("message").alias("message"),
    ]
    exprs.append(
        first("level").str.strip_chars().str.to_uppercase()
        .replace_strict(LEVEL_ALIASES, default="INFO", return_dtype=pl.String)
        .fill_null("INFO").cast(Level).alias("level")
    )

    # metrics: top-level key, then extra.key, then message key=value; first present wins
    metric_sources: dict[str, list[tuple[str, float]]] = {}
    for prefix in ("fields.", "extra.", "msg."):
        for alias, (canon, factor) in ALIASES.items():
            if canon in ("rank",):
                continue
            c = prefix + alias
            if c in cols:
                metric_sources.setdefault(canon, []).append((c, factor))
    metric_exprs = [e for name, src in metric_sources.items() if (e := _alias_expr(name, src, cols)) is not None]
    exprs.extend(metric_exprs)

    # Flat metric lines (HF Trainer / ms-swift) carry no event: a line with loss or step is a
    # training step, anything else a metrics sample.
    is_step = pl.lit(False)
    for e in metric_exprs:
        if e.meta.output_name() in ("loss", "step"):
            is_step = is_step | e.is_not_null()
    flat = pl.when(is_step).then(pl.lit("TRAIN_STEP")).otherwise(pl.lit("METRICS"))
    event = first("event").str.strip_chars().fill_null(flat)
    keep = ["line"] + [c for c in ("extra", "fields") if c in cols]
    return df.select([*exprs, event.alias("event"), *[pl.col(c) for c in keep]])
