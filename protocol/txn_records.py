"""The records of ``__transaction_state``, byte for byte as Kafka's (``TransactionLogKey`` and
``TransactionLogValue``, docs/transactions.md).

A record's key is ``int16 version`` (0) then ``transactional_id`` (int16-length string); its value is
``int16 version`` then, in version 0: ``producer_id`` int64, ``producer_epoch`` int16,
``transaction_timeout_ms`` int32, ``transaction_status`` int8 (Kafka's state ids below),
``transaction_partitions`` (nullable int32-count array of ``{topic: string, partition_ids: [int32]}``),
``transaction_last_update_timestamp_ms`` int64, ``transaction_start_timestamp_ms`` int64. Version 1 is
flexible (compact strings and arrays, tagged ``previous_producer_id`` (0), ``next_producer_id`` (1),
``client_transaction_version`` (2)); it is read, version 0 is written, as Kafka does for clients that do not
use transactions version 2. A null value is a tombstone (the transactional id expired).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from protocol.errors import CorruptRecordError
from protocol.group_records import java_string_hash

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
TXN_LOG_KEY_VERSION = 0
TXN_LOG_VALUE_VERSION = 0

# Kafka's TransactionState ids (``TransactionState.id``), as ``transaction_status`` holds them.
STATE_IDS: dict[str, int] = {
    "Empty": 0,
    "Ongoing": 1,
    "PrepareCommit": 2,
    "PrepareAbort": 3,
    "CompleteCommit": 4,
    "CompleteAbort": 5,
    "Dead": 6,
    "PrepareEpochFence": 7,
}
STATE_NAMES: dict[int, str] = {v: k for k, v in STATE_IDS.items()}


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    # topic -> partition ids (sorted when written)
    transaction_partitions: dict[str, list[int]] = field(default_factory=dict)
    transaction_last_update_timestamp_ms: int = -1
    transaction_start_timestamp_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1


def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``partitionFor``: ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def _string(s: str) -> bytes:
    data = s.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is longer than an int16 length allows")
    return struct.pack(">h", len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", TXN_LOG_KEY_VERSION) + _string(transactional_id)


def encode_value(value: TransactionLogValue) -> bytes:
    out = bytearray(
        struct.pack(
            ">hqhib",
            TXN_LOG_VALUE_VERSION,
            value.producer_id,
            value.producer_epoch,
            value.transaction_timeout_ms,
            value.transaction_status,
        )
    )
    topics = sorted(value.transaction_partitions.items())
    out += struct.pack(">i", len(topics))
    for topic, partitions in topics:
        out += _string(topic)
        out += struct.pack(">i", len(partitions))
        for p in sorted(partitions):
            out += struct.pack(">i", p)
    out += struct.pack(
        ">qq", value.transaction_last_update_timestamp_ms, value.transaction_start_timestamp_ms
    )
    return bytes(out)


class _Reader:
    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, pos: int, flexible: bool) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC_NAME} record ends early at byte {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> int:
        s = struct.Struct(fmt)
        return int(s.unpack(self.take(s.size))[0])

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC_NAME} record has an overlong varint")

    def length(self, fmt: str) -> int:
        return self.uvarint() - 1 if self.flexible else self.unpack(fmt)

    def string(self) -> str:
        n = self.length(">h")
        if n < 0:
            raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC_NAME} record has a null string")
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC_NAME} record has a string not UTF-8") from exc


def _version(data: bytes) -> int:
    if len(data) < 2:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC_NAME} record is shorter than its version")
    return int(struct.unpack_from(">h", data)[0])


def decode_key(data: bytes) -> str:
    version = _version(data)
    if version != 0:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC_NAME} key version {version} is unknown")
    return _Reader(data, 2, False).string()


def decode_value(data: bytes) -> TransactionLogValue:
    version = _version(data)
    if version not in (0, 1):
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC_NAME} value version {version} is unknown")
    r = _Reader(data, 2, version >= 1)
    producer_id = r.unpack(">q")
    producer_epoch = r.unpack(">h")
    timeout_ms = r.unpack(">i")
    status = r.unpack(">b")
    if status not in STATE_NAMES:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC_NAME} value has unknown status {status}")
    partitions: dict[str, list[int]] = {}
    n = r.length(">i")
    for _ in range(max(n, 0)):
        topic = r.string()
        ids = [r.unpack(">i") for _ in range(max(r.length(">i"), 0))]
        if r.flexible:
            _skip_tags(r, {})
        partitions[topic] = ids
    last_update = r.unpack(">q")
    start = r.unpack(">q")
    tags: dict[int, bytes] = {}
    if r.flexible:
        _skip_tags(r, tags)
    previous = struct.unpack(">q", tags[0])[0] if len(tags.get(0, b"")) == 8 else -1
    next_id = struct.unpack(">q", tags[1])[0] if len(tags.get(1, b"")) == 8 else -1
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        transaction_status=status,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=last_update,
        transaction_start_timestamp_ms=start,
        previous_producer_id=int(previous),
        next_producer_id=int(next_id),
    )


def _skip_tags(r: _Reader, into: dict[int, bytes]) -> None:
    for _ in range(r.uvarint()):
        tag = r.uvarint()
        into[tag] = r.take(r.uvarint())


__all__ = [
    "STATE_IDS",
    "STATE_NAMES",
    "TRANSACTION_STATE_TOPIC_NAME",
    "TransactionLogValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for_transactional_id",
]


# The names the report reads ``__transaction_state`` with (through ``protocol``'s front door).
decode_transaction_log_key = decode_key
decode_transaction_log_value = decode_value
