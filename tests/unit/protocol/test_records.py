from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import CorruptRecordError, Errors
from protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Record,
    assign_offsets_and_epoch,
    batch_crc,
    build_batch,
    build_simple_batch,
    decode_records,
    iter_batches,
    read_header,
    scan_valid_prefix,
    validate_batch,
)

records_strategy = st.lists(
    st.builds(
        Record,
        offset_delta=st.just(0),
        timestamp_delta=st.integers(min_value=0, max_value=2**31),
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=200),
        headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3).map(
            tuple
        ),
    ),
    min_size=1,
    max_size=30,
).map(lambda rs: [Record(i, r.timestamp_delta, r.key, r.value, r.headers) for i, r in enumerate(rs)])


def test_byte_layout_matches_hand_packed_struct() -> None:
    records = [Record(0, 5, b"k", b"v", {"h": b"x"}), Record(1, 7, None, b"w")]
    batch = build_batch(
        records,
        base_offset=42,
        partition_leader_epoch=3,
        base_timestamp=1_000,
        producer_id=9,
        producer_epoch=2,
        base_sequence=11,
        attributes=0,
    )
    # Kafka's DefaultRecord: length, attributes, timestamp_delta, offset_delta, key, value, headers
    # (zig-zag varints: 5 -> 0x0a, 7 -> 0x0e, -1 -> 0x01, 1 -> 0x02).
    first = b"\x00" + b"\x0a" + b"\x00" + b"\x02k" + b"\x02v" + b"\x02" + b"\x02h" + b"\x02x"
    second = b"\x00" + b"\x0e" + b"\x02" + b"\x01" + b"\x02w" + b"\x00"
    payload = bytes([len(first) * 2]) + first + bytes([len(second) * 2]) + second
    tail = struct.pack(">hiqqqhii", 0, 1, 1_000, 1_007, 9, 2, 11, 2) + payload
    crc = crc32c(tail)
    expected = struct.pack(">qiibI", 42, len(tail) + 9, 3, 2, crc) + tail
    assert batch == expected
    assert len(batch) == BATCH_HEADER_SIZE + len(payload)
    header = validate_batch(batch)
    assert header == BatchHeader(42, len(batch) - 12, 3, MAGIC, crc, 0, 1, 1_000, 1_007, 9, 2, 11, 2)
    assert header.last_offset == 43
    assert header.next_offset == 44
    assert header.size == len(batch)
    assert batch_crc(batch) == crc


@given(records_strategy, st.integers(min_value=0, max_value=2**62), st.integers(-1, 2**31 - 1))
def test_build_decode_round_trip(records: list[Record], base_offset: int, epoch: int) -> None:
    batch = build_batch(records, base_offset=base_offset, partition_leader_epoch=epoch, base_timestamp=77)
    header, decoded = decode_records(batch)
    assert decoded == records
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == epoch
    assert header.records_count == len(records)
    assert header.max_timestamp == 77 + max(r.timestamp_delta for r in records)


def test_build_simple_batch() -> None:
    batch = build_simple_batch([b"a", b"bb", b"ccc"], base_offset=5, base_timestamp=1)
    header, records = decode_records(batch)
    assert header.base_offset == 5 and header.last_offset == 7 and header.records_count == 3
    assert records == [Record(i, 0, None, v) for i, v in enumerate([b"a", b"bb", b"ccc"])]


def test_build_rejects_empty() -> None:
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_simple_batch([])


def test_default_timestamp_is_now() -> None:
    import time

    before = time.time_ns() // 1_000_000
    header = read_header(build_simple_batch([b"x"]))
    after = time.time_ns() // 1_000_000
    assert before <= header.base_timestamp <= after


@given(records_strategy, records_strategy, st.integers(0, 2**40), st.integers(0, 2**31 - 1))
def test_assign_offsets_and_epoch_keeps_crc(a: list[Record], b: list[Record], base: int, epoch: int) -> None:
    buf = bytearray(build_batch(a, base_timestamp=1) + build_batch(b, base_timestamp=2))
    next_offset = assign_offsets_and_epoch(buf, base, epoch)
    assert next_offset == base + len(a) + len(b)
    headers = [h for _, h in iter_batches(buf)]  # validates CRCs
    assert [h.base_offset for h in headers] == [base, base + len(a)]
    assert [h.partition_leader_epoch for h in headers] == [epoch, epoch]
    assert decode_records(buf, headers[0].size)[1] == b


@given(records_strategy, st.data())
def test_any_flipped_byte_after_attributes_fails_crc(records: list[Record], data: st.DataObject) -> None:
    batch = bytearray(build_batch(records, base_timestamp=0))
    index = data.draw(st.integers(21, len(batch) - 1))
    bit = data.draw(st.integers(0, 7))
    batch[index] ^= 1 << bit
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validate_batch(batch)


def test_flipped_stored_crc_fails() -> None:
    batch = bytearray(build_simple_batch([b"x"], base_timestamp=0))
    batch[17] ^= 0x01
    with pytest.raises(CorruptRecordError, match=r"batch at position 0: CRC mismatch \(stored 0x"):
        validate_batch(batch)


def test_corrupt_error_is_kafka_corrupt_message() -> None:
    with pytest.raises(CorruptRecordError) as info:
        read_header(b"\x00" * 10)
    assert info.value.error is Errors.CORRUPT_MESSAGE


def test_bad_magic() -> None:
    batch = bytearray(build_simple_batch([b"x"]))
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        read_header(batch)


def test_lying_batch_length() -> None:
    batch = bytearray(build_simple_batch([b"hello"]))
    longer = bytearray(batch)
    struct.pack_into(">i", longer, 8, len(batch))  # claims 12 bytes more than there are
    with pytest.raises(CorruptRecordError, match="only"):
        validate_batch(longer)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(longer, validate=False))
    shorter = bytearray(batch)
    struct.pack_into(">i", shorter, 8, len(batch) - LOG_OVERHEAD - 1)
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validate_batch(shorter)
    tiny = bytearray(batch)
    struct.pack_into(">i", tiny, 8, 48)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        read_header(tiny)


def test_sparse_deltas_are_a_stored_batch_but_not_a_producers() -> None:
    """A batch the log cleaner rewrote keeps its offset range with fewer records (Kafka's compacted
    batches): replicas and readers take it; the leader's validator still wants dense deltas."""
    from protocol.errors import KafkaError
    from storage.log_validator import validate_records_as_leader

    batch = build_batch([Record(0, 0, b"k", b"a"), Record(2, 0, b"k", b"b")])
    assert validate_batch(batch).records_count == 2
    with pytest.raises(KafkaError, match="last_offset_delta 2 does not match records_count 2"):
        validate_records_as_leader(batch)


def test_more_records_than_offsets_rejected() -> None:
    batch = bytearray(build_simple_batch([b"a", b"b"]))
    struct.pack_into(">i", batch, 23, 0)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    with pytest.raises(CorruptRecordError, match="records_count 2 does not fit last_offset_delta 0"):
        validate_batch(batch)


def test_empty_batch_with_an_offset_range_is_valid() -> None:
    """Kafka's cleaner keeps a producer's last batch as an empty header (records_count 0)."""
    batch = bytearray(build_simple_batch([b"a"]))
    struct.pack_into(">i", batch, 57, 0)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    assert validate_batch(batch).records_count == 0
    struct.pack_into(">i", batch, 23, -1)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    with pytest.raises(CorruptRecordError, match="last_offset_delta -1 < 0"):
        validate_batch(batch)


def test_records_count_must_match_payload() -> None:
    batch = bytearray(build_simple_batch([b"a", b"b"]))
    struct.pack_into(">i", batch, 57, 3)
    struct.pack_into(">i", batch, 23, 2)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    validate_batch(batch)  # the hot path does not look at the records
    with pytest.raises(CorruptRecordError, match="the records end after 2 of the 3 records"):
        decode_records(batch)
    fewer = bytearray(build_simple_batch([b"a", b"b"]))
    struct.pack_into(">i", fewer, 57, 1)
    struct.pack_into(">i", fewer, 23, 0)
    struct.pack_into(">I", fewer, 17, crc32c(bytes(fewer[21:])))
    with pytest.raises(CorruptRecordError, match="bytes remain after the 1 records"):
        decode_records(fewer)


def test_garbage_records_payload() -> None:
    payload = b"\x7f"  # a record length of -64
    tail = struct.pack(">hiqqqhii", 0, 0, 0, 0, -1, -1, -1, 1) + payload
    batch = struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc32c(tail)) + tail
    validate_batch(batch)
    with pytest.raises(CorruptRecordError, match="record 0: length -64"):
        decode_records(batch)


@given(st.lists(records_strategy, min_size=1, max_size=5), st.data())
def test_scan_valid_prefix_keeps_whole_batches(batches: list[list[Record]], data: st.DataObject) -> None:
    encoded = [build_batch(rs, base_timestamp=0) for rs in batches]
    whole = b"".join(encoded)
    cut = data.draw(st.integers(0, len(whole)))
    length, headers = scan_valid_prefix(whole[:cut])
    boundaries = [0]
    for b in encoded:
        boundaries.append(boundaries[-1] + len(b))
    expected = max(x for x in boundaries if x <= cut)
    assert length == expected
    assert len(headers) == boundaries.index(expected)
    if cut != expected:
        with pytest.raises(CorruptRecordError):
            list(iter_batches(whole[:cut]))
    else:
        assert [h for _, h in iter_batches(whole[:cut])] == headers


def test_scan_valid_prefix_stops_at_corrupt_batch() -> None:
    a = build_simple_batch([b"a"])
    b = bytearray(build_simple_batch([b"b"]))
    b[-1] ^= 0xFF
    c = build_simple_batch([b"c"])
    length, headers = scan_valid_prefix(a + bytes(b) + c)
    assert length == len(a)
    assert len(headers) == 1


def test_iter_batches_positions_and_memoryview() -> None:
    a = build_simple_batch([b"a", b"b"], base_offset=0)
    b = build_simple_batch([b"c"], base_offset=2)
    buf = memoryview(a + b)
    assert [(pos, h.base_offset) for pos, h in iter_batches(buf)] == [(0, 0), (len(a), 2)]
    assert decode_records(buf, len(a))[1][0].value == b"c"
    assert batch_crc(buf, len(a)) == read_header(buf, len(a)).crc


@given(
    st.lists(st.none() | st.binary(max_size=70), min_size=1, max_size=80)
    | st.integers(0, 300).flatmap(lambda size: st.lists(st.binary(min_size=size, max_size=size), min_size=1))
)
def test_the_producers_encoding_is_the_general_one(values: list[bytes | None]) -> None:
    from protocol.record_codec import encode_records, encode_values

    assert encode_values(values) == encode_records([Record(i, 0, None, v) for i, v in enumerate(values)])
