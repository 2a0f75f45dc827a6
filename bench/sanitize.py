"""Build the JSON-lines scanner with AddressSanitizer + UndefinedBehaviorSanitizer and run the
differential fuzz (tests/test_native_scan.py: hypothesis lines and every shipped JSONL file,
scanner against the Python path) on that build. Any sanitizer report fails the run.

    python bench/sanitize.py              # build into a temp dir, run the tests, exit 0/1
    python bench/sanitize.py -k shipped   # extra pytest arguments are passed through

Not part of the default test run: it needs gcc with libasan/libubsan and takes minutes.
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(out: Path) -> Path:
    so = out / ("_scan" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = ["gcc", "-shared", "-fPIC", "-std=c99", "-g", "-O1", "-fno-omit-frame-pointer",
           "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
           f"-I{sysconfig.get_paths()['include']}", str(ROOT / "forensics/ingest/_scan.c"), "-o", str(so)]
    subprocess.run(cmd, check=True)
    return so


def runtime(name: str) -> str:
    return subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        so = build(Path(tmp))
        env = {
            **os.environ,
            "FORENSICS_SCAN_LIB": str(so),
            "LD_PRELOAD": f"{runtime('libasan.so')}:{runtime('libubsan.so')}",
            # CPython's own allocations are not ours to judge: leaks off, stop at the first error
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
            "PYTHONMALLOC": "malloc",
        }
        # -s: a sanitizer report is written to stderr by a process that then halts; pytest's
        # capture would swallow it
        cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-x", "-p", "no:cacheprovider",
               str(ROOT / "tests/test_native_scan.py"), *argv]
        print("sanitized scanner:", so, file=sys.stderr)
        r = subprocess.run(cmd, env=env, cwd=ROOT)
        print("sanitizer run:", "clean" if r.returncode == 0 else f"FAILED (exit {r.returncode})", file=sys.stderr)
        return r.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
