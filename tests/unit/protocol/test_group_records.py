"""``__consumer_offsets`` keys and values, byte for byte as Kafka's schemas lay them out."""

from __future__ import annotations

import struct

import pytest

from protocol.errors import CorruptRecordError
from protocol.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for_group,
)


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text.encode())) + text.encode()


def test_offset_commit_key_v1_bytes() -> None:
    key = OffsetCommitKey("my-group", "orders", 7)
    data = encode_offset_commit_key(key)
    assert data == b"\x00\x01" + s16("my-group") + s16("orders") + b"\x00\x00\x00\x07"
    assert decode_key(data) == key


def test_offset_commit_value_v3_bytes() -> None:
    value = OffsetCommitValue(offset=1234, leader_epoch=5, metadata="meta", commit_timestamp=1700000000000)
    data = encode_offset_commit_value(value)
    assert data == (
        b"\x00\x03"
        + struct.pack(">q", 1234)
        + struct.pack(">i", 5)
        + s16("meta")
        + struct.pack(">q", 1700000000000)
    )
    assert decode_offset_commit_value(data) == value


def test_offset_commit_value_with_expire_timestamp_is_v1() -> None:
    value = OffsetCommitValue(offset=1, metadata="", commit_timestamp=2, expire_timestamp=3)
    data = encode_offset_commit_value(value)
    assert data == b"\x00\x01" + struct.pack(">q", 1) + s16("") + struct.pack(">qq", 2, 3)
    assert decode_offset_commit_value(data) == value


def test_older_offset_value_versions_decode() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 9) + s16("x") + struct.pack(">q", 10)
    assert decode_offset_commit_value(v0) == OffsetCommitValue(9, -1, "x", 10)
    key_v0 = b"\x00\x00" + s16("g") + s16("t") + struct.pack(">i", 1)
    assert decode_key(key_v0) == OffsetCommitKey("g", "t", 1)


def test_flexible_offset_value_v4_decodes() -> None:
    # v4: compact string (length + 1 as an unsigned varint) and an empty tagged-field section.
    v4 = (
        b"\x00\x04" + struct.pack(">q", 9) + struct.pack(">i", 2) + b"\x02x" + struct.pack(">q", 10) + b"\x00"
    )
    assert decode_offset_commit_value(v4) == OffsetCommitValue(9, 2, "x", 10)


def test_group_metadata_key_v2_bytes() -> None:
    data = encode_group_metadata_key(GroupMetadataKey("g1"))
    assert data == b"\x00\x02" + s16("g1")
    assert decode_key(data) == GroupMetadataKey("g1")


def test_group_metadata_value_v3_bytes() -> None:
    member = MemberMetadataValue("m-1", None, "client", "/127.0.0.1", 30000, 10000, b"\x00\x01", b"\x02")
    value = GroupMetadataValue("consumer", 3, "range", "m-1", 1700000000000, [member])
    data = encode_group_metadata_value(value)
    expected = (
        b"\x00\x03"
        + s16("consumer")
        + struct.pack(">i", 3)
        + s16("range")
        + s16("m-1")
        + struct.pack(">q", 1700000000000)
        + struct.pack(">i", 1)
        + s16("m-1")
        + s16(None)
        + s16("client")
        + s16("/127.0.0.1")
        + struct.pack(">ii", 30000, 10000)
        + struct.pack(">i", 2)
        + b"\x00\x01"
        + struct.pack(">i", 1)
        + b"\x02"
    )
    assert data == expected
    assert decode_group_metadata_value(data) == value


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("consumer", 4, None, None, 5, [])
    data = encode_group_metadata_value(value)
    assert data == b"\x00\x03" + s16("consumer") + struct.pack(">i", 4) + s16(None) + s16(None) + struct.pack(
        ">qi", 5, 0
    )
    assert decode_group_metadata_value(data) == value


def test_group_value_v0_decodes_with_rebalance_timeout_from_session() -> None:
    data = (
        b"\x00\x00"
        + s16("consumer")
        + struct.pack(">i", 1)
        + s16("range")
        + s16("m")
        + struct.pack(">i", 1)
        + s16("m")
        + s16("c")
        + s16("h")
        + struct.pack(">i", 6000)
        + struct.pack(">i", 0)
        + struct.pack(">i", 0)
    )
    value = decode_group_metadata_value(data)
    assert value.members == [MemberMetadataValue("m", None, "c", "h", 6000, 6000, b"", b"")]


def test_unknown_key_version_is_skipped_and_damage_is_corrupt() -> None:
    assert decode_key(b"\x00\x09abc") is None
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x01\x00\x05ab")
    with pytest.raises(CorruptRecordError):
        decode_offset_commit_value(b"\x00\x07")
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00")


def test_java_string_hash_and_partition_for() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    # Integer.MIN_VALUE: Kafka's Utils.abs makes it 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50
    negative = "console-consumer-12345"
    h = java_string_hash(negative)
    assert partition_for_group(negative, 50) == abs(h) % 50
    # Characters outside the BMP count as two UTF-16 units, as in Java.
    assert java_string_hash("\U0001f600") == (0xD83D * 31 + 0xDE00)
