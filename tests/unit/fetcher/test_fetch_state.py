"""PartitionStates (ports of Kafka's PartitionStatesTest), PartitionFetchState and FetcherPartitions."""

from __future__ import annotations

import dataclasses

import pytest

from fetcher.fetch_state import (
    FetcherPartitions,
    PartitionFetchState,
    PartitionStates,
    ReplicaState,
    partition_fetch_state,
)
from protocol.common import BrokerEndpoint, TopicPartition
from protocol.replication import InitialFetchState

LEADER = BrokerEndpoint(1, "leader.invalid", 9092)


def create_map() -> dict[TopicPartition, str]:
    return {
        ("foo", 2): "foo 2",
        ("blah", 2): "blah 2",
        ("blah", 1): "blah 1",
        ("baz", 2): "baz 2",
        ("foo", 0): "foo 0",
        ("baz", 3): "baz 3",
    }


def check_state(states: PartitionStates[str], expected: list[tuple[TopicPartition, str]]) -> None:
    assert states.partition_set() == [tp for tp, _ in expected]
    assert states.size == len(expected) == len(states)
    assert list(states.partition_state_map().items()) == expected


GROUPED = [
    (("foo", 2), "foo 2"),
    (("foo", 0), "foo 0"),
    (("blah", 2), "blah 2"),
    (("blah", 1), "blah 1"),
    (("baz", 2), "baz 2"),
    (("baz", 3), "baz 3"),
]


def test_set() -> None:
    states: PartitionStates[str] = PartitionStates()
    states.set(create_map())
    check_state(states, GROUPED)
    states.set({})
    check_state(states, [])


def test_move_to_end() -> None:
    states: PartitionStates[str] = PartitionStates()
    states.set(create_map())
    states.move_to_end(("baz", 2))
    expected = [*GROUPED[:4], (("baz", 3), "baz 3"), (("baz", 2), "baz 2")]
    check_state(states, expected)
    states.move_to_end(("foo", 2))
    expected = [*expected[1:], (("foo", 2), "foo 2")]
    check_state(states, expected)
    states.move_to_end(("foo", 2))  # no-op
    check_state(states, expected)
    states.move_to_end(("baz", 5))  # partition does not exist
    states.move_to_end(("aaa", 2))  # topic does not exist
    check_state(states, expected)


def test_update_and_move_to_end() -> None:
    states: PartitionStates[str] = PartitionStates()
    states.set(create_map())
    states.update_and_move_to_end(("foo", 0), "foo 0 updated")
    expected = [
        (("foo", 2), "foo 2"),
        (("blah", 2), "blah 2"),
        (("blah", 1), "blah 1"),
        (("baz", 2), "baz 2"),
        (("baz", 3), "baz 3"),
        (("foo", 0), "foo 0 updated"),
    ]
    check_state(states, expected)
    states.update_and_move_to_end(("baz", 2), "baz 2 updated")
    expected = [*expected[:3], expected[4], expected[5], (("baz", 2), "baz 2 updated")]
    check_state(states, expected)
    states.update_and_move_to_end(("baz", 5), "baz 5 new")
    states.update_and_move_to_end(("aaa", 2), "aaa 2 new")
    check_state(states, [*expected, (("baz", 5), "baz 5 new"), (("aaa", 2), "aaa 2 new")])


def test_partition_values_update_remove() -> None:
    states: PartitionStates[str] = PartitionStates()
    states.set(create_map())
    assert states.partition_state_values() == [v for _, v in GROUPED]
    states.update(("foo", 2), "foo 2 updated")  # keeps its place
    assert states.partition_set()[0] == ("foo", 2)
    assert states.state_value(("foo", 2)) == "foo 2 updated"
    states.remove(("foo", 2))
    states.remove(("nope", 0))
    assert ("foo", 2) not in states and not states.contains(("foo", 2))
    assert states.state_value(("foo", 2)) is None
    assert list(states.state_iterator()) == [v for _, v in GROUPED[1:]]
    seen: list[TopicPartition] = []
    states.for_each(lambda tp, _: seen.append(tp))
    assert seen == [tp for tp, _ in GROUPED[1:]]
    states.clear()
    assert states.size == 0


def fetching(offset: int = 5, delay_until_ms: int | None = None) -> PartitionFetchState:
    return PartitionFetchState(offset, None, 3, delay_until_ms, ReplicaState.FETCHING)


def test_partition_fetch_state_flags_and_names() -> None:
    state = fetching()
    assert state.is_ready_for_fetch(0) and not state.is_truncating(0) and not state.is_delayed(0)
    assert state.state_name(0) == "fetching"
    assert not state.is_replica_in_sync
    assert dataclasses.replace(state, lag=0).is_replica_in_sync
    assert not dataclasses.replace(state, lag=2).is_replica_in_sync

    delayed = state.delayed(100, 50)
    assert delayed.delay_until_ms == 150
    assert delayed.is_delayed(149) and not delayed.is_ready_for_fetch(149)
    assert delayed.state_name(149) == "delayed"
    assert not delayed.is_delayed(150) and delayed.is_ready_for_fetch(150)

    truncating = dataclasses.replace(state, state=ReplicaState.TRUNCATING)
    assert truncating.is_truncating(0) and not truncating.is_ready_for_fetch(0)
    assert truncating.state_name(0) == "truncating"
    assert not truncating.delayed(0, 10).is_truncating(5)
    assert "fetchOffset=5" in str(state)


def test_partition_fetch_state_on_add() -> None:
    initial = InitialFetchState(leader=LEADER, current_leader_epoch=3, init_offset=7)
    new = partition_fetch_state(None, initial)
    assert new == PartitionFetchState(7, None, 3, None, ReplicaState.TRUNCATING, None)
    current = fetching(offset=42)
    assert partition_fetch_state(current, initial) is current
    assert (
        partition_fetch_state(current, dataclasses.replace(initial, current_leader_epoch=4)).fetch_offset == 7
    )
    with pytest.raises(ValueError):
        partition_fetch_state(None, dataclasses.replace(initial, init_offset=-1))


def test_fetcher_partitions_bookkeeping() -> None:
    partitions = FetcherPartitions()
    a, b = ("t", 0), ("t", 1)
    assert partitions.add_partitions(
        {a: InitialFetchState(LEADER, 1, 0), b: InitialFetchState(LEADER, 1, 10)}
    ) == {
        a,
        b,
    }
    assert partitions.partition_count == 2
    view = partitions.describe(b, 0, LEADER.broker_id)
    assert view is not None
    assert (view.state, view.fetch_offset, view.lag, view.leader_id, view.current_leader_epoch) == (
        "truncating",
        10,
        None,
        1,
        1,
    )
    assert partitions.describe(("x", 0), 0, LEADER.broker_id) is None

    partitions.delay_partitions([a], 100, now_ms=0)
    state_a = partitions.fetch_state(a)
    assert state_a is not None and state_a.delay_until_ms == 100
    # Already delayed: the deadline does not move.
    partitions.delay_partitions([a], 100, now_ms=50)
    state_a = partitions.fetch_state(a)
    assert state_a is not None and state_a.delay_until_ms == 100
    assert partitions.partition_states.partition_set() == [b, a]

    partitions.mark_partition_failed(a)
    assert partitions.failed_partitions == {a}
    failed = partitions.describe(a, 0, LEADER.broker_id, failed_fetch_offset=3)
    assert failed is not None
    assert (failed.state, failed.fetch_offset, failed.lag, failed.current_leader_epoch) == (
        "failed",
        3,
        None,
        -1,
    )
    assert partitions.remove_all_partitions().keys() == {b}
    assert partitions.partition_count == 0
    assert partitions.remove_partitions([b]) == {}
