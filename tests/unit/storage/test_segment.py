from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from protocol.records import assign_offsets_and_epoch
from storage.segment import LogSegment, parse_segment_file_name, segment_file_name

from .support import batch, headers, offsets


def fill(segment: LogSegment, sizes: list[int], start: int = 0) -> list[bytes]:
    """Append one batch per entry of ``sizes`` (records per batch) with offsets from ``start``."""
    batches = []
    offset = start
    for i, count in enumerate(sizes):
        data = bytearray(batch(count, 30, tag=i))
        offset = assign_offsets_and_epoch(data, offset, 1)
        segment.append(data, headers(bytes(data)))
        batches.append(bytes(data))
    return batches


@pytest.fixture
def segment(tmp_path: Path) -> LogSegment:
    return LogSegment.create(tmp_path, 100, index_interval_bytes=200)


def test_file_names(tmp_path: Path) -> None:
    assert segment_file_name(42, ".log") == "00000000000000000042.log"
    assert parse_segment_file_name("00000000000000000042.log", ".log") == 42
    assert parse_segment_file_name("00000000000000000042.index", ".log") is None
    assert parse_segment_file_name("42.log", ".log") is None
    seg = LogSegment.create(tmp_path, 7)
    assert seg.log_path.name == "00000000000000000007.log"
    assert seg.index_path.name == "00000000000000000007.index"


def test_append_and_read_back(segment: LogSegment) -> None:
    batches = fill(segment, [1, 2, 3, 1, 5], start=100)
    assert segment.next_offset == 112
    assert segment.size == sum(len(b) for b in batches)
    assert segment.read(100, 1 << 20) == b"".join(batches)
    # start inside a batch returns the whole batch
    assert segment.read(102, 1 << 20) == b"".join(batches[1:])
    assert segment.read(112, 1 << 20) == b""


def test_index_gets_sparse_entries(segment: LogSegment) -> None:
    batches = fill(segment, [1] * 40, start=100)
    size = len(batches[0])
    entries = segment.index.entries
    assert entries, "expected index entries after more than index_interval_bytes"
    for offset, position in entries:
        assert position == (offset - 100) * size  # each entry: a batch's position and its last offset
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(entries)]
    assert all(200 < gap <= 200 + 2 * size for gap in gaps)


def test_read_max_bytes_returns_whole_batches(segment: LogSegment) -> None:
    batches = fill(segment, [1] * 30, start=100)
    size = len(batches[0])
    for max_bytes in (size, size + 1, 2 * size - 1, 5 * size, 7 * size + 3, 1000):
        data = segment.read(103, max_bytes)
        assert len(data) == (max_bytes // size) * size
        assert data == b"".join(batches[3 : 3 + max_bytes // size])


def test_read_min_one_message(segment: LogSegment) -> None:
    batches = fill(segment, [3, 1], start=100)
    assert segment.read(100, 10) == batches[0]
    assert segment.read(100, 10, min_one_message=False) == b""
    assert segment.read(100, 0, min_one_message=False) == b""


def test_read_bounded_by_max_offset(segment: LogSegment) -> None:
    batches = fill(segment, [2, 2, 2, 2], start=100)  # 100-101, 102-103, 104-105, 106-107
    assert segment.read(100, 1 << 20, max_offset=104) == b"".join(batches[:2])
    assert segment.read(100, 1 << 20, max_offset=105) == b"".join(batches[:3])
    assert segment.read(104, 1 << 20, max_offset=104) == b""
    assert segment.read(100, 1 << 20, max_offset=100) == b""


def test_truncate_at_batch_boundary_and_inside(segment: LogSegment) -> None:
    batches = fill(segment, [2, 2, 2, 2], start=100)
    assert segment.truncate_to(106) == len(batches[3])
    assert segment.next_offset == 106
    assert segment.truncate_to(103) == len(batches[1]) + len(batches[2])  # inside a batch: it goes too
    assert segment.next_offset == 102
    assert segment.read(100, 1 << 20) == batches[0]
    assert segment.truncate_to(500) == 0
    fill(segment, [1], start=102)
    assert offsets(segment.read(100, 1 << 20)) == [(100, 101), (102, 102)]


def test_truncate_drops_index_entries(segment: LogSegment) -> None:
    fill(segment, [1] * 40, start=100)
    segment.truncate_to(120)
    assert all(offset < 120 for offset, _ in segment.index.entries)
    assert all(position < segment.size for _, position in segment.index.entries)
    fill(segment, [1] * 20, start=120)
    assert offsets(segment.read(100, 1 << 20))[-1] == (139, 139)


def test_reopen_finds_end_and_index(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200)
    batches = fill(seg, [1, 4, 2] * 10)
    entries = seg.index.entries
    seg.close()
    again = LogSegment.open(tmp_path, 0, index_interval_bytes=200)
    assert again.sanity_check() is None
    assert again.next_offset == 70
    assert again.index.entries == entries
    assert again.read(0, 1 << 20) == b"".join(batches)


def test_recover_rebuilds_the_same_index(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200)
    fill(seg, [1, 4, 2] * 10)
    entries = seg.index.entries
    assert seg.recover() == 0
    assert seg.index.entries == entries
    assert seg.next_offset == 70


def test_recover_cuts_torn_tail(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=200)
    batches = fill(seg, [1, 4, 2])
    seg.close()
    with open(tmp_path / segment_file_name(0, ".log"), "ab") as f:
        f.write(batch(3, 30)[:40])
    again = LogSegment.open(tmp_path, 0, index_interval_bytes=200)
    assert again.recover() == 40
    assert again.next_offset == 7
    assert again.read(0, 1 << 20) == b"".join(batches)


def test_recover_handles_batches_bigger_than_the_read_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.segment.RECOVER_CHUNK", 100)
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=50)
    batches = fill(seg, [1, 5, 1, 8, 2])  # batches of roughly 70 to 300 bytes, chunks of 100
    entries = seg.index.entries
    assert seg.recover() == 0
    assert seg.next_offset == 17
    assert seg.index.entries == entries
    assert seg.read(0, 1 << 20) == b"".join(batches)


def test_delete_removes_files(segment: LogSegment) -> None:
    fill(segment, [1], start=100)
    segment.delete()
    assert not segment.log_path.exists()
    assert not segment.index_path.exists()


def test_create_replaces_stale_files(tmp_path: Path) -> None:
    seg = LogSegment.create(tmp_path, 5)
    fill(seg, [2], start=5)
    seg.close()
    fresh = LogSegment.create(tmp_path, 5)
    assert fresh.size == 0
    assert fresh.next_offset == 5


def test_recover_stops_at_corrupt_batch_in_an_earlier_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.segment.RECOVER_CHUNK", 400)
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=50)
    batches = fill(seg, [1] * 20)
    seg.close()
    raw = bytearray((tmp_path / segment_file_name(0, ".log")).read_bytes())
    size = len(batches[0])
    raw[2 * size + 65] ^= 0x10  # the third batch's records: far from the end of the file
    (tmp_path / segment_file_name(0, ".log")).write_bytes(bytes(raw))
    again = LogSegment.open(tmp_path, 0, index_interval_bytes=50)
    assert again.recover() == 18 * size
    assert again.next_offset == 2
    assert again.read(0, 1 << 20) == b"".join(batches[:2])
    assert all(position < again.size for _, position in again.index.entries)
