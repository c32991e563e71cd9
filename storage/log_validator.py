"""What a leader checks before it appends a producer's batches (Kafka's ``LogValidator``).

Followers and recovery trust the CRC; a leader is the first broker to see a batch, so it checks what the CRC
cannot: that the header tells the truth about the records, and that the records are well formed. It walks
each record once without copying keys or values (:func:`protocol.record_codec.scan_records`, Kafka's
``skipKeyValueIterator``), decompressing a compressed batch first, and never re-encodes: a batch is appended
as it came, or refused whole.

Refused with CORRUPT_MESSAGE (2), as Kafka's ``CorruptRecordException``: a header that does not parse, a
magic other than 2, a batch_length below the minimum or past the bytes sent, a CRC mismatch, and a
compressed stream that does not decompress.

Refused with UNSUPPORTED_COMPRESSION_TYPE (76): codec ids 5-7 in attributes bits 0-2.

Refused with INVALID_TIMESTAMP (32), as Kafka: the timestamp type bit says LogAppendTime ("Producer should
not set timestamp type to LogAppendTime").

Refused with INVALID_RECORD (87), as Kafka's ``InvalidRecordException``:

- ``records_count`` < 1, or ``last_offset_delta + 1 != records_count`` (Kafka: "Inconsistent batch offset
  range and record count");
- attributes: the control bit (clients may not write control records), the transactional bit (isrsim has no
  transactions), the delete-horizon bit or any bit above it;
- ``producer_id >= 0`` with ``base_sequence < 0`` (Kafka: "Invalid sequence number");
- a compressed batch that is not alone in the request (Kafka: "Compressed outer record has more than one
  batch");
- records that are not Kafka's ``DefaultRecord`` (a length that does not match the record's fields, a
  negative length other than -1 for a null key or value, a negative header count or header key size, a
  record running past the end, bytes left after ``records_count`` records): listed in ``record_errors``
  with the record's index;
- record ``i`` with an offset delta other than ``i`` (Kafka rewrites a compressed batch whose inner offsets
  are not consecutive; isrsim never re-encodes, so it refuses);
- ``max_timestamp`` other than ``base_timestamp`` plus the largest ``timestamp_delta`` (Kafka sets it;
  isrsim refuses).

``batch_index`` in a record error counts records from the first record of the partition's ``records`` (with
one batch per request, as Kafka's producers send, it is the index within the batch).
"""

from __future__ import annotations

from protocol.compression import CompressionError, CompressionType, unsupported_codec
from protocol.errors import CorruptRecordError, Errors, InvalidRecordError, KafkaError
from protocol.record_codec import RecordFormatError, fast_scan_batch, scan_records
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
    record_bytes,
)

# The codec ids Kafka knows (none, gzip, snappy, lz4, zstd).
MAX_CODEC_ID = 4
_CODEC_AND_TIMESTAMP_BITS = COMPRESSION_CODEC_MASK | TIMESTAMP_TYPE_MASK


def _attributes_problem(header: BatchHeader) -> KafkaError | None:
    attributes = header.attributes
    if attributes & ~COMPRESSION_CODEC_MASK == 0 and attributes <= MAX_CODEC_ID:
        return None
    codec = attributes & COMPRESSION_CODEC_MASK
    if codec > MAX_CODEC_ID:
        return unsupported_codec(codec)
    if attributes & CONTROL_FLAG_MASK:
        why = "the control bit is set: clients are not allowed to write control records"
    elif attributes & TRANSACTIONAL_FLAG_MASK:
        why = "the transactional bit is set: isrsim has no transactions"
    elif attributes & ~_CODEC_AND_TIMESTAMP_BITS:
        why = "unknown attribute bits are set"
    else:
        return KafkaError(
            Errors.INVALID_TIMESTAMP,
            f"attributes 0x{attributes:04x}: the timestamp type is LogAppendTime: a producer should not set "
            "timestamp type to LogAppendTime",
        )
    return InvalidRecordError(f"attributes 0x{attributes:04x}: {why}")


def validate_batch_as_leader(buf: Buffer, pos: int, first_index: int = 0) -> BatchHeader:
    """Validate the batch at ``pos`` as described above; ``first_index`` is the record index (within the
    partition's records) of its first record. Returns the header or raises."""
    if isinstance(buf, memoryview):
        buf = buf.tobytes()
    header = check_framing(buf, pos)
    where = f"batch at position {pos}"
    problem = offset_range_problem(header)
    if problem is not None:
        raise InvalidRecordError(f"{where}: {problem}")
    bad_attributes = _attributes_problem(header)
    if bad_attributes is not None:
        bad_attributes.message = f"{where}: {bad_attributes.message}"
        raise bad_attributes
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"{where}: producer_id {header.producer_id} with base_sequence {header.base_sequence}: "
            "invalid sequence number"
        )
    try:
        max_delta = _max_timestamp_delta(buf, pos, header)
    except CompressionError as exc:
        raise CorruptRecordError(f"{where}: {exc}") from exc
    except RecordFormatError as exc:
        if exc.whole_batch:
            raise InvalidRecordError(f"{where}: incorrect declared batch size: {exc.why}") from exc
        message = f"{where}, {exc}"
        raise InvalidRecordError(message, [(first_index + exc.index, message)]) from exc
    expected_max = header.base_timestamp + max_delta
    if header.max_timestamp != expected_max:
        raise InvalidRecordError(
            f"{where}: max_timestamp {header.max_timestamp} but base_timestamp plus the largest "
            f"timestamp_delta is {expected_max}"
        )
    return header


def _max_timestamp_delta(buf: bytes | bytearray, pos: int, header: BatchHeader) -> int:
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
            return fast
        return scan_records(buf, header.records_count, start, end)
    records = record_bytes(buf, pos, header)
    plain = bytearray(buf[pos:start])
    plain[ATTRIBUTES_OFFSET + 1] &= ~COMPRESSION_CODEC_MASK & 0xFF
    fast = fast_scan_batch(
        bytes(plain) + records, header.base_offset, header.base_timestamp, header.records_count
    )
    if fast == claimed:
        return fast
    return scan_records(records, header.records_count)


def validate_records_as_leader(buf: Buffer) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of every batch of a producer's ``records``, each validated as above."""
    if isinstance(buf, memoryview):
        buf = buf.tobytes()
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    index = 0
    end = len(buf)
    while pos < end:
        header = validate_batch_as_leader(buf, pos, index)
        out.append((pos, header))
        pos += header.size
        index += header.records_count
    if len(out) > 1 and any(h.attributes & COMPRESSION_CODEC_MASK for _, h in out):
        raise InvalidRecordError(
            f"{len(out)} batches in one request, at least one compressed: compressed outer record has more "
            "than one batch"
        )
    return out


def recompress_for_topic(
    buf: Buffer, batches: list[tuple[int, BatchHeader]], target: CompressionType
) -> bytes | None:
    """Kafka's answer to a topic whose ``compression.type`` names a codec: batches written with another
    codec are decoded and built again with the topic's (offsets, timestamps, keys, values, headers and the
    producer fields kept; a new CRC). Returns the new bytes, or None when every batch already has the
    topic's codec (then nothing is re-encoded). Call it after :func:`validate_records_as_leader`."""
    if all(h.attributes & COMPRESSION_CODEC_MASK == target for _, h in batches):
        return None
    out = []
    for pos, header in batches:
        if header.attributes & COMPRESSION_CODEC_MASK == target:
            out.append(bytes(buf[pos : pos + header.size]))
            continue
        _, records = decode_records(buf, pos)
        out.append(
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
    return b"".join(out)
