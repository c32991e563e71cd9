"""A write gap is a stall only when the journals show a cause in it (SPEC §13, docs/report.md "Clients"):
a known cause, a fault window overlapping it, or an error answered for the partition; else idle time."""

from __future__ import annotations

from spark_jobs.availability import Stall, idle_row
from spark_jobs.clients import split_idle
from spark_jobs.converge import Window

T0 = 1_000_000
PAUSE = Window("pause 3", "pause", ["3"], T0 + 2_000, T0 + 4_000, "faults.jsonl")


def gap(start: int, end: int, cause: str = "unknown", partition: int = 0) -> Stall:
    return Stall("t", partition, T0 + start, T0 + end, cause)


def test_a_gap_with_a_cause_a_fault_or_an_error_is_a_stall_and_one_with_none_is_idle() -> None:
    caused = gap(10_000, 12_000, "no_leader")
    in_fault = gap(3_000, 5_000)
    erred = gap(20_000, 23_000, partition=1)
    paused = gap(30_000, 40_000)
    errors = [("t", 1, T0 + 21_000), ("t", 0, T0 + 50_000), ("u", 0, T0 + 31_000)]
    stalls, idle = split_idle([caused, in_fault, erred, paused], [PAUSE], errors)
    assert stalls == [caused, in_fault, erred]
    assert idle == [paused]
    assert idle_row(paused, T0) == {
        "topic": "t",
        "partition": 0,
        "from_s": 30.0,
        "to_s": 40.0,
        "seconds": 10.0,
    }


def test_an_error_line_counts_from_the_start_of_its_second() -> None:
    # Activity lines are per second: an error in the second the gap begins in is stamped before it.
    [stall], idle = split_idle([gap(10_400, 12_000)], [], [("t", 0, T0 + 10_000)])
    assert stall.from_ms == T0 + 10_400 and idle == []
    stalls, [later] = split_idle([gap(10_400, 12_000)], [], [("t", 0, T0 + 12_500)])
    assert stalls == [] and later.to_ms == T0 + 12_000
