"""Held-out evaluation cases: each a real torchrun gloo job. truth: rank(s) and accepted kinds."""
import json, os, shutil, signal, subprocess, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {
 "e01_exc_custom":  dict(n=4, schema="python_json", fault="exc_custom", rank=2, step=12, stderr=True, truth=([2], ["crash", "unexplained_error", "data_load_error"])),
 "e02_nan":         dict(n=4, schema="structlog", fault="nan", rank=3, step=14, truth=([3], ["non_finite", "loss_divergence"])),
 "e03_sigkill":     dict(n=4, schema="seed", fault="sigkill", rank=1, step=10, truth=([1], ["host_oom", "crash"])),
 "e04_segv":        dict(n=3, schema="loguru", fault="segv", rank=2, step=8, truth=([2], ["crash"])),
 "e05_eval_gap":    dict(n=4, schema="loguru", fault="eval_gap", rank=0, step=8, truth=([0], ["straggler", "rank_lag"]), steps=24),
 "e06_exit_code":   dict(n=4, schema="ecs", fault="exit_code", rank=3, step=9, stderr=True, truth=([3], ["crash", "unexplained_error"])),
 "e07_straggler":   dict(n=4, schema="nested_ms", fault="straggler", rank=1, step=0, truth=([1], ["straggler"])),
 "e08_healthy_ecs": dict(n=4, schema="ecs", fault="none", rank=0, step=0, truth=(None, None)),
 "e09_plateau":     dict(n=3, schema="python_json", fault="late_plateau", rank=0, step=0, truth=(None, None), steps=40),
 "e10_straggler_pj":dict(n=4, schema="python_json", fault="straggler", rank=2, step=0, hosts=2, truth=([2], ["straggler"]), pattern="{host}/worker-{rank}.log"),
}
def run(name, c, root):
    out = os.path.join(root, name)
    shutil.rmtree(out, ignore_errors=True); os.makedirs(out)
    nodes = c.get("nodes", 1)
    if nodes > 1:   # one torchrun per "node" on this machine, a static rendezvous between them
        launch = ["--nnodes", str(nodes), "--master-addr", "127.0.0.1", "--master-port", str(29500 + os.getpid() % 2000),
                  f"--nproc-per-node={c['n'] // nodes}"]
    else:
        launch = ["--standalone", f"--nproc-per-node={c['n']}"]
    if c.get("restarts"): launch += ["--max-restarts", str(c["restarts"])]   # torchrun restarts every worker after a failure
    if c.get("tee"): launch += ["--tee", "3"]                            # the launcher prefixes each worker line with [role+local rank]:
    cmd = [sys.executable, "-m", "torch.distributed.run", *launch,
           os.path.join(HERE, "job.py"), "--schema", c["schema"], "--fault", c["fault"], "--fault-rank", str(c["rank"]),
           "--fault-step", str(c["step"]), "--out", out, "--steps", str(c.get("steps", 30)), "--hosts", str(c.get("hosts", 1))]
    if c.get("stderr"): cmd.append("--stderr-into-log")
    if c.get("pattern"): cmd += ["--file-pattern", c["pattern"]]
    for k in ("names", "timeout", "batch", "own_event", "own_seconds", "clock_offset", "host_fmt", "jitter_ms",
              "warmup_steps", "stall_s", "every", "telemetry", "log_every", "warmup_s", "lr_decay_at", "pylog_fmt", "skew"):
        if k in c: cmd += ["--" + k.replace("_", "-"), str(c[k])]
    env = dict(os.environ, OMP_NUM_THREADS="1", **c.get("env", {}))
    t = time.time()
    procs = []
    for i in range(nodes):
        f = open(os.path.join(out, "console.log" if nodes == 1 else f"console_node{i}.log"), "w")
        node_cmd = cmd if nodes == 1 else cmd[:3] + ["--node-rank", str(i)] + cmd[3:]
        procs.append((subprocess.Popen(node_cmd, stdout=f, stderr=subprocess.STDOUT, env=env), f))
    p = procs[0][0]
    if c.get("kill_after"):                     # an outside SIGTERM to the launcher (scheduler, operator)
        try:
            p.wait(timeout=c["kill_after"])
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
    for q, f in procs:
        q.wait(); f.close()
    ranks, kinds = c["truth"]
    json.dump({"ranks": ranks, "kinds": kinds, "rc": p.returncode, **({"say": c["say"]} if c.get("say") else {})}, open(os.path.join(root, name + ".truth.json"), "w"))
    print(name, "rc", p.returncode, f"{time.time()-t:.0f}s", flush=True)
if __name__ == "__main__":
    root = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    for n in names: run(n, CASES[n], root)
