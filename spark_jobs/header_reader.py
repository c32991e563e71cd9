"""The segments' batch headers and the checkpoints, read on the driver and handed to Spark as Arrow tables.

The report needs, of the record batches, only their 61-byte headers (offsets, epoch, CRC, producer fields)
and whether each batch's bytes match its CRC. Reading them is a walk of one length per batch and a CRC-32C
over the page cache (``sources.read_segment``): a few hundred MB a second on one core. Through a Spark
data source the same read paid for planning in a Python process, starting Python workers and sending each
task's rows back; here the driver reads every file once, in one pass, and gives Spark one Arrow table
(``createDataFrame``: no Python worker, the rows go to the executors with the plan). The rows are the ones
``isrsim-segments`` and ``isrsim-checkpoints`` produce (``SEGMENTS_SCHEMA``, ``CHECKPOINTS_SCHEMA``).

What the driver needs of the segments at once (counts per kind, bad bytes) is computed from the table,
before any Spark job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_jobs.layout import ClusterLayout, SegmentFile
from spark_jobs.sources import (
    CHECKPOINTS_SCHEMA,
    SEGMENTS_SCHEMA,
    read_segment,
    scan_checkpoints,
    scans_to_arrow,
)

# Called after each file with (files read, bytes read) of the whole read.
Progress = Callable[[int, int], None]
# How many files' scans go into one Arrow record batch.
_FILES_PER_BATCH = 256


@dataclass
class SegmentFacts:
    """What the driver needs of the segment rows: per kind, the count and bytes (``segment`` rows: files
    and their sizes; ``batch`` rows: whole batches), and the rows of bytes that are not whole valid
    batches (``torn_tail`` and the fatal kinds) as dicts of file, kind, position, size and problem."""

    kinds: dict[str, tuple[int, int]] = field(default_factory=dict)
    bad: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def _schema(ddl: str) -> Any:
    """The StructType of a flat ``name TYPE, ...`` schema of the sources (no JVM needed, unlike
    ``StructType.fromDDL``)."""
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

    types = {"INT": IntegerType(), "LONG": LongType(), "STRING": StringType(), "BOOLEAN": BooleanType()}
    return StructType([StructField(n, types[t]) for n, t in (part.split() for part in ddl.split(", "))])


def _arrow_schema(ddl: str) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(_schema(ddl), timezone="UTC")


def read_segments_table(
    segments: Sequence[SegmentFile], *, verify_crc: bool = True, progress: Progress | None = None
) -> Any:
    """Every file of ``segments`` scanned in turn: a ``pyarrow.Table`` of ``SEGMENTS_SCHEMA`` rows."""
    import pyarrow as pa

    arrow_schema = _arrow_schema(SEGMENTS_SCHEMA)
    batches = []
    pending = []
    done_bytes = 0
    for i, seg in enumerate(segments, 1):
        scan = read_segment(seg, verify_crc)
        pending.append(scan)
        done_bytes += scan.file_size or 0
        if len(pending) == _FILES_PER_BATCH:
            batches.append(scans_to_arrow(pending, arrow_schema))
            pending = []
        if progress is not None:
            progress(i, done_bytes)
    if pending or not batches:
        batches.append(scans_to_arrow(pending, arrow_schema))
    return pa.Table.from_batches(batches, schema=arrow_schema)


def segment_facts(table: Any) -> SegmentFacts:
    """Counts and bytes per kind, and the bad-bytes rows, of a ``read_segments_table`` table."""
    import pyarrow as pa
    import pyarrow.compute as pc

    facts = SegmentFacts()
    grouped = table.group_by("kind").aggregate([("size", "count"), ("size", "sum")])
    for row in grouped.to_pylist():
        facts.kinds[str(row["kind"])] = (int(row["size_count"]), int(row["size_sum"] or 0))
    mask = pc.is_in(table["kind"], value_set=pa.array(["foreign", "corrupt", "error", "torn_tail"]))
    bad = table.filter(mask).select(["file", "kind", "position", "size", "problem"])
    facts.bad = bad.to_pylist()
    return facts


def segments_frame(
    spark: Any,
    layout: ClusterLayout,
    *,
    verify_crc: bool = True,
    metadata: bool = False,
    progress: Progress | None = None,
) -> tuple[Any, SegmentFacts]:
    """The ``isrsim-segments`` rows of the brokers' partitions (or, ``metadata``, the voters' metadata
    logs) as a DataFrame, and their facts; ``facts.seconds`` is the time spent reading the files (the
    modules the read uses are imported first: loading them is no part of reading)."""
    import crc32c  # noqa: F401
    import pyarrow.compute  # noqa: F401
    from pyspark.sql.pandas import types  # noqa: F401

    t0 = time.monotonic()
    table = read_segments_table(
        layout.metadata_segments if metadata else layout.segments, verify_crc=verify_crc, progress=progress
    )
    facts = segment_facts(table)
    facts.seconds = time.monotonic() - t0
    return spark.createDataFrame(table, schema=_schema(SEGMENTS_SCHEMA)), facts


def checkpoints_frame(spark: Any, layout: ClusterLayout) -> Any:
    """The ``isrsim-checkpoints`` rows of every data directory, read here."""
    import pyarrow as pa

    arrow_schema = _arrow_schema(CHECKPOINTS_SCHEMA)
    rows = [
        row
        for b in layout.brokers
        for row in scan_checkpoints(
            b.broker, b.data_dir, tuple((p.topic, p.partition, p.path) for p in b.partitions)
        )
    ]
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in arrow_schema]
    table = pa.Table.from_arrays(
        [pa.array(list(col), f.type) for col, f in zip(columns, arrow_schema, strict=True)],
        schema=arrow_schema,
    )
    return spark.createDataFrame(table, schema=_schema(CHECKPOINTS_SCHEMA))
