"""faults.jsonl in the report: faults paired into bands, listed next to the findings, drawn on timelines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cli.fault_journal import append_fault
from spark_jobs.fault_log import fault_bands, read_fault_log
from spark_jobs.report_job import EXIT_OK, run_report
from tests.spark.cluster_fixtures import time_range


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
def test_report_lists_faults_and_draws_bands(spark: Any, cluster_copy: Path, tmp_path: Path) -> None:
    start, end = time_range(cluster_copy)
    mid = (start + end) // 2
    append_fault(cluster_copy, "partition", ["1", "2"], {"one_way": False}, ts_ms=start + 1)
    append_fault(cluster_copy, "heal", ["1", "2"], {}, ts_ms=mid)
    append_fault(cluster_copy, "kill", ["3"], {"signal": "KILL"}, ts_ms=mid + 1)
    console_file = tmp_path / "console.txt"
    with console_file.open("w") as out:
        outcome = run_report(
            spark, cluster_copy, tmp_path / "report", console=Console(file=out, width=160), max_plots=1
        )
    assert outcome.exit_code == EXIT_OK
    data = json.loads((outcome.out_dir / "report.json").read_text())
    faults = data["faults"]
    assert [(f["action"], f["start_ms"], f["end_ms"]) for f in faults] == [
        ("partition", start + 1, mid),
        ("heal", mid, mid),
        ("kill", mid + 1, None),
    ]
    page = (outcome.out_dir / "report.html").read_text()
    assert page.index("Faults applied") < page.index("<h2")  # next to the findings, before the details
    assert "partition 1 &lt;-&gt; 2" in page and "still in force" in page
    assert page.count("data:image/png;base64,") == 1
    console = console_file.read_text()
    assert "faults applied (3" in console and "partition 1 <-> 2" in console
