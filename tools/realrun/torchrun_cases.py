#!/usr/bin/env python3
"""Real `torchrun --tee 3` runs (gloo, CPU) whose console is exactly what torch writes: the
launcher's glog lines, `[defaultN]:` tee prefixes, PyTorch's `[rankN]:` prefixes on a failing
rank's lines, c10d's error text and torch elastic's ChildFailedError table. Each case is written
as a fixture with the verdict it must get by construction.

    python tools/realrun/torchrun_cases.py                      # all cases -> tests/fixtures/realrun_torchrun/<case>/
    python tools/realrun/torchrun_cases.py --out /tmp/t hang    # one case, elsewhere

Cases (3 ranks, one node, `torchrun --standalone --nproc-per-node 3 --tee 3`):
- dtype_mismatch: TORCH_DISTRIBUTED_DEBUG=DETAIL; at step 2 rank 1 all-reduces a float64 tensor,
  the others float32: ProcessGroupWrapper's fingerprint check raises on every rank.
  Verdict: collective_mismatch on rank 1.
- tee_hang: rank 1 stops taking part after step 3 (sleeps); the others time out in gloo's
  all_reduce (5 s) and exit; the launcher SIGTERMs rank 1. Rank 1 never writes a `[rank1]:` line:
  its identity comes from the tee prefix and the agent's table. Verdict: hang on rank 1.
Needs torch (tools/realrun/README.md: `pip install torch==2.13.0`).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = '''
import datetime, os, sys, time, torch, torch.distributed as dist
case = sys.argv[1]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
g = dist.new_group(timeout=datetime.timedelta(seconds=5))
r = dist.get_rank()
for step in range(6):
    print(f"step {step} | loss {2.0 - 0.1 * step + 0.01 * r:.3f} | 100.0 ms/step", flush=True)
    if case == "tee_hang" and r == 1 and step == 4:
        time.sleep(60)
    dt = torch.float64 if (case == "dtype_mismatch" and r == 1 and step == 2) else torch.float32
    dist.all_reduce(torch.ones(8, dtype=dt), group=g)
    time.sleep(0.1)
dist.destroy_process_group()
'''

CASES = {
    "dtype_mismatch": ({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, "collective_mismatch", [1], ["nccl_timeout", "crash"],
                       "rank 1 all-reduces a float64 tensor at step 2, ranks 0 and 2 float32 (DETAIL fingerprint check)"),
    "tee_hang": ({}, "hang", [1], ["nccl_timeout", "crash"],
                 "rank 1 sleeps 60 s at step 4 (no collective, no [rank1]: line); ranks 0, 2 time out in gloo (5 s); "
                 "torchrun SIGTERMs rank 1"),
}


def run(case: str, out: Path) -> None:
    env_extra, kind, ranks, must_not, injected = CASES[case]
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(SCRIPT)
        env = {**os.environ, **env_extra, "OMP_NUM_THREADS": "1"}
        t = time.time()
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                            "--tee", "3", str(script), case], env=env, capture_output=True, text=True, timeout=300)
        wall = time.time() - t
    out.mkdir(parents=True, exist_ok=True)
    # the console as a terminal would show it (stdout and stderr interleave there; here stderr
    # follows stdout), with the temporary script's directory made stable
    text = (p.stdout + p.stderr).replace(tmp, "/job")
    (out / "console.log").write_text(text)
    (out / "expected.toml").write_text(
        "[expect]\n"
        f'root_cause = "{kind}"\nranks = {ranks}\nmust_not = {must_not!r}\n\n'.replace("'", '"')
        + "[truth]\n"
        f'injected = "{injected}"\n'
        f'generator = "tools/realrun/torchrun_cases.py {case}"\n'
        f'torch = "{torch.__version__}"\nexit_code = {p.returncode}\nwall_s = {wall:.1f}\n'
        'backend = "gloo (CPU), torchrun --standalone --nproc-per-node 3 --tee 3"\n')
    print(f"{case}: exit {p.returncode}, {len(text.splitlines())} lines, {wall:.0f} s")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "realrun_torchrun")
    ap.add_argument("cases", nargs="*", default=list(CASES))
    a = ap.parse_args(argv)
    for c in a.cases:
        if (a.out / c).exists():
            shutil.rmtree(a.out / c)
        run(c, a.out / c)


if __name__ == "__main__":
    main(sys.argv[1:])
