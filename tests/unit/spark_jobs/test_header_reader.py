"""The driver-side read of a cluster's segments (``spark_jobs.header_reader``): one Arrow table of the rows
the per-file reader gives, facts counted from it (files, bytes, batches, bad bytes), progress per file; no
Spark session."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from protocol import build_simple_batch
from spark_jobs.header_reader import _arrow_schema, read_segments_table, segment_facts
from spark_jobs.layout import SegmentFile
from spark_jobs.sources import SEGMENTS_SCHEMA, read_segment, scans_to_arrow


def _segment(tmp_path: Path, partition: int, base: int, n: int, tail: bytes = b"") -> SegmentFile:
    data = b"".join(
        build_simple_batch([f"v{base + i}".encode()], base_offset=base + i, partition_leader_epoch=1)
        for i in range(n)
    )
    path = tmp_path / f"t-{partition}-{base:020d}.log"
    path.write_bytes(data + tail)
    return SegmentFile(1, "t", partition, str(path), base, len(data) + len(tail), True)


def test_one_table_of_every_file_with_facts_and_progress(tmp_path: Path) -> None:
    segments = [_segment(tmp_path, p, 0, 3 + p) for p in range(4)]
    segments.append(_segment(tmp_path, 9, 0, 2, tail=b"\x00" * 20))  # a torn tail after kill -9
    seen: list[tuple[int, int]] = []
    table = read_segments_table(segments, progress=lambda files, done: seen.append((files, done)))
    per_file = [
        row
        for seg in segments
        for row in scans_to_arrow([read_segment(seg)], _arrow_schema(SEGMENTS_SCHEMA)).to_pylist()
    ]
    assert sorted(table.to_pylist(), key=str) == sorted(per_file, key=str)
    total = sum(s.size for s in segments)
    assert seen[-1] == (5, total) and [f for f, _ in seen] == [1, 2, 3, 4, 5]
    facts = segment_facts(table)
    assert facts.kinds["segment"] == (5, total)
    assert facts.kinds["batch"][0] == 3 + 4 + 5 + 6 + 2
    assert [(b["kind"], b["size"]) for b in facts.bad] == [("torn_tail", 20)]
    assert facts.bad[0]["file"] == segments[-1].path


def test_no_segment_is_an_empty_table(tmp_path: Path) -> None:
    table = read_segments_table([])
    assert table.num_rows == 0 and table.schema == _arrow_schema(SEGMENTS_SCHEMA)
    assert segment_facts(table).kinds == {} and segment_facts(table).bad == []
