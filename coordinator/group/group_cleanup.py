"""Removing groups and committed offsets, pure decisions over a ``GroupMetadata`` (Kafka's
``GroupCoordinator.handleDeleteGroups`` and ``GroupMetadataManager.cleanupGroupMetadata`` with
``GroupMetadata.removeExpiredOffsets``): which groups DeleteGroups may delete, which offsets have expired
under ``offsets.retention.minutes``, and what a group left without members or offsets becomes. The core
(``coordinator_core``) applies them and returns the tombstones to write (:class:`StoreTombstones`)."""

from __future__ import annotations

from coordinator.group.effects import StoreTombstones
from coordinator.group.group_metadata import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    GroupState,
    OffsetAndMetadata,
)
from protocol.common import TopicPartition
from protocol.errors import Errors

# Kafka's offsets.retention.minutes (7 days) and offsets.retention.check.interval.ms (10 minutes).
DEFAULT_OFFSETS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 10 * 60 * 1000


def delete_error(group: GroupMetadata | None) -> Errors | None:
    """Why DeleteGroups may not delete ``group`` (None: it may): GROUP_ID_NOT_FOUND (69) for a group the
    coordinator does not have (or one already Dead), NON_EMPTY_GROUP (68) for one with members or in a
    rebalance; only an Empty group is deleted."""
    if group is None or group.is_state(GroupState.DEAD):
        return Errors.GROUP_ID_NOT_FOUND
    if not group.is_state(GroupState.EMPTY):
        return Errors.NON_EMPTY_GROUP
    return None


def expired_offsets(
    group: GroupMetadata, now_ms: int, retention_ms: int, pending: set[TopicPartition]
) -> list[TopicPartition]:
    """The offsets of ``group`` that have expired (Kafka's ``removeExpiredOffsets``, KIP-211): of an Empty
    group that has a protocol type, ``retention_ms`` after the group became Empty (its state timestamp,
    else the commit's own timestamp); of a group without one (a simple consumer's, which only stores
    offsets), ``retention_ms`` after each commit; of a Stable consumer group, those of topics none of its
    members subscribes to, ``retention_ms`` after their commit. Other groups keep their offsets, and so
    does an offset whose commit is being written (``pending``)."""
    unsubscribed_only: set[str] | None = None
    if group.protocol_type is not None and group.is_state(GroupState.EMPTY):

        def base(o: OffsetAndMetadata) -> int:
            return group.state_timestamp_ms if group.state_timestamp_ms >= 0 else o.commit_timestamp_ms

    elif (group.protocol_type is None and group.is_state(GroupState.EMPTY)) or (
        group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.is_state(GroupState.STABLE)
    ):
        if group.is_state(GroupState.STABLE):
            unsubscribed_only = group.subscribed_topics()
            if unsubscribed_only is None:
                return []

        def base(o: OffsetAndMetadata) -> int:
            return o.commit_timestamp_ms

    else:
        return []
    return [
        tp
        for tp, o in group.offsets.items()
        if tp not in pending
        and (unsubscribed_only is None or tp[0] not in unsubscribed_only)
        and base(o) >= 0
        and now_ms - base(o) >= retention_ms
    ]


def remove_offsets(
    group: GroupMetadata, partition: int, removed: list[TopicPartition], now_ms: int
) -> StoreTombstones | None:
    """Removes ``removed`` from the group's offsets; an Empty group left with no offset is Dead (Kafka's
    ``cleanupGroupMetadata``). The tombstones to write: one per removed offset, and the group's metadata
    when it died (None when there is nothing to write)."""
    for tp in removed:
        group.offsets.pop(tp, None)
    died = False
    if group.is_state(GroupState.EMPTY) and not group.offsets:
        group.transition_to(GroupState.DEAD, now_ms)
        died = True
    elif group.is_state(GroupState.DEAD):
        died = True
    if not removed and not died:
        return None
    return StoreTombstones(group.group_id, partition, list(removed), group_tombstone=died)
