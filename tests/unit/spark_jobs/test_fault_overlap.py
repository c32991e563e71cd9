"""The report header's notice when no acknowledged write was in flight during a fault."""

from __future__ import annotations

from spark_jobs.fault_overlap import NO_FAULT_IN_FLIGHT, fault_notice


def test_the_notice_says_why_and_is_absent_once_a_write_met_a_fault() -> None:
    none = fault_notice({"faults": 0, "acknowledged": 30, "during_faults": 0})
    assert none is not None and none.startswith(f"notice: {NO_FAULT_IN_FLIGHT} (no fault in this run)")
    assert "not writes that survived faults" in none
    idle = fault_notice({"faults": 2, "acknowledged": 30, "during_faults": 0})
    assert idle is not None and "2 fault window(s), none while an acknowledged write was outstanding" in idle
    assert fault_notice({"faults": 2, "acknowledged": 30, "during_faults": 1}) is None
    assert fault_notice(None) is None  # an older report.json
