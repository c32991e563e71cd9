"""What the leader fixes rather than refuses, and what it still refuses, as Kafka's LogValidator: the cases
of Kafka's LogValidatorTest that apply to v2 batches (named after them), and the client that leaves
max_timestamp at -1."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol.compression import CompressionType, compress
from protocol.errors import Errors, InvalidRecordError, KafkaError
from protocol.record_codec import Record, encode_records
from protocol.records import (
    BatchHeader,
    batch_crc,
    build_batch,
    decode_records,
    iter_batches,
    read_header,
)
from storage.log import LogConfig
from storage.log_validator import TimestampType, validate_records_as_leader

from .support import open_log

CODECS = list(CompressionType)
NOW = 1_700_000_000_000
LOG_APPEND_TIME = 0x08


def kafka_batch(
    records: list[Record],
    *,
    codec: CompressionType = CompressionType.NONE,
    attributes: int = 0,
    base_offset: int = 0,
    base_timestamp: int = 1_000,
    max_timestamp: int | None = None,
    count: int | None = None,
    last_offset_delta: int | None = None,
    producer_id: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A CRC-valid batch around ``records`` encoded as given (offset deltas included), with the header
    fields as given: a hand-built batch, as a client that fills the header its own way sends it."""
    raw = encode_records(records)
    payload = raw if codec is CompressionType.NONE else compress(codec, raw)
    n = len(records) if count is None else count
    last = (n - 1) if last_offset_delta is None else last_offset_delta
    if max_timestamp is None:
        max_timestamp = base_timestamp + max(r.timestamp_delta for r in records)
    tail = struct.pack(
        ">hiqqqhii",
        attributes | int(codec),
        last,
        base_timestamp,
        max_timestamp,
        producer_id,
        0 if producer_id >= 0 else -1,
        base_sequence,
        n,
    )
    tail += payload
    return struct.pack(">qiibI", base_offset, len(tail) + 9, -1, 2, crc32c(tail)) + tail


def three() -> list[Record]:
    # Kafka's test timestamps: now - 1, now + 1, now (the second is the largest).
    return [Record(0, 0, b"k", b"hello"), Record(1, 2, None, b"there"), Record(2, 1, b"", b"beautiful")]


def validate(records: bytes, **kwargs: object) -> tuple[bytes, BatchHeader]:
    result = validate_records_as_leader(records, **kwargs)  # type: ignore[arg-type]
    [(pos, header)] = result.batches
    assert pos == 0
    return bytes(result.records), header


def error_of(records: bytes, **kwargs: object) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        validate_records_as_leader(records, **kwargs)  # type: ignore[arg-type]
    return info.value


# ------------------------------------------------------------------------------------------ CreateTime


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_check_compressed_and_non_compressed(codec: CompressionType) -> None:
    """checkCompressed / checkNonCompressed: a well-formed batch is stored as sent (no byte changes), its
    max_timestamp the largest record timestamp."""
    sent = kafka_batch(three(), codec=codec, producer_id=1324, base_sequence=984)
    result = validate_records_as_leader(sent)
    assert result.rewritten is False and result.records is sent
    assert result.batches[0][1].max_timestamp == 1_002
    assert result.log_append_time_ms == -1


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
@pytest.mark.parametrize("claimed", [-1, 0, 999, 1_001, 5_000])
def test_max_timestamp_left_unset_or_wrong_is_set_and_the_crc_recomputed(
    codec: CompressionType, claimed: int
) -> None:
    """Kafka's in-place path (setMaxTimestamp): a client's max_timestamp of -1 (or any other wrong value)
    becomes the largest record timestamp, and the CRC is computed again over the changed header."""
    sent = kafka_batch(three(), codec=codec, max_timestamp=claimed)
    stored, header = validate(sent)
    assert header.max_timestamp == 1_002
    assert header.crc == batch_crc(stored) != read_header(sent).crc
    # Only max_timestamp and the CRC differ: everything else is as sent, records included.
    assert stored[:17] == sent[:17] and stored[21:35] == sent[21:35] and stored[43:] == sent[43:]
    _, records = decode_records(stored)
    assert [r.value for r in records] == [b"hello", b"there", b"beautiful"]


def test_max_timestamp_below_minus_one_is_kafkas_no_timestamp() -> None:
    """Kafka's running maximum starts at NO_TIMESTAMP (-1): records all older than that give -1."""
    sent = kafka_batch([Record(0, 0, None, b"v")], base_timestamp=-5, max_timestamp=-5)
    _, header = validate(sent)
    assert header.max_timestamp == -1


def test_batches_from_a_real_client_with_max_timestamp_unset() -> None:
    """kafka-python's builder, with max_timestamp then overwritten to -1 (what some Go clients send):
    accepted, and the stored batch reads back with kafka-python's own reader, CRC valid."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 10**6)
    for i in range(20):
        builder.append(i, 5_000 + (i * 7) % 13, b"key", b"value %d" % i, [])
    sent = bytearray(builder.build())
    struct.pack_into(">q", sent, 35, -1)
    struct.pack_into(">I", sent, 17, crc32c(bytes(sent[21:])))
    stored, header = validate(bytes(sent))
    assert header.max_timestamp == 5_000 + 12
    batch = DefaultRecordBatch(bytearray(stored))
    assert batch.validate_crc() and batch.max_timestamp == 5_012
    assert [r.offset for r in batch] == list(range(20))


def test_several_batches_are_fixed_each_in_place() -> None:
    first = kafka_batch(three(), max_timestamp=-1)
    second = kafka_batch(three(), base_timestamp=9_000)
    third = kafka_batch([Record(0, 4, None, b"x")], max_timestamp=-1, producer_id=7, base_sequence=0)
    result = validate_records_as_leader(first + second + third)
    assert result.rewritten
    assert [h.max_timestamp for _, h in result.batches] == [1_002, 9_002, 1_004]
    assert [pos for pos, _ in iter_batches(result.records)] == [0, len(first), len(first) + len(second)]
    assert bytes(result.records[len(first) : len(first) + len(second)]) == second


# ------------------------------------------------------------------------------------- LogAppendTime


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_check_log_append_time_without_recompression(codec: CompressionType) -> None:
    """checkLogAppendTimeNonCompressed / checkLogAppendTimeWithoutRecompression: the broker's time in
    max_timestamp, the LogAppendTime bit set, the CRC valid, the size unchanged."""
    sent = kafka_batch(three(), codec=codec)
    result = validate_records_as_leader(sent, timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=NOW)
    stored = bytes(result.records)
    header = read_header(stored)
    assert len(stored) == len(sent)
    assert header.max_timestamp == NOW and header.attributes == int(codec) | LOG_APPEND_TIME
    assert header.base_timestamp == 1_000 and header.crc == batch_crc(stored)
    assert result.log_append_time_ms == NOW
    batch = DefaultRecordBatch(bytearray(stored))
    assert batch.validate_crc() and [r.timestamp for r in batch] == [NOW] * 3


def test_a_producer_may_not_set_log_append_time() -> None:
    """validateTimestamp: a batch that says LogAppendTime is refused with INVALID_TIMESTAMP, every record
    listed, on a LogAppendTime topic, and on a CreateTime topic when its max_timestamp is -1."""
    sent = kafka_batch(three(), attributes=LOG_APPEND_TIME, max_timestamp=-1)
    for timestamp_type in TimestampType:
        err = error_of(sent, timestamp_type=timestamp_type, now_ms=NOW)
        assert err.error is Errors.INVALID_TIMESTAMP
        assert isinstance(err, InvalidRecordError) and [i for i, _ in err.record_errors] == [0, 1, 2]
        assert "should not set timestamp type to LogAppendTime" in err.record_errors[0][1]
    stamped = kafka_batch(three(), attributes=LOG_APPEND_TIME, max_timestamp=NOW)
    err = error_of(stamped, timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=NOW)
    assert err.error is Errors.INVALID_TIMESTAMP


def test_log_append_time_batch_with_a_timestamp_on_a_create_time_topic_is_taken_as_kafka_does() -> None:
    """Kafka reads each record's timestamp of a LogAppendTime batch as its max_timestamp; on a CreateTime
    topic that passes, and the batch is stored as CreateTime with that max_timestamp."""
    sent = kafka_batch(three(), attributes=LOG_APPEND_TIME, max_timestamp=NOW)
    stored, header = validate(sent)
    assert header.attributes == 0 and header.max_timestamp == NOW and header.crc == batch_crc(stored)


# --------------------------------------------------------------------------------------- inner offsets


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=lambda c: c.config_name)
def test_validation_of_batches_with_non_sequential_inner_offsets(codec: CompressionType) -> None:
    """Kafka's test: offset deltas all 0 under a header that counts 20 records with last_offset_delta 0:
    the header is inconsistent, INVALID_RECORD."""
    records = [Record(0, 0, None, str(i).encode()) for i in range(20)]
    err = error_of(kafka_batch(records, codec=codec, last_offset_delta=0))
    assert err.error is Errors.INVALID_RECORD and "does not match records_count" in err.message


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=lambda c: c.config_name)
@pytest.mark.parametrize("deltas", [(0, 2, 1), (0, 0, 0), (5, 6, 7)])
def test_compressed_inner_offsets_out_of_order_are_rebuilt(
    codec: CompressionType, deltas: tuple[int, int, int]
) -> None:
    """validateMessagesAndAssignOffsetsCompressed without in-place assignment: under a consistent header,
    a compressed batch whose record i is not at offset delta i is built again, codec, producer fields,
    keys, values, headers and timestamps kept; the first record's timestamp is the new base_timestamp."""
    records = [
        Record(deltas[0], 3, b"a", b"1", {"h": b"x"}),
        Record(deltas[1], 9, None, b"2"),
        Record(deltas[2], 1, b"c", None),
    ]
    sent = kafka_batch(records, codec=codec, max_timestamp=-1, producer_id=3, base_sequence=10)
    stored, header = validate(sent)
    assert header.attributes == int(codec) and header.crc == batch_crc(stored)
    assert (header.producer_id, header.base_sequence, header.records_count) == (3, 10, 3)
    assert (header.base_timestamp, header.max_timestamp, header.last_offset_delta) == (1_003, 1_009, 2)
    _, decoded = decode_records(stored)
    assert [(r.offset_delta, header.base_timestamp + r.timestamp_delta) for r in decoded] == [
        (0, 1_003),
        (1, 1_009),
        (2, 1_001),
    ]
    assert [(r.key, r.value, r.headers) for r in decoded] == [
        (b"a", b"1", (("h", b"x"),)),
        (None, b"2", ()),
        (b"c", None, ()),
    ]


def test_compressed_batch_with_a_base_offset_is_rebuilt_as_kafka_does() -> None:
    """Kafka compares each inner record's offset (base_offset + delta) with 0, 1, ...: a compressed batch
    sent with base_offset 5 is built again from 0."""
    stored, header = validate(kafka_batch(three(), codec=CompressionType.GZIP, base_offset=5))
    assert header.base_offset == 0 and header.max_timestamp == 1_002
    assert [r.value for r in decode_records(stored)[1]] == [b"hello", b"there", b"beautiful"]


def test_uncompressed_inner_offsets_are_not_checked_as_kafka_does() -> None:
    """assignOffsetsNonCompressed does not look at offset deltas: the batch is stored as sent."""
    sent = kafka_batch([Record(d, 0, None, b"v") for d in (0, 2, 1)])
    result = validate_records_as_leader(sent)
    assert result.rewritten is False and result.records is sent


# -------------------------------------------------------------------------- what Kafka refuses


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_batch_without_records_not_allowed(codec: CompressionType) -> None:
    sent = kafka_batch([Record(0, 0, None, b"v")], codec=codec, count=0, last_offset_delta=-1)
    assert error_of(sent).error is Errors.INVALID_RECORD


@pytest.mark.parametrize(("last_offset_delta", "count"), [(0, 3), (15, 3), (-3, 3)])
def test_inconsistent_count_and_offset(last_offset_delta: int, count: int) -> None:
    sent = kafka_batch(three(), count=count, last_offset_delta=last_offset_delta)
    assert error_of(sent).error is Errors.INVALID_RECORD


@pytest.mark.parametrize(("last_offset_delta", "count"), [(5, 6), (1, 2)])
def test_unmatched_number_of_records(last_offset_delta: int, count: int) -> None:
    sent = kafka_batch(three(), count=count, last_offset_delta=last_offset_delta)
    assert error_of(sent).error is Errors.INVALID_RECORD


def test_record_batch_with_count_overrides() -> None:
    assert validate(kafka_batch(three(), count=3, last_offset_delta=2))[1].records_count == 3


def test_control_records_not_allowed_from_clients() -> None:
    err = error_of(kafka_batch(three(), attributes=0x20))
    assert err.error is Errors.INVALID_RECORD and "control" in err.message


def test_check_invalid_sequence() -> None:
    err = error_of(kafka_batch(three(), producer_id=1324, base_sequence=-1))
    assert err.error is Errors.INVALID_RECORD and "sequence" in err.message


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_check_invalid_checksum(codec: CompressionType) -> None:
    sent = bytearray(kafka_batch(three(), codec=codec))
    sent[-1] ^= 0xFF
    assert error_of(bytes(sent)).error is Errors.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_check_only_one_batch(codec: CompressionType) -> None:
    compressed = kafka_batch(three(), codec=CompressionType.GZIP)
    err = error_of(kafka_batch(three(), codec=codec) + compressed)
    assert err.error is Errors.INVALID_RECORD and "more than one batch" in err.message


def test_check_mismatch_magic() -> None:
    sent = bytearray(kafka_batch(three()))
    sent[16] = 1
    assert error_of(bytes(sent)).error is Errors.CORRUPT_MESSAGE


# ------------------------------------------------------------------------------------------- the log


def test_the_log_stores_the_fixed_batch_and_reads_it_back(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig())
    log.append_as_leader(kafka_batch(three(), max_timestamp=-1), leader_epoch=3)
    info = log.append_as_leader(kafka_batch(three(), codec=CompressionType.ZSTD, max_timestamp=-1), 3)
    assert (info.first_offset, info.max_timestamp, info.log_append_time_ms) == (3, 1_002, -1)
    data = log.read(0, 1 << 20)
    stored = [h for _, h in iter_batches(data)]  # iter_batches checks each CRC
    assert [(h.base_offset, h.max_timestamp, h.partition_leader_epoch) for h in stored] == [
        (0, 1_002, 3),
        (3, 1_002, 3),
    ]
    assert log.fetch_offset_by_timestamp(1_002) is not None


def test_a_log_append_time_log_stamps_its_clock(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig())
    log.timestamp_type = TimestampType.LOG_APPEND_TIME
    before = log._now_ms()
    info = log.append_as_leader(build_batch(three(), base_timestamp=1_000), leader_epoch=0)
    assert info.log_append_time_ms >= before
    [header] = [h for _, h in iter_batches(log.read(0, 1 << 20))]
    assert header.attributes & LOG_APPEND_TIME and header.max_timestamp == info.log_append_time_ms
