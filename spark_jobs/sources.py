"""Spark data sources (Spark 4's Python data source API) that read a cluster's binary and checkpoint files
on the executors, one task per file (segments) or per data directory (checkpoints).

- ``isrsim-segments``: one row per batch header of every segment of every replica, without decoding records
  (``kind = 'batch'``), one row per segment file (``kind = 'segment'``, its size), and rows for bytes that
  are not whole valid batches: ``torn_tail`` (the end of the last segment of a partition, what a kill -9
  leaves and recovery cuts off), ``corrupt`` (anywhere else), ``foreign`` (a file that does not start
  with a v2 batch) and ``error`` (the file cannot be opened).
- ``isrsim-checkpoints``: the offset checkpoints of each data directory (``hw``, ``recovery_point``,
  ``log_start``) and each partition's ``leader-epoch-checkpoint`` (``epoch``); ``error`` rows name a file
  that does not parse.
- ``isrsim-records``: decoded records of a few chosen batches (option ``batches``: JSON list of
  ``[broker, file, position]``), for evidence in the report.

``load(path)`` takes the cluster root (see :mod:`spark_jobs.layout`). The driver only lists files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_jobs.layout import (
    HW_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    SegmentFile,
    discover,
)

SEGMENTS_SCHEMA = (
    "broker INT, topic STRING, partition INT, file STRING, segment_base LONG, kind STRING, "
    "position LONG, size LONG, base_offset LONG, last_offset LONG, leader_epoch INT, crc LONG, "
    "crc_ok BOOLEAN, records_count INT, max_timestamp LONG, problem STRING"
)
CHECKPOINTS_SCHEMA = (
    "broker INT, file STRING, kind STRING, topic STRING, partition INT, seq INT, epoch INT, "
    "offset LONG, problem STRING"
)
RECORDS_SCHEMA = (
    "broker INT, file STRING, position LONG, base_offset LONG, leader_epoch INT, offset LONG, "
    "timestamp LONG, key STRING, value STRING, problem STRING"
)

_READ_CHUNK = 1 << 20
_VALUE_PREVIEW = 48


@dataclass(frozen=True)
class _SegmentPartition(InputPartition):  # type: ignore[misc]
    segments: tuple[SegmentFile, ...]
    verify_crc: bool


@dataclass(frozen=True)
class _DataDirPartition(InputPartition):  # type: ignore[misc]
    broker: int
    data_dir: str
    partition_dirs: tuple[tuple[str, int, str], ...]


@dataclass(frozen=True)
class _BatchesPartition(InputPartition):  # type: ignore[misc]
    file: str
    items: tuple[tuple[int, int], ...]  # (broker, position)


def _bool_option(options: dict[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    return default if raw is None else raw.strip().lower() in ("1", "true", "yes")


# ---------------------------------------------------------------------------------------------- segments


def scan_segment(seg: SegmentFile, verify_crc: bool = True) -> Iterator[tuple[Any, ...]]:
    """Rows (see ``SEGMENTS_SCHEMA``) for one segment file. Never raises for bad content."""
    from crc32c import crc32c

    from protocol import ATTRIBUTES_OFFSET, BATCH_HEADER_SIZE, CorruptRecordError, read_header

    key = (seg.broker, seg.topic, seg.partition, seg.path, seg.base_offset)

    def row(kind: str, position: int, size: int, problem: str | None = None, h: Any = None, ok: Any = None):
        if h is None:
            return (*key, kind, position, size, None, None, None, None, ok, None, None, problem)
        return (
            *key,
            kind,
            position,
            size,
            h.base_offset,
            h.last_offset,
            h.partition_leader_epoch,
            h.crc,
            ok,
            h.records_count,
            h.max_timestamp,
            problem,
        )

    try:
        f = open(seg.path, "rb", buffering=_READ_CHUNK)  # noqa: SIM115 (closed by `with f` below)
    except OSError as exc:
        yield row("error", 0, 0, f"cannot open segment: {exc.strerror or exc}")
        return
    with f:
        try:
            size = Path(seg.path).stat().st_size
        except OSError as exc:
            yield row("error", 0, 0, f"cannot stat segment: {exc.strerror or exc}")
            return
        yield row("segment", 0, size)
        pos = 0
        pending: tuple[Any, ...] | None = None  # the last batch row, held back: a bad CRC there is torn
        while pos < size:
            head = f.read(BATCH_HEADER_SIZE)
            try:
                h = read_header(head)
                if pos + h.size > size:
                    raise CorruptRecordError(
                        f"batch at position {pos}: claims {h.size} bytes, only {size - pos} left in the file"
                    )
            except CorruptRecordError as exc:
                if pending is not None:
                    yield pending
                    pending = None
                if pos == 0 and len(head) > 16 and head[16] != 2:
                    kind = "foreign"
                    why = f"not a v2 record batch log ({exc})"
                elif seg.is_last:
                    kind, why = "torn_tail", f"torn tail: {exc}"
                else:
                    kind, why = "corrupt", f"unreadable bytes before the last segment: {exc}"
                yield row(kind, pos, size - pos, why)
                return
            if verify_crc:
                rest = f.read(h.size - BATCH_HEADER_SIZE)
                ok = crc32c(rest, crc32c(head[ATTRIBUTES_OFFSET:])) == h.crc
            else:
                f.seek(h.size - BATCH_HEADER_SIZE, 1)
                ok = None
            if pending is not None:
                yield pending
            pending = row("batch", pos, h.size, None if ok is not False else "CRC mismatch", h, ok)
            pos += h.size
        if pending is not None:
            if pending[12] is False and seg.is_last:
                # A last batch whose bytes do not match its CRC is a torn write, cut off by recovery.
                yield row("torn_tail", pending[6], pending[7], "torn tail: the last batch fails its CRC")
            else:
                yield pending


def pack_segments(
    segments: Sequence[SegmentFile], max_bytes: int, open_cost: int, min_partitions: int
) -> list[list[SegmentFile]]:
    """Group segment files into read tasks, as Spark's file sources do: a file is never split, small files
    share a task, each file costs ``open_cost`` more than its size. There are ``total cost / max_bytes``
    tasks (at least ``min_partitions``, at most one per file), filled largest file first into the task
    with the least work so far."""
    if not segments:
        return []
    costs = [s.size + open_cost for s in segments]
    n = max(min_partitions, -(-sum(costs) // max(max_bytes, 1)))
    n = min(n, len(segments))
    groups: list[list[SegmentFile]] = [[] for _ in range(n)]
    load = [0] * n
    for seg, cost in sorted(zip(segments, costs, strict=True), key=lambda sc: -sc[1]):
        i = load.index(min(load))
        groups[i].append(seg)
        load[i] += cost
    return groups


class SegmentsReader(DataSourceReader):  # type: ignore[misc]
    def __init__(
        self, root: str, verify_crc: bool, max_bytes: int, open_cost: int, min_partitions: int
    ) -> None:
        self.root = root
        self.verify_crc = verify_crc
        self.max_bytes = max_bytes
        self.open_cost = open_cost
        self.min_partitions = min_partitions

    def partitions(self) -> Sequence[InputPartition]:
        groups = pack_segments(
            discover(self.root).segments, self.max_bytes, self.open_cost, self.min_partitions
        )
        return [_SegmentPartition(tuple(g), self.verify_crc) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _SegmentPartition)
        for segment in partition.segments:
            yield from scan_segment(segment, partition.verify_crc)


class SegmentsDataSource(DataSource):  # type: ignore[misc]
    """``spark.read.format("isrsim-segments").load(root)``. Options: ``verify_crc`` (default true),
    ``max_partition_bytes`` (default 128 MiB), ``open_cost_bytes`` (4 MiB), ``min_partitions`` (1)."""

    @classmethod
    def name(cls) -> str:
        return "isrsim-segments"

    def schema(self) -> str:
        return SEGMENTS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        o = self.options
        return SegmentsReader(
            o["path"],
            _bool_option(o, "verify_crc", True),
            int(o.get("max_partition_bytes", 128 << 20)),
            int(o.get("open_cost_bytes", 4 << 20)),
            int(o.get("min_partitions", 1)),
        )


# ---------------------------------------------------------------------------------------------- checkpoints


def scan_checkpoints(
    broker: int, data_dir: str, partition_dirs: Sequence[tuple[str, int, str]]
) -> Iterator[tuple[Any, ...]]:
    """Rows (see ``CHECKPOINTS_SCHEMA``) for the checkpoints of one data directory."""
    from broker import CheckpointError, LeaderEpochCheckpointFile, OffsetCheckpointFile

    base = Path(data_dir)
    for kind, name in (
        ("hw", HW_CHECKPOINT),
        ("recovery_point", RECOVERY_POINT_CHECKPOINT),
        ("log_start", LOG_START_CHECKPOINT),
    ):
        path = base / name
        try:
            entries = OffsetCheckpointFile(path).read()
        except (CheckpointError, OSError) as exc:
            yield (broker, str(path), "error", None, None, None, None, None, str(exc))
            continue
        for seq, ((topic, partition), offset) in enumerate(entries.items()):
            yield (broker, str(path), kind, topic, partition, seq, None, offset, None)
    for topic, partition, pdir in partition_dirs:
        path = Path(pdir) / LEADER_EPOCH_CHECKPOINT
        try:
            epochs = LeaderEpochCheckpointFile(path).read()
        except (CheckpointError, OSError) as exc:
            yield (broker, str(path), "error", topic, partition, None, None, None, str(exc))
            continue
        for seq, entry in enumerate(epochs):
            yield (broker, str(path), "epoch", topic, partition, seq, entry.epoch, entry.start_offset, None)


class CheckpointsReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, root: str) -> None:
        self.root = root

    def partitions(self) -> Sequence[InputPartition]:
        return [
            _DataDirPartition(
                b.broker, b.data_dir, tuple((p.topic, p.partition, p.path) for p in b.partitions)
            )
            for b in discover(self.root).brokers
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _DataDirPartition)
        yield from scan_checkpoints(partition.broker, partition.data_dir, partition.partition_dirs)


class CheckpointsDataSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "isrsim-checkpoints"

    def schema(self) -> str:
        return CHECKPOINTS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CheckpointsReader(self.options["path"])


# ---------------------------------------------------------------------------------------------- records


def _preview(data: bytes | None) -> str | None:
    if data is None:
        return None
    text = data[:_VALUE_PREVIEW].decode("utf-8", "replace")
    return text + ("..." if len(data) > _VALUE_PREVIEW else "")


def decode_batches(file: str, items: Sequence[tuple[int, int]]) -> Iterator[tuple[Any, ...]]:
    """Rows (see ``RECORDS_SCHEMA``) for the batches at the given positions of one segment file."""
    from protocol import BATCH_HEADER_SIZE, CorruptRecordError, decode_records, read_header

    try:
        f = open(file, "rb")  # noqa: SIM115 (closed by `with f` below)
    except OSError as exc:
        for broker, position in items:
            yield (broker, file, position, None, None, None, None, None, None, f"cannot open: {exc}")
        return
    with f:
        for broker, position in items:
            try:
                f.seek(position)
                head = f.read(BATCH_HEADER_SIZE)
                h = read_header(head)
                buf = head + f.read(h.size - BATCH_HEADER_SIZE)
                header, records = decode_records(buf)
            except (CorruptRecordError, OSError) as exc:
                yield (broker, file, position, None, None, None, None, None, None, str(exc))
                continue
            for r in records:
                yield (
                    broker,
                    file,
                    position,
                    header.base_offset,
                    header.partition_leader_epoch,
                    header.base_offset + r.offset_delta,
                    header.base_timestamp + r.timestamp_delta,
                    _preview(r.key),
                    _preview(r.value),
                    None,
                )


class RecordsReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, batches: list[tuple[int, str, int]]) -> None:
        self.batches = batches

    def partitions(self) -> Sequence[InputPartition]:
        by_file: dict[str, list[tuple[int, int]]] = {}
        for broker, file, position in self.batches:
            by_file.setdefault(file, []).append((broker, position))
        return [_BatchesPartition(f, tuple(sorted(items))) for f, items in sorted(by_file.items())]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _BatchesPartition)
        yield from decode_batches(partition.file, partition.items)


class RecordsDataSource(DataSource):  # type: ignore[misc]
    """``spark.read.format("isrsim-records").option("batches", json.dumps([[broker, file, pos]])).load()``."""

    @classmethod
    def name(cls) -> str:
        return "isrsim-records"

    def schema(self) -> str:
        return RECORDS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        raw = json.loads(self.options.get("batches", "[]"))
        return RecordsReader([(int(b), str(f), int(p)) for b, f, p in raw])


DATA_SOURCES = (SegmentsDataSource, CheckpointsDataSource, RecordsDataSource)


def register_sources(spark: Any) -> None:
    for source in DATA_SOURCES:
        spark.dataSource.register(source)
