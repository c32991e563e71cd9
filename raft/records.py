"""The values of the metadata log's records: one msgpack map per record with a ``type`` (Kafka's metadata
record names: ``LeaderChange``, ``RegisterBroker``, ``PartitionChange`` ...) and its fields in snake_case.

A new leader's first entry of its epoch is a ``LeaderChange`` (Kafka writes it as a control record): its
commitment is what lets the high watermark pass the epoch's start.
"""

from __future__ import annotations

from typing import Any

import msgpack

LEADER_CHANGE = "LeaderChange"


def encode_record(record_type: str, **fields: Any) -> bytes:
    value: bytes = msgpack.packb({"type": record_type, **fields}, use_bin_type=True)
    return value


def decode_record(value: bytes | None) -> dict[str, Any]:
    """The record's map; raises ValueError if it is not one of ours."""
    if value is None:
        raise ValueError("a metadata record has a value")
    decoded = msgpack.unpackb(value, raw=False)
    if not isinstance(decoded, dict) or not isinstance(decoded.get("type"), str):
        raise ValueError("a metadata record is a map with a 'type'")
    return decoded


def leader_change_value(leader_id: int, voters: list[int], granting_voters: list[int]) -> bytes:
    return encode_record(LEADER_CHANGE, leader_id=leader_id, voters=voters, granting_voters=granting_voters)


__all__ = ["LEADER_CHANGE", "decode_record", "encode_record", "leader_change_value"]
