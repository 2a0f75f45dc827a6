"""Measuring a command or a function: wall seconds, CPU seconds, peak RSS, medians over runs.

Shared by the bench scripts (not by tests). Owns nothing else. The machine may be shared and
have 2 cores: CPU seconds (user + sys, all threads) are steadier than wall seconds there, and
medians steadier than single runs; peak RSS is what `/usr/bin/time -v` calls "Maximum resident
set size".
"""
from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mb: float | None = None


@dataclass
class Figures:
    """Medians of wall and CPU seconds, and the largest peak RSS, over several runs."""

    runs: list[Run]

    @property
    def wall(self) -> float:
        return statistics.median(r.wall for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu for r in self.runs)

    @property
    def rss_mb(self) -> float | None:
        vals = [r.rss_mb for r in self.runs if r.rss_mb is not None]
        return max(vals) if vals else None


# Linux carries a process's peak RSS across fork and exec, so a child of this (large) process
# would report at least this process's size: a small wrapper process starts the command and
# reports the child's rusage on stderr.
_WRAPPER = """
import os, subprocess, sys, time
t = time.perf_counter()
p = subprocess.Popen(sys.argv[1:])
_, status, ru = os.wait4(p.pid, 0)
sys.stderr.write("\\n%r %r %r %r\\n" % (os.waitstatus_to_exitcode(status), time.perf_counter() - t,
                                   ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024))
"""


def command(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None,
            ok: tuple[int, ...] = (0, 3)) -> tuple[Run, bytes]:
    """`argv` in a new process: its wall and CPU seconds, peak RSS and stdout (exit codes in
    `ok` count as success: 3 is a tripped --fail-on / compare check)."""
    p = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True, env=env, cwd=cwd)
    code, wall, cpu, rss = p.stderr.decode().strip().splitlines()[-1].split()
    if int(code) not in ok:
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed: {p.stderr.decode()[-500:]}")
    return Run(float(wall), float(cpu), float(rss)), p.stdout


def _tree_env(pythonpath: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


_COMPILED: set[str] = set()


def compile_tree(pythonpath: str | None = None) -> None:
    """Byte-compile the forensics package `python -m forensics` imports (from `pythonpath` as
    `cli` runs it; else from the working directory first), once per tree. With
    PYTHONDONTWRITEBYTECODE set (this machine sets it) every process would otherwise compile its
    modules from source on start (~0.1 CPU s), which an installed package such as duckdb (compiled
    by pip) never pays: compiled first, the start-up is fair to both sides."""
    if (pythonpath or "") in _COMPILED:
        return
    _COMPILED.add(pythonpath or "")
    subprocess.run([sys.executable, "-c", "import compileall, os, forensics\n"
                    "compileall.compile_dir(os.path.dirname(forensics.__file__), quiet=1)"],
                   env=_tree_env(pythonpath), cwd=pythonpath or None, check=True)


def cli(args: list[str], pythonpath: str | None = None) -> tuple[Run, bytes]:
    """`python -m forensics ARGS` in a new process (imports included): its wall and CPU seconds,
    peak RSS and stdout. With `pythonpath`, the forensics package found there (e.g. a checkout
    of an older version); paths in ARGS must then be absolute. The tree is byte-compiled first
    (`compile_tree`)."""
    compile_tree(pythonpath)
    # `-m` puts the working directory first on sys.path: run the older tree from inside it
    return command([sys.executable, "-m", "forensics", *args], env=_tree_env(pythonpath), cwd=pythonpath or None)


def timed(fn: Callable[[], Any], reps: int, warmup: bool = True) -> Figures:
    """`fn` in this process: one warm-up call (file cache, thread pools), then `reps` runs."""
    if warmup:
        fn()
    runs = []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        runs.append(Run(time.perf_counter() - t, time.process_time() - c))
    return Figures(runs)


class PhasePeak:
    """Peak RSS of one phase of this process: /proc/self/clear_refs resets the high-water mark
    (Linux >= 4.0); elsewhere only the process-wide peak is known (`None` then)."""

    def __init__(self) -> None:
        self.ok = Path("/proc/self/clear_refs").exists()

    def reset(self) -> None:
        if self.ok:
            try:
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                self.ok = False

    def _status(self, key: str) -> float | None:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def peak(self) -> float | None:
        return self._status("VmHWM:") if self.ok else None

    def now(self) -> float | None:
        return self._status("VmRSS:")


def process_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
