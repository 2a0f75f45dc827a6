"""Batch 10: UNSEEN. Written from batch 9's fault kinds, schemas and shapes alone, in other
combinations (world sizes, nodes, schemas, logging formats, intervals), generated, and scored only
before h-gloo9's first fix and at its end: the figure that says whether the work is general."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
CRASH = ["crash", "unexplained_error"]
MEM = ["host_oom", "oom"] + CRASH
GRAD = ["gradient_skew", "grad_norm_spike"]   # one rank's own gradients stand apart from its peers', every step
STUCK = ["hang", "rank_lag", "collective_mismatch"]
C = {
 "j01_restart_mix6_tee":     dict(n=6, schema="mix:ctx_lvl,pylog", tee=True, fault="fail_once", rank=5, step=3, restarts=1, steps=10, batch=128, truth=([5], CRASH), say="restart"),
 "j02_batchskew_clef8_2n":   dict(n=8, nodes=2, schema="clef", fault="batch_skew", rank=6, skew=3, step=0, steps=14, batch=96, timeout=30, truth=([6], ["straggler", "data_load_skew"])),
 "j03_gradskew_pj6":         dict(n=6, schema="python_json", fault="grad_skew", rank=0, skew=10, step=0, steps=16, batch=128, truth=([0], GRAD)),
 "j04_memerr_ecs5_2h":       dict(n=5, hosts=2, schema="ecs", fault="mem_error", rank=3, step=5, stderr=True, steps=12, batch=256, truth=([3], MEM)),
 "j05_barrier_pylogc4_tee":  dict(n=4, schema="pylog", pylog_fmt="c", tee=True, fault="barrier_stuck", rank=1, step=4, steps=10, batch=256, timeout=12, truth=([1], STUCK)),
 "j06_healthy_nested12_every": dict(n=12, schema="metrics_nested", log_every="1,4", fault="none", rank=0, step=0, warmup_steps=6, warmup_s=0.3, lr_decay_at=0.6, steps=24, batch=64, truth=(None, None)),
 "j07_healthy_noisy_mix6_2n": dict(n=6, nodes=2, schema="mix:bunyan,own,logfmt_json", fault="none", rank=0, step=0, jitter_ms=150, clock_offset=4.0, host_fmt="worker{i}.cluster", steps=14, batch=128, truth=(None, None)),
 "j08_exit3_mix4_2n_every":  dict(n=4, nodes=2, schema="mix:pylog,seed", pylog_fmt="b", log_every="1,3", fault="exit_code", rank=2, step=7, steps=14, batch=256, truth=([2], CRASH)),
}
if __name__ == "__main__":
    for n in sys.argv[2:] or list(C):
        cases.run(n, C[n], sys.argv[1])
