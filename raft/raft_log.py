"""The metadata log as the Raft core sees it (Kafka's ``ReplicatedLog``), and an in-memory one.

The core needs only: the log end offset and the epoch of its last batch, Kafka's ``endOffsetForEpoch``,
appends as leader (values in one batch stamped with the epoch) and as follower (fetched bytes as they came),
whole-batch reads, truncation and flush. ``validate_offset_and_epoch`` and ``truncate_to_end_offset`` are
Kafka's default methods of ``ReplicatedLog``, written once here over those.

:class:`MemoryRaftLog` keeps real record batches (``protocol.records``) and the project's own
``LeaderEpochFileCache`` (without a checkpoint file) in memory; ``crash()`` forgets what was not flushed.
The controller uses :class:`raft.metadata_log.MetadataLog`, the project's ``Log`` on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protocol.records import build_simple_batch, decode_records, iter_batches
from storage.leader_epoch_cache import LeaderEpochFileCache

UNDEFINED_EPOCH = -1


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """Kafka's ``OffsetAndEpoch``. Ordered as Kafka compares logs: by epoch, then by offset."""

    epoch: int
    offset: int


class RaftLog(Protocol):
    @property
    def end_offset(self) -> int: ...

    @property
    def start_offset(self) -> int: ...

    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch (0 for an empty log)."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= ``epoch`` and its end offset; for an epoch above every known one, the
        log end offset and the last fetched epoch (Kafka's ``KafkaMetadataLog.endOffsetForEpoch``)."""
        ...

    def append_as_leader(self, values: list[bytes], epoch: int) -> tuple[int, int]:
        """Append ``values`` as one batch stamped ``epoch``; returns (base offset, last offset)."""
        ...

    def append_as_follower(self, records: bytes) -> None: ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from ``offset`` (a batch boundary), at least one if there is one."""
        ...

    def truncate_to(self, offset: int) -> None: ...

    def flush(self) -> None: ...


def validate_offset_and_epoch(log: RaftLog, offset: int, epoch: int) -> OffsetAndEpoch | None:
    """Kafka's ``ReplicatedLog.validateOffsetAndEpoch`` (no snapshots): None when a fetch at ``offset``
    whose previous batch has ``epoch`` agrees with this log, else where the fetcher's log diverges."""
    if offset == 0 and epoch == 0 and log.start_offset == 0:
        return None
    end = log.end_offset_for_epoch(epoch)
    if end.epoch != epoch or end.offset < offset:
        return end
    return None


def truncate_to_end_offset(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Kafka's ``ReplicatedLog.truncateToEndOffset``: cut the log where it diverges from the leader's
    ``diverging`` end of an epoch; returns the new log end offset."""
    if diverging.epoch == 0:
        target = min(diverging.offset, log.end_offset)
    else:
        local = log.end_offset_for_epoch(diverging.epoch)
        target = min(local.offset, diverging.offset) if local.epoch == diverging.epoch else local.offset
    log.truncate_to(target)
    return log.end_offset


@dataclass(frozen=True, slots=True)
class MemoryBatch:
    base_offset: int
    last_offset: int
    epoch: int
    data: bytes


class MemoryRaftLog:
    """A ``RaftLog`` in memory with real batches and the project's epoch cache."""

    def __init__(self) -> None:
        self.batches: list[MemoryBatch] = []
        self._entries: list[tuple[int, int, bytes | None]] = []
        self.cache = LeaderEpochFileCache(None)
        self.flushed_offset = 0

    @property
    def end_offset(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else 0

    @property
    def start_offset(self) -> int:
        return 0

    def last_fetched_epoch(self) -> int:
        return self.batches[-1].epoch if self.batches else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        found_epoch, offset = self.cache.end_offset_for(epoch, self.end_offset)
        if found_epoch == UNDEFINED_EPOCH:
            return OffsetAndEpoch(self.last_fetched_epoch(), self.end_offset)
        return OffsetAndEpoch(found_epoch, offset)

    def append_as_leader(self, values: list[bytes], epoch: int) -> tuple[int, int]:
        base = self.end_offset
        data = build_simple_batch(values, base_offset=base, partition_leader_epoch=epoch, base_timestamp=0)
        self._add(data)
        return base, self.end_offset - 1

    def append_as_follower(self, records: bytes) -> None:
        for position, header in iter_batches(records):
            if header.base_offset != self.end_offset:
                raise ValueError(f"follower append at {header.base_offset}, log end offset {self.end_offset}")
            self._add(bytes(records[position : position + header.size]))

    def _add(self, data: bytes) -> None:
        for _, header in iter_batches(data):
            self.cache.assign(header.partition_leader_epoch, header.base_offset)
            self.batches.append(
                MemoryBatch(header.base_offset, header.last_offset, header.partition_leader_epoch, data)
            )
            _, records = decode_records(data)
            self._entries.extend(
                (header.base_offset + r.offset_delta, header.partition_leader_epoch, r.value) for r in records
            )

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for batch in self.batches:
            if batch.last_offset < offset:
                continue
            if out and len(out) + len(batch.data) > max_bytes:
                break
            out += batch.data
        return bytes(out)

    def truncate_to(self, offset: int) -> None:
        self.batches = [b for b in self.batches if b.last_offset < offset]
        del self._entries[self.end_offset :]
        self.cache.truncate_from_end(self.end_offset)
        self.flushed_offset = min(self.flushed_offset, self.end_offset)

    def flush(self) -> None:
        self.flushed_offset = self.end_offset

    def crash(self) -> None:
        """A power cut: what was not flushed is gone."""
        self.truncate_to(self.flushed_offset)

    def entries(self) -> list[tuple[int, int, bytes | None]]:
        """(offset, epoch, value) of every record, for tests (the list itself: do not change it)."""
        return self._entries


__all__ = [
    "UNDEFINED_EPOCH",
    "MemoryRaftLog",
    "OffsetAndEpoch",
    "RaftLog",
    "truncate_to_end_offset",
    "validate_offset_and_epoch",
]
