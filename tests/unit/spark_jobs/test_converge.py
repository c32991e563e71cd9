"""Fault windows and time to converge (spark_jobs.converge) on journal lines written out by hand, as the
brokers and the controller write them."""

from __future__ import annotations

from typing import Any

from spark_jobs.converge import (
    Window,
    converge,
    events_from_records,
    fault_windows,
    final_stop_ms,
    isr_history,
)
from spark_jobs.fault_log import fault_bands

TP = ("t", 0)
REPLICAS = {TP: (1, 2, 3), ("t", 1): (1, 2, 3)}


def _events(lines: list[dict[str, Any]]) -> list[Any]:
    return events_from_records(sorted(lines, key=lambda rec: rec["ts_ms"]))


def _isr(ts: int, isr: list[int], partition: int = 0, epoch: int = 0, **kw: Any) -> dict[str, Any]:
    return {
        "ts_ms": ts,
        "controller_id": 1000,
        "event": kw.pop("event", "isr_changed"),
        "topic": "t",
        "partition": partition,
        "leader_id": isr[0],
        "leader_epoch": epoch,
        "isr": isr,
        **kw,
    }


def _started(ts: int, broker: int) -> dict[str, Any]:
    return {"ts_ms": ts, "broker_id": broker, "event": "broker_started"}


def _stopped(ts: int, broker: int) -> dict[str, Any]:
    return {"ts_ms": ts, "broker_id": broker, "event": "broker_stopped", "clean": True}


def _kill_run() -> list[dict[str, Any]]:
    """Broker 3 killed at 1000 (its last line 900), fenced at 2000 (both ISRs shrink), restarted at 3000;
    partition 0 takes it back at 3400, partition 1 at 3700; the final stop begins at 9000."""
    return [
        *(_started(10 * b, b) for b in (1, 2, 3)),
        _isr(100, [1, 2, 3], event="leader_elected"),
        _isr(100, [2, 1, 3], partition=1, event="leader_elected"),
        {"ts_ms": 900, "broker_id": 3, "event": "offsets", "topic": "t", "partition": 0},
        {"ts_ms": 2000, "controller_id": 1000, "event": "broker_fenced", "broker_id": 3},
        _isr(2000, [1, 2]),
        _isr(2000, [2, 1], partition=1),
        _started(3000, 3),
        {"ts_ms": 3001, "controller_id": 1000, "event": "broker_unfenced", "broker_id": 3},
        _isr(3400, [1, 2, 3]),
        _isr(3700, [2, 1, 3], partition=1),
        {"ts_ms": 9000, "controller_id": 1000, "event": "broker_shutting_down", "broker_id": 1},
        _isr(9000, [2, 3], epoch=1),
        _stopped(9010, 1),
    ]


def test_a_kill_seen_in_faults_jsonl_converges_when_the_last_isr_is_full_again() -> None:
    events = _events(_kill_run())
    bands = fault_bands(
        [
            {"ts_ms": 1000, "action": "kill", "nodes": ["3"], "params": {}},
            {"ts_ms": 3000, "action": "restart", "nodes": ["3"], "params": {}},
        ]
    )
    stop = final_stop_ms(events)
    assert stop == 9000
    windows = fault_windows(events, bands, stop)
    # The crash and the fencing the journals show are the CLI's kill: one window only.
    assert [(w.label, w.source, w.start_ms, w.end_ms) for w in windows] == [
        ("kill 3", "faults.jsonl", 1000, 3000)
    ]
    per_fault, overall, per_partition = converge(windows, isr_history(events, REPLICAS), stop)
    assert per_fault[0]["converged_ms"] == 3700 and per_fault[0]["time_to_converge_ms"] == 700
    assert overall["time_to_converge_ms"] == 700 and overall["last_fault_end_ms"] == 3000
    assert {r["partition"]: r["time_to_converge_ms"] for r in per_partition} == {0: 400, 1: 700}


def test_without_faults_jsonl_the_journals_give_the_window() -> None:
    events = _events(_kill_run())
    windows = fault_windows(events, [], final_stop_ms(events))
    # From broker 3's last line to its restart; its fencing lies inside and is the same fault.
    assert [(w.label, w.source, w.start_ms, w.end_ms, w.ended_by) for w in windows] == [
        ("crash 3", "journal", 900, 3000, "restart")
    ]
    per_fault, _, _ = converge(windows, isr_history(events, REPLICAS), 9000)
    assert per_fault[0]["time_to_converge_ms"] == 700


def test_an_isr_still_short_when_the_next_fault_begins_has_not_converged() -> None:
    lines = _kill_run()
    lines.insert(-3, {"ts_ms": 3500, "broker_id": 2, "event": "broker_stopped", "clean": True})
    lines.insert(-3, _started(4000, 2))
    events = _events(lines)
    windows = fault_windows(events, [], final_stop_ms(events))
    assert [(w.label, w.start_ms, w.end_ms) for w in windows] == [
        ("crash 3", 900, 3000),
        ("stop 2", 3500, 4000),
    ]
    per_fault, overall, _ = converge(windows, isr_history(events, REPLICAS), 9000)
    assert (
        per_fault[0]["converged_ms"] is None and per_fault[0]["not_converged_because"] == "next fault began"
    )
    # After the last fault (broker 2's stop, which shrank nothing) the ISRs were full from 3700 on.
    assert per_fault[1]["time_to_converge_ms"] == 0
    assert overall["converged_ms"] == 4000 and overall["time_to_converge_ms"] == 0


def test_a_fault_in_force_at_the_end_and_a_short_isr_at_the_stop_are_not_converged() -> None:
    lines = [line for line in _kill_run() if line["ts_ms"] != 3700]
    events = _events(lines)
    history = isr_history(events, REPLICAS)
    w = [Window("kill 3", "kill", ["3"], 1000, 3000, "faults.jsonl")]
    per_fault, overall, per_partition = converge(w, history, 9000)
    assert per_fault[0]["converged_ms"] is None
    assert overall["note"] == "an ISR was not full when the final stop began"
    assert {r["partition"]: r["converged_ts"] for r in per_partition} == {0: 3400, 1: None}
    still = [Window("pause 3", "pause", ["3"], 1000, None, "faults.jsonl")]
    _, overall, _ = converge(still, history, 9000)
    assert overall["converged_ms"] is None and "still in force" in overall["note"]


def test_a_deposed_leaders_late_isr_is_ignored() -> None:
    lines = _kill_run()
    # Broker 1, leader of epoch 0, says after epoch 1 was elected that its ISR shrank: ignored.
    lines += [_isr(5000, [2, 3, 1], epoch=1, event="leader_elected"), _isr(5100, [1], epoch=0)]
    history = isr_history(_events(lines), REPLICAS)
    assert history.full_since([TP], 9000) == 3400


def test_a_restarted_brokers_lines_in_the_millisecond_of_its_start_are_not_its_last_sign_of_life() -> None:
    lines = _kill_run()
    # The new process journals its leaderships in the millisecond of its broker_started, just before it.
    lines.insert(lines.index(_started(3000, 3)), {"ts_ms": 3000, "broker_id": 3, "event": "became_follower"})
    windows = fault_windows(_events(lines), [], 9000)
    assert [(w.label, w.start_ms, w.end_ms) for w in windows] == [("crash 3", 900, 3000)]


def test_a_fault_of_a_voter_is_the_controllers_and_touches_every_partition() -> None:
    """faults.jsonl names a quorum's controllers by voter id: a kill of voter 1000 is a controller fault,
    so every partition is judged after it, as after a fault of "controller"."""
    lines = [
        *_kill_run()[:3],
        {"ts_ms": 1, "controller_id": 1000, "event": "quorum_state", "role": "leader", "epoch": 1},
        _isr(100, [1, 2, 3], event="leader_elected"),
        _isr(100, [2, 1, 3], partition=1, event="leader_elected"),
    ]
    bands = fault_bands(
        [
            {"ts_ms": 1000, "action": "kill", "nodes": ["1000"], "params": {"controller": True}},
            {"ts_ms": 2000, "action": "restart", "nodes": ["1000"], "params": {"controller": True}},
        ]
    )
    events = _events(lines)
    windows = fault_windows(events, bands, None)
    assert [(w.label, w.controller) for w in windows] == [("kill 1000", True)]
    per_fault, _, _ = converge(windows, isr_history(events, REPLICAS), 9000)
    assert per_fault[0]["partitions_touched"] == 2


def test_a_fencing_right_after_a_kill_and_restart_is_the_kills_window() -> None:
    """kill 3 at 1000 and its restart at 1500, before the controller noticed: broker 3 registers again and
    is fenced from 2000 until it has caught up (3001). One fault: the kill, until the unfencing; the ISR
    shrinks (2000) fall under it. A fencing long after the restart is a fault of its own."""
    lines = [line for line in _kill_run() if line.get("event") != "broker_started" or line["ts_ms"] != 3000]
    lines.insert(5, _started(1500, 3))
    events = _events(sorted(lines, key=lambda line: line["ts_ms"]))
    kill = [
        {"ts_ms": 1000, "action": "kill", "nodes": ["3"], "params": {}},
        {"ts_ms": 1500, "action": "restart", "nodes": ["3"], "params": {}},
    ]
    windows = fault_windows(events, fault_bands(kill), final_stop_ms(events))
    assert [(w.label, w.source, w.start_ms, w.end_ms, w.ended_by) for w in windows] == [
        ("kill 3", "faults.jsonl", 1000, 3001, "unfenced")
    ]
    per_fault, _, _ = converge(windows, isr_history(events, REPLICAS), 9000)
    assert per_fault[0]["converged_ms"] == 3700
    late = [{**r, "ts_ms": r["ts_ms"] - 10_000} for r in kill]  # the kill ended 10.5 s before the fencing
    windows = fault_windows(events, fault_bands(late), final_stop_ms(events))
    assert [(w.label, w.start_ms, w.end_ms) for w in windows] == [
        ("kill 3", -9000, -8500),
        ("crash 3", 900, 1500),
        ("fenced 3", 2000, 3001),
    ]
