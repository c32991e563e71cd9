"""``replication.truncation.mode``: KIP-101's two scenarios and KIP-279's, replayed on the pure functions.

Each replica is a real ``LeaderEpochFileCache`` plus a log of one record per offset (the record is the epoch
it was written in, and a name, so two logs can be compared). A leader answers OFFSET_FOR_LEADER_EPOCH as its
mode's leader did; a follower is handed its initial fetch offset, truncated on becoming a follower, and
driven through truncation rounds with ``fetcher.truncation``'s functions, then fetches the leader's records
from its fetch offset. The old modes get the KIPs' examples wrong in the way the KIPs describe; the default
gets all three right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetcher.fetch_state import FetcherPartitions, ReplicaState
from fetcher.truncation import (
    EpochEndOffset,
    OffsetTruncationState,
    become_follower_truncation_offset,
    fetch_truncating_partitions,
    get_offset_truncation_state_pre_kip_279,
    initial_fetch_offset,
    maybe_truncate_to_epoch_end_offsets,
    truncate_to_high_watermark,
    truncation_reason,
    update_fetch_offset_and_maybe_mark_truncation_complete,
)
from protocol.api_keys import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from protocol.common import BrokerEndpoint, TopicPartition
from protocol.errors import Errors
from protocol.replication import InitialFetchState, TruncationMode
from storage.leader_epoch_cache import LeaderEpochFileCache

TP: TopicPartition = ("t", 0)
DEFAULT = TruncationMode.LEADER_EPOCH
PRE_279 = TruncationMode.LEADER_EPOCH_PRE_KIP_279
HW = TruncationMode.HIGH_WATERMARK

Record = tuple[int, str]  # (leader epoch, name)


@dataclass
class Replica:
    broker_id: int
    mode: TruncationMode
    records: list[Record] = field(default_factory=list)
    hw: int = 0
    cache: LeaderEpochFileCache = field(default_factory=lambda: LeaderEpochFileCache(None))
    truncations: list[int] = field(default_factory=list)

    @property
    def leo(self) -> int:
        return len(self.records)

    def append(self, record: Record) -> None:
        # Every log assigns the epoch of an appended batch (Kafka's Log.append, all versions).
        self.cache.assign(record[0], self.leo)
        self.records.append(record)

    def write_as_leader(self, epoch: int, *names: str) -> None:
        for name in names:
            self.append((epoch, name))

    def become_leader(self, epoch: int) -> None:
        # Kafka 2.1+ caches the new epoch at the LEO on becoming leader; before, only on the first append.
        if self.mode is DEFAULT:
            self.cache.assign(epoch, self.leo)

    def truncate_to(self, offset: int) -> None:
        self.truncations.append(offset)
        del self.records[offset:]
        # As broker.log.Log.truncate_to: at or past the log end, the epoch cache is still trimmed to it (an
        # epoch a leader cached at its log end and never wrote in goes).
        self.cache.truncate_from_end(self.leo)
        self.hw = min(self.hw, self.leo)

    def answer(self, epoch: int) -> EpochEndOffset:
        """This replica, as leader, answering OFFSET_FOR_LEADER_EPOCH in its mode."""
        if self.mode is PRE_279:
            return EpochEndOffset(
                Errors.NONE, UNDEFINED_EPOCH, self.cache.end_offset_for_pre_kip_279(epoch, self.leo)
            )
        answered_epoch, offset = self.cache.end_offset_for(epoch, self.leo)
        if offset == UNDEFINED_EPOCH_OFFSET:
            answered_epoch = UNDEFINED_EPOCH
        return EpochEndOffset(Errors.NONE, answered_epoch, offset)


def become_follower(follower: Replica, leader: Replica, leader_epoch: int) -> FetcherPartitions:
    """The broker side of LEADER_AND_ISR (make_followers) for ``follower``'s mode."""
    cut = become_follower_truncation_offset(follower.mode, high_watermark=follower.hw)
    if cut is not None:
        follower.truncate_to(cut)
    init = initial_fetch_offset(
        follower.mode,
        log_end_offset=follower.leo,
        high_watermark=follower.hw,
        has_epochs=follower.cache.latest_epoch() is not None,
    )
    partitions = FetcherPartitions()
    endpoint = BrokerEndpoint(leader.broker_id, "leader.invalid", 9092)
    partitions.add_partitions({TP: InitialFetchState(endpoint, leader_epoch, init)})
    return partitions


def truncate(follower: Replica, leader: Replica, partitions: FetcherPartitions) -> int:
    """The fetcher's truncation phase, round after round, until the partition is Fetching; returns the
    number of OFFSET_FOR_LEADER_EPOCH requests sent."""
    states = partitions.partition_states
    requests = 0

    def latest(_: TopicPartition) -> int | None:
        return follower.cache.latest_epoch()

    while True:
        state = states.state_value(TP)
        assert state is not None
        if state.state is ReplicaState.FETCHING:
            return requests
        assert requests < 20
        with_epochs, without_epochs = fetch_truncating_partitions(states, latest, 0, mode=follower.mode)
        if with_epochs:
            requests += 1
            answers = {tp: leader.answer(data.leader_epoch) for tp, data in with_epochs.items()}
            result = maybe_truncate_to_epoch_end_offsets(
                states,
                answers,
                with_epochs,
                log_end_offset=lambda _: follower.leo,
                follower_end_offset_for=lambda _, epoch: follower.cache.end_offset_for(epoch, follower.leo),
                mode=follower.mode,
            )
            assert not result.partitions_with_error and not result.partitions_to_fail
            for truncation in result.fetch_offsets.values():
                follower.truncate_to(truncation.offset)
            update_fetch_offset_and_maybe_mark_truncation_complete(states, result.fetch_offsets, latest)
        if without_epochs:
            decisions = truncate_to_high_watermark(states, without_epochs)
            if follower.mode is not HW:  # in high-watermark mode the broker already cut the log
                for truncation in decisions.values():
                    follower.truncate_to(truncation.offset)
            update_fetch_offset_and_maybe_mark_truncation_complete(states, decisions, latest)


def catch_up(follower: Replica, leader: Replica, partitions: FetcherPartitions) -> None:
    """FETCH from the fetch offset to the leader's log end (the fetch offset is inside the leader's log)."""
    state = partitions.partition_states.state_value(TP)
    assert state is not None and state.state is ReplicaState.FETCHING
    assert state.fetch_offset == follower.leo
    assert state.fetch_offset <= leader.leo, "OFFSET_OUT_OF_RANGE"
    for record in leader.records[state.fetch_offset :]:
        follower.append(record)
    follower.hw = leader.hw = leader.leo


def follow(follower: Replica, leader: Replica, leader_epoch: int) -> int:
    partitions = become_follower(follower, leader, leader_epoch)
    requests = truncate(follower, leader, partitions)
    catch_up(follower, leader, partitions)
    return requests


# -- KIP-101, scenario 1: high watermark truncation followed by an immediate leader election


def kip_101_lost_write(mode: TruncationMode) -> tuple[Replica, Replica]:
    """B leads epoch 0; A follows. Both hold m1 and m2; m2 was acknowledged (B's HW is 2) but A has not yet
    learnt the HW from its next fetch (A's HW is 1). A restarts and becomes B's follower again; before it
    fetches anything, B dies and A is elected leader (epoch 1)."""
    a, b = Replica(1, mode), Replica(2, mode)
    b.become_leader(0)
    b.write_as_leader(0, "m1", "m2")
    for record in b.records:
        a.append(record)
    b.hw, a.hw = 2, 1
    # A restarts (its checkpointed HW is 1) and gets LEADER_AND_ISR: follower of B, epoch 0.
    partitions = become_follower(a, b, 0)
    truncate(a, b, partitions)
    # B dies before A fetches; A becomes the leader.
    a.become_leader(1)
    return a, b


@pytest.mark.parametrize("mode", [DEFAULT, PRE_279])
def test_kip_101_lost_write_leader_epoch_modes_keep_the_acknowledged_write(mode: TruncationMode) -> None:
    a, _ = kip_101_lost_write(mode)
    assert a.records == [(0, "m1"), (0, "m2")]
    assert all(offset >= 2 for offset in a.truncations)


def test_kip_101_lost_write_high_watermark_mode_loses_it() -> None:
    a, b = kip_101_lost_write(HW)
    assert a.truncations == [1]  # on becoming a follower, before any fetch
    assert a.records == [(0, "m1")]
    # The new leader writes m3 at offset 1; when B returns it keeps m2 (its HW is 2), so the logs diverge.
    a.write_as_leader(1, "m3")
    a.hw = 1
    follow(b, a, 1)
    assert a.records == [(0, "m1"), (1, "m3")]
    assert b.records == [(0, "m1"), (0, "m2")]


# -- KIP-101, scenario 2: replica divergence on restart after multiple hard failures


def kip_101_divergence(mode: TruncationMode) -> tuple[Replica, Replica]:
    """A leads epoch 0 with m1 and m2, both acknowledged (HW 2 on A). B had fetched m2, but it was still in
    the page cache when both brokers lost power: B comes back with m1 only. B comes back first and is
    elected (epoch 1), takes m3 at offset 1; then A comes back and follows B."""
    a, b = Replica(1, mode), Replica(2, mode)
    a.become_leader(0)
    a.write_as_leader(0, "m1", "m2")
    b.append(a.records[0])
    a.hw, b.hw = 2, 1
    b.become_leader(1)
    b.write_as_leader(1, "m3")
    b.hw = 1
    follow(a, b, 1)
    return a, b


@pytest.mark.parametrize("mode", [DEFAULT, PRE_279])
def test_kip_101_divergence_leader_epoch_modes_converge(mode: TruncationMode) -> None:
    a, b = kip_101_divergence(mode)
    assert a.truncations == [1]  # A's epoch 0 ends at 1 on B
    assert a.records == b.records == [(0, "m1"), (1, "m3")]


def test_kip_101_divergence_high_watermark_mode_diverges() -> None:
    a, b = kip_101_divergence(HW)
    assert a.truncations == [2]  # its HW: nothing cut
    assert a.records == [(0, "m1"), (0, "m2")]
    assert b.records == [(0, "m1"), (1, "m3")]
    assert a.leo == b.leo  # same length, different records at offset 1: nothing tells the follower


# -- KIP-279: fast leader fail-over, four leader changes


def kip_279_divergence(mode: TruncationMode) -> tuple[Replica, Replica, int]:
    """KIP-279's case as Kafka's own acceptance test plays it (EpochDrivenReplicationProtocolAcceptanceTest.
    logsShouldNotDivergeOnUncleanLeaderElections): two replicas, each restart elects the one that is up.

    epoch 0, A leads: m1, replicated to B.    epoch 1, B leads (A down): m2.
    epoch 2, A leads (B down): m3 m4 m5.      epoch 3, B leads (A down): m6.
    epoch 4, A leads (B down): m7 m8.         Then B comes back as A's follower.

    B's latest epoch, 3, is one A never had; A's next epoch after it, 4, starts at offset 4, past B's
    log end (3), although the two logs differ from offset 1."""
    a, b = Replica(1, mode), Replica(2, mode)
    a.become_leader(0)
    a.write_as_leader(0, "m1")
    b.append(a.records[0])
    a.hw = b.hw = 1
    b.become_leader(1)
    b.write_as_leader(1, "m2")
    a.become_leader(2)
    a.write_as_leader(2, "m3", "m4", "m5")
    b.become_leader(3)
    b.write_as_leader(3, "m6")
    a.become_leader(4)
    a.write_as_leader(4, "m7", "m8")
    requests = follow(b, a, 4)
    return a, b, requests


def test_kip_279_default_mode_converges_in_three_rounds() -> None:
    a, b, requests = kip_279_divergence(DEFAULT)
    # Asks epoch 3 -> (2, 4): B has no epoch 2, cuts to its epoch 1's end (2) and asks epoch 1 -> (0, 1).
    assert b.truncations == [2, 1]
    assert requests == 2
    assert b.records == a.records


def test_kip_279_pre_kip_279_mode_diverges() -> None:
    a, b, requests = kip_279_divergence(PRE_279)
    assert requests == 1
    assert b.truncations == [3]  # the leader's 4 is past B's log end: nothing cut
    assert b.leo == a.leo
    assert b.records[:3] == [(0, "m1"), (1, "m2"), (3, "m6")]
    assert a.records[:3] == [(0, "m1"), (2, "m3"), (2, "m4")]
    assert b.records[3:] == a.records[3:]  # the rest was fetched from A


def test_kip_279_leader_answers_of_the_two_leader_epoch_modes() -> None:
    leader = Replica(1, PRE_279)
    leader.write_as_leader(0, "m1")
    leader.write_as_leader(2, "m3", "m4", "m5")
    leader.write_as_leader(4, "m7", "m8")
    # Before KIP-279 the answer is an offset only: the start of the next epoch the leader has.
    assert leader.answer(3) == EpochEndOffset(Errors.NONE, UNDEFINED_EPOCH, 4)
    leader.mode = DEFAULT
    # KIP-279: the largest epoch <= 3 the leader has (2), with its end offset.
    assert leader.answer(3) == EpochEndOffset(Errors.NONE, 2, 4)


# -- the pieces, one by one


def test_pre_kip_279_truncation_state_is_final_and_ignores_any_epoch() -> None:
    def decide(end_offset: int, epoch: int = UNDEFINED_EPOCH) -> OffsetTruncationState:
        return get_offset_truncation_state_pre_kip_279(
            TP, EpochEndOffset(Errors.NONE, epoch, end_offset), fetch_offset=7, log_end_offset=20
        )

    assert decide(UNDEFINED_EPOCH_OFFSET) == OffsetTruncationState(7, True)  # falls back to the HW
    assert decide(12) == OffsetTruncationState(12, True)
    assert decide(20) == OffsetTruncationState(20, True)
    assert decide(35) == OffsetTruncationState(20, True)
    assert decide(12, epoch=9) == OffsetTruncationState(12, True)


def test_end_offset_for_pre_kip_279_is_kafka_1_1_end_offset_for() -> None:
    cache = LeaderEpochFileCache(None)
    assert cache.end_offset_for_pre_kip_279(UNDEFINED_EPOCH, 5) == 5  # empty: -1 is "the latest"
    assert cache.end_offset_for_pre_kip_279(0, 5) == UNDEFINED_EPOCH_OFFSET
    for epoch, start in ((2, 0), (4, 10), (7, 30)):
        cache.assign(epoch, start)
    assert cache.end_offset_for_pre_kip_279(7, 42) == 42  # the latest epoch: the log end
    assert cache.end_offset_for_pre_kip_279(4, 42) == 30
    assert cache.end_offset_for_pre_kip_279(5, 42) == 30  # not in the cache: start of the next one
    assert cache.end_offset_for_pre_kip_279(1, 42) == UNDEFINED_EPOCH_OFFSET  # below the first epoch
    assert cache.end_offset_for_pre_kip_279(8, 42) == UNDEFINED_EPOCH_OFFSET  # above the latest
    assert cache.end_offset_for_pre_kip_279(UNDEFINED_EPOCH, 42) == UNDEFINED_EPOCH_OFFSET
    # Today's answer for an epoch below the first names that epoch and the first start offset instead.
    assert cache.end_offset_for(1, 42) == (1, 0)


@pytest.mark.parametrize(
    ("mode", "has_epochs", "expected"),
    [(DEFAULT, True, 9), (DEFAULT, False, 4), (PRE_279, True, 4), (PRE_279, False, 4), (HW, True, 4)],
)
def test_initial_fetch_offset(mode: TruncationMode, has_epochs: bool, expected: int) -> None:
    assert initial_fetch_offset(mode, log_end_offset=9, high_watermark=4, has_epochs=has_epochs) == expected


def test_only_high_watermark_mode_truncates_on_becoming_a_follower() -> None:
    assert become_follower_truncation_offset(HW, high_watermark=4) == 4
    assert become_follower_truncation_offset(DEFAULT, high_watermark=4) is None
    assert become_follower_truncation_offset(PRE_279, high_watermark=4) is None


def test_high_watermark_mode_never_asks_the_leader() -> None:
    a = Replica(1, HW)
    a.write_as_leader(3, "m1", "m2")
    partitions = FetcherPartitions()
    endpoint = BrokerEndpoint(2, "leader.invalid", 9092)
    partitions.add_partitions({TP: InitialFetchState(endpoint, 4, 1)})
    with_epochs, without = fetch_truncating_partitions(partitions.partition_states, lambda _: 3, 0, mode=HW)
    assert with_epochs == {} and without == [TP]
    with_epochs, without = fetch_truncating_partitions(
        partitions.partition_states, lambda _: 3, 0, mode=PRE_279
    )
    assert list(with_epochs) == [TP] and with_epochs[TP].leader_epoch == 3


def test_truncation_reasons_name_the_rule() -> None:
    assert [truncation_reason(m) for m in TruncationMode] == [
        "leader_epoch",
        "leader_epoch_pre_kip_279",
        "high_watermark",
    ]


def test_mode_parse_names_the_allowed_values() -> None:
    assert TruncationMode.parse(" High-Watermark ") is HW
    with pytest.raises(ValueError, match="allowed: leader-epoch, leader-epoch-pre-kip-279, high-watermark"):
        TruncationMode.parse("zookeeper")


# -- the default converges on any history of leader changes


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2]), st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_default_mode_follower_always_ends_with_the_leaders_log(
    history: list[tuple[int, int, bool]],
) -> None:
    """Two replicas; each step elects one of them in a new epoch (clean or not), it writes some records,
    and the other either follows it at once or is down until a later step. At the end the replica that is
    not leading follows the leader: in the default mode its log is then the leader's, record for record."""
    replicas = {1: Replica(1, DEFAULT), 2: Replica(2, DEFAULT)}
    names = iter(range(10_000))
    leader_id = 1
    for epoch, (leader_id, count, replicate) in enumerate(history):
        leader = replicas[leader_id]
        leader.become_leader(epoch)
        leader.write_as_leader(epoch, *(f"m{next(names)}" for _ in range(count)))
        if replicate:
            follow(replicas[3 - leader_id], leader, epoch)
    leader, follower = replicas[leader_id], replicas[3 - leader_id]
    follow(follower, leader, len(history) - 1)
    assert follower.records == leader.records
