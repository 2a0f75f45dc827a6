"""The report's plain data model: findings, the root cause and its chain, the run summary.

Owns the JSON contract of ../shared/spec/report.md (field names are a public API for CI users:
add fields, never rename). Must not compute findings (passes do) or format text (renderers do).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

LAYERS = ["physical", "resource", "communication", "training"]
SEVERITIES = ["INFO", "WARN", "ERROR"]

# Stable identifiers (spec/report.md): add to this list, never rename.
KINDS = [
    "thermal_throttling", "low_bandwidth", "gpu_underutilized", "oom", "data_load_skew", "straggler",
    "gradient_skew", "comm_bound", "nccl_timeout", "hang", "rank_lag", "loss_divergence", "loss_plateau",
    "grad_norm_spike", "vanishing_grad", "clock_skew", "log_hygiene",
    "data_load_error",   # added here: a DATA_LOAD_ERROR event (seed 000 4.1: ERROR, needs a person)
    "throughput_drop",   # added here: the training-layer symptom of the chain (seed 000 4.3)
]


@dataclass
class Evidence:
    """One log line a claim rests on."""

    source_file: str
    line: int
    rank: int | None = None
    timestamp: str | None = None
    text: str | None = None      # the event/message, shortened

    @property
    def where(self) -> str:
        return f"{self.source_file}:{self.line}"


@dataclass
class Finding:
    rule: str                          # id of the rule or pass that produced it
    kind: str                          # one of KINDS
    layer: str                         # one of LAYERS
    severity: str                      # one of SEVERITIES
    ranks: list[int]                   # the rank(s) at fault, not the victims
    title: str                         # one line, with the numbers
    evidence: dict[str, Any] = field(default_factory=dict)   # values behind the claim
    lines: list[Evidence] = field(default_factory=list)      # file:line citations
    first_seen: str | None = None
    last_seen: str | None = None
    victims: list[int] = field(default_factory=list)         # ranks that suffered from it
    explains: list[int] = field(default_factory=list)        # indexes of findings this one explains
    # slowdowns: what the fault cost, {"seconds", "share", "gpu_hours", "steps", "method"}
    # (passes/cost.py: the what-if replay); None for other kinds or when the logs cannot price it
    cost: dict[str, Any] | None = None

    @property
    def cost_seconds(self) -> float:
        """What it cost (0 without a cost): reports list findings by severity, then costliest first."""
        return float((self.cost or {}).get("seconds") or 0.0)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = {**self.evidence, "lines": [asdict(e) for e in self.lines]}
        del d["lines"]
        return d


@dataclass
class ChainLink:
    layer: str
    finding: str                       # one sentence
    ranks: list[int] = field(default_factory=list)
    lines: list[Evidence] = field(default_factory=list)


@dataclass
class RootCause:
    kind: str
    layer: str
    ranks: list[int]
    summary: str
    chain: list[ChainLink] = field(default_factory=list)
    finding: int | None = None         # index into Report.findings
    cost: dict[str, Any] | None = None  # the root finding's cost (Finding.cost)


@dataclass
class RunInfo:
    ranks: int
    hosts: int
    start: str | None
    end: str | None
    events: int
    rejected_lines: int
    crashed: bool
    store: str | None = None


@dataclass
class Report:
    run: RunInfo
    root_cause: RootCause | None
    findings: list[Finding]
    per_rank: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": asdict(self.run),
            "root_cause": None if self.root_cause is None else {
                **{k: v for k, v in asdict(self.root_cause).items() if k != "chain"},
                "chain": [
                    {"layer": c.layer, "finding": c.finding, "ranks": c.ranks,
                     "evidence": [asdict(e) for e in c.lines]}
                    for c in self.root_cause.chain
                ],
            },
            "findings": [f.to_json() for f in self.findings],
            "per_rank": self.per_rank,
        }
