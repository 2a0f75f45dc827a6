"""HTA and `forensics trace-stats` side by side on the same Kineto traces: time, peak RSS, agreement.

    python bench/traces.py ../shared/realdata/kineto/dlrm_8rank          # the shared DLRM traces
    python bench/traces.py --gen 8x50 --layers 2000 [--gzip] [--late-rank 3] [--work /tmp/traces-bench]
    python bench/traces.py DIR --no-hta                                   # forensics alone (big sets)

Each tool runs in its own process (bench/_measure.py: wall and CPU seconds, peak RSS of that
process; HTA parses ranks in a process pool: its largest worker's peak RSS is printed beside).
Per rank it compares HTA's temporal breakdown (span, idle, compute, non-compute), the
communication / computation overlap and the idle-time total with forensics' whole-trace rows,
within 1%, and prints each difference with the reason it is known to have (kernels whose launch is
not in the trace: HTA joins them to the trace's first row). Needs `pip install -e '.[bench]'`.
Owns nothing else.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _measure import command  # noqa: E402

TOL = 0.01


def _close(a: float, b: float, abs_tol: float = 0.0) -> bool:
    return abs(a - b) <= max(TOL * max(abs(a), abs(b)), abs_tol)


def run_forensics(d: str) -> tuple[object, dict]:
    run, out = command([sys.executable, "-m", "forensics", "trace-stats", d, "--format", "json"])
    return run, json.loads(out)


def run_hta(d: str) -> tuple[object, dict]:
    run, out = command([sys.executable, str(HERE / "_hta.py"), d])
    return run, json.loads(out.decode().strip().splitlines()[-1])


def compare(ours: dict, hta: dict) -> list[str]:
    """Differences beyond 1%, each with what explains it when known."""
    whole = {r["rank"]: r for r in ours["breakdown"] if r["step"] is None}
    diffs = []
    for rank_s, h in sorted(hta.items(), key=lambda kv: int(kv[0])):
        r = whole.get(int(rank_s))
        if r is None:
            diffs.append(f"rank {rank_s}: in HTA only")
            continue
        pairs = [("span_us", "kernel_span_us"), ("idle_us", "idle_us"), ("compute_us", "compute_us"),
                 ("non_compute_us", "non_compute_us")]
        for a, b in pairs:
            if not _close(r[a], h[b], 1.0):
                diffs.append(f"rank {rank_s} {a}: forensics {r[a]:.1f} HTA {h[b]:.1f}")
        if not _close(r["overlap_pct"] or 0.0, h["overlap_pct"], 0.01):   # HTA rounds to 0.01 %
            diffs.append(f"rank {rank_s} overlap %: forensics {r['overlap_pct']:.2f} HTA {h['overlap_pct']:.2f}")
        ours_idle = r["host_wait_us"] + r["kernel_wait_us"] + r["other_wait_us"]
        hta_idle = sum(h["idle_causes_us"].values())
        if not _close(ours_idle, hta_idle, 1.0):
            diffs.append(f"rank {rank_s} idle causes total: forensics {ours_idle:.1f} HTA {hta_idle:.1f}")
        for ours_k, hta_k in (("host_wait_us", "host_wait"), ("kernel_wait_us", "kernel_wait")):
            if not _close(r[ours_k], h["idle_causes_us"].get(hta_k, 0.0), 1.0):
                diffs.append(f"rank {rank_s} {hta_k}: forensics {r[ours_k]:.1f} HTA {h['idle_causes_us'].get(hta_k, 0.0):.1f} "
                             "(explained when some kernels' launches are not in the trace: HTA joins such a kernel to "
                             "the trace's row 0 and calls its gap host wait when that event is later)")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*")
    ap.add_argument("--gen", metavar="RANKSxMB", help="generate traces first (bench/gen_traces.py), e.g. 8x50")
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--late-rank", type=int, default=3)
    ap.add_argument("--layers", type=int, default=48, help="kernels per profiler step of generated traces")
    ap.add_argument("--work", default="/tmp/traces-bench")
    ap.add_argument("--no-hta", action="store_true", help="forensics alone (sets HTA cannot hold in RAM)")
    a = ap.parse_args()
    dirs = list(a.dirs)
    if a.gen:
        ranks, mb = a.gen.lower().split("x")
        out = Path(a.work) / f"{ranks}x{mb}-l{a.layers}{'-gz' if a.gzip else ''}"
        if not out.is_dir():
            subprocess.run([sys.executable, str(HERE / "gen_traces.py"), str(out), "--ranks", ranks, "--mb", mb,
                            "--late-rank", str(a.late_rank), "--layers", str(a.layers), *(["--gzip"] if a.gzip else [])],
                           check=True)
        dirs.append(str(out))
    for d in dirs:
        size = sum(p.stat().st_size for p in Path(d).rglob("*") if p.is_file())
        print(f"== {d}: {size / 1e6:,.1f} MB on disk")
        fr, ours = run_forensics(d)
        print(f"forensics trace-stats: {fr.wall:7.2f} s wall {fr.cpu:7.2f} s CPU  peak RSS {fr.rss_mb:7.0f} MB")
        late = ours.get("straggler")
        print(f"  late rank at communication kernels: {late['rank'] if late else 'none'}")
        if a.no_hta:
            continue
        hr, hta = run_hta(d)
        pool = hta.pop("_pool_peak_rss_mb", 0.0)
        print(f"HTA 0.5 (TraceAnalysis):{hr.wall:7.2f} s wall {hr.cpu:7.2f} s CPU  peak RSS {hr.rss_mb:7.0f} MB "
              f"(its largest parse worker: {pool:.0f} MB)")
        diffs = compare(ours, hta)
        print("  breakdown, overlap and idle time agree within 1% on every rank" if not diffs else
              "  differences beyond 1%:\n    " + "\n    ".join(diffs))


if __name__ == "__main__":
    main()
