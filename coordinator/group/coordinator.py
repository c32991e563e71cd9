"""``GroupCoordinator``: the trio shell around the pure core (``coordinator_core``), one per broker.

The coordinator of group G is the leader of ``__consumer_offsets`` partition
``partition_for_group(G, offsets.topic.num.partitions)``. When this broker becomes the leader of one of its
partitions (the replica manager tells it, Kafka's ``onLeadershipChange``) it replays the partition from its
log start to its log end (COORDINATOR_LOAD_IN_PROGRESS until done) and serves its groups; when it stops
leading it, it unloads them. Group metadata and offset commits are written through the ordinary
``ReplicaManager.append_records`` path with acks=all, so an OffsetCommit is answered once its record is
committed (the high watermark passed it) and rides on the same replication as any topic.

A request's answer is a callable (the API handler's), used as the core's opaque token. Timers: one task
sleeps until the core's next deadline (or until a request may have moved it) and calls ``poll``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import trio

from coordinator.group.coordinator_core import (
    Effect,
    GroupConfig,
    GroupCoordinatorCore,
    GroupRebalanced,
    RebalanceStarted,
    Respond,
    StoreGroup,
    StoreOffsets,
    StoreTombstones,
    StoreTxnOffsets,
    TxnOffsetsCommitted,
)
from coordinator.group.group_metadata import GroupState
from coordinator.group.offsets_log import (
    GroupLoader,
    group_metadata_batch,
    offset_commit_batch,
    tombstones_batch,
)
from coordinator.partition_loader import replay_partition
from coordinator.partition_writer import PartitionWriter
from protocol import environment
from protocol.common import Clock, TopicPartition
from protocol.consumer_protocol import decode_assignment
from protocol.errors import Errors
from protocol.group_records import GROUP_METADATA_TOPIC_NAME
from protocol.records import read_header
from server.journal import Journal
from storage.producer_state_entry import AppendOrigin

log = logging.getLogger(__name__)

# Creates a topic (name, partitions, replication factor) through the controller; the error it got.
CreateTopic = Callable[[str, int, int], Awaitable[Errors]]


@dataclass(frozen=True, slots=True)
class OffsetsTopicConfig:
    num_partitions: int = 50  # offsets.topic.num.partitions
    replication_factor: int = 3  # offsets.topic.replication.factor
    commit_timeout_ms: int = 5000  # offsets.commit.timeout.ms
    load_buffer_size: int = 5 * 1024 * 1024  # offsets.load.buffer.size


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        group_config: GroupConfig,
        topic_config: OffsetsTopicConfig,
        replica_manager: PartitionWriter,
        journal: Journal,
        *,
        clock_ms: Clock,
        create_topic: CreateTopic | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.topic_config = topic_config
        self.replica_manager = replica_manager
        self.journal = journal
        self.clock_ms = clock_ms
        self.create_topic = create_topic
        self.core = GroupCoordinatorCore(group_config, clock_ms)
        self._nursery: trio.Nursery | None = None
        self._wake = trio.Event()
        self._creating = False
        # The leader epoch each partition is being loaded for (a newer election supersedes a load).
        self._loading: dict[int, int] = {}
        # The last generation of each group journaled as `group_generation`.
        self._journaled_generation: dict[str, int] = {}
        replica_manager.leadership_listeners.append(self.on_leadership_change)

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            # Partitions this broker already leads (initial.leader.partitions, or leaderships taken before
            # this task started) are loaded now.
            for tp, partition in list(self.replica_manager.partitions.items()):
                if tp[0] == GROUP_METADATA_TOPIC_NAME and partition.is_leader:
                    self._elect(tp[1], partition.leader_epoch)
            task_status.started()
            try:
                await self._timers()
            finally:
                self._nursery = None
                self._apply(self.core.shutdown())

    async def _timers(self) -> None:
        while True:
            deadline = self.core.next_deadline_ms()
            wait_s = math.inf if deadline is None else max(0.0, (deadline - self.clock_ms()) / 1000)
            with trio.move_on_after(wait_s):
                await self._wake.wait()
            self._wake = trio.Event()
            self._apply(self.core.poll())

    def _changed(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ leadership

    def on_leadership_change(
        self, leaders: list[tuple[TopicPartition, int]], resigned: list[TopicPartition]
    ) -> None:
        for tp in resigned:
            if tp[0] == GROUP_METADATA_TOPIC_NAME:
                self._resign(tp[1])
        for tp, epoch in leaders:
            if tp[0] == GROUP_METADATA_TOPIC_NAME:
                self._elect(tp[1], epoch)

    def _elect(self, partition: int, leader_epoch: int) -> None:
        if self._nursery is None:
            return  # not running yet: run() loads what this broker leads when it starts
        self.core.on_election(partition)
        self._loading[partition] = leader_epoch
        self._nursery.start_soon(self._load, partition, leader_epoch)

    def _resign(self, partition: int) -> None:
        was_loaded = partition in self.core.owned_partitions or partition in self.core.loading_partitions
        self._loading.pop(partition, None)
        groups = [g for g in self.core.groups if self.core.partition_for(g) == partition]
        self._apply(self.core.on_resignation(partition))
        if was_loaded:
            log.info(
                "broker %d: unloaded %d groups of %s-%d",
                self.broker_id,
                len(groups),
                GROUP_METADATA_TOPIC_NAME,
                partition,
            )
            self.journal.emit_partition(
                "coordinator_unloaded", (GROUP_METADATA_TOPIC_NAME, partition), groups=len(groups)
            )
        self._changed()

    async def _load(self, partition: int, leader_epoch: int) -> None:
        """Kafka's ``loadGroupsAndOffsets``: replay the partition from its log start to its log end."""
        tp = (GROUP_METADATA_TOPIC_NAME, partition)
        started = environment.monotonic()
        loader = GroupLoader()
        current = await replay_partition(
            self.replica_manager,
            tp,
            self.topic_config.load_buffer_size,
            loader.add_batches,
            lambda: self._loading.get(partition) == leader_epoch,
            self.broker_id,
        )
        if not current:
            return
        del self._loading[partition]
        loaded = loader.result()
        self._apply(self.core.on_loaded(partition, loaded))
        took_ms = int((environment.monotonic() - started) * 1000)
        log.info(
            "broker %d: loaded %d groups from %s-%d (leader epoch %d, %d records) in %d ms",
            self.broker_id,
            len(loaded),
            tp[0],
            tp[1],
            leader_epoch,
            loader.records,
            took_ms,
        )
        self.journal.emit_partition(
            "coordinator_loaded",
            tp,
            leader_epoch=leader_epoch,
            groups=len(loaded),
            offsets=sum(len(g.offsets) for g in loaded.values()),
            records=loader.records,
            load_time_ms=took_ms,
        )
        self._changed()

    # ------------------------------------------------------------------ the offsets topic

    def offsets_topic_partition(self, group_id: str) -> TopicPartition:
        return (GROUP_METADATA_TOPIC_NAME, self.core.partition_for(group_id))

    def maybe_create_offsets_topic(self) -> None:
        """Kafka creates ``__consumer_offsets`` on the first FindCoordinator: ask the controller, once at a
        time, with ``offsets.topic.replication.factor`` capped at the live brokers (docs/clients.md)."""
        if self._creating or self.create_topic is None or self._nursery is None:
            return
        self._creating = True
        self._nursery.start_soon(self._create_offsets_topic)

    async def _create_offsets_topic(self) -> None:
        assert self.create_topic is not None
        live = len(self.replica_manager.metadata_cache.brokers)
        rf = max(1, min(self.topic_config.replication_factor, live))
        try:
            error = await self.create_topic(GROUP_METADATA_TOPIC_NAME, self.topic_config.num_partitions, rf)
            if error not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                log.warning(
                    "broker %d: creating %s failed: %s", self.broker_id, GROUP_METADATA_TOPIC_NAME, error.name
                )
            else:
                log.info(
                    "broker %d: %s created (%d partitions, replication factor %d)",
                    self.broker_id,
                    GROUP_METADATA_TOPIC_NAME,
                    self.topic_config.num_partitions,
                    rf,
                )
        finally:
            self._creating = False

    # ------------------------------------------------------------------ transactions

    def on_txn_marker(self, producer_id: int, partition: int, commit: bool) -> None:
        """A transaction marker of ``producer_id`` is written to ``__consumer_offsets`` partition
        ``partition`` here: TxnOffsetCommit's offsets held for it become committed (or are dropped). Called
        from the marker's completion, inside the produce purgatory (which allows a new watch then)."""
        self.apply(self.core.complete_txn_offsets(producer_id, partition, commit))

    # ------------------------------------------------------------------ effects

    def apply(self, effects: list[Effect]) -> None:
        """Carries out what the core asked (the API handlers call it with what a request returned)."""
        self._apply(effects)
        self._changed()

    def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                answer: Any = effect.token
                answer(effect.result)
            elif isinstance(effect, StoreGroup):
                self._store_group(effect)
            elif isinstance(effect, StoreOffsets):
                self._store_offsets(effect)
            elif isinstance(effect, StoreTombstones):
                self._store_tombstones(effect)
            elif isinstance(effect, GroupRebalanced):
                self._journal_rebalance(effect)
            elif isinstance(effect, StoreTxnOffsets):
                self._store_txn_offsets(effect)
            elif isinstance(effect, TxnOffsetsCommitted):
                self._journal_txn_commit(effect)
            elif isinstance(effect, RebalanceStarted):
                self._journal_rebalance_started(effect)

    def _append(
        self,
        partition: int,
        batch: bytes,
        done: Callable[[Errors, int], None],
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> None:
        """Appends ``batch`` as the leader with acks=all; ``done(error, base_offset)`` once committed."""
        tp = (GROUP_METADATA_TOPIC_NAME, partition)

        def respond(statuses: dict[TopicPartition, Any]) -> None:
            status = statuses[tp]
            done(status.error, status.base_offset)

        self.replica_manager.append_records(
            self.topic_config.commit_timeout_ms,
            -1,
            {tp: batch},
            respond,
            internal_topics_allowed=True,
            origin=origin,
        )

    def _store_txn_offsets(self, store: StoreTxnOffsets) -> None:
        """TxnOffsetCommit's offsets as a transactional batch of the producer (Kafka's ``storeOffsets``
        with a producer id): written as the coordinator (epochs checked, no sequence), it opens the
        producer's transaction on the partition, which its marker ends."""
        batch = offset_commit_batch(
            store.group_id,
            store.offsets,
            self.clock_ms(),
            producer_id=store.producer_id,
            producer_epoch=store.producer_epoch,
        )

        def done(error: Errors, base_offset: int) -> None:
            self.apply(self.core.on_txn_offsets_stored(store, error, (batch, base_offset)))

        self._append(store.partition, batch, done, AppendOrigin.COORDINATOR)

    def _journal_txn_commit(self, committed: TxnOffsetsCommitted) -> None:
        """``offsets_committed`` for a transaction's offsets once its commit marker is written: the batch
        they were written in, as for an OffsetCommit."""
        store = committed.store
        batch, base_offset = cast(tuple[bytes, int], committed.written)
        self._journal_commit(
            StoreOffsets(
                store.token,
                store.group_id,
                store.partition,
                store.offsets,
                generation_id=store.generation_id,
                member_id=store.member_id,
            ),
            batch,
            base_offset,
        )

    def _store_group(self, store: StoreGroup) -> None:
        batch = group_metadata_batch(store.group_id, store.value, self.clock_ms())

        def done(error: Errors, _base_offset: int) -> None:
            if error != Errors.NONE:
                log.warning(
                    "broker %d: writing the metadata of group %s (generation %d) failed: %s",
                    self.broker_id,
                    store.group_id,
                    store.generation_id,
                    error.name,
                )
            self.apply(self.core.on_group_stored(store, error))
            if error == Errors.NONE:
                self._journal_generation(store)

        self._append(store.partition, batch, done)

    def _store_offsets(self, store: StoreOffsets) -> None:
        batch = offset_commit_batch(store.group_id, store.offsets, self.clock_ms())

        def done(error: Errors, base_offset: int) -> None:
            if error == Errors.NONE:
                self._journal_commit(store, batch, base_offset)
            self.apply(self.core.on_offsets_stored(store, error))

        self._append(store.partition, batch, done)

    def _store_tombstones(self, store: StoreTombstones) -> None:
        batch = tombstones_batch(store.group_id, store.offsets, store.group_tombstone, self.clock_ms())

        def done(error: Errors, _base_offset: int) -> None:
            if error != Errors.NONE:
                log.warning(
                    "broker %d: writing the tombstones of group %s failed: %s",
                    self.broker_id,
                    store.group_id,
                    error.name,
                )
            elif store.group_tombstone:
                self.journal.emit_partition(
                    "group_deleted",
                    (GROUP_METADATA_TOPIC_NAME, store.partition),
                    group_id=store.group_id,
                    offsets=len(store.offsets),
                )

        self._append(store.partition, batch, done)

    def _journal_commit(self, store: StoreOffsets, batch: bytes, base_offset: int) -> None:
        """``offsets_committed``: an OffsetCommit acknowledged (its batch committed in __consumer_offsets),
        with the batch's place and CRC, and each committed offset with the high watermark of its partition
        here: ``high_watermark`` when this broker leads it (the partition's HW; -1 otherwise) and
        ``local_high_watermark``, this broker's replica's HW whatever its role (a follower's HW is never
        above the leader's, so an offset at or below it was at or below the partition's; -1 when this
        broker holds no replica), for the report's ``committed_offsets_below_hw``."""
        header = read_header(batch)
        offsets: list[dict[str, Any]] = []
        for (topic, partition), o in store.offsets.items():
            hosted = self.replica_manager.partitions.get((topic, partition))
            local_hw = hosted.high_watermark if hosted is not None else -1
            hw = local_hw if hosted is not None and hosted.is_leader else -1
            offsets.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "offset": o.offset,
                    "high_watermark": hw,
                    "local_high_watermark": local_hw,
                }
            )
        self.journal.emit_each(
            "offset_commit",
            [
                {
                    "group": store.group_id,
                    "generation": store.generation_id,
                    "member_id": store.member_id,
                    "topic": topic,
                    "partition": partition,
                    "offset": o.offset,
                }
                for (topic, partition), o in store.offsets.items()
            ],
        )
        self.journal.emit_partition(
            "offsets_committed",
            (GROUP_METADATA_TOPIC_NAME, store.partition),
            group_id=store.group_id,
            base_offset=base_offset,
            last_offset=base_offset + header.last_offset_delta,
            crc=header.crc,
            offsets=offsets,
        )

    def _journal_generation(self, store: StoreGroup) -> None:
        """``group_generation``: a generation whose assignment took effect (the leader's SyncGroup stored;
        the group Stable), with each member's client and assigned partitions (docs/storage.md)."""
        group = self.core.groups.get(store.group_id)
        if (
            group is None
            or group.generation_id != store.generation_id
            or not group.is_state(GroupState.STABLE)
        ):
            return
        if self._journaled_generation.get(store.group_id) == store.generation_id:
            return
        self._journaled_generation[store.group_id] = store.generation_id
        members = [
            {
                "member_id": member.member_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "assignment": decode_assignment(member.assignment) or {},
            }
            for member in group.members.values()
        ]
        self.journal.emit_partition(
            "group_generation",
            (GROUP_METADATA_TOPIC_NAME, store.partition),
            group=store.group_id,
            generation=store.generation_id,
            protocol=group.protocol_name,
            members=members,
        )

    def _journal_rebalance_started(self, event: RebalanceStarted) -> None:
        """``rebalance_started``: the group left ``state`` (generation ``generation``) for PreparingRebalance;
        the report's rebalance window runs from here to the group's next ``group_generation``."""
        log.info(
            "broker %d: preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
            self.broker_id,
            event.group_id,
            event.state,
            event.generation_id,
            event.reason,
        )
        self.journal.emit_partition(
            "rebalance_started",
            (GROUP_METADATA_TOPIC_NAME, event.partition),
            group=event.group_id,
            generation=event.generation_id,
            state=event.state,
            cause=event.cause,
            reason=event.reason,
        )

    def _journal_rebalance(self, event: GroupRebalanced) -> None:
        log.info(
            "broker %d: group %s generation %d (%s): %d members, leader %s, protocol %s",
            self.broker_id,
            event.group_id,
            event.generation_id,
            event.state,
            len(event.members),
            event.leader_id,
            event.protocol_name,
        )
        self.journal.emit_partition(
            "group_rebalanced",
            (GROUP_METADATA_TOPIC_NAME, event.partition),
            group_id=event.group_id,
            generation_id=event.generation_id,
            state=event.state,
            protocol_type=event.protocol_type,
            protocol_name=event.protocol_name,
            leader_id=event.leader_id,
            members=event.members,
        )
