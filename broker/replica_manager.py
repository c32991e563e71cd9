"""Kafka's ``ReplicaManager``: the partitions this broker hosts and everything done to them.

* the controller's word: LEADER_AND_ISR (``become_leader_or_follower``), STOP_REPLICA, UPDATE_METADATA;
* the leader's data path: produce (``append_records``), fetch (``fetch_messages``), LIST_OFFSETS and
  OFFSET_FOR_LEADER_EPOCH, the HW and the ISR (shrunk by the isr-expiration task, expanded by follower
  fetches, committed by the controller in managed mode through ALTER_PARTITION);
* the follower side the replica fetchers call (``fetcher.interface.FollowerReplicaManager``).

Every change of a replica's state is reported to one ``ReplicaStateListener``, which journals it.

Synchronous: KafkaApis calls it on the broker's one trio thread. Responses that wait (acks=-1, long-poll
fetches) go through the purgatories, whose reaper tasks the server runs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from broker.compacted_acks import record_digests
from broker.delayed import DelayedOperationPurgatory
from broker.delayed_ops import (
    DelayedFetch,
    DelayedProduce,
    FetchParams,
    FetchPartitionStatus,
    ProducePartitionStatus,
)
from broker.fetch_session_cache import CachedPartition, FetchSession
from broker.follower_view import FollowerPartitionView
from broker.metadata_cache import MetadataCache, PartitionMetadata
from broker.partition import IsrChange, LeaderAndIsrState, LogReadResult, Partition, TimestampAndOffset
from broker.replica_state_listener import ReplicaStateListener
from broker.topic_configs import TopicConfigFetcher, broker_log_config, log_config_for
from coordinator.partition_writer import LeadershipListener
from fetcher.interface import (
    FetcherManagerLike,
    FollowerPartition,
    NoFetcherManager,
)
from fetcher.truncation import (
    become_follower_truncation_offset,
    initial_fetch_offset,
    truncation_reason,
)
from protocol import environment
from protocol import messages as m
from protocol.api_keys import DEBUGGING_REPLICA_ID, READ_COMMITTED, READ_UNCOMMITTED
from protocol.common import LEADER_DURING_DELETE, BrokerEndpoint, TopicPartition
from protocol.compression import CompressionType
from protocol.errors import CorruptRecordError, Errors, InvalidRecordError, KafkaError, KafkaStorageError
from protocol.records import iter_batches
from protocol.replication import InitialFetchState, TruncationMode
from server.journal import AckJournal
from storage.checkpoint import already_durable, group_commit, write_all_atomically
from storage.log import LogConfig
from storage.log_manager import LogManager
from storage.log_validator import TimestampType
from storage.producer_state_entry import AppendOrigin
from storage.verification_guard import SENTINEL, VerificationGuard

log = logging.getLogger(__name__)

# New partitions' logs created, and stopped partitions' logs deleted, per event-loop step while a
# LEADER_AND_ISR or a STOP_REPLICA is applied: each is a few files made or removed, 20 to 300 ms on a busy
# disk (the fuzzer saw 0.4 to 1.2 s holds with four per step).
PARTITIONS_CREATED_PER_STEP = 1
PARTITIONS_STOPPED_PER_STEP = 2

FetchSessionPartitions = FetchSession
AlterCallback = Callable[[TopicPartition, Errors, int, list[int], int], None]
AlterSubmit = Callable[[TopicPartition, int, list[int], int, AlterCallback], bool]


# Topics only the brokers write (Kafka's ``Topic.isInternal``).
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})


def topic_timestamp_type(value: str | None) -> TimestampType:
    """A topic's ``message.timestamp.type``: CreateTime (the default) or LogAppendTime."""
    try:
        return TimestampType.from_config(value)
    except ValueError as exc:
        log.warning("%s: the topic keeps CreateTime", exc)
        return TimestampType.CREATE_TIME


def topic_compression(value: str | None) -> CompressionType | None:
    """The codec a topic's ``compression.type`` asks for, None for ``producer`` (Kafka's default: keep the
    producer's codec). ``uncompressed`` is ``none``."""
    if value is None or value.strip().lower() == "producer":
        return None
    try:
        return CompressionType.for_name(value)
    except ValueError:
        log.warning("unknown compression.type %r: batches are kept as the producer sent them", value)
        return None


@dataclass(frozen=True, slots=True)
class ReplicaManagerSettings:
    broker_id: int
    replica_lag_time_max_ms: int
    min_insync_replicas: int
    truncation_mode: TruncationMode = TruncationMode.LEADER_EPOCH


@dataclass(slots=True)
class FetchPartitionResult:
    error: Errors
    high_watermark: int
    log_start_offset: int
    records: bytes
    diverging_epoch: tuple[int, int] | None = None
    last_stable_offset: int = -1
    # read_committed: (producer_id, first_offset) of the aborted transactions in the records; else None.
    aborted_transactions: list[tuple[int, int]] | None = None


class ReplicaManager:
    def __init__(
        self,
        settings: ReplicaManagerSettings,
        log_manager: LogManager,
        metadata_cache: MetadataCache,
        state_listener: ReplicaStateListener,
        *,
        clock_ms: Callable[[], int],
        produce_purgatory: DelayedOperationPurgatory,
        fetch_purgatory: DelayedOperationPurgatory,
    ) -> None:
        self.settings = settings
        self.broker_id = settings.broker_id
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.state_listener = state_listener
        self.clock_ms = clock_ms
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        # DELETE_RECORDS answers waiting for the replicas' log start offsets (broker/delete_records.py).
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords")
        self.partitions: dict[TopicPartition, Partition] = {}
        # Follower session fetches parked in the fetch purgatory, with their sessions' partitions.
        self._parked_session_fetches: list[tuple[DelayedFetch, Mapping[TopicPartition, CachedPartition]]] = []
        self.controller_epoch = 0
        # Kafka's replicaStateChangeLock: LEADER_AND_ISR and STOP_REPLICA are applied one at a time (the
        # former may wait for a disk write off the event loop; docs/performance.md).
        self.state_change_lock = trio.Lock()
        # Called with (controller_id, controller_epoch) when a controller request raises the controller
        # epoch: a new active controller (the broker's link to the controller moves to it).
        self.controller_listeners: list[Callable[[int, int], None]] = []
        self.fetcher_manager: FetcherManagerLike = NoFetcherManager()
        self._hw_checkpoint = log_manager.high_watermarks()
        # Managed mode: ALTER_PARTITION submission (AlterPartitionManager.submit) and the broker epoch.
        self._alter_submit: AlterSubmit | None = None
        # Topic-level overrides learnt from the controller (managed mode): min.insync.replicas per topic.
        self.topic_min_isr: dict[str, int] = {}
        # compression.type per topic when it names a codec (absent: ``producer``, batches kept as sent).
        self.topic_compression: dict[str, CompressionType] = {}
        # The topics whose message.timestamp.type is LogAppendTime (absent: CreateTime).
        self.topic_log_append_time: set[str] = set()
        self.topic_config_fetcher: TopicConfigFetcher | None = None
        # Each topic's own configs as last applied, and the log settings they make (segment.bytes,
        # retention.ms ...: the broker's LogConfig where the topic sets nothing).
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.topic_log_configs: dict[str, LogConfig] = {}
        # Dynamic broker configs that apply here ("" then this broker's id) and the broker's static keys
        # (set by the server; None: dynamic configs are ignored); told of a change: ``dynamic_listeners``.
        self.dynamic_broker_configs: dict[str, dict[str, str]] = {}
        self.static_config: Callable[[str], object] | None = None
        self.dynamic_listeners: list[Callable[[dict[str, dict[str, str]]], None]] = []
        self.broker_epoch: Callable[[], int] = lambda: -1
        # Kafka's BrokerState by name (RUNNING, RECOVERY while the controller keeps it fenced ...); the
        # server sets it in managed mode. An unmanaged broker serves as soon as it listens.
        self.broker_state: Callable[[], str] = lambda: "RUNNING"
        # broker-<id>/acked.jsonl: every batch acknowledged to a client (acks 1 or all); the server sets it.
        self.acked_journal: AckJournal | None = None
        # Called with the reason when the broker must stop and exit with status 1 (the server sets it).
        self.fatal_error_handler: Callable[[str], None] | None = None
        # Kafka's onLeadershipChange: told of the partitions this broker began to lead (with their leader
        # epochs) and of those it no longer leads, after each change (the group coordinator listens).
        self.leadership_listeners: list[LeadershipListener] = []

    # ------------------------------------------------------------------ partitions

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is not None:
            if self.log_manager.offline:  # Kafka's HostedPartition.Offline
                raise KafkaStorageError(
                    f"{tp[0]}-{tp[1]} is offline on broker {self.broker_id}: its log dir failed"
                )
            return partition
        if self.metadata_cache.contains(tp):
            raise KafkaError(
                Errors.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} does not host {tp[0]}-{tp[1]}"
            )
        raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic-partition {tp[0]}-{tp[1]}")

    def get_or_create_partition(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            partition = Partition(
                tp,
                self.broker_id,
                self.log_manager.get_or_create_log(tp),
                clock_ms=self.clock_ms,
                replica_lag_time_max_ms=self.settings.replica_lag_time_max_ms,
                min_insync_replicas=self.topic_min_isr.get(tp[0], self.settings.min_insync_replicas),
                high_watermark=self._hw_checkpoint.get(tp, 0),
                truncation_mode=self.settings.truncation_mode,
            )
            if self._alter_submit is not None:
                partition.isr_proposer = self._propose_isr
                partition.is_broker_eligible = self._is_broker_eligible
            partition.log.compression_type = self.topic_compression.get(tp[0])
            partition.log.config = self.topic_log_configs.get(tp[0], self.log_manager.config)
            if tp[0] in self.topic_log_append_time:
                partition.log.timestamp_type = TimestampType.LOG_APPEND_TIME
            self.partitions[tp] = partition
            if self.topic_config_fetcher is not None:
                self.topic_config_fetcher.want(tp[0])
        return partition

    def high_watermarks(self) -> dict[TopicPartition, int]:
        hws = dict(self._hw_checkpoint)
        hws.update({tp: p.high_watermark for tp, p in self.partitions.items()})
        return {tp: hw for tp, hw in hws.items() if tp in self.log_manager.logs}

    # ------------------------------------------------------------------ LEADER_AND_ISR

    def _controller_epoch_seen(self, controller_id: int, controller_epoch: int) -> None:
        """A controller request of ``controller_epoch`` (not lower than the current one) was accepted."""
        raised = controller_epoch > self.controller_epoch
        self.controller_epoch = controller_epoch
        if raised:
            for listener in self.controller_listeners:
                listener(controller_id, controller_epoch)

    async def become_leader_or_follower_async(
        self,
        controller_id: int,
        controller_epoch: int,
        states: Sequence[tuple[TopicPartition, LeaderAndIsrState]],
        live_leaders: Iterable[BrokerEndpoint],
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        """:meth:`become_leader_or_follower` as the request handler runs it: the leader-epoch checkpoints of
        the partitions it will lead in a new epoch are first made durable in a worker thread (fetchers of
        those partitions stopped first, so their logs hold still), while the event loop goes on serving
        everything else; then the request is applied, with those checkpoints already on disk. A partition
        still becomes leader only once its checkpoint is durable, as before; what changes is that the
        broker's other partitions, its fetchers and its heartbeats do not wait for the disk meanwhile."""
        async with self.state_change_lock:
            await self._create_partitions_yielding(controller_epoch, states)
            files = self._new_leader_checkpoints(controller_epoch, states)
            if files:
                with self.log_manager.failure_channel.guard(
                    str(self.log_manager.log_dir), "writing leader-epoch checkpoints"
                ):
                    await environment.run_sync(write_all_atomically, files, ".tmp-lai")
            with already_durable(files):
                return self.become_leader_or_follower(controller_id, controller_epoch, states, live_leaders)

    async def _create_partitions_yielding(
        self, controller_epoch: int, states: Sequence[tuple[TopicPartition, LeaderAndIsrState]]
    ) -> None:
        """The logs of the new partitions ``states`` gives this broker are created first, a few at a time with
        the event loop served in between: a request for thousands of new partitions (one CreateTopics may
        make up to 10,000, docs/controller.md) would otherwise hold the loop for as long as creating all
        their files takes, and the broker would miss its heartbeats. Creating a partition's log early changes
        nothing else: the request then finds it and applies its state as before."""
        if controller_epoch < self.controller_epoch or self.log_manager.offline:
            return
        created = 0
        for tp, state in states:
            if tp in self.partitions or self.broker_id not in state.replicas:
                continue
            self.get_or_create_partition(tp)
            created += 1
            if created % PARTITIONS_CREATED_PER_STEP == 0:
                await trio.sleep(0)
            if self.log_manager.offline:
                return

    def _new_leader_checkpoints(
        self, controller_epoch: int, states: Sequence[tuple[TopicPartition, LeaderAndIsrState]]
    ) -> dict[Path, str]:
        """The checkpoint texts ``make_leader`` will write for the hosted partitions ``states`` makes this
        broker lead in a newer epoch (the same checks as ``become_leader_or_follower``); their fetchers
        are removed first (Kafka's ``makeLeaders`` does so too), so nothing appends meanwhile."""
        if (
            controller_epoch < self.controller_epoch
            or self.log_manager.offline
            or self.settings.truncation_mode is not TruncationMode.LEADER_EPOCH
        ):
            return {}
        files: dict[Path, str] = {}
        moving: list[tuple[Partition, LeaderAndIsrState]] = []
        for tp, state in states:
            partition = self.partitions.get(tp)
            if (
                partition is None
                or state.leader != self.broker_id
                or self.broker_id not in state.replicas
                or state.leader_epoch <= partition.leader_epoch
            ):
                continue
            moving.append((partition, state))
        if moving:
            self.fetcher_manager.remove_fetcher_for_partitions([p.tp for p, _ in moving], shutdown_idle=False)
        for partition, state in moving:
            planned = partition.log.leader_epoch_cache.checkpoint_after_assign(
                state.leader_epoch, partition.log_end_offset
            )
            if planned is not None:
                checkpoint, text = planned
                files[checkpoint.path] = text
        return files

    def become_leader_or_follower(
        self,
        controller_id: int,
        controller_epoch: int,
        states: Sequence[tuple[TopicPartition, LeaderAndIsrState]],
        live_leaders: Iterable[BrokerEndpoint],
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        """Kafka's ``becomeLeaderOrFollower``: a request from an older controller is refused whole
        (STALE_CONTROLLER_EPOCH); a partition this broker is not a replica of gets UNKNOWN_TOPIC_OR_PARTITION,
        one whose state is not newer than the current one STALE_CONTROLLER_EPOCH; the rest become leaders
        or followers.

        Newer is a higher leader epoch, or (KRaft, KAFKA-15021) the same leader epoch and leader with a
        higher partition epoch: an ISR or assignment change in the current epoch. Such a change is applied
        in place (``_update_in_epoch``): no epoch is cached, nothing is truncated, no fetcher restarts."""
        if controller_epoch < self.controller_epoch:
            log.warning(
                "broker %d ignoring LEADER_AND_ISR from controller %d with epoch %d: current controller "
                "epoch is %d",
                self.broker_id,
                controller_id,
                controller_epoch,
                self.controller_epoch,
            )
            return Errors.STALE_CONTROLLER_EPOCH, {tp: Errors.STALE_CONTROLLER_EPOCH for tp, _ in states}
        self._controller_epoch_seen(controller_id, controller_epoch)
        self.state_listener.controller_epoch = controller_epoch
        self.metadata_cache.update_brokers(list(live_leaders), replace=False)
        errors: dict[TopicPartition, Errors] = {}
        to_leader: list[tuple[Partition, LeaderAndIsrState]] = []
        to_follower: list[tuple[Partition, LeaderAndIsrState]] = []
        in_epoch: list[tuple[Partition, LeaderAndIsrState]] = []
        for tp, state in states:
            existing = self.partitions.get(tp)
            current_epoch = existing.leader_epoch if existing is not None else -1
            if self.broker_id not in state.replicas:
                log.warning("broker %d is not a replica of %s-%d in %s", self.broker_id, tp[0], tp[1], state)
                errors[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if self.log_manager.offline:
                errors[tp] = Errors.KAFKA_STORAGE_ERROR
                continue
            same_epoch_update = (
                existing is not None
                and state.leader_epoch == current_epoch
                and state.leader == existing.leader_id
                and state.partition_epoch > existing.partition_epoch
            )
            if state.leader_epoch <= current_epoch and not same_epoch_update:
                log.info(
                    "broker %d ignoring LEADER_AND_ISR for %s-%d: leader epoch %d (partition epoch %d) is "
                    "not newer than %d (partition epoch %d)",
                    self.broker_id,
                    tp[0],
                    tp[1],
                    state.leader_epoch,
                    state.partition_epoch,
                    current_epoch,
                    -1 if existing is None else existing.partition_epoch,
                )
                errors[tp] = Errors.STALE_CONTROLLER_EPOCH
                continue
            partition = self.get_or_create_partition(tp)
            self.metadata_cache.update_partition(
                tp,
                PartitionMetadata(state.leader, state.leader_epoch, list(state.isr), list(state.replicas)),
            )
            errors[tp] = Errors.NONE
            if same_epoch_update:
                in_epoch.append((partition, state))
            else:
                (to_leader if state.leader == self.broker_id else to_follower).append((partition, state))
        for partition, state in in_epoch:
            self._update_in_epoch(partition, state)
        # Every leader-epoch checkpoint this request changes is made durable in one group commit before the
        # response (instead of two fsyncs per partition, one after another).
        with (
            self.log_manager.failure_channel.guard(
                str(self.log_manager.log_dir), "writing leader-epoch checkpoints"
            ),
            group_commit(),
        ):
            if to_leader:
                self._make_leaders(to_leader)
            if to_follower:
                self._make_followers(to_follower)
        self.fetcher_manager.shutdown_idle_fetchers()
        self._leadership_changed(
            [(p.tp, st.leader_epoch) for p, st in to_leader], [p.tp for p, _ in to_follower]
        )
        return Errors.NONE, errors

    def _leadership_changed(
        self, leaders: list[tuple[TopicPartition, int]], resigned: list[TopicPartition]
    ) -> None:
        for listener in self.leadership_listeners:
            listener(leaders, resigned)

    def _update_in_epoch(self, partition: Partition, state: LeaderAndIsrState) -> None:
        """A new ISR or assignment in the current leader epoch (the leader unchanged): Kafka's
        ``makeLeader`` / ``makeFollower`` when the leader epoch did not change. The leader's HW may move (a
        smaller ISR); a follower keeps fetching as it was."""
        old_isr = list(partition.isr)
        hw_moved = partition.update_in_epoch(state)
        if sorted(old_isr) != sorted(partition.isr) and partition.is_leader:
            reason = "controller_expanded" if len(partition.isr) > len(old_isr) else "controller_shrunk"
            self._on_isr_change(partition, IsrChange(old_isr, list(partition.isr), reason))
        if hw_moved:
            self._on_hw_moved(partition)
        else:
            self.produce_purgatory.check_and_complete(partition.tp)

    def _make_leaders(self, items: list[tuple[Partition, LeaderAndIsrState]]) -> None:
        """Kafka's ``makeLeaders``: stop fetching, then lead from this broker's LEO in the new epoch."""
        self.fetcher_manager.remove_fetcher_for_partitions([p.tp for p, _ in items], shutdown_idle=False)
        for partition, state in items:
            partition.make_leader(state)
            self.state_listener.on_became_leader(partition)
            self.state_listener.on_epoch_assigned(partition)
            self._complete_delayed(partition.tp)

    def _make_followers(self, items: list[tuple[Partition, LeaderAndIsrState]]) -> None:
        """Kafka's ``makeFollowers``: partitions whose leader or epoch changed restart their fetcher at the
        offset ``fetcher.truncation.initial_fetch_offset`` picks for the truncation mode: by default the LEO
        (truncation then finds the divergence point, KIP-101) or, with no leader epochs yet, the HW. In
        ``high-watermark`` mode the log is first truncated to the replica's own HW (Kafka 0.10)."""
        changed: list[tuple[Partition, LeaderAndIsrState]] = []
        for partition, state in items:
            if partition.make_follower(state):
                changed.append((partition, state))
                self.state_listener.on_became_follower(partition)
        self.fetcher_manager.remove_fetcher_for_partitions([p.tp for p, _ in changed], shutdown_idle=False)
        for partition, _ in changed:
            self._complete_delayed(partition.tp)
        initial: dict[TopicPartition, InitialFetchState] = {}
        for partition, state in changed:
            if state.leader < 0:
                # No leader (KRaft's NO_LEADER: the last ISR member went, e.g. in a controlled shutdown):
                # nothing to fetch from until the controller elects one.
                log.info("broker %d: %s has no leader; not fetching", self.broker_id, partition.describe())
                continue
            leader = self.metadata_cache.alive_broker(state.leader)
            if leader is None:
                log.warning(
                    "broker %d: leader %d of %s is not known alive; not fetching yet",
                    self.broker_id,
                    state.leader,
                    partition.describe(),
                )
                continue
            mode = self.settings.truncation_mode
            cut = become_follower_truncation_offset(mode, high_watermark=partition.high_watermark)
            if cut is not None and cut < partition.log_end_offset:
                view = FollowerPartitionView(partition, self.state_listener)
                view.truncate_to(cut, truncation_reason(mode))
            fetch_offset = initial_fetch_offset(
                mode,
                log_end_offset=partition.log_end_offset,
                high_watermark=partition.high_watermark,
                has_epochs=partition.log.leader_epoch_cache.latest_epoch() is not None,
            )
            initial[partition.tp] = InitialFetchState(leader, state.leader_epoch, fetch_offset)
        if initial:
            self.fetcher_manager.add_fetcher_for_partitions(initial)

    def host_initial_leaders(self, tps: Iterable[TopicPartition]) -> None:
        """An unmanaged broker told to lead partitions alone from start-up (``initial.leader.partitions``):
        it leads in the latest epoch its log has (0 for a new log)."""
        for tp in tps:
            partition = self.get_or_create_partition(tp)
            latest = partition.log.leader_epoch_cache.latest_epoch()
            epoch = 0 if latest is None else latest
            partition.leader_epoch = epoch - 1
            partition.make_leader(
                LeaderAndIsrState(self.broker_id, epoch, [self.broker_id], [self.broker_id])
            )
            self.metadata_cache.update_partition(
                tp, PartitionMetadata(self.broker_id, epoch, [self.broker_id], [self.broker_id])
            )
            self.state_listener.on_became_leader(partition)
            self._leadership_changed([(tp, epoch)], [])

    # ------------------------------------------------------------------ STOP_REPLICA

    async def stop_replicas_async(
        self, controller_id: int, controller_epoch: int, states: Sequence[tuple[TopicPartition, int, bool]]
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        """:meth:`stop_replicas` after any LEADER_AND_ISR being applied (``state_change_lock``), a few
        partitions at a time with the event loop served in between (PARTITIONS_STOPPED_PER_STEP): deleting
        a topic of many partitions removes their files, which would otherwise hold the loop."""
        async with self.state_change_lock:
            if len(states) <= PARTITIONS_STOPPED_PER_STEP:
                return self.stop_replicas(controller_id, controller_epoch, states)
            error, errors = Errors.NONE, {}
            for start in range(0, len(states), PARTITIONS_STOPPED_PER_STEP):
                if start:
                    await trio.sleep(0)
                step_error, step_errors = self.stop_replicas(
                    controller_id, controller_epoch, states[start : start + PARTITIONS_STOPPED_PER_STEP]
                )
                errors.update(step_errors)
                if step_error != Errors.NONE:
                    error = step_error
            return error, errors

    def stop_replicas(
        self, controller_id: int, controller_epoch: int, states: Sequence[tuple[TopicPartition, int, bool]]
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        """Kafka's ``stopReplicas``. ``states``: (tp, leader_epoch, delete_partition). An older leader epoch
        is FENCED_LEADER_EPOCH; -1 (no epoch), -2 (deletion sentinel) or a newer/equal one is done."""
        if controller_epoch < self.controller_epoch:
            return Errors.STALE_CONTROLLER_EPOCH, {tp: Errors.STALE_CONTROLLER_EPOCH for tp, _, _ in states}
        self._controller_epoch_seen(controller_id, controller_epoch)
        self.state_listener.controller_epoch = controller_epoch
        errors: dict[TopicPartition, Errors] = {}
        to_stop: list[tuple[TopicPartition, bool]] = []
        for tp, leader_epoch, delete in states:
            partition = self.partitions.get(tp)
            if partition is None or leader_epoch in (-1, -2) or leader_epoch >= partition.leader_epoch:
                errors[tp] = Errors.NONE
                to_stop.append((tp, delete))
            else:
                log.info(
                    "broker %d ignoring STOP_REPLICA for %s: leader epoch %d is older than %d",
                    self.broker_id,
                    partition.describe(),
                    leader_epoch,
                    partition.leader_epoch,
                )
                errors[tp] = Errors.FENCED_LEADER_EPOCH
        self.fetcher_manager.remove_fetcher_for_partitions([tp for tp, _ in to_stop])
        for tp, delete in to_stop:
            partition = self.partitions.pop(tp, None)
            if partition is not None:
                self._complete_delayed(tp)
            if delete:
                self.log_manager.delete_log(tp)
                if not any(t == tp[0] for t, _ in self.partitions):
                    self._forget_topic(tp[0])
                self._hw_checkpoint.pop(tp, None)
                # A deleted topic leaves the cache; a replica moved away by a reassignment does not (the
                # partition lives on elsewhere, and UPDATE_METADATA already lists its new replicas).
                meta = self.metadata_cache.partitions.get(tp)
                if meta is None or self.broker_id in meta.replicas or meta.leader == LEADER_DURING_DELETE:
                    self.metadata_cache.remove_partition(tp)
            elif partition is not None:
                self._hw_checkpoint[tp] = partition.high_watermark
            self.state_listener.on_partition_stopped(tp, delete)
        self._leadership_changed([], [tp for tp, _ in to_stop])
        return Errors.NONE, errors

    # ------------------------------------------------------------------ UPDATE_METADATA

    def update_metadata(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: list[BrokerEndpoint],
        partitions: list[tuple[TopicPartition, PartitionMetadata]],
        endpoints: dict[int, dict[str, tuple[str, int]]] | None = None,
    ) -> Errors:
        """Kafka's ``maybeUpdateMetadataCache``: the live brokers replace the known ones (with their
        listeners, ``endpoints``, when given); a partition whose leader is LEADER_DURING_DELETE leaves the
        cache."""
        if controller_epoch < self.controller_epoch:
            return Errors.STALE_CONTROLLER_EPOCH
        self._controller_epoch_seen(controller_id, controller_epoch)
        self.state_listener.controller_epoch = controller_epoch
        self.metadata_cache.controller_id = controller_id
        self.metadata_cache.update_brokers(brokers, replace=True, endpoints=endpoints)
        for tp, meta in partitions:
            if meta.leader == LEADER_DURING_DELETE:
                self.metadata_cache.remove_partition(tp)
            else:
                self.metadata_cache.update_partition(tp, meta)
        return Errors.NONE

    # ------------------------------------------------------------------ produce

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytes],
        respond: Callable[[dict[TopicPartition, ProducePartitionStatus]], None],
        *,
        internal_topics_allowed: bool = False,
        client_id: str = "",
        received_ms: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guards: Mapping[TopicPartition, VerificationGuard] | None = None,
    ) -> None:
        """Kafka's ``appendRecords``. ``verification_guards`` (KIP-890, None in the legacy mode): the guard
        each transactional append verified with the coordinator carries (``broker.txn_verification``).
        Only the broker itself writes to an internal topic
        (``__consumer_offsets``: the group coordinator); a client gets INVALID_TOPIC_EXCEPTION. Every batch
        acknowledged to a client (acks 1 or all; not the broker's own writes) is journaled in
        ``acked.jsonl`` before the response goes out."""
        if required_acks != 0 and self.acked_journal is not None and not internal_topics_allowed:
            journal, answer = self.acked_journal, respond

            def respond(statuses: dict[TopicPartition, ProducePartitionStatus]) -> None:
                journal.record(required_acks, client_id, statuses, received_ms)
                answer(statuses)

        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for tp, records in entries.items():
            try:
                if tp[0] in INTERNAL_TOPICS and not internal_topics_allowed:
                    raise KafkaError(
                        Errors.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {tp[0]}"
                    )
                partition = self.get_partition_or_error(tp)
                guard = None if verification_guards is None else verification_guards.get(tp, SENTINEL)
                info = partition.append_records_to_leader(records, required_acks, origin, guard)
            except KafkaError as exc:
                statuses[tp] = ProducePartitionStatus(
                    -1,
                    -1,
                    -1,
                    exc.error,
                    exc.message,
                    acks_pending=False,
                    record_errors=exc.record_errors if isinstance(exc, InvalidRecordError) else [],
                )
                continue
            digests = None
            if (
                self.acked_journal is not None
                and partition.log.config.compact
                and not internal_topics_allowed
            ):
                digests = record_digests(records, info.batches)
            statuses[tp] = ProducePartitionStatus(
                info.last_offset + 1,
                info.first_offset,
                partition.log_start_offset,
                acks_pending=required_acks == -1,
                batches=info.batches,
                log_append_time_ms=info.log_append_time_ms,
                records=digests,
            )
            self.state_listener.on_offsets_changed(partition)
            # New data: wake fetches waiting on this partition (followers and, if the HW moved, consumers).
            self._wake_fetches(tp)
            self.produce_purgatory.check_and_complete(tp)
        if required_acks != -1 or all(not s.acks_pending for s in statuses.values()):
            respond(statuses)
            return
        op = DelayedProduce(timeout_ms, statuses, self._check_enough_replicas, respond)
        self.produce_purgatory.try_complete_else_watch(
            op, [tp for tp, s in statuses.items() if s.acks_pending]
        )

    def _check_enough_replicas(self, tp: TopicPartition, required_offset: int) -> tuple[bool, Errors]:
        partition = self.partitions.get(tp)
        if partition is None:
            return False, Errors.NOT_LEADER_OR_FOLLOWER
        if self.log_manager.offline:
            return False, Errors.KAFKA_STORAGE_ERROR
        return partition.check_enough_replicas_reached(required_offset)

    # ------------------------------------------------------------------ fetch

    def fetch_messages(
        self,
        params: FetchParams,
        respond: Callable[[dict[TopicPartition, FetchPartitionResult]], None],
        *,
        session: FetchSessionPartitions | None = None,
    ) -> None:
        """Reads now; answers now if there is an error, enough data or no wait, else parks a DelayedFetch.

        ``session``: a follower's incremental fetch session. Its quiet partitions (see
        ``select_follower_partitions``) are neither read nor answered, only watched; ``params`` must then
        hold none of them."""
        results = self._read_from_local_log(params)
        total = sum(len(r.records) for r in results.values())
        # An error or a diverging epoch is answered at once (Kafka's fetchMessages: hasDivergingEpoch).
        errors = any(r.error != Errors.NONE or r.diverging_epoch is not None for r in results.values())
        nothing_to_wait_on = not params.partitions and (session is None or not session.partition_map)
        if params.max_wait_ms <= 0 or nothing_to_wait_on or total >= params.min_bytes or errors:
            respond(results)
            return

        if session is None:

            def complete(p: FetchParams) -> None:
                respond(self._read_from_local_log(p))

            op = DelayedFetch(params, self._available_for_delayed_fetch, complete)
            self.fetch_purgatory.try_complete_else_watch(op, list(params.partitions))
            return

        replica_id = params.replica_id
        partition_map = session.partition_map

        def complete_session(p: FetchParams) -> None:
            if not p.partitions and not op.quiet_partition_changed:
                # Expired with every partition quiet and nothing reported to any of them: the answer is
                # empty, as a new look at each partition would find (the next round takes that look).
                respond({})
                return
            # What woke the fetch may have ended the quiet of other partitions too: choose again.
            again = FetchParams(p.replica_id, p.max_wait_ms, p.min_bytes, p.max_bytes)
            again.partitions = self.select_follower_partitions(replica_id, partition_map.items())
            respond(self._read_from_local_log(again))

        def quiet_status(tp: TopicPartition) -> FetchPartitionStatus | None:
            cached = partition_map.get(tp)
            if cached is None:
                return None
            return FetchPartitionStatus(
                cached.fetch_offset, cached.leader_epoch, cached.max_bytes, cached.fetcher_log_start_offset
            )

        op = DelayedFetch(params, self._available_for_delayed_fetch, complete_session, quiet_status)
        # Watched under its partitions to read only; its quiet ones are found through the session when
        # something happens to a partition (``_wake_fetches``), not watched one by one every round.
        if not self.fetch_purgatory.try_complete_else_watch(op, list(params.partitions)):
            parked = [entry for entry in self._parked_session_fetches if not entry[0].is_completed]
            parked.append((op, partition_map))
            self._parked_session_fetches = parked

    def _wake_fetches(self, tp: TopicPartition) -> None:
        """Something happened to ``tp``: try the fetches waiting on it, and the parked session fetches whose
        session holds it."""
        self.fetch_purgatory.check_and_complete(tp)
        parked = self._parked_session_fetches
        if not parked:
            return
        live: list[tuple[DelayedFetch, Mapping[TopicPartition, CachedPartition]]] = []
        for op, partition_map in parked:
            if not op.is_completed and tp in partition_map:
                op.note_change(tp)
                op.try_complete()
            if not op.is_completed:
                live.append((op, partition_map))
        self._parked_session_fetches = live

    def select_follower_partitions(
        self, replica_id: int, cached: Iterable[tuple[TopicPartition, CachedPartition]]
    ) -> dict[TopicPartition, FetchPartitionStatus]:
        """The partitions of a follower's incremental fetch session that must be read, in session order.

        The others are quiet: this broker leads them in the epoch the follower named, the follower already
        fetched at this broker's LEO and is in the ISR, and the high watermark and log start offset are the
        ones the session last sent. Reading one would return no records and leave it out of the response
        (KIP-227), and recording the follower's fetch would change nothing but its fetch times, which are
        set here directly (Kafka's ``Replica.updateFetchState`` for a follower at the leader's LEO). So an
        idle incremental round costs a few attribute reads per partition instead of a log read, a follower
        state update and a response entry."""
        now = self.clock_ms()
        # An offline log dir answers every partition with KAFKA_STORAGE_ERROR: nothing is quiet then.
        partitions = {} if self.log_manager.offline else self.partitions
        out: dict[TopicPartition, FetchPartitionStatus] = {}
        for tp, c in cached:
            p = partitions.get(tp)
            if p is not None and p.record_quiet_follower_fetch(
                replica_id,
                c.fetch_offset,
                c.leader_epoch,
                c.high_watermark,
                c.local_log_start_offset,
                c.fetcher_log_start_offset,
                now,
            ):
                continue
            out[tp] = FetchPartitionStatus(
                c.fetch_offset, c.leader_epoch, c.max_bytes, c.fetcher_log_start_offset
            )
        return out

    def _available_for_delayed_fetch(
        self, tp: TopicPartition, status: FetchPartitionStatus, params: FetchParams
    ) -> int | None:
        """Bytes a waiting fetch could read now (None: answer it now, the partition changed). With
        ``min_bytes`` <= 1 any new data will do, so the log is not read just to count it."""
        from_follower = params.is_from_follower
        partition = self.partitions.get(tp)
        if partition is None:
            return None
        if partition.check_current_leader_epoch(status.current_leader_epoch) != Errors.NONE:
            return None
        if not partition.is_leader:
            return None
        if from_follower:
            end = partition.log_end_offset
        elif params.isolation_level == READ_COMMITTED:
            end = partition.last_stable_offset
        else:
            end = partition.high_watermark
        if status.fetch_offset > partition.log_end_offset or status.fetch_offset < partition.log_start_offset:
            return None
        if end <= status.fetch_offset:
            return 0
        if params.min_bytes <= 1:
            return 1
        return len(partition.log.read(status.fetch_offset, status.max_bytes, max_offset=end))

    def _read_from_local_log(self, params: FetchParams) -> dict[TopicPartition, FetchPartitionResult]:
        results: dict[TopicPartition, FetchPartitionResult] = {}
        remaining = params.max_bytes
        now = self.clock_ms()
        fetch_only_from_leader = params.replica_id != DEBUGGING_REPLICA_ID
        # Kafka's minOneMessage: only until some partition returned records (a flag, not a scan of the
        # results so far, which made a fetch of n partitions cost O(n^2)).
        got_records = False
        for tp, status in params.partitions.items():
            partition = self.partitions.get(tp)
            try:
                if partition is None:
                    partition = self.get_partition_or_error(tp)
                if params.is_from_follower and params.replica_id not in partition.assigned_replicas:
                    raise KafkaError(
                        Errors.NOT_LEADER_OR_FOLLOWER,
                        f"broker {params.replica_id} is not a replica of {partition.describe()}",
                    )
                read: LogReadResult = partition.read_records(
                    status.fetch_offset,
                    status.current_leader_epoch,
                    max(0, min(status.max_bytes, remaining)),
                    from_follower=params.is_from_follower,
                    fetch_only_from_leader=fetch_only_from_leader,
                    min_one_message=not got_records,
                    last_fetched_epoch=status.last_fetched_epoch,
                    isolation_level=params.isolation_level,
                )
            except KafkaError as exc:
                hw = partition.high_watermark if partition is not None else -1
                lso = partition.log_start_offset if partition is not None else -1
                stable = partition.last_stable_offset if partition is not None else -1
                results[tp] = FetchPartitionResult(exc.error, hw, lso, b"", last_stable_offset=stable)
                continue
            remaining -= len(read.records)
            if read.records:
                got_records = True
            if params.is_from_follower:
                hw_moved, change = partition.update_follower_fetch_state(
                    params.replica_id, status.fetch_offset, status.log_start_offset, now, read.log_end_offset
                )
                if change is not None:
                    self._on_isr_change(partition, change)
                if hw_moved:
                    self._on_hw_moved(partition)
                self.delete_records_purgatory.check_and_complete(tp)
            aborted = read.aborted_transactions
            results[tp] = FetchPartitionResult(
                Errors.NONE,
                partition.high_watermark,
                read.log_start_offset,
                read.records,
                read.diverging_epoch,
                partition.last_stable_offset,
                None if aborted is None else [(t.producer_id, t.first_offset) for t in aborted],
            )
        return results

    # ------------------------------------------------------------------ ISR and HW events

    def _on_hw_moved(self, partition: Partition) -> None:
        self.state_listener.on_offsets_changed(partition)
        self.produce_purgatory.check_and_complete(partition.tp)
        self._wake_fetches(partition.tp)

    def _on_isr_change(self, partition: Partition, change: IsrChange) -> None:
        """An ISR change a leader made (unmanaged) or the controller committed (managed)."""
        self.state_listener.on_isr_changed(partition, change)
        meta = self.metadata_cache.partitions.get(partition.tp)
        if meta is not None:
            meta.isr = list(change.new_isr)
        self.produce_purgatory.check_and_complete(partition.tp)

    # ------------------------------------------------------------------ managed mode: topic configs

    def on_topic_configs(self, topic: str, configs: dict[str, str]) -> None:
        """A topic's configs as an UPDATE_METADATA carries them: applied when they changed and the topic has
        partitions here (a topic hosted later asks for them, ``TopicConfigFetcher``)."""
        if self.topic_configs.get(topic) == configs:
            return
        if any(tp[0] == topic for tp in self.partitions):
            self.apply_topic_configs(topic, configs)

    def apply_topic_configs(self, topic: str, configs: dict[str, str]) -> None:
        """A topic's overrides from the controller: ``min.insync.replicas``, ``compression.type``,
        ``message.timestamp.type`` and the log's (``segment.bytes``, ``segment.ms``, ``max.message.bytes``,
        ``retention.ms``, ``retention.bytes``, ``cleanup.policy``) for its partitions here."""
        if configs != self.topic_configs.get(topic):
            log.info("broker %d: topic %s configs %s", self.broker_id, topic, configs)
        self.topic_configs[topic] = dict(configs)
        log_config = log_config_for(self.log_manager.config, configs)
        if log_config is self.log_manager.config:
            self.topic_log_configs.pop(topic, None)
        else:
            self.topic_log_configs[topic] = log_config
        codec = topic_compression(configs.get("compression.type"))
        if codec is None:
            self.topic_compression.pop(topic, None)
        else:
            self.topic_compression[topic] = codec
        timestamp_type = topic_timestamp_type(configs.get("message.timestamp.type"))
        if timestamp_type is TimestampType.LOG_APPEND_TIME:
            self.topic_log_append_time.add(topic)
        else:
            self.topic_log_append_time.discard(topic)
        for tp, partition in self.partitions.items():
            if tp[0] == topic:
                partition.log.compression_type = codec
                partition.log.timestamp_type = timestamp_type
                partition.log.config = log_config
        raw = configs.get("min.insync.replicas")
        value = self.settings.min_insync_replicas if raw is None else int(raw)
        if raw is None:
            self.topic_min_isr.pop(topic, None)
        else:
            self.topic_min_isr[topic] = value
        for tp, partition in self.partitions.items():
            if tp[0] == topic and partition.min_insync_replicas != value:
                log.info(
                    "broker %d: %s min.insync.replicas=%d (topic config)",
                    self.broker_id,
                    partition.describe(),
                    value,
                )
                partition.min_insync_replicas = value
                self.state_listener.on_partition_config_changed(partition)
                if partition.maybe_increment_leader_hw():
                    self._on_hw_moved(partition)

    def _forget_topic(self, topic: str) -> None:
        """The topic's last partition here was deleted."""
        self.topic_min_isr.pop(topic, None)
        self.topic_compression.pop(topic, None)
        self.topic_log_append_time.discard(topic)
        self.topic_configs.pop(topic, None)
        self.topic_log_configs.pop(topic, None)
        if self.topic_config_fetcher is not None:
            self.topic_config_fetcher.forget(topic)

    def on_dynamic_broker_configs(self, by_resource: dict[str, dict[str, str]]) -> None:
        """The dynamic broker configs an UPDATE_METADATA carries: those of "" (every broker) and of this
        broker's id make the broker's log settings (over its static keys, which they win over), and so every
        log's where its topic does not set the key."""
        mine = {name: dict(by_resource[name]) for name in ("", str(self.broker_id)) if name in by_resource}
        static = self.static_config
        if mine == self.dynamic_broker_configs or static is None:
            return
        self.dynamic_broker_configs = mine
        merged = {**mine.get("", {}), **mine.get(str(self.broker_id), {})}
        log.info("broker %d: dynamic broker configs %s", self.broker_id, merged)
        try:
            base = broker_log_config(lambda key: merged[key] if key in merged else static(key))
        except ValueError as exc:
            log.warning("broker %d: dynamic broker configs not taken: %s", self.broker_id, exc)
            return
        self.log_manager.config = base
        self.topic_log_configs = {
            topic: cfg
            for topic, configs in self.topic_configs.items()
            if (cfg := log_config_for(base, configs)) is not base
        }
        for tp, partition in self.partitions.items():
            partition.log.config = self.topic_log_configs.get(tp[0], base)
        for listener in self.dynamic_listeners:
            listener(mine)

    # ------------------------------------------------------------------ retention

    def cleanup_logs(self) -> dict[TopicPartition, int]:
        """One pass of Kafka's retention (``log.retention.check.interval.ms``): each hosted partition's log
        deletes the segments its retention no longer keeps, below the partition's high watermark; a moved
        log start is journaled (an ``offsets`` event) and checkpointed. Followers also follow their leader's
        log start from FETCH responses (``maybe_increment_log_start_offset``)."""

        def high_watermark(tp: TopicPartition) -> int | None:
            partition = self.partitions.get(tp)
            if partition is None:
                return None
            if self.topic_config_fetcher is not None and tp[0] not in self.topic_configs:
                return None  # its topic's retention is not known yet (after a restart): not the defaults'
            return partition.high_watermark

        moved = self.log_manager.cleanup_logs(high_watermark)
        for tp in moved:
            partition = self.partitions.get(tp)
            if partition is not None:
                self.state_listener.on_offsets_changed(partition)
        return moved

    # ------------------------------------------------------------------ managed mode: ALTER_PARTITION

    def enable_alter_partition(self, submit: AlterSubmit) -> None:
        """From now on, leaders propose ISR changes to the controller instead of applying them."""
        self._alter_submit = submit
        for partition in self.partitions.values():
            partition.isr_proposer = self._propose_isr
            partition.is_broker_eligible = self._is_broker_eligible

    def _is_broker_eligible(self, broker_id: int) -> bool:
        """Managed mode: a live broker of the last UPDATE_METADATA (registered, unfenced, not in controlled
        shutdown) may join an ISR (Kafka's ``isReplicaIsrEligible``)."""
        return self.metadata_cache.alive_broker(broker_id) is not None

    def _propose_isr(self, partition: Partition, new_isr: list[int], reason: str) -> bool:
        assert self._alter_submit is not None
        log.info(
            "broker %d proposes ISR %s for %s (%s; committed ISR %s, partition epoch %d)",
            self.broker_id,
            new_isr,
            partition.describe(),
            reason,
            partition.isr,
            partition.partition_epoch,
        )
        return self._alter_submit(
            partition.tp,
            partition.leader_epoch,
            new_isr,
            partition.partition_epoch,
            self._on_alter_partition_result,
        )

    def _on_alter_partition_result(
        self, tp: TopicPartition, error: Errors, leader_epoch: int, isr: list[int], partition_epoch: int
    ) -> None:
        partition = self.partitions.get(tp)
        if partition is None:
            return
        proposed = partition.pending_isr
        partition.pending_isr = None
        # A LEADER_AND_ISR may have brought a newer state of the same leader epoch first (an ISR change the
        # controller made, KAFKA-15021): an answer with an older partition epoch is not applied over it.
        if (
            error != Errors.NONE
            or not partition.is_leader
            or leader_epoch != partition.leader_epoch
            or partition_epoch < partition.partition_epoch
        ):
            log.warning(
                "broker %d: ISR proposal %s for %s not applied: %s (controller has leader epoch %d, ISR %s, "
                "partition epoch %d)",
                self.broker_id,
                proposed,
                partition.describe(),
                error.name,
                leader_epoch,
                isr,
                partition_epoch,
            )
            # The maximal ISR shrank back to the committed one: the HW may move now.
            if partition.maybe_increment_leader_hw():
                self._on_hw_moved(partition)
            return
        old = list(partition.isr)
        hw_moved = partition.set_isr(isr, partition_epoch)
        if sorted(old) != sorted(isr):
            reason = "follower_caught_up" if len(isr) > len(old) else "follower_lagging"
            self._on_isr_change(partition, IsrChange(old, list(isr), reason))
        if hw_moved:
            self._on_hw_moved(partition)

    def maybe_shrink_isr(self) -> None:
        """Run every ``replica.lag.time.max.ms / 2`` (Kafka's isr-expiration task)."""
        for partition in list(self.partitions.values()):
            hw_before = partition.high_watermark
            change = partition.maybe_shrink_isr()
            if change is not None:
                self._on_isr_change(partition, change)
            if partition.high_watermark != hw_before:
                self._on_hw_moved(partition)

    def _complete_delayed(self, tp: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)
        self._wake_fetches(tp)

    # ------------------------------------------------------------------ the fetchers' view (follower side)

    @asynccontextmanager
    async def follower_appends(self, appends: Mapping[TopicPartition, bytes]) -> AsyncIterator[None]:
        """Inside, a replica fetcher appends ``appends`` (fetched records per partition). The leader-epoch
        checkpoints those appends change (a batch of a new leader epoch: after every leader change) are
        first made durable together, in a worker thread, as for a LEADER_AND_ISR: each append still finds
        its epoch on disk before its data goes to the log (Kafka's ``assign`` flushes the checkpoint
        first), but the event loop keeps serving meanwhile, and a fetch answer that moves 100 partitions
        to a new epoch pays for two syncs instead of 200 fsyncs in a row on the loop."""
        if not self._follower_append_checkpoints(appends):
            yield  # nothing to make durable (the usual fetch: no new epoch)
            return
        guard = self.log_manager.failure_channel.guard
        async with self.state_change_lock:
            # Planned again: a LEADER_AND_ISR applied while this waited may have changed the caches.
            files = self._follower_append_checkpoints(appends)
            with guard(str(self.log_manager.log_dir), "writing leader-epoch checkpoints"):
                await environment.run_sync(write_all_atomically, files, ".tmp-fetch")
        with (
            already_durable(files),
            guard(str(self.log_manager.log_dir), "writing leader-epoch checkpoints"),
            group_commit(),
        ):
            yield

    def _follower_append_checkpoints(self, appends: Mapping[TopicPartition, bytes]) -> dict[Path, str]:
        files: dict[Path, str] = {}
        if self.log_manager.offline:
            return files
        for tp, records in appends.items():
            partition = self.partitions.get(tp)
            if partition is None or partition.is_leader or not records:
                continue
            try:
                starts = [
                    (h.partition_leader_epoch, h.base_offset)
                    for _, h in iter_batches(records, validate=False)
                ]
            except CorruptRecordError:
                continue  # the append refuses it, and says why
            planned = partition.log.leader_epoch_cache.checkpoint_after_assigns(starts)
            if planned is not None:
                checkpoint, text = planned
                files[checkpoint.path] = text
        return files

    def follower_partition(self, tp: TopicPartition) -> FollowerPartition | None:
        partition = self.partitions.get(tp)
        if partition is None or partition.is_leader or partition.leader_id is None:
            return None
        return FollowerPartitionView(partition, self.state_listener)

    def on_fetch_error(self, tp: TopicPartition, error_code: int, message: str) -> None:
        self.state_listener.on_fetch_error(tp, self.partitions.get(tp), error_code, message)

    def on_partition_failed(self, tp: TopicPartition, error_code: int, message: str) -> None:
        """Kafka's failed partitions: the fetcher stopped fetching ``tp`` until the next LEADER_AND_ISR."""
        self.on_fetch_error(tp, error_code, f"partition marked failed: {message}")

    def on_fatal_error(self, tp: TopicPartition, message: str) -> None:
        """A fetcher found this broker must not go on (Kafka <= 2.0's fatal exit): journal it, then ask the
        server to shut down cleanly and exit with status 1 (``fatal_error_handler``)."""
        self.on_fetch_error(tp, int(Errors.OFFSET_OUT_OF_RANGE), f"fatal: {message}")
        if self.fatal_error_handler is not None:
            self.fatal_error_handler(message)

    # ------------------------------------------------------------------ LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH

    def fetch_offset_for_timestamp(
        self,
        tp: TopicPartition,
        timestamp: int,
        current_leader_epoch: int,
        *,
        client_request: bool,
        fetch_only_from_leader: bool,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> TimestampAndOffset:
        """Kafka's ``fetchOffsetForTimestamp``; raises ``KafkaError`` for the partition's error."""
        return self.get_partition_or_error(tp).fetch_offset_for_timestamp(
            timestamp,
            current_leader_epoch,
            client_request=client_request,
            fetch_only_from_leader=fetch_only_from_leader,
            isolation_level=isolation_level,
        )

    def last_offset_for_leader_epoch(
        self, tp: TopicPartition, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[Errors, int, int]:
        """Kafka's ``lastOffsetForLeaderEpoch``: only the leader answers, whatever the request's replica_id
        (``fetchOnlyFromLeader = true``); a follower answers NOT_LEADER_OR_FOLLOWER."""
        try:
            partition = self.get_partition_or_error(tp)
        except KafkaError as exc:
            return exc.error, -1, -1
        return partition.last_offset_for_leader_epoch(
            current_leader_epoch, leader_epoch, fetch_only_from_leader=True
        )

    # ------------------------------------------------------------------ DESCRIBE_REPLICA_STATE

    def describe_replica_state(
        self, topics: Collection[str] | None
    ) -> list[m.DescribeReplicaStateResponsePartition]:
        """Every hosted partition (of ``topics``, None: all), in topic-partition order: its role, epoch,
        offsets and ISR; a leader adds its view of each follower, a follower its fetcher's state (as Kafka's
        ``describeLogDirs`` answers with the response's own types)."""
        out: list[m.DescribeReplicaStateResponsePartition] = []
        for tp, partition in sorted(self.partitions.items()):
            if topics is not None and tp[0] not in topics:
                continue
            if partition.is_leader:
                role = "leader"
            elif partition.leader_id is not None:
                role = "follower"
            else:
                role = "none"
            entry = m.DescribeReplicaStateResponsePartition(
                topic=tp[0],
                partition=tp[1],
                role=role,
                leader_id=-1 if partition.leader_id is None else partition.leader_id,
                leader_epoch=partition.leader_epoch,
                log_start_offset=partition.log_start_offset,
                log_end_offset=partition.log_end_offset,
                high_watermark=partition.high_watermark,
                isr=list(partition.isr),
            )
            if partition.is_leader:
                entry.followers = [
                    m.DescribeReplicaStateResponseFollower(
                        broker_id=r.broker_id,
                        log_end_offset=r.log_end_offset,
                        last_caught_up_ms=r.last_caught_up_time_ms,
                    )
                    for r in partition.remote_replicas.values()
                ]
            else:
                view = self.fetcher_manager.fetch_state(tp)
                if view is not None:
                    entry.fetch_state = m.DescribeReplicaStateResponseFetchState(
                        state=view.state,
                        fetch_offset=view.fetch_offset,
                        lag=-1 if view.lag is None else view.lag,
                    )
            out.append(entry)
        return out

    # ------------------------------------------------------------------ start-up and shutdown

    def checkpoint_high_watermarks(self) -> None:
        self.log_manager.checkpoint_high_watermarks(self.high_watermarks())

    def handle_log_dir_failure(self, log_dir: str) -> None:
        """Kafka's ``handleLogDirFailure``: the partitions in ``log_dir`` stop fetching, and produce
        requests waiting on them complete with KAFKA_STORAGE_ERROR. Their requests are answered
        KAFKA_STORAGE_ERROR from now on (``get_partition_or_error``); the server tells the controller,
        which moves their leadership to other replicas."""
        offline = [tp for tp, lg in self.log_manager.logs.items() if str(lg.dir.parent) == log_dir]
        self.fetcher_manager.remove_fetcher_for_partitions(offline)
        for tp in offline:
            self._complete_delayed(tp)
        self._leadership_changed([], offline)
        log.error(
            "broker %d: %d partitions are offline after the failure of log dir %s: %s",
            self.broker_id,
            len(offline),
            log_dir,
            ", ".join(f"{t}-{p}" for t, p in sorted(offline)) or "none",
        )

    def shutdown(self) -> None:
        self.produce_purgatory.complete_all()
        self.fetch_purgatory.complete_all()
        self.delete_records_purgatory.complete_all()
        for partition in self.partitions.values():
            self.state_listener.on_offsets_changed(partition)
        self.state_listener.flush_offsets()
        self.log_manager.shutdown(self.high_watermarks())
