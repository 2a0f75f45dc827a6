"""User-facing errors. Owns ForensicsError and its codes; must not print or exit.

The CLI renders a ForensicsError as one block (what / where / reason / help) and exits 1.
Anything else that escapes is a bug in forensics, not a user mistake.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ForensicsError(Exception):
    """A problem the user can fix: bad path, unreadable store, malformed rule file."""

    what: str
    where: str | None = None
    reason: str | None = None
    help: str | None = None
    code: str = "F000"

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        lines = [f"error[{self.code}]: {self.what}"]
        if self.where:
            lines.append(f"  --> {self.where}")
        if self.reason:
            lines.append(f"  reason: {self.reason}")
        if self.help:
            lines.append(f"  help: {self.help}")
        return "\n".join(lines)


# Codes are stable: CI scripts may grep for them.
NO_INPUT = "F100"          # nothing to read at the given paths
UNREADABLE = "F101"        # a file exists but cannot be opened/decompressed at all
NOT_A_STORE = "F200"       # path is not a forensics store (no manifest)
STORE_VERSION = "F201"     # store written by an incompatible schema version
STORE_BUSY = "F202"        # another ingest holds the store lock
STORE_DAMAGED = "F210"     # a part the manifest lists is missing or not the size it was written
STORE_WRITE = "F211"       # the store (or the cache) cannot be written: disk full, read-only, denied
OTHER_RUN = "F212"         # --append of logs that look like another run (override: --force)
BAD_ARGUMENT = "F300"      # a value given on the command line cannot be understood
CLUSTER = "F310"           # a Dask cluster cannot run the ingest: unreachable, no workers, no shared file system
BAD_RULE = "F400"          # a rule file is malformed
BAD_QUERY = "F500"         # SQL or filter expression rejected
BAD_CONFIG = "F600"        # forensics.toml / [tool.forensics] cannot be used
