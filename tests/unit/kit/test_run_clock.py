"""One clock for a run (kit.run_clock): t0 is the first line of faults.jsonl or of any node's journal, the
rule the report uses, so chaos, the demo and the scenarios print the times the report shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.fault_journal import append_fault
from kit.run_clock import RunClock, describe_t0, run_origin

T = 1_795_000_000_000


def write_journal(path: Path, lines: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_t0_is_the_first_event_of_the_journals_and_faults(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert run_origin(root) is None and RunClock(root).stamp() == " " * 7  # nothing written yet
    write_journal(root / "broker-1" / "data" / "events.jsonl",
                  [{"ts_ms": T + 300, "broker_id": 1, "event": "broker_started"}])  # fmt: skip
    write_journal(
        root / "broker-2" / "events.jsonl", [{"ts_ms": T + 200, "broker_id": 2, "event": "broker_started"}]
    )
    write_journal(
        root / "controller" / "events.jsonl",
        [{"ts_ms": "torn"}, {"ts_ms": T + 100, "controller_id": 1000, "event": "controller_started"}],
    )
    # Not journals: a workload's acknowledgements, a file of another name, a directory of another node.
    write_journal(root / "workload" / "acked-x.jsonl", [{"ts_ms": T, "sent_ms": T}])
    write_journal(root / "elsewhere" / "events.jsonl", [{"ts_ms": T - 5, "broker_id": 9, "event": "x"}])
    origin = run_origin(root)
    assert origin is not None
    assert (origin.ts_ms, origin.source) == (T + 100, "controller 1000's journal: controller_started")
    append_fault(root, "kill", ["3"], {"signal": "KILL"}, ts_ms=T + 50)
    origin = run_origin(root)
    assert origin is not None and (origin.ts_ms, origin.source) == (T + 50, "faults.jsonl: kill 3")
    assert origin.describe() == describe_t0(T + 50, "faults.jsonl: kill 3")
    assert origin.describe().startswith("t0 = 2026-") and origin.describe().endswith(
        " UTC, the first event of the run (faults.jsonl: kill 3)"
    )


def test_the_clock_counts_seconds_since_t0_once_found(tmp_path: Path) -> None:
    clock = RunClock(tmp_path)
    assert clock.seconds(T) is None
    write_journal(tmp_path / "controller-1000" / "log" / "events.jsonl",
                  [{"ts_ms": T, "controller_id": 1000, "event": "quorum_state"}])  # fmt: skip
    assert clock.seconds(T + 12_345) == 12.345
    assert clock.stamp(T + 12_345) == "  12.3s"
    # Anchored once: a later, earlier-looking file does not move the clock under a running command.
    append_fault(tmp_path, "pause", ["1"], ts_ms=T - 1000)
    assert clock.seconds(T) == 0.0
