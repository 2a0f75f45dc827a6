"""Batch 4: UNSEEN. Written from the fault kinds and schemas alone, generated, and scored only
before the work of a session and at its end (never while a pass is tuned): the figure that
says whether the work is general."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
STALL = ["straggler", "rank_lag"]
C = {
 "v01_compute_otel_alt2": dict(n=6, schema="otel", names="alt2", fault="compute_slow", rank=0, step=0, batch=256, steps=18, env={"EXTRA_MATMULS": "2"}, truth=([0], ["straggler"])),
 "v02_barrier_pj_alt1_8": dict(n=8, schema="python_json", names="alt1", fault="barrier_block", rank=6, step=0, batch=256, steps=18, truth=([6], STALL)),
 "v03_hang_bunyan":       dict(n=5, schema="bunyan", fault="hang", rank=1, step=7, stderr=True, batch=512, steps=16, truth=([1], ["hang", "nccl_timeout"])),
 "v04_exit0_structlog":   dict(n=4, schema="structlog", names="alt1", fault="exit0", rank=2, step=11, steps=20, truth=([2], ["crash", "hang", "rank_lag", "unexplained_error"])),
 "v05_excplain_loguru":   dict(n=6, schema="loguru", fault="exc_plain", rank=4, step=5, stderr=True, batch=256, steps=14, truth=([4], ["crash", "unexplained_error"])),
 "v06_dataslow_ecs":      dict(n=5, schema="ecs", fault="data_slow", rank=3, step=0, batch=512, steps=18, truth=([3], ["data_load_skew"])),
 "v07_ownlong_nested":    dict(n=4, schema="nested_ms", fault="own_long", rank=2, step=4, own_event="reshard_optimizer", timeout=30, steps=16, truth=([2], STALL)),
 "v08_nan_bunyan_alt2":   dict(n=7, schema="bunyan", names="alt2", fault="nan", rank=6, step=10, batch=256, steps=16, truth=([6], ["non_finite", "loss_divergence"])),
 "v09_healthy_otel_alt1": dict(n=6, schema="otel", names="alt1", fault="none", rank=0, step=0, batch=256, steps=16, truth=(None, None)),
}
if __name__ == "__main__":
    for n in sys.argv[2:] or list(C):
        cases.run(n, C[n], sys.argv[1])
