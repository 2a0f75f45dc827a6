"""Root-cause selection: which finding explains the others, and the chain that leads to it.

Owns the "explains" relation between findings, the choice of the root cause, the order of the
findings in the report and the bottom-up chain physical -> resource -> communication ->
training. Must not compute findings (passes and rules do) or format text (renderers do).

Domain facts relied on (seed 000 §4.3, spec/report.md):
- Faults propagate upwards: a hot GPU (physical) lowers its utilisation (resource), makes the
  other ranks wait in collectives (communication) and lowers throughput while the loss still
  falls (training). The root cause is the deepest finding that explains the others; which kind
  can cause which is the table CAUSES below, layers only break ties.
- A finding explains another only if it concerns the same rank(s) (or the other's victims, or
  one of them is job-wide) and did not start after the other ended.
- A rank lag (a rank's last step below its peers') is how a failing rank's stop shows in step
  counts: a failure that names that rank explains it, whenever the failure was reported (its
  peers' timeouts come a timeout period after it stopped).
- Findings that explain each other round a cycle are one cause told several ways: none of them
  is explained away, the order of causes (_key) picks the root among them.
- Failures (OOM, timeouts, hangs) cascade in time: the first failure explains the later ones,
  wherever they are; an earlier root is never replaced by the timeouts it caused. The same
  failure reported once by the ranks that suffered it (no ranks at fault) and once naming its
  culprit is one failure: the report naming the culprit explains the other.
- When the run crashed, the verdict must explain the crash: a root that is or explains a failure
  is preferred to one that does not. A run whose values turned NaN/Inf (non_finite at ERROR)
  failed as surely, though every process lived: the same holds for it. A rank that timed out
  in the failed collective was waiting too, so no slowness of its own explains that failure.
- Log-hygiene findings describe the logs, not the training: never a root cause. A throughput
  drop is only the training-layer symptom of the chain: never the root cause on its own.
- The scheduler's cancellation (job_cancelled) ends a run without crashing it: a failure before
  it explains it (someone cancelled a hung job); alone, it is the verdict, never "healthy".
- An ERROR line no finding explains (unexplained_error, passes/unexplained.py) contradicts
  "healthy": with no failure found it is the verdict (its rank's own error, basis own_error),
  before any slowdown; a failure the passes recognise stays the root over it (the errors it
  explains are not unexplained). A rank's own error before its peers time out or hang is why
  they did, as a crash is. No input at all (no_data) is the verdict by itself.
- Of two slowdowns neither of which explains the other, the one that cost under MINOR_COST of
  the other's time is not the root cause (cost.py prices both on the same run).
- A symptom the job shows by design (comm_bound's `by_design`: communication above the
  threshold on every rank from the first step to the last, never rising) or within the run's own
  variation (`within_noise`: a rise that cost no measurable time; `jitter`: waiting for ranks
  that arrive late at random, none waited for) is not a root cause, nor a rule's job-wide
  finding of the same symptom.
- A job-wide slowdown (every rank's communication time up together) is explained by the host
  or ranks whose own readings stand apart in it (basis `outlier`), never the reverse.
- Every finding that names a rank says how (`basis`, spec/report.md); a pass that does not say
  gets its kind's basis by construction (model.DEFAULT_BASIS); the root cause carries its finding's.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Iterable

from ..report.model import DEFAULT_BASIS, ChainLink, Finding, RootCause, local_ranks_phrase
from .evidence import parse_iso, ranks_phrase

MINOR_COST = 0.1
LAYER_ORDER = {"physical": 0, "resource": 1, "communication": 2, "training": 3}
SEVERITY_ORDER = {"ERROR": 0, "WARN": 1, "INFO": 2}

# Within a layer (and across, as a last tie-break): causes before symptoms.
KIND_PRIORITY = [
    "no_data", "gpu_error", "thermal_throttling", "low_bandwidth", "job_cancelled", "oom", "host_oom", "crash", "unexplained_error",
    "data_load_skew", "straggler", "gpu_underutilized", "collective_mismatch",
    "hang", "nccl_timeout", "gradient_skew", "comm_bound", "non_finite", "vanishing_grad", "grad_norm_spike",
    "loss_divergence", "loss_plateau", "rank_lag", "throughput_drop", "clock_skew", "log_hygiene",
]
# Failures stop the run; they cascade in time (the first explains the later ones).
FAILURES = {"oom", "nccl_timeout", "hang", "crash", "host_oom", "collective_mismatch", "gpu_error"}
# A scheduler's cancellation ends the run but is not a crash of it (a time limit, a user's
# scancel): a failure before it is why someone cancelled (CAUSES below); alone, it is the verdict.
_ENDS = {"job_cancelled"}
NON_CAUSAL = {"log_hygiene", "clock_skew"}
# a pass's flags for a symptom it judged no fault (the job's design, the run's own variation,
# random late arrivals): its rules' job-wide findings of that kind are no root cause either
NOT_A_FAULT = ("by_design", "within_noise", "jitter")
# A run that goes on after these has failed all the same: its values are lost (non_finite at
# ERROR: a NaN/Inf in a rank's own values that the all-reduce spreads). Not FAILURES: they do not
# cascade in time like a process's death; the root must explain them as it must a crash.
RUINED = {"non_finite"}
# bases that name a failure's culprit by its silence (passes/unexplained.SILENT_BASES)
_SILENT = {"last_to_log", "never_joined"}
# what a rank alone said before its peers failed (passes/lone_message.py; basis own_gap)
LONE = "pass.lone_message"
# The training-layer face of a fault lower down: it explains nothing, so it is never the verdict
# by itself — reported, and attached to the root that explains it, but an unexplained throughput
# drop leaves root_cause null (e.g. a host busy with other work slows every rank alike).
SYMPTOMS = {"throughput_drop"}

_SLOW = {"gpu_underutilized", "straggler", "comm_bound", "gradient_skew", "rank_lag", "throughput_drop"}
CAUSES: dict[str, set[str]] = {
    "thermal_throttling": _SLOW | {"nccl_timeout", "hang"},
    "low_bandwidth": _SLOW | {"nccl_timeout"},
    # a slow input pipeline makes a rank late, not slow to compute: never a straggler's reason
    "data_load_skew": _SLOW - {"straggler"},
    "oom": {"nccl_timeout", "hang", "rank_lag", "throughput_drop"} | _ENDS,
    # a rank that dies (its own exception, the host OOM killer, its GPU) leaves its peers waiting
    "crash": {"nccl_timeout", "hang", "rank_lag", "throughput_drop"} | _ENDS,
    "host_oom": {"nccl_timeout", "hang", "rank_lag", "throughput_drop"} | _ENDS,
    # an error nobody recognised, on the rank whose peers then wait: as a crash
    "unexplained_error": {"nccl_timeout", "hang", "rank_lag", "throughput_drop"} | _ENDS,
    "no_data": set(),
    "gpu_error": {"nccl_timeout", "hang", "rank_lag", "throughput_drop", "crash"} | _ENDS,
    # ranks that issued different collectives wait for each other until the watchdog fires
    "collective_mismatch": {"nccl_timeout", "hang", "rank_lag", "throughput_drop"} | _ENDS,
    # the scheduler's kill stops every rank: their exits, timeouts and missing progress follow
    "job_cancelled": {"nccl_timeout", "rank_lag", "throughput_drop"},
    "straggler": (_SLOW - {"straggler"}) | {"nccl_timeout"},
    "gpu_underutilized": {"throughput_drop"},
    "gradient_skew": {"comm_bound", "throughput_drop"},
    "comm_bound": {"gpu_underutilized", "throughput_drop", "nccl_timeout"},
    "hang": {"nccl_timeout", "rank_lag", "throughput_drop"} | _ENDS,
    "nccl_timeout": {"rank_lag"} | _ENDS,
    "rank_lag": set(),
    "grad_norm_spike": {"loss_divergence"},
    # a NaN/Inf in one rank's values reaches every rank through the all-reduce: the loss and the
    # grad norm diverge, and a NaN check (Megatron's grad-norm assertion) kills the rank
    "non_finite": {"loss_divergence", "grad_norm_spike", "loss_plateau", "crash", "nccl_timeout", "hang",
                   "throughput_drop", "rank_lag"} | _ENDS,
    "loss_divergence": {"grad_norm_spike", "loss_plateau"},
    "vanishing_grad": {"loss_plateau"},
    "loss_plateau": set(),
    "throughput_drop": set(),
}

LABELS = {
    "thermal_throttling": "thermal throttling", "low_bandwidth": "low link bandwidth", "oom": "CUDA out of memory",
    "data_load_skew": "data-loading skew", "straggler": "straggler", "gpu_underutilized": "GPU under-utilisation",
    "hang": "hang", "nccl_timeout": "NCCL timeout", "gradient_skew": "gradient skew",
    "comm_bound": "communication-bound steps", "vanishing_grad": "vanishing gradients",
    "grad_norm_spike": "gradient-norm spike", "loss_divergence": "loss divergence", "loss_plateau": "loss plateau",
    "rank_lag": "rank lag", "throughput_drop": "throughput drop", "clock_skew": "clock skew",
    "log_hygiene": "log hygiene", "crash": "crash (the process died)", "host_oom": "host out of memory",
    "collective_mismatch": "collective mismatch", "job_cancelled": "job ended from outside (scheduler or signal)",
    "gpu_error": "GPU error", "unexplained_error": "unexplained error", "no_data": "no usable data",
    "non_finite": "non-finite value (NaN/Inf)",
}


def _t(s: str | None) -> dt.datetime | None:
    return parse_iso(s)


def _ranks_related(a: Finding, b: Finding, everyone: frozenset[int] = frozenset()) -> bool:
    """B concerns A's rank(s) or A's victims, or one of them is job-wide (no rank / every rank)."""
    if not a.ranks or not b.ranks:
        return True
    if everyone and set(a.ranks) >= everyone:
        return True
    return set(b.ranks) <= set(a.ranks) | set(a.victims)


def explains(a: Finding, b: Finding, everyone: frozenset[int] = frozenset()) -> bool:
    """Can finding `a` be (part of) the reason for finding `b`? `everyone`: all ranks of the run."""
    if a is b or a.kind in NON_CAUSAL or b.kind in NON_CAUSAL:
        return False
    if b.basis == "outlier" and a.basis != "outlier" and (not a.ranks or (everyone and set(a.ranks) >= everyone)):
        # a slowdown of every rank does not explain the host or ranks that stand apart in it:
        # they localise it (passes/outlier.py), so they explain it and not the other way round
        return False
    ta, tb = _t(a.first_seen), _t(b.first_seen)
    if (b.kind == "rank_lag" and a.kind in FAILURES and b.kind in CAUSES.get(a.kind, set()) and a.ranks
            and set(b.ranks) <= set(a.ranks)):
        # the lag is how the failing rank's stop shows in step counts: it comes before its peers'
        # timeouts (a timeout later) or its exit record, whatever the times say
        return True
    if a.kind in FAILURES and b.kind in FAILURES and a.kind == b.kind and bool(a.ranks) != bool(b.ranks):
        # one failure, reported twice: by who suffered it (a rule naming the ranks that timed out,
        # ranks = []) and by who caused it. The report naming the culprit explains the other,
        # whatever their times (a rule's ms-rounded time may be a hair earlier than the pass's).
        return bool(a.ranks) and set(b.victims) <= set(a.ranks) | set(a.victims)
    if (a.kind == "unexplained_error" and b.kind in FAILURES and a.ranks and b.ranks
            and set(b.ranks) <= set(a.ranks) and b.kind in CAUSES["unexplained_error"]):
        # the culprit's own error, logged while its peers still waited (before their timeouts:
        # b's last_seen), is why it went silent: a hang's first time is its last progress line
        tb_end = _t(b.last_seen) or tb
        return ta is None or tb_end is None or ta <= tb_end
    if a.kind in FAILURES and b.kind in FAILURES and a.ranks and b.ranks:
        # what a rank alone said before its peers failed (and how it ended) is why it went
        # silent: it explains a failure that names the rank by its silence, never the reverse;
        # and a silence by a hair on another rank (basis_weak) explains neither
        if b.rule == LONE and (a.basis in _SILENT and set(a.ranks) <= set(b.ranks)
                                          or a.basis_weak and not set(a.ranks) & set(b.ranks)):
            return False
        if a.rule == LONE and b.basis in _SILENT and set(b.ranks) <= set(a.ranks):
            return True
    if a.kind in FAILURES and b.kind in FAILURES:
        if ta is not None and tb is not None and ta != tb:
            return ta < tb
        return a.kind == b.kind and _ranks_related(a, b, everyone) or b.kind in CAUSES.get(a.kind, set()) and _ranks_related(a, b, everyone)
    if a.kind != b.kind and b.kind not in CAUSES.get(a.kind, set()):
        return False
    if (b.kind in FAILURES and a.kind not in FAILURES and a.ranks and b.victims
            and set(a.ranks) <= set(b.victims) and not set(a.ranks) & set(b.ranks)):
        # a rank that itself sat in the collective until it timed out was waiting like the
        # others: nobody was waiting for it, so its slowness is not why the collective hung
        return False
    if a.kind == b.kind and a.ranks and b.ranks and not set(a.ranks) & set(b.ranks):
        return False  # the same fault on other ranks is another fault
    if not _ranks_related(a, b, everyone) and a.kind != b.kind:
        return False
    if ta is None or tb is None:
        return True
    if b.kind in FAILURES or (a.layer == "training" and b.layer == "training"):
        return ta <= tb
    tb_end = _t(b.last_seen) or tb
    return ta <= tb_end


def _key(f: Finding, crash_relevant: bool, is_rule: bool) -> tuple:
    t = _t(f.first_seen)
    return (
        # a failure (or its cause) first, then an error nobody explains, then the rest
        0 if crash_relevant else 1 if f.kind == "unexplained_error" else 2,
        LAYER_ORDER.get(f.layer, 9),
        KIND_PRIORITY.index(f.kind) if f.kind in KIND_PRIORITY else len(KIND_PRIORITY),
        SEVERITY_ORDER.get(f.severity, 9),
        t.timestamp() if t else float("inf"),
        # at one time, the failure torch elastic observed first (failures.cascade marks it where
        # it agrees with the finding's ranks), then the lowest rank (of every rank or none last)
        0 if (f.evidence.get("launcher_first_observed") or {}).get("agrees") else 1,
        min(f.ranks) if f.ranks else float("inf"),
        1 if is_rule else 0,
    )


def _closure(start: int, rel: list[list[bool]]) -> list[int]:
    seen = {start}
    todo = [start]
    while todo:
        i = todo.pop()
        for j, ok in enumerate(rel[i]):
            if ok and j not in seen:
                seen.add(j)
                todo.append(j)
    seen.discard(start)
    return sorted(seen)


def _dated(findings: list[Finding]) -> list[Finding]:
    """The findings as the relation sees them: one without a time (a rule matching untimed
    console lines) borrows the time of a finding of the same kind on the same ranks — the same
    fault, placed in time by a pass. Copies: the findings themselves are not changed."""
    out = []
    for f in findings:
        if f.first_seen is None:
            twin = next((g for g in findings if g is not f and g.kind == f.kind and g.ranks == f.ranks and g.first_seen), None)
            if twin is not None:
                f = dataclasses.replace(f, first_seen=twin.first_seen, last_seen=f.last_seen or twin.last_seen)
        out.append(f)
    return out


def select(findings: list[Finding], everyone: frozenset[int] = frozenset()) -> tuple[int | None, list[int]]:
    """Index of the root cause (None when nothing at WARN or above is wrong) and what it explains."""
    findings = _dated(findings)
    n = len(findings)
    rel = [[explains(findings[i], findings[j], everyone) for j in range(n)] for i in range(n)]
    # a symptom a pass judged the job's own design (comm_bound's by_design: communication over
    # the threshold from the first step to the last on every rank, never rising) or the run's own
    # variation (within_noise: a rise that cost the run no measurable time) is that for a rule's
    # job-wide finding of the same kind too: no root cause by itself
    design = {f.kind for f in findings if f.rule.startswith("pass.")
              and any((f.evidence or {}).get(k) for k in NOT_A_FAULT)}
    cands = [i for i, f in enumerate(findings)
             if f.severity in ("WARN", "ERROR") and f.kind not in NON_CAUSAL and f.kind not in SYMPTOMS
             and not (f.kind in design and not f.rule.startswith("pass.")
                      and (not f.ranks or (everyone and set(f.ranks) >= everyone)))]
    if not cands:
        return None, []
    # a run whose values became NaN/Inf failed too (its result is lost), though no process died:
    # the verdict must explain that, before a slowdown it does not explain
    failures = [i for i in range(n) if findings[i].kind in FAILURES
                or findings[i].kind in RUINED and findings[i].severity == "ERROR"]

    def crash_relevant(i: int) -> bool:
        return i in failures or any(rel[i][j] for j in failures)

    # a root is explained by nothing it does not lead back to: findings that explain each other
    # round a cycle (a crash recorded after the timeouts it caused, their rule and pass reports of
    # one failure) stand together, and _key chooses among them
    reach = [set(_closure(i, rel)) for i in range(n)]
    roots = [c for c in cands if not any(rel[o][c] and o not in reach[c] for o in cands if o != c)] or cands
    # of two slowdowns neither explains, one that cost a tenth of the other's time is not the
    # verdict (both priced by cost.py on the same run: the other is what slowed it)
    top = max((findings[c].cost_seconds for c in roots if findings[c].cost), default=0.0)
    roots = [c for c in roots if not (findings[c].cost and findings[c].cost_seconds < MINOR_COST * top)] or roots
    root = min(roots, key=lambda i: _key(findings[i], bool(failures) and crash_relevant(i),
                                         not findings[i].rule.startswith("pass.")))
    return root, _closure(root, rel)


def _chain(root: Finding, members: Iterable[Finding], everyone: frozenset[int] = frozenset()) -> list[ChainLink]:
    picked: list[Finding] = [root]
    kinds = {root.kind}
    for f in sorted(members, key=lambda f: (LAYER_ORDER.get(f.layer, 9),
                                            KIND_PRIORITY.index(f.kind) if f.kind in KIND_PRIORITY else 99)):
        if f.kind in kinds or f.kind in NON_CAUSAL:
            continue
        if f.ranks and root.ranks and not set(f.ranks) <= set(root.ranks) and not set(f.ranks) >= everyone:
            continue  # the chain runs through the culprit rank(s) and job-wide symptoms only
        kinds.add(f.kind)
        picked.append(f)
    picked.sort(key=lambda f: (LAYER_ORDER.get(f.layer, 9), 0 if f is root else 1,
                               KIND_PRIORITY.index(f.kind) if f.kind in KIND_PRIORITY else 99))
    return [ChainLink(layer=f.layer, finding=f.title, ranks=list(f.ranks), lines=list(f.lines[:3])) for f in picked]


def assign(findings: list[Finding], ranks: list[int] | None = None) -> tuple[RootCause | None, list[Finding]]:
    """Pick the root cause, order the findings (root, its chain, what it explains, the rest) and
    fill every finding's `explains` with indexes into that order. `ranks`: all ranks of the run."""
    everyone = frozenset(ranks or [])
    for f in findings:
        job_wide = len(everyone) > 1 and set(f.ranks) >= everyone
        if f.basis is None and (f.ranks or f.local_ranks) and not job_wide:
            # passes that do not say how they named a rank get their kind's (model.DEFAULT_BASIS);
            # a finding about every rank singles nobody out: no basis
            f.basis = DEFAULT_BASIS.get(f.kind)
    root_i, explained = select(findings, everyone)
    if root_i is None:
        order = sorted(range(len(findings)), key=lambda i: (SEVERITY_ORDER.get(findings[i].severity, 9),
                                                            -findings[i].cost_seconds,
                                                            LAYER_ORDER.get(findings[i].layer, 9),
                                                            findings[i].first_seen or ""))
        out = [findings[i] for i in order]
        for f in out:
            f.explains = []
        return None, out
    root = findings[root_i]
    chain = _chain(root, [findings[j] for j in explained], everyone)
    chain_titles = [c.finding for c in chain]
    rest = [i for i in range(len(findings)) if i != root_i and i not in explained]
    ex_sorted = sorted(explained, key=lambda j: (findings[j].title not in chain_titles,
                                                 chain_titles.index(findings[j].title) if findings[j].title in chain_titles else 0,
                                                 LAYER_ORDER.get(findings[j].layer, 9)))
    rest_sorted = sorted(rest, key=lambda i: (SEVERITY_ORDER.get(findings[i].severity, 9), -findings[i].cost_seconds,
                                              LAYER_ORDER.get(findings[i].layer, 9), findings[i].first_seen or ""))
    order = [root_i, *ex_sorted, *rest_sorted]
    pos = {old: new for new, old in enumerate(order)}
    out = [findings[i] for i in order]
    dated = _dated(findings)
    for old, f in zip(order, out):
        if old == root_i:
            f.explains = sorted(pos[j] for j in explained)
        else:
            f.explains = sorted(pos[j] for j in range(len(findings))
                                if j != old and explains(dated[old], dated[j], everyone)
                                and not explains(dated[j], dated[old], everyone))
    where = ("every rank" if everyone and set(root.ranks) >= everyone and len(everyone) > 1
             else ranks_phrase(root.ranks) if root.ranks
             else local_ranks_phrase(root.local_ranks) if root.local_ranks else "the whole job")
    n_ex = len(explained)
    summary = (f"{LABELS.get(root.kind, root.kind)} on {where} ({root.layer} layer): {root.title}"
               + (f" — explains {n_ex} other finding{'s' if n_ex != 1 else ''}" if n_ex else ""))
    rc = RootCause(kind=root.kind, layer=root.layer, ranks=list(root.ranks), summary=summary, chain=chain, finding=0,
                   basis=root.basis, basis_weak=root.basis_weak, local_ranks=[dict(x) for x in root.local_ranks])
    return rc, out
