"""The outlier pass: when every rank's transfer time rises together, the host whose own readings
(any event, any field name) changed while its peers' did not names the finding."""
from __future__ import annotations

import json
import random

from forensics.passes import diagnose_context, outlier
from pass_helpers import Rows, sync_run


def _run(bad_from: int | None = 15, static: bool = False, rise: bool = True, hosts: int = 2, seed: int = 0) -> Rows:
    host = (lambda r: f"node{r // 2}") if hosts == 2 else (lambda r: f"node{r}")
    rows = Rows(host=host)
    ranks = 4
    sync_run(rows, ranks=ranks, steps=40, seed=seed,
             transfer=lambda s: 600.0 if rise and s >= 15 else 150.0)
    rng = random.Random(seed)
    bad_host = "node1"
    for s in range(0, 40, 2):
        for r in range(ranks):
            bad = host(r) == bad_host and (static or (bad_from is not None and s >= bad_from))
            counters = {"retrans_segs": rng.randint(200, 400) if bad else rng.randint(0, 3),
                        "tx_mb": 9.9 + rng.uniform(-0.1, 0.1)}
            rows.add(s * 1.0 + 0.5, r, "netdev.snapshot", step=s, extra=json.dumps(counters))
    return rows


def test_the_host_whose_counters_changed_names_a_slowdown_every_rank_shares() -> None:
    [f] = outlier.find(_run().ctx())
    assert f.kind == "comm_bound" and f.basis == "outlier"
    assert f.ranks == [2, 3] and f.victims == [0, 1]
    ev = f.evidence
    assert ev["field"] == "netdev.snapshot.retrans_segs" and ev["grouped_by"] == "host" and ev["outliers"] == ["node1"]
    assert ev["value"] >= 200 and ev["peer_value"] <= 3 and ev["value_before"] <= 3
    assert f.lines and all(x.rank in (2, 3) for x in f.lines[:3])
    assert "node1" in f.title and "retrans_segs" in f.title


def test_it_is_the_root_cause_and_explains_the_job_wide_finding() -> None:
    rep = diagnose_context(_run().ctx())
    assert rep.root_cause.kind == "comm_bound" and rep.root_cause.ranks == [2, 3]
    assert rep.root_cause.basis == "outlier"
    job_wide = [i for i, f in enumerate(rep.findings) if f.rule == "pass.comm_bound"]
    assert job_wide and set(job_wide) <= set(rep.findings[0].explains)


def test_a_difference_that_was_there_before_the_slowdown_is_not_its_cause() -> None:
    assert outlier.find(_run(static=True).ctx()) == []


def test_counters_that_change_on_every_host_name_nobody() -> None:
    rows = Rows(host=lambda r: f"node{r // 2}")
    sync_run(rows, steps=40, transfer=lambda s: 600.0 if s >= 15 else 150.0)
    for s in range(0, 40, 2):
        for r in range(4):
            rows.add(s + 0.5, r, "netdev.snapshot", step=s, extra=json.dumps({"retrans_segs": 300 if s >= 15 else 1}))
    assert outlier.find(rows.ctx()) == []


def test_without_a_shared_slowdown_nothing_is_compared() -> None:
    assert outlier.find(_run(rise=False).ctx()) == []


def test_a_healthy_run_with_noisy_readings_names_nobody() -> None:
    for seed in range(5):
        assert outlier.find(_run(bad_from=None, seed=seed).ctx()) == [], seed


def test_one_rank_of_many_stands_apart_without_hosts() -> None:
    rows = Rows()
    sync_run(rows, ranks=6, steps=40, transfer=lambda s: 600.0 if s >= 15 else 150.0)
    rng = random.Random(1)
    for s in range(0, 40, 2):
        for r in range(6):
            v = rng.randint(40, 60) if (r == 4 and s >= 15) else rng.randint(0, 2)
            rows.add(s + 0.5, r, "link", step=s, extra=json.dumps({"stats": {"symbol_errors": v}}))
    [f] = outlier.find(rows.ctx())
    assert f.ranks == [4] and f.evidence["field"] == "link.stats.symbol_errors" and f.evidence["grouped_by"] == "rank"


def _said(lines: list[tuple[int, int, str, str]]) -> Rows:
    """A shared transfer slowdown from step 15, no counters; `lines`: (step, rank, level, message)."""
    rows = Rows(host=lambda r: f"node{r // 2}")
    sync_run(rows, ranks=4, steps=40, transfer=lambda s: 600.0 if s >= 15 else 150.0)
    for s, r, level, msg in lines:
        rows.add(s + 0.5, r, "log", level=level, step=s, message=msg)
    return rows


def test_what_only_one_host_says_during_the_slowdown_names_it() -> None:
    said = [(s, r, "WARN", f"NET/IB : Got completion from peer 10.0.0.{r}:29500 with error 12, opcode {s}, len 0")
            for s in range(16, 40, 3) for r in (2, 3)]
    [f] = outlier.find(_said(said).ctx())
    assert f.ranks == [2, 3] and f.basis == "outlier" and f.evidence["field"] == "message template"
    assert f.evidence["template"].startswith("NET/IB : Got completion from peer <IP> with error <N>")
    assert f.evidence["value"] == len(said) and f.lines and "alone logged" in f.title


def test_a_message_said_before_the_slowdown_or_by_everyone_names_nobody() -> None:
    before = [(s, r, "WARN", f"retry {s} of 5") for s in (5, 20, 30) for r in (2, 3)]
    everyone = [(s, r, "WARN", f"slow transfer {s} ms") for s in (20, 25, 30) for r in range(4)]
    once = [(25, 0, "INFO", "saved checkpoint step=25 to ckpt/step_000025.pt")]
    assert outlier.find(_said(before + everyone + once).ctx()) == []


def test_templates_mask_what_varies_between_ranks() -> None:
    import polars as pl

    from forensics.message_templates import template

    msgs = ["[Rank 3] retry 2 of 5 to 10.0.0.7:29500 at 2024-11-20T14:37:16.123Z",
            "[Rank 1] retry 4 of 5 to 10.0.0.9:29500 at 2024-11-20T14:38:01Z",
            "saved /data/ckpt/step_000025.pt in 1.25s (0x7f3a)"]
    t = pl.DataFrame({"message": msgs}).select(template()).to_series().to_list()
    assert t[0] == t[1] == "[Rank <N>] retry <N> of <N> to <IP> at <T>"
    assert t[2] == "saved <PATH> in <N>s (<HEX>)"


def test_a_hosts_own_lines_without_a_rank_count_for_the_host() -> None:
    # the counters come from a per-host exporter file: a host on every line, no rank
    rows = Rows(host=lambda r: f"node{r // 2}")
    sync_run(rows, ranks=4, steps=40, transfer=lambda s: 600.0 if s >= 15 else 150.0)
    rng = random.Random(3)
    for s in range(0, 40, 2):
        for h in ("node0", "node1"):
            bad = h == "node1" and s >= 15
            row = rows.add(s + 0.5, None, "node_exporter", file=f"{h}.exporter.jsonl",
                           extra=json.dumps({"node_netstat_Tcp_RetransSegs": rng.randint(300, 500) if bad else rng.randint(0, 4)}))
            row["host"] = h
    [f] = outlier.find(rows.ctx())
    assert f.ranks == [2, 3] and f.evidence["outliers"] == ["node1"]
    assert f.evidence["field"] == "node_exporter.node_netstat_Tcp_RetransSegs"


def test_a_real_shared_slowdown_with_healthy_counters_names_no_host() -> None:
    # real gloo run, no fault: transfers slowed for every rank (load on the machine) and one
    # host's retransmit median went 2 -> 1 among values 0-3 it logged before: noise, not a state
    from pathlib import Path

    from forensics.passes.context import Context
    from forensics.run import open_run

    run = Path(__file__).parent / "fixtures" / "realrun_localise" / "healthy_chunked"
    ctx = Context.from_run(open_run(str(run)))
    assert outlier.shared_episode(ctx.steps) is not None
    assert outlier.find(ctx) == []


def test_without_host_names_a_minority_of_ranks_saying_it_is_named() -> None:
    # the same ranks 2,3, in logs that name no host (a schema that lost it): 2 of 4 ranks say it
    rows = Rows()
    sync_run(rows, ranks=4, steps=40, transfer=lambda s: 600.0 if s >= 15 else 150.0)
    for s in range(16, 40, 3):
        for r in (2, 3):
            rows.add(s + 0.5, r, "log", level="WARN", step=s, message=f"link flap on port {s % 4}, {s} retries")
    [f] = outlier.find(rows.ctx())
    assert f.ranks == [2, 3] and f.evidence["grouped_by"] == "rank" and f.evidence["outliers"] == ["2", "3"]
    rows = Rows()
    sync_run(rows, ranks=4, steps=40, transfer=lambda s: 600.0 if s >= 15 else 150.0)
    for s in range(16, 40, 3):
        for r in (1, 2, 3):      # three of four: not a minority
            rows.add(s + 0.5, r, "log", level="WARN", step=s, message=f"link flap on port {s % 4}, {s} retries")
    assert outlier.find(rows.ctx()) == []
