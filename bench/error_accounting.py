"""How many ERROR lines each verdict accounts for (issue 27), over every run with a known truth.

    python bench/error_accounting.py                 # sample_logs/*/, tests/fixtures/realrun*/*/, ../shared/realdata
    python bench/error_accounting.py DIR [DIR ...]   # other run folders (each one run)

Prints (never asserts; tests/test_scenarios.py and tests/test_realdata_diagnosis.py assert the
invariant) one line per run: the root cause and its ranks, the run's ERROR lines, how many the
findings other than unexplained_error cite or explain (`run.error_lines_accounted`), the
unexplained_error findings, the pass.silent_rank warnings; then the totals.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from forensics.ingest import ingest  # noqa: E402
from forensics.passes import diagnose  # noqa: E402
from forensics.store import open_store  # noqa: E402

REAL = REPO.parent / "shared" / "realdata"


def runs(args: list[str]) -> dict[str, list[Path]]:
    if args:
        return {a: [Path(a)] for a in args}
    out: dict[str, list[Path]] = {}
    for base in ("sample_logs", "tests/fixtures/realrun", "tests/fixtures/realrun_moved",
                 "tests/fixtures/realrun_torchrun", "tests/fixtures/realrun_varied"):
        for d in sorted((REPO / base).glob("*/expected.toml")):
            out[f"{base.rsplit('/', 1)[-1]}/{d.parent.name}"] = [d.parent]
    if REAL.is_dir():
        for f in sorted((REAL / "console").glob("*")):
            out[f"real/{f.name}"] = [f]
        for d in sorted((REAL / "flight_recorder").glob("*")):
            out[f"real/fr_{d.name}"] = sorted(d.glob("_dump_*"))
        out["real/kineto"] = sorted((REAL / "kineto" / "dlrm_8rank").glob("*.json*"))
        out["real/nvidia_smi"] = [REAL / "telemetry" / "nvidia_smi_8gpu.csv"]
    return {k: v for k, v in out.items() if v}


def main(args: list[str]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="error-accounting-"))
    total = accounted = unexplained = silent = 0
    print(f"{'run':40} {'root cause':28} {'ERROR lines':>11} {'accounted':>9}  unexplained / silent")
    for i, (name, paths) in enumerate(runs(args).items()):
        store = tmp / f"s{i}"
        ingest([str(p) for p in paths], store)
        report = diagnose(open_store(store))
        rc = report.root_cause
        root = "none" if rc is None else f"{rc.kind} {rc.ranks or rc.local_ranks or ''}".strip()
        n, ok = report.run.error_lines or 0, report.run.error_lines_accounted or 0
        un = [f for f in report.findings if f.kind == "unexplained_error"]
        si = [f for f in report.findings if f.rule == "pass.silent_rank"]
        total, accounted, unexplained, silent = total + n, accounted + ok, unexplained + len(un), silent + len(si)
        print(f"{name:40} {root[:28]:28} {n:>11,} {ok:>9,}  {len(un)} / {len(si)}"
              + "".join(f"\n    {f.title[:150]}" for f in [*un, *si]))
    print(f"\n{len(runs(args))} runs: {total:,} ERROR lines, {accounted:,} accounted for by the findings; "
          f"{unexplained} unexplained_error findings, {silent} silent-rank warnings")


if __name__ == "__main__":
    main(sys.argv[1:])
