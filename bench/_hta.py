"""HolisticTraceAnalysis (HTA) as the reference for `forensics trace-stats` (bench extra only).

Owns running HTA's TraceAnalysis on a folder of traces and reducing its answers to plain
numbers per rank (temporal breakdown, idle-time causes summed over streams, communication /
computation overlap). Must not be imported by the forensics package (HTA is not a dependency).
"""
from __future__ import annotations

import logging
from typing import Any


def hta_numbers(trace_dir: str) -> dict[int, dict[str, Any]]:
    """Per rank: HTA's temporal breakdown (us), idle-time causes (us, all streams) and overlap (%)."""
    logging.getLogger("hta").setLevel(logging.ERROR)
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=trace_dir)
    out: dict[int, dict[str, Any]] = {}
    tb = ta.get_temporal_breakdown(visualize=False)
    for r in tb.to_dict("records"):
        out[int(r["rank"])] = {
            "idle_us": float(r["idle_time(us)"]), "compute_us": float(r["compute_time(us)"]),
            "non_compute_us": float(r["non_compute_time(us)"]), "kernel_span_us": float(r["kernel_time(us)"]),
        }
    ov = ta.get_comm_comp_overlap(visualize=False)
    for r in ov.to_dict("records"):
        out[int(r["rank"])]["overlap_pct"] = float(r["comp_comm_overlap_pctg"])  # HTA returns it rounded to 0.01
    for rank in out:
        idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
        causes = idle.groupby("idle_category")["idle_time"].sum().to_dict()
        out[rank]["idle_causes_us"] = {k: float(v) for k, v in causes.items()}
    return out


if __name__ == "__main__":   # `python bench/_hta.py DIR`: the numbers as JSON (bench/traces.py runs it)
    import json
    import sys

    import resource

    doc = {str(r): v for r, v in hta_numbers(sys.argv[1]).items()}
    # HTA parses ranks in a process pool: the largest of its workers' peak RSS (reaped children)
    doc["_pool_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(doc))
