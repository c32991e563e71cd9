from __future__ import annotations

from pathlib import Path

import pytest

from storage.index import ENTRY_SIZE, OffsetIndex


def test_empty_index_lookup_is_segment_start(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100)
    assert len(index) == 0
    assert index.lookup(100) == (100, 0)
    assert index.lookup(5000) == (100, 0)
    assert index.last_entry() == (100, 0)


def test_lookup_is_floor(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 100)
    for offset, position in [(110, 4100), (130, 8300), (150, 12500)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 4100)
    assert index.lookup(129) == (110, 4100)
    assert index.lookup(1000) == (150, 12500)
    assert index.lookup_position(8299) == (110, 4100)
    assert index.lookup_position(8300) == (130, 8300)
    assert index.lookup_position(10) == (100, 0)


def test_file_format_is_kafkas_signed_big_endian_relative_pairs(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 1000)
    index.append(1003, 4200)
    index.append(1010, 9000)
    index.close()
    raw = path.read_bytes()
    assert raw == (3).to_bytes(4, "big") + (4200).to_bytes(4, "big") + (10).to_bytes(4, "big") + (
        9000
    ).to_bytes(4, "big")
    reopened = OffsetIndex(path, 1000)
    assert reopened.entries == [(1003, 4200), (1010, 9000)]


def test_append_must_grow(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0)
    index.append(10, 100)
    with pytest.raises(ValueError):
        index.append(10, 200)
    with pytest.raises(ValueError):
        index.append(11, 100)
    with pytest.raises(ValueError):
        index.append(2**31, 300)  # a relative offset past Kafka's i32


def test_truncate(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0)
    for i in range(1, 6):
        index.append(i * 10, i * 1000)
    index.truncate_to(30)
    assert index.entries == [(10, 1000), (20, 2000)]
    assert path.stat().st_size == 2 * ENTRY_SIZE
    index.truncate_to_position(2000)
    assert index.entries == [(10, 1000)]
    index.append(15, 1500)
    index.reset()
    assert index.entries == []
    assert path.stat().st_size == 0


def test_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0)
    index.append(10, 1000)
    index.append(20, 2000)
    assert index.sanity_check(5000) is None
    assert index.sanity_check(2000) is not None  # last entry at the end of the log
    index.close()

    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00")
    torn = OffsetIndex(path, 0)
    assert "multiple" in (torn.sanity_check(5000) or "")
    torn.close()

    path.write_bytes(
        (20).to_bytes(4, "big") + (1).to_bytes(4, "big") + (10).to_bytes(4, "big") + (2).to_bytes(4, "big")
    )
    disordered = OffsetIndex(path, 0)
    assert disordered.sanity_check(5000) is not None
