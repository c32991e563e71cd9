"""The log cleaner's core (Kafka's ``Cleaner``, ``OffsetMap``, ``CleanedTransactionMetadata`` and the
cleaner's ``MemoryRecords.filterTo``): what a pass over a compacted log keeps. No threads, no timers: the
broker's shell (``broker.log_cleaner``) decides when and which log, this module does one pass.

A pass over a log whose cleanable range is ``[first_dirty, first_uncleanable)`` (first_uncleanable: the
lowest of the last stable offset, which is at most the high watermark, the active segment's base offset
and the first segment younger than ``min.compaction.lag.ms``):

1. The offset map: for every record with a key in the dirty range, key -> its last offset, from whole
   batches below ``first_uncleanable`` (aborted transactional batches and control batches put nothing in
   it), until the map holds ``log.cleaner.dedupe.buffer.size / 24 * log.cleaner.io.buffer.load.factor``
   keys (Kafka's 16-byte hash + 8-byte offset per entry). Its latest offset + 1 is where the next pass
   starts (``cleaner-offset-checkpoint``).
2. Every inactive segment from the log start below that end is rewritten, in groups that fit one segment,
   batch by batch, keeping each batch's base offset, last offset, leader epoch and producer fields:
   - a record is kept if its offset is past the map's latest offset, or its key's last offset in the map
     is not later than it; a kept tombstone (null value) puts a delete horizon (now +
     ``delete.retention.ms``) into its batch (attributes bit 6, base timestamp = the horizon) the first
     time; a later pass past the horizon drops it. Records without a key are dropped (Kafka refuses them
     on a compacted topic);
   - data batches of aborted transactions are dropped; a COMMIT marker goes once no data of its
     transaction was seen in the pass, an ABORT marker once the aborted data is gone, both only after
     their own delete horizon;
   - a batch left without records is dropped, except the last batch of a producer that is still active
     (kept as an empty batch, for its sequence and epoch) and the last batch of the pass's range;
   - a batch whose records all stay, with no horizon to set, is copied byte for byte.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from protocol import environment
from protocol.compression import CompressionType, compress
from protocol.control_records import ControlRecordType, decode_end_txn_marker
from protocol.errors import CorruptRecordError, KafkaError
from protocol.record_codec import Record, encode_records
from protocol.records import (
    BATCH_HEADER_SIZE,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    assemble_batch,
    decode_records,
    read_header,
)
from storage.transaction_index import AbortedTxn

# Kafka's OffsetMap entry: a 16-byte MD5 of the key and an 8-byte offset.
OFFSET_MAP_ENTRY_BYTES = 24
NO_OFFSET = -1


class CleaningAbortedError(Exception):
    """The log changed (or went away) while it was being cleaned: the pass is dropped."""


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` keys, with Kafka's defaults."""

    enable: bool = True  # log.cleaner.enable
    num_threads: int = 1  # log.cleaner.threads
    dedupe_buffer_size: int = 134217728  # log.cleaner.dedupe.buffer.size (128 MiB)
    dedupe_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    io_buffer_size: int = 524288  # log.cleaner.io.buffer.size (512 KiB)
    max_io_bytes_per_second: float = 1.7976931348623157e308  # log.cleaner.io.max.bytes.per.second
    backoff_ms: int = 15000  # log.cleaner.backoff.ms

    @property
    def max_map_entries(self) -> int:
        slots = self.dedupe_buffer_size // max(self.num_threads, 1) // OFFSET_MAP_ENTRY_BYTES
        return max(int(slots * self.dedupe_buffer_load_factor), 1)


class OffsetMap:
    """Kafka's ``SkimpyOffsetMap``: key -> the last offset seen for it, and the latest offset mapped.
    Holds keys themselves (Python's dict hashes them) but counts 24 bytes an entry against its size."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._map: dict[bytes, int] = {}
        self.latest_offset = NO_OFFSET

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.max_entries

    def put(self, key: bytes, offset: int) -> None:
        self._map[key] = offset

    def get(self, key: bytes) -> int:
        return self._map.get(key, NO_OFFSET)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = NO_OFFSET


@dataclass
class _AbortedTxnSeen:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


@dataclass
class CleanedTransactionMetadata:
    """Kafka's ``CleanedTransactionMetadata``: which transactions a pass is inside of, to drop aborted
    data and the markers whose transactions have no data left. ``aborted``: the ``.txnindex`` entries of
    the range read, in first-offset order."""

    aborted: list[AbortedTxn] = field(default_factory=list)
    ongoing_committed: set[int] = field(default_factory=set)
    ongoing_aborted: dict[int, _AbortedTxnSeen] = field(default_factory=dict)

    def add_aborted_transactions(self, txns: Sequence[AbortedTxn]) -> None:
        known = {(t.producer_id, t.first_offset) for t in self.aborted}
        self.aborted.extend(t for t in txns if (t.producer_id, t.first_offset) not in known)
        self.aborted.sort(key=lambda t: t.first_offset)

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self.aborted and self.aborted[0].first_offset <= offset:
            txn = self.aborted.pop(0)
            self.ongoing_aborted[txn.producer_id] = _AbortedTxnSeen(txn)

    def on_control_batch_read(self, header: BatchHeader, marker_type: ControlRecordType | str | None) -> bool:
        """Whether the control batch may be discarded (once its delete horizon passed)."""
        self._consume_aborted_up_to(header.last_offset)
        if marker_type is None:
            return True  # an empty control batch: already cleaned
        pid = header.producer_id
        if marker_type is ControlRecordType.ABORT:
            seen = self.ongoing_aborted.pop(pid, None)
            # Its data dropped in this pass: the marker stays until the next one.
            return seen is None or seen.last_observed_batch_offset is None
        if marker_type is ControlRecordType.COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, header: BatchHeader) -> bool:
        """Whether the data batch belongs to an aborted transaction (then it is discarded)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.attributes & TRANSACTIONAL_FLAG_MASK:
            return False
        seen = self.ongoing_aborted.get(header.producer_id)
        if seen is not None:
            seen.last_observed_batch_offset = header.last_offset
            return True
        self.ongoing_committed.add(header.producer_id)
        return False


def _is_control(header: BatchHeader) -> bool:
    return bool(header.attributes & CONTROL_FLAG_MASK)


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's delete horizon (its base timestamp when attributes bit 6 is set), else None."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG_MASK else None


# A control record that is not an end-of-transaction marker (Kafka keeps those).
UNKNOWN_CONTROL = "unknown"


def _marker_type(records: Sequence[Record]) -> ControlRecordType | str | None:
    """The end-transaction marker type of a control batch's records; None for an empty control batch."""
    if not records:
        return None
    try:
        return decode_end_txn_marker(records[0].key, records[0].value).control_type
    except KafkaError:
        return UNKNOWN_CONTROL


@dataclass
class FilterStats:
    batches_read: int = 0
    batches_kept: int = 0
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_kept: int = 0
    # The earliest delete horizon this pass put into a batch (None: none set).
    delete_horizon_set_ms: int | None = None


@dataclass
class FilterContext:
    """What ``filter_batches`` decides with (one per pass; ``txn`` carries over between segments)."""

    offset_map: OffsetMap
    txn: CleanedTransactionMetadata
    # pid -> (last data offset or None, producer epoch): Kafka's lastRecordsOfActiveProducers.
    last_records_of_active_producers: dict[int, tuple[int | None, int]]
    upper_bound_offset: int  # the next offset of the last batch of the pass's range
    now_ms: int
    delete_retention_ms: int
    stats: FilterStats = field(default_factory=FilterStats)
    # Last offsets of the control batches kept (their .txnindex entries stay with them).
    kept_control_offsets: set[int] = field(default_factory=set)


def _should_retain_record(ctx: FilterContext, header: BatchHeader, record: Record) -> bool:
    offset = header.base_offset + record.offset_delta
    if offset > ctx.offset_map.latest_offset:
        return True
    if record.key is None:
        return False
    if offset < ctx.offset_map.get(record.key):
        return False
    if record.value is not None:
        return True
    horizon = delete_horizon_ms(header)
    return horizon is None or ctx.now_ms < horizon


def _is_last_batch_of_producer(ctx: FilterContext, header: BatchHeader) -> bool:
    last = ctx.last_records_of_active_producers.get(header.producer_id)
    if last is None:
        return False
    last_data_offset, epoch = last
    if last_data_offset is not None:
        return header.last_offset == last_data_offset
    return _is_control(header) and header.producer_epoch == epoch


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's ``writeEmptyHeader``: the batch's offsets, producer fields and max timestamp, no records."""
    kept = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    return assemble_batch(
        b"",
        records_count=0,
        last_offset_delta=header.last_offset_delta,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp=header.max_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        attributes=kept,
    )


def _rebuilt_batch(header: BatchHeader, records: Sequence[Record], horizon: int | None) -> bytes:
    """The batch again with ``records`` (a subset, offsets kept; its last offset kept so a producer's
    last sequence survives), with ``horizon`` as its delete horizon if given."""
    attributes = header.attributes
    base_timestamp = header.base_timestamp
    rebased: Sequence[Record] = records
    if horizon is not None and not attributes & DELETE_HORIZON_FLAG_MASK:
        attributes |= DELETE_HORIZON_FLAG_MASK
        shift = header.base_timestamp - horizon
        rebased = [
            Record(r.offset_delta, r.timestamp_delta + shift, r.key, r.value, r.headers, r.attributes)
            for r in records
        ]
        base_timestamp = horizon
    if attributes & TIMESTAMP_TYPE_MASK:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(base_timestamp + r.timestamp_delta for r in rebased)
    raw = encode_records(rebased)
    codec = attributes & COMPRESSION_CODEC_MASK
    payload = raw if codec == 0 else compress(CompressionType(codec), raw)
    return assemble_batch(
        payload,
        records_count=len(rebased),
        last_offset_delta=header.last_offset_delta,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        attributes=attributes,
    )


def filter_batch(ctx: FilterContext, data: bytes | memoryview, pos: int = 0) -> tuple[BatchHeader, bytes]:
    """What a pass keeps of the batch at ``pos`` of ``data``: its header, and the bytes to write (b"" when
    it is dropped). See the module docstring for the rules."""
    header, records = decode_records(data, pos)
    stats = ctx.stats
    stats.batches_read += 1
    stats.records_read += len(records)
    stats.bytes_read += header.size
    control = _is_control(header)
    if control:
        can_discard = ctx.txn.on_control_batch_read(header, _marker_type(records))
        horizon = delete_horizon_ms(header)
        discard_records = can_discard and horizon is not None and horizon <= ctx.now_ms
    else:
        can_discard = ctx.txn.on_batch_read(header)
        discard_records = can_discard
    retain_empty = (header.producer_id >= 0 and _is_last_batch_of_producer(ctx, header)) or (
        header.next_offset == ctx.upper_bound_offset
    )
    if discard_records and not retain_empty:
        return header, b""
    if discard_records:
        kept: list[Record] = []
    elif control:
        kept = list(records)
    else:
        kept = [r for r in records if _should_retain_record(ctx, header, r)]
    marker_for_empty_txn = can_discard and control
    needs_horizon = (marker_for_empty_txn or any(r.value is None for r in kept)) and (
        delete_horizon_ms(header) is None
    )
    if kept:
        if len(kept) == len(records) and not needs_horizon:
            out = bytes(data[pos : pos + header.size])
        else:
            horizon = ctx.now_ms + ctx.delete_retention_ms if needs_horizon else None
            out = _rebuilt_batch(header, kept, horizon)
            if horizon is not None and (
                stats.delete_horizon_set_ms is None or horizon < stats.delete_horizon_set_ms
            ):
                stats.delete_horizon_set_ms = horizon
    elif retain_empty:
        out = _empty_batch(header)
    else:
        return header, b""
    if control:
        ctx.kept_control_offsets.add(header.last_offset)
    stats.batches_kept += 1
    stats.records_kept += len(kept)
    stats.bytes_kept += len(out)
    return header, out


def filter_batches(ctx: FilterContext, data: bytes | memoryview) -> bytes:
    """``filter_batch`` over every batch of ``data`` (whole batches back to back)."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        header, kept = filter_batch(ctx, data, pos)
        out += kept
        pos += header.size
    return bytes(out)


def map_batch(
    offset_map: OffsetMap,
    txn: CleanedTransactionMetadata,
    data: bytes | memoryview,
    pos: int,
    start_offset: int,
) -> tuple[BatchHeader, bool]:
    """Kafka's ``buildOffsetMapForSegment`` for one batch: put its keyed records at or after
    ``start_offset`` into the map. Returns its header and whether the map filled up before all of its
    records went in (the batch then does not count as mapped)."""
    header, records = decode_records(data, pos)
    if _is_control(header):
        txn.on_control_batch_read(header, _marker_type(records))
    elif not txn.on_batch_read(header):
        for record in records:
            offset = header.base_offset + record.offset_delta
            if record.key is not None and offset >= start_offset:
                if offset_map.full and offset_map.get(record.key) == NO_OFFSET:
                    return header, True
                offset_map.put(record.key, offset)
    if header.last_offset >= start_offset:
        offset_map.update_latest_offset(header.last_offset)
    return header, False


# ---------------------------------------------------------------------- reading segment files


def iter_file_batches(
    path: Path, size: int, chunk_bytes: int, throttle: Callable[[int], None] | None = None
) -> Iterator[tuple[bytes, int]]:
    """``(chunk, position)``: the first ``size`` bytes of the ``.log`` file at ``path`` as chunks of whole
    batches (a chunk grows to hold a batch bigger than ``chunk_bytes``). Read through a descriptor of its
    own, so a segment deleted meanwhile still reads as it was. ``throttle`` is told the bytes read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        while pos < size:
            data = os.pread(fd, min(chunk_bytes, size - pos), pos)
            end = 0
            while end + BATCH_HEADER_SIZE <= len(data):
                header = read_header(data, end)
                if end + header.size > len(data):
                    break
                end += header.size
            if end == 0:
                if len(data) < BATCH_HEADER_SIZE:
                    raise CorruptRecordError(f"{path}: partial batch at byte {pos}")
                header = read_header(data, 0)
                if pos + header.size > size:
                    raise CorruptRecordError(f"{path}: batch at byte {pos} runs past byte {size}")
                data = os.pread(fd, header.size, pos)
                end = header.size
            if throttle is not None:
                throttle(end)
            yield data[:end], pos
            pos += end
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class SegmentView:
    """What a pass needs of one segment, taken from the log before the pass runs: its base offset, the
    base offset of the segment after it (its offsets end below that), its ``.log`` path and size."""

    base_offset: int
    next_base_offset: int
    path: Path
    size: int
    aborted: tuple[AbortedTxn, ...] = ()


def build_offset_map(
    segments: Sequence[SegmentView],
    offset_map: OffsetMap,
    start: int,
    end: int,
    aborted: Sequence[AbortedTxn],
    chunk_bytes: int,
    throttle: Callable[[int], None] | None = None,
    check_done: Callable[[], None] | None = None,
) -> None:
    """Kafka's ``buildOffsetMap`` over the dirty range ``[start, end)``: whole batches ending below
    ``end`` only (so nothing at or past the high watermark decides what goes)."""
    offset_map.clear()
    txn = CleanedTransactionMetadata()
    txn.add_aborted_transactions(aborted)
    for segment in segments:
        if segment.next_base_offset <= start or segment.base_offset >= end:
            continue
        for data, _ in iter_file_batches(segment.path, segment.size, chunk_bytes, throttle):
            if check_done is not None:
                check_done()
            pos = 0
            while pos < len(data):
                header = read_header(data, pos)
                if header.last_offset >= end:
                    return
                if header.last_offset >= start:
                    _, full = map_batch(offset_map, txn, data, pos, start)
                    if full:
                        return
                pos += header.size
        # A gap at the end of a segment: everything below the next one is mapped.
        offset_map.update_latest_offset(min(segment.next_base_offset, end) - 1)


def group_segments_by_size(
    segments: Sequence[SegmentView], max_size: int, max_offset_span: int = 2**31 - 1
) -> list[list[SegmentView]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose sizes add up to at most ``max_size``
    and whose offsets fit one segment's index, each group to become one cleaned segment."""
    groups: list[list[SegmentView]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        total = segments[i].size
        i += 1
        while (
            i < len(segments)
            and total + segments[i].size <= max_size
            and (
                segments[i].size == 0
                or segments[i].next_base_offset - 1 - group[0].base_offset <= max_offset_span
            )
        ):
            group.append(segments[i])
            total += segments[i].size
            i += 1
        groups.append(group)
    return groups


def clean_group_into(
    group: Sequence[SegmentView],
    ctx: FilterContext,
    out_path: Path,
    chunk_bytes: int,
    throttle: Callable[[int], None] | None = None,
    check_done: Callable[[], None] | None = None,
) -> list[AbortedTxn]:
    """Kafka's ``cleanSegments`` minus the swap: write what the pass keeps of ``group`` to ``out_path``
    (fsynced), and return the ``.txnindex`` entries the cleaned segment keeps."""
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for segment in group:
            ctx.txn.add_aborted_transactions(segment.aborted)
            for data, _ in iter_file_batches(segment.path, segment.size, chunk_bytes, throttle):
                if check_done is not None:
                    check_done()
                kept = filter_batches(ctx, data)
                if kept:
                    if throttle is not None:
                        throttle(len(kept))
                    os.write(fd, kept)
        environment.fsync(fd)
    finally:
        os.close(fd)
    return [t for s in group for t in s.aborted if t.last_offset in ctx.kept_control_offsets]


class Throttler:
    """Kafka's ``Throttler``: called with the bytes just read or written, it sleeps (on the calling
    thread, the cleaner's) whenever the rate since the last check exceeds ``bytes_per_second``."""

    CHECK_INTERVAL_S = 0.3

    def __init__(
        self,
        bytes_per_second: float,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self._clock = clock or time.monotonic
        self._sleep = sleep or time.sleep
        self._period_start = self._clock()
        self._observed = 0
        self.slept_s = 0.0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.bytes_per_second >= 1e300:
            return
        self._observed += nbytes
        now = self._clock()
        elapsed = now - self._period_start
        if elapsed < self.CHECK_INTERVAL_S and self._observed < self.bytes_per_second * self.CHECK_INTERVAL_S:
            return
        wanted = self._observed / self.bytes_per_second
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
            self.slept_s += wanted - elapsed
        self._period_start = self._clock()
        self._observed = 0
