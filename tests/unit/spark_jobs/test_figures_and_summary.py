"""The plots' data series (spark_jobs.figures, built before drawing) and the terminal summary
(spark_jobs.render), on data written out by hand: no Spark needed."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from spark_jobs.converge import Window, events_from_records
from spark_jobs.figures import FigureData, fault_matrix, lag_series
from spark_jobs.render import render_terminal
from spark_jobs.timeline import broker_colour, draw_lag

T0 = 1_000_000_000_000


def _row(broker: int, ts: int, leo: int, seq: int) -> dict[str, Any]:
    return {"broker": broker, "topic": "t", "partition": 0, "ts_ms": T0 + ts, "seq": seq, "leo": leo}


def _elected(ts: int, leader: int, epoch: int, isr: list[int]) -> dict[str, Any]:
    return {
        "ts_ms": T0 + ts,
        "controller_id": 1000,
        "event": "leader_elected",
        "topic": "t",
        "partition": 0,
        "leader_id": leader,
        "leader_epoch": epoch,
        "isr": isr,
    }


def test_lag_is_leader_leo_minus_replica_leo_and_breaks_where_a_replica_becomes_leader() -> None:
    events = events_from_records([_elected(0, 1, 0, [1, 2]), _elected(5000, 2, 1, [2])])
    rows = [
        _row(1, 100, 10, 1),
        _row(2, 150, 4, 2),  # 6 behind broker 1
        _row(1, 1200, 30, 3),  # broker 2 silent since 150 (>= 1 s): its lag from the leader's sample
        _row(2, 1250, 30, 4),  # caught up
        _row(1, 2300, 50, 5),  # broker 2 silent since 1250 (>= 1 s): drawn from the leader's sample
        _row(2, 6000, 60, 6),  # broker 2 leads from 5000: no lag of its own
        _row(1, 6100, 50, 7),
    ]
    lag = lag_series(rows, events, T0)["t-0"]
    assert lag["brokers"][2] == {"t_s": [0.15, 1.2, 1.25, 2.3, 5.0], "lag": [6, 26, 0, 20, None]}
    assert lag["brokers"][1] == {"t_s": [6.0, 6.1], "lag": [10, 10]}  # silent since 2.3 s, then its own
    assert [(m["t_s"], m["leader"]) for m in lag["leader_changes"]] == [(0.0, 1), (5.0, 2)]
    fd = FigureData(t0_ms=T0, end_s=7.0, lag={"t-0": lag})
    assert draw_lag(fd, "t-0")  # draws None as a break, not a crash
    assert broker_colour(1) != broker_colour(2) != broker_colour(3)


def test_fault_matrix_counts_what_each_fault_did_to_each_partition() -> None:
    lines = [
        _elected(0, 1, 0, [1, 2, 3]),
        {**_elected(0, 2, 0, [2, 3, 1]), "partition": 1},
        {**_elected(2000, 2, 1, [2, 3]), "event": "leader_elected"},  # p0: leader change and shrink
        {**_elected(2100, 2, 0, [2, 3]), "partition": 1, "event": "isr_changed"},  # p1: shrink only
        {**_elected(4000, 2, 1, [2, 3, 1]), "event": "isr_changed"},  # p0: expand, after the fault
        {**_elected(9000, 2, 1, [2, 1, 3]), "event": "isr_changed"},  # much later: another fault's
    ]
    events = events_from_records(lines)
    w = Window("kill 1", "kill", ["1"], T0 + 1000, T0 + 3000, "faults.jsonl", converged_ms=T0 + 4000)
    m = fault_matrix([w], events, [("t", 0), ("t", 1)], T0, T0 + 10_000)
    assert m["partitions"] == ["t-0", "t-1"]
    assert m["faults"] == [{"label": "kill 1", "source": "faults.jsonl", "from_s": 1.0, "to_s": 4.0}]
    assert m["cells"] == [
        [
            {"leader_changes": 1, "isr_shrinks": 1, "isr_expands": 1},
            {"leader_changes": 0, "isr_shrinks": 1, "isr_expands": 0},
        ]
    ]


def _report(verdicts: list[str]) -> dict[str, Any]:
    names = ["convergence", "log_matching", "acked_not_lost", "leader_hw_monotonic"]
    checks = []
    for name, v in zip(names, verdicts, strict=False):
        bad = v == "invalid"
        checks.append(
            {
                "name": name,
                "verdict": v,
                "passed": not bad,
                "checked": 0 if v == "unknown" else 1234,
                "violations": 3 if bad else 0,
                "examples": [
                    {
                        "topic": "a-topic-with-a-rather-long-name",
                        "partition": 7,
                        "base_offset": 123456789,
                        "ts_ms": T0 + 2500,
                        "detail": "broker 1: 0-199 epoch 3 crc 123456; broker 2: 0-199 epoch 4 crc 654321 "
                        * 2,
                    }
                ]
                if bad
                else [],
            }
        )
    return {
        "verdict": "invalid" if "invalid" in verdicts else "unknown" if "unknown" in verdicts else "valid",
        "verdict_counts": {v: verdicts.count(v) for v in ("valid", "invalid", "unknown")},
        "t0_ms": T0,
        "checks": checks,
        "availability": {
            "intended": 5000,
            "acknowledged": 5000,
            "acknowledged_ratio": 1.0,
            "longest_stall_s": 0.0,
            "longest_stall": None,
            "stalls": [],
        },
        "time_to_converge": {
            "overall": {"time_to_converge_ms": 350, "last_fault_end_s": 10.59, "converged_s": 10.94},
            "per_fault": [
                {
                    "fault": "partition 1 <-> controller",
                    "source": "faults.jsonl",
                    "start_s": 2.62,
                    "end_s": 6.28,
                    "ended_by": "heal",
                    "converged_s": 6.88,
                    "time_to_converge_ms": 600,
                    "partitions_touched": 6,
                },
                {
                    "fault": "crash 3",
                    "source": "journal",
                    "start_s": 7.7,
                    "end_s": None,
                    "time_to_converge_ms": None,
                    "not_converged_because": "still in force at the end",
                },
            ],
        },
    }


@pytest.mark.parametrize("verdicts", [["valid"] * 4, ["valid", "invalid", "unknown", "valid"]])
def test_terminal_summary_fits_80_columns_in_a_log(
    verdicts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    buf = io.StringIO()
    console = Console(file=buf)  # not a terminal: what a CI log gets
    assert not console.is_terminal and console.width == 80
    from pathlib import Path

    render_terminal(console, _report(verdicts), Path("some/where/report"))
    text = buf.getvalue()
    lines = text.splitlines()
    # SPEC 12: the first line names the verdict, the acknowledged ratio and the longest stall, and is
    # never wrapped; every other line fits 80 columns.
    assert lines[0].endswith("; 100 % of intended writes acknowledged; longest stall 0.0 s"), lines[0]
    assert len(lines[0]) > 80 and lines[1].startswith("  ") and "longest stall" not in lines[1]
    assert max(len(line) for line in lines[1:]) <= 80
    assert not any(line != line.rstrip() for line in lines)  # no padding to the width in a log
    assert "\x1b[" not in text
    # Each check on its own line with its verdict; the first violation is there, its time in seconds.
    for name, v in zip(
        ["convergence", "log_matching", "acked_not_lost", "leader_hw_monotonic"], verdicts, strict=True
    ):
        line = next(line for line in lines if f" {name} " in line)
        assert (v.upper() if v == "invalid" else v) in line
    assert lines[0].startswith(f"isrsim report: {_report(verdicts)['verdict'].upper()}")
    if "invalid" in verdicts:
        assert "ts_ms=2.500" in text and "base_offset=123456789" in text
        assert "nothing to examine" in next(line for line in lines if " acked_not_lost " in line)
    # Convergence here is "ISR full", a name of its own (chaos measures "replicas in sync"); the report says
    # what its t0 is, in the words chaos, the demo and the scenarios use (kit.run_clock).
    assert "ISR full again 0.35 s after the last fault ended" in text
    assert "times are seconds since t0 = " in text and "time to converge" not in text
    assert "partition 1 <-> controller" in text and "crash 3 (journal)" in text
