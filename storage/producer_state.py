"""Producer state of one partition (KIP-98 idempotence): Kafka's ``ProducerStateManager``, its snapshot
files, and the rebuilding of the state from the log.

The per-producer entries and the checks of an append are in ``producer_state_entry``. The state is
snapshotted into ``<20-digit offset>.snapshot`` files in the partition directory, in Kafka's snapshot format
(version 1): ``version i16 | crc u32 (CRC-32C of every byte after it) | entries i32 count | per producer:
producer_id i64, epoch i16, last_sequence i32, last_offset i64, offset_delta i32, timestamp i64,
coordinator_epoch i32, current_txn_first_offset i64``. A snapshot at offset N describes the log below N.
As in Kafka a snapshot keeps only the last batch of each producer; the batches after the snapshot's offset
are replayed from the log on load (:func:`rebuild_producer_state`). Snapshots are written when a segment
rolls (at its base offset, fsynced with the next flush), at a clean stop (at the log end), and after a
truncation or a load (at the new log end); those of deleted segments go with them, and a truncation drops
every snapshot beyond the new log end.

Transactions (Kafka's ``ongoingTxns`` / ``unreplicatedTxns``): every producer's open transaction is kept by
its first offset; a marker moves it to the completed ones until the high watermark passes the marker. The
partition's first unstable offset is the smallest first offset of both, and its last stable offset (LSO)
that offset when it is below the high watermark, else the high watermark. A snapshot keeps each producer's
open transaction (``current_txn_first_offset``), so a reload knows it; a producer with an open
transaction never expires.

Synchronous and free of sockets; time comes from the injected ``clock_ms``. Snapshot files are the only I/O.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from protocol import environment
from protocol.control_records import EndTransactionMarker, is_control
from protocol.errors import CorruptRecordError
from protocol.records import BatchHeader
from storage.producer_state_entry import (
    NO_PRODUCER_ID,
    AppendOrigin,
    BatchMetadata,
    ProducerAppendInfo,
    ProducerStateEntry,
    last_sequence,
)
from storage.transaction_index import CompletedTxn
from storage.verification_guard import VerificationStates

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "apply_batches",
    "decode_snapshot",
    "encode_snapshot",
    "find_duplicate",
    "finish_append",
    "rebuild_producer_state",
]

logger = logging.getLogger(__name__)

# Kafka's ``producer.id.expiration.ms`` default: a producer id idle this long is forgotten.
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

SNAPSHOT_SUFFIX = ".snapshot"
PRODUCER_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # the CRC covers every byte after version and crc


class CorruptSnapshotError(Exception):
    """A snapshot file that cannot be read: wrong version, CRC mismatch, or not the size it claims."""


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> int | None:
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's producer snapshot (version 1) of ``entries``."""
    items = list(entries)
    buf = bytearray(_SNAPSHOT_HEAD.size + _SNAPSHOT_ENTRY.size * len(items))
    _SNAPSHOT_HEAD.pack_into(buf, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(items))
    pos = _SNAPSHOT_HEAD.size
    for entry in items:
        _SNAPSHOT_ENTRY.pack_into(
            buf,
            pos,
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
        pos += _SNAPSHOT_ENTRY.size
    struct.pack_into(">I", buf, 2, crc32c(memoryview(buf)[_CRC_START:]))
    return bytes(buf)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """The entries of a snapshot; raises :class:`CorruptSnapshotError`."""
    if len(data) < _SNAPSHOT_HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes, a snapshot has at least {_SNAPSHOT_HEAD.size}")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if crc != computed:
        raise CorruptSnapshotError(f"CRC mismatch (stored 0x{crc:08x}, computed 0x{computed:08x})")
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not fill {len(data)} bytes")
    entries: list[ProducerStateEntry] = []
    for i in range(count):
        (producer_id, epoch, seq, offset, offset_delta, timestamp, coordinator_epoch, txn_first) = (
            _SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size)
        )
        entry = ProducerStateEntry(
            producer_id, epoch, coordinator_epoch, timestamp, current_txn_first_offset=max(-1, txn_first)
        )
        if offset >= 0:
            entry.batch_metadata.append(BatchMetadata(seq, offset, offset_delta, timestamp))
        entries.append(entry)
    return entries


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise CorruptSnapshotError(f"{path} is gone") from e
    return decode_snapshot(data)


@dataclass(slots=True)
class TxnMetadata:
    """One transaction of the partition (Kafka's ``TxnMetadata``): its first offset, and its marker's offset
    once it is completed."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None


class ProducerStateManager:
    """The producer state of one partition and its snapshot files in ``log_dir`` (Kafka's
    ``ProducerStateManager``). ``map_end_offset`` is the offset the in-memory state describes the log up to
    (exclusive); the owner (``Log``) moves it after every append."""

    def __init__(
        self,
        topic_partition: str,
        log_dir: Path,
        *,
        clock_ms: Callable[[], int],
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.topic_partition = topic_partition
        self.log_dir = Path(log_dir)
        self._clock_ms = clock_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.log_prefix = f"[ProducerStateManager partition={topic_partition}] "
        self._producers: dict[int, ProducerStateEntry] = {}
        # Open transactions, and completed ones whose marker is not yet below the high watermark, by their
        # first offset.
        self._ongoing_txns: dict[int, TxnMetadata] = {}
        self._unreplicated_txns: dict[int, TxnMetadata] = {}
        # KIP-890: the producers whose transactional append the leader is verifying with the coordinator.
        self.verification_states = VerificationStates()
        self._snapshots: list[int] = []  # offsets of the snapshot files, sorted
        self._unflushed: set[int] = set()
        self._last_map_offset = 0
        self._last_snap_offset = 0
        self._load_snapshots()

    # ------------------------------------------------------------------ state

    @property
    def map_end_offset(self) -> int:
        return self._last_map_offset

    def update_map_end_offset(self, offset: int) -> None:
        self._last_map_offset = offset

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        return self._producers

    @property
    def is_empty(self) -> bool:
        return not self._producers and not self._unreplicated_txns

    # ------------------------------------------------------------------ transactions

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open, or ended by a marker not yet below the
        high watermark (Kafka's ``firstUnstableOffset``); None when there is none."""
        firsts = [*self._ongoing_txns, *self._unreplicated_txns]
        return min(firsts) if firsts else None

    def first_undecided_offset(self) -> int | None:
        return min(self._ongoing_txns) if self._ongoing_txns else None

    @property
    def ongoing_txns(self) -> Mapping[int, TxnMetadata]:
        return self._ongoing_txns

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below ``high_watermark`` no longer hold the LSO."""
        self._remove_unreplicated_transactions(high_watermark)

    def _remove_unreplicated_transactions(self, offset: int) -> None:
        for first in [
            f
            for f, t in self._unreplicated_txns.items()
            if t.last_offset is not None and t.last_offset < offset
        ]:
            del self._unreplicated_txns[first]

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO right after ``completed``'s marker, before it is marked complete (Kafka's
        ``lastStableOffset(CompletedTxn)``: the first offset of the oldest other open transaction, else the
        offset after the marker). It goes into the aborted transaction's ``.txnindex`` entry."""
        others = [f for f, t in self._ongoing_txns.items() if t.producer_id != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The marker of ``completed`` is written: it stops being open, and holds the first unstable offset
        until the high watermark passes the marker."""
        txn = self._ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(
                f"{self.log_prefix}attempted to complete transaction {completed}, which was not started"
            )
        txn.last_offset = completed.last_offset
        self._unreplicated_txns[completed.first_offset] = txn

    def _load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self._producers[entry.producer_id] = entry
        if entry.current_txn_first_offset >= 0:
            self._ongoing_txns[entry.current_txn_first_offset] = TxnMetadata(
                entry.producer_id, entry.current_txn_first_offset
            )

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self._producers.get(producer_id) or ProducerStateEntry.empty(producer_id)
        return ProducerAppendInfo(self.topic_partition, producer_id, current, origin)

    def update(self, append_info: ProducerAppendInfo) -> None:
        if append_info.producer_id == NO_PRODUCER_ID:
            raise ValueError(f"invalid producer id {append_info.producer_id} for {self.topic_partition}")
        updated = append_info.to_entry()
        current = self._producers.get(append_info.producer_id)
        if current is not None:
            current.update(updated)
        else:
            self._producers[append_info.producer_id] = updated
        for first_offset in append_info.started_transactions:
            self._ongoing_txns[first_offset] = TxnMetadata(append_info.producer_id, first_offset)

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        """Idle for ``producer.id.expiration.ms`` with no open transaction (Kafka's ``isProducerExpired``)."""
        return (
            entry.current_txn_first_offset < 0
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> None:
        """Forget producer ids idle for ``producer.id.expiration.ms``."""
        for producer_id in [p for p, e in self._producers.items() if self._is_expired(now_ms, e)]:
            del self._producers[producer_id]
        self.verification_states.remove_expired(now_ms, self.producer_id_expiration_ms)

    # ------------------------------------------------------------------ snapshots

    def _path(self, offset: int) -> Path:
        return self.log_dir / snapshot_file_name(offset)

    def _load_snapshots(self) -> None:
        offsets: list[int] = []
        if self.log_dir.is_dir():
            for path in self.log_dir.iterdir():
                offset = parse_snapshot_file_name(path.name)
                if offset is not None and path.is_file():
                    offsets.append(offset)
        self._snapshots = sorted(offsets)

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    def oldest_snapshot_offset(self) -> int | None:
        return self._snapshots[0] if self._snapshots else None

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write a snapshot at the map end offset unless one is there already. Without ``sync`` the file
        is not fsynced now (a roll does that later, in :meth:`flush_snapshots`)."""
        if self._last_map_offset <= self._last_snap_offset:
            return None
        offset = self._last_map_offset
        path = self._path(offset)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(encode_snapshot(self._producers.values()))
            if sync:
                f.flush()
                environment.fsync(f.fileno())
        environment.replace(tmp, path)
        if not sync:
            self._unflushed.add(offset)
        i = bisect.bisect_left(self._snapshots, offset)
        if i == len(self._snapshots) or self._snapshots[i] != offset:
            self._snapshots.insert(i, offset)
        self._last_snap_offset = offset
        logger.info(
            "%swrote producer snapshot at offset %d with %d producer ids",
            self.log_prefix,
            offset,
            len(self._producers),
        )
        return path

    @property
    def has_unflushed_snapshots(self) -> bool:
        return bool(self._unflushed)

    def flush_snapshots(self) -> None:
        """fsync the snapshots written without ``sync``."""
        for offset in sorted(self._unflushed):
            try:
                fd = os.open(self._path(offset), os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                environment.fsync(fd)
            finally:
                os.close(fd)
        self._unflushed.clear()

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        i = bisect.bisect_left(self._snapshots, offset)
        if i < len(self._snapshots) and self._snapshots[i] == offset:
            del self._snapshots[i]
        self._unflushed.discard(offset)
        self._path(offset).unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        for snap in [s for s in self._snapshots if s < offset]:
            self._remove_and_delete_snapshot(snap)

    def delete_snapshots_at(self, offsets: Iterable[int]) -> None:
        """Remove the snapshots of deleted segments (their base offsets)."""
        for offset in offsets:
            self._remove_and_delete_snapshot(offset)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots that do not sit at a segment's base offset, except the latest one if it lies
        beyond every segment base (the one a clean stop wrote)."""
        self._load_snapshots()
        bases = set(segment_base_offsets)
        max_base = max(bases) if bases else None
        latest_stray: int | None = None
        for offset in list(self._snapshots):
            if offset in bases:
                continue
            if latest_stray is not None:
                self._remove_and_delete_snapshot(latest_stray)
            latest_stray = offset
        if latest_stray is not None and max_base is not None and latest_stray < max_base:
            self._remove_and_delete_snapshot(latest_stray)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while self._snapshots:
            offset = self._snapshots[-1]
            path = self._path(offset)
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as e:
                logger.warning("%sfailed to load producer snapshot %s: %s", self.log_prefix, path, e)
                self._remove_and_delete_snapshot(offset)
                continue
            logger.info("%sloading producer state from snapshot %s", self.log_prefix, path)
            for entry in entries:
                if not self._is_expired(now_ms, entry):
                    self._load_producer_entry(entry)
            self._last_snap_offset = offset
            self._last_map_offset = offset
            return
        self._last_snap_offset = log_start_offset
        self._last_map_offset = log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop the snapshots outside ``(log_start_offset, log_end_offset]`` and, unless the state already
        ends at ``log_end_offset``, reload it from the latest snapshot left (the owner then replays the log
        from :attr:`map_end_offset`)."""
        for offset in list(self._snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self._remove_and_delete_snapshot(offset)
        if log_end_offset != self._last_map_offset:
            self._producers.clear()
            self._ongoing_txns.clear()
            # The log end is assumed to be at or below the high watermark: no completed marker is above it.
            self._unreplicated_txns.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything, snapshots included; the state now ends at ``offset``."""
        self._producers.clear()
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
        for snap in list(self._snapshots):
            self._remove_and_delete_snapshot(snap)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def truncate_fully_and_reload_snapshots(self) -> None:
        self.truncate_fully_and_start_at(0)
        self._load_snapshots()

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated_transactions(log_start_offset)
        if self._last_map_offset < log_start_offset:
            self._last_map_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = latest if latest is not None else log_start_offset


# The end-transaction marker of a control batch and its record's timestamp ((None, -1) for an empty one).
MarkerReader = Callable[[BatchHeader], tuple[EndTransactionMarker | None, int]]
# Where an aborted transaction's ``.txnindex`` entry goes: (the transaction, the LSO after its marker).
AbortedTxnSink = Callable[[CompletedTxn, int], None]


def apply_batches(
    manager: ProducerStateManager,
    headers: Iterable[BatchHeader],
    origin: AppendOrigin,
    read_marker: MarkerReader | None = None,
) -> tuple[dict[int, ProducerAppendInfo], list[CompletedTxn]]:
    """Check ``headers`` (offsets assigned) for ``origin`` and return the append infos per producer id and
    the transactions their markers end, without changing ``manager``. Raises the error a leader answers
    with. ``read_marker`` reads a control batch's marker (a control batch is skipped without it)."""
    updated: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    for header in headers:
        if header.producer_id < 0:
            continue
        info = updated.get(header.producer_id)
        if info is None:
            info = manager.prepare_update(header.producer_id, origin)
            updated[header.producer_id] = info
        marker, timestamp = (None, -1)
        if is_control(header) and read_marker is not None:
            marker, timestamp = read_marker(header)
        done = info.append(header, marker, timestamp)
        if done is not None:
            completed.append(done)
    return updated, completed


def finish_append(
    manager: ProducerStateManager,
    infos: Iterable[ProducerAppendInfo],
    completed: Iterable[CompletedTxn],
    on_aborted: AbortedTxnSink | None,
) -> None:
    """Take in what :func:`apply_batches` found once the batches are in the log: the producers' new state,
    then each ended transaction (an aborted one first handed to ``on_aborted`` with the LSO after its
    marker, for the ``.txnindex``), as Kafka's ``UnifiedLog.append``."""
    for info in infos:
        manager.update(info)
    for txn in completed:
        if txn.is_aborted and on_aborted is not None:
            on_aborted(txn, manager.last_stable_offset(txn))
        manager.complete_txn(txn)


def find_duplicate(manager: ProducerStateManager, headers: Iterable[BatchHeader]) -> BatchMetadata | None:
    """The first batch of ``headers`` that repeats one of its producer's retained batches: its metadata
    (Kafka answers the whole append with it)."""
    for header in headers:
        if header.producer_id < 0:
            continue
        entry = manager.last_entry(header.producer_id)
        if entry is None:
            continue
        duplicate = entry.find_duplicate_batch(
            header.producer_epoch, header.base_sequence, last_sequence(header)
        )
        if duplicate is not None:
            return duplicate
    return None


def rebuild_producer_state(
    manager: ProducerStateManager,
    *,
    segment_base_offsets: list[int],
    log_start_offset: int,
    last_offset: int,
    read_headers: Callable[[int], Iterable[BatchHeader]],
    now_ms: int,
    read_marker: MarkerReader | None = None,
    on_aborted: AbortedTxnSink | None = None,
) -> None:
    """Bring ``manager`` to the log below ``last_offset`` (Kafka's ``rebuildProducerState``): reload the
    latest snapshot at or below it, replay the batches from there, and snapshot at ``last_offset``.
    ``read_headers(offset)`` yields the headers of the log's batches from the one containing ``offset``;
    ``read_marker`` reads a control batch's marker, and ``on_aborted`` receives each aborted transaction
    the replay ends (its ``.txnindex`` entry, written again if it is missing)."""
    bases = sorted(segment_base_offsets)
    to_snapshot = set(bases[-2:])
    was_empty = manager.is_empty and manager.map_end_offset >= last_offset
    manager.truncate_and_reload(log_start_offset, last_offset, now_ms)
    if last_offset > manager.map_end_offset and not was_empty:
        start = max(manager.map_end_offset, log_start_offset)
        for header in _until_damaged(manager, read_headers(start)):
            if header.base_offset >= last_offset:
                break
            if header.base_offset < start:
                continue
            if header.base_offset in to_snapshot and header.base_offset > manager.map_end_offset:
                manager.update_map_end_offset(header.base_offset)
                manager.take_snapshot()
            if header.producer_id >= 0:
                infos, completed = apply_batches(manager, [header], AppendOrigin.REPLICATION, read_marker)
                finish_append(manager, infos.values(), completed, on_aborted)
    manager.update_map_end_offset(last_offset)
    manager.take_snapshot()


def _until_damaged(manager: ProducerStateManager, headers: Iterable[BatchHeader]) -> Iterator[BatchHeader]:
    """``headers`` up to a damaged batch, which a log loaded without recovery may hold (reads refuse it
    too): the state then ends before it, and the producers of later batches are unknown ones."""
    try:
        yield from headers
    except CorruptRecordError as e:
        logger.error("%sproducer state rebuilt only up to a damaged batch: %s", manager.log_prefix, e.message)
