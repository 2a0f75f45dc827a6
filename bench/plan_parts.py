"""Where per-file planning's CPU goes (issue 29): the ingest's first phase, before any unit runs,
reads, fingerprints and sniffs every file. Each part is timed on one thread over every JSON-lines
file under LOGS, CPU seconds, medians of --reps (results dropped as made: no garbage kept alive).

    python bench/plan_parts.py /tmp/s5-data/r4096x120/logs      # r4096 of bench/first_report.py

The hash lines time the fingerprint's bytes (the first MiB of each file; its last 64 KiB too when longer) under
other algorithms; OPENSSL_ia32cap=":~0x20000000" times them as on a CPU without SHA extensions.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forensics.ingest import _infos  # noqa: E402
from forensics.ingest import roles  # noqa: E402
from forensics.ingest.formats import sniff  # noqa: E402
from forensics.ingest.sources import HEAD_BYTES, file_info_and_head, host_from_path, rank_from_path  # noqa: E402


def _cpu(f, xs, reps: int) -> float:
    ts = []
    for _ in range(reps):
        c = time.process_time()
        for x in xs:
            f(x)
        ts.append(time.process_time() - c)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", help="folder of JSON-lines logs")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    paths = sorted(os.path.realpath(p) for p in Path(a.logs).rglob("*.jsonl"))
    heads = [Path(p).read_bytes()[: 64 * 1024] for p in paths]
    data = [Path(p).read_bytes()[:HEAD_BYTES] for p in paths]
    samples = [roles._sample(h, roles.SEED_CHECK_LINES) for h in heads]
    print(f"{len(paths)} files, {sum(map(len, data)) / 1e6:.0f} MB hashed; CPU s, median of {a.reps}")
    rows = [
        ("planning of every file (_infos)", lambda ps: _infos(ps), [paths]),
        ("  file_info_and_head (read + fingerprint)", lambda p: file_info_and_head(p, resolved=True), paths),
        ("  roles.infer (schema)", roles.infer, heads),
        ("    _sample (JSON parse of 24 lines)", lambda h: roles._sample(h, roles.SEED_CHECK_LINES), heads),
        ("    _seed_like", roles._seed_like, samples),
        ("  formats.sniff", lambda h: sniff(h, "x.jsonl"), heads),
        ("  rank_from_path + host_from_path", lambda p: (rank_from_path(p), host_from_path(p)), paths),
    ]
    for name, mk in [("blake2b-16 (the fingerprint)", lambda d: hashlib.blake2b(d, digest_size=16)),
                     ("blake2b-8", lambda d: hashlib.blake2b(d, digest_size=8)),
                     ("blake2s-16", lambda d: hashlib.blake2s(d, digest_size=16)),
                     ("sha1", hashlib.sha1), ("sha256", hashlib.sha256), ("md5", hashlib.md5)]:
        rows.append((f"hash {name}", lambda d, mk=mk: mk(d).digest(), data))
    for name, f, xs in rows:
        print(f"{name:45s} {_cpu(f, xs, a.reps):7.3f}")


if __name__ == "__main__":
    main()
