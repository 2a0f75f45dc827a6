"""Batch 3 (seen while the passes were written): 4-8 ranks, schemas bunyan and OpenTelemetry
besides the first six, renamed events and metrics (--names alt1/alt2: input_wait_ms, barrier_ms,
data_wait_ms, grad_sync ...), and faults of kinds batches 1-2 lack: a rank slow by its own
compute, a slow input pipeline, a rank that holds the others in a barrier, a bare traceback on
stderr, a hang, an exit 0 before the others, 8 s of work of its own while its peers wait."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
STALL = ["straggler", "rank_lag"]
C = {
 "s01_dataslow_alt1":   dict(n=6, schema="python_json", names="alt1", fault="data_slow", rank=4, step=0, batch=256, steps=20, truth=([4], ["data_load_skew"])),
 "s02_compute_bunyan":  dict(n=5, schema="bunyan", fault="compute_slow", rank=2, step=0, batch=512, steps=20, env={"EXTRA_MATMULS": "3"}, truth=([2], ["straggler"])),
 "s03_barrier_alt2":    dict(n=6, schema="structlog", names="alt2", fault="barrier_block", rank=1, step=0, batch=256, steps=20, truth=([1], STALL)),
 "s04_excplain_seed":   dict(n=4, schema="seed", fault="exc_plain", rank=3, step=9, stderr=True, steps=20, truth=([3], ["crash", "unexplained_error"])),
 "s05_nan_otel":        dict(n=5, schema="otel", fault="nan", rank=4, step=8, batch=512, steps=16, truth=([4], ["non_finite", "loss_divergence"])),
 "s06_hang_pj":         dict(n=4, schema="python_json", fault="hang", rank=2, step=10, stderr=True, steps=20, truth=([2], ["hang", "nccl_timeout"])),
 "s07_exit0_ecs":       dict(n=6, schema="ecs", fault="exit0", rank=5, step=8, stderr=True, batch=256, steps=20, truth=([5], ["crash", "hang", "rank_lag", "unexplained_error"])),
 "s08_ownlong_loguru":  dict(n=4, schema="loguru", fault="own_long", rank=0, step=5, own_event="checkpoint_upload", timeout=30, steps=16, truth=([0], STALL)),
 "s09_healthy_bunyan8": dict(n=8, schema="bunyan", fault="none", rank=0, step=0, batch=256, steps=16, truth=(None, None)),
 "s10_dataslow_nested": dict(n=4, schema="nested_ms", names="alt2", fault="data_slow", rank=0, step=0, steps=20, truth=([0], ["data_load_skew"])),
 "s11_exc_otel7":       dict(n=7, schema="otel", fault="exc_custom", rank=6, step=7, stderr=True, batch=256, steps=16, truth=([6], ["crash", "unexplained_error", "data_load_error"])),
 "s12_segv_alt1_8":     dict(n=8, schema="structlog", names="alt1", fault="segv", rank=5, step=6, batch=256, steps=16, truth=([5], ["crash"])),
 "s13_ownlong_ecs_alt2":dict(n=6, schema="ecs", names="alt2", fault="own_long", rank=3, step=4, own_event="sync_to_bucket", timeout=30, batch=256, steps=16, truth=([3], STALL)),
}
if __name__ == "__main__":
    for n in sys.argv[2:] or list(C):
        cases.run(n, C[n], sys.argv[1])
