"""Kafka's consumer embedded protocol (``ConsumerProtocol``): the bytes a consumer puts in JoinGroup's
protocol metadata (its subscription) and the leader puts in SyncGroup's assignments, for protocol type
``consumer``. Version 0 of both, which every Kafka consumer reads:

- ``ConsumerProtocolSubscription``: int16 version, ``topics`` array of string, ``user_data`` nullable bytes;
- ``ConsumerProtocolAssignment``: int16 version, ``assigned_partitions`` array of {``topic`` string,
  ``partitions`` array of int32}, ``user_data`` nullable bytes.

Later versions only append fields, so the decoders read any version's leading fields. And the range
assignor (Kafka's ``RangeAssignor``) that a leader runs.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

CONSUMER_PROTOCOL_TYPE = "consumer"
RANGE = "range"


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def encode_subscription(topics: Sequence[str]) -> bytes:
    return struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics) + struct.pack(">i", -1)


def encode_assignment(assignment: Mapping[str, Sequence[int]]) -> bytes:
    out = bytearray(struct.pack(">hi", 0, len(assignment)))
    for topic, partitions in assignment.items():
        out += _string(topic) + struct.pack(">i", len(partitions))
        out += b"".join(struct.pack(">i", p) for p in partitions)
    return bytes(out + struct.pack(">i", -1))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def string(self) -> str:
        return self.take(self.int16()).decode()


def decode_subscription(data: bytes) -> list[str] | None:
    """The subscribed topics, or None if the bytes are not a consumer subscription."""
    try:
        r = _Reader(data)
        r.int16()
        return [r.string() for _ in range(max(r.int32(), 0))]
    except (ValueError, UnicodeDecodeError, struct.error):
        return None


def decode_assignment(data: bytes) -> dict[str, list[int]] | None:
    """The assigned partitions by topic ({} for an empty assignment), or None if the bytes are not one."""
    if not data:
        return {}
    try:
        r = _Reader(data)
        r.int16()
        out: dict[str, list[int]] = {}
        for _ in range(max(r.int32(), 0)):
            topic = r.string()
            out[topic] = [r.int32() for _ in range(max(r.int32(), 0))]
        return out
    except (ValueError, UnicodeDecodeError, struct.error):
        return None


def range_assign(
    subscriptions: Mapping[str, Sequence[str]], partitions_per_topic: Mapping[str, int]
) -> dict[str, dict[str, list[int]]]:
    """Kafka's ``RangeAssignor``: for each topic, its partitions in order, split into contiguous ranges
    over the subscribed members sorted by member id (the first ones take one more when it does not
    divide)."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        count = partitions_per_topic.get(topic, 0)
        if not members or count <= 0:
            continue
        per, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            n = per + (1 if i < extra else 0)
            if n:
                out[member][topic] = list(range(start, start + n))
            start += n
    return out
