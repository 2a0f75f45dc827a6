#!/usr/bin/env python3
"""Real runs for localisation by what differs: a slowdown every rank shares, whose cause only one
host's own readings show (net_host), and a rank whose stalls of its own make the others wait
(rank_pause). Each seed draws the layout, the fault's host or rank and step(s), and the names the
logs use for what matters (event and keys), so the passes cannot know them in advance.

    python tools/realrun/make_localise.py 1 2                 # -> tests/fixtures/realrun_localise/l<seed>/
    python tools/realrun/make_localise.py --out /tmp/l 7      # elsewhere
    python tools/realrun/make_localise.py --show 1            # the drawn configuration, run nothing

The verdict is the injected fault by construction: comm_bound on the degraded host's ranks
(basis outlier), or straggler on the pausing rank (basis own_gap). Per-rank files are gzipped.
Seeds not looked at while the passes were written are the unseen set: `--show` them only after.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
from make_varied import run_seeds, toml  # noqa: E402
from train import host_layout  # noqa: E402
STEPS = 40
BATCH = 256
NET_EVENTS = ["nic_counters", "netdev.stats", "ib_port_counters", "NET_HEALTH", "ethtool_snapshot"]
NET_KEYS = [("tcp_retrans_segs", "rx_crc_errors", "tx_mb"), ("retransmits", "symbol_errors", "sent_mb"),
            ("port_rcv_errors", "link_downed", "xmit_data_mb"), ("retx", "rx_drop", "tx_megabytes")]
PAUSE_EVENTS = ["validation_pass", "EVAL", "ckpt.upload", "metrics_flush", "sample_generation", "dataset_reshard"]
PAUSE_KEYS = ["elapsed_s", "duration", "took_ms", "wall_seconds"]


def draw(seed: int) -> dict:
    rng = random.Random(seed)
    fault = rng.choice(["net_host", "rank_pause"])
    world = rng.choice([3, 4, 5, 6])
    if fault == "net_host":
        hosts = rng.choice([h for h in (2, 3) if h <= world])
        layout = host_layout(world, hosts)         # as train.py lays ranks out (a host may stay empty)
        bad = int(rng.choice(sorted(set(layout)))[4:])
        ranks = [r for r in range(world) if layout[r] == f"node{bad}"]
        return {"seed": seed, "fault": fault, "world": world, "hosts": hosts, "fault_host": bad, "ranks": ranks,
                "fault_step": rng.randint(10, 18), "net_event": rng.choice(NET_EVENTS),
                "net_names": ",".join(rng.choice(NET_KEYS))}
    rank = rng.randrange(world)
    k = rng.choice([2, 3])
    steps = sorted(rng.sample(range(6, STEPS - 4), k))
    return {"seed": seed, "fault": fault, "world": world, "hosts": rng.choice([1, 2]), "ranks": [rank],
            "pause_steps": ",".join(str(s) for s in steps), "pause_s": round(rng.uniform(3.0, 8.0), 1),
            "pause_event": rng.choice(PAUSE_EVENTS), "pause_key": rng.choice(PAUSE_KEYS)}


def command(cfg: dict, out: Path) -> list[str]:
    cmd = [sys.executable, str(HERE / "train.py"), "--scenario", cfg["fault"], "--out", str(out),
           "--world", str(cfg["world"]), "--steps", str(STEPS), "--batch", str(BATCH), "--hosts", str(cfg["hosts"]),
           "--seed", str(cfg["seed"]), "--deadline", "300"]
    if cfg["fault"] == "net_host":
        cmd += ["--fault-host", str(cfg["fault_host"]), "--fault-step", str(cfg["fault_step"]),
                "--net-event", cfg["net_event"], "--net-names", cfg["net_names"]]
    else:
        cmd += ["--fault-rank", str(cfg["ranks"][0]), "--pause-steps", cfg["pause_steps"],
                "--pause-s", str(cfg["pause_s"]), "--pause-event", cfg["pause_event"],
                "--pause-duration-key", cfg["pause_key"], "--timeout", str(cfg["pause_s"] * 3 + 10)]
    return cmd


def write_expected(d: Path, cfg: dict, run: dict, torch_version: str) -> None:
    kind = "comm_bound" if cfg["fault"] == "net_host" else "straggler"
    must_not = ["nccl_timeout", "hang", "data_load_skew", "thermal_throttling"]
    gen = " ".join(command(cfg, Path("OUT"))[1:]).replace(str(HERE), "tools/realrun")
    lines = ["[expect]", f"root_cause = {toml(kind)}", f"ranks = {toml(cfg['ranks'])}", f"must_not = {toml(must_not)}",
             "", "[truth]", f"generator = {toml(gen)}",
             "purpose = \"localise by what differs: the verdict is the injected fault and its rank(s), by construction\"",
             *(f"{k} = {toml(v)}" for k, v in cfg.items()),
             f"torch = {toml(torch_version)}", f"wall_s = {run['wall_s']}", f"exit_codes = {toml(run['exit_codes'])}",
             "synthetic = \"net_host: the NIC counters' retransmits and errors (the slowdown itself is real)\"",
             "backend = \"gloo (CPU) on a 2-core machine shared with other work\"", ""]
    (d / "expected.toml").write_text("\n".join(lines), encoding="utf-8")


def main() -> int:
    return run_seeds(None, REPO / "tests" / "fixtures" / "realrun_localise", "l", draw, command, write_expected)


if __name__ == "__main__":
    sys.exit(main())
