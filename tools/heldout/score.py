import json, os, subprocess, sys, glob
fx = sys.argv[1]; root = sys.argv[2]
ok = 0; n = 0
for t in sorted(glob.glob(os.path.join(root, "*.truth.json"))):
    name = os.path.basename(t)[:-11]; truth = json.load(open(t)); d = os.path.join(root, name)
    env = dict(os.environ, FORENSICS_CACHE="/tmp/evalcache-" + os.path.basename(os.path.dirname(os.path.dirname(fx))))
    p = subprocess.run([fx, "diagnose", d, "--format", "json"], capture_output=True, text=True, env=env)
    try:
        rep = json.loads(p.stdout); rc = rep.get("root_cause")
    except Exception:
        print(f"{name:18s} NOJSON rc={p.returncode} {p.stderr[-300:]}"); n += 1; continue
    got_k = rc and rc.get("kind"); got_r = rc and rc.get("ranks")
    if truth["kinds"] is None:
        good = rc is None
    elif truth["kinds"] == ["no_data"]:
        good = got_k == "no_data" and p.returncode != 0
    else:
        good = got_k in truth["kinds"] and sorted(got_r or []) == sorted(truth["ranks"])
    if good and truth.get("say"):   # a recovered run: the verdict must also say what happened after the failure
        import re
        good = bool(re.search(truth["say"], (rc or {}).get("summary", ""), re.I))
    ok += good; n += 1
    print(f"{name:18s} {'OK ' if good else 'BAD'} truth={truth['ranks']} {truth['kinds']} got={got_r} {got_k} rc={p.returncode} :: {(rc or {}).get('summary','')[:150]}")
print(f"{ok} of {n}")
