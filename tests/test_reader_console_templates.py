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

README = Path(__file__).resolve().parents[1] / "README.md"
TIMESTAMPED = {"iso", "pylog", "cri", "docker"}


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

@pytest.mark.parametrize("seed", [None, 1, 2, 3, 4, 5])
def test_random_bytes_named_jsonl_are_rejected_not_events(tmp_path: Path, seed) -> None:
    """200 KB of random bytes named rank_0.jsonl: every line a reject ("binary data"), none an
    event, lines read = events + rejects, raw bytes kept."""
    from forensics.ingest import ingest
    from forensics.store import open_store

    data = os.urandom(200_000) if seed is None else random.Random(seed).randbytes(200_000)
    d = tmp_path / "logs"
    d.mkdir()
    (d / "rank_0.jsonl").write_bytes(data)
    s = ingest([str(d)], tmp_path / "store")
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert s.lines_read == lines == s.events + s.rejected
    st = open_store(tmp_path / "store")
    if seed is None:
        # os.urandom: a few bytes of printable text between garbage can read as text (measured:
        # 10 such lines in 100 files of 200 KB); never more than a handful
        assert s.events <= lines // 100, st.events().select("message").collect()["message"].to_list()
    else:
        assert s.events == 0, s.to_dict()
    assert set(s.rejected_by_reason) <= {BINARY, "blank line"}
    rej = st.rejects().collect()
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
