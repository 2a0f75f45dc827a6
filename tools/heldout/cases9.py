"""Batch 9 (seen while h-gloo9's fixes were written): faults, schemas and shapes batches 1-8 lack.
Faults: a first attempt that fails and a torchrun restart (`--max-restarts 1`) that completes
(fail_once: truth the failure on its rank, and the summary must say the run restarted: a recovered
run is neither healthy nor dead); one rank's larger batch (batch_skew); one rank's gradients
persistently larger (grad_skew: its loss scaled); a Python MemoryError (mem_error); a rank that
enters a barrier its peers never reach (barrier_stuck: its peers time out, or the operator's
SIGTERM ends a run that stopped progressing). Schemas: plain Python `logging` text on stderr only
(pylog, three formats; with and without torchrun's `--tee 3` prefixes), mixed schemas in one run
(`mix:A,B,...` by rank). Shapes: ranks logging at different intervals (`log_every`), heavy warm-up
with a late lr decay, noisy timing, world 3-12, two launchers as two nodes with own host names."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
CRASH = ["crash", "unexplained_error"]
MEM = ["host_oom", "oom"] + CRASH
GRAD = ["gradient_skew", "grad_norm_spike"]   # one rank's own gradients stand apart from its peers', every step
STUCK = ["hang", "rank_lag", "collective_mismatch"]
C = {
 "i01_restart_clef4":        dict(n=4, schema="clef", fault="fail_once", rank=2, step=5, restarts=1, steps=12, batch=256, truth=([2], CRASH), say="restart"),
 "i02_batchskew_seed6":      dict(n=6, schema="seed", fault="batch_skew", rank=4, skew=4, step=0, steps=16, batch=128, timeout=30, truth=([4], ["straggler", "data_load_skew"])),
 "i03_gradskew_ctx4_2n":     dict(n=4, nodes=2, schema="ctx_lvl", fault="grad_skew", rank=1, skew=8, step=0, steps=16, batch=256, clock_offset=2.0, truth=([1], GRAD)),
 "i04_memerr_pylog3_tee":    dict(n=3, schema="pylog", tee=True, fault="mem_error", rank=1, step=4, steps=10, batch=256, truth=([1], MEM)),
 "i05_exit3_pylogb4":        dict(n=4, schema="pylog", pylog_fmt="b", fault="exit_code", rank=3, step=6, steps=12, batch=256, truth=([3], CRASH)),
 "i06_barrier_structlog5":   dict(n=5, schema="structlog", fault="barrier_stuck", rank=2, step=5, steps=12, batch=256, timeout=15, truth=([2], STUCK)),
 "i07_exc_mix6":             dict(n=6, schema="mix:seed,clef,pylog", fault="exc_custom", rank=5, step=6, steps=12, batch=128, truth=([5], CRASH + ["data_load_error"])),
 "i08_straggler_ecs4_every": dict(n=4, schema="ecs", log_every="1,2,3,5", fault="straggler", rank=3, step=0, steps=24, batch=256, truth=([3], ["straggler"])),
 "i09_healthy_warmdecay_gelf4": dict(n=4, schema="gelf", fault="none", rank=0, step=0, warmup_steps=10, warmup_s=0.4, lr_decay_at=0.75, steps=30, batch=256, truth=(None, None)),
 "i10_healthy_noisy_logfmt8_2n": dict(n=8, nodes=2, schema="logfmt_json", fault="none", rank=0, step=0, jitter_ms=120, host_fmt="trn-{i}", clock_offset=-1.5, steps=16, batch=128, truth=(None, None)),
 "i11_nan_mix12":            dict(n=12, schema="mix:otel,bunyan,pylog", fault="nan", rank=9, step=6, steps=12, batch=64, truth=([9], ["non_finite", "loss_divergence"])),
 "i12_barrier_kill_otel6":   dict(n=6, schema="otel", fault="barrier_stuck", rank=4, step=4, steps=400, batch=256, timeout=300, kill_after=30, truth=([4], STUCK)),
 "i13_gradlow_gelf8_2n":     dict(n=8, nodes=2, schema="gelf", fault="grad_skew", rank=6, skew=0.1, step=0, steps=14, batch=128, host_fmt="gpu{i}.dc2", truth=([6], GRAD)),
 "i14_restart_pyloga4_2h":   dict(n=4, hosts=2, schema="pylog", fault="fail_once", rank=0, step=4, restarts=1, steps=10, batch=256, truth=([0], CRASH), say="restart"),
 "i15_barrier_kill_mix8":    dict(n=8, schema="mix:ecs,pylog", fault="barrier_stuck", rank=7, step=3, steps=400, batch=128, timeout=300, kill_after=75, truth=([7], STUCK)),
 "i16_sigterm_startup_mix8": dict(n=8, schema="mix:ecs,pylog", fault="none", rank=0, step=0, steps=400, batch=128, kill_after=8, truth=([], ["job_cancelled"])),
}
if __name__ == "__main__":
    for n in sys.argv[2:] or list(C):
        cases.run(n, C[n], sys.argv[1])
