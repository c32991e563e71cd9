"""The report's choice of partitions to show (spark_jobs.topics_shown) and progress_during_faults' rule of
an available partition (spark_jobs.progress_check), on hand-made inputs."""

from __future__ import annotations

from spark_jobs.converge import Event, Window
from spark_jobs.progress_check import available_through, partition_states
from spark_jobs.topics_shown import fold_matrix, shown_partitions


def test_internal_topics_are_shown_only_when_asked() -> None:
    tps = [("__consumer_offsets", 0), ("orders", 0), ("__transaction_state", 3), ("orders", 1)]
    assert shown_partitions(tps, include_internal=False) == [("orders", 0), ("orders", 1)]
    assert shown_partitions(tps, include_internal=True) == tps


def test_a_wide_matrix_folds_partitions_per_topic() -> None:
    tps = [("a", p) for p in range(10)] + [("b", p) for p in range(3)]
    cell = {"leader_changes": 1, "isr_shrinks": 2, "isr_expands": 0}
    matrix = {
        "faults": [{"label": "kill 1"}],
        "partitions": [f"{t}-{p}" for t, p in tps],
        "cells": [[cell] * 13],
    }
    folded = fold_matrix(matrix, tps)
    assert folded["partitions"] == ["a (10 partitions)", "b (3 partitions)"]
    assert folded["cells"] == [
        [
            {"leader_changes": 10, "isr_shrinks": 20, "isr_expands": 0},
            {"leader_changes": 3, "isr_shrinks": 6, "isr_expands": 0},
        ]
    ]
    narrow = {**matrix, "partitions": matrix["partitions"][:12], "cells": [[cell] * 12]}
    assert fold_matrix(narrow, tps[:12]) is narrow


def leader(ts: int, broker: int, isr: tuple[int, ...], epoch: int) -> Event:
    return Event(ts, ts, "controller", 1000, "leader_elected", "t", 0, epoch, broker, isr)


def test_a_partition_is_available_through_a_fault_only_with_a_leader_off_the_faulted_node_and_min_isr() -> (
    None
):
    states = partition_states([leader(0, 1, (1, 2, 3), 0), leader(5000, 2, (2, 3), 1)])[("t", 0)]
    kill_1 = Window("kill 1", "kill", ["1"], 4000, 8000, "faults.jsonl")
    kill_3 = Window("kill 3", "kill", ["3"], 6000, 9000, "faults.jsonl")
    assert not available_through(states, kill_1, 8000, 2)  # led by 1 when the fault began
    assert available_through(states, kill_3, 9000, 2)
    assert not available_through(states, kill_3, 9000, 3)  # ISR of 2 < min.insync.replicas 3
    stale = partition_states(
        [leader(0, 1, (1, 2, 3), 0), leader(5000, 2, (2, 3), 1), leader(5500, 1, (1,), 0)]
    )
    assert stale[("t", 0)][-1][1] == 2  # an older epoch's word is ignored
