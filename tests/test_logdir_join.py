"""A multi-node `torchrun --log-dir` run: each worker's output in <log_dir>/<run_id>/attempt_<n>/<local
rank>/{stdout,stderr}.log (torch/distributed/elastic/multiprocessing/api.py, DefaultLogsSpecs.reify),
the file giving the LOCAL rank only; the node's launcher console holds the ChildFailedError record
(torch/distributed/elastic/multiprocessing/errors/__init__.py: "host : H", "rank : R (local_rank: L)").
The file's local rank and its host, joined with that record, give the global rank (basis
launcher_record); where nothing gives the file's host, it keeps its local rank.

Test lines are written here in those formats."""
from __future__ import annotations

from pathlib import Path

from forensics.ingest import ingest
from forensics.passes import diagnose
from forensics.store import open_store

NPROC = 4
AGENT = "torch/distributed/elastic/multiprocessing/api.py"


def _console(node_rank: int, failed: dict | None) -> str:
    """One node's agent console: its launch configs, and, on the failing node, the agent's exit
    line and the ChildFailedError table."""
    lines = [f"I0301 09:00:00.000000 4100 torch/distributed/launcher/api.py:188] Starting elastic_operator with launch configs:",
             "  entrypoint       : train.py", "  min_nodes        : 2", "  max_nodes        : 2",
             f"  nproc_per_node   : {NPROC}", "  rdzv_backend     : static", "  rdzv_endpoint    : a0:29500",
             f"  rdzv_configs     : {{'rank': {node_rank}, 'timeout': 900}}", "  max_restarts     : 0",
             "  log_dir          : /tmp/torchelastic_q"]
    if failed:
        lo, rk, host = failed["local"], failed["rank"], failed["host"]
        others = [x for x in range(NPROC) if x != lo]
        lines += [f"W0301 09:05:00.100000 4100 {AGENT}:897] Sending process {5000 + x} closing signal SIGTERM" for x in others]
        lines += [f"E0301 09:05:00.900000 4100 {AGENT}:869] failed (exitcode: 1) local_rank: {lo} (pid: {5000 + lo}) of binary: /usr/bin/python3",
                  "Traceback (most recent call last):", '  File "/usr/local/bin/torchrun", line 8, in <module>',
                  "    sys.exit(main())", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                  "=" * 60, "train.py FAILED", "-" * 60, "Failures:", "  <NO_OTHER_FAILURES>", "-" * 60,
                  "Root Cause (first observed failure):", "[0]:", "  time      : 2025-03-01_09:05:00",
                  f"  host      : {host}", f"  rank      : {rk} (local_rank: {lo})",
                  f"  exitcode  : 1 (pid: {5000 + lo})", "  error_file: <N/A>",
                  "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html", "=" * 60]
    return "\n".join(lines) + "\n"


CRASH = ("Traceback (most recent call last):\n"
         '  File "/workspace/train.py", line 210, in <module>\n'
         "    main()\n"
         '  File "/workspace/data/loader.py", line 55, in __getitem__\n'
         "    raise KeyError(idx)\n"
         "KeyError: 91127\n")


def _worker_files(node_dir: Path, crashed_local: int | None) -> None:
    for lo in range(NPROC):
        d = node_dir / "logs" / "31337_ab" / "attempt_0" / str(lo)
        d.mkdir(parents=True)
        (d / "stdout.log").write_text("".join(f"step {s} loss {2.0 - s / 100:.3f}\n" for s in range(1, 6)))
        (d / "stderr.log").write_text(CRASH if lo == crashed_local else "")


def _run(root: Path, folders: list[str], failing: int, host: str, local: int, rank: int):
    for i, name in enumerate(folders):
        node = root / "logs" / name
        node.mkdir(parents=True)
        fail = {"local": local, "rank": rank, "host": host} if i == failing else None
        (node / "console.log").write_text(_console(i, fail))
        _worker_files(node, local if i == failing else None)
    ingest([str(root / "logs")], root / "run.forensics")
    return diagnose(open_store(root / "run.forensics"))


def test_a_worker_file_under_a_folder_named_after_its_host_gets_the_records_rank(tmp_path: Path) -> None:
    """gpu-a/ and gpu-b/ are no host folder the path rules know; gpu-b's record names host gpu-b,
    local rank 2, rank 6: the KeyError in gpu-b/.../attempt_0/2/stderr.log is rank 6's crash."""
    rep = _run(tmp_path, ["gpu-a", "gpu-b"], failing=1, host="gpu-b", local=2, rank=6)
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.ranks, rc.basis) == ("crash", [6], "own_error"), rc
    f = rep.findings[0]
    assert "KeyError" in f.title
    rec = f.evidence["launcher_record"]
    assert (rec["host"], rec["local_rank"], rec["rank"]) == ("gpu-b", 2, 6) and "gpu-b" in rec["host_from"]
    cited = [ln.source_file for ln in f.lines]
    assert any("attempt_0/2/stderr.log" in c for c in cited) and any(c.endswith("gpu-b/console.log") for c in cited)


def test_a_short_folder_name_matches_a_qualified_host(tmp_path: Path) -> None:
    """The record names hpc12.cluster.local; the folder is hpc12."""
    rep = _run(tmp_path, ["hpc11", "hpc12"], failing=1, host="hpc12.cluster.local", local=1, rank=5)
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.ranks, rc.basis) == ("crash", [5], "own_error"), rc


def test_the_launcher_console_beside_the_files_gives_their_host(tmp_path: Path) -> None:
    """Folders n1/ n2/ name no host; the record names 10.1.0.8. The console in n2/ is the only
    launcher console above n2's --log-dir tree: its host is the files' host."""
    rep = _run(tmp_path, ["n1", "n2"], failing=1, host="10.1.0.8", local=3, rank=7)
    rc = rep.root_cause
    assert rc is not None and (rc.kind, rc.ranks, rc.basis) == ("crash", [7], "own_error"), rc
    assert "n2" in rep.findings[0].evidence["launcher_record"]["host_from"]


def test_no_join_when_nothing_gives_the_files_host(tmp_path: Path) -> None:
    """Both nodes' consoles in one folder above both --log-dir trees: which node a worker file is
    from is not known, so the crash stays on local rank 2 with no global rank."""
    root = tmp_path / "logs"
    root.mkdir()
    (root / "c0.log").write_text(_console(0, None).replace("4100", "4200"))
    (root / "c1.log").write_text(_console(1, {"local": 2, "rank": 6, "host": "10.1.0.9"}))
    for name, crashed in (("t0", None), ("t1", 2)):
        _worker_files(root / name, crashed)
    ingest([str(root)], tmp_path / "run.forensics")
    rep = diagnose(open_store(tmp_path / "run.forensics"))
    crash = next(f for f in rep.findings if "KeyError" in f.title)
    assert crash.ranks == [] and "launcher_record" not in crash.evidence
    assert [x["local_rank"] for x in crash.local_ranks] == [2]


def test_the_host_named_inside_the_file_joins_it() -> None:
    """records.join on rows: a worker file whose folders name no host, but whose own lines name
    one host (an NCCL line's hostname, say), is that host's; a second host named in it, or none,
    leaves the row alone."""
    import types

    import polars as pl

    from forensics.passes.failures import records

    rec = {"kind": "exit", "rank": 9, "local_rank": 1, "host": "h2.example", "source_file": "/x/c/console.log", "line": 30}
    tb = "/x/t/{}/logs/r1/attempt_0/1/stderr.log"

    def row(f: str) -> dict:
        return {"kind": "traceback", "rank": None, "local_rank": 1, "host": None, "source_file": f, "line": 1}

    a, b, c = row(tb.format("a")), row(tb.format("b")), row(tb.format("c"))
    events = pl.LazyFrame({"source_file": [rec["source_file"], a["source_file"], b["source_file"], b["source_file"], c["source_file"]],
                           "host": ["h2.example", "h2", "h1", "h2", None]})
    records.join(types.SimpleNamespace(events=events), [rec, a, b, c], ("traceback", "exit"))
    assert (a["rank"], a["rank_basis"], a["record"]["host_from"]) == (9, "own_error", "its file")
    assert b["rank"] is None and c["rank"] is None and "record" not in b
