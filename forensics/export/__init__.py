"""Exports of a run to other tools' formats (Perfetto / chrome://tracing).

Owns writing files other programs read. Must not judge the run (passes do) nor parse logs
(ingest does); an export is a view of the store.
"""
from __future__ import annotations

from .perfetto import ExportSummary, export_perfetto, parse_ranks, parse_steps, trace_events

__all__ = ["export_perfetto", "trace_events", "parse_ranks", "parse_steps", "ExportSummary"]
