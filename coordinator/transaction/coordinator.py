"""``TransactionCoordinator``: the trio shell around the pure core (``coordinator_core``), one per broker.

The coordinator of transactional id T is the leader of ``__transaction_state`` partition
``partition_for_transactional_id(T, transaction.state.log.num.partitions)``. When this broker becomes the
leader of one of its partitions it replays it (COORDINATOR_LOAD_IN_PROGRESS until done), serves its ids,
and finishes the transactions it finds being ended (PrepareCommit / PrepareAbort: the markers are sent
again); when it stops leading it, it forgets them. Every state change is written through the broker's
``append_records`` with acks=all before it takes effect. Markers go out through the
``TransactionMarkerChannelManager``. A task aborts the transactions open past their timeout every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from coordinator.partition_loader import replay_partition
from coordinator.partition_writer import PartitionWriter
from coordinator.transaction.coordinator_core import (
    AppendTxn,
    Effect,
    Respond,
    SendMarkers,
    TransactionCompleted,
    TransactionCoordinatorCore,
    TxnConfig,
)
from coordinator.transaction.marker_channel import TransactionMarkerChannelManager, TxnMarkerEntry
from coordinator.transaction.txn_log import TransactionLoader, transaction_batch
from protocol import environment
from protocol.common import Clock, TopicPartition
from protocol.errors import Errors
from protocol.txn_records import TRANSACTION_STATE_TOPIC_NAME
from server.journal import Journal

log = logging.getLogger(__name__)

# Creates a topic (name, partitions, replication factor, configs) through the controller; the error it got.
CreateTopic = Callable[[str, int, int, dict[str, str]], Awaitable[Errors]]


@dataclass(frozen=True, slots=True)
class TransactionTopicConfig:
    replication_factor: int = 3  # transaction.state.log.replication.factor
    min_isr: int = 2  # transaction.state.log.min.isr
    load_buffer_size: int = 5 * 1024 * 1024  # transaction.state.log.load.buffer.size
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_interval_ms: int = 10_000
    # How long a state change waits for acks=all (Kafka's transaction.state.log's request timeout).
    append_timeout_ms: int = 5000


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: TxnConfig,
        topic_config: TransactionTopicConfig,
        replica_manager: PartitionWriter,
        marker_channel: TransactionMarkerChannelManager,
        journal: Journal,
        *,
        clock_ms: Clock,
        generate_producer_id: Callable[[], int],
        create_topic: CreateTopic | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.topic_config = topic_config
        self.replica_manager = replica_manager
        self.marker_channel = marker_channel
        self.journal = journal
        self.clock_ms = clock_ms
        self.create_topic = create_topic
        self.core = TransactionCoordinatorCore(config, clock_ms, generate_producer_id)
        self._nursery: trio.Nursery | None = None
        self._creating = False
        self._loading: dict[int, int] = {}
        replica_manager.leadership_listeners.append(self.on_leadership_change)

    # ------------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for tp, partition in list(self.replica_manager.partitions.items()):
                if tp[0] == TRANSACTION_STATE_TOPIC_NAME and partition.is_leader:
                    self._elect(tp[1], partition.leader_epoch)
            task_status.started()
            try:
                while True:
                    await trio.sleep(self.topic_config.abort_timed_out_interval_ms / 1000)
                    self.apply(self.core.abort_timed_out_transactions())
            finally:
                self._nursery = None
                self.core.shutdown()

    # ------------------------------------------------------------------ leadership

    def on_leadership_change(
        self, leaders: list[tuple[TopicPartition, int]], resigned: list[TopicPartition]
    ) -> None:
        for tp in resigned:
            if tp[0] == TRANSACTION_STATE_TOPIC_NAME:
                self._resign(tp[1])
        for tp, epoch in leaders:
            if tp[0] == TRANSACTION_STATE_TOPIC_NAME:
                self._elect(tp[1], epoch)

    def _elect(self, partition: int, leader_epoch: int) -> None:
        if self._nursery is None:
            return
        if (
            self.core.owned_partitions.get(partition) == leader_epoch
            or self._loading.get(partition) == leader_epoch
        ):
            return
        self.core.on_election(partition, leader_epoch)
        self._loading[partition] = leader_epoch
        self._nursery.start_soon(self._load, partition, leader_epoch)

    def _resign(self, partition: int) -> None:
        was_loaded = partition in self.core.owned_partitions or partition in self.core.loading_partitions
        self._loading.pop(partition, None)
        ids = sum(1 for t in self.core.txns if self.core.partition_for(t) == partition)
        self.core.on_resignation(partition)
        if was_loaded:
            self.journal.emit_partition(
                "coordinator_unloaded", (TRANSACTION_STATE_TOPIC_NAME, partition), transactional_ids=ids
            )

    async def _load(self, partition: int, leader_epoch: int) -> None:
        """Kafka's ``loadTransactionsForTxnTopicPartition``: replay the partition to its log end."""
        tp = (TRANSACTION_STATE_TOPIC_NAME, partition)
        started = environment.monotonic()
        loader = TransactionLoader()
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
        self.apply(self.core.on_loaded(partition, leader_epoch, loader.transactions))
        took_ms = int((environment.monotonic() - started) * 1000)
        log.info(
            "broker %d: loaded %d transactional ids from %s-%d (coordinator epoch %d) in %d ms",
            self.broker_id,
            len(loader.transactions),
            *tp,
            leader_epoch,
            took_ms,
        )
        self.journal.emit_partition(
            "coordinator_loaded",
            tp,
            leader_epoch=leader_epoch,
            transactional_ids=len(loader.transactions),
            records=loader.records,
            load_time_ms=took_ms,
        )

    # ------------------------------------------------------------------ the transaction state topic

    def transaction_topic_partition(self, transactional_id: str) -> TopicPartition:
        return (TRANSACTION_STATE_TOPIC_NAME, self.core.partition_for(transactional_id))

    def maybe_create_transaction_topic(self) -> None:
        """Kafka creates ``__transaction_state`` on the first FindCoordinator of a transactional id: asked of
        the controller once at a time, its replication factor capped at the live brokers."""
        if self._creating or self.create_topic is None or self._nursery is None:
            return
        self._creating = True
        self._nursery.start_soon(self._create_transaction_topic)

    async def _create_transaction_topic(self) -> None:
        assert self.create_topic is not None
        live = len(self.replica_manager.metadata_cache.brokers)
        rf = max(1, min(self.topic_config.replication_factor, live))
        partitions = self.core.config.num_partitions
        # Kafka's: compacted, 100 MiB segments (transaction.state.log.segment.bytes), min.insync.replicas.
        configs = {
            "min.insync.replicas": str(min(self.topic_config.min_isr, rf)),
            "cleanup.policy": "compact",
            "segment.bytes": "104857600",
        }
        try:
            error = await self.create_topic(TRANSACTION_STATE_TOPIC_NAME, partitions, rf, configs)
            if error not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                log.warning(
                    "broker %d: creating %s failed: %s",
                    self.broker_id,
                    TRANSACTION_STATE_TOPIC_NAME,
                    error.name,
                )
            else:
                log.info(
                    "broker %d: %s created (%d partitions, replication factor %d)",
                    self.broker_id,
                    TRANSACTION_STATE_TOPIC_NAME,
                    partitions,
                    rf,
                )
        finally:
            self._creating = False

    # ------------------------------------------------------------------ effects

    def apply(self, effects: list[Effect]) -> None:
        """Carries out what the core asked (the API handlers call it with what a request returned)."""
        for effect in effects:
            if isinstance(effect, Respond):
                answer: Any = effect.token
                answer(effect.result)
            elif isinstance(effect, AppendTxn):
                if effect.delay_ms > 0 and self._nursery is not None:
                    self._nursery.start_soon(self._append_later, effect)
                else:
                    self._append(effect)
            elif isinstance(effect, SendMarkers):
                if self._nursery is not None:
                    self._nursery.start_soon(self._send_markers, effect)
            elif isinstance(effect, TransactionCompleted):
                self._journal_completed(effect)

    async def _append_later(self, append: AppendTxn) -> None:
        await trio.sleep(append.delay_ms / 1000)
        self._append(append)

    def _append(self, append: AppendTxn) -> None:
        tp = (TRANSACTION_STATE_TOPIC_NAME, append.partition)
        batch = transaction_batch(append.transactional_id, append.transit, self.clock_ms())

        def respond(statuses: dict[TopicPartition, Any]) -> None:
            error = statuses[tp].error
            if error != Errors.NONE:
                log.info(
                    "broker %d: writing %s of %s failed: %s",
                    self.broker_id,
                    append.transit.state.value,
                    append.transactional_id,
                    error.name,
                )
            self.apply(self.core.on_appended(append, error))

        self.replica_manager.append_records(
            self.topic_config.append_timeout_ms, -1, {tp: batch}, respond, internal_topics_allowed=True
        )

    async def _send_markers(self, send: SendMarkers) -> None:
        partition = self.core.partition_for(send.transactional_id)
        entry = TxnMarkerEntry(
            send.producer_id,
            send.producer_epoch,
            send.commit,
            send.coordinator_epoch,
            tuple(sorted(send.partitions)),
        )

        def still_current() -> bool:
            return self.core.owned_partitions.get(partition) == send.coordinator_epoch

        if await self.marker_channel.write_markers(send.transactional_id, entry, still_current):
            self.apply(self.core.on_markers_written(send))

    def _journal_completed(self, done: TransactionCompleted) -> None:
        self.journal.emit_partition(
            "transaction_completed",
            (TRANSACTION_STATE_TOPIC_NAME, done.partition),
            transactional_id=done.transactional_id,
            producer_id=done.producer_id,
            producer_epoch=done.producer_epoch,
            state=done.state.value,
            partitions=[{"topic": t, "partition": p} for t, p in sorted(done.partitions)],
        )
