"""Availability in the report: a stall's cause read from the journals, the fault in force, the counts and
the summary line (docs/report.md, "Availability")."""

from __future__ import annotations

from typing import Any

from spark_jobs.availability import Stall, availability_sentence, classify, summarise
from spark_jobs.converge import Window, events_from_records

T0 = 1_000_000


def ev(ts: int, **fields: Any) -> dict[str, Any]:
    return {"ts_ms": T0 + ts, **fields}


def ctrl(ts: int, event: str, **fields: Any) -> dict[str, Any]:
    return ev(ts, controller_id=1000, event=event, **fields)


def stall(start: int, end: int, partition: int = 0) -> Stall:
    return Stall("t", partition, T0 + start, T0 + end)


JOURNAL = [
    ctrl(0, "leader_elected", topic="t", partition=0, leader_id=3, leader_epoch=1, isr=[1, 2, 3]),
    ctrl(0, "leader_elected", topic="t", partition=1, leader_id=1, leader_epoch=1, isr=[1, 2, 3]),
    ctrl(0, "leader_elected", topic="t", partition=2, leader_id=2, leader_epoch=1, isr=[1, 2, 3]),
    # t-1: acks=all waits until the leader drops the silent follower 3.
    ev(
        9_000,
        broker_id=1,
        event="isr_changed",
        topic="t",
        partition=1,
        leader_epoch=1,
        old_isr=[1, 2, 3],
        isr=[1, 2],
    ),
    # t-0: its leader 3 is fenced, then a new leader is elected.
    ctrl(12_000, "broker_fenced", broker_id=3),
    ctrl(12_050, "leader_elected", topic="t", partition=0, leader_id=1, leader_epoch=2, isr=[1, 2]),
]
WINDOWS = [
    Window("pause 3", "pause", ["3"], T0 + 2_000, T0 + 14_000, "faults.jsonl"),
    Window(
        "partition 2 <-> controller",
        "partition",
        ["2", "controller"],
        T0 + 20_000,
        T0 + 30_000,
        "faults.jsonl",
    ),
]


def test_each_stall_gets_its_cause_from_the_journals_and_the_fault_in_force() -> None:
    events = events_from_records(JOURNAL)
    got = [classify(s, events, WINDOWS) for s in (stall(2_100, 12_300, 0), stall(2_100, 9_100, 1))]
    assert [(s.cause, s.fault) for s in got] == [("leader_fenced", "pause 3"), ("isr_shrink_wait", "pause 3")]
    # A new leader without a fenced one; a stall while the controller is cut off; one with no explanation.
    moved = events_from_records(
        [
            *JOURNAL[:3],
            ctrl(5_000, "leader_elected", topic="t", partition=2, leader_id=1, leader_epoch=2, isr=[1]),
        ]
    )
    assert classify(stall(4_000, 6_000, 2), moved, []).cause == "no_leader"
    assert (
        classify(stall(21_000, 24_000, 2), events, WINDOWS).cause,
        classify(stall(21_000, 24_000, 2), events, WINDOWS).fault,
    ) == (
        "controller_unreachable",
        "partition 2 <-> controller",
    )
    # On a quorum the controller end is a voter's id (controller 1000 wrote the journal's lines).
    isolated = [Window("isolate 1000", "isolate", ["1000"], T0 + 20_000, T0 + 30_000, "faults.jsonl")]
    assert classify(stall(21_000, 24_000, 2), events, isolated).cause == "controller_unreachable"
    partitioned = [
        Window("partition 2 <-> 1001", "partition", ["2", "1001"], T0 + 20_000, None, "faults.jsonl")
    ]
    assert classify(stall(21_000, 24_000, 2), events, partitioned).cause == "unknown"  # 1001 is no voter here
    # The controller's shrink (it fenced a follower) carries no old_isr; journaled as the acks resume.
    fenced_follower = events_from_records(
        [
            *JOURNAL[:3],
            ctrl(8_002, "isr_changed", topic="t", partition=2, leader_id=2, leader_epoch=1, isr=[1, 2]),
        ]
    )
    assert classify(stall(1_000, 8_000, 2), fenced_follower, []).cause == "isr_shrink_wait"
    quiet = classify(stall(40_000, 41_500, 2), events, WINDOWS)
    assert (quiet.cause, quiet.fault) == ("unknown", None)


def test_counts_ratio_longest_stall_and_the_first_line() -> None:
    summaries = [
        {"intended": 60_000, "acknowledged": 27_000, "failed": 3_000, "unknown": 100, "started_ms": T0},
    ]
    stalls = [
        Stall("t", 0, T0 + 2_000, T0 + 23_300, "leader_fenced", "partition 2 <-> 3"),
        Stall("t", 1, T0 + 1_000, T0 + 2_500, "isr_shrink_wait", None),
    ]
    a = summarise(summaries, 999, stalls, T0)
    assert (a["intended"], a["acknowledged"], a["failed"], a["unknown"], a["acknowledged_ratio"]) == (
        60_000,
        27_000,
        3_000,
        100,
        0.45,
    )
    assert a["longest_stall_s"] == 21.3
    assert [(s["partition"], s["from_s"], s["to_s"], s["cause"]) for s in a["stalls"]] == [
        (1, 1.0, 2.5, "isr_shrink_wait"),
        (0, 2.0, 23.3, "leader_fenced"),
    ]
    assert availability_sentence(a) == (
        "45 % of intended writes acknowledged; longest stall 21.3 s during partition 2 <-> 3"
    )
    # Only other clients (a Kafka client, the bench): every record the leaders journaled as acknowledged is
    # counted, and intended is what they got acknowledged (their failures are not journaled), said so.
    b = summarise([], 5_000, [], T0)
    assert (b["intended"], b["acknowledged"], b["acknowledged_ratio"], b["longest_stall_s"]) == (
        5_000,
        5_000,
        1.0,
        0.0,
    )
    assert b["counted_by"] == "acknowledgement journals" and "not journaled" in b["intended_means"]
    assert availability_sentence(b) == (
        "100 % of intended writes acknowledged (5,000 records, all by other clients than isrsim produce: "
        "intended = acknowledged, their failures are not journaled); longest stall 0.0 s"
    )
    # isrsim produce and other clients: the others' acknowledged records count in both figures.
    c = summarise(summaries, 30_000, [], T0, other_records=3_000)
    assert (c["intended"], c["acknowledged"], c["failed"], c["acknowledged_ratio"]) == (
        63_000,
        30_000,
        3_000,
        0.4762,
    )
    assert c["counted_by"] == "workload and acknowledgement journals" and c["other_clients_records"] == 3_000
    assert availability_sentence(c).startswith(
        "48 % of intended writes acknowledged (3,000 records by other clients, counted as intended once "
        "acknowledged); longest stall 0.0 s"
    )
    nothing = summarise([], 0, [], T0)
    assert (nothing["intended"], nothing["acknowledged_ratio"]) == (None, None)
    # SPEC 12: the ratio and the longest stall are always named, as figures.
    assert availability_sentence(None) == (
        "acknowledged ratio unknown (no write intended or acknowledged); longest stall 0.0 s"
    )


def quorum(ts: int, voter: int, role: str, epoch: int, leader: int = -1) -> dict[str, Any]:
    return ev(ts, controller_id=voter, event="quorum_state", role=role, epoch=epoch, leader_id=leader)


# Three voters: 1000 leads epoch 1 from the start.
QUORUM = [
    quorum(0, 1000, "leader", 1, 1000),
    quorum(1, 1001, "follower", 1, 1000),
    quorum(1, 1002, "follower", 1, 1000),
    *JOURNAL[:3],
]


def test_a_fault_on_a_voter_or_the_active_controller_makes_a_stall_controller_unreachable() -> None:
    """faults.jsonl names a quorum's controllers by voter id, never "controller": a network fault on a voter,
    or a kill / pause of the active controller, cut the cluster off its controller; a kill of a voter that
    was not active does not."""
    events = events_from_records(QUORUM)
    cut = Window("partition 2 <-> 1000", "partition", ["2", "1000"], T0 + 20_000, T0 + 30_000, "faults.jsonl")
    got = classify(stall(21_000, 24_000, 2), events, [cut])
    assert (got.cause, got.fault) == ("controller_unreachable", "partition 2 <-> 1000")
    active = Window("kill 1000", "kill", ["1000"], T0 + 20_000, T0 + 30_000, "faults.jsonl")
    assert classify(stall(21_000, 24_000, 2), events, [active]).cause == "controller_unreachable"
    paused = Window("pause 1000", "pause", ["1000"], T0 + 20_000, T0 + 30_000, "faults.jsonl")
    assert classify(stall(21_000, 24_000, 2), events, [paused]).cause == "controller_unreachable"
    standby = Window("kill 1001", "kill", ["1001"], T0 + 20_000, T0 + 30_000, "faults.jsonl")
    assert classify(stall(21_000, 24_000, 2), events, [standby]).cause == "unknown"


def test_a_stall_while_the_quorum_has_no_leader_is_controller_unreachable() -> None:
    """From the voters' quorum_state journals: the leader of epoch 1 went silent (killed outside the CLI),
    1001 stood in epoch 2 at 5 s and won at 7 s; a stall across that stretch had no active controller."""
    events = events_from_records(
        [*QUORUM, quorum(5_000, 1001, "candidate", 2), quorum(7_000, 1001, "leader", 2, 1001)]
    )
    assert classify(stall(4_000, 6_500, 2), events, []).cause == "controller_unreachable"
    assert classify(stall(8_000, 9_500, 2), events, []).cause == "unknown"
