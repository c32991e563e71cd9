"""Spark data sources (Spark 4's Python data source API) that read a cluster's binary and checkpoint files
on the executors, one task per file (segments) or per data directory (checkpoints).

- ``isrsim-segments``: one row per batch header of every segment of every replica (offsets, epoch, CRC,
  producer id, epoch and base sequence), without decoding records (``kind = 'batch'``), one row per
  segment file (``kind = 'segment'``, its size), and rows for bytes that are not whole valid batches:
  ``torn_tail`` (the end of the last segment of a partition, what a kill -9 leaves and recovery cuts
  off), ``corrupt`` (anywhere else), ``foreign`` (a file that does not start with a v2 batch) and
  ``error`` (the file cannot be opened).
- ``isrsim-checkpoints``: the offset checkpoints of each data directory (``hw``, ``recovery_point``,
  ``log_start``) and each partition's ``leader-epoch-checkpoint`` (``epoch``); ``error`` rows name a file
  that does not parse.
- ``isrsim-records``: decoded records of a few chosen batches (option ``batches``: JSON list of
  ``[broker, file, position]``), for evidence in the report.

``load(path)`` takes the cluster root (see :mod:`spark_jobs.layout`). The driver only lists files.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
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
    "crc_ok BOOLEAN, records_count INT, max_timestamp LONG, producer_id LONG, producer_epoch INT, "
    "base_sequence INT, problem STRING"
)
CHECKPOINTS_SCHEMA = (
    "broker INT, file STRING, kind STRING, topic STRING, partition INT, seq INT, epoch INT, "
    "offset LONG, problem STRING"
)
RECORDS_SCHEMA = (
    "broker INT, file STRING, position LONG, base_offset LONG, leader_epoch INT, offset LONG, "
    "timestamp LONG, key STRING, value STRING, problem STRING"
)

_VALUE_PREVIEW = 48
_HEADER_SIZE = 61  # protocol.BATCH_HEADER_SIZE
_ATTRIBUTES_OFFSET = 21  # protocol.ATTRIBUTES_OFFSET: the CRC covers the batch from here on


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

# The v2 batch header (protocol.records) as a numpy record: one row per batch, gathered from a whole file.
_HEADER_DTYPE = np.dtype(
    [
        ("base_offset", ">i8"),
        ("batch_length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("records_count", ">i4"),
    ]
)
_LOG_OVERHEAD = 12  # base_offset + batch_length, not counted by batch_length
_MAGIC = 2


@dataclass
class SegmentScan:
    """What one segment file holds: the positions and sizes of its whole batches, their headers (a numpy
    record array, ``_HEADER_DTYPE``), their CRC verdicts, and at most one row for bytes that are not whole
    valid batches (``kind``, ``position``, ``size``, ``problem``)."""

    seg: SegmentFile
    file_size: int | None
    positions: Any  # np.ndarray[int64]
    sizes: Any  # np.ndarray[int64]
    headers: Any  # np.ndarray[_HEADER_DTYPE]
    crc_ok: Any  # np.ndarray[bool] or None when not verified
    bad: tuple[str, int, int, str] | None = None


def _walk(buf: Any, size: int) -> tuple[list[int], int]:
    """Positions of the whole batches from the start of ``buf``, and where the walk stopped (``size`` when
    the file ends on a batch boundary). Reads one length per batch; everything else is parsed later, for
    all batches at once."""
    unpack = struct.Struct(">i").unpack_from
    positions: list[int] = []
    append = positions.append
    pos = 0
    min_length = _HEADER_SIZE - _LOG_OVERHEAD
    while pos < size:
        if size - pos < _HEADER_SIZE or buf[pos + 16] != _MAGIC:
            break
        length = unpack(buf, pos + 8)[0]
        end = pos + _LOG_OVERHEAD + length
        if length < min_length or end > size:
            break
        append(pos)
        pos = end
    return positions, pos


def _map(fd: int) -> mmap.mmap:
    """The whole file, read-only, its pages mapped up front (one fault per page would cost more than the
    CRC over them) where the platform can."""
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if populate and hasattr(mmap, "MAP_SHARED"):
        return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
    return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)


def read_segment(seg: SegmentFile, verify_crc: bool = True) -> SegmentScan:
    """Scan one segment file: batch boundaries, every header parsed at once with numpy, CRCs checked over
    the file's bytes (memory-mapped: the page cache is read in place). Never raises for bad content."""
    from crc32c import crc32c

    from protocol import CorruptRecordError, read_header

    empty = np.zeros(0, dtype=np.int64)

    def failed(kind: str, problem: str) -> SegmentScan:
        return SegmentScan(seg, None, empty, empty, np.zeros(0, _HEADER_DTYPE), None, (kind, 0, 0, problem))

    try:
        f = open(seg.path, "rb")  # noqa: SIM115 (closed by `with f` below)
    except OSError as exc:
        return failed("error", f"cannot open segment: {exc.strerror or exc}")
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
        except OSError as exc:
            return failed("error", f"cannot stat segment: {exc.strerror or exc}")
        try:
            mm: Any = _map(f.fileno()) if size else b""
        except (OSError, ValueError):
            # A file system that cannot map files: read it whole instead.
            mm = f.read()
            size = len(mm)
        try:
            return _scan_buffer(seg, mm, size, verify_crc, crc32c, read_header, CorruptRecordError)
        finally:
            if isinstance(mm, mmap.mmap):
                mm.close()


def _scan_buffer(
    seg: SegmentFile, mm: Any, size: int, verify_crc: bool, crc32c: Any, read_header: Any, corrupt: Any
) -> SegmentScan:
    positions, stop = _walk(mm, size)
    pos = np.asarray(positions, dtype=np.int64)
    data = np.frombuffer(mm, dtype=np.uint8) if size else np.zeros(0, np.uint8)
    try:
        idx = pos[:, None] + np.arange(_HEADER_SIZE, dtype=np.int64)
        headers = np.ascontiguousarray(data[idx]).view(_HEADER_DTYPE).reshape(-1)
    finally:
        del data
    sizes = headers["batch_length"].astype(np.int64) + _LOG_OVERHEAD
    crc_ok = None
    if verify_crc:
        view = memoryview(mm) if size else memoryview(b"")
        try:
            computed = np.fromiter(
                (
                    crc32c(view[p + _ATTRIBUTES_OFFSET : p + n])
                    for p, n in zip(positions, sizes.tolist(), strict=True)
                ),
                dtype=np.uint32,
                count=len(positions),
            )
        finally:
            view.release()
        crc_ok = computed == headers["crc"]
    bad: tuple[str, int, int, str] | None = None
    if stop < size:
        head = bytes(mm[stop : stop + _HEADER_SIZE])
        try:
            # The same message as a reader of one header at a time: read_header's, or the batch's claim.
            h = read_header(head)
            raise corrupt(
                f"batch at position {stop}: claims {h.size} bytes, only {size - stop} left in the file"
            )
        except corrupt as exc:
            if stop == 0 and len(head) > 16 and head[16] != _MAGIC:
                bad = ("foreign", stop, size - stop, f"not a v2 record batch log ({exc})")
            elif seg.is_last:
                bad = ("torn_tail", stop, size - stop, f"torn tail: {exc}")
            else:
                bad = ("corrupt", stop, size - stop, f"unreadable bytes before the last segment: {exc}")
    elif crc_ok is not None and len(positions) and not crc_ok[-1] and seg.is_last:
        # A last batch whose bytes do not match its CRC is a torn write, cut off by recovery.
        last = len(positions) - 1
        bad = ("torn_tail", positions[last], int(sizes[last]), "torn tail: the last batch fails its CRC")
        pos, sizes, headers, crc_ok = pos[:last], sizes[:last], headers[:last], crc_ok[:last]
    return SegmentScan(seg, size, pos, sizes, headers, crc_ok, bad)


def scans_to_arrow(scans: Sequence[SegmentScan], arrow_schema: Any) -> Any:
    """One Arrow record batch (``SEGMENTS_SCHEMA``) for the scans of a read task: a ``segment`` row per
    file, a ``batch`` row per whole batch, and the row of a file's bad bytes, if any."""
    import pyarrow as pa

    file_idx: list[Any] = []
    kinds: list[Any] = []
    positions: list[Any] = []
    sizes: list[Any] = []
    headers: list[Any] = []
    crc_ok: list[Any] = []
    problems: list[Any] = []
    has_header: list[Any] = []
    kind_names = ["segment", "batch", "torn_tail", "corrupt", "foreign", "error"]
    kind_code = {k: i for i, k in enumerate(kind_names)}
    problem_texts: list[str] = []
    no_header = np.zeros(1, _HEADER_DTYPE)
    for i, s in enumerate(scans):
        n = len(s.positions)
        extra: list[tuple[str, int, int, str | None]] = []
        if s.file_size is not None:
            extra.append(("segment", 0, s.file_size, None))
        if s.bad is not None:
            extra.append(s.bad)
        m = n + len(extra)
        file_idx.append(np.full(m, i, dtype=np.int32))
        kinds.append(
            np.concatenate(
                [np.full(n, kind_code["batch"], np.int8), np.array([kind_code[e[0]] for e in extra], np.int8)]
            )
        )
        positions.append(np.concatenate([s.positions, np.array([e[1] for e in extra], np.int64)]))
        sizes.append(np.concatenate([s.sizes, np.array([e[2] for e in extra], np.int64)]))
        headers.append(np.concatenate([s.headers, np.repeat(no_header, len(extra))]))
        has_header.append(np.concatenate([np.ones(n, bool), np.zeros(len(extra), bool)]))
        ok = s.crc_ok if s.crc_ok is not None else np.zeros(n, bool)
        crc_ok.append(np.concatenate([ok, np.zeros(len(extra), bool)]))
        # problem: an index into problem_texts, -1 for none; 0 is "CRC mismatch".
        prob = np.full(m, -1, dtype=np.int32)
        if s.crc_ok is not None:
            prob[:n][~s.crc_ok] = 0
        for j, e in enumerate(extra):
            if e[3] is not None:
                problem_texts.append(e[3])
                prob[n + j] = len(problem_texts)
        problems.append(prob)
    verified = [s.crc_ok is not None for s in scans]
    if not scans:
        return pa.RecordBatch.from_pylist([], schema=arrow_schema)
    fi = np.concatenate(file_idx)
    kind = np.concatenate(kinds)
    h = np.concatenate(headers)
    with_header = np.concatenate(has_header)
    no_h = ~with_header
    crc_valid = with_header & np.asarray(verified, bool)[fi]
    prob = np.concatenate(problems)

    def per_file(values: list[Any], typ: Any) -> Any:
        return pa.DictionaryArray.from_arrays(pa.array(fi), pa.array(values, typ)).dictionary_decode()

    def masked(values: Any, typ: Any, mask: Any) -> Any:
        return pa.array(values, typ, mask=mask)

    columns = {
        "broker": per_file([s.seg.broker for s in scans], pa.int32()),
        "topic": per_file([s.seg.topic for s in scans], pa.string()),
        "partition": per_file([s.seg.partition for s in scans], pa.int32()),
        "file": per_file([s.seg.path for s in scans], pa.string()),
        "segment_base": per_file([s.seg.base_offset for s in scans], pa.int64()),
        "kind": pa.DictionaryArray.from_arrays(pa.array(kind), pa.array(kind_names)).dictionary_decode(),
        "position": pa.array(np.concatenate(positions), pa.int64()),
        "size": pa.array(np.concatenate(sizes), pa.int64()),
        "base_offset": masked(h["base_offset"].astype(np.int64), pa.int64(), no_h),
        "last_offset": masked(
            h["base_offset"].astype(np.int64) + h["last_offset_delta"].astype(np.int64), pa.int64(), no_h
        ),
        "leader_epoch": masked(h["partition_leader_epoch"].astype(np.int32), pa.int32(), no_h),
        "crc": masked(h["crc"].astype(np.int64), pa.int64(), no_h),
        "crc_ok": masked(np.concatenate(crc_ok), pa.bool_(), ~crc_valid),
        "records_count": masked(h["records_count"].astype(np.int32), pa.int32(), no_h),
        "max_timestamp": masked(h["max_timestamp"].astype(np.int64), pa.int64(), no_h),
        "producer_id": masked(h["producer_id"].astype(np.int64), pa.int64(), no_h),
        "producer_epoch": masked(h["producer_epoch"].astype(np.int32), pa.int32(), no_h),
        "base_sequence": masked(h["base_sequence"].astype(np.int32), pa.int32(), no_h),
        "problem": pa.DictionaryArray.from_arrays(
            pa.array(prob, mask=prob < 0), pa.array(["CRC mismatch", *problem_texts])
        ).dictionary_decode(),
    }
    return pa.RecordBatch.from_arrays([columns[f.name] for f in arrow_schema], schema=arrow_schema)


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
        self,
        root: str,
        schema: StructType,
        verify_crc: bool,
        max_bytes: int,
        open_cost: int,
        min_partitions: int,
        metadata: bool = False,
    ) -> None:
        self.metadata = metadata
        self.root = root
        self.schema = schema
        self.verify_crc = verify_crc
        self.max_bytes = max_bytes
        self.open_cost = open_cost
        self.min_partitions = min_partitions

    def partitions(self) -> Sequence[InputPartition]:
        layout = discover(self.root)
        segments = layout.metadata_segments if self.metadata else layout.segments
        groups = pack_segments(segments, self.max_bytes, self.open_cost, self.min_partitions)
        return [_SegmentPartition(tuple(g), self.verify_crc) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """One Arrow record batch per task: no Python object per row."""
        from pyspark.sql.pandas.types import to_arrow_schema

        if not isinstance(partition, _SegmentPartition):
            return  # no file to read: Spark asks once with no partition of ours
        scans = [read_segment(segment, partition.verify_crc) for segment in partition.segments]
        yield scans_to_arrow(scans, to_arrow_schema(self.schema, timezone="UTC"))


class SegmentsDataSource(DataSource):  # type: ignore[misc]
    """``spark.read.format("isrsim-segments").load(root)``. Options: ``verify_crc`` (default true),
    ``max_partition_bytes`` (default 128 MiB), ``open_cost_bytes`` (4 MiB), ``min_partitions`` (1),
    ``metadata`` (default false: the brokers' partitions; true: the controllers' metadata logs, one row
    per batch with ``broker`` the voter's id)."""

    @classmethod
    def name(cls) -> str:
        return "isrsim-segments"

    def schema(self) -> str:
        return SEGMENTS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        o = self.options
        return SegmentsReader(
            o["path"],
            schema,
            _bool_option(o, "verify_crc", True),
            int(o.get("max_partition_bytes", 128 << 20)),
            int(o.get("open_cost_bytes", 4 << 20)),
            int(o.get("min_partitions", 1)),
            _bool_option(o, "metadata", False),
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
        if not isinstance(partition, _DataDirPartition):
            return  # no file to read: Spark asks once with no partition of ours
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
        if not isinstance(partition, _BatchesPartition):
            return  # no file to read: Spark asks once with no partition of ours
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
