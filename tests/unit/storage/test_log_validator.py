"""The leader's batch validation (Kafka's LogValidator): what producers really send passes, compressed or
not; a record that disagrees with its header is refused naming its index; Kafka's error codes for each
problem; the C-backed walk and the pure walk agree on every batch. What Kafka fixes rather than refuses
(max_timestamp, LogAppendTime, a compressed batch's inner offsets) is in test_log_validator_fixes.py."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

import protocol.record_codec as record_codec
from protocol.compression import CompressionType, compress
from protocol.errors import Errors, InvalidRecordError, KafkaError
from protocol.record_codec import Record, encode_record, varint
from protocol.records import BatchHeader, build_batch, build_simple_batch
from storage.log_validator import validate_records_as_leader

CODECS = list(CompressionType)


def raw_batch(payload: bytes, count: int, *, attributes: int = 0, max_ts_delta: int = 0) -> bytes:
    """A batch with a consistent, CRC-valid header around the record bytes ``payload`` exactly as given."""
    tail = struct.pack(">hiqqqhii", attributes, count - 1, 1_000, 1_000 + max_ts_delta, -1, -1, -1, count)
    tail += payload
    return struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc32c(tail)) + tail


def error_of(records: bytes) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        validate_records_as_leader(records)
    return info.value


def headers_of(records: bytes) -> list[tuple[int, BatchHeader]]:
    return validate_records_as_leader(records).batches


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_batches_built_by_the_producers_pass(codec: CompressionType) -> None:
    records = [
        Record(0, 0, b"k0", b"v0", {"h": b"1"}),
        Record(1, 7, None, None),
        Record(2, 3, b"", b"x" * 1000, (("a", b""), ("a", None))),
    ]
    one = build_batch(records, base_timestamp=1_000, attributes=int(codec))
    found = headers_of(one)
    assert [(pos, h.records_count, h.max_timestamp) for pos, h in found] == [(0, 3, 1_007)]
    builder = DefaultRecordBatchBuilder(2, int(codec), False, 5, 0, 0, 10**6)
    for i in range(50):
        builder.append(i, 2_000 + i, b"key", b"value %d" % i, [("trace", b"t")])
    theirs = bytes(builder.build())
    assert headers_of(theirs)[0][1].max_timestamp == 2_049


def test_several_uncompressed_batches_in_one_request() -> None:
    first = build_simple_batch([b"a", b"b"])
    second = build_simple_batch([b"c"], producer_id=5, producer_epoch=0, base_sequence=0)
    assert [pos for pos, _ in headers_of(first + second)] == [0, len(first)]


def test_a_malformed_record_is_listed_with_its_index_in_the_partition() -> None:
    first = build_simple_batch([b"a", b"b"])
    good = encode_record(Record(0, 0, None, b"v"))
    bad = encode_record(Record(1, 0, None, b"v"))
    bad = varint(len(bad) - 1 + 1) + bad[1:] + b"\x00"  # a length one byte longer than its fields
    err = error_of(first + raw_batch(good + bad, 2))
    assert isinstance(err, InvalidRecordError) and err.error is Errors.INVALID_RECORD
    assert [i for i, _ in err.record_errors] == [3]
    assert "record 1: invalid record size" in err.record_errors[0][1]


def test_a_record_whose_length_disagrees_with_its_fields() -> None:
    good = encode_record(Record(0, 0, None, b"value"))
    body = good[1:] + b"\x00"  # one byte more than the fields take
    err = error_of(raw_batch(varint(len(body)) + body, 1))
    assert err.error is Errors.INVALID_RECORD
    assert "invalid record size" in err.message


def test_records_count_disagreeing_with_the_records() -> None:
    two = b"".join(encode_record(Record(i, 0, None, b"v")) for i in range(2))
    more = error_of(raw_batch(two, 3))
    assert more.error is Errors.INVALID_RECORD and "the records end after 2 of the 3" in more.message
    assert isinstance(more, InvalidRecordError) and more.record_errors == []
    fewer = error_of(raw_batch(two + encode_record(Record(2, 0, None, b"v")), 2))
    assert fewer.error is Errors.INVALID_RECORD and "incorrect declared batch size" in fewer.message


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=lambda c: c.config_name)
def test_compressed_records_disagreeing_with_the_header(codec: CompressionType) -> None:
    two = b"".join(encode_record(Record(i, 0, None, b"v")) for i in range(2))
    err = error_of(raw_batch(compress(codec, two), 3, attributes=int(codec)))
    assert err.error is Errors.INVALID_RECORD


@pytest.mark.parametrize("codec", [c for c in CODECS if c], ids=lambda c: c.config_name)
def test_a_stream_that_does_not_decompress_is_corrupt(codec: CompressionType) -> None:
    err = error_of(raw_batch(b"\x10\x20not a compressed stream at all", 1, attributes=int(codec)))
    assert err.error is Errors.CORRUPT_MESSAGE
    assert "does not decompress" in err.message or "stream" in err.message


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec(codec_id: int) -> None:
    err = error_of(raw_batch(encode_record(Record(0, 0, None, b"v")), 1, attributes=codec_id))
    assert err.error is Errors.UNSUPPORTED_COMPRESSION_TYPE


def test_attributes_kafka_refuses_and_those_it_takes() -> None:
    record = encode_record(Record(0, 0, None, b"v"))
    assert error_of(raw_batch(record, 1, attributes=0x20)).error is Errors.INVALID_RECORD  # control
    # The delete horizon bit and bits Kafka does not know: Kafka's validator does not look at them.
    for attributes in (0x40, 0x80, 0x4000):
        [(_, header)] = headers_of(raw_batch(record, 1, attributes=attributes))
        assert header.attributes == attributes


def test_a_compressed_batch_must_be_alone() -> None:
    compressed = build_simple_batch([b"a"], attributes=int(CompressionType.GZIP))
    err = error_of(build_simple_batch([b"b"]) + compressed)
    assert err.error is Errors.INVALID_RECORD and "more than one batch" in err.message


def test_header_keys_that_are_not_utf8_are_accepted_as_kafka_does() -> None:
    body = b"\x00\x00\x00\x01\x02v\x02" + b"\x02\xff" + b"\x01"
    assert headers_of(raw_batch(varint(len(body)) + body, 1))


@pytest.mark.parametrize("attributes", [0x01, 0x7F, 0x80, 0xFF])
def test_a_record_attributes_byte_is_one_unused_byte_as_kafka_reads_it(attributes: int) -> None:
    # The second record's attributes byte with its top bit set: a varint reader would take the next byte
    # (the timestamp delta) as part of it and see a different record.
    payload = bytearray(encode_record(Record(0, 0, None, b"a")) + encode_record(Record(1, 0, b"k", None)))
    payload[len(encode_record(Record(0, 0, None, b"a"))) + 1] = attributes
    [(_, header)] = headers_of(raw_batch(bytes(payload), 2))
    assert header.records_count == 2


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.none() | st.binary(max_size=30), st.none() | st.binary(max_size=30)),
        min_size=1,
        max_size=8,
    ),
    st.data(),
)
def test_the_fast_walk_and_the_pure_walk_agree(
    items: list[tuple[bytes | None, bytes | None]], data: st.DataObject
) -> None:
    payload = bytearray(b"".join(encode_record(Record(i, 0, k, v)) for i, (k, v) in enumerate(items)))
    if data.draw(st.booleans()):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    count = len(items) + data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    if count < 1:
        count = 1
    batch = raw_batch(bytes(payload), count)

    def verdict() -> object:
        try:
            result = validate_records_as_leader(batch)
            return [h.records_count for _, h in result.batches], bytes(result.records)
        except KafkaError as exc:
            return exc.error

    fast = verdict()
    saved = record_codec._CRecordBatch
    record_codec._CRecordBatch = None
    try:
        pure = verdict()
    finally:
        record_codec._CRecordBatch = saved
    assert fast == pure


def test_a_topic_codec_recompresses_other_batches_and_keeps_its_own(tmp_path: Path) -> None:
    from protocol.records import decode_records, iter_batches
    from storage.log import LogConfig

    from .support import open_log

    log = open_log(tmp_path, LogConfig())
    log.compression_type = CompressionType.GZIP
    records = [Record(0, 0, b"k", b"v" * 50, {"h": b"x"}), Record(1, 4, None, b"w" * 50)]
    sent = build_batch(records, base_timestamp=5_000, producer_id=3, producer_epoch=0, base_sequence=0)
    log.append_as_leader(sent, leader_epoch=1)
    already = build_batch(records, base_timestamp=6_000, attributes=int(CompressionType.GZIP))
    log.append_as_leader(already, leader_epoch=1)
    data = log.read(0, 1 << 20)
    stored = [(pos, h) for pos, h in iter_batches(data)]
    assert [h.attributes & 7 for _, h in stored] == [1, 1]
    first, second = stored
    header, decoded = decode_records(data, first[0])
    assert decoded == records
    assert (header.base_timestamp, header.producer_id, header.base_sequence) == (5_000, 3, 0)
    assert data[second[0] + 21 :] == already[21:]  # kept as sent (the CRC and everything it covers)


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.ZSTD], ids=lambda c: c.config_name)
def test_a_stream_that_decompresses_past_the_limit_is_refused(
    codec: CompressionType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import protocol.compression

    monkeypatch.setattr(protocol.compression, "MAX_DECOMPRESSED_BYTES", 10_000)
    small = build_simple_batch([b"x" * 100] * 50, attributes=int(codec))
    assert headers_of(small)
    bomb = build_simple_batch([b"x" * 1000] * 50, attributes=int(codec))
    err = error_of(bomb)
    assert err.error is Errors.CORRUPT_MESSAGE and "more than 10000 bytes" in err.message
