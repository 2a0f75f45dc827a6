"""Every template of the inventory (forensics/ingest/templates.py), with every sample written for
it, bare and behind every collector the entry lists, through the console reader; the README
table generated from the inventory; binary garbage rejected, counts adding up."""
from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path

import polars as pl
import pytest

from forensics.ingest.binary import BINARY
from forensics.ingest.console import read_console
from forensics.ingest.formats import ReaderContext, sniff
from forensics.ingest.templates import COLLECTORS, TEMPLATES, inventory_markdown

README = Path(__file__).resolve().parents[1] / "docs" / "ingest.md"
TIMESTAMPED = {"iso", "pylog", "cri", "docker", "journal_iso", "journal_iso_precise"}


def _read(text: str, **ctx_kw) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    data = text.encode()
    kw = {"rank_hint": None, "host_hint": None, **ctx_kw}
    ctx = ReaderContext(path="/logs/console.log", **kw)
    blocks = list(read_console(ctx.path, io.BytesIO(data), ctx))
    ev = pl.concat([b.events for b in blocks], how="diagonal_relaxed")
    rej = pl.concat([b.rejects for b in blocks])
    n = sum(b.lines for b in blocks)
    assert n == ev.height + rej.height == data.count(b"\n")
    return ev, rej, n


def _cases():
    for t in TEMPLATES:
        for i, s in enumerate(t.samples):
            for c in t.collectors:
                yield pytest.param(t, s, c, id=f"{t.id}-{i}-{c}")


@pytest.mark.parametrize(("template", "sample", "collector"), list(_cases()))
def test_template_sample_through_the_reader(template, sample, collector) -> None:
    wrap = COLLECTORS[collector][1]
    text = "".join(wrap(ln) + "\n" for ln in sample.lines)
    ev, rej, _ = _read(text, **sample.context)
    assert rej.height == 0, rej
    at = sample.at if sample.at >= 0 else len(sample.lines) + sample.at
    rows = ev.filter(pl.col("line") == at + 1)
    assert rows.height == 1
    row = rows.row(0, named=True)
    extra = json.loads(row["extra"]) if row["extra"] else {}
    for key, want in sample.expect.items():
        got = extra.get(key[2:]) if key.startswith("x.") else row.get(key)
        if key == "event" and want == "any":
            continue
        if isinstance(want, float):
            assert got == pytest.approx(want), (key, got, row)
        else:
            assert got == want, (key, got, want, row["message"], extra)
    if collector in TIMESTAMPED:
        assert row["timestamp"] is not None and row["timestamp"].year == 2024
    if collector in ("cri", "docker"):
        assert extra.get("stream") == "stderr"


def test_inventory_is_complete_and_sourced() -> None:
    ids = [t.id for t in TEMPLATES]
    assert len(ids) == len(set(ids))
    for t in TEMPLATES:
        assert t.samples and t.source and t.form and t.yields, t.id
        assert set(t.collectors) <= set(COLLECTORS) and "plain" in t.collectors


def test_readme_table_is_generated_from_the_inventory() -> None:
    text = README.read_text()
    block = text.split("<!-- templates:start -->", 1)[1].split("<!-- templates:end -->", 1)[0].strip()
    assert block == inventory_markdown(), (
        "regenerate with: python -c 'from forensics.ingest.templates import inventory_markdown; print(inventory_markdown())'")


# --- rank identity: what the old reader missed -------------------------------------------------

def test_rank_prefix_behind_a_shippers_timestamp() -> None:
    ev, _, _ = _read("2024-11-20 14:37:16 [rank3]: RuntimeError: boom\n")
    row = ev.row(0, named=True)
    assert (row["rank"], row["rank_source"], row["message"]) == (3, "prefix", "RuntimeError: boom")
    # a timestamped line without a routing prefix keeps its text (and its time)
    ev, _, _ = _read("2024-11-20 14:37:16 plain words\n")
    assert ev["message"][0] == "2024-11-20 14:37:16 plain words" and ev["rank"][0] is None


def test_local_rank_without_topology_stays_local_on_a_multi_node_console() -> None:
    # the launch configs say 2 nodes and nothing maps local rank 3: rank unknown, local rank + host kept
    text = ("INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:\n"
            "  max_nodes        : 2\n  nproc_per_node   : 4\n"
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3 (pid: 9) of binary: x\n")
    ev, _, _ = _read(text, host_hint="node-b")
    row = ev.filter(pl.col("event") == "CHILD_FAILED").row(0, named=True)
    assert (row["rank"], row["local_rank"], row["host"], row["rank_source"]) == (None, 3, "node-b", "none")


def test_two_agents_merged_without_host_names_map_nobody() -> None:
    block = ("[default] Rendezvous complete for workers. Result:\n  restart_count=0\n  group_rank={g}\n"
             "  group_world_size=2\n  local_ranks=[0, 1]\n  global_ranks={r}\n  global_world_sizes=[4, 4]\n")
    text = block.format(g=0, r="[0, 1]") + block.format(g=1, r="[2, 3]") + "[default1]:step 3\n"
    ev, _, _ = _read(text)
    row = ev.row(ev.height - 1, named=True)
    assert (row["rank"], row["local_rank"]) == (None, 1)


def test_docker_json_file_is_sniffed_as_console_and_unwrapped() -> None:
    lines = [COLLECTORS["docker"][1]("[rank2]:[E1120 14:37:16.1 ProcessGroupNCCL.cpp:1] [Rank 2] Watchdog caught "
                                     "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
                                     "NumelOut=1, Timeout(ms)=1000) ran for 1001 milliseconds before timing out."),
             COLLECTORS["docker"][1]("")]
    data = ("\n".join(lines) + "\n")
    assert sniff(data.encode(), "/x/container-json.log") == "console"
    ev, rej, _ = _read(data)
    assert ev["event"].to_list() == ["NCCL_TIMEOUT"] and ev["rank"].to_list() == [2]
    assert rej["reason"].to_list() == ["blank line"] and rej["raw"][0].startswith(b'{"log":')


def test_cri_partial_line_is_marked() -> None:
    ev, _, _ = _read("2024-11-20T14:37:16.5Z stdout P [rank1]:a very long line cut by the kubelet\n")
    assert ev["rank"][0] == 1 and json.loads(ev["extra"][0])["partial"] is True


# --- binary garbage ---------------------------------------------------------------------------

# seeds 13, 313 and 372 start with "{": the file is read as JSON lines (formats.sniff), whose
# JSON-shaped garbage used to be rejected as "truncated JSON object" / "invalid JSON"
@pytest.mark.parametrize("seed", [None, 1, 2, 3, 4, 5, 13, 313, 372])
def test_random_bytes_named_jsonl_are_rejected_not_events(tmp_path: Path, seed) -> None:
    """200 KB of random bytes named rank_0.jsonl: every line a reject ("binary data"), none an
    event, lines read = events + rejects, raw bytes kept. Random bytes hold a few short runs of
    printable text (measured: 10 such lines in 100 files of 200 KB); those may stay text (an
    event in a console file, "not JSON: text line" in a JSON-lines one), never more than a handful."""
    from forensics.ingest import ingest
    from forensics.ingest.binary import is_binary_text
    from forensics.store import open_store

    data = os.urandom(200_000) if seed is None else random.Random(seed).randbytes(200_000)
    d = tmp_path / "logs"
    d.mkdir()
    (d / "rank_0.jsonl").write_bytes(data)
    s = ingest([str(d)], tmp_path / "store")
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert s.lines_read == lines == s.events + s.rejected
    st = open_store(tmp_path / "store")
    rej = st.rejects().collect()
    text = rej.filter(pl.col("reason") == "not JSON: text line")
    assert s.events + text.height <= lines // 100, (st.events().select("message").collect()["message"].to_list(),
                                                     text["raw"].to_list())
    assert not any(is_binary_text(r.decode("utf-8", errors="replace")) for r in text["raw"].to_list())
    assert set(s.rejected_by_reason) <= {BINARY, "blank line", "not JSON: text line"}, s.rejected_by_reason
    assert rej.height == s.rejected and rej["raw_len"].sum() + s.events <= len(data) + lines


def test_garbage_inside_a_text_log_is_rejected_and_text_around_it_kept() -> None:
    blob = random.Random(7).randbytes(3000).replace(b"\n", b"\x00")
    text = b"[rank0]:step 1\n" + blob + b"\n" + b"[rank0]:step 2\n"
    ctx = ReaderContext(path="/logs/c.log", rank_hint=None, host_hint=None)
    blocks = list(read_console(ctx.path, io.BytesIO(text), ctx))
    ev = pl.concat([b.events for b in blocks])
    rej = pl.concat([b.rejects for b in blocks])
    assert ev["message"].to_list() == ["step 1", "step 2"]
    assert rej["reason"].to_list() == [BINARY] and rej["raw"][0] == blob + b"\n"


def test_json_lines_path_uses_the_same_binary_rule() -> None:
    """A garbage line in a JSON-lines file that has a control byte and invalid UTF-8 but no NUL
    (the old JSON rule counted only control bytes: 'not JSON: text line')."""
    from forensics.ingest.jsonl import parse_block_py

    garbage = b"\xe2\xa5^NPG\xc8N\xdf\xb9\x9aWUGk\xabf\xe5a\x05M#;8\xd1\x95\xfb?"
    buf = b'{"timestamp": "2024-11-20T14:37:16Z", "rank": 0, "event": "X"}\n' + garbage + b"\n"
    b = parse_block_py(buf, 1, True, None, None)
    assert b.events.height == 1 and b.rejects["reason"].to_list() == [BINARY]
    assert b.rejects["raw"][0] == garbage + b"\n"


def test_numbered_output_is_not_an_srun_label() -> None:
    # a program numbering its own lines: labels of varying width, never repeated
    text = "".join(f"{i}: loss {3.0 - i / 100:.2f}\n" for i in range(5, 15))
    ev, _, _ = _read(text)
    assert ev["rank"].to_list() == [None] * 10


@pytest.mark.parametrize("line", [
    "[2024-11-20 14:37:16] [rank4]: boom",
    "2024-11-20T14:37:16.250Z [rank4]: boom",
    "2024-11-20 14:37:16,123 - trainer - ERROR - [rank4]: boom",
    "2024-11-20 14:37:16 | [rank4]: boom",
    "Nov 20 14:37:16 gpu-node7 python3[311]: [rank4]: boom",
])
def test_collector_forms_in_front_of_a_rank_prefix(line: str) -> None:
    ev, _, _ = _read(line + "\n")
    row = ev.row(0, named=True)
    assert (row["rank"], row["rank_source"], row["message"]) == (4, "prefix", "boom")


def test_text_in_a_legacy_encoding_is_not_garbage() -> None:
    for text in ("Grüße aus München, Straße 5", "température: 45°C", "naïve café déjà vu"):
        ev, rej, _ = _read_bytes(text.encode("latin-1") + b"\n")
        assert (ev.height, rej.height) == (1, 0), text


def _read_bytes(data: bytes) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    ctx = ReaderContext(path="/logs/c.log", rank_hint=None, host_hint=None)
    blocks = list(read_console(ctx.path, io.BytesIO(data), ctx))
    return (pl.concat([b.events for b in blocks], how="diagonal_relaxed"), pl.concat([b.rejects for b in blocks]),
            sum(b.lines for b in blocks))


# --- multi-line launcher blocks behind collectors, with other writers' lines interleaved ------

_RDZV = ["INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
         "  restart_count=0", "  master_addr=gpu-node1", "  master_port=29500", "  group_rank={g}",
         "  group_world_size=2", "  local_ranks=[0, 1]", "  role_ranks={r}", "  global_ranks={r}",
         "  role_world_sizes=[4, 4]", "  global_world_sizes=[4, 4]"]


def _interleave(a: list[str], b: list[str]) -> list[str]:
    out: list[str] = []
    for i in range(max(len(a), len(b))):
        out += a[i:i + 1] + b[i:i + 1]
    return out


@pytest.mark.parametrize("header", ["2024-11-20T14:37:16+0000 {host} torchrun[4242]: ",
                                    "2024-11-20T14:37:16.123456+00:00 {host} torchrun[4242]: ",
                                    "Nov 20 14:37:16.123456 {host} torchrun[4242]: ",
                                    "Nov 20 14:37:16 {host} torchrun[4242]: "])
def test_rendezvous_blocks_of_two_nodes_interleaved_with_worker_lines(header) -> None:
    """Two nodes' agents print their rendezvous result at once (journald / syslog names the node
    on each line), and their workers' --tee lines land between the fields: each node's local
    ranks map through its own block, and no worker line ends a block."""
    def on(host: str, line: str) -> str:
        return header.format(host=host) + line

    a = [on("node-a", ln.format(g=0, r="[0, 1]")) for ln in _RDZV]
    b = [on("node-b", ln.format(g=1, r="[2, 3]")) for ln in _RDZV]
    mixed = _interleave(a, b)
    # workers already talking while the agents print (their own prefixes: never block lines)
    mixed.insert(5, on("node-b", "[default1]:loading shard 3"))
    mixed.insert(19, on("node-a", "[default0]:loading shard 0"))
    mixed += [on("node-b", "[default1]:step 9 loss 1.7"), on("node-a", "[default1]:step 9 loss 1.8")]
    ev, rej, _ = _read("".join(ln + "\n" for ln in mixed))
    assert rej.height == 0
    last = ev.tail(2).select("host", "local_rank", "rank", "rank_source").rows()
    assert last == [("node-b", 1, 3, "mapped"), ("node-a", 1, 1, "mapped")]
    mid = ev.filter(pl.col("message") == "loading shard 0").row(0, named=True)
    assert (mid["host"], mid["local_rank"], mid["rank"]) == ("node-a", 0, 0)   # node-a's global_ranks already read
    topo = [json.loads(x)["topology"]["global_ranks"] for x in ev["extra"].drop_nulls() if "topology" in x]
    assert sorted(topo) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("collector", ["iso", "pylog", "cri", "docker", "journal_iso", "journal_precise"])
def test_rendezvous_block_behind_a_collector_with_worker_lines_between_its_fields(collector) -> None:
    wrap = COLLECTORS[collector][1]
    lines = [wrap(ln.format(g=1, r="[2, 3]")) for ln in _RDZV]
    lines.insert(3, wrap("[default0]:warming up"))
    lines.insert(8, wrap("[rank3]:[I1120 14:37:16.0 ProcessGroupNCCL.cpp:1] init"))
    lines.append(wrap("[default1]:step 9 loss 1.7"))
    ev, rej, _ = _read("".join(ln + "\n" for ln in lines))
    assert rej.height == 0
    row = ev.row(ev.height - 1, named=True)
    assert (row["local_rank"], row["rank"], row["rank_source"]) == (1, 3, "mapped")
    x = [json.loads(e) for e in ev["extra"].drop_nulls() if "topology" in e]
    assert len(x) == 1 and x[0]["topology"]["local_ranks"] == [0, 1] and x[0]["topology"]["group_world_size"] == 2


@pytest.mark.parametrize("collector", ["iso", "pylog", "journal_iso", "journal_iso_precise", "journal_precise", "syslog"])
def test_child_failed_table_behind_a_collector_with_ranks_interleaved(collector) -> None:
    """torch elastic's ChildFailedError table (errors/__init__.py: _MSG_FORMAT_TEMPLATE and
    _FAILURE_FORMAT_TEMPLATE) with every line behind a collector's prefix and the still-running
    workers' `[rankN]:` lines between its lines: each record is one CHILD_FAILED with its rank,
    local rank, host and exit code; the root cause record is marked first_observed."""
    wrap = COLLECTORS[collector][1]
    table = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
             "============================================================", "train.py FAILED",
             "------------------------------------------------------------", "Failures:", "[1]:",
             "  time      : 2024-11-20_14:37:18", "  host      : gpu-node4", "  rank      : 14 (local_rank: 6)",
             "  exitcode  : 1 (pid: 2212)", "  error_file: <N/A>",
             "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
             "------------------------------------------------------------", "Root Cause (first observed failure):",
             "[0]:", "  time      : 2024-11-20_14:37:16", "  host      : gpu-node4", "  rank      : 13 (local_rank: 5)",
             "  exitcode  : -6 (pid: 2211)", "  error_file: <N/A>", "  traceback : Signal 6 (SIGABRT) received by PID 2211",
             "============================================================"]
    lines = []
    for i, ln in enumerate(table):
        lines.append(wrap(ln))
        if i in (5, 9, 15):
            lines.append(wrap(f"[rank{i}]:[W1120 14:37:17.0 ProcessGroupNCCL.cpp:1] still waiting"))
    ev, rej, _ = _read("".join(ln + "\n" for ln in lines))
    assert rej.height == 0
    cf = ev.filter(pl.col("event") == "CHILD_FAILED")
    got = [(r["rank"], r["local_rank"], r["host"], r["exit_code"], json.loads(r["extra"])["first_observed"])
           for r in cf.iter_rows(named=True)]
    assert got == [(14, 6, "gpu-node4", 1, False), (13, 5, "gpu-node4", -6, True)]
    # the interleaved worker lines keep their own rank and are not records
    assert sorted(ev.filter(pl.col("message").str.contains("still waiting"))["rank"].to_list()) == [5, 9, 15]


def test_two_nodes_tee_and_rank_prefixes_merged_without_host_names_map_nobody() -> None:
    # local rank 1 is rank 1 on one node and rank 5 on the other: nothing says which line is whose
    text = "[default1]:[rank1]: warming up\n[default1]:[rank5]: warming up\n[default1]:step 3 loss 1.0\n"
    ev, _, _ = _read(text)
    row = ev.row(2, named=True)
    assert (row["rank"], row["local_rank"], row["rank_source"]) == (None, 1, "none")
