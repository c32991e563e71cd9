"""What the coordinator writes to and reads back from ``__consumer_offsets``: record batches of offset
commits and group metadata (built with ``protocol.records``, so they are whatever record format the log
holds), and the replay of a partition into the groups it holds (Kafka's ``loadGroupsAndOffsets``: the last
record of a key wins, a tombstone deletes it). Pure: the shell hands the batches over."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from coordinator.group.coordinator_core import LoadedGroup
from coordinator.group.group_metadata import OffsetAndMetadata
from protocol.common import TopicPartition
from protocol.control_records import decode_end_txn_marker
from protocol.errors import CorruptRecordError, KafkaError
from protocol.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from protocol.records import Buffer, Record, build_batch, decode_records, read_header

log = logging.getLogger(__name__)

_CONTROL_BIT = 0x20  # a batch's attributes bit 5: a control batch
_TRANSACTIONAL_BIT = 0x10  # bit 4: a transactional batch


def offset_commit_batch(
    group_id: str,
    offsets: dict[TopicPartition, OffsetAndMetadata],
    timestamp_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
) -> bytes:
    """One batch with a record per committed partition (Kafka's ``storeOffsets``); with a producer id, a
    transactional batch of that producer (TxnOffsetCommit: no sequence, as Kafka writes it)."""
    records = [
        Record(
            offset_delta=i,
            timestamp_delta=0,
            key=encode_offset_commit_key(OffsetCommitKey(group_id, tp[0], tp[1])),
            value=encode_offset_commit_value(
                OffsetCommitValue(
                    offset=o.offset,
                    leader_epoch=o.leader_epoch,
                    metadata=o.metadata,
                    commit_timestamp=o.commit_timestamp_ms if o.commit_timestamp_ms >= 0 else timestamp_ms,
                )
            ),
        )
        for i, (tp, o) in enumerate(offsets.items())
    ]
    if producer_id >= 0:
        return build_batch(
            records,
            base_timestamp=timestamp_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            attributes=_TRANSACTIONAL_BIT,
        )
    return build_batch(records, base_timestamp=timestamp_ms)


def group_metadata_batch(group_id: str, value: GroupMetadataValue | None, timestamp_ms: int) -> bytes:
    """One batch with the group's metadata record (a tombstone when ``value`` is None)."""
    record = Record(
        offset_delta=0,
        timestamp_delta=0,
        key=encode_group_metadata_key(GroupMetadataKey(group_id)),
        value=None if value is None else encode_group_metadata_value(value),
    )
    return build_batch([record], base_timestamp=timestamp_ms)


def tombstones_batch(
    group_id: str, offsets: list[TopicPartition], group_tombstone: bool, timestamp_ms: int
) -> bytes:
    """One batch of tombstones (Kafka's ``cleanupGroupMetadata``): a record with a null value per removed
    offset, then the group's metadata when the group is deleted."""
    keys = [encode_offset_commit_key(OffsetCommitKey(group_id, tp[0], tp[1])) for tp in offsets]
    if group_tombstone:
        keys.append(encode_group_metadata_key(GroupMetadataKey(group_id)))
    records = [Record(offset_delta=i, timestamp_delta=0, key=key, value=None) for i, key in enumerate(keys)]
    return build_batch(records, base_timestamp=timestamp_ms)


@dataclass
class GroupLoader:
    """Folds the batches of one ``__consumer_offsets`` partition, oldest first, into its groups."""

    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    removed_groups: set[str] = field(default_factory=set)
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    # TxnOffsetCommit's offsets whose marker is not read yet: producer id -> group -> offsets.
    pending_txn: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0

    def add_batches(self, buf: Buffer) -> None:
        """Whole batches, as the log holds them. A batch whose records cannot be read, or a record that is
        not one of Kafka's keys and values, is skipped and counted (a load never stops half way)."""
        pos = 0
        view = memoryview(buf)
        while pos < len(view):
            header = read_header(view, pos)
            try:
                _, records = decode_records(view, pos)
            except CorruptRecordError as exc:
                log.warning("skipping an unreadable batch at offset %d: %s", header.base_offset, exc)
                self.skipped += header.records_count
                records = []
            pos += header.size
            if header.attributes & _CONTROL_BIT:
                # A transaction marker: the producer's offsets written in the transaction are committed
                # (COMMIT) or dropped (ABORT), as Kafka's loadGroupsAndOffsets decides them.
                self._end_txn(header.producer_id, records)
                continue
            pending = (
                self.pending_txn.setdefault(header.producer_id, {})
                if header.attributes & _TRANSACTIONAL_BIT
                else None
            )
            for record in records:
                try:
                    self.add_record(record.key, record.value, pending)
                except CorruptRecordError as exc:
                    log.warning("skipping a record of the batch at offset %d: %s", header.base_offset, exc)
                    self.skipped += 1

    def _end_txn(self, producer_id: int, records: list[Record]) -> None:
        held = self.pending_txn.pop(producer_id, None)
        if not held or not records:
            return
        try:
            commit = decode_end_txn_marker(records[0].key, records[0].value).is_commit
        except KafkaError as exc:
            log.warning("skipping an unreadable transaction marker of producer %d: %s", producer_id, exc)
            return
        if commit:
            for group_id, offsets in held.items():
                self.offsets.setdefault(group_id, {}).update(offsets)

    def add_record(
        self,
        key: bytes | None,
        value: bytes | None,
        pending: dict[str, dict[TopicPartition, OffsetAndMetadata]] | None = None,
    ) -> None:
        """One record; ``pending``: where a transactional batch's offsets wait for their marker."""
        self.records += 1
        if key is None:
            self.skipped += 1
            return
        decoded = decode_key(bytes(key))
        if isinstance(decoded, OffsetCommitKey):
            target = self.offsets if pending is None else pending
            offsets = target.setdefault(decoded.group, {})
            tp = (decoded.topic, decoded.partition)
            if value is None:
                offsets.pop(tp, None)
            else:
                v = decode_offset_commit_value(bytes(value))
                offsets[tp] = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
        elif isinstance(decoded, GroupMetadataKey):
            if value is None:
                self.groups.pop(decoded.group, None)
                self.removed_groups.add(decoded.group)
            else:
                self.groups[decoded.group] = decode_group_metadata_value(bytes(value))
                self.removed_groups.discard(decoded.group)
        else:
            self.skipped += 1  # a key version this broker does not know (Kafka skips it too)

    def result(self) -> dict[str, LoadedGroup]:
        out: dict[str, LoadedGroup] = {}
        for group_id, offsets in self.offsets.items():
            if offsets:
                out[group_id] = LoadedGroup(None, dict(offsets))
        for group_id, value in self.groups.items():
            out.setdefault(group_id, LoadedGroup()).metadata = value
        for producer_id, held in self.pending_txn.items():
            for group_id, offsets in held.items():
                if offsets:
                    out.setdefault(group_id, LoadedGroup()).pending_txn_offsets[producer_id] = dict(offsets)
        return out
