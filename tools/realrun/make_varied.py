#!/usr/bin/env python3
"""Varied real runs: one gloo run per seed, its layout, noise, log schema and fault drawn from
the seed, written as a fixture with the verdict it must get BY CONSTRUCTION (the injected fault
and its rank).

    python tools/realrun/make_varied.py 1 2 3            # seeds -> tests/fixtures/realrun_varied/v<seed>/
    python tools/realrun/make_varied.py --out /tmp/v 7   # elsewhere
    python tools/realrun/make_varied.py --show 1 2       # print the drawn configurations, run nothing

What a seed varies (tools/realrun/train.py options): world size 2-8; simulated hosts (consecutive
ranks per host) with per-host clock offsets from a few ms to seconds added to every logged
wall-clock reading; noise (none, jitter on healthy ranks, a CPU hog process); the record schema
(seed / lower-case names with `iteration` / flat metrics); the fault (straggler, data skew,
hang, rank dies with a CUDA OOM, thermal, or none) on a random rank at a random step.

Runs are short (40 steps, batch 256) and the per-rank files are gzip-compressed (forensics reads
gzip by its bytes), so a fixture is tens of KB. Seeds whose configuration was not looked at while
the passes were tuned are the held-out set: `--show` them only after measuring.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STEPS = 40
BATCH = 256

# fault -> (scenario of train.py, expected root cause kind, kinds that must not be the verdict)
FAULTS = {
    "straggler": ("straggler", "straggler", ["nccl_timeout", "data_load_skew"]),
    "data_skew": ("data_skew", "data_load_skew", ["nccl_timeout", "straggler"]),
    "hang": ("hang", "hang", ["nccl_timeout", "oom"]),
    "rank_dies": ("rank_dies", "oom", ["nccl_timeout", "hang"]),
    "thermal": ("thermal", "thermal_throttling", ["nccl_timeout", "data_load_skew"]),
    "healthy": ("healthy", "none", ["straggler", "data_load_skew", "thermal_throttling", "nccl_timeout",
                                   "oom", "hang"]),
}


def draw(seed: int) -> dict:
    """The configuration of one varied run, from its seed alone."""
    rng = random.Random(seed)
    world = rng.choice([2, 3, 4, 5, 6, 8])
    hosts = rng.choice([h for h in (1, 2, 3, 4) if h <= world])
    offsets = [0.0]
    for _ in range(hosts - 1):
        mag = rng.choice([rng.uniform(5, 60), rng.uniform(150, 900), rng.uniform(1000, 3000)])
        offsets.append(round(mag * rng.choice([-1, 1]), 1))
    fault = rng.choice(list(FAULTS))
    rank = rng.randrange(world)
    step = {"straggler": rng.choice([0, 10]), "data_skew": rng.choice([0, 10]), "thermal": 20,
            "hang": rng.randint(20, 30), "rank_dies": rng.randint(20, 30), "healthy": None}[fault]
    return {"seed": seed, "world": world, "hosts": hosts, "clock_offsets_ms": offsets,
            "noise": rng.choice(["none", "jitter", "hog"]), "schema": rng.choice(["seed", "lower", "flat"]),
            "fault": fault, "fault_rank": None if fault == "healthy" else rank, "fault_step": step}


def command(cfg: dict, out: Path) -> list[str]:
    cmd = [sys.executable, str(HERE / "train.py"), "--scenario", FAULTS[cfg["fault"]][0], "--out", str(out),
           "--world", str(cfg["world"]), "--steps", str(STEPS), "--batch", str(BATCH),
           "--hosts", str(cfg["hosts"]), "--clock-offsets-ms", ",".join(str(x) for x in cfg["clock_offsets_ms"]),
           "--noise", cfg["noise"], "--schema", cfg["schema"], "--seed", str(cfg["seed"]), "--deadline", "240"]
    if cfg["fault_rank"] is not None:
        cmd += ["--fault-rank", str(cfg["fault_rank"])]
    if cfg["fault_step"] is not None:
        cmd += ["--fault-step", str(cfg["fault_step"])]
    return cmd


def toml(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(toml(x) for x in v) + "]"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return json.dumps(str(v))


def write_expected(d: Path, cfg: dict, run: dict, torch_version: str) -> None:
    _, kind, must_not = FAULTS[cfg["fault"]]
    ranks = [] if cfg["fault_rank"] is None else [cfg["fault_rank"]]
    gen = " ".join(command(cfg, Path("OUT"))[1:]).replace(str(HERE), "tools/realrun")
    injected = cfg["fault"] if not ranks else f"{cfg['fault']} on rank {ranks[0]} from step {cfg['fault_step']}"
    lines = ["[expect]", f"root_cause = {toml(kind)}", f"ranks = {toml(ranks)}", f"must_not = {toml(must_not)}", "",
             "[truth]",
             f"injected = {toml(injected)}",
             f"generator = {toml(gen)}",
             "purpose = \"varied real run: the verdict is the injected fault and rank, by construction\"",
             *(f"{k} = {toml(v)}" for k, v in cfg.items() if v is not None),
             f"torch = {toml(torch_version)}", f"wall_s = {run['wall_s']}", f"exit_codes = {toml(run['exit_codes'])}",
             "backend = \"gloo (CPU) on a 2-core machine shared with other work\"", ""]
    (d / "expected.toml").write_text("\n".join(lines), encoding="utf-8")


def run_seeds(argv: list[str] | None, default_out: Path, prefix: str, draw, command, write_expected) -> int:
    """The command line of a seeded fixture maker: `SEED... [--out DIR] [--show]`; each seed's run
    goes to DIR/<prefix><seed>/ with gzipped per-rank files and its expected.toml."""
    ap = argparse.ArgumentParser()
    ap.add_argument("seeds", nargs="+", type=int)
    ap.add_argument("--out", default=str(default_out))
    ap.add_argument("--show", action="store_true", help="print the configurations only")
    args = ap.parse_args(argv)
    if args.show:
        for s in args.seeds:
            print(json.dumps(draw(s)))
        return 0
    import torch

    for s in args.seeds:
        cfg = draw(s)
        d = Path(args.out) / f"{prefix}{s}"
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        t0 = time.time()
        r = subprocess.run(command(cfg, d), capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            return 1
        run = json.loads(r.stdout.strip().splitlines()[-1])
        for f in sorted(d.glob("rank_*.jsonl")):
            with open(f, "rb") as src, gzip.open(f.with_suffix(".jsonl.gz"), "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
            f.unlink()
        write_expected(d, cfg, run, torch.__version__)
        size = sum(f.stat().st_size for f in d.iterdir())
        # the configuration is not printed: held-out seeds stay unseen until they are scored
        print(f"{prefix}{s}: {size / 1024:.0f} KiB, {time.time() - t0:.0f} s", flush=True)
    return 0


def main() -> int:
    return run_seeds(None, REPO / "tests" / "fixtures" / "realrun_varied", "v", draw, command, write_expected)


if __name__ == "__main__":
    sys.exit(main())
