"""How faults.jsonl's faults are named and paired (spark_jobs.fault_log): a one-way fault is drawn and
listed with its direction, ``->``, and a two-way one with ``<->``."""

from __future__ import annotations

from typing import Any

from spark_jobs.fault_log import fault_bands


def rec(ts: int, action: str, *nodes: str, **params: Any) -> dict[str, Any]:
    return {"ts_ms": ts, "action": action, "nodes": list(nodes), "params": params}


def test_one_way_faults_are_labelled_with_their_direction() -> None:
    bands = fault_bands(
        [
            rec(100, "loss", "1", "controller", percent=20, one_way=True),
            rec(110, "delay", "2", "3", ms=100, jitter_ms=20, one_way=True),
            rec(120, "partition", "3", "controller", one_way=True),
            rec(130, "loss", "2", "1", percent=5, one_way=False),
            rec(140, "delay", "1", "3", ms=50),
            rec(150, "partition", "1", "2"),
        ]
    )
    assert [b.label for b in bands] == [
        "loss 1 -> controller 20%",
        "delay 2 -> 3 100±20 ms",
        "partition 3 -> controller",
        "loss 2 <-> 1 5%",
        "delay 1 <-> 3 50 ms",
        "partition 1 <-> 2",
    ]


def test_the_opposite_direction_is_another_fault() -> None:
    """``partition 1 -> 2`` then ``partition 2 -> 1`` (both one way): two faults in force together; the
    same direction set again replaces the first."""
    bands = fault_bands(
        [
            rec(100, "partition", "1", "2", one_way=True),
            rec(200, "partition", "2", "1", one_way=True),
            rec(300, "partition", "1", "2", one_way=True),
            rec(400, "heal"),
        ]
    )
    assert [(b.label, b.end_ms, b.ended_by) for b in bands if not b.instant] == [
        ("partition 1 -> 2", 300, "another partition"),
        ("partition 2 -> 1", 400, "heal"),
        ("partition 1 -> 2", 400, "heal"),
    ]


def test_protocol_fault_rule_records_are_labelled_instants() -> None:
    rule = {"id": 1, "api": "Produce", "topic": "t", "error": "NOT_LEADER_OR_FOLLOWER", "count": 3}
    records = [
        {"ts_ms": 1, "action": "rule_add", "nodes": ["1", "2"], "params": {}, "rule_id": 1, "rule": rule},
        {"ts_ms": 2, "action": "kill", "nodes": ["2"], "params": {}},
        {"ts_ms": 3, "action": "rule_hit", "nodes": ["1"], "params": {}, "rule_id": 1, "hit": 1,
         "api": "Produce", "topic": "t", "partition": 0, "rule": rule},
        {"ts_ms": 4, "action": "rule_remove", "nodes": ["1"], "params": {}, "rule_id": 1, "rule": rule},
    ]  # fmt: skip
    bands = fault_bands(records)
    assert [(b.label, b.instant) for b in bands if b.action.startswith("rule_")] == [
        ("rule 1 added: Produce t NOT_LEADER_OR_FOLLOWER", True),
        ("rule 1 hit 1: Produce t/0 NOT_LEADER_OR_FOLLOWER on 1", True),
        ("rule 1 removed: Produce t NOT_LEADER_OR_FOLLOWER", True),
    ]
    assert [b.end_ms for b in bands if b.action == "kill"] == [None]  # rules end no other fault
