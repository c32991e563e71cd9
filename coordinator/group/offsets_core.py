"""The committed offsets of the groups (Kafka's ``GroupCoordinator.handleCommitOffsets`` /
``handleFetchOffsets`` / ``handleDeleteGroups`` and ``GroupMetadataManager.cleanupGroupMetadata``): commits
become :class:`StoreOffsets` writes and reach the cache once committed; DeleteGroups and the periodic expiry
(``offsets.retention.minutes``, decided in ``group_cleanup``) return tombstones to write. Pure, as the rest
of the core (``coordinator_core`` builds on this class)."""

from __future__ import annotations

import dataclasses

from coordinator.group.core_base import UNKNOWN_MEMBER_ID, CoreBase, GroupConfig, convert_store_error
from coordinator.group.effects import (
    CommitResult,
    DeleteResult,
    Effect,
    Respond,
    StoreOffsets,
    StoreTxnOffsets,
    TxnOffsetsCommitted,
)
from coordinator.group.group_cleanup import delete_error, expired_offsets, remove_offsets
from coordinator.group.group_metadata import GroupMetadata, GroupState, OffsetAndMetadata
from coordinator.group.static_membership import is_fenced
from protocol.common import Clock, TopicPartition
from protocol.errors import Errors


class OffsetsCore(CoreBase):
    """Committed offsets, group deletion and offset expiry."""

    def __init__(self, config: GroupConfig, clock: Clock) -> None:
        super().__init__(config, clock)
        # Partitions of each group whose commit is being written (never expired meanwhile), with how many
        # writes are in flight for each.
        self._pending_commits: dict[str, dict[TopicPartition, int]] = {}
        self._next_cleanup_ms = clock() + config.offsets_retention_check_interval_ms
        # TxnOffsetCommit's offsets, written as transactional records and pending until their transaction
        # ends: producer id -> group -> offsets; and the writes they came in (for the journal).
        self._txn_offsets: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self._txn_writes: dict[int, dict[str, list[tuple[StoreTxnOffsets, object]]]] = {}

    def commit_offsets(
        self,
        token: object,
        group_id: str,
        member_id: str,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        group_instance_id: str | None = None,
    ) -> list[Effect]:
        def everywhere(error: Errors) -> list[Effect]:
            return [Respond(token, CommitResult(dict.fromkeys(offsets, error)))]

        error = self.validate_group_status(group_id, empty_allowed=True)
        if error is not None:
            return everywhere(error)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return everywhere(Errors.ILLEGAL_GENERATION)
            group = GroupMetadata(group_id, state_timestamp_ms=self.clock())
            self.groups[group_id] = group
        # Kafka's validateOffsetCommit.
        if group.is_state(GroupState.DEAD):
            return everywhere(Errors.COORDINATOR_NOT_AVAILABLE)
        if is_fenced(group, group_instance_id, member_id):
            return everywhere(Errors.FENCED_INSTANCE_ID)
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            pass  # a simple (standalone) consumer's commit
        elif generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            if not group.has(member_id):
                return everywhere(Errors.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                return everywhere(Errors.ILLEGAL_GENERATION)
        elif not group.is_state(GroupState.EMPTY):
            return everywhere(Errors.UNKNOWN_MEMBER_ID)
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            return everywhere(Errors.REBALANCE_IN_PROGRESS)
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            self._heartbeat(group.get(member_id))
        too_large = {
            tp for tp, o in offsets.items() if len(o.metadata.encode()) > self.config.max_metadata_size
        }
        to_store = {tp: o for tp, o in offsets.items() if tp not in too_large}
        if not to_store:
            return [Respond(token, CommitResult(dict.fromkeys(offsets, Errors.OFFSET_METADATA_TOO_LARGE)))]
        refused = dict.fromkeys(too_large, Errors.OFFSET_METADATA_TOO_LARGE)
        now = self.clock()
        to_store = {
            tp: o if o.commit_timestamp_ms >= 0 else dataclasses.replace(o, commit_timestamp_ms=now)
            for tp, o in to_store.items()
        }
        pending = self._pending_commits.setdefault(group_id, {})
        for tp in to_store:
            pending[tp] = pending.get(tp, 0) + 1
        return [
            StoreOffsets(
                token, group_id, self.partition_for(group_id), to_store, refused, generation_id, member_id
            )
        ]

    def on_offsets_stored(self, store: StoreOffsets, error: Errors) -> list[Effect]:
        """The outcome of a :class:`StoreOffsets`: the cache takes the offsets once they are committed."""
        group_id, offsets, token = store.group_id, store.offsets, store.token
        pending = self._pending_commits.get(group_id, {})
        for tp in offsets:
            if pending.get(tp, 0) > 1:
                pending[tp] -= 1
            else:
                pending.pop(tp, None)
        if not pending:
            self._pending_commits.pop(group_id, None)
        group = self.groups.get(group_id)
        if error == Errors.NONE and group is not None and not group.is_state(GroupState.DEAD):
            group.offsets.update(offsets)
            self.offset_commits += len(offsets)
        final = Errors.NONE if error == Errors.NONE else convert_store_error(error)
        if error == Errors.NONE and (group is None or group.is_state(GroupState.DEAD)):
            final = Errors.NOT_COORDINATOR
        return [Respond(token, CommitResult({**dict.fromkeys(offsets, final), **store.refused}))]

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> tuple[Errors, dict[TopicPartition, OffsetAndMetadata | None]]:
        """The committed offsets of ``partitions`` (None: all the group has); None for one never committed
        (answered offset -1)."""
        error = self.validate_group_status(group_id, empty_allowed=True)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        known = {} if group is None or group.is_state(GroupState.DEAD) else group.offsets
        if partitions is None:
            return Errors.NONE, dict(known)
        return Errors.NONE, {tp: known.get(tp) for tp in partitions}

    # ------------------------------------------------------------------ DeleteGroups, offset expiry

    def delete_groups(self, token: object, group_ids: list[str]) -> list[Effect]:
        """Kafka's ``handleDeleteGroups``: each Empty group becomes Dead, leaves the cache with its offsets,
        and its tombstones are written; the answer does not wait for them (as Kafka's)."""
        errors: dict[str, Errors] = {}
        effects: list[Effect] = []
        now = self.clock()
        for group_id in dict.fromkeys(group_ids):
            error = self.validate_group_status(group_id)
            if error is None:
                group = self.groups.get(group_id)
                error = delete_error(group)
                if error is None and group is not None:
                    group.transition_to(GroupState.DEAD, now)
                    del self.groups[group_id]
                    store = remove_offsets(group, self.partition_for(group_id), list(group.offsets), now)
                    if store is not None:
                        effects.append(store)
            errors[group_id] = error if error is not None else Errors.NONE
        return [*effects, Respond(token, DeleteResult(errors))]

    def expire_offsets(self) -> list[Effect]:
        """Kafka's periodic ``cleanupGroupMetadata``: removes the expired offsets of every group served here
        (``offsets.retention.minutes``); an Empty group left with none is deleted."""
        now = self.clock()
        effects: list[Effect] = []
        retention = self.config.offsets_retention_ms
        for group_id, group in list(self.groups.items()):
            if self.partition_for(group_id) not in self.owned_partitions:
                continue
            pending = set(self._pending_commits.get(group_id, {}))
            expired = expired_offsets(group, now, retention, pending)
            store = remove_offsets(group, self.partition_for(group_id), expired, now)
            self.offset_expirations += len(expired)
            if group.is_state(GroupState.DEAD):
                del self.groups[group_id]
            if store is not None:
                effects.append(store)
        return effects

    def next_cleanup_ms(self) -> int | None:
        """When offsets are next looked at for expiry (None: no group to look at)."""
        return self._next_cleanup_ms if self.groups else None

    def maybe_expire_offsets(self, now_ms: int) -> list[Effect]:
        """:meth:`expire_offsets` when ``offsets.retention.check.interval.ms`` has passed since the last."""
        if now_ms < self._next_cleanup_ms:
            return []
        self._next_cleanup_ms = now_ms + self.config.offsets_retention_check_interval_ms
        return self.expire_offsets()

    # ------------------------------------------------------------------ transactional offsets

    def txn_commit_offsets(
        self,
        token: object,
        group_id: str,
        producer_id: int,
        member_id: str,
        generation_id: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        group_instance_id: str | None = None,
        producer_epoch: int = 0,
    ) -> list[Effect]:
        """Kafka's ``handleTxnCommitOffsets``: the offsets are written to the group's partition as records
        of the producer's transaction (acks=all) and held for it; they become committed offsets when its
        commit marker reaches the partition (:meth:`complete_txn_offsets`), and an abort drops them, as a
        load of the partition would decide from the markers (docs/transactions.md)."""

        def everywhere(error: Errors) -> list[Effect]:
            return [Respond(token, CommitResult(dict.fromkeys(offsets, error)))]

        error = self.validate_group_status(group_id)
        if error is not None:
            return everywhere(error)
        group = self.groups.get(group_id)
        if group is None:
            group = GroupMetadata(group_id, state_timestamp_ms=self.clock())
            self.groups[group_id] = group
        if group.is_state(GroupState.DEAD):
            return everywhere(Errors.COORDINATOR_NOT_AVAILABLE)
        if is_fenced(group, group_instance_id, member_id):
            return everywhere(Errors.FENCED_INSTANCE_ID)
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID:
            if not group.has(member_id):
                return everywhere(Errors.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                return everywhere(Errors.ILLEGAL_GENERATION)
        now = self.clock()
        refused: dict[TopicPartition, Errors] = {}
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, o in offsets.items():
            if len(o.metadata.encode()) > self.config.max_metadata_size:
                refused[tp] = Errors.OFFSET_METADATA_TOO_LARGE
            else:
                valid[tp] = (
                    o if o.commit_timestamp_ms >= 0 else dataclasses.replace(o, commit_timestamp_ms=now)
                )
        if not valid:
            return [Respond(token, CommitResult(refused))]
        pending = self._pending_commits.setdefault(group_id, {})
        for tp in valid:
            pending[tp] = pending.get(tp, 0) + 1
        return [
            StoreTxnOffsets(
                token,
                group_id,
                self.partition_for(group_id),
                valid,
                producer_id,
                producer_epoch,
                refused,
                generation_id,
                member_id,
            )
        ]

    def on_txn_offsets_stored(
        self, store: StoreTxnOffsets, error: Errors, written: object = None
    ) -> list[Effect]:
        """The outcome of a :class:`StoreTxnOffsets`: once written the offsets are held for the producer's
        transaction and the TxnOffsetCommit is answered."""
        pending = self._pending_commits.get(store.group_id, {})
        for tp in store.offsets:
            if pending.get(tp, 0) > 1:
                pending[tp] -= 1
            else:
                pending.pop(tp, None)
        if not pending:
            self._pending_commits.pop(store.group_id, None)
        group = self.groups.get(store.group_id)
        final = Errors.NONE if error == Errors.NONE else convert_store_error(error)
        if error == Errors.NONE and (group is None or group.is_state(GroupState.DEAD)):
            final = Errors.NOT_COORDINATOR
        if final == Errors.NONE:
            self._txn_offsets.setdefault(store.producer_id, {}).setdefault(store.group_id, {}).update(
                store.offsets
            )
            writes = self._txn_writes.setdefault(store.producer_id, {}).setdefault(store.group_id, [])
            writes.append((store, written))
        return [Respond(store.token, CommitResult({**dict.fromkeys(store.offsets, final), **store.refused}))]

    def complete_txn_offsets(self, producer_id: int, partition: int, commit: bool) -> list[Effect]:
        """A marker of ``producer_id`` written to ``__consumer_offsets`` partition ``partition``: its held
        offsets of the groups of that partition become committed offsets (commit; their records are in the
        log already) or are dropped (abort)."""
        held = self._txn_offsets.get(producer_id)
        writes = self._txn_writes.get(producer_id, {})
        if not held:
            return []
        effects: list[Effect] = []
        for group_id in [g for g in held if self.partition_for(g) == partition]:
            offsets = held.pop(group_id)
            group_writes = writes.pop(group_id, [])
            group = self.groups.get(group_id)
            if not commit or not offsets or group is None or group.is_state(GroupState.DEAD):
                continue
            group.offsets.update(offsets)
            self.offset_commits += len(offsets)
            effects += [TxnOffsetsCommitted(store, written) for store, written in group_writes]
        if not held:
            del self._txn_offsets[producer_id]
            self._txn_writes.pop(producer_id, None)
        return effects

    def restore_txn_offsets(
        self, group_id: str, pending: dict[int, dict[TopicPartition, OffsetAndMetadata]]
    ) -> None:
        """A load found these transactional offsets with no marker yet: held for their transactions."""
        for producer_id, offsets in pending.items():
            self._txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)

    def unstable_offsets(self, group_id: str) -> set[TopicPartition]:
        """Kafka's ``hasPendingOffsetCommitsForTopicPartition``: the partitions of the group with offsets held
        for an open transaction or being written (OffsetFetch with ``require_stable`` answers them
        UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        held = {tp for groups in self._txn_offsets.values() for tp in groups.get(group_id, {})}
        return held | set(self._pending_commits.get(group_id, {}))


def _no_answer(_result: object) -> None:
    """The token of a write no request waits for (a transaction's offsets made committed)."""
