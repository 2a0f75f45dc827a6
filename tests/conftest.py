"""Shared test settings: raw-log queries cache their stores in a per-session folder, not ~/.cache."""
from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["FORENSICS_CACHE"] = str(tmp_path_factory.mktemp("forensics-cache"))


REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
