#!/usr/bin/env python3
"""Run every realrun scenario (4 gloo ranks on this CPU box) and write the outputs as fixtures.

    python tools/realrun/make_fixtures.py                       # all scenarios
    python tools/realrun/make_fixtures.py straggler thermal     # some
    python tools/realrun/make_fixtures.py --out /tmp/realrun    # elsewhere

Installs nothing; needs torch (tested with torch==2.13.0 CPU) and, for the check, polars.
Each scenario goes to OUT/<scenario>/: rank_<N>.jsonl, console.log, expected.toml. Timings are
real, so numbers differ from run to run; structure (seeded data, init, step counts, injection
points) is the same. After writing, check_signatures.py verifies each signature is present.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# scenario -> (steps, root_cause, ranks, must_not, injected, alternatives)
PLAN: dict[str, dict] = {
    "healthy": dict(
        steps=80, root_cause="none", ranks=[],
        must_not=["straggler", "data_load_skew", "thermal_throttling", "nccl_timeout", "oom",
                  "hang", "loss_divergence"],
        injected="nothing: 4 healthy gloo ranks; rank 0 saves a checkpoint every 25 steps "
                 "(others wait for it at the next collective)"),
    "straggler": dict(
        steps=80, root_cause="straggler", ranks=[2],
        must_not=["nccl_timeout", "data_load_skew", "thermal_throttling"],
        injected="rank 2 +40 ms compute per step from step 0 (time.sleep after backward, "
                 "inside compute_ms)"),
    "data_skew": dict(
        steps=80, root_cause="data_load_skew", ranks=[1],
        must_not=["nccl_timeout", "straggler", "thermal_throttling"],
        injected="rank 1 shard reads throttled to 32 MB/s (sleep in Dataset.__getitems__ after "
                 "the preads), ~65 ms per 1024-sample (2.1 MB) batch, from step 0"),
    "thermal": dict(
        steps=80, root_cause="thermal_throttling", ranks=[3],
        must_not=["nccl_timeout", "straggler", "data_load_skew"],
        injected="rank 3 +50 ms (+-10%) compute per step from step 40 (real sleep); its GPU_STATS "
                 "readings are SYNTHETIC: temp ramps 66->92 C over steps 25-40, sm_clock 1200 MHz, "
                 "gpu_util 42-52 %, throttle_reasons 0x40 from step 40; others ~65 C / 1980 MHz / "
                 "94-99 %"),
    "rank_dies": dict(
        steps=80, root_cause="oom", ranks=[1], must_not=["nccl_timeout", "hang"],
        injected="rank 1 raises torch.OutOfMemoryError (CUDA allocator text) in fc2's forward at "
                 "step 50, logs CUDA_OOM, prints the traceback, keeps its sockets open for 8 s, "
                 "then os._exit(1); ranks 0,2,3 time out (gloo, 5 s) in the step-50 all_reduce"),
    "rank_dies_fast": dict(
        steps=80, root_cause="oom", ranks=[1], must_not=["nccl_timeout", "hang"],
        injected="as rank_dies but rank 1 os._exit(1)s at once: gloo peers see 'Connection reset/"
                 "closed by peer' within tens of ms (no timeout); still logged as NCCL_TIMEOUT "
                 "with reason=peer_closed"),
    "hang": dict(
        steps=80, root_cause="hang", ranks=[3], must_not=["nccl_timeout", "oom"],
        injected="rank 3 sleeps 60 s at the start of step 45 (no more lines, no collectives); "
                 "ranks 0-2 time out (gloo, 5 s) in the step-45 all_reduce and exit 1; the "
                 "launcher SIGTERMs rank 3 ~7 s after the last of them"),
    "grad_spike": dict(
        steps=80, root_cause="loss_divergence", ranks=[0, 1, 2, 3],
        must_not=["nccl_timeout", "straggler"], alternatives=["grad_norm_spike"],
        injected="lr x100 (0.05 -> 5.0, SGD momentum 0.9) on all ranks from step 60"),
    "lora_vanishing": dict(
        steps=80, root_cause="vanishing_grad", ranks=[0, 1, 2, 3],
        must_not=["nccl_timeout", "straggler", "loss_plateau"],
        injected="backbone frozen (requires_grad=False, grads None -> grad_norm_backbone 0.0); "
                 "rank-4 LoRA adapter on fc2 with B=0, A~N(0,1e-5), scale 0.25: adapter grads "
                 "~1e-5..1e-6, loss stays at its initial value"),
}


def toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def toml_list(xs) -> str:
    return "[" + ", ".join(toml_str(x) if isinstance(x, str) else str(x) for x in xs) + "]"


def write_expected(d: Path, name: str, p: dict, run: dict, torch_version: str) -> None:
    lines = ["[expect]",
             f"root_cause = {toml_str(p['root_cause'])}",
             f"ranks = {toml_list(p['ranks'])}"]
    if p.get("must_not"):
        lines.append(f"must_not = {toml_list(p['must_not'])}")
    if p.get("alternatives"):
        lines.append("# also acceptable as root cause (same fault seen one layer down)")
        lines.append(f"alternatives = {toml_list(p['alternatives'])}")
    lines += ["", "[truth]",
              f"injected = {toml_str(p['injected'])}",
              f"generator = {toml_str('tools/realrun/train.py --scenario ' + name + ' --steps ' + str(p['steps']))}",
              'backend = "gloo (CPU), 4 processes on a 2-core machine, torch.set_num_threads(1)"',
              f"torch = {toml_str(torch_version)}",
              f"wall_s = {run['wall_s']}",
              f"exit_codes = {toml_list(run['exit_codes'])}",
              'timings = "real (perf_counter around the real operation); see tools/realrun/README.md"',
              ""]
    (d / "expected.toml").write_text("\n".join(lines), encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenarios", nargs="*", default=list(PLAN))
    ap.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "realrun"))
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    import torch  # only to record the version (and fail early if missing)

    out = Path(args.out)
    results = {}
    for name in args.scenarios:
        p = PLAN[name]
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        r = subprocess.run([sys.executable, str(HERE / "train.py"), "--scenario", name,
                            "--out", str(d), "--steps", str(p["steps"])],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            return 1
        run = json.loads(r.stdout.strip().splitlines()[-1])
        write_expected(d, name, p, run, torch.__version__)
        size = sum(f.stat().st_size for f in d.iterdir())
        results[name] = run
        print(f"{name:16s} wall {run['wall_s']:6.2f}s  exit {run['exit_codes']}  "
              f"{size / 1024:7.1f} KiB  (total {time.time() - t0:.1f}s)", flush=True)
    if args.no_check:
        return 0
    return subprocess.run([sys.executable, str(HERE / "check_signatures.py"), str(out)]).returncode


if __name__ == "__main__":
    sys.exit(main())
