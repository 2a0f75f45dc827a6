"""Write HTA's reference numbers for the shared DLRM traces (tests/data/hta_dlrm_expected.json).

Run once, with HTA installed (`pip install -e '.[bench]'`):

    python bench/hta_expected.py ../shared/realdata/kineto/dlrm_8rank tests/data/hta_dlrm_expected.json

tests/test_trace_stats.py compares `forensics trace-stats` with these numbers (within 1%), so the
test runs without HTA. Owns nothing else.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hta import hta_numbers  # noqa: E402


def main(argv: list[str]) -> None:
    trace_dir, out = argv
    import hta

    numbers = hta_numbers(trace_dir)
    doc = {"hta_version": getattr(hta, "__version__", None) or _version(), "traces": Path(trace_dir).name,
           "ranks": {str(r): v for r, v in sorted(numbers.items())}}
    Path(out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")


def _version() -> str | None:
    from importlib.metadata import version

    return version("holistictraceanalysis")


if __name__ == "__main__":
    main(sys.argv[1:])
