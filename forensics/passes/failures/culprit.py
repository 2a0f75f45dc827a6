"""Which rank held up a collective: the evidence the culprit of the timeouts is chosen from
(desync reports, ranks named as missing, fingerprint mismatches, an odd collective at one
SeqNum, lagging sequence numbers, the peer the others wait on, the least completed work), and
the basis each way of finding it gives.
"""
from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from typing import Any

import orjson

from ...collective_text import FP_ASPECTS, desync_ranks, fingerprint_diff, mismatch_pairs
from ...majority import minority


# Collectives where every rank sends a tensor of the same size (all-to-all and uneven
# all-gather legitimately differ per rank).
SAME_SIZE_RE = re.compile(r"(?i)all_?reduce|broadcast")


_SEQ = re.compile(r"(?i)(?:SeqNum=|seq(?:uence)?(?: id)?[=: ]\s*#?|collective #)(\d+)")


_PEER = re.compile(r"(?i)waiting (?:on|for) rank[= ]?(\d+)")


def _seq_of(row: dict[str, Any]) -> int | None:
    if row.get("seq") is not None:
        return int(row["seq"])
    return _seq_in(row.get("message") or "")


@functools.lru_cache(maxsize=1 << 14)
def _seq_in(text: str) -> int | None:
    """The sequence number a message names (asked of each timeout several times: by the
    failing SeqNum, the odd collective, the laggards)."""
    m = _SEQ.search(text)
    return int(m.group(1)) if m else None


def _peer_of(row: dict[str, Any]) -> int | None:
    if row.get("peer_rank") is not None:
        return int(row["peer_rank"])
    m = _PEER.search(row.get("message") or "")
    return int(m.group(1)) if m else None


def _desync_ranks(rows: list[dict[str, Any]]) -> tuple[list[int], str, set[int]]:
    """Ranks a desync report names ("report"); or, from CollectiveFingerPrint mismatch errors
    ("Rank 1 is running collective: …, but Rank 3 is running collective: …"), the rank in every
    pair ("fingerprint"): each rank compares itself with the others, so the odd one out is named
    by all of them. `reporters`: the ranks whose lines named them (one reporter is a weak basis)."""
    out: set[int] = set()
    reporters: set[int] = set()
    pairs: Counter[int] = Counter()
    pair_reporters: set[int] = set()
    seen: set[frozenset[int]] = set()
    fps: dict[int, list[dict[str, Any]]] = defaultdict(list)
    n_pairs = 0
    for r in rows:
        text = r.get("message") or ""
        named = desync_ranks(text)
        if named:
            out.update(named)
            if r.get("rank") is not None:
                reporters.add(int(r["rank"]))
        for a, fa, b, fb in mismatch_pairs(text):
            if r.get("rank") is not None:
                pair_reporters.add(int(r["rank"]))
            # one comparison however often it is printed (by both ranks, a rethrow, each rank
            # repeating the text): counted once
            if frozenset((a, b)) in seen:
                continue
            seen.add(frozenset((a, b)))
            pairs.update({a, b})
            n_pairs += 1
            fps[a].append(fa)
            fps[b].append(fb)
    if out:
        return sorted(out), "report", reporters
    odd = _odd_fingerprints(fps)
    if odd:
        return odd, "fingerprint", (pair_reporters - set(odd)) or pair_reporters
    if n_pairs:
        top = max(pairs.values())
        if top == n_pairs:
            # the rank in every comparison; a single comparison cannot tell which of its two
            # ranks differs from the rest: both are named
            odd = {k for k, c in pairs.items() if c == top}
            return sorted(odd), "fingerprint", (pair_reporters - odd) or pair_reporters
    return [], "", set()


def _odd_fingerprints(fps: dict[int, list[dict[str, Any]]]) -> list[int]:
    """The ranks whose collective differs from the majority's, from the fingerprints the mismatch
    errors give each rank (ProcessGroupWrapper: each rank names the first peer whose fingerprint
    differs from its own, so the odd ranks are in most comparisons but not always in all: two odd
    ranks compare with each other's majority peers). Needs three ranks or more, one fingerprint
    per rank, and a strict majority sharing one; compared on the aspects every fingerprint has."""
    if len(fps) < 3:
        return []
    aspects = [k for k, _ in FP_ASPECTS if all(k in fp for v in fps.values() for fp in v)]
    if not aspects:
        return []
    key: dict[int, tuple[str, ...]] = {}
    for rank, v in fps.items():
        ks = {tuple(str(fp[k]) for k in aspects) for fp in v}
        if len(ks) != 1:
            return []           # a rank seen with two collectives: no one fingerprint to compare
        key[rank] = ks.pop()
    ranks = sorted(key)
    idx, _ref, n = minority([key[r] for r in ranks])
    if not idx or n * 2 <= len(key):
        return []
    return [ranks[i] for i in idx]


def _fingerprint_how(rows: list[dict[str, Any]], odd: list[int]) -> tuple[str, dict[str, Any] | None]:
    """How the odd rank's collective differs, from the first mismatch error that compares it with
    a rank of the majority: "rank 2's ALLREDUCE #40 has tensor dtype Half where rank 0's has
    Float" (op type, sequence number, shape or dtype, as compute_collective_diff lists them)."""
    for r in rows:
        for a, fa, b, fb in mismatch_pairs(r.get("message") or ""):
            if (a in odd) == (b in odd):
                continue
            (o, fo), (p, fp) = ((a, fa), (b, fb)) if a in odd else ((b, fb), (a, fa))
            diff = fingerprint_diff(fo, fp)
            if not diff:
                continue
            names = dict(FP_ASPECTS)

            def show(k: str, fpr: dict[str, Any]) -> str:
                v = fpr[k]
                return ", ".join(map(str, v)) if k == "dtypes" else (f"[{', '.join(map(str, v))}]" if k == "shape" else str(v))

            what = f"rank {o}'s {fo.get('op', 'collective')}" + (f" #{fo['seq']}" if "seq" in fo else "")
            parts = [f"{names[k]} {show(k, fo)} where rank {p}'s has {show(k, fp)}" for k in diff]
            return (f"collective fingerprints differ: {what} has {'; '.join(parts)}",
                    {"rank": o, "fingerprint": fo, "peer": p, "peer_fingerprint": fp, "differ": diff,
                     "where": f"{r.get('source_file')}:{r.get('line')}"})
    return "collective fingerprints differ", None


def _missing_ranks(rows: list[dict[str, Any]]) -> tuple[list[int], set[int]]:
    """Ranks an error names as not arriving (a barrier's or collective's timeout, a desync report,
    read by the console reader into extra.missing_ranks), and the ranks whose errors name them.
    A rank that names itself is not counted."""
    out: set[int] = set()
    reporters: set[int] = set()
    for r in rows:
        raw = r.get("missing_ranks")
        if not raw:
            continue
        try:
            vals = orjson.loads(raw) if isinstance(raw, str) else raw
        except orjson.JSONDecodeError:
            continue
        named = {int(v) for v in (vals if isinstance(vals, list) else [vals]) if isinstance(v, (int, str)) and str(v).lstrip("-").isdigit()}
        named.discard(r["rank"] if r.get("rank") is not None else -1)
        if named:
            out |= named
            if r.get("rank") is not None:
                reporters.add(int(r["rank"]))
    return sorted(out), reporters


def _odd_collective(tos: list[dict[str, Any]], fail_seq: int | None) -> tuple[list[int], str, bool]:
    """Ranks whose failed collective differs from the majority's (another op, or another
    NumelIn where sizes must agree): at the failing SeqNum; or, when no failure names a SeqNum
    (gloo's errors do not), each rank's first failed collective, named by its error or by the
    torch.distributed call its traceback died in (one rank in all_gather while the others are in
    all_reduce). Needs >= 3 ranks to have a majority; returns ([], "", False) when all agree. The
    flag says the majority is only two ranks (a weak basis)."""
    sig: dict[int, tuple[str | None, int | None]] = {}
    for r in tos:
        if r["rank"] is None or r.get("collective") is None or (fail_seq is not None and _seq_of(r) != fail_seq):
            continue
        if fail_seq is None and _seq_of(r) is not None:
            return [], "", False     # sequence numbers that do not agree: the laggards' question, not this one
        op = str(r["collective"]).upper()
        if fail_seq is None:
            op = op.replace("_", "")     # a traceback's all_reduce, a message's ALLREDUCE
        size = r.get("numel_in") if SAME_SIZE_RE.search(op) else None
        sig.setdefault(int(r["rank"]), (op, size))
    if len(sig) < 3:
        return [], "", False
    ranks = sorted(sig)
    idx, ref, n = minority([sig[k] for k in ranks])
    if not idx or n * 2 <= len(sig):
        return [], "", False
    top = sig[ranks[ref]]
    odd = [ranks[i] for i in idx]
    theirs = sorted({sig[k] for k in odd}, key=str)

    def fmt(s: tuple[str | None, int | None]) -> str:
        return f"{s[0]}" + (f" NumelIn={s[1]}" if s[1] is not None else "")

    at = f" at SeqNum {fail_seq}" if fail_seq is not None else " when they failed"
    return odd, f"runs {', '.join(fmt(s) for s in theirs)}{at} while the others run {fmt(top)}", n < 3


def _pg_scoped(rows: list[dict[str, Any]]) -> dict[str | None, list[dict[str, Any]]]:
    """Rows by process group. Sequence numbers count per group, so they are compared within one;
    rows that do not name their group join the only group named, if exactly one is."""
    named = {r["process_group"] for r in rows if r.get("process_group") is not None}
    out: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        pg = r.get("process_group")
        out[pg if pg is not None else (next(iter(named)) if len(named) == 1 else None)].append(r)
    return out


# How the culprit of the timeouts was found -> the basis a finding states (spec/report.md).
MODE_BASIS = {
    "oom": "own_error", "crash": "own_error", "gpu": "own_error", "killed": "own_error",
    "report": "named_by_peers", "missing": "named_by_peers", "fingerprint": "named_by_peers", "peer": "named_by_peers",
    "odd": "own_error", "lag_timeout": "own_error", "exited": "own_error",
    "lag_enqueued": "never_joined", "never_joined": "never_joined", "least_completed": "never_joined",
    "silent": "last_to_log", "local": "own_error", "no_timeout": "never_joined", "stuck": "own_error",
}


# Ranks that issued a DIFFERENT collective than their peers (not ranks that never arrived).
MISMATCH_MODES = {"fingerprint", "odd", "lag_timeout"}


def _laggards(statuses: list[dict[str, Any]], first_to: dict[int, dict[str, Any]]) -> tuple[list[int], str, set[int]]:
    """Ranks whose sequence number lags within a process group: their own timeout is at a lower
    SeqNum than the group's, or their last enqueued work is below it. The set: ranks whose
    position came from their own timeout (they wait in another collective)."""
    for pg, grp in _pg_scoped([*statuses, *first_to.values()]).items():
        tos = [r for r in grp if r["kind"] == "timeout" and r["rank"] is not None]
        seqs = Counter(s for r in tos if (s := _seq_of(r)) is not None)
        if not seqs:
            continue
        fail_seq = seqs.most_common(1)[0][0]
        pos: dict[int, int] = {}
        own: dict[int, int] = {}
        for r in grp:
            if r["rank"] is None:
                continue
            s = _seq_of(r) if r["kind"] == "timeout" else None
            if s is not None:
                own[int(r["rank"])] = max(own.get(int(r["rank"]), s), s)
            for v in (s, r["enqueued"]):
                if v is not None:
                    pos[int(r["rank"])] = max(pos.get(int(r["rank"]), v), v)
        lag = sorted(k for k, p in pos.items() if p < fail_seq)
        if lag and len(lag) < len(pos):
            behind = ", ".join(f"#{pos[k]}" + (f" on rank {k}" if len(lag) > 1 else "") for k in lag)
            in_own = {k for k in lag if own.get(k) == pos[k]}
            what = (f"timed out in collective {behind} while the others wait in #{fail_seq}" if set(lag) <= in_own
                    else f"never issued collective #{fail_seq}: last enqueued work {behind}")
            return lag, what + (f" in pg {pg}" if pg else ""), in_own
    return [], "", set()


def _least_completed(statuses: list[dict[str, Any]]) -> tuple[list[int], int | None, int]:
    """The rank(s) whose "last completed work" is smallest within a process group (the laggard),
    when the ranks disagree, and by how many works the next rank is ahead of them."""
    for _pg, grp in _pg_scoped(statuses).items():
        done: dict[int, int] = {}
        for r in grp:
            if r["rank"] is not None and r["completed"] is not None:
                done[int(r["rank"])] = int(r["completed"])     # the latest report of each rank
        if len(set(done.values())) > 1:
            low = min(done.values())
            nxt = min(v for v in done.values() if v != low)
            return sorted(k for k, c in done.items() if c == low), low, nxt - low
    return [], None, 0
