"""The small interface between the replica manager (``broker``) and the replica fetchers (``fetcher``).

The arrow goes one way: ``broker`` implements ``FollowerReplicaManager`` and owns a ``FetcherManagerLike``;
``fetcher`` never imports ``broker``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from protocol.common import TopicPartition
from protocol.replication import AppendResult, FetchStateView, InitialFetchState


class FollowerPartition(Protocol):
    """One follower partition as the fetcher sees it."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    def latest_epoch(self) -> int | None: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """The follower's own ``LeaderEpochFileCache.end_offset_for(epoch, LEO)``: (epoch, end offset)."""
        ...

    def truncate_to(self, offset: int, reason: str) -> None: ...

    def truncate_fully_and_start_at(self, offset: int, reason: str) -> None: ...

    def append_as_follower(self, records: bytes) -> AppendResult | None: ...

    def update_high_watermark(self, leader_hw: int) -> int: ...

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int) -> None: ...


class FollowerReplicaManager(Protocol):
    """What the fetchers need from the replica manager."""

    @property
    def broker_id(self) -> int: ...

    def follower_partition(self, tp: TopicPartition) -> FollowerPartition | None:
        """The partition if this broker still follows it, else None (the fetcher drops it)."""
        ...

    def follower_appends(self, appends: Mapping[TopicPartition, bytes]) -> AbstractAsyncContextManager[None]:
        """Entered before the fetcher appends ``appends`` (records per partition, from one FETCH answer):
        may prepare them off the event loop (the broker makes the new leader epochs they carry durable)."""
        ...

    def on_fetch_error(self, tp: TopicPartition, error_code: int, message: str) -> None:
        """Journals a fetch error (``fetch_error``)."""
        ...

    def on_partition_failed(self, tp: TopicPartition, error_code: int, message: str) -> None:
        """The fetcher stopped fetching ``tp`` until the next LEADER_AND_ISR (Kafka's failed partitions):
        journals one ``fetch_error`` with the error that caused it."""
        ...

    def on_fatal_error(self, tp: TopicPartition, message: str) -> None:
        """Kafka <= 2.0's fatal exit (``FatalExitError``, kept in the older truncation modes): a follower's
        log is ahead of its leader's and unclean leader election is disabled, so the broker must not
        truncate; it journals why, shuts down cleanly and exits with status 1."""
        ...


class FetcherManagerLike(Protocol):
    def add_fetcher_for_partitions(self, states: Mapping[TopicPartition, InitialFetchState]) -> None: ...

    def remove_fetcher_for_partitions(
        self, tps: Iterable[TopicPartition], *, shutdown_idle: bool = True
    ) -> None: ...

    def shutdown_idle_fetchers(self) -> None: ...

    def fetch_state(self, tp: TopicPartition) -> FetchStateView | None: ...


class NoFetcherManager:
    """A broker with no fetchers (followers are not served): every call is a no-op."""

    def add_fetcher_for_partitions(self, states: Mapping[TopicPartition, InitialFetchState]) -> None:
        return None

    def remove_fetcher_for_partitions(
        self, tps: Iterable[TopicPartition], *, shutdown_idle: bool = True
    ) -> None:
        return None

    def shutdown_idle_fetchers(self) -> None:
        return None

    def fetch_state(self, tp: TopicPartition) -> FetchStateView | None:
        return None
