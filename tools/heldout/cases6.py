"""Batch 6: UNSEEN. Written from batch 5's fault kinds and shapes alone, in other combinations
(world sizes, schemas, names, hosts, shared files), generated, and scored only before t-gloo5's
first fix and at its end: the figure that says whether the work is general."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
STALL = ["straggler", "rank_lag"]
CRASH = ["crash", "unexplained_error"]
C = {
 "u01_oomkill_own12":     dict(n=12, schema="own", fault="oom_kill", rank=9, step=5, batch=128, steps=12, truth=([9], ["host_oom", "crash"])),
 "u02_collraise_ecs6":    dict(n=6, schema="ecs", names="alt3", fault="coll_raise", rank=0, step=4, stderr=True, batch=256, steps=12, truth=([0], CRASH)),
 "u03_periodic_gelf3":    dict(n=3, schema="gelf", fault="periodic_slow", rank=0, step=0, stall_s=1.2, every=5, timeout=30, steps=20, truth=([0], STALL)),
 "u04_loaderstall_mn6_2h":dict(n=6, schema="metrics_nested", hosts=2, fault="loader_stall", rank=5, step=4, stall_s=6, timeout=30, batch=256, steps=14, truth=([5], ["data_load_skew"] + STALL)),
 "u05_nangrad_pj6_shared":dict(n=6, schema="python_json", fault="nan_grad", rank=3, step=6, batch=256, steps=14, pattern="all_ranks.jsonl", truth=([3], ["non_finite", "loss_divergence"])),
 "u06_sigterm_sl3":       dict(n=3, schema="structlog", names="alt3", fault="none", rank=0, step=0, steps=400, kill_after=22, truth=([], ["job_cancelled"])),
 "u07_oomkill_seed6_2h":  dict(n=6, schema="seed", hosts=2, clock_offset=-3.0, fault="oom_kill", rank=1, step=8, batch=256, steps=14, truth=([1], ["host_oom", "crash"])),
 "u08_healthy_own6_shared":dict(n=6, schema="own", fault="none", rank=0, step=0, warmup_steps=3, jitter_ms=20, batch=256, steps=18, pattern="run.jsonl", truth=(None, None)),
 "u09_healthy_ecs12_2h":  dict(n=12, schema="ecs", hosts=2, host_fmt="trn{i}-a", fault="none", rank=0, step=0, jitter_ms=10, batch=128, steps=14, truth=(None, None)),
 "u10_healthy_mn3_plateau":dict(n=3, schema="metrics_nested", fault="late_plateau", rank=0, step=0, warmup_steps=3, steps=40, truth=(None, None)),
 "u11_mismatch_gelf6":    dict(n=6, schema="gelf", fault="coll_mismatch", rank=4, step=6, stderr=True, batch=256, steps=12, truth=([4], ["collective_mismatch", "crash", "unexplained_error"])),
}
if __name__ == "__main__":
    for n in sys.argv[2:] or list(C):
        cases.run(n, C[n], sys.argv[1])
