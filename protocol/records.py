"""Record batches (docs/storage.md): Kafka's v2 batch, byte for byte: the header here, the records in
``protocol.record_codec`` (Kafka's ``DefaultRecord``), the codecs in ``protocol.compression``.

Layout (big-endian, 61-byte header, then the records)::

    offset  size  field
         0     8  base_offset             i64
         8     4  batch_length            i32   bytes after this field (batch size = batch_length + 12)
        12     4  partition_leader_epoch  i32
        16     1  magic                   i8    always 2
        17     4  crc                     u32   CRC-32C of bytes [21, end of batch)
        21     2  attributes              i16
        23     4  last_offset_delta       i32
        27     8  base_timestamp          i64
        35     8  max_timestamp           i64
        43     8  producer_id             i64
        51     2  producer_epoch          i16
        53     4  base_sequence           i32
        57     4  records_count           i32
        61     -  records: Kafka's DefaultRecord encoding (``protocol.record_codec``), compressed as a whole
                  with the codec of attributes bits 0-2 (``protocol.compression``)

Because the CRC starts at ``attributes`` a leader may rewrite ``base_offset`` and
``partition_leader_epoch`` in place without recomputing it (:func:`assign_offsets_and_epoch`).

Followers, recovery and reads work on headers only: :func:`validate_batch` checks the header, the size and
the CRC without looking at the records. A leader also checks the records themselves before it appends
(``storage.log_validator``, Kafka's ``LogValidator``); :func:`decode_records` is for tools and tests that
need the records.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from protocol.common import wall_clock_ms
from protocol.compression import CompressionError, CompressionType, compress, decompress
from protocol.errors import CorruptRecordError
from protocol.record_codec import (
    HeadersArg,
    Record,
    RecordFormatError,
    decode_record_bytes,
    encode_records,
    encode_values,
)

Buffer = bytes | bytearray | memoryview

MAGIC = 2
BATCH_HEADER_SIZE = 61
# base_offset (8) + batch_length (4): the bytes not counted by batch_length.
LOG_OVERHEAD = 12
# Smallest legal batch_length: a header with no record bytes at all.
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE
_PREFIX = struct.Struct(">qi")  # base_offset, batch_length
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
# attributes, last_offset_delta, base_timestamp, max_timestamp
_TIMESTAMP_FIELDS = struct.Struct(">hiqq")

_INT32_MAX = 2**31 - 1

# The attributes bits (Kafka's ``RecordBatch``): compression codec (bits 0-2), timestamp type (bit 3, 1 =
# LogAppendTime), transactional (bit 4), control (bit 5), delete horizon (bit 6).
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of one batch, decoded."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies (header included)."""
        return self.batch_length + LOG_OVERHEAD


def _now_ms() -> int:
    return wall_clock_ms()


def _assemble(
    payload: bytes,
    *,
    records_count: int,
    last_offset_delta: int,
    max_timestamp_delta: int,
    base_offset: int,
    partition_leader_epoch: int,
    base_timestamp: int | None,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    attributes: int,
) -> bytes:
    if base_timestamp is None:
        base_timestamp = _now_ms()
    buf = bytearray(BATCH_HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        base_timestamp + max_timestamp_delta,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    buf[BATCH_HEADER_SIZE:] = payload
    _U32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def _payload(raw: bytes, attributes: int) -> bytes:
    codec = attributes & COMPRESSION_CODEC_MASK
    return raw if codec == 0 else compress(CompressionType(codec), raw)


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    """Encode ``records`` as one batch, compressed with the codec of ``attributes`` bits 0-2 (if any).
    ``base_timestamp`` defaults to now (ms since the epoch).

    ``last_offset_delta`` is the largest ``offset_delta`` and ``max_timestamp`` is ``base_timestamp`` plus
    the largest ``timestamp_delta``. Brokers accept only dense deltas (``0..n-1``): see
    :func:`validate_batch`.
    """
    if not records:
        raise ValueError("a record batch holds at least one record")
    return _assemble(
        _payload(encode_records(records), attributes),
        records_count=len(records),
        last_offset_delta=max(r.offset_delta for r in records),
        max_timestamp_delta=max(r.timestamp_delta for r in records),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        base_timestamp=base_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
    )


def build_simple_batch(
    values: Sequence[bytes | None],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[HeadersArg] | None = None,
) -> bytes:
    """A batch of records with offset deltas ``0..n-1``, all stamped ``base_timestamp``: ``values``, with
    ``keys`` and ``headers`` (one per value) if given, else key-less and header-less."""
    if not values:
        raise ValueError("a record batch holds at least one record")
    if keys is None and headers is None:
        raw = encode_values(values)
    else:
        n = len(values)
        ks = keys if keys is not None else [None] * n
        hs: Sequence[HeadersArg] = headers if headers is not None else [()] * n
        if len(ks) != n or len(hs) != n:
            raise ValueError("keys and headers need one entry per value")
        raw = encode_records(Record(i, 0, ks[i], values[i], hs[i]) for i in range(n))  # type: ignore[arg-type]
    return _assemble(
        _payload(raw, attributes),
        records_count=len(values),
        last_offset_delta=len(values) - 1,
        max_timestamp_delta=0,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        base_timestamp=base_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
    )


def assemble_batch(
    payload: bytes,
    *,
    records_count: int,
    last_offset_delta: int,
    base_offset: int,
    partition_leader_epoch: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    attributes: int,
) -> bytes:
    """A batch from its header fields and its (already compressed, if the codec says so) records bytes,
    with the CRC computed: for the log cleaner, which rewrites batches keeping their offsets."""
    return _assemble(
        payload,
        records_count=records_count,
        last_offset_delta=last_offset_delta,
        max_timestamp_delta=max_timestamp - base_timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        base_timestamp=base_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
    )


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Decode the header at ``pos``. Checks that 61 bytes are there, the magic and the minimum batch_length;
    it does not check that the whole batch is in ``buf`` nor its CRC (see :func:`validate_batch`)."""
    available = len(buf) - pos
    if available < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at position {pos}: {available} bytes left, a batch header needs {BATCH_HEADER_SIZE}"
        )
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(f"batch at position {pos}: magic {header.magic}, expected {MAGIC}")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch at position {pos}: batch_length {header.batch_length} is below the minimum "
            f"{MIN_BATCH_LENGTH}"
        )
    return header


def batch_crc(buf: Buffer, pos: int = 0) -> int:
    """The CRC-32C computed over the batch at ``pos`` (bytes from ``attributes`` to the end of the batch, as
    given by its batch_length). Compare with the stored ``read_header(buf, pos).crc``."""
    if len(buf) - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"batch at position {pos}: truncated before batch_length")
    _, batch_length = _PREFIX.unpack_from(buf, pos)
    end = pos + LOG_OVERHEAD + batch_length
    if batch_length < MIN_BATCH_LENGTH or end > len(buf):
        raise CorruptRecordError(
            f"batch at position {pos}: batch_length {batch_length} does not fit the "
            f"{len(buf) - pos} bytes left"
        )
    return int(crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]))


def check_framing(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The checks that make the batch at ``pos`` a batch: its header (see :func:`read_header`), the whole
    batch within ``buf`` and its CRC. Raises :class:`CorruptRecordError` (CORRUPT_MESSAGE)."""
    header = read_header(buf, pos)
    end = pos + header.batch_length + LOG_OVERHEAD
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {pos}: batch_length {header.batch_length} claims {header.size} bytes, "
            f"only {len(buf) - pos} left"
        )
    computed = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end])
    if computed != header.crc:
        raise CorruptRecordError(
            f"batch at position {pos}: CRC mismatch (stored 0x{header.crc:08x}, computed 0x{computed:08x})"
        )
    return header


def offset_range_problem(header: BatchHeader) -> str | None:
    """Why the header's records_count and last_offset_delta do not describe dense offsets, or None."""
    if header.records_count < 1:
        return f"records_count {header.records_count} < 1"
    if header.last_offset_delta < 0 or header.last_offset_delta + 1 != header.records_count:
        delta, count = header.last_offset_delta, header.records_count
        return f"last_offset_delta {delta} does not match records_count {count}"
    return None


def stored_range_problem(header: BatchHeader) -> str | None:
    """Why the header's records_count and last_offset_delta cannot describe a stored batch, or None. A
    batch the log cleaner rewrote keeps its base and last offsets but may hold fewer records than its
    offset range (Kafka's compacted batches: ``0 <= records_count <= last_offset_delta + 1``; an empty one
    keeps a producer's last sequence)."""
    if header.last_offset_delta < 0:
        return f"last_offset_delta {header.last_offset_delta} < 0"
    if header.records_count < 0 or header.records_count > header.last_offset_delta + 1:
        delta, count = header.last_offset_delta, header.records_count
        return f"records_count {count} does not fit last_offset_delta {delta}"
    return None


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Check the batch at ``pos`` without decoding its records: :func:`check_framing`, and offset deltas a
    stored batch can have (:func:`stored_range_problem`: dense as a producer writes them, or sparse as
    the log cleaner leaves them). Raises :class:`CorruptRecordError` naming the position and the problem.
    (A leader validates more, dense deltas and the records included: ``storage.log_validator``.)"""
    header = check_framing(buf, pos)
    problem = stored_range_problem(header)
    if problem is not None:
        raise CorruptRecordError(f"batch at position {pos}: {problem}")
    return header


def record_bytes(buf: Buffer, pos: int, header: BatchHeader) -> bytes | memoryview:
    """The records of the batch at ``pos`` (whose framing is checked), decompressed if the batch is
    compressed. Raises :class:`~protocol.compression.CompressionError` for a stream that does not decompress
    and ``KafkaError`` UNSUPPORTED_COMPRESSION_TYPE for codec ids 5-7. An uncompressed batch's records are a
    view of ``buf`` (no copy)."""
    data = memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size]
    codec = header.attributes & COMPRESSION_CODEC_MASK
    return data if codec == 0 else decompress(codec, data)


def iter_batches(buf: Buffer, *, validate: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch of ``buf``. Strict: a partial batch at the end, or (with
    ``validate``) any corrupt batch, raises :class:`CorruptRecordError`. Without ``validate`` only the header
    checks of :func:`read_header` and the size are done."""
    pos = 0
    end = len(buf)
    while pos < end:
        if validate:
            header = validate_batch(buf, pos)
        else:
            header = read_header(buf, pos)
            if pos + header.size > end:
                raise CorruptRecordError(
                    f"batch at position {pos}: batch_length {header.batch_length} claims {header.size} "
                    f"bytes, only {end - pos} left"
                )
        yield pos, header
        pos += header.size


def scan_valid_prefix(buf: Buffer) -> tuple[int, list[BatchHeader]]:
    """Tolerant scan for torn-tail recovery: the byte length of the longest prefix of ``buf`` made of whole,
    valid batches, and their headers. Everything from that length on should be cut off."""
    pos = 0
    headers: list[BatchHeader] = []
    end = len(buf)
    while pos < end:
        try:
            header = validate_batch(buf, pos)
        except CorruptRecordError:
            break
        headers.append(header)
        pos += header.size
    return pos, headers


def assign_offsets_and_epoch(buf: bytearray, base_offset: int, leader_epoch: int) -> int:
    """Leader side of an append: give the batches of ``buf`` consecutive offsets starting at ``base_offset``
    and stamp ``leader_epoch`` into each, in place. The CRC does not cover these fields, so it stays valid.
    ``buf`` must already be validated (see :func:`iter_batches`). Returns the offset after the last record."""
    pos = 0
    end = len(buf)
    next_offset = base_offset
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"batch at position {pos}: truncated header")
        _, batch_length = _PREFIX.unpack_from(buf, pos)
        (last_offset_delta,) = _I32.unpack_from(buf, pos + 23)
        _PREFIX.pack_into(buf, pos, next_offset, batch_length)
        _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        next_offset += last_offset_delta + 1
        pos += batch_length + LOG_OVERHEAD
    return next_offset


MAX_TIMESTAMP_OFFSET = 35
# The attributes bits Kafka keeps when it rewrites a batch's timestamp type (``computeAttributes``).
_KEPT_ATTRIBUTES = (
    COMPRESSION_CODEC_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK | DELETE_HORIZON_FLAG_MASK
)


def set_max_timestamp(buf: bytearray, pos: int, log_append_time: bool, max_timestamp: int) -> bool:
    """Kafka's ``DefaultRecordBatch.setMaxTimestamp`` on the batch at ``pos`` (framing checked): write the
    timestamp type (attributes bit 3: LogAppendTime, else CreateTime) and ``max_timestamp``, and recompute
    the CRC, in place. Nothing is written when both already hold (False); else True. As Kafka, the
    attributes are then rebuilt from the bits it knows (codec, timestamp type, transactional, control,
    delete horizon)."""
    attributes, _, _, current = _TIMESTAMP_FIELDS.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    if bool(attributes & TIMESTAMP_TYPE_MASK) == log_append_time and current == max_timestamp:
        return False
    attributes &= _KEPT_ATTRIBUTES
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    _, batch_length = _PREFIX.unpack_from(buf, pos)
    end = pos + LOG_OVERHEAD + batch_length
    _U32.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]))
    return True


def _corrupt(pos: int, why: str) -> CorruptRecordError:
    return CorruptRecordError(f"batch at position {pos}: {why}")


def decode_records(buf: Buffer, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """Validate the batch at ``pos`` (CRC included), decompress it if it is compressed, and decode its
    records. Raises :class:`CorruptRecordError` for anything that is not a well-formed batch (the
    unsupported-codec ``KafkaError`` for ids 5-7)."""
    header = validate_batch(buf, pos)
    try:
        data = record_bytes(buf, pos, header)
        return header, decode_record_bytes(data, header.records_count)
    except (RecordFormatError, CompressionError) as exc:
        raise _corrupt(pos, str(exc)) from exc


__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "CompressionType",
    "Record",
    "assemble_batch",
    "assign_offsets_and_epoch",
    "batch_crc",
    "build_batch",
    "build_simple_batch",
    "check_framing",
    "decode_records",
    "iter_batches",
    "read_header",
    "record_bytes",
    "scan_valid_prefix",
    "set_max_timestamp",
    "stored_range_problem",
    "validate_batch",
]
