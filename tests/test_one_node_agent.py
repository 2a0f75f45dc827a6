"""One torch elastic agent, no host anywhere: the pids it names show its workers. On a worker's
failure the agent (torch/distributed/elastic/multiprocessing/api.py) logs
`failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s` and `Sending process %s closing
signal %s` for each worker it tears down (first the closing signals, then the failure). When those
pids cover local ranks 0..N-1 (N distinct pids, the failed worker's among them and not among those
closed, its local rank below N; their order says nothing: pids need not rise with the local rank)
and nothing shows a second node, local rank N is global rank N (basis one_node). A lone failed worker
with a high local rank shows no node; a second node's sign keeps the local rank.

Every line here is ours, in those formats.
"""
from __future__ import annotations

import json

import pytest

from forensics.failure_facts import agent_workers


def _diagnose(tmp_path, text: str) -> dict:
    from typer.testing import CliRunner

    from forensics.cli import app

    (tmp_path / "train.log").write_text(text)
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path), "--format", "json"])
    return json.loads(res.stdout)


def _agent(local: int, code: int, workers: int, *, glog: bool, base: int = 7300, head: str = "") -> str:
    pids = [base + i for i in range(workers)]
    lines = [head] if head else []
    lines.append("step 120 | loss 2.315 | lr 3.0e-04")
    for i, p in enumerate(pids):
        if i == local:
            continue
        lines.append(f"W0412 09:15:0{i}.120000 7211 torch/distributed/elastic/multiprocessing/api.py:897] "
                     f"Sending process {p} closing signal SIGTERM" if glog else
                     f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {p} closing signal SIGTERM")
    failed = f"failed (exitcode: {code}) local_rank: {local} (pid: {pids[local]}) of binary: /usr/bin/python3"
    lines.append(f"E0412 09:15:09.500000 7211 torch/distributed/elastic/multiprocessing/api.py:869] {failed}" if glog
                 else f"ERROR:torch.distributed.elastic.multiprocessing.api:{failed}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("local,code,workers,kind,glog", [
    (3, -9, 4, "host_oom", False), (5, -11, 8, "crash", True), (0, 1, 2, "crash", True), (1, -9, 2, "host_oom", False),
])
def test_the_agents_worker_pids_show_one_node(tmp_path, local, code, workers, kind, glog):
    rc = _diagnose(tmp_path, _agent(local, code, workers, glog=glog))["root_cause"]
    assert (rc["kind"], rc["ranks"], rc["basis"]) == (kind, [local], "one_node")


def test_a_lone_failed_worker_with_a_high_local_rank_shows_no_node(tmp_path):
    rc = _diagnose(tmp_path, _agent(5, -9, 6, glog=True).replace("closing signal", "closing nothing"))["root_cause"]
    assert rc["kind"] == "host_oom" and rc["ranks"] == [] and rc["local_ranks"][0]["local_rank"] == 5


@pytest.mark.parametrize("head", ["world_size=16 rank=0", "torchrun --nnodes=2 --node_rank=1 --nproc_per_node=4 train.py",
                                  "[rank9]: step 120 | loss 2.3"])
def test_a_sign_of_a_second_node_keeps_the_local_rank(tmp_path, head):
    rc = _diagnose(tmp_path, _agent(2, -9, 4, glog=True, head=head))["root_cause"]
    assert rc["ranks"] == [] and rc.get("basis") != "one_node"


def _lines(failed: list[tuple[int, int]], closing: list[int], file: str = "a.log") -> list[tuple[str, int | None, int]]:
    # one round as the agent writes it (multiprocessing/api.py _poll): close the others, log the failure
    return [(file, None, p) for p in closing] + [(file, lr, p) for lr, p in failed]


@pytest.mark.parametrize("failed,closing,n", [
    ([(3, 812917)], [812914, 812915, 812916], 4),
    ([(1, 1168)], [1167, 1169, 1170], 4),
    ([(1, 900)], [901, 902], 3),                 # pids need not rise with the local rank
    ([(0, 7305)], [7302, 7301, 7304], 4),
    ([(0, 500)], [], None),                      # one pid: no node shown
    ([(5, 900)], [901, 902], None),              # local rank beyond the pids
    ([(2, 900)], [900, 901], None),              # the failed worker's pid among those closed
])
def test_agent_workers(failed, closing, n):
    assert agent_workers(_lines(failed, closing)) == n


def test_agent_workers_over_restarts():
    a = _lines([(1, 900)], [899, 901, 902])
    b = _lines([(2, 950)], [951, 949, 952])
    assert agent_workers(a + b) is None                         # two rounds, no restart said: two agents?
    assert agent_workers(a + b, restarted=True) == 4            # the same four workers, restarted
    assert agent_workers(a + _lines([(2, 950)], [951]), restarted=True) is None    # another count
    assert agent_workers(a + _lines([(1, 950)], [899, 951, 952]), restarted=True) is None   # a pid twice
    assert agent_workers(a + _lines([(2, 950)], [951, 949, 952], file="b.log"), restarted=True) is None
    # closing signals after a whole round: workers no failure of this agent covers (a second agent's)
    assert agent_workers(a + [("a.log", None, p) for p in (960, 961, 962, 963)]) is None
    # every closing line after the failure (a reordered paste): still one round
    assert agent_workers([("a.log", 1, 900)] + [("a.log", None, p) for p in (899, 901, 902)]) == 4


def test_out_of_order_pids_show_one_node(tmp_path):
    # the failed local rank 1 has the highest pid of the four (the agent's workers start in
    # local-rank order, their pids need not rise with it)
    text = _agent(1, -9, 4, glog=True)
    text = text.replace("(pid: 7301)", "(pid: 7399)")
    rc = _diagnose(tmp_path, text)["root_cause"]
    assert (rc["kind"], rc["ranks"], rc["basis"]) == ("host_oom", [1], "one_node")
