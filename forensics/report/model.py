"""The report's plain data model: findings, the root cause and its chain, the run summary.

Owns the JSON contract of ../shared/spec/report.md (field names are a public API for CI users:
add fields, never rename). Must not compute findings (passes do) or format text (renderers do).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
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
    # issue 10 (spec/report.md): failures read as what they are
    "crash",                 # a plain Python exception killed a rank
    "host_oom",              # host RAM: the kernel's OOM killer, SIGKILL / exit -9 without a CUDA error
    "collective_mismatch",   # ranks issued different collectives (sequence number, op, size, dtype)
    "job_cancelled",         # the scheduler ended the job: cancel, time limit, node failure
    "gpu_error",             # the device failed: ECC, Xid, illegal memory access, launch failure
    # issue 27 (spec/report.md): the verdict accounts for every error, and never for no input
    "unexplained_error",     # ERROR lines, exits or signals no other finding explains (passes/unexplained.py)
    "no_data",               # no event a diagnosis can use: empty, all rejected, unreadable (passes/no_data.py)
    # issue 27 (spec/report.md)
    "non_finite",            # a NaN/Inf first appears in a rank's own values (or a message reporting one)
]

# How a finding's rank(s) were established (spec/report.md `basis`); the phrase the text reports
# print. Stable identifiers: add, never rename.
BASES = {
    "own_error": "named by its own error",
    "named_by_peers": "named by its peers' errors",
    "never_joined": "never joined",
    "last_to_log": "last to log",
    "timing_within_group": "timing within its group",
    "telemetry": "telemetry",
    "outlier": "its own readings or messages stand apart from its peers'",
    "own_gap": "what it logged while its peers waited",
    "named_in_text": "named in its error's own text",
    "one_node": "local rank = rank (one-node launch)",
}
# The basis of a kind whose pass does not say: how that kind's rank is found by construction
# (a straggler is a timing comparison among peers, a hot GPU a telemetry reading, an OOM the
# rank's own error). Kinds about the whole job (loss, clock skew) have none.
DEFAULT_BASIS = {
    "thermal_throttling": "telemetry", "low_bandwidth": "telemetry", "gpu_underutilized": "telemetry",
    "data_load_skew": "timing_within_group", "straggler": "timing_within_group",
    "gradient_skew": "timing_within_group", "comm_bound": "timing_within_group", "rank_lag": "timing_within_group",
    "throughput_drop": "timing_within_group",
    "oom": "own_error", "host_oom": "own_error", "crash": "own_error", "gpu_error": "own_error",
    "data_load_error": "own_error", "unexplained_error": "own_error",
}


def basis_phrase(basis: str | None, weak: bool = False) -> str | None:
    """The short phrase a text report prints for a basis ("named by its peers' errors (weak)")."""
    if not basis:
        return None
    return BASES.get(basis, basis) + (" (weak)" if weak else "")


def local_ranks_phrase(local_ranks: list[dict[str, Any]]) -> str:
    """"local rank 3 on host node7" for ranks the log gives only by local rank."""
    out = []
    for x in local_ranks:
        host = x.get("host")
        out.append(f"local rank {x.get('local_rank')}" + (f" on host {host}" if host else " (host unknown)"))
    return ", ".join(out)


@dataclass
class Evidence:
    """One log line a claim rests on."""

    source_file: str
    line: int
    rank: int | None = None
    timestamp: str | None = None  # the line's own time, as logged
    text: str | None = None      # the event/message, shortened
    # the same instant on the run's common clock, when its host's clock was moved (clock_skew);
    # None when it is the logged time (passes/evidence.own_times)
    aligned_timestamp: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source_file}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        """The contract's fields; `aligned_timestamp` only where it differs from the own time."""
        d = {"source_file": self.source_file, "line": self.line, "rank": self.rank, "timestamp": self.timestamp,
             "text": self.text}
        if self.aligned_timestamp is not None:
            d["aligned_timestamp"] = self.aligned_timestamp
        return d


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
    basis: str | None = None           # one of BASES: how `ranks` was established (None: no rank named)
    basis_weak: bool = False           # the basis is thin (one peer names it, a small margin)
    local_ranks: list[dict[str, Any]] = field(default_factory=list)  # [{"host", "local_rank"}] when no global rank is known
    next: str | None = None                                  # what to do next (rules/next_steps.toml)
    # slowdowns: what the fault cost, {"seconds", "share", "gpu_hours", "steps", "method"}
    # (passes/cost.py: the what-if replay); None for other kinds or when the logs cannot price it
    cost: dict[str, Any] | None = None

    @property
    def cost_seconds(self) -> float:
        """What it cost (0 without a cost): reports list findings by severity, then costliest first."""
        return float((self.cost or {}).get("seconds") or 0.0)

    def to_json(self) -> dict[str, Any]:
        # the fields in their order, without a deep copy (asdict's): the containers are new, the
        # values shared; `lines` goes into the evidence
        d: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "evidence":
                v = {**v, "lines": [e.to_json() for e in self.lines]}
            elif f.name == "lines":
                continue
            elif f.name == "local_ranks":
                v = [dict(x) for x in v]
            elif isinstance(v, (list, dict)):
                v = v.copy()
            d[f.name] = v
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
    basis: str | None = None           # the root finding's basis (see Finding.basis)
    basis_weak: bool = False
    local_ranks: list[dict[str, Any]] = field(default_factory=list)
    next: str | None = None            # what to do next, filled from the finding
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
    # the ERROR lines of the input (ERROR/FATAL/CRITICAL events, non-zero exits, kills) and how
    # many of them the findings other than unexplained_error cite or explain (passes/unexplained.py);
    # None when not counted (a report built without the accounting)
    error_lines: int | None = None
    error_lines_accounted: int | None = None


@dataclass
class Report:
    run: RunInfo
    root_cause: RootCause | None
    findings: list[Finding]
    per_rank: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None   # the effective config (forensics.config), when one applied

    def to_json(self) -> dict[str, Any]:
        extra = {} if self.config is None else {"config": self.config}
        return {
            "run": asdict(self.run),
            "root_cause": None if self.root_cause is None else {
                **{k: v for k, v in asdict(self.root_cause).items() if k != "chain"},
                "chain": [
                    {"layer": c.layer, "finding": c.finding, "ranks": c.ranks,
                     "evidence": [e.to_json() for e in c.lines]}
                    for c in self.root_cause.chain
                ],
            },
            "findings": [f.to_json() for f in self.findings],
            "per_rank": self.per_rank,
            **extra,
        }
