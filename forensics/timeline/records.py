"""Machine-readable output of the timeline views: one time format (ISO-8601 UTC with Z,
microseconds) and frames made JSON/CSV-ready.

Owns `iso`, `plain` and `records`. It must not read the store.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import polars.selectors as cs

from .inputs import _utc


ISO_FORMAT = "%Y-%m-%dT%H:%M:%S%.6fZ"


def iso(t: dt.datetime | None) -> str | None:
    """ISO-8601 UTC with Z, microseconds (the one time format of every machine-readable output)."""
    if t is None:
        return None
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def plain(df: pl.DataFrame, drop_null_columns: bool = False) -> pl.DataFrame:
    """A frame ready for JSON/CSV: datetimes as ISO-8601 Z strings, enums as strings, NaN/inf as
    null (JSON has no NaN), all-null columns dropped on request."""
    if drop_null_columns:
        df = df.select([c for c in df.columns if df[c].null_count() < df.height or c in ("timestamp", "rank")])
    return df.with_columns(
        cs.datetime().dt.convert_time_zone("UTC").dt.to_string(ISO_FORMAT),
        cs.by_dtype(pl.Enum, pl.Categorical).cast(pl.String),
        cs.float().replace([float("inf"), float("-inf")], None).fill_nan(None),
    )


def records(df: pl.DataFrame, drop_null_columns: bool = False) -> list[dict[str, Any]]:
    """The rows of a frame as JSON-ready dicts (see `plain`)."""
    return plain(df, drop_null_columns).to_dicts()
