"""What a command pays for at start-up: `import forensics` and the CLI load neither the ingest
package nor numpy / pyarrow / polars, and a post-mortem command on a store never imports the
ingest package, numpy or pyarrow (each a few hundred ms of a `last-10s` that should take 1 s)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import forensics

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("forensics.ingest", "numpy", "pyarrow", "pyarrow.compute")


def loaded(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {list(HEAVY) + ['polars']!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_forensics_and_the_cli_load_nothing_heavy() -> None:
    assert loaded("import forensics, forensics.cli") == []
    # the package attribute still is the callable ingest package, loaded when first used
    assert loaded("import forensics\nforensics.ingest") == ["forensics.ingest", "numpy", "pyarrow", "pyarrow.compute",
                                                            "polars"]


def test_a_store_is_opened_and_scanned_without_the_ingest_package(tmp_path: Path) -> None:
    store = tmp_path / "st"
    forensics.ingest([str(REPO / "sample_logs" / "healthy")], store)
    code = (f"from forensics.run import open_run\nrun = open_run([{str(store)!r}])\n"
            "print(run.events().select('rank').collect().height)")
    assert [m for m in loaded(code) if m in HEAVY] == []


def test_lazy_module_imports_on_first_use() -> None:
    from forensics._lazy import lazy

    m = lazy("json")
    assert "not imported" not in repr(m) and "(imported)" not in repr(m)
    assert m.dumps([1]) == "[1]" and "(imported)" in repr(m)
