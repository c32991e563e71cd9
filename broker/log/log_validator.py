"""What a leader checks before it appends a producer's batches (Kafka's ``LogValidator``).

Followers and recovery trust the CRC; a leader is the first broker to see a batch, so it checks what the CRC
cannot: that the header tells the truth about the records, and that the records are well formed. It never
re-encodes: a batch is appended as it came, or refused whole.

Refused with CORRUPT_MESSAGE (2), as Kafka's ``CorruptRecordException``: a header that does not parse, a
magic other than 2, a batch_length below the minimum or past the bytes sent, a CRC mismatch.

Refused with INVALID_RECORD (87), as Kafka's ``InvalidRecordException``:

- ``records_count`` < 1, or ``last_offset_delta + 1 != records_count`` (Kafka: "Inconsistent batch offset
  range and record count");
- attributes: the transactional or control bit (clients may not write control batches; isrsim has no
  transactions), LogAppendTime (the leader would have to rewrite the batch), the delete-horizon bit or any
  bit above it;
- ``producer_id >= 0`` with ``base_sequence < 0`` (Kafka: "Invalid sequence number");
- the records are not exactly one msgpack array of ``records_count`` elements;
- per record (listed in ``record_errors`` with the record's index): not ``[offset_delta, timestamp_delta,
  key, value, headers]``, an ``offset_delta`` other than its index, a ``timestamp_delta`` that is not an
  int, a key or value that is neither bin nor nil, headers that are not a map of str to bin;
- ``max_timestamp`` other than ``base_timestamp`` plus the largest ``timestamp_delta`` (Kafka rewrites it;
  isrsim never re-encodes, so it refuses).

Refused with UNSUPPORTED_COMPRESSION_TYPE (76): a compression codec other than none.

``batch_index`` in a record error counts records from the first record of the partition's ``records`` (with
one batch per request, as Kafka's producers send, it is the index within the batch).
"""

from __future__ import annotations

from protocol.errors import Errors, InvalidRecordError, KafkaError
from protocol.records import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    Buffer,
    check_framing,
    offset_range_problem,
    unpack_records,
)

# At most this many record errors are listed in one response (the rest are counted in the message).
MAX_RECORD_ERRORS = 20
_ALLOWED_ATTRIBUTES = 0


def _attributes_problem(header: BatchHeader) -> KafkaError | None:
    attributes = header.attributes
    if attributes == _ALLOWED_ATTRIBUTES:
        return None
    codec = attributes & COMPRESSION_CODEC_MASK
    if codec:
        return KafkaError(
            Errors.UNSUPPORTED_COMPRESSION_TYPE,
            f"compression codec {codec} in attributes 0x{attributes:04x}: isrsim batches are uncompressed",
        )
    if attributes & CONTROL_FLAG_MASK:
        why = "the control bit is set: clients are not allowed to write control records"
    elif attributes & TRANSACTIONAL_FLAG_MASK:
        why = "the transactional bit is set: isrsim has no transactions"
    elif attributes & TIMESTAMP_TYPE_MASK:
        why = "the timestamp type is LogAppendTime: isrsim batches carry CreateTime"
    else:
        why = "unknown attribute bits are set"
    return InvalidRecordError(f"attributes 0x{attributes:04x}: {why}")


def _record_problem(index: int, item: object) -> str | None:
    if type(item) is not list or len(item) != 5:
        return "not a 5-element array [offset_delta, timestamp_delta, key, value, headers]"
    offset_delta, timestamp_delta, key, value, headers = item
    if type(offset_delta) is not int or offset_delta != index:
        return f"offset_delta {offset_delta!r}, expected {index}"
    if type(timestamp_delta) is not int:
        return f"timestamp_delta {timestamp_delta!r} is not an int"
    if not (key is None or type(key) is bytes):
        return "key is neither bin nor nil"
    if not (value is None or type(value) is bytes):
        return "value is neither bin nor nil"
    if type(headers) is not dict:
        return "headers are not a map"
    for k, v in headers.items():
        if type(k) is not str or type(v) is not bytes:
            return "headers are not a map of str to bin"
    return None


def validate_batch_as_leader(buf: Buffer, pos: int, first_index: int = 0) -> BatchHeader:
    """Validate the batch at ``pos`` as described above; ``first_index`` is the record index (within the
    partition's records) of its first record. Returns the header or raises."""
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
        items = unpack_records(buf, pos, header)
    except ValueError as exc:
        raise InvalidRecordError(f"{where}: {exc}") from exc
    if type(items) is not list:
        raise InvalidRecordError(f"{where}: the records are not a msgpack array")
    if len(items) != header.records_count:
        raise InvalidRecordError(
            f"{where}: the header says records_count {header.records_count}, the records array holds "
            f"{len(items)}"
        )
    errors: list[tuple[int, str]] = []
    count = 0
    max_delta: int | None = None
    for i, item in enumerate(items):
        # The common case first, in one expression: a well-formed record with its expected offset delta.
        if (
            type(item) is list
            and len(item) == 5
            and item[0] == i
            and type(item[0]) is int
            and type(item[1]) is int
            and (item[2] is None or type(item[2]) is bytes)
            and (item[3] is None or type(item[3]) is bytes)
            and type(item[4]) is dict
            and (not item[4] or all(type(k) is str and type(v) is bytes for k, v in item[4].items()))
        ):
            if max_delta is None or item[1] > max_delta:
                max_delta = item[1]
            continue
        count += 1
        if len(errors) < MAX_RECORD_ERRORS:
            errors.append((first_index + i, f"{where}, record {i}: {_record_problem(i, item)}"))
    if errors:
        more = f" ({count - len(errors)} more not listed)" if count > len(errors) else ""
        raise InvalidRecordError(f"{where}: {count} invalid records{more}: {errors[0][1]}", errors)
    expected_max = header.base_timestamp + (max_delta or 0)
    if header.max_timestamp != expected_max:
        raise InvalidRecordError(
            f"{where}: max_timestamp {header.max_timestamp} but base_timestamp plus the largest "
            f"timestamp_delta is {expected_max}"
        )
    return header


def validate_records_as_leader(buf: Buffer) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of every batch of a producer's ``records``, each validated as above."""
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    index = 0
    end = len(buf)
    while pos < end:
        header = validate_batch_as_leader(buf, pos, index)
        out.append((pos, header))
        pos += header.size
        index += header.records_count
    return out
