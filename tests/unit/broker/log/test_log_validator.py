"""The leader's batch validation (Kafka's LogValidator): what producers really send passes; a bad record is
listed with its index among the partition's records; the list is capped."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from crc32c import crc32c

from broker.log.log_validator import MAX_RECORD_ERRORS, validate_records_as_leader
from protocol.errors import InvalidRecordError
from protocol.records import Record, build_batch, build_simple_batch


def raw_batch(items: list[Any]) -> bytes:
    """A batch with a consistent, CRC-valid header around ``items`` exactly as given."""
    batch = bytearray(build_simple_batch([b"x"] * len(items))[:61]) + msgpack.packb(items, use_bin_type=True)
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


def test_batches_built_by_the_producers_pass() -> None:
    records = [
        Record(0, 0, b"k0", b"v0", {"h": b"1"}),
        Record(1, 7, None, None, {}),
        Record(2, 3, b"", b"x" * 1000, {"a": b"", "b": b"2"}),
    ]
    one = build_batch(records, base_timestamp=1_000)
    two = build_simple_batch([b"a", b"b"], producer_id=5, producer_epoch=0, base_sequence=0)
    found = validate_records_as_leader(one + two)
    assert [(pos, h.records_count, h.max_timestamp) for pos, h in found] == [
        (0, 3, 1_007),
        (len(one), 2, found[1][1].base_timestamp),
    ]


def test_each_bad_record_is_listed_with_its_index_in_the_partition() -> None:
    first = build_simple_batch([b"a", b"b"])
    bad = raw_batch([[0, 0, None, b"v", {}], [1, 0, None, 5, {}], [2, 0, None, b"v", {}]])
    assert validate_records_as_leader(raw_batch([[0, 0, None, b"v", {}]]))  # the helper makes valid batches
    with pytest.raises(InvalidRecordError) as info:
        validate_records_as_leader(first + bad)
    assert [i for i, _ in info.value.record_errors] == [3]
    assert "value is neither bin nor nil" in info.value.record_errors[0][1]


def test_record_errors_are_capped_and_the_rest_counted() -> None:
    n = MAX_RECORD_ERRORS + 5
    with pytest.raises(InvalidRecordError) as info:
        validate_records_as_leader(raw_batch([[i, 0, None, "str", {}] for i in range(n)]))
    assert [i for i, _ in info.value.record_errors] == list(range(MAX_RECORD_ERRORS))
    assert f"{n} invalid records (5 more not listed)" in info.value.message
