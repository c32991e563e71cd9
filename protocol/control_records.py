"""Kafka's control records (KIP-98): the end-of-transaction markers a partition leader writes for
WriteTxnMarkers, byte for byte as Kafka's ``ControlRecordType`` and ``EndTransactionMarker``.

A marker is a batch of its own: attributes with the control and transactional bits, the transaction's
producer id and epoch, base sequence -1, one record whose key is ``version i16 (0) | type i16`` (0 abort,
1 commit) and whose value is ``version i16 (0) | coordinator_epoch i32``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from protocol.errors import CorruptRecordError, InvalidRecordError
from protocol.record_codec import Record
from protocol.records import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    Buffer,
    build_batch,
    decode_records,
)

__all__ = [
    "CONTROL_RECORD_KEY_VERSION",
    "END_TXN_MARKER_VALUE_VERSION",
    "ControlRecordType",
    "EndTransactionMarker",
    "build_end_txn_marker_batch",
    "decode_end_txn_marker",
    "is_control",
    "is_transactional",
    "read_end_txn_marker",
]

CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VALUE_VERSION = 0
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator_epoch


class ControlRecordType(enum.IntEnum):
    """Kafka's ``ControlRecordType`` (the end-of-transaction types; others are not written here)."""

    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    control_type: ControlRecordType
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type is ControlRecordType.COMMIT

    def key_bytes(self) -> bytes:
        return _KEY.pack(CONTROL_RECORD_KEY_VERSION, int(self.control_type))

    def value_bytes(self) -> bytes:
        return _VALUE.pack(END_TXN_MARKER_VALUE_VERSION, self.coordinator_epoch)


def is_control(header: BatchHeader) -> bool:
    return bool(header.attributes & CONTROL_FLAG_MASK)


def is_transactional(header: BatchHeader) -> bool:
    return bool(header.attributes & TRANSACTIONAL_FLAG_MASK)


def build_end_txn_marker_batch(
    producer_id: int,
    producer_epoch: int,
    marker: EndTransactionMarker,
    *,
    timestamp_ms: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch holding ``marker`` (Kafka's ``MemoryRecords.withEndTransactionMarker``)."""
    return build_batch(
        [Record(0, 0, marker.key_bytes(), marker.value_bytes())],
        base_offset=0,
        partition_leader_epoch=partition_leader_epoch,
        base_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        attributes=CONTROL_FLAG_MASK | TRANSACTIONAL_FLAG_MASK,
    )


def decode_end_txn_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    """The marker of one control record (Kafka's ``EndTransactionMarker.deserialize``); raises
    ``InvalidRecordError`` for a record that is not an end-of-transaction marker."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(f"control record key of {0 if key is None else len(key)} bytes, expected 4")
    _, type_id = _KEY.unpack_from(key)
    if type_id not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(f"control record type {type_id} is not an end-of-transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise InvalidRecordError(
            f"end transaction marker value of {0 if value is None else len(value)} bytes, expected 6"
        )
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"invalid version {version} of an end transaction marker")
    return EndTransactionMarker(ControlRecordType(type_id), coordinator_epoch)


def read_end_txn_marker(buf: Buffer, pos: int = 0) -> tuple[EndTransactionMarker | None, int]:
    """The marker in the control batch at ``pos`` and its record's timestamp; ``(None, -1)`` for an empty
    control batch (Kafka: a transaction cleaned from the log). Raises ``CorruptRecordError`` /
    ``InvalidRecordError``."""
    header, records = decode_records(buf, pos)
    if not header.attributes & CONTROL_FLAG_MASK:
        raise CorruptRecordError(f"batch at offset {header.base_offset} is not a control batch")
    if not records:
        return None, -1
    record = records[0]
    return decode_end_txn_marker(record.key, record.value), header.base_timestamp + record.timestamp_delta
