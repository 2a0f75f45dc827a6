"""Batch 7 (seen while h-gloo's fixes were written): faults, schemas and shapes batches 1-6 lack.
Faults: one rank in all_gather while its peers are in all_reduce (gather_mismatch); a rank whose
GPU heats and clocks down (thermal: slower steps, and the job's own telemetry CSV beside its logs
shows the temperature and clocks); the allocator refusing a tensor (alloc_fail); an
AssertionError naming its rank in its text, on the console only (assert_text); os.abort() after a
WARN (abort); a whole node leaving cleanly before the others (node_exit0); every rank's traffic far
above its compute (comm_heavy: truth comm_bound on no single rank); a DataLoader worker killed
(loader_worker). Schemas: CLEF (Serilog compact: `@t`, `@l`, `@mt`, PascalCase properties),
logfmt in a JSON message, a `ctx: {...}` object with a numeric `lvl`. Shapes: world 2-8, two
torchrun launchers as two nodes (`nodes=2`), clock offsets, jitter, telemetry on healthy runs."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
CRASH = ["crash", "unexplained_error"]
LEFT = ["crash", "hang", "rank_lag", "unexplained_error"]
C = {
 "g01_gather_clef4":        dict(n=4, schema="clef", fault="gather_mismatch", rank=2, step=4, steps=10, batch=512, truth=([2], ["collective_mismatch"])),
 "g02_thermal_logfmt4_tel": dict(n=4, schema="logfmt_json", fault="thermal", rank=1, step=3, steps=20, batch=512, telemetry="a", timeout=30, truth=([1], ["thermal_throttling"])),
 "g03_healthy_ctx4_2n_tel": dict(n=4, nodes=2, schema="ctx_lvl", fault="none", rank=0, step=0, steps=14, batch=512, telemetry="a", jitter_ms=10, truth=(None, None)),
 "g04_alloc_clef2":         dict(n=2, schema="clef", fault="alloc_fail", rank=1, step=5, stderr=True, steps=12, truth=([1], ["oom", "host_oom"] + CRASH)),
 "g05_assert_logfmt6":      dict(n=6, schema="logfmt_json", fault="assert_text", rank=4, step=6, steps=14, batch=256, truth=([4], ["non_finite"] + CRASH)),
 "g06_abort_ctx3":          dict(n=3, schema="ctx_lvl", fault="abort", rank=0, step=5, steps=12, truth=([0], CRASH)),
 "g07_nodeexit_seed4_2n":   dict(n=4, nodes=2, schema="seed", fault="node_exit0", rank=2, step=5, steps=14, batch=512, truth=([2, 3], LEFT)),
 "g08_commheavy_clef4":     dict(n=4, schema="clef", fault="comm_heavy", rank=0, step=0, steps=12, batch=256, timeout=30, truth=([], ["comm_bound"])),
 "g09_loaderw_ctx4":        dict(n=4, schema="ctx_lvl", fault="loader_worker", rank=3, step=4, stderr=True, steps=12, batch=512, truth=([3], ["data_load_error"] + CRASH)),
 "g10_gather_ctx6_2n":      dict(n=6, nodes=2, schema="ctx_lvl", fault="gather_mismatch", rank=4, step=3, steps=10, batch=256, truth=([4], ["collective_mismatch"])),
 "g11_thermal_ctx8_2n_telb":dict(n=8, nodes=2, schema="ctx_lvl", fault="thermal", rank=6, step=2, steps=16, batch=128, telemetry="b", timeout=30, truth=([6], ["thermal_throttling"])),
 "g12_healthy_logfmt8_tel": dict(n=8, schema="logfmt_json", fault="none", rank=0, step=0, steps=12, batch=128, telemetry="b", jitter_ms=15, truth=(None, None)),
 "g13_oomkill_clef5_2h":    dict(n=5, hosts=2, schema="clef", fault="oom_kill", rank=3, step=5, steps=12, batch=256, truth=([3], ["host_oom", "crash"])),
 "g14_exccustom_logfmt3":   dict(n=3, schema="logfmt_json", fault="exc_custom", rank=0, step=6, stderr=True, steps=12, truth=([0], CRASH + ["data_load_error"])),
 "g15_nan_ctx2":            dict(n=2, schema="ctx_lvl", fault="nan", rank=1, step=5, steps=12, truth=([1], ["non_finite", "loss_divergence"])),
 "g16_straggler_clef6_2n":  dict(n=6, nodes=2, schema="clef", fault="straggler", rank=5, step=0, clock_offset=3.0, steps=20, batch=256, truth=([5], ["straggler"])),
 "g17_healthy_clef2_plateau":dict(n=2, schema="clef", fault="late_plateau", rank=0, step=0, warmup_steps=3, steps=30, truth=(None, None)),
 "g18_mismatch_logfmt4_2n": dict(n=4, nodes=2, schema="logfmt_json", fault="coll_mismatch", rank=1, step=4, steps=10, batch=512, truth=([1], ["collective_mismatch", "crash", "unexplained_error"])),
}
if __name__ == "__main__":
    for n in sys.argv[2:] or list(C):
        cases.run(n, C[n], sys.argv[1])
