"""Batch 5 (seen while t-gloo5's passes were written): faults and shapes batches 1-4 lack. A rank
killed by SIGKILL from outside in the middle of a step (OOM-killer style) with its peers' gloo
errors; a rank that raises inside a collective (an op its dtype does not allow); a collective
whose size differs on one rank; a rank slow only every 10th step (periodic GC / checkpoint, nothing
logged); one long stall of one rank's data loader; one NaN in one rank's gradient that the
all-reduce spreads to every rank; a run ended by an outside SIGTERM to the launcher; world sizes
3, 6 and 12; two hosts with a clock offset between them; every rank writing to one shared file;
the schemas GELF, metrics_nested and one of the batch's own ("own"), renamed events (alt3); and
healthy runs with ordinary noise (warmup, jitter, a late loss plateau): their truth is no root cause."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
STALL = ["straggler", "rank_lag"]
CRASH = ["crash", "unexplained_error"]
C = {
 "f01_oomkill_gelf6":     dict(n=6, schema="gelf", fault="oom_kill", rank=4, step=9, batch=256, steps=16, truth=([4], ["host_oom", "crash"])),
 "f02_collraise_own3":    dict(n=3, schema="own", fault="coll_raise", rank=1, step=7, stderr=True, steps=16, truth=([1], CRASH)),
 "f03_periodic_pj6_2h":   dict(n=6, schema="python_json", hosts=2, fault="periodic_slow", rank=2, step=0, stall_s=1.5, every=10, timeout=30, batch=256, steps=30, truth=([2], STALL)),
 "f04_loaderstall_sl4":   dict(n=4, schema="structlog", names="alt3", fault="loader_stall", rank=3, step=6, stall_s=7, timeout=30, steps=16, truth=([3], ["data_load_skew"] + STALL)),
 "f05_nangrad_mn3":       dict(n=3, schema="metrics_nested", fault="nan_grad", rank=2, step=8, steps=16, truth=([2], ["non_finite", "loss_divergence"])),
 "f06_sigterm_seed6":     dict(n=6, schema="seed", fault="none", rank=0, step=0, batch=256, steps=400, kill_after=25, truth=([], ["job_cancelled"])),
 "f07_shared_ecs6":       dict(n=6, schema="ecs", fault="exc_custom", rank=5, step=6, stderr=True, batch=256, steps=16, pattern="train.jsonl", truth=([5], CRASH + ["data_load_error"])),
 "f08_offset_pj6_2h":     dict(n=6, schema="python_json", hosts=2, clock_offset=-4.0, fault="exc_plain", rank=2, step=7, stderr=True, batch=256, steps=16, truth=([2], CRASH)),
 "f09_healthy_pj12":      dict(n=12, schema="python_json", fault="none", rank=0, step=0, jitter_ms=20, batch=128, steps=16, truth=(None, None)),
 "f10_healthy_loguru3":   dict(n=3, schema="loguru", fault="late_plateau", rank=0, step=0, warmup_steps=4, jitter_ms=15, steps=40, truth=(None, None)),
 "f11_healthy_gelf6_2h":  dict(n=6, schema="gelf", hosts=2, clock_offset=2.5, fault="none", rank=0, step=0, jitter_ms=10, batch=256, steps=20, truth=(None, None)),
 "f13_mismatch_ecs4_err":  dict(n=4, schema="ecs", fault="coll_mismatch", rank=2, step=4, stderr=True, steps=10, truth=([2], ["collective_mismatch", "crash", "unexplained_error"])),
 "f14_nangrad_own12_2h":   dict(n=12, schema="own", hosts=2, clock_offset=2.0, fault="nan_grad", rank=7, step=5, batch=128, steps=12, truth=([7], ["non_finite", "loss_divergence"])),
 "f15_oomkill_pj3_shared": dict(n=3, schema="python_json", fault="oom_kill", rank=0, step=6, stderr=True, steps=12, pattern="log.jsonl", truth=([0], ["host_oom", "crash"])),
 "f16_healthy_mn8_warm":   dict(n=8, schema="metrics_nested", names="alt3", fault="none", rank=0, step=0, warmup_steps=4, jitter_ms=25, batch=128, steps=18, truth=(None, None)),
 "f17_sigterm_gelf4":       dict(n=4, schema="gelf", fault="none", rank=0, step=0, steps=400, kill_after=20, truth=([], ["job_cancelled"])),
 "f12_mismatch_sl3":      dict(n=3, schema="structlog", fault="coll_mismatch", rank=1, step=5, steps=12, truth=([1], ["collective_mismatch", "crash", "unexplained_error"])),
}
if __name__ == "__main__":
    for n in sys.argv[2:] or list(C):
        cases.run(n, C[n], sys.argv[1])
