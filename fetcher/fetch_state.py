"""Per-partition fetch state of a replica fetcher (Kafka's ``PartitionFetchState``, ``ReplicaState`` and the
clients' ``PartitionStates``).

A partition a fetcher follows is either Truncating (it must find out, with OFFSET_FOR_LEADER_EPOCH, where its
log diverges from the leader's before fetching) or Fetching; either may be delayed after an error (back-off).
Partitions that failed for good are not here: the fetcher keeps them in a separate set (Kafka's
``failedPartitions``) until the partition is added again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from protocol.common import TopicPartition
from protocol.replication import FetchStateView, InitialFetchState

# DESCRIBE_REPLICA_STATE fetch_state.state values.
STATE_TRUNCATING = "truncating"
STATE_FETCHING = "fetching"
STATE_DELAYED = "delayed"
STATE_FAILED = "failed"


class ReplicaState(Enum):
    TRUNCATING = "Truncating"
    FETCHING = "Fetching"


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """Where a follower fetches one partition from.

    ``fetch_offset``: the next offset to fetch (while truncating: the offset truncation falls back to).
    ``lag``: the leader's high watermark minus the follower's log end offset after the last fetch, None if
    not known yet. ``current_leader_epoch``: the leader epoch the follower believes in, sent with every
    request so the leader can fence stale followers. ``delay_until_ms``: back off until then (None: not
    delayed).
    ``last_fetched_epoch``: the epoch of the last fetched batch, None if unknown.
    """

    fetch_offset: int
    lag: int | None
    current_leader_epoch: int
    delay_until_ms: int | None
    state: ReplicaState
    last_fetched_epoch: int | None = None

    def is_delayed(self, now_ms: int) -> bool:
        return self.delay_until_ms is not None and self.delay_until_ms - now_ms > 0

    def is_ready_for_fetch(self, now_ms: int) -> bool:
        return self.state is ReplicaState.FETCHING and not self.is_delayed(now_ms)

    def is_truncating(self, now_ms: int) -> bool:
        return self.state is ReplicaState.TRUNCATING and not self.is_delayed(now_ms)

    @property
    def is_replica_in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0

    def delayed(self, now_ms: int, delay_ms: int) -> PartitionFetchState:
        return dataclasses.replace(self, delay_until_ms=now_ms + delay_ms)

    def state_name(self, now_ms: int) -> str:
        """The DESCRIBE_REPLICA_STATE name: "delayed" wins over "truncating" / "fetching"."""
        if self.is_delayed(now_ms):
            return STATE_DELAYED
        return STATE_TRUNCATING if self.state is ReplicaState.TRUNCATING else STATE_FETCHING

    def __str__(self) -> str:
        return (
            f"FetchState(fetchOffset={self.fetch_offset}, currentLeaderEpoch={self.current_leader_epoch}, "
            f"lastFetchedEpoch={self.last_fetched_epoch}, state={self.state.value}, lag={self.lag}, "
            f"delayUntilMs={self.delay_until_ms})"
        )


S = TypeVar("S")


class PartitionStates(Generic[S]):
    """An insertion-ordered map of partition -> state. Fetchers move a partition to the end after using it, so
    that partitions take turns at the front of size-limited fetch responses."""

    def __init__(self) -> None:
        self._map: dict[TopicPartition, S] = {}

    def move_to_end(self, tp: TopicPartition) -> None:
        state = self._map.pop(tp, None)
        if state is not None:
            self._map[tp] = state

    def update_and_move_to_end(self, tp: TopicPartition, state: S) -> None:
        self._map.pop(tp, None)
        self._map[tp] = state

    def update(self, tp: TopicPartition, state: S) -> None:
        """Set the state; a known partition keeps its place."""
        self._map[tp] = state

    def remove(self, tp: TopicPartition) -> None:
        self._map.pop(tp, None)

    def partition_set(self) -> list[TopicPartition]:
        return list(self._map)

    def clear(self) -> None:
        self._map.clear()

    def contains(self, tp: TopicPartition) -> bool:
        return tp in self._map

    __contains__ = contains

    def state_iterator(self) -> Iterator[S]:
        return iter(list(self._map.values()))

    def for_each(self, fn: Callable[[TopicPartition, S], None]) -> None:
        for tp, state in list(self._map.items()):
            fn(tp, state)

    def partition_state_map(self) -> dict[TopicPartition, S]:
        """A copy, in order."""
        return dict(self._map)

    def partition_state_values(self) -> list[S]:
        return list(self._map.values())

    def state_value(self, tp: TopicPartition) -> S | None:
        return self._map.get(tp)

    @property
    def size(self) -> int:
        return len(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def set(self, partition_to_state: Mapping[TopicPartition, S]) -> None:
        """Replace everything, grouping partitions by topic (topics in order of first appearance)."""
        self._map.clear()
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in partition_to_state:
            by_topic.setdefault(tp[0], []).append(tp)
        for tps in by_topic.values():
            for tp in tps:
                self._map[tp] = partition_to_state[tp]


def partition_fetch_state(
    current: PartitionFetchState | None, initial: InitialFetchState
) -> PartitionFetchState:
    """The state of a partition (re-)added to a fetcher (Kafka's ``partitionFetchState`` without truncation on
    fetch, which isrsim's FETCH does not carry): unchanged if the leader epoch is the same, so a repeated
    LEADER_AND_ISR does not truncate again; otherwise Truncating from the initial offset.

    The initial offset is the replica manager's choice (``fetcher.truncation.initial_fetch_offset`` for its
    truncation mode): by default the follower's log end offset when its log has leader epochs (truncation
    then finds where it diverges from the leader, KIP-101), else its high watermark (and truncation cuts the
    log back to it)."""
    if current is not None and current.current_leader_epoch == initial.current_leader_epoch:
        return current
    if initial.init_offset < 0:
        raise ValueError(f"initial fetch offset must be >= 0, got {initial.init_offset}")
    return PartitionFetchState(
        fetch_offset=initial.init_offset,
        lag=None,
        current_leader_epoch=initial.current_leader_epoch,
        delay_until_ms=None,
        state=ReplicaState.TRUNCATING,
        last_fetched_epoch=None,
    )


class FetcherPartitions:
    """The partitions one fetcher follows: their states plus the ones that failed (Kafka's ``partitionStates``
    and ``failedPartitions`` of ``AbstractFetcherThread``)."""

    def __init__(self) -> None:
        self.partition_states: PartitionStates[PartitionFetchState] = PartitionStates()
        self.failed_partitions: set[TopicPartition] = set()

    def add_partitions(
        self, initial_fetch_states: Mapping[TopicPartition, InitialFetchState]
    ) -> set[TopicPartition]:
        self.failed_partitions.difference_update(initial_fetch_states)
        for tp, initial in initial_fetch_states.items():
            current = self.partition_states.state_value(tp)
            self.partition_states.update_and_move_to_end(tp, partition_fetch_state(current, initial))
        return set(initial_fetch_states)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        removed: dict[TopicPartition, PartitionFetchState] = {}
        for tp in tps:
            state = self.partition_states.state_value(tp)
            self.partition_states.remove(tp)
            if state is not None:
                removed[tp] = state
        return removed

    def remove_all_partitions(self) -> dict[TopicPartition, PartitionFetchState]:
        return self.remove_partitions(self.partition_states.partition_set())

    def mark_partition_failed(self, tp: TopicPartition) -> None:
        """Stop fetching ``tp`` until it is added again (e.g. by the next LEADER_AND_ISR)."""
        self.failed_partitions.add(tp)
        self.remove_partitions([tp])

    def delay_partitions(self, tps: Iterable[TopicPartition], delay_ms: int, now_ms: int) -> None:
        """Back off from ``tps`` for ``delay_ms`` (partitions already delayed keep their deadline)."""
        for tp in tps:
            state = self.partition_states.state_value(tp)
            if state is not None and not state.is_delayed(now_ms):
                self.partition_states.update_and_move_to_end(tp, state.delayed(now_ms, delay_ms))

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self.partition_states.state_value(tp)

    def describe(
        self, tp: TopicPartition, now_ms: int, leader_id: int, failed_fetch_offset: int = -1
    ) -> FetchStateView | None:
        """What DESCRIBE_REPLICA_STATE reports for ``tp`` (fetching from ``leader_id``); None if this fetcher
        does not know it. A failed partition has no fetch state left, so its offset is the caller's (e.g. the
        log end offset) and its leader epoch is unknown (-1)."""
        if tp in self.failed_partitions:
            return FetchStateView(STATE_FAILED, failed_fetch_offset, None, leader_id, -1)
        state = self.partition_states.state_value(tp)
        if state is None:
            return None
        return FetchStateView(
            state.state_name(now_ms), state.fetch_offset, state.lag, leader_id, state.current_leader_epoch
        )

    @property
    def partition_count(self) -> int:
        return self.partition_states.size
