"""Does a change to diagnose-time code leave every report as it was? (byte for byte)

    python bench/same_reports.py --baseline OLD_TREE [STORE_OR_LOGS...]
    git archive main | tar -x -C /tmp/old    # an older tree (copy the built scanner beside it)

Runs `forensics diagnose PATH --format json` (or the --formats given) with this tree and with the
tree at OLD_TREE (a directory holding an older `forensics/` package), each a new process, and
compares their stdout. The paths default to every folder of sample_logs/ as logs (ingested into a
fresh cache per tree: the one-shot path, ingest then diagnose in one process) and as a store
(ingested once by this tree, then diagnosed by both). Exit 1 and the first differing lines when
any report differs.
"""
from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import _measure as M  # noqa: E402


def report(tree: str | None, path: str, fmt: str, cache: str) -> bytes:
    env = M._tree_env(tree or str(REPO))   # both from one neutral folder: the text's paths are relative to it
    env["FORENSICS_CACHE"] = cache
    p = subprocess.run([sys.executable, "-m", "forensics", "diagnose", path, "--format", fmt],
                       capture_output=True, env=env, cwd=os.path.dirname(cache))
    if p.returncode not in (0, 3):
        raise SystemExit(f"{tree or 'this tree'}: diagnose {path} exited {p.returncode}\n{p.stderr.decode()[-2000:]}")
    return p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="stores or log folders (default: sample_logs/*, as logs and as stores)")
    ap.add_argument("--baseline", required=True, help="a directory holding the older forensics/ package")
    ap.add_argument("--formats", default="json", help="comma-separated: json, text, md, html")
    a = ap.parse_args()
    base = str(Path(a.baseline).resolve())
    M.compile_tree(None)
    M.compile_tree(base)
    scratch = Path(tempfile.mkdtemp(prefix="same-reports-"))
    paths = [str(Path(p).resolve()) for p in a.paths]
    if not paths:
        for d in sorted(p for p in (REPO / "sample_logs").iterdir() if p.is_dir()):
            paths.append(str(d))
            store = scratch / f"{d.name}.forensics"
            subprocess.run([sys.executable, "-m", "forensics", "ingest", str(d), "-o", str(store)],
                           check=True, capture_output=True, cwd=str(REPO))
            paths.append(str(store))
    bad = 0
    for path in paths:
        for fmt in a.formats.split(","):
            new = report(None, path, fmt, str(scratch / "cache-new"))
            old = report(base, path, fmt, str(scratch / "cache-old"))
            same = new == old
            bad += not same
            print(f"{'same' if same else 'DIFFERENT':9s} {len(new):>9,} bytes  {fmt:4s} {path}", flush=True)
            if not same:
                sys.stdout.writelines(list(difflib.unified_diff(
                    old.decode().splitlines(True), new.decode().splitlines(True), "baseline", "this tree", n=1))[:40])
    print(f"{len(paths) * len(a.formats.split(',')) - bad} of {len(paths) * len(a.formats.split(','))} reports identical")
    if os.environ.get("KEEP") is None:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
