"""Generate Flight Recorder dump sets in the recorder's own format, with faults chosen by the test.

The format is taken from PyTorch's writer and analyser (torch/csrc/distributed/c10d FlightRecorder,
torch/distributed/flight_recorder/components/{loader,builder,types}.py): one pickle per rank
(`<prefix><rank>`, default prefix nccl_trace_rank_) holding a dict with `version`, `pg_config`
({pg name: {name, desc, ranks: "[0, 1]"}}), `pg_status` ({local pg_id: last enqueued / started /
completed collective}) and `entries` (the ring buffer, oldest first: record_id, pg_id,
process_group (name, desc), collective_seq_id, p2p_seq_id, op_id, profiling_name "nccl:<op>",
time_created_ns, input/output sizes and dtypes, state scheduled/started/completed, ...).

Each rank issues `n` collectives in the world group "0" (all_reduce, all_gather, broadcast in
turn) and, every 4th step, one all_reduce in its tensor-parallel group (blocks of 4 ranks, one
group name per block as real dumps have). Faults: `behind` (rank -> collectives never issued at
the end), `ahead` (rank -> extra collectives), `swap_op` / `swap_dtype` / `swap_size` (rank -> seq
of the world group where that rank differs), `no_dump` / `empty` / `corrupt` (ranks whose file is
absent, 0 bytes, or cut short), `buffer` (ring buffer size). Files go in `node-<k>/` folders (8
ranks per host) so hosts are named.

Run as a script to write a large set:  python tests/fr_dumps.py OUT --world 1024 --n 200
"""
from __future__ import annotations

import argparse
import json
import pickle
from pathlib import Path
from typing import Any

OPS = [("all_reduce", "Float", lambda s: ([[s, 1024]], [[s, 1024]])),
       ("_all_gather_base", "BFloat16", lambda s: ([[s, 512]], [[s * 8, 512]])),
       ("broadcast", "Long", lambda s: ([[1, s]], [[1, s]]))]
T0 = 1_750_000_000_000_000_000


def _entry(rid: int, pg_id: int, pg: tuple[str, str], seq: int, op: str, dtype: str, ins: Any, outs: Any,
           state: str, t: int) -> dict[str, Any]:
    return {
        "record_id": rid, "pg_id": pg_id, "process_group": pg, "collective_seq_id": seq, "p2p_seq_id": 0,
        "op_id": seq, "profiling_name": f"nccl:{op}", "time_created_ns": t, "duration_ms": None,
        "input_sizes": ins, "input_dtypes": [dtype] * len(ins), "output_sizes": outs,
        "output_dtypes": [dtype] * len(outs), "state": state,
        "time_discovered_started_ns": t + 1000 if state != "scheduled" else None,
        "time_discovered_completed_ns": t + 2000 if state == "completed" else None,
        "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False,
        "frames": [{"name": "train_step", "filename": "train.py", "line": 120 + seq % 7}],
        "thread_id": "140000000000", "thread_name": "pt_main_thread",
    }


def make_dumps(world: int = 8, n: int = 12, *, behind: dict[int, int] | None = None,
               ahead: dict[int, int] | None = None, swap_op: dict[int, int] | None = None,
               swap_dtype: dict[int, int] | None = None, swap_size: dict[int, int] | None = None,
               buffer: int = 2000, tp: int = 4) -> dict[int, dict[str, Any]]:
    """rank -> the dump dict it would write."""
    behind, ahead = behind or {}, ahead or {}
    swap_op, swap_dtype, swap_size = swap_op or {}, swap_dtype or {}, swap_size or {}
    issued = {r: n - behind.get(r, 0) + ahead.get(r, 0) for r in range(world)}
    done_all = min(issued.values())         # collectives every rank issued complete
    out: dict[int, dict[str, Any]] = {}
    for r in range(world):
        block = r // tp
        tp_name = str(1 + block)
        tp_ranks = list(range(block * tp, min(world, block * tp + tp)))
        tp_issued = min(issued[x] for x in tp_ranks)
        cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))},
               tp_name: {"name": tp_name, "desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": str(tp_ranks)}}
        entries = []
        rid = 0
        tp_seq = 0
        for s in range(1, issued[r] + 1):
            op, dt, shape = OPS[(s - 1) % len(OPS)]
            ins, outs = shape(256)
            if swap_op.get(r) == s:
                op = "broadcast" if op != "broadcast" else "all_reduce"
            if swap_dtype.get(r) == s:
                dt = "Half"
            if swap_size.get(r) == s:
                ins, outs = shape(128)
            state = "completed" if s <= done_all else "scheduled"
            entries.append(_entry(rid, 0, ("0", "default_pg"), s, op, dt, ins, outs, state, T0 + s * 10_000_000 + r))
            rid += 1
            if s % 4 == 0 and s <= tp_issued:
                tp_seq += 1
                entries.append(_entry(rid, 1, (tp_name, "TENSOR_MODEL_PARALLEL_GROUP"), tp_seq, "all_reduce", "Float",
                                      [[64]], [[64]], "completed", T0 + s * 10_000_000 + 5_000_000 + r))
                rid += 1
        last = issued[r]
        out[r] = {
            "version": "2.9", "nccl_version": "2.27.3",
            "pg_config": cfg,
            "pg_status": {"0": {"last_enqueued_collective": last, "last_started_collective": -1,
                                "last_completed_collective": min(last, done_all)},
                          "1": {"last_enqueued_collective": tp_seq, "last_started_collective": -1,
                                "last_completed_collective": tp_seq}},
            "entries": entries[-buffer:],
        }
    return out


def write_set(out: Path, dumps: dict[int, dict[str, Any]], *, no_dump: set[int] = frozenset(),  # type: ignore[assignment]
              empty: set[int] = frozenset(), corrupt: set[int] = frozenset(), fmt: str = "pickle",  # type: ignore[assignment]
              per_host: int = 8) -> list[Path]:
    """Write each rank's dump as `out/node-<k>/nccl_trace_rank_<r>` (k = r // per_host)."""
    paths = []
    for r, d in sorted(dumps.items()):
        if r in no_dump:
            continue
        p = out / f"node-{r // per_host:02d}" / f"nccl_trace_rank_{r}"
        p.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(d).encode() if fmt == "json" else pickle.dumps(d, protocol=4)
        if r in empty:
            data = b""
        elif r in corrupt:
            data = data[: len(data) // 2]     # a dump cut short, as a killed writer leaves it
        p.write_bytes(data)
        paths.append(p)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--world", type=int, default=1024)
    ap.add_argument("--n", type=int, default=200, help="collectives per rank in the world group")
    ap.add_argument("--buffer", type=int, default=2000)
    a = ap.parse_args()
    w = a.world
    d = make_dumps(w, a.n, behind={w // 3: 2}, buffer=a.buffer)
    write_set(a.out, d, no_dump={w - 1}, empty={w - 2}, corrupt={w - 3})
    print(f"wrote {w - 1} dumps to {a.out} (rank {w // 3} 2 behind; {w - 1} no dump, {w - 2} empty, {w - 3} corrupt)")


if __name__ == "__main__":
    main()
