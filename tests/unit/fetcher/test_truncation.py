"""The truncation decision (ports of the pure cases of Kafka's AbstractFetcherThreadTest and
ReplicaFetcherThreadTest), with the follower's and leader's real LeaderEpochFileCache."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetcher.fetch_state import FetcherPartitions, ReplicaState
from fetcher.truncation import (
    EpochData,
    EpochEndOffset,
    IllegalStateError,
    OffsetTruncationState,
    fetch_truncating_partitions,
    filter_epoch_end_offsets,
    get_offset_truncation_state,
    maybe_truncate_to_epoch_end_offsets,
    truncate_to_high_watermark,
    update_fetch_offset_and_maybe_mark_truncation_complete,
)
from protocol.api_keys import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from protocol.common import BrokerEndpoint, TopicPartition
from protocol.errors import Errors
from protocol.replication import InitialFetchState
from storage.leader_epoch_cache import LeaderEpochFileCache

LEADER = BrokerEndpoint(1, "leader.invalid", 9092)
T1P0: TopicPartition = ("topic1", 0)
T1P1: TopicPartition = ("topic1", 1)
T2P1: TopicPartition = ("topic2", 1)


def ok(epoch: int, end_offset: int) -> EpochEndOffset:
    return EpochEndOffset(Errors.NONE, epoch, end_offset)


def cache_of(*entries: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(None)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


@dataclass
class Replica:
    """A replica's log as far as truncation cares: its epoch cache and log end offset."""

    cache: LeaderEpochFileCache
    leo: int
    hw: int = 0
    truncations: list[int] = field(default_factory=list)

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.cache.end_offset_for(epoch, self.leo)

    def truncate_to(self, offset: int) -> None:
        self.truncations.append(offset)
        if offset < self.leo:
            self.cache.truncate_from_end(offset)
            self.leo = offset


def decide(replica: Replica, answer: EpochEndOffset, fetch_offset: int = 0) -> OffsetTruncationState:
    return get_offset_truncation_state(
        T1P0,
        answer,
        fetch_offset=fetch_offset,
        log_end_offset=replica.leo,
        follower_end_offset_for=replica.end_offset_for,
    )


# -- get_offset_truncation_state --------------------------------------------------------------------------


def test_should_truncate_to_offset_specified_in_epoch_offset_response() -> None:
    follower = Replica(cache_of((5, 0)), leo=200)
    assert decide(follower, ok(5, 156)) == OffsetTruncationState(156, True)
    assert decide(follower, ok(5, 172)) == OffsetTruncationState(172, True)


def test_should_truncate_to_offset_specified_in_epoch_offset_response_if_follower_has_no_more_epochs() -> (
    None
):
    # The follower's log has nothing for the leader's epoch (Kafka's endOffsetForEpoch returns None).
    def no_epoch(_: int) -> tuple[int, int]:
        return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)

    for leader_end, expected in ((156, 156), (202, 200)):
        state = get_offset_truncation_state(
            T1P0, ok(4, leader_end), fetch_offset=0, log_end_offset=200, follower_end_offset_for=no_epoch
        )
        assert state == OffsetTruncationState(expected, True)


def test_should_fetch_leader_epoch_second_time_if_leader_replies_with_epoch_not_known_to_follower() -> None:
    follower = Replica(cache_of((3, 100), (5, 120)), leo=200)
    # The leader says epoch 4 ended at 155; the follower never had epoch 4: its epoch 3 ends at 120.
    first = decide(follower, ok(4, 155))
    assert first == OffsetTruncationState(120, truncation_completed=False)
    follower.truncate_to(first.offset)
    assert follower.cache.latest_epoch() == 3
    second = decide(follower, ok(3, 101), fetch_offset=first.offset)
    assert second == OffsetTruncationState(101, True)


def test_should_use_leader_end_offset_if_leader_returns_no_epoch() -> None:
    follower = Replica(cache_of((3, 100), (5, 120)), leo=200)
    assert decide(follower, ok(UNDEFINED_EPOCH, 155)) == OffsetTruncationState(155, True)
    assert decide(follower, ok(UNDEFINED_EPOCH, 143)) == OffsetTruncationState(143, True)
    assert decide(follower, ok(UNDEFINED_EPOCH, 500)) == OffsetTruncationState(200, True)


def test_should_truncate_to_initial_fetch_offset_if_leader_returns_undefined_offset() -> None:
    follower = Replica(cache_of((5, 0)), leo=200)
    assert decide(follower, ok(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), fetch_offset=100) == (
        OffsetTruncationState(100, True)
    )


def test_follower_ahead_within_same_epoch_truncates_to_leader_end() -> None:
    follower = Replica(cache_of((1, 0), (2, 10)), leo=30)
    assert decide(follower, ok(2, 25)) == OffsetTruncationState(25, True)
    # Leader further ahead than the follower: nothing to cut beyond LEO.
    assert decide(follower, ok(2, 40)) == OffsetTruncationState(30, True)


def test_follower_epoch_ended_earlier_than_leader_says() -> None:
    # The follower's epoch 1 ended at 10 (epoch 3 started there); the leader's epoch 1 ended at 12.
    follower = Replica(cache_of((1, 0), (3, 10)), leo=20)
    assert decide(follower, ok(1, 12)) == OffsetTruncationState(10, True)


def test_seed_example_follower_truncates_to_new_epoch_start() -> None:
    """A led epoch 1 with offsets 1..6; B (a follower with 1..4) became leader in epoch 2 at offset 5 and
    wrote 5..7. A comes back, asks B for epoch 1: B answers (1, 5); A cuts 5 and 6 and fetches from 5."""
    leader_b = Replica(cache_of((1, 1), (2, 5)), leo=8)
    follower_a = Replica(cache_of((1, 1)), leo=7)
    answer = leader_b.cache.end_offset_for(1, leader_b.leo)
    assert answer == (1, 5)
    assert decide(follower_a, ok(*answer)) == OffsetTruncationState(5, True)


# -- rounds, as the fetcher drives them ----------------------------------------------------------------------


def run_truncation(
    partitions: FetcherPartitions, tp: TopicPartition, follower: Replica, leader: Replica, now: int = 0
) -> int:
    """Drive truncation rounds until ``tp`` is no longer Truncating; returns the number of
    OFFSET_FOR_LEADER_EPOCH round trips."""
    rounds = 0
    states = partitions.partition_states
    while True:
        with_epochs, without_epochs = fetch_truncating_partitions(
            states, lambda _: follower.cache.latest_epoch(), now
        )
        if not with_epochs and not without_epochs:
            return rounds
        if with_epochs:
            rounds += 1
            answers = {
                t: ok(*leader.cache.end_offset_for(req.leader_epoch, leader.leo))
                for t, req in with_epochs.items()
            }
            result = maybe_truncate_to_epoch_end_offsets(
                states,
                answers,
                with_epochs,
                log_end_offset=lambda _: follower.leo,
                follower_end_offset_for=lambda _, epoch: follower.end_offset_for(epoch),
            )
            for truncation in result.fetch_offsets.values():
                follower.truncate_to(truncation.offset)
            update_fetch_offset_and_maybe_mark_truncation_complete(
                states, result.fetch_offsets, lambda _: follower.cache.latest_epoch()
            )
        if without_epochs:
            decisions = truncate_to_high_watermark(states, without_epochs)
            for truncation in decisions.values():
                follower.truncate_to(truncation.offset)
            update_fetch_offset_and_maybe_mark_truncation_complete(
                states, decisions, lambda _: follower.cache.latest_epoch()
            )
        assert rounds < 50


def follower_partitions(tp: TopicPartition, leader_epoch: int, init_offset: int) -> FetcherPartitions:
    partitions = FetcherPartitions()
    partitions.add_partitions({tp: InitialFetchState(LEADER, leader_epoch, init_offset)})
    return partitions


def test_truncation_multiple_rounds_on_leader_epoch_divergence() -> None:
    """Kafka's testTruncation: follower epochs 0,2,4 at offsets 0,1,2; leader epochs 1,3,5. Every answer names
    an epoch the follower never had, so it steps back one epoch per round until it reaches offset 0."""
    follower = Replica(cache_of((0, 0), (2, 1), (4, 2)), leo=3)
    leader = Replica(cache_of((1, 0), (3, 1), (5, 2)), leo=3, hw=2)
    partitions = follower_partitions(T1P0, 5, 3)
    rounds = run_truncation(partitions, T1P0, follower, leader)
    assert rounds == 3
    assert follower.truncations == [2, 1, 0]
    state = partitions.fetch_state(T1P0)
    assert state is not None
    assert state.state is ReplicaState.FETCHING and state.fetch_offset == 0
    assert state.is_ready_for_fetch(0)


def test_should_move_partitions_out_of_truncating_log_state() -> None:
    follower = Replica(cache_of((4, 0)), leo=0)
    leader = Replica(cache_of((4, 0)), leo=1)
    partitions = FetcherPartitions()
    partitions.add_partitions({T1P0: InitialFetchState(LEADER, 4, 0), T1P1: InitialFetchState(LEADER, 4, 0)})
    assert [s.state for s in partitions.partition_states.partition_state_values()] == [
        ReplicaState.TRUNCATING
    ] * 2
    run_truncation(partitions, T1P0, follower, leader)
    assert [s.state for s in partitions.partition_states.partition_state_values()] == [
        ReplicaState.FETCHING
    ] * 2
    assert follower.truncations == [0, 0]


def test_truncate_to_high_watermark_if_leader_epoch_info_not_available() -> None:
    high_watermark = 2
    follower = Replica(LeaderEpochFileCache(None), leo=3)  # no epochs at all
    leader = Replica(cache_of((5, 0)), leo=3)
    partitions = follower_partitions(T1P0, 5, high_watermark)
    assert run_truncation(partitions, T1P0, follower, leader) == 0
    assert follower.truncations == [high_watermark]
    assert follower.leo == high_watermark
    state = partitions.fetch_state(T1P0)
    assert state is not None and state.fetch_offset == high_watermark and state.is_ready_for_fetch(0)


def test_truncate_to_high_watermark_if_leader_epoch_request_not_supported() -> None:
    partitions = follower_partitions(T1P0, 5, 2)
    with_epochs, without_epochs = fetch_truncating_partitions(
        partitions.partition_states, lambda _: 4, 0, offset_for_leader_epoch_supported=False
    )
    assert with_epochs == {}
    assert without_epochs == [T1P0]
    assert truncate_to_high_watermark(partitions.partition_states, without_epochs) == {
        T1P0: OffsetTruncationState(2, True)
    }


def test_truncate_to_high_watermark_during_remove_partitions() -> None:
    partitions = follower_partitions(T1P0, 5, 2)
    _, without_epochs = fetch_truncating_partitions(partitions.partition_states, lambda _: None, 0)
    partitions.remove_partitions([T1P0])
    assert truncate_to_high_watermark(partitions.partition_states, without_epochs) == {}
    assert partitions.fetch_state(T1P0) is None


def test_truncation_skipped_if_no_epoch_change() -> None:
    follower = Replica(LeaderEpochFileCache(None), leo=0)
    leader = Replica(cache_of((1, 0), (3, 1), (5, 2)), leo=3)
    partitions = follower_partitions(T1P0, 5, 0)
    run_truncation(partitions, T1P0, follower, leader)
    assert follower.truncations == [0]
    before = partitions.fetch_state(T1P0)
    # The same leader epoch again (a repeated LEADER_AND_ISR): the state is kept, no new truncation.
    partitions.add_partitions({T1P0: InitialFetchState(LEADER, 5, 3)})
    assert partitions.fetch_state(T1P0) == before
    run_truncation(partitions, T1P0, follower, leader)
    assert follower.truncations == [0]
    # A new epoch truncates again.
    partitions.add_partitions({T1P0: InitialFetchState(LEADER, 6, 3)})
    state = partitions.fetch_state(T1P0)
    assert state is not None and state.state is ReplicaState.TRUNCATING and state.fetch_offset == 3


def test_truncate_to_epoch_end_offsets_during_remove_partitions() -> None:
    partitions = follower_partitions(T1P0, 0, 0)
    with_epochs, _ = fetch_truncating_partitions(partitions.partition_states, lambda _: 0, 0)
    assert with_epochs == {T1P0: EpochData(current_leader_epoch=0, leader_epoch=0)}
    # While the request is out, the partition is removed and re-added with the next epoch.
    partitions.remove_partitions([T1P0])
    assert filter_epoch_end_offsets(partitions.partition_states, with_epochs, {T1P0: ok(0, 1)}) == {}
    partitions.add_partitions({T1P0: InitialFetchState(LEADER, 1, 0)})
    result = maybe_truncate_to_epoch_end_offsets(
        partitions.partition_states,
        {T1P0: ok(0, 1)},
        with_epochs,
        log_end_offset=lambda _: 0,
        follower_end_offset_for=lambda _, e: (e, 0),
    )
    assert result.fetch_offsets == {} and not result.partitions_with_error and not result.partitions_to_fail
    state = partitions.fetch_state(T1P0)
    assert state is not None and state.state is ReplicaState.TRUNCATING and state.current_leader_epoch == 1


def test_truncation_throws_if_leader_returns_partitions_not_requested() -> None:
    partitions = follower_partitions(T1P0, 0, 0)
    with_epochs, _ = fetch_truncating_partitions(partitions.partition_states, lambda _: 0, 0)
    with pytest.raises(IllegalStateError):
        maybe_truncate_to_epoch_end_offsets(
            partitions.partition_states,
            {T1P0: ok(0, 0), ("topic2", 0): ok(0, 0)},
            with_epochs,
            log_end_offset=lambda _: 0,
            follower_end_offset_for=lambda _, e: (e, 0),
        )


def test_fenced_truncation_fails_partition() -> None:
    partitions = follower_partitions(T1P0, 0, 0)
    with_epochs, _ = fetch_truncating_partitions(partitions.partition_states, lambda _: 0, 0)
    result = maybe_truncate_to_epoch_end_offsets(
        partitions.partition_states,
        {T1P0: EpochEndOffset(Errors.FENCED_LEADER_EPOCH, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)},
        with_epochs,
        log_end_offset=lambda _: 0,
        follower_end_offset_for=lambda _, e: (e, 0),
    )
    assert result.partitions_to_fail == {T1P0}
    for tp in result.partitions_to_fail:
        partitions.mark_partition_failed(tp)
    assert partitions.fetch_state(T1P0) is None
    assert T1P0 in partitions.failed_partitions
    view = partitions.describe(T1P0, 0, LEADER.broker_id, failed_fetch_offset=7)
    assert view is not None and (view.state, view.fetch_offset) == ("failed", 7)
    # The next LEADER_AND_ISR brings it back.
    partitions.add_partitions({T1P0: InitialFetchState(LEADER, 1, 0)})
    assert T1P0 not in partitions.failed_partitions


def test_unknown_leader_epoch_in_truncation_is_retried_after_back_off() -> None:
    partitions = follower_partitions(T1P0, 0, 0)
    with_epochs, _ = fetch_truncating_partitions(partitions.partition_states, lambda _: 0, 0)
    result = maybe_truncate_to_epoch_end_offsets(
        partitions.partition_states,
        {T1P0: EpochEndOffset(Errors.UNKNOWN_LEADER_EPOCH, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)},
        with_epochs,
        log_end_offset=lambda _: 0,
        follower_end_offset_for=lambda _, e: (e, 0),
    )
    assert result.partitions_with_error == {T1P0}
    partitions.delay_partitions(result.partitions_with_error, 1000, now_ms=0)
    # Delayed partitions are not picked for truncation until the back-off is over.
    assert fetch_truncating_partitions(partitions.partition_states, lambda _: 0, 999) == ({}, [])
    assert fetch_truncating_partitions(partitions.partition_states, lambda _: 0, 1000)[0] == with_epochs
    view = partitions.describe(T1P0, 500, LEADER.broker_id)
    assert view is not None and view.state == "delayed"


# -- properties -------------------------------------------------------------------------------------------


def replica_with(epochs: list[tuple[int, int]]) -> Replica:
    """A replica whose log holds ``count`` records in each ``(epoch, count)``, in order."""
    cache = LeaderEpochFileCache(None)
    offset = 0
    for epoch, count in epochs:
        cache.assign(epoch, offset)
        offset += count
    return Replica(cache, leo=offset)


@st.composite
def diverged_logs(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int]:
    """A follower and a leader that share a prefix (epochs 0..k-1) and then diverge: each has epochs the other
    never had (drawn from 10..29, disjoint), the leader's newest epoch being the newest of all."""
    counts = st.integers(1, 4)
    shared = [(e, draw(counts)) for e in range(draw(st.integers(0, 3)))]
    pool = draw(st.permutations(list(range(10, 30))))
    n_follower = draw(st.integers(0, 5))
    n_leader = draw(st.integers(1, 5))
    follower_epochs = sorted(pool[:n_follower])
    leader_epochs = sorted(pool[n_follower : n_follower + n_leader])
    if follower_epochs and leader_epochs[-1] < follower_epochs[-1]:
        leader_epochs[-1] = 30
    follower = shared + [(e, draw(counts)) for e in follower_epochs]
    leader = shared + [(e, draw(counts)) for e in leader_epochs]
    return follower, leader, sum(c for _, c in shared)


@settings(max_examples=300, deadline=None)
@given(diverged_logs())
def test_truncation_cuts_exactly_the_divergent_suffix(
    logs: tuple[list[tuple[int, int]], list[tuple[int, int]], int],
) -> None:
    """However the two histories interleave, the rounds end with the follower cut back to exactly the shared
    prefix (never below it: the high watermark is 0 here, so a fall-back would show), in Fetching state."""
    follower_epochs, leader_epochs, shared_end = logs
    follower = replica_with(follower_epochs)
    leader = replica_with(leader_epochs)
    partitions = follower_partitions(T1P0, 100, 0)
    rounds = run_truncation(partitions, T1P0, follower, leader)
    state = partitions.fetch_state(T1P0)
    assert state is not None and state.state is ReplicaState.FETCHING
    assert follower.leo == shared_end
    assert state.fetch_offset == shared_end
    assert rounds <= len(follower_epochs)
    assert follower.truncations == sorted(follower.truncations, reverse=True)
