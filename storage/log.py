"""The log of one partition replica (Kafka's ``UnifiedLog`` + ``LocalLog``): segments, the leader epoch
cache, the log start offset and the recovery point.

``append_as_leader`` validates each batch as Kafka's ``LogValidator`` does (``log_validator``: header, CRC,
the records against the header, attributes), fixes what Kafka fixes (``max_timestamp`` and the timestamp
type, the CRC with them; a compressed batch with offsets out of order is built again), rewrites base
offsets and the partition leader epoch in place (the CRC does not cover them) and appends the bytes;
``append_as_follower`` validates and appends the bytes exactly as fetched; ``read`` returns file bytes made
of whole batches.

Offsets out of order on the follower path raise :class:`OffsetsOutOfOrderError`, mapped to
UNKNOWN_SERVER_ERROR (-1) as Kafka maps its ``OffsetsOutOfOrderException`` /
``UnexpectedAppendOffsetException``: it means the fetcher's state is wrong, not that the data is corrupt
(CORRUPT_MESSAGE would be retriable and invite a retry of the same bytes).

Deliberate differences from Kafka, for a simpler model of the same behaviour:

- A follower append must start exactly at the log end offset and its batches follow on, except on a
  compacted log (``allow_gaps``), where, as in Kafka, batches need only increase: the cleaner removed whole
  batches. Reads and recovery check the same way (a base offset that does not follow on is damage).
- Truncation is at batch boundaries: ``truncate_to(t)`` removes the whole batch containing ``t``, and the
  log end offset becomes that batch's base offset (Kafka sets it to ``t``). Replication only truncates to
  epoch boundaries and high watermarks, which are batch boundaries, so the two agree in practice.
- ``maybe_increment_log_start_offset`` deletes the segments below the new start at once (Kafka leaves
  that to its retention thread).
- Segments are deleted at once, not renamed ``.deleted`` and removed ``file.delete.delay.ms`` later.
- The epoch checkpoint is written synchronously on every change (Kafka flushes truncations in the
  background).
- A log start offset checkpointed beyond the log end is ignored with an error and the data kept (Kafka
  deletes every segment, assuming the files were removed by hand; here it is more likely a damaged
  checkpoint, and replication trims a follower that really is behind the leader's log start).
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from protocol import environment
from protocol.common import wall_time
from protocol.compression import CompressionType
from protocol.control_records import EndTransactionMarker, is_control, is_transactional, read_end_txn_marker
from protocol.errors import CorruptRecordError, Errors, KafkaError, OffsetOutOfRangeError
from protocol.records import BatchHeader, assign_offsets_and_epoch, iter_batches, read_header
from storage.checkpoint import LeaderEpochCheckpointFile
from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.loader import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX, load_segments
from storage.log_dir_failure import LogDirFailureChannel
from storage.log_validator import (
    TimestampType,
    ValidationResult,
    recompress_for_topic,
    validate_records_as_leader,
)
from storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    MarkerReader,
    ProducerStateManager,
    apply_batches,
    find_duplicate,
    finish_append,
    rebuild_producer_state,
)
from storage.segment import LOG_SUFFIX, LogSegment, segment_file_name
from storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn, CompletedTxn
from storage.verification_guard import SENTINEL, VerificationGuard

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def _disk(what: str) -> Callable[[Callable[Concatenate[Log, P], R]], Callable[Concatenate[Log, P], R]]:
    """Runs a ``Log`` method under its log directory's failure channel: an ``OSError`` marks the
    directory offline and becomes KafkaStorageError, and an offline directory refuses at once."""

    def decorate(method: Callable[Concatenate[Log, P], R]) -> Callable[Concatenate[Log, P], R]:
        def guarded(self: Log, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return self.failure_channel.run(
                self._log_dir_name,
                lambda: f"{what} {self._topic}-{self._partition}",
                lambda: method(self, *args, **kwargs),
            )

        guarded.__name__ = method.__name__
        guarded.__doc__ = method.__doc__
        return guarded

    return decorate


LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
NO_TIMESTAMP = -1
# ListOffsets' special timestamp for "the record with the largest timestamp" (Kafka's MAX_TIMESTAMP, v7).
MAX_TIMESTAMP = -3

Records = bytes | bytearray | memoryview


def _fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        environment.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class LogConfig:
    """Per-log settings, with Kafka's defaults: the broker's (``log.segment.bytes``,
    ``log.index.interval.bytes``, ``message.max.bytes``, ``log.roll.ms``, ``log.retention.ms``,
    ``log.retention.bytes``, ``log.cleanup.policy``) overridden by the topic's (``segment.bytes``,
    ``max.message.bytes``, ``segment.ms``, ``retention.ms``, ``retention.bytes``, ``cleanup.policy``).
    ``retention_ms`` / ``retention_bytes`` below 0: no limit."""

    segment_bytes: int = 1073741824
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    # The cleaner's (storage.cleaner): delete.retention.ms, min.compaction.lag.ms, max.compaction.lag.ms,
    # min.cleanable.dirty.ratio (defaults: log.cleaner.delete.retention.ms, ...min.compaction.lag.ms,
    # ...max.compaction.lag.ms, log.cleaner.min.cleanable.ratio).
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 9223372036854775807
    min_cleanable_dirty_ratio: float = 0.5

    @property
    def delete(self) -> bool:
        """Whether retention deletes segments (``cleanup.policy`` holds ``delete``)."""
        return "delete" in {p.strip().lower() for p in self.cleanup_policy.split(",")}

    @property
    def compact(self) -> bool:
        return "compact" in {p.strip().lower() for p in self.cleanup_policy.split(",")}


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did. ``leader_epoch`` is the partition leader epoch of the last batch (None if the
    batch carries none). ``duplicate``: nothing was written, the batch repeats one an idempotent producer
    wrote before, and the offsets are those it was written at."""

    first_offset: int
    last_offset: int
    num_batches: int
    num_records: int
    valid_bytes: int
    max_timestamp: int
    log_append_time_ms: int
    leader_epoch: int | None
    duplicate: bool = False
    # The appended batches' headers, with the offsets they were given (the acknowledgement journal's lines);
    # for a duplicate, the original batch's.
    batches: tuple[BatchHeader, ...] = ()


class OffsetsOutOfOrderError(KafkaError):
    """A follower append that does not continue the log: its first batch does not start at the log end
    offset, or its batches are not contiguous."""

    def __init__(self, message: str, *, expected_offset: int, first_offset: int) -> None:
        super().__init__(Errors.UNKNOWN_SERVER_ERROR, message)
        self.expected_offset = expected_offset
        self.first_offset = first_offset


class Log:
    """One partition's replica log in its directory ``<log.dirs>/<topic>-<partition>``.

    Use :meth:`open`. Not thread-safe: the owner (the partition) serialises calls.
    """

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        leader_epoch_cache: LeaderEpochFileCache,
        clock: Callable[[], float],
        failure_channel: LogDirFailureChannel | None = None,
        producer_state_manager: ProducerStateManager | None = None,
    ) -> None:
        self._dir = directory
        self._log_dir_name = str(directory.parent)
        self._topic = topic
        self._partition = partition
        self._allow_gaps = config.compact or any(s.allow_gaps for s in segments)
        # Bumped by whatever removes or rewrites batches (truncation, retention, a new log start, a swap):
        # a cleaner that read the log before a change does not swap in what it made of it.
        self.mutations = 0
        self._config = config
        # The topic's compression.type when it names a codec (Kafka recompresses other batches to it);
        # None for ``producer`` (the default: batches are kept as the producer compressed them).
        self.compression_type: CompressionType | None = None
        # The topic's message.timestamp.type (LogAppendTime: the leader stamps its time on each batch).
        self.timestamp_type = TimestampType.CREATE_TIME
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        # (active segment base, segment count, active segment bytes, log end) at the last flush
        self._flushed_shape: tuple[int, int, int, int] | None = None
        self._epoch_cache = leader_epoch_cache
        self._clock = clock
        self._active_created = clock()
        self._prefix = f"[Log {topic}-{partition} dir={directory}] "
        self.failure_channel = failure_channel or LogDirFailureChannel()
        self._producer_state = producer_state_manager or ProducerStateManager(
            f"{topic}-{partition}",
            directory,
            clock_ms=self._now_ms,
            producer_id_expiration_ms=config.producer_id_expiration_ms,
        )

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._config = config
        if config.compact:
            self.allow_gaps = True

    @property
    def allow_gaps(self) -> bool:
        """Whether the log is compacted: its batches need only increase (set for good once it is; a log
        cleaned once keeps its gaps whatever its policy becomes)."""
        return self._allow_gaps

    @allow_gaps.setter
    def allow_gaps(self, value: bool) -> None:
        self._allow_gaps = self._allow_gaps or value
        for segment in self._segments:
            segment.allow_gaps = self._allow_gaps

    # ------------------------------------------------------------------ loading

    @classmethod
    def open(
        cls,
        dir: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        clock: Callable[[], float] = wall_time,
        had_clean_shutdown: bool = False,
        failure_channel: LogDirFailureChannel | None = None,
        allow_gaps: bool = False,
    ) -> Log:
        """Open (or create) the log in ``dir``, the partition's own directory. ``allow_gaps``: the log is
        known to be compacted (its topic's policy, or the cleaner's checkpoint names it).

        Unless ``had_clean_shutdown``, segments holding offsets at or after ``recovery_point`` are
        recovered: every batch is validated and the first invalid, partial or out-of-order one is cut off
        with everything after it, later segments included (Kafka's ``LogLoader``). Other segments are
        trusted unless their index or tail looks wrong, in which case that segment is recovered too. A
        ``log_start_offset`` beyond the log end is ignored with an error (Kafka deletes the data). The
        epoch cache is then trimmed to ``[log start, log end)``.
        """
        directory = Path(dir)
        directory.mkdir(parents=True, exist_ok=True)
        prefix = f"[Log {topic}-{partition} dir={directory}] "
        cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT), log_prefix=prefix
        )
        allow_gaps = allow_gaps or config.compact
        segments = load_segments(
            directory,
            config.index_interval_bytes,
            recovery_point,
            cache,
            prefix,
            had_clean_shutdown,
            allow_gaps=allow_gaps,
        )
        if not segments:
            segments = [
                LogSegment.create(
                    directory,
                    log_start_offset,
                    index_interval_bytes=config.index_interval_bytes,
                    allow_gaps=allow_gaps,
                )
            ]
        log_end = segments[-1].next_offset
        if log_end < log_start_offset:
            # Kafka deletes every segment here (it assumes segment files were removed by hand). A log start
            # checkpointed beyond the data more likely means a damaged checkpoint: keep the data, say so.
            logger.error(
                "%sthe checkpointed log start offset %d is beyond the log end offset %d: ignoring it and "
                "keeping the log's %d segments (log start %d). If the segment files were removed on purpose, "
                "delete the partition directory and let the replica fetch it again",
                prefix,
                log_start_offset,
                log_end,
                len(segments),
                segments[0].base_offset,
            )
            log_start_offset = segments[0].base_offset
        log_start = max(log_start_offset, segments[0].base_offset)
        cache.truncate_from_end(log_end)
        cache.truncate_from_start(log_start)
        producer_state = ProducerStateManager(
            f"{topic}-{partition}",
            directory,
            clock_ms=lambda: int(clock() * 1000),
            producer_id_expiration_ms=config.producer_id_expiration_ms,
        )
        producer_state.remove_stray_snapshots([s.base_offset for s in segments])
        log = cls(
            directory,
            topic,
            partition,
            config,
            segments,
            log_start_offset=log_start,
            recovery_point=min(recovery_point, log_end),
            leader_epoch_cache=cache,
            clock=clock,
            failure_channel=failure_channel,
            producer_state_manager=producer_state,
        )
        log._rebuild_producer_state(log_end)
        logger.info(
            "%sloaded %d segments, log start %d, log end %d, epochs %r",
            prefix,
            len(segments),
            log_start,
            log_end,
            cache.entries(),
        )
        return log

    # ------------------------------------------------------------------ state

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        return self._epoch_cache

    @property
    def latest_epoch(self) -> int | None:
        return self._epoch_cache.latest_epoch()

    @property
    def producer_state_manager(self) -> ProducerStateManager:
        return self._producer_state

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """The segments in offset order (a copy; for tools and tests)."""
        return list(self._segments)

    def __repr__(self) -> str:
        return (
            f"Log({self._topic}-{self._partition}, start={self._log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )

    # ------------------------------------------------------------------ appends

    def _validate(self, records: Records) -> list[tuple[int, BatchHeader]]:
        if len(records) == 0:
            raise CorruptRecordError(f"{self._topic}-{self._partition}: append of zero bytes")
        try:
            return list(iter_batches(records, validate=True))
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{self._topic}-{self._partition}: {e.message}") from e

    def _validate_as_leader(self, records: Records, origin: AppendOrigin) -> ValidationResult:
        if len(records) == 0:
            raise CorruptRecordError(f"{self._topic}-{self._partition}: append of zero bytes")
        try:
            return validate_records_as_leader(
                records,
                timestamp_type=self.timestamp_type,
                now_ms=self._now_ms(),
                allow_control=origin is AppendOrigin.COORDINATOR,
            )
        except KafkaError as e:
            e.message = f"{self._topic}-{self._partition}: {e.message}"
            raise

    def _check_append_size(self, nbytes: int) -> None:
        if nbytes > self.config.segment_bytes:
            raise KafkaError(
                Errors.RECORD_LIST_TOO_LARGE,
                f"append of {nbytes} bytes to {self._topic}-{self._partition} exceeds the segment size "
                f"{self.config.segment_bytes}",
            )

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        entry = self._producer_state.last_entry(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """KIP-890 (Kafka's ``maybeStartTransactionVerification``): :data:`SENTINEL` when the producer
        already has an open transaction here (nothing to verify), else the producer's verification guard,
        made now if it has none; the append the coordinator confirms must carry it."""
        if self.has_ongoing_transaction(producer_id):
            return SENTINEL
        states = self._producer_state.verification_states
        return states.start(producer_id, sequence, epoch, self._now_ms()).guard

    def _check_verified(self, headers: list[BatchHeader], guard: VerificationGuard) -> None:
        """A transactional data batch of a producer with no open transaction needs the producer's
        current guard (Kafka's ``batchMissingRequiredVerification``), else INVALID_TXN_STATE (48)."""
        states = self._producer_state.verification_states
        for header in headers:
            if (
                is_transactional(header)
                and not is_control(header)
                and not self.has_ongoing_transaction(header.producer_id)
                and not states.guard(header.producer_id).verify(guard)
            ):
                raise KafkaError(
                    Errors.INVALID_TXN_STATE,
                    f"{self._topic}-{self._partition}: the transactional batch of producer "
                    f"{header.producer_id} (epoch {header.producer_epoch}) was not part of an ongoing "
                    "transaction: its partition was not verified with the transaction coordinator",
                )

    @_disk("appending to")
    def append_as_leader(
        self,
        records: Records,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Validate ``records`` as Kafka's ``LogValidator`` does (``log_validator``: header, CRC, the records
        against the header, attributes) and fix what it fixes (``max_timestamp``, the timestamp type of a
        LogAppendTime topic, a compressed batch's offsets out of order), give them offsets from the log end
        offset, stamp ``leader_epoch`` into every batch and append them. The log is unchanged if anything is
        invalid.

        Batches with a producer id are checked against the producer state (``producer_state``): a retry of
        one of the producer's last five batches is not written and the answer carries the offsets it was
        written at (``duplicate``); an older epoch raises INVALID_PRODUCER_EPOCH, a sequence gap
        OUT_OF_ORDER_SEQUENCE_NUMBER (sequences are checked for ``AppendOrigin.CLIENT`` only).

        Transactions: a transactional batch opens its producer's transaction (the partition's first unstable
        offset); a control batch (``AppendOrigin.COORDINATOR`` only: WriteTxnMarkers) ends it, and an
        aborted one gets its ``.txnindex`` entry in the segment of the marker.

        KIP-890 (``verification_guard`` not None: ``transaction.partition.verification.enable``): a client's
        transactional batch whose producer has no open transaction here is appended only with the
        producer's current verification guard, else INVALID_TXN_STATE; every transactional batch or
        marker written clears its producer's guard (``storage.verification_guard``)."""
        validated = self._validate_as_leader(records, origin)
        records, batches = validated.records, validated.batches
        fresh = validated.rewritten  # records is then a buffer of the validator's own
        has_control = any(is_control(h) for _, h in batches)
        if self.compression_type is not None and not has_control:
            converted = recompress_for_topic(records, batches, self.compression_type)
            if converted is not None:
                records = converted
                batches = list(iter_batches(records))
                fresh = False
        limit = self.config.max_message_bytes
        for position, header in batches:
            if header.size > limit:
                raise KafkaError(
                    Errors.MESSAGE_TOO_LARGE,
                    f"batch at byte {position} is {header.size} bytes; {self._topic}-{self._partition} "
                    f"accepts at most {limit} (max.message.bytes)",
                )
        self._check_append_size(len(records))
        buf = records if fresh and isinstance(records, bytearray) else bytearray(records)
        first_offset = self.log_end_offset
        assign_offsets_and_epoch(buf, first_offset, leader_epoch)
        headers = [read_header(buf, position) for position, _ in batches]
        if origin is AppendOrigin.CLIENT:
            duplicate = find_duplicate(self._producer_state, headers)
            if duplicate is not None:
                return LogAppendInfo(
                    first_offset=duplicate.first_offset,
                    last_offset=duplicate.last_offset,
                    num_batches=len(headers),
                    num_records=sum(h.records_count for h in headers),
                    valid_bytes=len(buf),
                    max_timestamp=duplicate.timestamp,
                    log_append_time_ms=duplicate.timestamp,  # as Kafka answers a duplicate
                    leader_epoch=None,
                    duplicate=True,
                    # The retry's bytes are the original's (so is its CRC); its offsets are the original's.
                    batches=tuple(
                        replace(h, base_offset=duplicate.first_offset)
                        for h in headers[:1]
                        if duplicate.last_offset - duplicate.first_offset == h.last_offset_delta
                    ),
                )
        if origin is AppendOrigin.CLIENT and verification_guard is not None:
            self._check_verified(headers, verification_guard)
        positions = {h.base_offset: pos for (pos, _), h in zip(batches, headers, strict=True)}
        producers, completed = apply_batches(
            self._producer_state, headers, origin, self._marker_reader(buf, positions)
        )
        self._epoch_cache.assign(leader_epoch, first_offset)
        self._append(buf, headers)
        finish_append(self._producer_state, producers.values(), completed, self._append_aborted_txn)
        for header in headers:
            if is_transactional(header):
                self._producer_state.verification_states.clear(header.producer_id)
        self._producer_state.update_map_end_offset(self.log_end_offset)
        return self._append_info(headers, len(buf), validated.log_append_time_ms)

    @_disk("appending to")
    def append_as_follower(self, records: Records) -> LogAppendInfo:
        """Validate ``records`` fetched from the leader and append them as they are. They must start at
        the log end offset and be contiguous (else :class:`OffsetsOutOfOrderError`); on a compacted log
        (``allow_gaps``) they need only start at or after it and increase, as Kafka's. Each batch's
        partition leader epoch goes into the epoch cache (Kafka assigns every batch; the cache ignores
        repeats of the latest epoch)."""
        batches = self._validate(records)
        headers = [header for _, header in batches]
        expected = self.log_end_offset
        for header in headers:
            if header.base_offset < expected if self._allow_gaps else header.base_offset != expected:
                raise OffsetsOutOfOrderError(
                    f"{self._topic}-{self._partition}: follower append expected a batch at offset "
                    f"{expected}, got one at {header.base_offset} (first offset {headers[0].base_offset}, "
                    f"log end offset {self.log_end_offset})",
                    expected_offset=expected,
                    first_offset=headers[0].base_offset,
                )
            expected = header.next_offset
        self._check_append_size(len(records))
        positions = {h.base_offset: pos for pos, h in batches}
        producers, completed = apply_batches(
            self._producer_state, headers, AppendOrigin.REPLICATION, self._marker_reader(records, positions)
        )
        for header in headers:
            self._epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        self._append(records, headers)
        finish_append(self._producer_state, producers.values(), completed, self._append_aborted_txn)
        self._producer_state.update_map_end_offset(self.log_end_offset)
        return self._append_info(headers, len(records))

    def _marker_reader(self, data: Records, positions: dict[int, int]) -> MarkerReader:
        """Reads the end-transaction marker of a control batch of ``data`` (found by its base offset)."""

        def read(header: BatchHeader) -> tuple[EndTransactionMarker | None, int]:
            return read_end_txn_marker(data, positions[header.base_offset])

        return read

    def _read_marker_from_log(self, header: BatchHeader) -> tuple[EndTransactionMarker | None, int]:
        """The marker of a control batch already in the log (a replay); a damaged one counts as empty."""
        try:
            data = self.read(header.base_offset, 1)
            return read_end_txn_marker(data, 0)
        except KafkaError as e:
            logger.error(
                "%scontrol batch at offset %d not read: %s", self._prefix, header.base_offset, e.message
            )
            return None, -1

    def _segment_of(self, offset: int) -> LogSegment:
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        return self._segments[i]

    def _append_aborted_txn(self, txn: CompletedTxn, last_stable_offset: int) -> None:
        """The ``.txnindex`` entry of an aborted transaction, in the segment of its marker (Kafka's
        ``LogSegment.updateTxnIndex``); a replay does not write it twice."""
        self._segment_of(txn.last_offset).txn_index.maybe_append(
            AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset)
        )

    # ------------------------------------------------------------------ transactions

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet decided, or decided by a marker not yet below
        the high watermark, at least the log start offset (Kafka's ``firstUnstableOffsetMetadata``)."""
        first = self._producer_state.first_unstable_offset()
        return None if first is None else max(first, self._log_start_offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's ``lastStableOffset``: the first unstable offset when it is below ``high_watermark``,
        else the high watermark. Completed transactions whose markers are below the high watermark stop
        counting as unstable here."""
        self._producer_state.on_high_watermark_updated(high_watermark)
        first = self.first_unstable_offset()
        return first if first is not None and first < high_watermark else high_watermark

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Kafka's ``collectAbortedTransactions``: the aborted transactions that overlap
        ``[start_offset, upper_bound_offset)``, from the ``.txnindex`` of the segment holding
        ``start_offset`` on, until an entry's LSO reaches the upper bound."""
        out: list[AbortedTxn] = []
        i = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        for segment in self._segments[i:]:
            found, complete = segment.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
            out.extend(found)
            if complete:
                break
        return out

    def aborted_transactions(self) -> list[AbortedTxn]:
        """Every ``.txnindex`` entry of the log (for tools and tests)."""
        return [txn for segment in self._segments for txn in segment.txn_index]

    def _append(self, data: Records, headers: list[BatchHeader]) -> None:
        segment = self._segments[-1]
        nbytes = len(data)
        if not segment.is_empty and (
            segment.size + nbytes > self.config.segment_bytes
            or not segment.can_hold(headers[-1].last_offset, nbytes)
            or (self._clock() - self._active_created) * 1000 >= self.config.segment_ms
        ):
            segment = self.roll()
        segment.append(data, headers)

    def _append_info(
        self, headers: list[BatchHeader], nbytes: int, log_append_time_ms: int = NO_TIMESTAMP
    ) -> LogAppendInfo:
        last = headers[-1]
        return LogAppendInfo(
            first_offset=headers[0].base_offset,
            last_offset=last.last_offset,
            num_batches=len(headers),
            num_records=sum(h.records_count for h in headers),
            valid_bytes=nbytes,
            max_timestamp=max(h.max_timestamp for h in headers),
            log_append_time_ms=log_append_time_ms,
            leader_epoch=last.partition_leader_epoch if last.partition_leader_epoch >= 0 else None,
            batches=tuple(headers),
        )

    @_disk("assigning a leader epoch in")
    def assign_epoch(self, leader_epoch: int, start_offset: int) -> None:
        """Record in the epoch cache (and its checkpoint) that ``leader_epoch`` starts at ``start_offset``."""
        self._epoch_cache.assign(leader_epoch, start_offset)

    @_disk("rolling")
    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        active = self._segments[-1]
        if active.is_empty:
            return active
        new_base = active.next_offset
        active.on_become_inactive()
        segment = LogSegment.create(
            self._dir,
            new_base,
            index_interval_bytes=self.config.index_interval_bytes,
            allow_gaps=self._allow_gaps,
        )
        self._segments.append(segment)
        self._bases.append(new_base)
        self._active_created = self._clock()
        logger.info("%srolled new segment at offset %d", self._prefix, new_base)
        # A snapshot at the new segment's base lets recovery start from it (fsynced with the next flush).
        self._producer_state.update_map_end_offset(new_base)
        self._producer_state.take_snapshot(sync=False)
        return segment

    # ------------------------------------------------------------------ reads

    @_disk("reading")
    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """Kafka's ``fetchOffsetByTimestamp`` for a target timestamp >= 0, or ``MAX_TIMESTAMP`` (-3):
        ``(timestamp, offset, leader_epoch)`` of the first record at or after the log start offset whose
        timestamp is >= the target (for -3: the first record with the largest timestamp), or None. Segments
        are chosen by their largest timestamp, then the time index finds the place (``LogSegment``)."""
        start = self._log_start_offset
        if timestamp == MAX_TIMESTAMP:
            candidates = [s for s in self._segments if s.max_timestamp >= 0]
            if not candidates:
                return None
            best = max(candidates, key=lambda s: s.max_timestamp)  # the first of equals, as Kafka
            return best.find_offset_by_timestamp(best.max_timestamp, start)
        for segment in self._segments:
            if segment.max_timestamp >= timestamp and segment.next_offset > start:
                found = segment.find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return found
        return None

    @_disk("reading")
    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> bytes:
        """Whole batches from the one containing ``start_offset``, from a single segment.

        At most ``max_bytes`` (but at least one batch if ``min_one_message``); no batch whose base offset
        is >= ``max_offset`` (the high watermark for consumers). ``start_offset`` must lie in
        ``[log_start_offset, log_end_offset]``; at the log end offset the result is empty.
        """
        log_end = self.log_end_offset
        if start_offset < self._log_start_offset or start_offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self._topic}-{self._partition}: "
                f"the log holds [{self._log_start_offset}, {log_end}]"
            )
        if start_offset == log_end or (max_offset is not None and start_offset >= max_offset):
            return b""
        i = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        while i < len(self._segments):
            segment = self._segments[i]
            if segment.next_offset > start_offset and not segment.is_empty:
                data = segment.read(
                    start_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
                )
                if data or not self._allow_gaps:
                    return data
            # A gap after this segment (after recovery cut it, or the cleaner emptied its end): the next one.
            i += 1
        return b""

    def batch_headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers of all batches from the one containing ``from_offset`` (default: the first)."""
        start = self._segments[0].base_offset if from_offset is None else from_offset
        i = max(bisect.bisect_right(self._bases, start) - 1, 0)
        for n, segment in enumerate(self._segments[i:]):
            yield from segment.headers(start if n == 0 else None)

    # ------------------------------------------------------------------ truncation

    @_disk("truncating")
    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch with an offset >= ``target_offset`` (the batch containing it included).

        Returns False (and only trims the epoch cache to the log end, as Kafka does) if
        ``target_offset`` >= the log end offset.
        """
        if target_offset < 0:
            raise ValueError(
                f"cannot truncate {self._topic}-{self._partition} to negative offset {target_offset}"
            )
        log_end = self.log_end_offset
        if target_offset >= log_end:
            # A leader may have assigned an epoch at the log end and then lost leadership before writing.
            self._epoch_cache.truncate_from_end(log_end)
            return False
        if self._segments[0].base_offset > target_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        keep = bisect.bisect_right(self._bases, target_offset)  # segments with base <= target
        self.mutations += 1
        for segment in self._segments[keep:]:
            segment.delete()
        self._producer_state.delete_snapshots_at(self._bases[keep:])
        del self._segments[keep:]
        del self._bases[keep:]
        self._segments[-1].truncate_to(target_offset)
        new_end = self.log_end_offset
        self._epoch_cache.truncate_from_end(new_end)
        self._log_start_offset = min(self._log_start_offset, new_end)
        self._recovery_point = min(self._recovery_point, new_end)
        self._rebuild_producer_state(new_end)
        logger.info(
            "%struncated to offset %d: log end offset %d -> %d", self._prefix, target_offset, log_end, new_end
        )
        return True

    @_disk("truncating")
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete everything and start an empty log at ``new_offset`` (which becomes the log start)."""
        for segment in self._segments:
            segment.delete()
        self.mutations += 1
        segment = LogSegment.create(
            self._dir,
            new_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            allow_gaps=self._allow_gaps,
        )
        self._segments = [segment]
        self._bases = [new_offset]
        self._active_created = self._clock()
        self._epoch_cache.clear_and_flush()
        self._log_start_offset = new_offset
        self._recovery_point = new_offset
        self._producer_state.truncate_fully_and_start_at(new_offset)
        self._rebuild_producer_state(new_offset)
        logger.info("%struncated fully, log now starts at offset %d", self._prefix, new_offset)

    @_disk("moving the log start of")
    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Move the log start up to ``new_start`` (DeleteRecords, or following the leader's log start).

        Trims the epoch cache and deletes the segments that lie wholly below ``new_start``. Returns False
        if ``new_start`` is not above the current log start.
        """
        log_end = self.log_end_offset
        if new_start > log_end:
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self._topic}-{self._partition} to {new_start}: "
                f"beyond the log end offset {log_end}"
            )
        if new_start <= self._log_start_offset:
            return False
        self._log_start_offset = new_start
        self.mutations += 1
        self._epoch_cache.truncate_from_start(new_start)
        # Segment i holds offsets below bases[i + 1]; it can go when that is <= new_start.
        drop = bisect.bisect_right(self._bases, new_start) - 1
        drop = min(drop, len(self._segments) - 1)
        for segment in self._segments[:drop]:
            segment.delete()
        self._producer_state.delete_snapshots_at(self._bases[: max(drop, 0)])
        self._producer_state.on_log_start_offset_incremented(new_start)
        del self._segments[:drop]
        del self._bases[:drop]
        logger.info(
            "%sincremented log start offset to %d, deleted %d segments", self._prefix, new_start, max(drop, 0)
        )
        return True

    # ------------------------------------------------------------------ retention

    @_disk("deleting old segments of")
    def delete_old_segments(self, high_watermark: int) -> int:
        """Kafka's ``UnifiedLog.deleteOldSegments``: with ``cleanup.policy`` holding ``delete``, the oldest
        segments that breach ``retention.bytes`` (while the log is bigger than it) and then those that breach
        ``retention.ms`` (largest timestamp older than it) go; whatever the policy, segments wholly below the
        log start offset go too. A segment goes only if every offset in it is below ``high_watermark`` (so
        the log start never passes the HW), the walk stops at the first segment that is kept, and an empty
        active segment is never deleted (a non-empty one is rolled first, as Kafka does). The log start
        moves to the first offset kept. Returns how many segments were deleted."""
        deleted = self._delete_old(
            high_watermark,
            lambda segment, next_base: next_base is not None and next_base <= self._log_start_offset,
            "log start offset breach",
        )
        if not self.config.delete:
            return deleted
        if self.config.retention_bytes >= 0 and self.size_in_bytes >= self.config.retention_bytes:
            excess = [self.size_in_bytes - self.config.retention_bytes]

            def over_size(segment: LogSegment, next_base: int | None) -> bool:
                if excess[0] - segment.size >= 0:
                    excess[0] -= segment.size
                    return True
                return False

            deleted += self._delete_old(
                high_watermark, over_size, f"retention size {self.config.retention_bytes} breach"
            )
        if self.config.retention_ms >= 0:
            now_ms = self._now_ms()
            retention_ms = self.config.retention_ms

            def too_old(segment: LogSegment, next_base: int | None) -> bool:
                return now_ms - self._largest_timestamp(segment) > retention_ms

            deleted += self._delete_old(high_watermark, too_old, f"retention time {retention_ms}ms breach")
        return deleted

    @staticmethod
    def _largest_timestamp(segment: LogSegment) -> int:
        """Kafka's ``LogSegment.largestTimestamp``: the largest record timestamp, else the file's mtime."""
        if segment.max_timestamp > 0:
            return segment.max_timestamp
        try:
            return int(segment.log_path.stat().st_mtime * 1000)
        except OSError:
            return NO_TIMESTAMP

    def _delete_old(
        self, high_watermark: int, predicate: Callable[[LogSegment, int | None], bool], reason: str
    ) -> int:
        """Kafka's ``deletableSegments`` then ``deleteSegments``: the oldest segments while ``predicate``
        holds and every offset in them is below ``high_watermark``."""
        count = 0
        for i, segment in enumerate(self._segments):
            next_base = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else None
            upper = next_base if next_base is not None else self.log_end_offset
            if next_base is None and segment.is_empty:
                break
            if high_watermark < upper or not predicate(segment, next_base):
                break
            count += 1
        if count == 0:
            return 0
        self.mutations += 1
        if count == len(self._segments):
            self.roll()  # the log always keeps one segment: the new active one, empty
        new_start = self._segments[count].base_offset
        logger.info(
            "%sdeleting %d segment(s) %s (%s)",
            self._prefix,
            count,
            [s.base_offset for s in self._segments[:count]],
            reason,
        )
        self._log_start_offset = max(self._log_start_offset, new_start)
        self._epoch_cache.truncate_from_start(self._log_start_offset)
        for segment in self._segments[:count]:
            segment.delete()
        self._producer_state.delete_snapshots_at(self._bases[:count])
        self._producer_state.on_log_start_offset_incremented(self._log_start_offset)
        del self._segments[:count]
        del self._bases[:count]
        return count

    # ------------------------------------------------------------------ the cleaner's side

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """Kafka's ``lastRecordsOfActiveProducers``: per producer id, the last offset of its last data
        batch (None when its last entry is a marker) and its epoch; the cleaner keeps those batches."""
        out: dict[int, tuple[int | None, int]] = {}
        for pid, entry in self._producer_state.active_producers.items():
            last = entry.last_data_offset
            out[pid] = (last if last >= 0 else None, entry.producer_epoch)
        return out

    @_disk("swapping cleaned segments into")
    def replace_segments(self, base_offset: int, old_bases: list[int], seen_mutations: int) -> bool:
        """Kafka's ``replaceSegments``: swap the cleaned segment ``<base_offset>.log.cleaned`` (and its
        ``.txnindex.cleaned``, if any) in for the segments at ``old_bases``. The cleaned files are renamed
        ``.swap``, the old segments deleted, the ``.swap`` files renamed into place; a crash at any point is
        settled at the next start (``storage.loader``). Nothing is swapped (the cleaned files are deleted,
        False) if the log changed since the cleaner read it (``seen_mutations``) or the old segments are no
        longer a run of inactive segments of the log."""
        suffixes = (LOG_SUFFIX, TXN_INDEX_SUFFIX)
        names = {suffix: segment_file_name(base_offset, suffix) for suffix in suffixes}
        first = bisect.bisect_left(self._bases, old_bases[0]) if old_bases else 0
        still_there = (
            bool(old_bases)
            and old_bases[0] == base_offset
            and self._bases[first : first + len(old_bases)] == old_bases
            and first + len(old_bases) < len(self._segments)
        )
        if self.mutations != seen_mutations or not still_there:
            for name in names.values():
                (self._dir / (name + CLEANED_FILE_SUFFIX)).unlink(missing_ok=True)
            logger.info(
                "%scleaned segment %d not swapped in: the log changed meanwhile", self._prefix, base_offset
            )
            return False
        for name in names.values():
            cleaned = self._dir / (name + CLEANED_FILE_SUFFIX)
            if cleaned.exists():
                cleaned.rename(self._dir / (name + SWAP_FILE_SUFFIX))
        _fsync_dir(self._dir)
        old = self._segments[first : first + len(old_bases)]
        mtime = old[-1].log_path.stat().st_mtime
        for segment in old:
            segment.delete()
        for name in names.values():
            swap = self._dir / (name + SWAP_FILE_SUFFIX)
            if swap.exists():
                swap.rename(self._dir / name)
        _fsync_dir(self._dir)
        os.utime(self._dir / names[LOG_SUFFIX], (mtime, mtime))  # retention.ms by mtime sees the old age
        segment = LogSegment.open(
            self._dir, base_offset, index_interval_bytes=self.config.index_interval_bytes, allow_gaps=True
        )
        segment.recover()
        segment.on_become_inactive()
        segment.flush()
        self._segments[first : first + len(old_bases)] = [segment]
        self._bases[first : first + len(old_bases)] = [base_offset]
        self.allow_gaps = True
        self.mutations += 1
        logger.info(
            "%sswapped in cleaned segment %d (%d bytes) for segment(s) %s",
            self._prefix,
            base_offset,
            segment.size,
            old_bases,
        )
        return True

    # ------------------------------------------------------------------ lifecycle

    @_disk("flushing")
    def flush(self) -> None:
        """fsync every segment that may hold data past the recovery point, then move it to the log end.

        A log unchanged since its last flush (the same log end, segments and active segment size, no
        snapshot waiting) costs nothing: a broker with thousands of idle partitions does not fsync each
        of them at every checkpoint. A truncation changes the active segment's size, so it is synced."""
        shape = (self._bases[-1], len(self._segments), self._segments[-1].size, self.log_end_offset)
        if (
            shape == self._flushed_shape
            and self._recovery_point == self.log_end_offset
            and not self._producer_state.has_unflushed_snapshots
        ):
            return
        for segment in self._segments:
            if segment.next_offset > self._recovery_point or segment is self._segments[-1]:
                segment.flush()
        self._producer_state.flush_snapshots()
        self._recovery_point = self.log_end_offset
        self._flushed_shape = shape

    def _rebuild_producer_state(self, last_offset: int) -> None:
        """The producer state of the log below ``last_offset``: the latest snapshot at or below it plus
        the batches after it (Kafka's ``rebuildProducerState``)."""
        rebuild_producer_state(
            self._producer_state,
            segment_base_offsets=list(self._bases),
            log_start_offset=self._log_start_offset,
            last_offset=last_offset,
            read_headers=lambda offset: self.batch_headers(offset),
            now_ms=self._now_ms(),
            read_marker=self._read_marker_from_log,
            on_aborted=self._append_aborted_txn,
        )

    @_disk("writing the producer snapshot of")
    def take_producer_snapshot(self) -> None:
        """Snapshot the producer state at the log end offset (a clean stop does this before ``close``)."""
        self._producer_state.update_map_end_offset(self.log_end_offset)
        self._producer_state.take_snapshot()

    def close(self) -> None:
        self.mutations += 1
        for segment in self._segments:
            segment.close()

    def delete(self) -> None:
        """Close the log and remove its directory."""
        self.close()
        shutil.rmtree(self._dir, ignore_errors=True)
