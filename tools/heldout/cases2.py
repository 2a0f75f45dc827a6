import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402
C = {
 "u01_exc_structlog": dict(n=3, schema="structlog", fault="exc_custom", rank=0, step=11, stderr=True, truth=([0], ["crash", "unexplained_error", "data_load_error"])),
 "u02_nan_ecs":       dict(n=4, schema="ecs", fault="nan", rank=1, step=9, truth=([1], ["non_finite", "loss_divergence"])),
 "u03_segv_pj":       dict(n=4, schema="python_json", fault="segv", rank=3, step=13, truth=([3], ["crash"])),
 "u04_evalgap_nested":dict(n=3, schema="nested_ms", fault="eval_gap", rank=2, step=6, truth=([2], ["straggler", "rank_lag"]), steps=22),
 "u05_exit_seed":     dict(n=4, schema="seed", fault="exit_code", rank=1, step=7, hosts=2, stderr=True, truth=([1], ["crash", "unexplained_error"])),
 "u06_kill_structlog":dict(n=3, schema="structlog", fault="sigkill", rank=0, step=12, truth=([0], ["host_oom", "crash"])),
 "u07_healthy_loguru":dict(n=4, schema="loguru", fault="none", rank=0, step=0, truth=(None, None)),
 "u08_straggler_ecs": dict(n=4, schema="ecs", fault="straggler", rank=3, step=0, truth=([3], ["straggler"])),
}
if __name__ == "__main__":
    os.environ["STRAGGLE_S"] = "0.2"
    for n, c in C.items():
        cases.run(n, c, sys.argv[1])
