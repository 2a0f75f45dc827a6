"""forensics: offline log forensics for distributed deep-learning training.

The library API. The CLI (`forensics.cli`) is a thin layer over these functions; anything it can
do, a test or a notebook can do by importing them.
"""
from __future__ import annotations

__version__ = "0.1.0"

import os  # noqa: E402

# pyarrow's buffers from the C library's allocator unless the user chose one: its default
# (mimalloc) keeps most pages an ingest frees -- peak RSS of an ingest 377 -> 327 MB (64 files,
# 490 MB), 430 -> 345 MB (4,096 files), CPU the same or less (`python bench/ingest.py --row
# mimalloc:ARROW_DEFAULT_MEMORY_POOL=mimalloc`); `diagnose` the same. Read once, when pyarrow
# makes its default pool: a process that used pyarrow before importing forensics keeps its own.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from .errors import ForensicsError  # noqa: E402



def __getattr__(name: str):  # lazy: the rest loads on first use (a command pays only for its own imports)
    if name == "ingest":
        # the ingest subpackage, made callable: `forensics.ingest(paths, out)` runs the ingest
        # function, and `import forensics.ingest.jsonl` still finds the subpackage
        import importlib

        return importlib.import_module(".ingest", __name__)
    if name == "open_run":
        from .run import open_run

        return open_run
    if name == "diagnose":
        from .passes import diagnose

        return diagnose
    if name == "build_report":
        from .report import build_report

        return build_report
    raise AttributeError(name)


__all__ = ["ForensicsError", "ingest", "open_run", "diagnose", "build_report", "__version__"]
