"""The JSON report: `Report.to_json()` as text. The contract is spec/report.md (stable keys).

Owns only serialisation: key order is the model's, numbers stay numbers, non-ASCII stays readable.
Must not add, rename or drop keys (CI scripts parse them) — that is the model's business.
"""
from __future__ import annotations

import json
from typing import Any

from .model import Report
from .redact import redact_json


def render_json(report: Report, *, redact: bool = True) -> str:
    d: dict[str, Any] = report.to_json()
    if redact:
        d = redact_json(d)
    return json.dumps(d, indent=2, ensure_ascii=False, default=str) + "\n"
