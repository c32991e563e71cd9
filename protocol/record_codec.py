"""Kafka's record encoding inside a v2 batch (Kafka's ``DefaultRecord``), byte for byte.

Each record, after the batch header (or inside the decompressed stream of a compressed batch)::

    length           varint   bytes of the record after this field
    attributes       int8     unused by Kafka (0)
    timestamp_delta  varlong  timestamp - the batch's base_timestamp
    offset_delta     varint   offset - the batch's base_offset
    key_length       varint   -1 = null key (Kafka reads any negative length as null)
    key              bytes
    value_length     varint   -1 = null value
    value            bytes
    headers_count    varint
    headers          [header_key_length varint | header_key utf-8 | header_value_length varint (-1 = null) |
                      header_value]

A varint is zig-zag encoded (``(n << 1) ^ (n >> 63)``), then written 7 bits at a time, least significant
group first, the high bit of each byte saying another byte follows (protobuf's ``sint32`` / ``sint64``): at
most 5 bytes for a varint, 10 for a varlong.

Two readers: :func:`decode_record_bytes` builds :class:`Record` objects (tools, consumers, tests) and
:func:`scan_records` is the leader's validator: it walks each record once, skipping keys, values and header
values without copying them, and checks what Kafka's ``LogValidator`` checks. Both raise
:class:`RecordFormatError` naming the record.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

Buffer = bytes | bytearray | memoryview
HeaderPairs = tuple[tuple[str, bytes | None], ...]
HeadersArg = Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch. Its offset is ``base_offset + offset_delta``, its timestamp
    ``base_timestamp + timestamp_delta``. ``headers`` are ``(key, value)`` pairs in order (a key may repeat,
    a value may be None); a dict is accepted and kept as its items. ``attributes`` is the record's own
    attributes byte (Kafka writes 0 and never reads it)."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: HeaderPairs = ()
    attributes: int = 0

    def __post_init__(self) -> None:
        headers: object = self.headers
        if type(headers) is not tuple:
            pairs = headers.items() if isinstance(headers, Mapping) else headers
            object.__setattr__(self, "headers", tuple((k, v) for k, v in pairs))  # type: ignore[attr-defined]


class RecordFormatError(ValueError):
    """A record that is not Kafka's ``DefaultRecord``; ``index`` is its index in the batch. ``whole_batch``:
    the records and the header's count disagree (too few records, or bytes after the last one), a fault of
    the batch rather than of one record."""

    def __init__(self, index: int, why: str, *, whole_batch: bool = False) -> None:
        super().__init__(f"{why}" if whole_batch else f"record {index}: {why}")
        self.index = index
        self.why = why
        self.whole_batch = whole_batch


def _too_few(i: int, count: int) -> RecordFormatError:
    return RecordFormatError(
        i, f"the records end after {i} of the {count} records the header counts", whole_batch=True
    )


def _too_many(count: int, left: int) -> RecordFormatError:
    return RecordFormatError(
        count, f"{left} bytes remain after the {count} records the header counts", whole_batch=True
    )


# ---------------------------------------------------------------------------------------------- encoding


def _encode_zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Varints of -1 .. 8191 (every length, delta and count of ordinary records), computed once.
_CACHE_LOW = -1
_VARINT_CACHE = [_encode_zigzag(n) for n in range(_CACHE_LOW, 8192)]


def varint(n: int) -> bytes:
    """The zig-zag varint (or varlong) of ``n``."""
    if -1 <= n < 8191:
        return _VARINT_CACHE[n + 1]
    return _encode_zigzag(n)


_NULL = b"\x01"  # varint(-1)


def _header_bytes(headers: HeaderPairs) -> bytes:
    parts = [varint(len(headers))]
    for key, value in headers:
        k = key.encode("utf-8", "surrogateescape")
        parts.append(varint(len(k)))
        parts.append(k)
        if value is None:
            parts.append(_NULL)
        else:
            parts.append(varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def encode_record(record: Record) -> bytes:
    """One record, its length varint first."""
    key, value = record.key, record.value
    body = b"".join(
        (
            bytes((record.attributes & 0xFF,)),
            varint(record.timestamp_delta),
            varint(record.offset_delta),
            _NULL if key is None else varint(len(key)) + key,
            _NULL if value is None else varint(len(value)) + value,
            _header_bytes(record.headers) if record.headers else b"\x00",
        )
    )
    return varint(len(body)) + body


def encode_records(records: Iterable[Record]) -> bytes:
    """Records back to back, as they follow a batch header (before any compression)."""
    return b"".join([encode_record(r) for r in records])


def encode_values(values: Sequence[bytes | None]) -> bytes:
    """Key-less, header-less records with offset deltas ``0..n-1`` and timestamp delta 0 (the producer's)."""
    if values and None not in values:
        lengths = set(map(len, values))  # type: ignore[arg-type]
        if len(lengths) == 1:
            # Values of one length (the common case): every record's bytes before its value depend only on
            # its index, so they are made once per length and the records are joined at C speed.
            heads = _uniform_heads(lengths.pop(), len(values))
            return b"".join(chain.from_iterable(zip(heads, values, strict=False))) + b"\x00"  # type: ignore[arg-type]
    parts: list[bytes] = []
    append = parts.append
    cache = _VARINT_CACHE
    for i, value in enumerate(values):
        od = cache[i + 1] if i < 8191 else _encode_zigzag(i)
        if value is None:
            append(varint(5 + len(od)))
            append(b"\x00\x00" + od + b"\x01\x01\x00")
            continue
        n = len(value)
        vl = cache[n + 1] if n < 8191 else _encode_zigzag(n)
        body_len = 4 + len(od) + len(vl) + n
        append(cache[body_len + 1] if body_len < 8191 else _encode_zigzag(body_len))
        append(b"\x00\x00" + od + b"\x01" + vl)
        append(value)
        append(b"\x00")
    return b"".join(parts)


# For a value length: the bytes of record i up to its value, preceded (from the second on) by the previous
# record's empty headers count. Kept for a few lengths, as long as the longest batch asked for.
_HEADS: dict[int, list[bytes]] = {}
_HEADS_LENGTHS = 8


def _uniform_heads(size: int, count: int) -> list[bytes]:
    heads = _HEADS.get(size)
    if heads is None:
        if len(_HEADS) >= _HEADS_LENGTHS:
            _HEADS.pop(next(iter(_HEADS)))
        heads = _HEADS[size] = []
    if len(heads) < count:
        vl = varint(size)
        for i in range(len(heads), count):
            od = varint(i)
            head = varint(4 + len(od) + len(vl) + size) + b"\x00\x00" + od + b"\x01" + vl
            heads.append(head if i == 0 else b"\x00" + head)
    return heads


# ---------------------------------------------------------------------------------------------- decoding


def _uvarint(data: Buffer, pos: int, max_bytes: int) -> tuple[int, int]:
    """The unsigned (still zig-zagged) varint at ``pos`` and the position after it."""
    result = 0
    shift = 0
    for n in range(max_bytes):
        b = data[pos + n]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + n + 1
        shift += 7
    raise ValueError(f"a varint longer than {max_bytes} bytes")


def read_varint(data: Buffer, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """The zig-zag varint at ``pos`` (``max_bytes`` 10 for a varlong) and the position after it."""
    z, pos = _uvarint(data, pos, max_bytes)
    return (z >> 1) ^ -(z & 1), pos


def _checked_varint(data: Buffer, pos: int, index: int, what: str, max_bytes: int = 5) -> tuple[int, int]:
    try:
        return read_varint(data, pos, max_bytes)
    except ValueError as exc:
        raise RecordFormatError(index, f"{what}: {exc}") from None


def decode_record_bytes(data: Buffer, count: int) -> list[Record]:
    """The ``count`` records encoded in ``data`` (which they must fill exactly)."""
    if isinstance(data, memoryview):
        data = data.tobytes()
    out: list[Record] = []
    end = len(data)
    pos = 0
    i = 0
    try:
        for i in range(count):
            if pos >= end:
                raise _too_few(i, count)
            length, pos = _checked_varint(data, pos, i, "length")
            record_end = pos + length
            if length < 1 or record_end > end:
                raise RecordFormatError(i, f"length {length} does not fit the {end - pos} bytes left")
            attributes = data[pos]
            timestamp_delta, p = _checked_varint(data, pos + 1, i, "timestamp_delta", 10)
            offset_delta, p = _checked_varint(data, p, i, "offset_delta")
            key_length, p = _checked_varint(data, p, i, "key length")
            key = None
            if key_length >= 0:
                key = bytes(data[p : p + key_length])
                p += key_length
            value_length, p = _checked_varint(data, p, i, "value length")
            value = None
            if value_length >= 0:
                value = bytes(data[p : p + value_length])
                p += value_length
            count_h, p = _checked_varint(data, p, i, "headers count")
            if count_h < 0:
                raise RecordFormatError(i, f"invalid number of record headers {count_h}")
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(count_h):
                hk_len, p = _checked_varint(data, p, i, "header key length")
                if hk_len < 0:
                    raise RecordFormatError(i, f"invalid negative header key size {hk_len}")
                hkey = data[p : p + hk_len].decode("utf-8", "surrogateescape")
                p += hk_len
                hv_len, p = _checked_varint(data, p, i, "header value length")
                hvalue = None
                if hv_len >= 0:
                    hvalue = bytes(data[p : p + hv_len])
                    p += hv_len
                headers.append((hkey, hvalue))
            if p != record_end:
                raise RecordFormatError(
                    i, f"invalid record size: length {length} but its fields take {p - pos} bytes"
                )
            out.append(Record(offset_delta, timestamp_delta, key, value, tuple(headers), attributes))
            pos = record_end
    except IndexError:
        raise RecordFormatError(i, "the record runs past the end of the records") from None
    if pos != end:
        raise _too_many(count, end - pos)
    return out


class RecordScan(NamedTuple):
    """What :func:`scan_records` found: the largest ``timestamp_delta`` and whether record ``i`` has offset
    delta ``i`` for every ``i`` (Kafka rewrites a compressed batch whose inner offsets are not so)."""

    max_timestamp_delta: int
    offsets_in_order: bool


def scan_records(data: Buffer, count: int, start: int = 0, end: int | None = None) -> RecordScan:
    """Walk the ``count`` records of ``data[start:end]`` once, as Kafka's validator does, skipping keys,
    values and header values (nothing is copied): the largest ``timestamp_delta`` and whether the offset
    deltas are ``0..count-1``.

    Checks each record's structure (its length matches its fields, a non-negative headers count and
    header key lengths; a negative key, value or header value length is null, as Kafka reads it) and that
    the records fill ``data[start:end]`` exactly. Raises :class:`RecordFormatError`.
    """
    if count < 1:
        raise RecordFormatError(0, f"records_count {count}")
    if end is None:
        end = len(data)
    pos = start
    i = 0
    max_ts = -(1 << 63)
    in_order = True
    try:
        while i < count:
            if pos >= end:
                raise _too_few(i, count)
            # length
            b = data[pos]
            if b < 0x80:
                z = b
                pos += 1
            else:
                z, pos = _uvarint(data, pos, 5)
            record_end = pos + ((z >> 1) ^ -(z & 1))
            if record_end <= pos or record_end > end:
                raise RecordFormatError(
                    i, f"length {(z >> 1) ^ -(z & 1)} does not fit the {end - pos} bytes left"
                )
            # attributes (unused), then timestamp_delta
            b = data[pos + 1]
            if b < 0x80:
                p = pos + 2
                ts = (b >> 1) ^ -(b & 1)
            else:
                z, p = _uvarint(data, pos + 1, 10)
                ts = (z >> 1) ^ -(z & 1)
            if ts > max_ts:
                max_ts = ts
            # offset_delta: i when the offsets are in order
            b = data[p]
            if b < 0x80:
                p += 1
                if b != i << 1:
                    in_order = False
            else:
                z, p = _uvarint(data, p, 5)
                if z != i << 1:
                    in_order = False
            # key, value: skipped
            b = data[p]
            if b < 0x80:
                p += 1
                z = b
            else:
                z, p = _uvarint(data, p, 5)
            if not z & 1:  # odd: a negative length, null as Kafka reads it
                p += z >> 1
            b = data[p]
            if b < 0x80:
                p += 1
                z = b
            else:
                z, p = _uvarint(data, p, 5)
            if not z & 1:
                p += z >> 1
            # headers
            b = data[p]
            p += 1
            if b:
                p = _skip_headers(data, p - 1, i)
            if p != record_end:
                raise RecordFormatError(
                    i, f"invalid record size: length {record_end - pos} but its fields take {p - pos} bytes"
                )
            pos = record_end
            i += 1
    except IndexError:
        raise RecordFormatError(i, "the record runs past the end of the records") from None
    except ValueError as exc:
        if isinstance(exc, RecordFormatError):
            raise
        raise RecordFormatError(i, str(exc)) from None
    if pos != end:
        raise _too_many(count, end - pos)
    return RecordScan(max_ts, in_order)


# --------------------------------------------------------------------- the C-backed fast path of the scan

# aiokafka's Cython reader of Kafka's DefaultRecordBatch (aio-libs; wheels for the usual platforms), None
# where it is missing (the pure walk then does it all). It is imported on first use: importing it runs
# aiokafka's package (its client, asyncio ...), a tenth of a second that every process importing this module
# would otherwise pay at start-up, each command and each node, even one that never checks a batch.
_UNLOADED: Any = object()
_CRecordBatch: Any = _UNLOADED


def _c_reader() -> Any:
    global _CRecordBatch
    if _CRecordBatch is _UNLOADED:
        try:
            from aiokafka.record._crecords.default_records import DefaultRecordBatch
        except ImportError:  # pragma: no cover - a platform without the compiled wheel
            _CRecordBatch = None
        else:
            _CRecordBatch = DefaultRecordBatch
    return _CRecordBatch


def preload_fast_scan() -> bool:
    """Loads the C reader now (whether it is installed). A broker (and a controller, for its metadata log)
    does so in a thread as it starts: loaded on first use instead, the import would stall the event loop for
    a tenth of a second at the first batch the node validates as leader, which is, after a failover, the
    moment its new partitions (or the new active controller's records) take their first writes. False if
    it is not installed, or could not be loaded now (say, no file descriptor was left to read it with): the
    first use then tries again."""
    try:
        return _c_reader() is not None
    except Exception:
        return False


def __getattr__(name: str) -> Any:
    if name == "FAST_SCAN_AVAILABLE":  # whether the C reader is installed (it is loaded to answer)
        return _c_reader() is not None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_OFFSET = attrgetter("offset")
_TIMESTAMP = attrgetter("timestamp")
# Zero bytes after the batch: the C reader may look a byte or two past the records before it checks
# bounds, and a zero byte ends any varint there.
_PAD = bytes(16)


def fast_scan_batch(batch: bytes, base_offset: int, base_timestamp: int, count: int) -> int | None:
    """The largest timestamp delta of the uncompressed batch ``batch`` (header included, the codec bits
    clear), read by aiokafka's C reader, if that reader finds ``count`` well-formed records with offsets
    ``base_offset + i`` that fill the batch exactly; None if it objects to anything or is not installed
    (then :func:`scan_records` decides, and says why). Keys and values are copied into short-lived bytes by
    that reader; nothing else is kept."""
    reader = _c_reader()
    if reader is None:
        return None
    padded = batch + _PAD
    # The reader makes a few objects per record, all freed by reference counting as soon as this returns:
    # the cyclic collector has nothing to find among them, and running it every 700 of them would cost
    # more than the walk itself (measured: 0.3 -> 0.13 us per record on 1,000-record batches).
    collecting = gc.isenabled()
    gc.disable()
    try:
        records = list(reader(memoryview(padded)[: len(batch)]))
        if len(records) != count or list(map(_OFFSET, records)) != list(
            range(base_offset, base_offset + count)
        ):
            return None
        return int(max(map(_TIMESTAMP, records))) - base_timestamp
    except Exception:  # its CorruptRecordException, a None timestamp (-1), invalid UTF-8 in a header key ...
        return None
    finally:
        if collecting:
            gc.enable()


def _skip_headers(data: Buffer, p: int, index: int) -> int:
    n, p = read_varint(data, p)
    if n < 0:
        raise RecordFormatError(index, f"invalid number of record headers {n}")
    for _ in range(n):
        key_length, p = read_varint(data, p)
        if key_length < 0:
            raise RecordFormatError(index, f"invalid negative header key size {key_length}")
        p += key_length
        value_length, p = read_varint(data, p)
        if value_length > 0:
            p += value_length
    return p


__all__ = [
    "Record",
    "RecordFormatError",
    "RecordScan",
    "decode_record_bytes",
    "encode_record",
    "encode_records",
    "encode_values",
    "fast_scan_batch",
    "read_varint",
    "scan_records",
    "varint",
]
