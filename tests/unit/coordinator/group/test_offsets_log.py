"""Batches written to __consumer_offsets and the replay that loads a partition."""

from __future__ import annotations

from coordinator.group.group_metadata import OffsetAndMetadata
from coordinator.group.offsets_log import GroupLoader, group_metadata_batch, offset_commit_batch
from protocol.group_records import (
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
)
from protocol.records import Record, build_batch, build_simple_batch, decode_records

VALUE = GroupMetadataValue("consumer", 2, "range", "m", 5, [])


def test_offset_commit_batch_has_a_record_per_partition_with_kafkas_key_and_value() -> None:
    batch = offset_commit_batch(
        "g", {("t", 0): OffsetAndMetadata(5, 1, "meta"), ("t", 1): OffsetAndMetadata(9)}, 1000
    )
    header, records = decode_records(batch)
    assert header.records_count == 2 and header.base_timestamp == 1000
    assert [decode_key(r.key or b"") for r in records] == [
        OffsetCommitKey("g", "t", 0),
        OffsetCommitKey("g", "t", 1),
    ]
    assert decode_offset_commit_value(records[0].value or b"") == OffsetCommitValue(5, 1, "meta", 1000)


def test_replay_keeps_the_last_record_of_each_key_and_tombstones_delete() -> None:
    loader = GroupLoader()
    loader.add_batches(
        offset_commit_batch("g", {("t", 0): OffsetAndMetadata(1)}, 1)
        + group_metadata_batch("g", VALUE, 2)
        + offset_commit_batch("g", {("t", 0): OffsetAndMetadata(7), ("t", 1): OffsetAndMetadata(3)}, 3)
        + offset_commit_batch("h", {("t", 0): OffsetAndMetadata(4)}, 4)
        + group_metadata_batch("h", VALUE, 5)
        + group_metadata_batch("h", None, 6)
    )
    result = loader.result()
    assert result["g"].metadata == VALUE
    assert {tp: o.offset for tp, o in result["g"].offsets.items()} == {("t", 0): 7, ("t", 1): 3}
    # h's metadata was deleted; its offsets remain (an Empty group with offsets, as in Kafka).
    assert result["h"].metadata is None and result["h"].offsets[("t", 0)].offset == 4


def test_offset_tombstone_deletes_the_offset() -> None:
    key = offset_commit_batch("g", {("t", 0): OffsetAndMetadata(1)}, 1)
    _, records = decode_records(key)
    loader = GroupLoader()
    loader.add_batches(key + build_batch([Record(0, 0, records[0].key, None)]))
    assert "g" not in loader.result()


def test_records_that_are_not_kafkas_are_skipped_not_fatal() -> None:
    loader = GroupLoader()
    loader.add_batches(
        build_simple_batch([b"no key"])
        + build_batch([Record(0, 0, b"\x00\x09junk", b"x"), Record(1, 0, b"\x00\x01\x00", b"torn")])
        + offset_commit_batch("g", {("t", 0): OffsetAndMetadata(2)}, 1)
    )
    assert loader.skipped == 3
    assert loader.result()["g"].offsets[("t", 0)].offset == 2
