"""Precision and recall of the diagnosis over every scenario with a known truth.

    python bench/scenarios.py                       # sample_logs/*/, tests/fixtures/realrun*/*/
    python bench/scenarios.py DIR [DIR ...]         # other scenario folders (each with expected.toml)

Prints (never asserts; tests/test_scenarios.py asserts) one line per scenario — expected and
diagnosed root cause with ranks, pass/fail, seconds — then per root-cause kind TP/FP/FN,
precision and recall, and the micro-averaged totals. A diagnosis counts as a true positive
only when both the kind (or an accepted alternative) and the ranks at fault are right; a right
kind on the wrong ranks is a false positive of that kind and a false negative of the expected
one. "none" (a healthy run) is a class like the others. The `extra` column counts WARN/ERROR
findings the root cause does not explain (noise a reader has to look at; not scored).
"""
from __future__ import annotations

import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from forensics.ingest import ingest  # noqa: E402
from forensics.passes import diagnose  # noqa: E402
from forensics.store import open_store  # noqa: E402


def _r(ranks: list[int]) -> str:
    from forensics.passes.evidence import rank_ranges

    return f"[{rank_ranges(ranks)}]" if ranks else "[]"


def scenarios(bases: list[Path]) -> list[Path]:
    return sorted(p.parent for b in bases for p in b.glob("*/expected.toml"))


def main(argv: list[str]) -> None:
    bases = [Path(a) for a in argv] or [REPO / "sample_logs", REPO / "tests" / "fixtures" / "realrun",
                                         REPO / "tests" / "fixtures" / "realrun_moved",
                                         REPO / "tests" / "fixtures" / "realrun_varied",
                                         REPO / "tests" / "fixtures" / "realrun_torchrun"]
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, d in enumerate(scenarios(bases)):
            exp = tomllib.loads((d / "expected.toml").read_text())["expect"]
            store = Path(tmp) / f"s{i}.forensics"
            t = time.perf_counter()
            ingest([str(d)], store)
            t_ing = time.perf_counter() - t
            t = time.perf_counter()
            rep = diagnose(open_store(store))
            t_diag = time.perf_counter() - t
            rc = rep.root_cause
            explained = set(rep.findings[0].explains) if rc else set()
            extra = sum(1 for i, f in enumerate(rep.findings)
                        if f.severity in ("WARN", "ERROR") and not (rc and (i == 0 or i in explained)))
            got_kind, got_ranks = (rc.kind, sorted(rc.ranks)) if rc else ("none", [])
            want_kind, want_ranks = exp["root_cause"], sorted(exp["ranks"])
            ok_kind = got_kind in [want_kind, *exp.get("alternatives", [])]
            ok = ok_kind and (got_kind == "none" or got_ranks == want_ranks)
            if ok:
                tp[want_kind] += 1
            else:
                fp[got_kind] += 1
                fn[want_kind] += 1
            rows.append((f"{d.parent.name}/{d.name}", f"{want_kind} {_r(want_ranks)}", f"{got_kind} {_r(got_ranks)}",
                         "pass" if ok else "FAIL", extra, t_ing, t_diag))
    w = max(len(r[0]) for r in rows)
    print(f"{'scenario':<{w}}  {'expected':<26} {'diagnosed':<26} result  extra  ingest_s  diagnose_s")
    for name, want, got, res, extra, ti, td in rows:
        print(f"{name:<{w}}  {want:<26} {got:<26} {res:<6}  {extra:5d}  {ti:8.2f}  {td:10.2f}")
    print()
    print(f"{'kind':<20} {'TP':>3} {'FP':>3} {'FN':>3}  precision  recall")
    for k in sorted(set(tp) | set(fp) | set(fn)):
        p = tp[k] / (tp[k] + fp[k]) if tp[k] + fp[k] else float("nan")
        r = tp[k] / (tp[k] + fn[k]) if tp[k] + fn[k] else float("nan")
        print(f"{k:<20} {tp[k]:>3} {fp[k]:>3} {fn[k]:>3}  {p:9.2f}  {r:6.2f}")
    T, P, N = sum(tp.values()), sum(fp.values()), sum(fn.values())
    print(f"{'all (micro)':<20} {T:>3} {P:>3} {N:>3}  {T / (T + P) if T + P else float('nan'):9.2f}  "
          f"{T / (T + N) if T + N else float('nan'):6.2f}   ({len(rows)} scenarios)")


if __name__ == "__main__":
    main(sys.argv[1:])
