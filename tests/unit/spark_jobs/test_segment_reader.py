"""The vectorized segment reader against the one-header-at-a-time decoder of ``protocol``: the same batches,
fields and verdicts, on files built here with real v2 batches (no Spark session: the Arrow batch a read task
hands to Spark is built and checked directly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from protocol import build_simple_batch, read_header
from spark_jobs.layout import SegmentFile
from spark_jobs.sources import SEGMENTS_SCHEMA, read_segment, scans_to_arrow


def _arrow_schema() -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

    types = {"INT": IntegerType(), "LONG": LongType(), "STRING": StringType(), "BOOLEAN": BooleanType()}
    fields = [part.split() for part in SEGMENTS_SCHEMA.split(", ")]
    return to_arrow_schema(StructType([StructField(n, types[t]) for n, t in fields]), timezone="UTC")


def _batches(n: int, start: int = 0) -> list[bytes]:
    out, offset = [], start
    for i in range(n):
        values = [f"value-{offset + j}".encode() for j in range(i % 4 + 1)]
        idempotent = (
            {"producer_id": 1000 + i % 2, "producer_epoch": 3, "base_sequence": offset} if i % 3 else {}
        )
        out.append(
            build_simple_batch(values, base_offset=offset, partition_leader_epoch=i // 3, **idempotent)
        )
        offset += len(values)
    return out


def _segment(tmp_path: Path, data: bytes, *, is_last: bool = True, name: str = "0.log") -> SegmentFile:
    path = tmp_path / name
    path.write_bytes(data)
    return SegmentFile(1, "t", 0, str(path), 0, len(data), is_last)


def _rows(seg: SegmentFile, verify_crc: bool = True) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = scans_to_arrow([read_segment(seg, verify_crc)], _arrow_schema()).to_pylist()
    return rows


def test_every_header_field_matches_the_protocol_decoder(tmp_path: Path) -> None:
    batches = _batches(40)
    seg = _segment(tmp_path, b"".join(batches))
    rows = _rows(seg)
    assert [r["kind"] for r in rows].count("segment") == 1
    got = [r for r in rows if r["kind"] == "batch"]
    pos = 0
    assert len(got) == len(batches)
    for row, raw in zip(got, batches, strict=True):
        h = read_header(raw)
        assert (row["position"], row["size"]) == (pos, len(raw))
        assert (row["base_offset"], row["last_offset"]) == (h.base_offset, h.last_offset)
        assert (row["leader_epoch"], row["crc"]) == (h.partition_leader_epoch, h.crc)
        assert (row["records_count"], row["max_timestamp"]) == (h.records_count, h.max_timestamp)
        assert (row["producer_id"], row["producer_epoch"], row["base_sequence"]) == (
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
        )
        assert row["crc_ok"] is True and row["problem"] is None
        pos += len(raw)


def test_a_flipped_payload_byte_fails_its_crc_but_not_the_header(tmp_path: Path) -> None:
    batches = _batches(5)
    damaged = bytearray(batches[2])
    damaged[-1] ^= 0xFF
    seg = _segment(tmp_path, b"".join([*batches[:2], bytes(damaged), *batches[3:]]))
    by_offset = {r["base_offset"]: r for r in _rows(seg) if r["kind"] == "batch"}
    bad = read_header(batches[2]).base_offset
    assert by_offset[bad]["crc_ok"] is False and by_offset[bad]["problem"] == "CRC mismatch"
    assert all(r["crc_ok"] for o, r in by_offset.items() if o != bad)
    # Without CRC verification the payload is not looked at.
    unverified = [r for r in _rows(seg, verify_crc=False) if r["kind"] == "batch"]
    assert len(unverified) == 5 and all(r["crc_ok"] is None for r in unverified)


def test_torn_tail_of_the_last_segment_and_corrupt_bytes_before_it(tmp_path: Path) -> None:
    batches = _batches(6)
    whole = b"".join(batches[:5])
    data = whole + batches[5][:30]
    torn = _rows(_segment(tmp_path, data))
    tail = [r for r in torn if r["kind"] == "torn_tail"]
    assert [(r["position"], r["size"]) for r in tail] == [(len(whole), 30)]
    assert tail[0]["problem"].startswith("torn tail: ") and "30 bytes left" in tail[0]["problem"]
    assert sum(r["kind"] == "batch" for r in torn) == 5
    corrupt = _rows(_segment(tmp_path, data, is_last=False, name="1.log"))
    assert [r["kind"] for r in corrupt if r["kind"] not in ("batch", "segment")] == ["corrupt"]


def test_a_last_batch_failing_its_crc_is_a_torn_tail(tmp_path: Path) -> None:
    batches = _batches(4)
    last = bytearray(batches[3])
    last[-2] ^= 0x01
    rows = _rows(_segment(tmp_path, b"".join([*batches[:3], bytes(last)])))
    assert sum(r["kind"] == "batch" for r in rows) == 3
    tail = [r for r in rows if r["kind"] == "torn_tail"]
    assert [(r["position"], r["size"], r["problem"]) for r in tail] == [
        (sum(map(len, batches[:3])), len(last), "torn tail: the last batch fails its CRC")
    ]


def test_foreign_empty_and_missing_files(tmp_path: Path) -> None:
    foreign = _rows(_segment(tmp_path, b"this is not a kafka log at all, not even close", name="f.log"))
    assert [r["kind"] for r in foreign if r["kind"] != "segment"] == ["foreign"]
    assert foreign[-1]["problem"].startswith("not a v2 record batch log")
    empty = _rows(_segment(tmp_path, b"", name="e.log"))
    assert [(r["kind"], r["size"]) for r in empty] == [("segment", 0)]
    missing = SegmentFile(1, "t", 0, str(tmp_path / "gone.log"), 0, 0, True)
    rows = _rows(missing)
    assert [r["kind"] for r in rows] == ["error"] and "cannot open segment" in rows[0]["problem"]
