"""Write N ranks x M MB of Kineto (PyTorch profiler) traces, for bench/traces.py.

    python bench/gen_traces.py OUT_DIR --ranks 8 --mb 50 [--gzip] [--late-rank 3] [--seed 0] [--layers 48]

Layout as libkineto's output_json.cpp writes it: schemaVersion, deviceProperties and
distributedInfo, then `traceEvents`, then traceName and baseTimeNanoseconds (ts relative to it).
Each profiler step holds, per layer, a CPU op, its cudaLaunchKernel (correlation id) and the
kernel on the compute stream; every few layers an NCCL all-reduce on its own stream, launched
by every rank at a step-locked time plus jitter (plus 0.4 ms on `--late-rank`), starting when
its rank arrives and ending when the last rank has; some steps copy memory or run a CUDA graph.
Steps are added until the file reaches M MB. Memory stays small: events are written as they are
made. Owns nothing else.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
from pathlib import Path
from typing import TextIO

BASE_NS = 1_767_225_600_000_000_000    # 2026-01-01T00:00:00Z
LAYERS = 48                             # per step (--layers); a step lasts 375 µs per layer + 2 ms
LAYER_US = 375
COMM_EVERY = 8
LATE_US = 400
PAD = "x" * 40                          # a realistic amount of args text per CPU op


def _jitter(seed: int, step: int, k: int, rank: int, span: int) -> int:
    h = hashlib.blake2b(f"{seed}:{step}:{k}:{rank}".encode(), digest_size=4).digest()
    return int.from_bytes(h, "little") % span


def _step_us(layers: int) -> int:
    return 2000 + layers * LAYER_US


def _arrival(seed: int, step: int, k: int, rank: int, late_rank: int | None, layers: int) -> int:
    """When `rank` launches the collective after layer k of `step` (µs from the trace's base)."""
    t = step * _step_us(layers) + 300 + k * LAYER_US + _jitter(seed, step, k, rank, 60)
    return t + (LATE_US if rank == late_rank else 0)


def _header(rank: int, ranks: int) -> str:
    dev = ", ".join(f'{{"id": {i}, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816, '
                    f'"computeMajor": 9, "computeMinor": 0, "numSms": 132}}' for i in range(8))
    return (f'{{\n  "schemaVersion": 1,\n  "deviceProperties": [{dev}],\n'
            f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {ranks}}},\n'
            f'  "record_shapes": 1,\n  "traceEvents": [\n')


def write_rank(path: Path, rank: int, ranks: int, mb: float, gz: bool, late_rank: int | None, seed: int,
               layers: int = LAYERS) -> int:
    target = int(mb * 1e6)
    f: TextIO = gzip.open(path, "wt", compresslevel=1) if gz else open(path, "w")  # type: ignore[assignment]
    written = 0
    dev = rank % 8
    pid, tid = 1000 + rank, 1000 + rank

    def put(s: str) -> None:
        nonlocal written
        f.write(s)
        written += len(s)

    put(_header(rank, ranks))
    corr = 1
    step = 0
    gpu = 0
    first = True
    while written < target:
        step_us = _step_us(layers)
        t0 = step * step_us
        put(("" if first else ",\n") + f'  {{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", '
            f'"pid": {pid}, "tid": {tid}, "ts": {t0}, "dur": {step_us - 100}, "args": {{"External id": {corr}}}}}')
        first = False
        gpu = max(gpu, t0 + 50)  # the compute stream: free from here (a stream runs one kernel at a time)
        cpu = t0 + 10
        for k in range(layers):
            # CPU op and its launch
            put(f',\n  {{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": {pid}, "tid": {tid}, '
                f'"ts": {cpu}, "dur": 40, "args": {{"External id": {corr}, "Record function id": 0, '
                f'"Input Dims": [[4096, 4096], [4096, 4096], []], "Input type": ["float", "float", ""], '
                f'"Sequence number": {corr}, "Fwd thread id": 0, "pad": "{PAD}"}}}}')
            put(f',\n  {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {tid}, '
                f'"ts": {cpu + 20}, "dur": 8, "args": {{"External id": {corr}, "cbid": 211, "correlation": {corr}}}}}')
            start = max(gpu, cpu + 30) + _jitter(seed, step, k, rank + 100, 5)
            dur = 150 + _jitter(seed, step, k, rank + 200, 100)
            put(f',\n  {{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", '
                f'"pid": {dev}, "tid": 7, "ts": {start}, "dur": {dur}, "args": {{"External id": {corr}, "queued": 0, '
                f'"device": {dev}, "context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 168, '
                f'"shared memory": 98304, "blocks per SM": 1.2, "warps per SM": 4.8, "grid": [128, 2, 1], '
                f'"block": [256, 1, 1], "est. achieved occupancy %": 12}}}}')
            corr += 1
            gpu = start + dur
            cpu += LAYER_US
            if k % COMM_EVERY == COMM_EVERY - 1:
                arrive = _arrival(seed, step, k, rank, late_rank, layers)
                last = max(_arrival(seed, step, k, r, late_rank, layers) for r in range(ranks))
                put(f',\n  {{"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "pid": {pid}, "tid": {tid}, '
                    f'"ts": {arrive - 20}, "dur": 15, "args": {{"External id": {corr}}}}}')
                put(f',\n  {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {tid}, '
                    f'"ts": {arrive - 10}, "dur": 6, "args": {{"External id": {corr}, "cbid": 211, "correlation": {corr}}}}}')
                put(f',\n  {{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", '
                    f'"pid": {dev}, "tid": 20, "ts": {arrive}, "dur": {last - arrive + 120}, "args": {{"External id": {corr}, '
                    f'"queued": 0, "device": {dev}, "context": 1, "stream": 20, "correlation": {corr}, "grid": [2, 1, 1], "block": [512, 1, 1]}}}}')
                corr += 1
        if step % 4 == 1:   # a host-to-device copy
            put(f',\n  {{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": {pid}, "tid": {tid}, '
                f'"ts": {cpu}, "dur": 9, "args": {{"External id": {corr}, "cbid": 41, "correlation": {corr}}}}}')
            put(f',\n  {{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": {dev}, "tid": 7, '
                f'"ts": {max(gpu, cpu + 20)}, "dur": 60, "args": {{"External id": {corr}, "device": {dev}, "context": 1, '
                f'"stream": 7, "correlation": {corr}, "bytes": 4194304, "memory bandwidth (GB/s)": 70}}}}')
            gpu = max(gpu, cpu + 20) + 60
            corr += 1
        if step % 4 == 2:   # a CUDA graph: three kernels under one cudaGraphLaunch
            put(f',\n  {{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": {pid}, "tid": {tid}, '
                f'"ts": {cpu}, "dur": 12, "args": {{"External id": {corr}, "cbid": 311, "correlation": {corr}}}}}')
            g = max(gpu, cpu + 25)
            for j in range(3):
                put(f',\n  {{"ph": "X", "cat": "kernel", "name": "void graph_kernel_{j}<float>(float*)", "pid": {dev}, '
                    f'"tid": 7, "ts": {g}, "dur": 30, "args": {{"External id": {corr}, "device": {dev}, "context": 1, '
                    f'"stream": 7, "correlation": {corr}, "grid": [64, 1, 1], "block": [128, 1, 1]}}}}')
                g += 32
            gpu = g
            corr += 1
        step += 1
    put(f'\n  ],\n  "traceName": "{path.name}",\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {BASE_NS}\n}}\n')
    f.close()
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=50.0, help="uncompressed MB per rank")
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--late-rank", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=LAYERS,
                    help="kernels per profiler step (HTA's step lookup is per event x per step: few, long steps for it)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for r in range(a.ranks):
        p = out / f"rank{r}.pt.trace.json{'.gz' if a.gzip else ''}"
        steps = write_rank(p, r, a.ranks, a.mb, a.gzip, a.late_rank, a.seed, a.layers)
        print(f"{p}: {steps} steps, {p.stat().st_size / 1e6:.1f} MB on disk")


if __name__ == "__main__":
    main()
