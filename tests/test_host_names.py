"""A loopback name is no second host (forensics/host_names.py). torch elastic's ChildFailedError
record writes `host : socket.getfqdn()`, "localhost" where /etc/hosts maps the machine's own name
to 127.0.0.1, while NCCL's lines on that machine carry gethostname()'s name: one machine, two
names. The hosts of a log are its named hosts; a loopback name counts only where none is named,
and stands for the one named host where there is one.

Every line here is ours, in the upstream formats (NCCL's `host:pid:tid [dev] NCCL INFO`, the
agent's `failed (exitcode: ..) local_rank: .. (pid: ..)`, the ChildFailedError table).
"""
from __future__ import annotations

import json

import polars as pl
import pytest

from forensics import host_names
from forensics.failure_facts import one_node
from message_catalogue import child_failed


@pytest.mark.parametrize("names,hosts", [
    (["gpu-a7", "localhost"], ["gpu-a7"]),
    (["gpu-a7", "127.0.0.1", "localhost.localdomain"], ["gpu-a7"]),
    (["localhost", "127.0.0.1"], ["127.0.0.1"]),               # only loopback: one machine
    (["gpu-a7", "gpu-b2", "localhost"], ["gpu-a7", "gpu-b2"]),
    (["gpu-a7", None], ["gpu-a7"]),
    ([], []),
])
def test_distinct(names, hosts):
    assert host_names.distinct(names) == hosts


def test_resolve():
    assert host_names.resolve("localhost", ["gpu-a7", "localhost"]) == "gpu-a7"
    assert host_names.resolve("localhost", ["gpu-a7", "gpu-b2", "localhost"]) == "localhost"   # which one: unknown
    assert host_names.resolve("gpu-b2", ["gpu-a7", "gpu-b2"]) == "gpu-b2"


def _log(record_host: str) -> str:
    return "\n".join([
        "gpu-a7:4411:4411 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.7<0>",
        "gpu-a7:4701:4701 [1] NCCL INFO Bootstrap : Using eth0:10.1.2.7<0>",
        "[rank0]: step 10 loss 2.31",
        "[rank1]: step 10 loss 2.30",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/srv/train.py", line 40, in <module>',
        "[rank1]:     main()",
        "[rank1]: ValueError: bad batch shape",
        "E1205 11:24:43.604000 4400 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 1 (pid: 4701) of binary: /usr/bin/python3",
        *child_failed([(1, 1, 1, record_host)]),
    ]) + "\n"


def _diagnose(tmp_path, text: str, fmt: str = "json") -> str:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "train.log").write_text(text)
    return CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", fmt]).stdout


@pytest.mark.parametrize("record_host,hosts", [("localhost", 1), ("127.0.0.1", 1), ("gpu-b2", 2)])
def test_the_records_loopback_name_is_the_machine_nccls_lines_name(tmp_path, record_host, hosts):
    rep = json.loads(_diagnose(tmp_path, _log(record_host)))
    assert rep["run"]["hosts"] == hosts
    assert (rep["root_cause"]["kind"], rep["root_cause"]["ranks"]) == ("crash", [1])
    if hosts == 1:
        assert "rank 1 on gpu-a7" in rep["root_cause"]["next"]


def _events(hosts: list[str | None], local: list[int]) -> pl.LazyFrame:
    return pl.DataFrame({"host": hosts, "local_rank": local, "rank": [None] * len(local),
                         "message": ["NCCL INFO Bootstrap"] * (len(local) - 1) + ["failed (exitcode: -9) local_rank: 3"]},
                        schema={"host": pl.Utf8, "local_rank": pl.Int64, "rank": pl.Int64, "message": pl.Utf8}).lazy()


def test_one_node_is_not_declined_for_a_loopback_name():
    ev = _events(["gpu-a7", "gpu-a7", "gpu-a7", "localhost"], [0, 1, 2, 3])
    node = one_node(ev)
    assert node is not None and node["host"] == "gpu-a7" and node["workers"] == 4
    assert one_node(_events(["gpu-a7", "gpu-a7", "gpu-b2", "localhost"], [0, 1, 2, 3])) is None


def test_ingest_counts_one_machine(tmp_path):
    import re

    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train.log").write_text(_log("localhost"))
    out = CliRunner().invoke(app, ["ingest", str(tmp_path / "logs"), "-o", str(tmp_path / "st")]).stdout
    assert re.search(r"hosts\s+1\s+\(gpu-a7, localhost\)", out)
