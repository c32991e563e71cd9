"""isrsim's record batches against an independent implementation, kafka-python's: what kafka-python's
builder writes, isrsim reads and writes back byte for byte; what isrsim writes, kafka-python's reader
decodes with a valid CRC and every field; each codec both ways, with Kafka's framing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.codec import snappy_encode
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol.compression import XERIAL_MAGIC, CompressionType, compress, decompress
from protocol.record_codec import Record, encode_records
from protocol.records import BATCH_HEADER_SIZE, build_batch, decode_records, read_header, validate_batch

CODECS = list(CompressionType)

header_pairs = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=4).map(
    tuple
)
records_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**40),  # timestamp delta, a varlong
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        header_pairs,
    ),
    min_size=1,
    max_size=40,
)


def kafka_python_batch(
    items: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    codec: int,
    base_timestamp: int,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, *producer, batch_size=10**8)
    for i, (ts_delta, key, value, headers) in enumerate(items):
        builder.append(i, base_timestamp + ts_delta, key, value, list(headers))
    return bytes(builder.build())


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.integers(0, 2**41))
def test_kafka_python_batches_read_back_byte_identical(items: list, base_timestamp: int) -> None:  # type: ignore[type-arg]
    items[0] = (0, *items[0][1:])  # the builder takes the first record's timestamp as the base
    original = kafka_python_batch(items, 0, base_timestamp, (7, 1, 100))
    header, records = decode_records(original)
    assert header.records_count == len(items)
    assert header.base_timestamp == base_timestamp
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 100)
    assert [(r.timestamp_delta, r.key, r.value, r.headers) for r in records] == items
    again = build_batch(
        records,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp=header.base_timestamp,
        producer_id=7,
        producer_epoch=1,
        base_sequence=100,
    )
    assert again == original


@settings(max_examples=60, deadline=None)
@given(records_strategy, st.integers(0, 2**41), st.integers(0, 2**50), st.integers(-1, 2**31 - 1))
def test_isrsim_batches_decode_with_kafka_python(
    items: list, base_timestamp: int, base_offset: int, epoch: int
) -> None:  # type: ignore[type-arg]
    records = [Record(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(items)]
    batch = build_batch(
        records,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        base_timestamp=base_timestamp,
        producer_id=3,
        producer_epoch=2,
        base_sequence=5,
    )
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc()
    header = read_header(batch)
    assert theirs.base_offset == base_offset
    assert theirs.leader_epoch == epoch
    assert theirs.crc == header.crc
    assert theirs.attributes == 0
    assert theirs.last_offset_delta == len(items) - 1
    assert theirs.first_timestamp == base_timestamp
    assert theirs.max_timestamp == base_timestamp + max(ts for ts, *_ in items)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (3, 2, 5)
    assert theirs.records_count == len(items)
    decoded = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert decoded == [
        (base_offset + i, base_timestamp + ts, k, v, h) for i, (ts, k, v, h) in enumerate(items)
    ]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.config_name)
def test_each_codec_both_ways(codec: CompressionType) -> None:
    items = [(i % 3, f"k{i}".encode(), b"value %d " % i * 20, (("h", b"x"), ("n", None))) for i in range(300)]
    records = [Record(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(items)]
    ours = build_batch(records, base_timestamp=1_000, attributes=int(codec))
    assert read_header(ours).attributes & 7 == codec
    theirs = DefaultRecordBatch(bytearray(ours))
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs] == [
        (i, 1_000 + ts, k, v, h) for i, (ts, k, v, h) in enumerate(items)
    ]
    from_them = kafka_python_batch(items, int(codec), 1_000)
    header, decoded = decode_records(from_them)
    assert header.attributes & 7 == codec
    assert decoded == records
    # the compressed stream holds exactly the records isrsim encodes
    assert decompress(codec, from_them[BATCH_HEADER_SIZE:]) == encode_records(records)


def test_snappy_is_framed_as_the_java_client_and_raw_snappy_is_read() -> None:
    data = encode_records([Record(i, 0, None, b"abc" * 20_000) for i in range(3)])  # > one 32 KiB block
    framed = compress(CompressionType.SNAPPY, data)
    assert framed.startswith(XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress(CompressionType.SNAPPY, framed) == data
    assert decompress(CompressionType.SNAPPY, snappy_encode(data, xerial_compatible=False)) == data
    assert decompress(CompressionType.SNAPPY, snappy_encode(data, xerial_compatible=True)) == data


def test_compressed_batch_validates_as_framing_only() -> None:
    batch = build_batch([Record(0, 0, None, b"x" * 100)], attributes=int(CompressionType.ZSTD))
    assert validate_batch(batch).attributes == CompressionType.ZSTD
