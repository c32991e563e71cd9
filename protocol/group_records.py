"""The records of ``__consumer_offsets`` (docs/groups.md), as Kafka writes them: a key and a value,
each a big-endian int16 schema version followed by the fields of Kafka's schemas
(``group-coordinator/src/main/resources/common/message/``):

- ``OffsetCommitKey`` v1 (key version 0 and 1 name an offset): ``group`` string, ``topic`` string,
  ``partition`` int32; its value ``OffsetCommitValue`` v3: ``offset`` int64, ``leaderEpoch`` int32,
  ``metadata`` string, ``commitTimestamp`` int64 (v1 has ``expireTimestamp`` after it and no epoch; v0 and v2
  neither).
- ``GroupMetadataKey`` v2: ``group`` string; its value ``GroupMetadataValue`` v3: ``protocolType`` string,
  ``generation`` int32, ``protocol`` nullable string, ``leader`` nullable string, ``currentStateTimestamp``
  int64 (v2+), ``members`` array of {``memberId``, ``groupInstanceId`` (v3+, nullable), ``clientId``,
  ``clientHost``, ``rebalanceTimeout`` (v1+), ``sessionTimeout``, ``subscription`` bytes, ``assignment``
  bytes}.

Strings are int16 length + UTF-8 (-1 = null), bytes int32 length + bytes, arrays int32 count. A null value
(a tombstone) deletes the offset or the group. Kafka writes key v1 / value v3 for offsets and key v2 /
value v3 for groups today; the decoders read every version up to the flexible v4 values (which add tagged
fields), so a log written by another Kafka version loads too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from protocol.errors import CorruptRecordError

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

# The topic's name (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``).
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only in value v1


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadataValue] = field(default_factory=list)


GroupRecordKey = OffsetCommitKey | GroupMetadataKey


# ---------------------------------------------------------------------------------------------- writing


class _Writer:
    __slots__ = ("buf",)

    def __init__(self, version: int) -> None:
        self.buf = bytearray(struct.pack(">h", version))

    def int16(self, v: int) -> None:
        self.buf += struct.pack(">h", v)

    def int32(self, v: int) -> None:
        self.buf += struct.pack(">i", v)

    def int64(self, v: int) -> None:
        self.buf += struct.pack(">q", v)

    def string(self, v: str | None) -> None:
        if v is None:
            self.int16(-1)
            return
        data = v.encode()
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes is longer than an int16 length allows")
        self.int16(len(data))
        self.buf += data

    def bytes_(self, v: bytes) -> None:
        self.int32(len(v))
        self.buf += v

    def done(self) -> bytes:
        return bytes(self.buf)


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    w = _Writer(OFFSET_COMMIT_KEY_VERSION)
    w.string(key.group)
    w.string(key.topic)
    w.int32(key.partition)
    return w.done()


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Value v3, or v1 when the commit carries an expire timestamp (as Kafka chooses)."""
    if value.expire_timestamp >= 0:
        w = _Writer(1)
        w.int64(value.offset)
        w.string(value.metadata)
        w.int64(value.commit_timestamp)
        w.int64(value.expire_timestamp)
        return w.done()
    w = _Writer(OFFSET_COMMIT_VALUE_VERSION)
    w.int64(value.offset)
    w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp)
    return w.done()


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    w = _Writer(GROUP_METADATA_KEY_VERSION)
    w.string(key.group)
    return w.done()


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = _Writer(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.done()


# ---------------------------------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, pos: int, flexible: bool = False) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError(f"__consumer_offsets record ends early at byte {self.pos}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise CorruptRecordError("__consumer_offsets record has a varint longer than 5 bytes")

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(
                f"__consumer_offsets record has a string that is not UTF-8: {exc}"
            ) from exc

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        return b"" if n < 0 else self._take(n)

    def array_len(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.int32()

    def tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())


def _version(data: bytes) -> int:
    if len(data) < 2:
        raise CorruptRecordError("__consumer_offsets record is shorter than its version")
    return int(struct.unpack_from(">h", data)[0])


def decode_key(data: bytes) -> GroupRecordKey | None:
    """The key of a ``__consumer_offsets`` record; None for a key version this broker does not know
    (Kafka skips those as it loads)."""
    version = _version(data)
    r = _Reader(data, 2)
    if version in (0, 1):
        group, topic, partition = r.string(), r.string(), r.int32()
        if group is None or topic is None:
            raise CorruptRecordError("OffsetCommitKey with a null group or topic")
        return OffsetCommitKey(group, topic, partition)
    if version == 2:
        group = r.string()
        if group is None:
            raise CorruptRecordError("GroupMetadataKey with a null group")
        return GroupMetadataKey(group)
    return None


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    version = _version(data)
    if not 0 <= version <= 4:
        raise CorruptRecordError(f"unknown OffsetCommitValue version {version}")
    r = _Reader(data, 2, flexible=version >= 4)
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string() or ""
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    version = _version(data)
    if not 0 <= version <= 4:
        raise CorruptRecordError(f"unknown GroupMetadataValue version {version}")
    r = _Reader(data, 2, flexible=version >= 4)
    protocol_type = r.string() or ""
    generation = r.int32()
    protocol = r.string()
    leader = r.string()
    timestamp = r.int64() if version >= 2 else -1
    members: list[MemberMetadataValue] = []
    for _ in range(max(r.array_len(), 0)):
        member_id = r.string() or ""
        instance_id = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadataValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, members)


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``Utils.abs(groupId.hashCode) % n``
    (``Utils.abs`` maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
