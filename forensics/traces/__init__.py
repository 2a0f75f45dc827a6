"""Profiler (Kineto) traces read at their peers' depth: GPU kernels, their launches and steps.

`reader` streams one trace file into Arrow (never the whole JSON in memory); `stats` answers
the questions HolisticTraceAnalysis (HTA) users ask of a set of traces (temporal breakdown,
idle-time causes, communication/computation overlap, top kernels, late arrivals at
communication kernels). This package must not write stores (ingest/kineto.py does) nor render
(cli.py and report/ do).
"""
from __future__ import annotations
