"""Batch 8: UNSEEN. Written from batch 7's fault kinds, schemas and shapes alone, in other
combinations (world sizes, nodes, schemas, telemetry layouts), generated, and scored only before
h-gloo's first fix and at its end: the figure that says whether the work is general."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
CRASH = ["crash", "unexplained_error"]
LEFT = ["crash", "hang", "rank_lag", "unexplained_error"]
C = {
 "h01_gather_logfmt3":      dict(n=3, schema="logfmt_json", fault="gather_mismatch", rank=0, step=5, steps=10, batch=512, truth=([0], ["collective_mismatch"])),
 "h02_thermal_clef6_tela":  dict(n=6, schema="clef", fault="thermal", rank=3, step=2, steps=18, batch=256, telemetry="a", timeout=30, truth=([3], ["thermal_throttling"])),
 "h03_nodeexit_ctx6_2n":    dict(n=6, nodes=2, schema="ctx_lvl", fault="node_exit0", rank=3, step=4, steps=12, batch=256, truth=([3, 4, 5], LEFT)),
 "h04_alloc_ctx8_2n":       dict(n=8, nodes=2, schema="ctx_lvl", fault="alloc_fail", rank=5, step=3, steps=10, batch=128, truth=([5], ["oom", "host_oom"] + CRASH)),
 "h05_abort_logfmt2":       dict(n=2, schema="logfmt_json", fault="abort", rank=1, step=6, steps=12, truth=([1], CRASH)),
 "h06_commheavy_ctx6_2n":   dict(n=6, nodes=2, schema="ctx_lvl", fault="comm_heavy", rank=0, step=0, steps=10, batch=256, timeout=30, truth=([], ["comm_bound"])),
 "h07_healthy_clef4_2n_telb":dict(n=4, nodes=2, schema="clef", fault="none", rank=0, step=0, steps=14, batch=512, telemetry="b", jitter_ms=20, truth=(None, None)),
 "h08_assert_clef3":        dict(n=3, schema="clef", fault="assert_text", rank=2, step=4, steps=12, truth=([2], ["non_finite"] + CRASH)),
 "h09_loaderw_logfmt6_2n":  dict(n=6, nodes=2, schema="logfmt_json", fault="loader_worker", rank=1, step=5, stderr=True, steps=12, batch=256, truth=([1], ["data_load_error"] + CRASH)),
 "h10_gather_seed8_2n_tel": dict(n=8, nodes=2, schema="seed", fault="gather_mismatch", rank=7, step=3, steps=10, batch=128, telemetry="a", truth=([7], ["collective_mismatch"])),
}
if __name__ == "__main__":
    for n in sys.argv[2:] or list(C):
        cases.run(n, C[n], sys.argv[1])
