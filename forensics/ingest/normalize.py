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
import threading

import numpy as np
import orjson
import polars as pl

from ..schema import ALIASES, ENVELOPE_ALIASES, FIELDS, LEVEL_ALIASES, EventSource, Level

# Every top-level key the JSONL reader asks polars for. Anything else (flat metric lines' loss,
# step, ...) goes verbatim to the `fields` JSON column, from which known metrics are typed.
# Keep this list short: the NDJSON parser's cost grows with the width of the schema.
KNOWN_TOP: list[str] = ["timestamp", "rank", "host", "level", "event", "message", "extra"]

# A key's closing quote and its colon: counted to find objects with keys nobody asked for.
KEY_COLON = r'"[ \t\r\n]*:'

# Metric names looked for as `key=value` in free text.
MESSAGE_KEYS: dict[str, tuple[str, float]] = {
    k: v for k, v in ALIASES.items() if FIELDS.get(v[0]) is not None and k.isidentifier() and k not in ("path", "file", "op", "pg", "phase", "util", "temp", "power", "duration", "iter")
}


def stringify(v: object) -> str | None:
    """The same string polars' NDJSON reader yields for a value read as String."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return orjson.dumps(v).decode() if v == v else "NaN"
    try:
        return orjson.dumps(v).decode()
    except TypeError:  # an integer beyond 64 bits inside a list or object
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


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
        # a column divisor: polars turns division by a scalar into multiplication by its
        # reciprocal, which lands 1-2 us off at nanosecond magnitudes (and the C scanner divides)
        .otherwise(num / (num * 0.0 + 1e3))
    )
    epoch = pl.when(num.is_finite()).then(us.round(0).cast(pl.Int64, strict=False)).cast(pl.Datetime("us", "UTC"))
    return pl.coalesce(with_zone, naive, epoch)


def _num(col: pl.Expr) -> pl.Expr:
    """String -> Float64 ("nan", "inf", "1e-4", "3" all parse; anything else is null)."""
    return col.cast(pl.Float64, strict=False)


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


# Keys seen so far inside `extra`/`fields` objects by this thread (insertion-ordered sets). Later
# blocks of a run almost always carry the same keys, so they are parsed without rediscovery.
# Per thread: shared, one thread's new keys made another skip its re-parse (measured: 0.2-0.5% of
# typed values lost on a 64-rank run ingested on 2 threads).
_SEEN = threading.local()
_MAX_SEEN = 64


def _seen_keys(prefix: str) -> dict[str, None]:
    d = getattr(_SEEN, "keys", None)
    if d is None:
        d = _SEEN.keys = {}
    return d.setdefault(prefix, {})


def _discover(obj: pl.Series) -> list[str]:
    """Every quoted name followed by ':' (a superset of the keys: nested keys are included)."""
    found = obj.str.extract_all(r'"([^"\\]{1,64})"\s*:').explode().drop_nulls().unique().to_list()
    return [k[1:].split('"', 1)[0] for k in found]


def _typed(key: str) -> pl.DataType:
    """Numbers are parsed as numbers (no float->text->float round trip); the rest as text."""
    canon = ALIASES.get(key)
    if canon is not None and FIELDS[canon[0]].dtype != pl.String():
        return pl.Float64()
    return pl.String()


def _parse_objects(obj: pl.Series, keys: list[str], prefix: str) -> pl.DataFrame:
    blob = obj.str.join("\n").item().encode()
    for schema in ({k: _typed(k) for k in keys}, {k: pl.String() for k in keys}):
        try:
            df = pl.read_ndjson(io.BytesIO(blob), schema=schema)
        except Exception:  # noqa: BLE001 - a "nan" string in a number column, a raw control char ...
            continue
        if df.height == len(obj):
            return df
    return _lenient_objects(obj, keys)


def _unexplained(obj: pl.Series, df: pl.DataFrame) -> pl.Series:
    """Rows whose object has keys the parse was not asked for: each key contributes one '":'
    to the text; the parsed values account for the ones inside them. (Series arithmetic, not
    expressions: a key may be named "*" or "^.*$", which pl.col would read as a pattern.)"""
    total = obj.str.count_matches(KEY_COLON).cast(pl.Int64)
    if not df.width:
        return total > 0
    parsed = pl.Series(np.zeros(df.height, dtype=np.int64))
    for s in df.get_columns():
        parsed = parsed + s.is_not_null().cast(pl.Int64)
        if s.dtype == pl.String():
            parsed = parsed + s.str.count_matches(KEY_COLON).fill_null(0).cast(pl.Int64)
    return total != parsed


def extract_object(obj: pl.Series, prefix: str, envelope: bool = False) -> pl.DataFrame:
    """Known metric keys of JSON-object strings (`extra`, `fields`), as string columns.

    The parser is asked only for keys known to be present (its cost grows with the width of the
    schema). Keys seen in earlier blocks are tried first; rows the count check cannot explain are
    searched for new keys, and the block is parsed again if any turn up.
    """
    obj = pl.select(
        pl.when(obj.str.starts_with("{")).then(obj).otherwise(pl.lit("{}")).alias("x")
    ).to_series().fill_null("{}")
    seen = _seen_keys(prefix)
    keys = list(seen)
    df = _parse_objects(obj, keys, prefix) if keys else pl.DataFrame()
    bad = _unexplained(obj, df)
    if bad.any():
        asked = set(keys)
        new = [k for k in _discover(obj.filter(bad)) if k not in asked]
        if new:
            for k in new:
                seen.setdefault(k, None)
            keys = list(seen)
            if len(keys) > _MAX_SEEN:  # a run with ever-changing keys: parse only what we type
                seen.clear()
                keys = [k for k in _discover(obj) if k in ALIASES or (envelope and k in ENVELOPE_ALIASES)]
            df = _parse_objects(obj, keys, prefix) if keys else pl.DataFrame()
    wanted = [c for c in df.columns if (c in ALIASES or (envelope and c in ENVELOPE_ALIASES)) and df[c].null_count() < df.height]
    return df.select(wanted).rename({c: f"{prefix}.{c}" for c in wanted})


def _lenient_objects(obj: pl.Series, keys: list[str]) -> pl.DataFrame:
    """Row-by-row fallback for object strings the NDJSON parser refuses (raw control characters)."""
    cols: dict[str, list[str | None]] = {k: [] for k in keys}
    for s in obj.to_list():
        try:
            o = json.loads(s, strict=False)
        except ValueError:
            o = {}
        if not isinstance(o, dict):
            o = {}
        for k in keys:
            cols[k].append(stringify(o.get(k)))
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
            pl.col("m").str.extract(r"(?:^|[\s,;(\[{|])" + k + r"=([^\s,;)\]}|]+)", 1).alias(f"msg.{k}")
            for k in keys
        ]
    )


def _level_map() -> dict[str, str]:
    """Level spellings seen in logs (any case, padded) -> canonical level."""
    m: dict[str, str] = {}
    for k, v in LEVEL_ALIASES.items():
        for variant in (k, k.lower(), k.title()):
            m[variant] = v
    return m


_LEVELS = _level_map()


def _timestamps(col: pl.Series) -> pl.Series:
    """parse_timestamp, cheapest parser first: most logs use one ISO form throughout."""
    frame = pl.DataFrame({"t": col})
    fast = frame.select(
        pl.col("t").str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%#z", strict=False, time_unit="us", time_zone="UTC")
    ).to_series()
    if fast.null_count() == col.null_count():
        return fast.alias("timestamp")
    # Row by row: a line's time must not depend on the other lines of its block.
    return frame.select(pl.coalesce(fast, parse_timestamp(pl.col("t")))).to_series().alias("timestamp")


def canonical(raw: pl.DataFrame, rank_hint: int | None, host_hint: str | None) -> pl.DataFrame:
    """Raw string columns -> canonical columns (without source_file/format; caller adds them).

    `raw` has the envelope keys the reader asked for, `extra` and `fields` as JSON object text,
    and `line`. Envelope aliases (msg, levelname, ts, hostname ...) arrive inside `fields`.
    """
    parts = [raw]
    for obj in ("extra", "fields"):
        if obj in raw.columns and raw[obj].null_count() < raw.height:
            got = extract_object(raw[obj], obj, envelope=obj == "fields")
            if got.width:
                parts.append(got)
    if "message" in raw.columns and raw["message"].null_count() < raw.height:
        mm = extract_message_metrics(raw["message"])
        if mm.width:
            parts.append(mm)
    df = pl.concat(parts, how="horizontal") if len(parts) > 1 else raw
    cols = set(df.columns)

    # envelope: the canonical key, then its aliases found among unknown top-level keys
    env: dict[str, list[str]] = {}
    for alias, canon in ENVELOPE_ALIASES.items():
        for c in (alias, f"fields.{alias}"):
            if c in cols and canon != "extra" and not (c == alias and alias != canon):
                env.setdefault(canon, []).append(c)

    def first(canon: str) -> pl.Expr:
        names = env.get(canon, [])
        if not names:
            return pl.lit(None, dtype=pl.String)
        return pl.coalesce([pl.col(n) for n in names]) if len(names) > 1 else pl.col(names[0])

    ts_names = env.get("timestamp", [])
    if len(ts_names) == 1:
        df = df.with_columns(_timestamps(df[ts_names[0]]).alias("__ts"))
        ts = pl.col("__ts")
    else:
        ts = parse_timestamp(first("timestamp"))
    rank_rec = first("rank").cast(pl.Float64, strict=False)
    rank_rec = pl.when((rank_rec >= 0) & (rank_rec == rank_rec.floor()) & (rank_rec < 2**31)).then(rank_rec).cast(pl.Int32, strict=False)
    exprs: list[pl.Expr] = [
        ts.alias("timestamp"),
        rank_rec.fill_null(pl.lit(rank_hint, dtype=pl.Int32)).alias("rank"),
        pl.when(rank_rec.is_not_null()).then(pl.lit("record"))
        .when(pl.lit(rank_hint is not None)).then(pl.lit("path"))
        .otherwise(pl.lit("none")).alias("rank_source"),
        first("host").fill_null(pl.lit(host_hint, dtype=pl.String)).alias("host"),
        first("message").alias("message"),
        first("level").replace_strict(_LEVELS, default="INFO", return_dtype=pl.String)
        .fill_null("INFO").cast(Level).alias("level"),
    ]

    # metrics: top-level key, then extra.key, then message key=value; first present wins
    metric_sources: dict[str, list[tuple[str, float]]] = {}
    for prefix in ("fields.", "extra.", "msg."):
        for alias, (canon, factor) in ALIASES.items():
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
    named = first("event")
    keep = ["line"] + [c for c in ("extra", "fields") if c in cols]
    return df.select([
        *exprs, named.fill_null(flat).alias("event"),
        pl.when(named.is_null()).then(pl.lit("inferred")).otherwise(pl.lit("record")).cast(EventSource).alias("event_source"),
        *[pl.col(c) for c in keep],
    ])
