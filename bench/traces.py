"""HTA and `forensics trace-stats` side by side on the same Kineto traces: time, peak RSS, agreement.

    python bench/traces.py ../shared/realdata/kineto/dlrm_8rank          # the shared DLRM traces
    python bench/traces.py --gen 8x50 --layers 2000 [--gzip] [--late-rank 3] [--work /tmp/traces-bench]
    python bench/traces.py DIR --no-hta --ingest                          # forensics alone (big sets)
    python bench/traces.py DIR --hta-only --hta-json hta.json             # HTA alone, figures kept ...
    python bench/traces.py DIR --hta-json hta.json                        # ... and compared later

Each tool runs in its own process: wall seconds, CPU seconds of it and all its children, and the
peak of the summed RSS of its process tree (both read ranks in worker processes), sampled every
50 ms, with the largest single process's peak beside it.
Per rank it compares HTA's temporal breakdown (span, idle, compute, non-compute), the
communication / computation overlap and the idle-time total with forensics' whole-trace rows,
within 1%, and prints each difference with the reason it is known to have (kernels whose launch is
not in the trace: HTA joins them to the trace's first row). Needs `pip install -e '.[bench]'`.
Owns nothing else.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

TOL = 0.01


def _close(a: float, b: float, abs_tol: float = 0.0) -> bool:
    return abs(a - b) <= max(TOL * max(abs(a), abs(b)), abs_tol)


@dataclass
class TreeRun:
    wall: float
    cpu: float            # user + sys of the command and every process it started
    rss_mb: float         # peak of the summed RSS of the command's process tree (sampled)
    top_mb: float         # peak RSS of its largest single process (sampled)


def tree_command(argv: list[str]) -> tuple[TreeRun, bytes]:
    """`argv` in a new process: wall and CPU seconds of it and its children, and the peak of the
    summed RSS of its process tree, sampled every 50 ms (both tools read ranks in worker
    processes: one process's peak RSS would leave the workers out)."""
    import psutil

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err)
        proc = psutil.Process(p.pid)
        peak = top = 0
        while p.poll() is None:
            try:
                rss = [proc.memory_info().rss] + [c.memory_info().rss for c in proc.children(recursive=True)]
                peak, top = max(peak, sum(rss)), max(top, *rss)
            except psutil.Error:
                pass
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode not in (0, 3):
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed: {stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return TreeRun(wall, cpu, peak / 2**20, top / 2**20), stdout


def run_forensics(d: str, cmd: str = "trace-stats") -> tuple[TreeRun, dict]:
    if cmd == "ingest":
        store = tempfile.mkdtemp(prefix="traces-store-", dir=os.environ.get("TRACES_BENCH_TMP"))
        try:
            run, _ = tree_command([sys.executable, "-m", "forensics", "ingest", d, "-o", store])
        finally:
            shutil.rmtree(store, ignore_errors=True)
        return run, {}
    run, out = tree_command([sys.executable, "-m", "forensics", "trace-stats", d, "--format", "json"])
    return run, json.loads(out)


def run_hta(d: str) -> tuple[TreeRun, dict]:
    run, out = tree_command([sys.executable, str(HERE / "_hta.py"), d])
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
    ap.add_argument("--hta-only", action="store_true", help="HTA alone (run it early, in the background)")
    ap.add_argument("--hta-json", metavar="FILE",
                    help="HTA's figures and numbers: read from FILE when it exists, else written there after HTA runs")
    ap.add_argument("--ingest", action="store_true", help="also time `forensics ingest DIR` (into a temporary store)")
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
        print(f"== {d}: {size / 1e6:,.1f} MB on disk", flush=True)
        ours = None
        if not a.hta_only:
            fr, ours = run_forensics(d)
            print(f"forensics trace-stats:   {_figures(fr)}", flush=True)
            late = ours.get("straggler")
            print(f"  late rank at communication kernels: {late['rank'] if late else 'none'}", flush=True)
            if a.ingest:
                ir, _ = run_forensics(d, "ingest")
                print(f"forensics ingest:        {_figures(ir)}", flush=True)
        if a.no_hta:
            continue
        saved = Path(a.hta_json) if a.hta_json else None
        if saved is not None and saved.exists():
            doc = json.loads(saved.read_text())
            hr, hta = TreeRun(**doc["run"]), doc["numbers"]
            print(f"HTA figures from {saved}")
        else:
            hr, hta = run_hta(d)
            if saved is not None:
                saved.write_text(json.dumps({"dir": d, "run": hr.__dict__, "numbers": hta}))
        hta.pop("_pool_peak_rss_mb", None)
        print(f"HTA 0.5 (TraceAnalysis): {_figures(hr)}", flush=True)
        if ours is None:
            continue
        diffs = compare(ours, hta)
        print("  breakdown, overlap and idle time agree within 1% on every rank" if not diffs else
              "  differences beyond 1%:\n    " + "\n    ".join(diffs))


def _figures(r: TreeRun) -> str:
    return (f"{r.wall:8.2f} s wall {r.cpu:8.2f} s CPU  peak RSS {r.rss_mb:7.0f} MB (process tree, summed; "
            f"largest process {r.top_mb:.0f} MB)")


if __name__ == "__main__":
    main()
