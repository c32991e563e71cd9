"""``DelayedProduce`` (acks=-1 waits for the HW) and ``DelayedFetch`` (long-poll for ``min_bytes``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import cast

from broker.delayed import DelayedOperation
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.records import BatchHeader


@dataclass(slots=True)
class ProducePartitionStatus:
    required_offset: int  # last offset appended + 1
    base_offset: int
    log_start_offset: int
    error: Errors = Errors.NONE
    error_message: str = ""
    acks_pending: bool = True
    record_errors: list[tuple[int, str]] = field(default_factory=list)
    # The batches this answer acknowledges (headers with their offsets), for the acknowledgement journal.
    batches: tuple[BatchHeader, ...] = ()
    # The broker's time stamped on the batches of a LogAppendTime topic, else -1 (Kafka's logAppendTime).
    log_append_time_ms: int = -1
    # On a compacted topic, each record's (offset, key in hex, CRC-32C of its value or None for a
    # tombstone), for the acknowledgement journal (the report's compaction_kept_latest).
    records: tuple[tuple[int, str, int | None], ...] | None = None


def _responded(_: object) -> None:
    """What a completed operation keeps in place of its response callback."""


class DelayedProduce(DelayedOperation):
    """Completes when, for every partition, the HW reached the batch or an error is known; expires with
    REQUEST_TIMED_OUT (Kafka's ``DelayedProduce``)."""

    def __init__(
        self,
        delay_ms: int,
        statuses: dict[TopicPartition, ProducePartitionStatus],
        check: Callable[[TopicPartition, int], tuple[bool, Errors]],
        respond: Callable[[dict[TopicPartition, ProducePartitionStatus]], None],
    ) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self._check = check
        self._respond = respond

    def try_complete(self) -> bool:
        for tp, status in self.statuses.items():
            if not status.acks_pending:
                continue
            done, error = self._check(tp, status.required_offset)
            if error != Errors.NONE:
                status.acks_pending = False
                status.error = error
                status.error_message = f"{tp[0]}-{tp[1]}: {error.name} while waiting for the high watermark"
            elif done:
                status.acks_pending = False
        if all(not s.acks_pending for s in self.statuses.values()):
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        for tp, status in self.statuses.items():
            if status.acks_pending:
                status.acks_pending = False
                status.error = Errors.REQUEST_TIMED_OUT
                status.error_message = (
                    f"{tp[0]}-{tp[1]}: the high watermark did not reach offset {status.required_offset - 1} "
                    f"within timeout_ms={self.delay_ms}"
                )
        respond, self._respond = self._respond, _responded
        respond(self.statuses)


@dataclass(slots=True)
class FetchPartitionStatus:
    fetch_offset: int
    current_leader_epoch: int
    max_bytes: int
    log_start_offset: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class FetchParams:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: dict[TopicPartition, FetchPartitionStatus] = field(default_factory=dict)
    # Kafka's IsolationLevel: 1 (read_committed) reads only below the LSO.
    isolation_level: int = 0

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


class DelayedFetch(DelayedOperation):
    """Completes when enough new data is there, when a partition's state changed (leadership, epoch,
    truncation below the fetch offset), or at ``max_wait_ms`` (Kafka's ``DelayedFetch``). ``available``
    returns the bytes now readable for one partition, or None when the partition must be answered now.

    An incremental session's FETCH reads only the partitions that are not quiet (see
    ``ReplicaManager.select_follower_partitions``) but waits on all of the session's: ``quiet_status`` gives
    a quiet partition's fetch state once something happened to it (``note_change``), and from then on it
    counts like the others."""

    def __init__(
        self,
        params: FetchParams,
        available: Callable[[TopicPartition, FetchPartitionStatus, FetchParams], int | None],
        respond: Callable[[FetchParams], None],
        quiet_status: Callable[[TopicPartition], FetchPartitionStatus | None] | None = None,
    ) -> None:
        super().__init__(params.max_wait_ms)
        self.params = params
        self._available = available
        self._respond = respond
        self._quiet_status = quiet_status
        self._woken: dict[TopicPartition, FetchPartitionStatus] = {}
        # Whether something happened to a quiet partition while the fetch waited.
        self.quiet_partition_changed = False

    def note_change(self, key: Hashable) -> None:
        if self._quiet_status is None or key in self.params.partitions or key in self._woken:
            return
        tp = cast(TopicPartition, key)
        status = self._quiet_status(tp)
        if status is not None:
            self._woken[tp] = status
            self.quiet_partition_changed = True

    def try_complete(self) -> bool:
        accumulated = 0
        for partitions in (self.params.partitions, self._woken):
            for tp, status in partitions.items():
                n = self._available(tp, status, self.params)
                if n is None:
                    return self.force_complete()
                accumulated += min(n, status.max_bytes)
                if accumulated >= self.params.min_bytes:
                    return self.force_complete()
        return False

    def on_complete(self) -> None:
        # Completed, the operation may linger under other keys until its purgatory is purged: it keeps
        # nothing that holds a request or its response.
        respond, self._respond = self._respond, _responded
        self._quiet_status = None
        self._woken = {}
        respond(self.params)
