"""Kafka's .index and .timeindex as a segment writes them, and the lookup of the first record at or after
a timestamp (ListOffsets) through them."""

from __future__ import annotations

import struct
from pathlib import Path

from protocol.record_codec import Record
from protocol.records import assign_offsets_and_epoch, build_batch, iter_batches
from storage.log import MAX_TIMESTAMP, LogConfig
from storage.segment import LogSegment
from storage.time_index import ENTRY_SIZE, TimeIndex

from .support import open_log


def timed_batch(first_ts: int, deltas: list[int], *, codec: int = 0) -> bytes:
    records = [Record(i, d, None, b"v" * 40) for i, d in enumerate(deltas)]
    return build_batch(records, base_timestamp=first_ts, attributes=codec)


def append(segment: LogSegment, data: bytes, offset: int, epoch: int = 3) -> int:
    buf = bytearray(data)
    end = assign_offsets_and_epoch(buf, offset, epoch)
    segment.append(buf, [h for _, h in iter_batches(buf)])
    return end


def test_time_index_file_is_kafkas_12_byte_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    index = TimeIndex(path, 100)
    index.maybe_append(5_000, 104)
    index.maybe_append(5_000, 110)  # not larger: not written (Kafka's rule)
    index.maybe_append(7_000, 120)
    index.close()
    raw = path.read_bytes()
    assert len(raw) == 2 * ENTRY_SIZE
    assert struct.unpack(">qiqi", raw) == (5_000, 4, 7_000, 20)
    again = TimeIndex(path, 100)
    assert again.entries == [(5_000, 104), (7_000, 120)]
    assert again.lookup(4_999) == (-1, 100)
    assert again.lookup(6_000) == (5_000, 104)
    again.truncate_to(120)
    assert again.entries == [(5_000, 104)]


def test_segment_writes_both_indexes_every_interval_and_on_roll(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 0, index_interval_bytes=300)
    offset = 0
    for i in range(20):
        offset = append(segment, timed_batch(10_000 + 100 * i, [0, 5, 2]), offset)
    index = segment.index.entries
    times = segment.time_index.entries
    assert index and len(times) == len(index)
    positions = {pos: h for pos, h in iter_batches(segment.read_bytes(0, segment.size))}
    for (last_offset, position), (ts, ts_offset) in zip(index, times, strict=True):
        header = positions[position]
        assert header.last_offset == last_offset  # Kafka's .index: a batch's last offset and position
        assert (ts, ts_offset) == (header.max_timestamp, header.last_offset)
    raw = segment.index_path.read_bytes()
    assert struct.unpack(">ii", raw[:8]) == (index[0][0], index[0][1])
    segment.on_become_inactive()
    assert segment.time_index.entries[-1] == (10_000 + 1_900 + 5, offset - 1)


def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    segment = LogSegment.create(tmp_path, 0, index_interval_bytes=100)
    offset = 0
    for i in range(10):  # batch i: records at 1000*i + 0, +7, +3
        offset = append(segment, timed_batch(1_000 * i, [0, 7, 3], codec=i % 5), offset, epoch=i)
    assert segment.find_offset_by_timestamp(0, 0) == (0, 0, 0)
    # the first record in offset order whose timestamp is >= the target, as Kafka answers
    assert segment.find_offset_by_timestamp(5_001, 0) == (5_007, 16, 5)
    assert segment.find_offset_by_timestamp(5_007, 0) == (5_007, 16, 5)
    assert segment.find_offset_by_timestamp(5_008, 0) == (6_000, 18, 6)
    assert segment.find_offset_by_timestamp(5_001, 18) == (6_000, 18, 6)
    assert segment.find_offset_by_timestamp(9_008, 0) is None
    assert segment.max_timestamp == 9_007


def test_log_offsets_by_timestamp_across_segments_and_after_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=600, index_interval_bytes=100))
    for i in range(12):
        log.append_as_leader(timed_batch(1_000 * i, [0, 2]), leader_epoch=1 + i // 6)
    assert len(log.segments) > 2
    assert log.fetch_offset_by_timestamp(0) == (0, 0, 1)
    assert log.fetch_offset_by_timestamp(7_001) == (7_002, 15, 2)
    assert log.fetch_offset_by_timestamp(11_003) is None
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (11_002, 23, 2)
    log.truncate_to(15)  # the batch holding 14-15 goes
    assert log.log_end_offset == 14
    assert log.fetch_offset_by_timestamp(6_001) == (6_002, 13, 2)
    assert log.fetch_offset_by_timestamp(7_000) is None
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (6_002, 13, 2)
    log.close()
    again = open_log(tmp_path, LogConfig(segment_bytes=600, index_interval_bytes=100), recovery_point=14)
    assert again.fetch_offset_by_timestamp(5_001) == (5_002, 11, 1)
    assert again.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (6_002, 13, 2)
