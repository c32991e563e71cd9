"""What a leader checks, and fixes, before it appends a producer's batches (Kafka's ``LogValidator``).

Followers and recovery trust the CRC; a leader is the first broker to see a batch, so it checks what the CRC
cannot: that the header tells the truth about the records, and that the records are well formed. It walks
each record once without copying keys or values (:func:`protocol.record_codec.scan_records`, Kafka's
``skipKeyValueIterator``; aiokafka's C reader first), decompressing a compressed batch first. It accepts
what Kafka accepts and fixes what Kafka fixes:

- ``max_timestamp`` becomes what Kafka writes there, the CRC recomputed when it changes
  (``DefaultRecordBatch.setMaxTimestamp``): on a CreateTime topic the largest record timestamp
  (``base_timestamp`` + the largest ``timestamp_delta``, or -1 if every record is older than that, as
  Kafka's running maximum starts at -1); on a LogAppendTime topic (``message.timestamp.type``) the broker's
  time, with the timestamp type bit set. A batch whose header already says so is not touched: the common
  case costs one walk and nothing else.
- A batch that says LogAppendTime on a CreateTime topic, with a ``max_timestamp`` set, is taken as Kafka
  takes it: each record's timestamp is that ``max_timestamp``, and the batch is stored as CreateTime.
- A compressed batch whose record ``i`` does not have offset ``i`` (offset delta ``i`` and
  ``base_offset`` 0) is decompressed and built again with offsets in order, its codec kept
  (``validateMessagesAndAssignOffsetsCompressed`` without in-place assignment: ``base_timestamp`` becomes
  the first record's timestamp and each record's attributes byte 0). An uncompressed batch's offset deltas
  are not checked, as Kafka does not check them.

Refused with CORRUPT_MESSAGE (2), as Kafka's ``CorruptRecordException``: a header that does not parse, a
magic other than 2, a batch_length below the minimum or past the bytes sent, a CRC mismatch, and a
compressed stream that does not decompress.

Refused with UNSUPPORTED_COMPRESSION_TYPE (76): codec ids 5-7 in attributes bits 0-2.

Refused with INVALID_TIMESTAMP (32), every record listed in ``record_errors``, as Kafka: a batch that says
LogAppendTime on a LogAppendTime topic, or on a CreateTime topic with ``max_timestamp`` -1 ("Producer should
not set timestamp type to LogAppendTime").

Refused with INVALID_RECORD (87), as Kafka's ``InvalidRecordException``:

- ``records_count`` < 1, or ``last_offset_delta + 1 != records_count`` (Kafka: "Inconsistent batch offset
  range and record count");
- the control bit from a client (clients may not write control records; a leader's own WriteTxnMarkers
  append, ``allow_control``, may);
- the transactional bit with ``producer_id < 0`` (a transaction belongs to a producer id);
- ``producer_id >= 0`` with ``base_sequence < 0`` from a client (Kafka: "Invalid sequence number");
- a compressed batch that is not alone in the request (Kafka: "Compressed outer record has more than one
  batch");
- records that are not Kafka's ``DefaultRecord`` (a length that does not match the record's fields, a
  negative headers count or header key size, a record running past the end, fewer records than
  ``records_count`` or bytes left after them): listed in ``record_errors`` with the record's index when
  one record is at fault.

``batch_index`` in a record error counts records from the first record of the partition's ``records`` (with
one batch per request, as Kafka's producers send, it is the index within the batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from protocol.compression import CompressionError, CompressionType, unsupported_codec
from protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
)
from protocol.record_codec import (
    Record,
    RecordFormatError,
    RecordScan,
    decode_record_bytes,
    fast_scan_batch,
    scan_records,
)
from protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    Buffer,
    build_batch,
    check_framing,
    decode_records,
    offset_range_problem,
    read_header,
    record_bytes,
    set_max_timestamp,
)

# The codec ids Kafka knows (none, gzip, snappy, lz4, zstd).
MAX_CODEC_ID = 4
NO_TIMESTAMP = -1


class TimestampType(IntEnum):
    """A topic's ``message.timestamp.type`` (Kafka's ``TimestampType``)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def config_name(self) -> str:
        return "LogAppendTime" if self is TimestampType.LOG_APPEND_TIME else "CreateTime"

    @classmethod
    def from_config(cls, value: str | None) -> TimestampType:
        """``CreateTime`` (also for None) or ``LogAppendTime``; ValueError for anything else."""
        if value is None or value.strip() == "CreateTime":
            return cls.CREATE_TIME
        if value.strip() == "LogAppendTime":
            return cls.LOG_APPEND_TIME
        raise ValueError(f"message.timestamp.type {value!r}: expected CreateTime or LogAppendTime")


@dataclass(frozen=True, slots=True)
class ValidationResult:
    """What :func:`validate_records_as_leader` accepted. ``records`` are the bytes to append: those sent
    when ``rewritten`` is False, else a new buffer with Kafka's fixes (a ``bytearray`` the caller may
    change further). ``batches`` are the ``(position, header)`` of each batch of ``records``.
    ``log_append_time_ms`` is the broker's time on a LogAppendTime topic, else -1."""

    records: Buffer
    batches: list[tuple[int, BatchHeader]]
    log_append_time_ms: int
    rewritten: bool


@dataclass(frozen=True, slots=True)
class _Verdict:
    header: BatchHeader
    log_append_time: bool  # the timestamp type the stored batch has
    max_timestamp: int  # the max_timestamp it has
    rebuild: bool  # compressed, with offsets out of order: build it again


def _attributes_problem(header: BatchHeader, allow_control: bool) -> KafkaError | None:
    attributes = header.attributes
    if attributes <= MAX_CODEC_ID:
        return None
    codec = attributes & COMPRESSION_CODEC_MASK
    if codec > MAX_CODEC_ID:
        return unsupported_codec(codec)
    if attributes & CONTROL_FLAG_MASK and not allow_control:
        why = "the control bit is set: clients are not allowed to write control records"
    elif attributes & TRANSACTIONAL_FLAG_MASK and header.producer_id < 0:
        why = (
            f"the transactional bit is set with producer_id {header.producer_id}: a transactional batch "
            "needs a producer id"
        )
    else:
        return None  # the timestamp type, the delete horizon bit, bits Kafka does not know: as Kafka
    return InvalidRecordError(f"attributes 0x{attributes:04x}: {why}")


def _check_batch(
    buf: bytes | bytearray,
    pos: int,
    first_index: int,
    timestamp_type: TimestampType,
    now_ms: int,
    allow_control: bool = False,
) -> _Verdict:
    """Validate the batch at ``pos`` as described above; ``first_index`` is the record index (within the
    partition's records) of its first record. Returns what the stored batch must say, or raises."""
    header = check_framing(buf, pos)
    where = f"batch at position {pos}"
    problem = offset_range_problem(header)
    if problem is not None:
        raise InvalidRecordError(f"{where}: {problem}")
    bad_attributes = _attributes_problem(header, allow_control)
    if bad_attributes is not None:
        bad_attributes.message = f"{where}: {bad_attributes.message}"
        raise bad_attributes
    if header.producer_id >= 0 and header.base_sequence < 0 and not allow_control:
        raise InvalidRecordError(
            f"{where}: producer_id {header.producer_id} with base_sequence {header.base_sequence}: "
            "invalid sequence number"
        )
    try:
        scan = _walk(buf, pos, header)
    except CompressionError as exc:
        raise CorruptRecordError(f"{where}: {exc}") from exc
    except RecordFormatError as exc:
        if exc.whole_batch:
            raise InvalidRecordError(f"{where}: incorrect declared batch size: {exc.why}") from exc
        message = f"{where}, {exc}"
        raise InvalidRecordError(message, [(first_index + exc.index, message)]) from exc
    says_log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    if says_log_append_time and (
        timestamp_type is TimestampType.LOG_APPEND_TIME or header.max_timestamp == NO_TIMESTAMP
    ):
        why = (
            f"{where}: attributes 0x{header.attributes:04x} say LogAppendTime: a producer should not set "
            "timestamp type to LogAppendTime"
        )
        raise InvalidTimestampError(
            "one or more records have been rejected due to invalid timestamp",
            [(first_index + i, why) for i in range(header.records_count)],
        )
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        log_append_time, max_timestamp = True, now_ms
    elif says_log_append_time:  # each record's timestamp is the batch's max_timestamp, as Kafka reads it
        log_append_time, max_timestamp = False, max(NO_TIMESTAMP, header.max_timestamp)
    else:
        log_append_time = False
        max_timestamp = max(NO_TIMESTAMP, header.base_timestamp + scan.max_timestamp_delta)
    rebuild = bool(header.attributes & COMPRESSION_CODEC_MASK) and (
        not scan.offsets_in_order or header.base_offset != 0
    )
    return _Verdict(header, log_append_time, max_timestamp, rebuild)


def _walk(buf: bytes | bytearray, pos: int, header: BatchHeader) -> RecordScan:
    """Walk the records of the batch at ``pos`` once: aiokafka's C reader first, and when it objects, is
    missing, or finds a largest delta other than the header's, the pure walk, which has the last word and
    says what is wrong. (The C reader reads a record's attributes as a varint where Kafka reads one byte, so
    a record whose unused attributes byte has its top bit set is misread by it, never by the pure walk.)"""
    claimed = header.max_timestamp - header.base_timestamp
    end = pos + header.size
    start = pos + BATCH_HEADER_SIZE
    if header.attributes & COMPRESSION_CODEC_MASK == 0:
        fast = fast_scan_batch(
            bytes(buf[pos:end]), header.base_offset, header.base_timestamp, header.records_count
        )
        if fast == claimed:
            return RecordScan(fast, True)
        return scan_records(buf, header.records_count, start, end)
    records = record_bytes(buf, pos, header)
    plain = bytearray(buf[pos:start])
    plain[ATTRIBUTES_OFFSET + 1] &= ~COMPRESSION_CODEC_MASK & 0xFF
    fast = fast_scan_batch(
        bytes(plain) + records, header.base_offset, header.base_timestamp, header.records_count
    )
    if fast == claimed:
        return RecordScan(fast, True)
    return scan_records(records, header.records_count)


def _rebuild(buf: bytes | bytearray, pos: int, verdict: _Verdict) -> bytearray:
    """The compressed batch at ``pos`` built again as Kafka's ``buildRecordsAndAssignOffsets`` does: record
    ``i`` at offset delta ``i``, timestamps kept (the first record's is the new ``base_timestamp``), the
    codec, producer fields and transactional bit kept, then ``max_timestamp`` and the timestamp type of
    ``verdict``."""
    header = verdict.header
    decoded = decode_record_bytes(record_bytes(buf, pos, header), header.records_count)
    if header.attributes & TIMESTAMP_TYPE_MASK:
        timestamps = [header.max_timestamp] * len(decoded)
    else:
        timestamps = [header.base_timestamp + r.timestamp_delta for r in decoded]
    base_timestamp = timestamps[0]
    rebuilt = bytearray(
        build_batch(
            [
                Record(i, ts - base_timestamp, r.key, r.value, r.headers)
                for i, (r, ts) in enumerate(zip(decoded, timestamps, strict=True))
            ],
            base_offset=0,
            partition_leader_epoch=header.partition_leader_epoch,
            base_timestamp=base_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            attributes=header.attributes & (COMPRESSION_CODEC_MASK | TRANSACTIONAL_FLAG_MASK),
        )
    )
    set_max_timestamp(rebuilt, 0, verdict.log_append_time, verdict.max_timestamp)
    return rebuilt


def validate_records_as_leader(
    buf: Buffer,
    *,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    now_ms: int = NO_TIMESTAMP,
    allow_control: bool = False,
) -> ValidationResult:
    """Validate every batch of a producer's ``records`` as described above and apply Kafka's fixes.
    ``now_ms`` is the broker's time (used on a LogAppendTime topic). ``allow_control``: the leader's own
    append of a transaction marker (Kafka's ``AppendOrigin.COORDINATOR``), whose control batch carries no
    sequence. Raises a ``KafkaError`` naming the batch and the problem; nothing is changed in ``buf``."""
    if isinstance(buf, memoryview):
        buf = buf.tobytes()
    verdicts: list[tuple[int, _Verdict]] = []
    pos = 0
    index = 0
    end = len(buf)
    while pos < end:
        verdict = _check_batch(buf, pos, index, timestamp_type, now_ms, allow_control)
        verdicts.append((pos, verdict))
        pos += verdict.header.size
        index += verdict.header.records_count
    if len(verdicts) > 1 and any(v.header.attributes & COMPRESSION_CODEC_MASK for _, v in verdicts):
        raise InvalidRecordError(
            f"{len(verdicts)} batches in one request, at least one compressed: compressed outer record has "
            "more than one batch"
        )
    log_append_time_ms = now_ms if timestamp_type is TimestampType.LOG_APPEND_TIME else NO_TIMESTAMP
    if len(verdicts) == 1 and verdicts[0][1].rebuild:
        try:
            rebuilt = _rebuild(buf, 0, verdicts[0][1])
        except (RecordFormatError, CompressionError) as exc:  # walked already: not expected
            raise CorruptRecordError(f"batch at position 0: {exc}") from exc
        return ValidationResult(rebuilt, [(0, read_header(rebuilt))], log_append_time_ms, True)
    fixed: bytearray | None = None
    for pos, verdict in verdicts:
        header = verdict.header
        if header.max_timestamp == verdict.max_timestamp and (
            bool(header.attributes & TIMESTAMP_TYPE_MASK) == verdict.log_append_time
        ):
            continue
        if fixed is None:
            fixed = bytearray(buf)
        set_max_timestamp(fixed, pos, verdict.log_append_time, verdict.max_timestamp)
    if fixed is None:
        return ValidationResult(buf, [(p, v.header) for p, v in verdicts], log_append_time_ms, False)
    return ValidationResult(
        fixed, [(p, read_header(fixed, p)) for p, _ in verdicts], log_append_time_ms, True
    )


def recompress_for_topic(
    buf: Buffer, batches: list[tuple[int, BatchHeader]], target: CompressionType
) -> bytes | None:
    """Kafka's answer to a topic whose ``compression.type`` names a codec: batches written with another
    codec are decoded and built again with the topic's (offsets, timestamps, keys, values, headers, the
    producer fields, and the timestamp type and ``max_timestamp`` the validator set, kept; a new CRC).
    Returns the new bytes, or None when every batch already has the topic's codec (then nothing is
    re-encoded). Call it after :func:`validate_records_as_leader`."""
    if all(h.attributes & COMPRESSION_CODEC_MASK == target for _, h in batches):
        return None
    out = []
    for pos, header in batches:
        if header.attributes & COMPRESSION_CODEC_MASK == target:
            out.append(bytes(buf[pos : pos + header.size]))
            continue
        _, records = decode_records(buf, pos)
        batch = bytearray(
            build_batch(
                records,
                base_offset=header.base_offset,
                partition_leader_epoch=header.partition_leader_epoch,
                base_timestamp=header.base_timestamp,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                attributes=(header.attributes & ~COMPRESSION_CODEC_MASK) | int(target),
            )
        )
        # The timestamp type and max_timestamp the validator gave the batch (the broker's time on a
        # LogAppendTime topic), not the largest record timestamp build_batch writes.
        set_max_timestamp(batch, 0, bool(header.attributes & TIMESTAMP_TYPE_MASK), header.max_timestamp)
        out.append(bytes(batch))
    return b"".join(out)
