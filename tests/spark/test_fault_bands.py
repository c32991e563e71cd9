"""faults.jsonl in the report: faults paired into bands, listed next to the findings, drawn on timelines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kit.fault_journal import append_fault
from kit.run_clock import run_origin
from spark_jobs.fault_log import fault_bands, read_fault_log
from spark_jobs.report_job import EXIT_OK, run_report
from tests.spark.cluster_fixtures import TOPIC, read_events, time_range, write_controller_journal


def rec(ts: int, action: str, *nodes: str, **params: Any) -> dict[str, Any]:
    return {"ts_ms": ts, "action": action, "nodes": list(nodes), "params": params}


def test_bands_pair_faults_with_what_ended_them() -> None:
    bands = fault_bands(
        [
            rec(100, "partition", "1", "2", one_way=False),
            rec(150, "delay", "2", "3", ms=100, jitter_ms=10),
            rec(200, "isolate", "3"),
            rec(250, "heal", "3", "controller"),  # a pair of an isolation: it stays in force
            rec(300, "heal", "2", "1"),
            rec(400, "kill", "2", signal="KILL"),
            rec(450, "pause", "1"),
            rec(500, "restart", "2"),
            rec(550, "resume", "1"),
            rec(600, "heal"),
            rec(700, "loss", "1", "controller", percent=5),
        ]
    )
    by = {(b.action, tuple(b.nodes), b.start_ms): b for b in bands}
    assert (by[("partition", ("1", "2"), 100)].end_ms, by[("partition", ("1", "2"), 100)].ended_by) == (
        300,
        "heal",
    )
    # The delay 2 <-> 3 ends when broker 2 restarts (a restarted node starts healed).
    assert (by[("delay", ("2", "3"), 150)].end_ms, by[("delay", ("2", "3"), 150)].ended_by) == (
        500,
        "restart",
    )
    assert by[("isolate", ("3",), 200)].end_ms == 600
    assert by[("kill", ("2",), 400)].end_ms == 500
    assert by[("pause", ("1",), 450)].end_ms == 550
    assert by[("loss", ("1", "controller"), 700)].end_ms is None  # still in force at the end
    assert by[("heal", (), 600)].instant
    assert by[("partition", ("1", "2"), 100)].label == "partition 1 <-> 2"
    assert by[("delay", ("2", "3"), 150)].label == "delay 2 <-> 3 100±10 ms"


def test_the_same_fault_set_again_ends_the_first() -> None:
    a, b = fault_bands([rec(1, "delay", "1", "2", ms=10), rec(5, "delay", "2", "1", ms=50)])
    assert (a.end_ms, a.ended_by, b.end_ms) == (5, "another delay", None)


def test_reader_skips_torn_and_foreign_lines(tmp_path: Path) -> None:
    append_fault(tmp_path, "partition", ["1", "2"], {"one_way": True}, ts_ms=10)
    with (tmp_path / "faults.jsonl").open("a") as f:
        f.write('{"nope": 1}\n{"ts_ms": 5, "action": "kill", "nodes": [3]}\n{"ts_ms": 7, "act')
    records = read_fault_log(tmp_path)
    assert [(r["ts_ms"], r["action"], r["nodes"]) for r in records] == [
        (5, "kill", ["3"]),
        (10, "partition", ["1", "2"]),
    ]


@pytest.mark.spark
def test_report_lists_faults_draws_them_and_times_convergence(
    spark: Any, cluster_copy: Path, tmp_path: Path
) -> None:
    """A partition 1 <-> 2 from faults.jsonl during which the controller shrinks partition 3's ISR, healed,
    then the ISR expands again; later broker 3 is killed and never restarted. Broker 1's SIGKILL and
    restart of the fixture are in its journal only."""
    start, _ = time_range(cluster_copy)
    # The fixture's broker 1 is killed mid-run: its last line before the restart starts a journal window.
    # The second life begins with its log recovery's became_leader lines, just before its broker_started.
    b1 = read_events(cluster_copy / "broker-1" / "data" / "events.jsonl")
    restart = [e["ts_ms"] for e in b1 if e["event"] == "broker_started"][1]
    first_started = next(i for i, e in enumerate(b1) if e["event"] == "broker_started")
    second_life = next(i for i in range(first_started, len(b1)) if b1[i]["event"] == "became_leader")
    down = max(e["ts_ms"] for e in b1[:second_life])
    # Its log recovery journals those became_leader lines (ISR [1]: it ran alone) just before broker_started,
    # sometimes across a millisecond boundary; the crash window starts at the line before broker_started,
    # so an earlier recovery line would count as a short ISR inside the partition's convergence time. As a
    # broker of a real three-broker cluster journals no ISR before it starts, the recovery lines are put at
    # one instant here.
    second_start = next(i for i in range(second_life, len(b1)) if b1[i]["event"] == "broker_started")
    for e in b1[second_life:second_start]:
        e["ts_ms"] = b1[second_start - 1]["ts_ms"]
    with (cluster_copy / "broker-1" / "data" / "events.jsonl").open("w") as f:
        f.writelines(json.dumps(e) + "\n" for e in b1)
    # The single broker journaled ISR [1]; the controller makes it [1, 2, 3] once the copies exist.
    settled = max(e["ts_ms"] for e in b1[:second_life] if e["event"] == "became_leader") + 1
    cut, shrink = settled + 1, settled + 2  # the partition begins once the elections are done
    mid = shrink + (down - shrink) // 2  # the heal, before the crash
    expand = mid + (down - mid) // 2
    assert start < settled < cut < shrink < mid < expand < down
    full = {"leader_id": 1, "leader_epoch": 0, "isr": [1, 2, 3], "unclean": False}
    write_controller_journal(
        cluster_copy,
        [
            *((settled, "leader_elected", {"topic": TOPIC, "partition": p, **full}) for p in range(8)),
            (shrink, "isr_changed", {"topic": TOPIC, "partition": 3, "leader_id": 1, "leader_epoch": 0,
                                     "isr": [1, 3], "reason": "alter_partition"}),
            (expand, "isr_changed", {"topic": TOPIC, "partition": 3, "leader_id": 1, "leader_epoch": 0,
                                     "isr": [1, 3, 2], "reason": "alter_partition"}),
        ],
    )  # fmt: skip
    append_fault(cluster_copy, "partition", ["1", "2"], {"one_way": False}, ts_ms=cut)
    append_fault(cluster_copy, "heal", ["1", "2"], {}, ts_ms=mid)
    append_fault(cluster_copy, "kill", ["3"], {"signal": "KILL"}, ts_ms=restart + 1)
    console_file = tmp_path / "console.txt"
    with console_file.open("w") as out:
        outcome = run_report(
            spark, cluster_copy, tmp_path / "report", console=Console(file=out, width=80), max_plots=1
        )
    assert outcome.exit_code == EXIT_OK
    data = json.loads((outcome.out_dir / "report.json").read_text())
    faults = data["faults"]
    assert [(f["action"], f["start_ms"], f["end_ms"]) for f in faults] == [
        ("partition", cut, mid),
        ("heal", mid, mid),
        ("kill", restart + 1, None),
    ]
    t0 = data["t0_ms"]
    assert t0 <= start

    # The plots are drawn from these series: the bands are faults.jsonl's, in seconds since t0.
    fd = outcome.figures
    assert fd.t0_ms == t0
    cli = [(w["label"], w["start_s"], w["end_s"]) for w in fd.windows if w["source"] == "faults.jsonl"]
    assert cli == [
        ("partition 1 <-> 2", (cut - t0) / 1000, (mid - t0) / 1000),
        ("kill 3", (restart + 1 - t0) / 1000, None),
    ]
    assert [w["label"] for w in fd.windows if w["source"] == "journal"] == ["crash 1"]
    assert data["fault_windows"] == fd.windows
    # Throughput: every acknowledged record is in exactly one bin.
    acked = [json.loads(line) for f in (cluster_copy / "workload").glob("acked-*.jsonl") for line in f.open()]
    records = sum(a["last_offset"] - a["base_offset"] + 1 for a in acked)
    assert round(sum(fd.rate["records_per_s"]) * fd.rate["bin_s"]) == records
    assert len(fd.rate["t_s"]) == len(fd.rate["latency_p99_ms"])
    assert list(fd.lag) == [f"{TOPIC}-0"]

    # Time to converge after the partition: when partition 3's ISR was full again, from the journal.
    ctrl = [json.loads(line) for line in (cluster_copy / "controller" / "events.jsonl").open()]
    back = next(e["ts_ms"] for e in ctrl if e["event"] == "isr_changed" and len(e["isr"]) == 3)
    assert back == expand
    by_fault = {f["fault"]: f for f in data["time_to_converge"]["per_fault"]}
    assert by_fault["partition 1 <-> 2"]["converged_ms"] == back
    assert by_fault["partition 1 <-> 2"]["time_to_converge_ms"] == back - mid
    assert by_fault["kill 3"]["converged_ms"] is None
    assert data["time_to_converge"]["overall"]["converged_ms"] is None  # broker 3 was never restarted
    # The matrix: the partition shrank and expanded partition 3's ISR, and no other partition's.
    m = data["fault_matrix"]
    row = m["cells"][[f["label"] for f in m["faults"]].index("partition 1 <-> 2")]
    touched = {m["partitions"][i]: c for i, c in enumerate(row) if c["isr_shrinks"] or c["isr_expands"]}
    assert touched == {f"{TOPIC}-3": {"leader_changes": 0, "isr_shrinks": 1, "isr_expands": 1}}

    page = (outcome.out_dir / "report.html").read_text()
    assert page.index("Faults applied") < page.index("<h2 id='convergence'")  # before the details
    assert "partition 1 &lt;-&gt; 2" in page and "still in force" in page
    assert page.count("data:image/png;base64,") == 2  # the overview and one lag plot
    console = console_file.read_text()
    assert "partition 1 <-> 2; ISR full +" in console and "kill 3; ISR not full" in console
    # One clock: the report's t0 is the one chaos, the demo and the scenarios find in the same files.
    origin = run_origin(cluster_copy)
    assert origin is not None and data["t0_ms"] == origin.ts_ms and data["t0_source"] == origin.source
    assert origin.source.startswith("broker 1's journal: "), origin
    said = " ".join(console.split())
    assert " ".join(origin.describe().split()) in said and "times are seconds since t0 = " in said
    assert "times are seconds since t0 = " in page
    # Every line fits 80 columns but the verdict line, never wrapped (SPEC 12: verdict, ratio, longest stall).
    lines = console.splitlines()
    verdict = next(line for line in lines if line.startswith("isrsim report: "))
    assert "; longest stall " in verdict
    assert max(len(line) for line in lines if line != verdict) <= 80
