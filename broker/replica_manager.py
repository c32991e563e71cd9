"""Kafka's ``ReplicaManager``: the partitions this broker hosts, leader and follower transitions, produce
and fetch on the leader, and the follower-side operations the replica fetchers call.

Synchronous: KafkaApis calls it on the broker's one trio thread. Responses that wait (acks=-1, long-poll
fetches) go through the purgatories, whose reaper tasks the server runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from broker import state_changes
from broker.delayed import DelayedOperationPurgatory
from broker.delayed_ops import (
    DelayedFetch,
    DelayedProduce,
    FetchParams,
    FetchPartitionStatus,
    ProducePartitionStatus,
)
from broker.follower_view import FollowerPartitionView
from broker.journal import Journal, OffsetsJournal
from broker.log_manager import LogManager
from broker.metadata_cache import MetadataCache, PartitionMetadata
from broker.partition import IsrChange, LeaderAndIsrState, LogReadResult, Partition
from broker.topic_configs import TopicConfigFetcher
from fetcher.interface import (
    FetcherManagerLike,
    FollowerPartition,
    NoFetcherManager,
)
from protocol.api_keys import DEBUGGING_REPLICA_ID
from protocol.common import BrokerEndpoint, TopicPartition, error_name
from protocol.errors import Errors, KafkaError

log = logging.getLogger(__name__)

AlterCallback = Callable[[TopicPartition, Errors, int, list[int], int], None]
AlterSubmit = Callable[[TopicPartition, int, list[int], int, AlterCallback], bool]


@dataclass(frozen=True, slots=True)
class ReplicaManagerSettings:
    broker_id: int
    replica_lag_time_max_ms: int
    min_insync_replicas: int
    max_message_bytes: int


@dataclass(slots=True)
class FetchPartitionResult:
    error: Errors
    high_watermark: int
    log_start_offset: int
    records: bytes
    error_message: str = ""


class ReplicaManager:
    def __init__(
        self,
        settings: ReplicaManagerSettings,
        log_manager: LogManager,
        metadata_cache: MetadataCache,
        journal: Journal,
        *,
        clock_ms: Callable[[], int],
        produce_purgatory: DelayedOperationPurgatory,
        fetch_purgatory: DelayedOperationPurgatory,
    ) -> None:
        self.settings = settings
        self.broker_id = settings.broker_id
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.journal = journal
        self.offsets_journal = OffsetsJournal(journal)
        self.clock_ms = clock_ms
        self.produce_purgatory = produce_purgatory
        self.fetch_purgatory = fetch_purgatory
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = 0
        self.fetcher_manager: FetcherManagerLike = NoFetcherManager()
        self._hw_checkpoint = log_manager.high_watermarks()
        # Called with ISR changes a leader made (unmanaged) or the controller committed (managed).
        self.isr_change_listener: Callable[[Partition, IsrChange], None] | None = None
        # Managed mode: ALTER_PARTITION submission (AlterPartitionManager.submit) and the broker epoch.
        self._alter_submit: AlterSubmit | None = None
        # Topic-level overrides learnt from the controller (managed mode): min.insync.replicas per topic.
        self.topic_min_isr: dict[str, int] = {}
        self.topic_config_fetcher: TopicConfigFetcher | None = None
        self.broker_epoch: Callable[[], int] = lambda: -1

    # ------------------------------------------------------------------ partitions

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is not None:
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
            )
            if self._alter_submit is not None:
                partition.isr_proposer = self._propose_isr
            self.partitions[tp] = partition
            if self.topic_config_fetcher is not None:
                self.topic_config_fetcher.want(tp[0])
        return partition

    def observe_offsets(self, partition: Partition) -> None:
        self.offsets_journal.observe(
            partition.tp, partition.log_end_offset, partition.high_watermark, partition.log_start_offset
        )

    def high_watermarks(self) -> dict[TopicPartition, int]:
        hws = dict(self._hw_checkpoint)
        hws.update({tp: p.high_watermark for tp, p in self.partitions.items()})
        return {tp: hw for tp, hw in hws.items() if tp in self.log_manager.logs}

    # ------------------------------------------------------------------ controller requests (state_changes)

    def become_leader_or_follower(
        self,
        controller_id: int,
        controller_epoch: int,
        states: Sequence[tuple[TopicPartition, LeaderAndIsrState]],
        live_leaders: Iterable[BrokerEndpoint],
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        return state_changes.become_leader_or_follower(
            self, controller_id, controller_epoch, states, live_leaders
        )

    def stop_replicas(
        self, controller_id: int, controller_epoch: int, states: Sequence[tuple[TopicPartition, int, bool]]
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        return state_changes.stop_replicas(self, controller_id, controller_epoch, states)

    def update_metadata(
        self,
        controller_epoch: int,
        brokers: list[BrokerEndpoint],
        partitions: list[tuple[TopicPartition, PartitionMetadata]],
    ) -> Errors:
        return state_changes.update_metadata(self, controller_epoch, brokers, partitions)

    def host_initial_leaders(self, tps: Iterable[TopicPartition]) -> None:
        """An unmanaged broker told to lead partitions alone from start-up (``initial.leader.partitions``)."""
        state_changes.host_initial_leaders(self, tps)

    # ------------------------------------------------------------------ produce

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytes],
        respond: Callable[[dict[TopicPartition, ProducePartitionStatus]], None],
    ) -> None:
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for tp, records in entries.items():
            try:
                partition = self.get_partition_or_error(tp)
                info = partition.append_records_to_leader(records, required_acks)
            except KafkaError as exc:
                statuses[tp] = ProducePartitionStatus(-1, -1, -1, exc.error, exc.message, acks_pending=False)
                continue
            statuses[tp] = ProducePartitionStatus(
                info.last_offset + 1,
                info.first_offset,
                partition.log_start_offset,
                acks_pending=required_acks == -1,
            )
            self.observe_offsets(partition)
            # New data: wake fetches waiting on this partition (followers and, if the HW moved, consumers).
            self.fetch_purgatory.check_and_complete(tp)
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
        return partition.check_enough_replicas_reached(required_offset)

    # ------------------------------------------------------------------ fetch

    def fetch_messages(
        self, params: FetchParams, respond: Callable[[dict[TopicPartition, FetchPartitionResult]], None]
    ) -> None:
        """Reads now; answers now if there is an error, enough data or no wait, else parks a DelayedFetch."""
        results = self._read_from_local_log(params)
        total = sum(len(r.records) for r in results.values())
        errors = any(r.error != Errors.NONE for r in results.values())
        if params.max_wait_ms <= 0 or not params.partitions or total >= params.min_bytes or errors:
            respond(results)
            return

        def complete(p: FetchParams) -> None:
            respond(self._read_from_local_log(p))

        op = DelayedFetch(params, self._available_for_delayed_fetch, complete)
        self.fetch_purgatory.try_complete_else_watch(op, list(params.partitions))

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
        end = partition.log_end_offset if from_follower else partition.high_watermark
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
                )
            except KafkaError as exc:
                hw = partition.high_watermark if partition is not None else -1
                lso = partition.log_start_offset if partition is not None else -1
                results[tp] = FetchPartitionResult(exc.error, hw, lso, b"", exc.message)
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
            results[tp] = FetchPartitionResult(
                Errors.NONE, partition.high_watermark, read.log_start_offset, read.records
            )
        return results

    # ------------------------------------------------------------------ ISR and HW events

    def _on_hw_moved(self, partition: Partition) -> None:
        self.observe_offsets(partition)
        self.produce_purgatory.check_and_complete(partition.tp)
        self.fetch_purgatory.check_and_complete(partition.tp)

    def _on_isr_change(self, partition: Partition, change: IsrChange) -> None:
        self.journal.emit_partition(
            "isr_changed",
            partition.tp,
            leader_epoch=partition.leader_epoch,
            old_isr=change.old_isr,
            isr=change.new_isr,
            reason=change.reason,
            high_watermark=partition.high_watermark,
            log_end_offset=partition.log_end_offset,
        )
        meta = self.metadata_cache.partitions.get(partition.tp)
        if meta is not None:
            meta.isr = list(change.new_isr)
        if self.isr_change_listener is not None:
            self.isr_change_listener(partition, change)
        self.produce_purgatory.check_and_complete(partition.tp)

    # ------------------------------------------------------------------ managed mode: topic configs

    def apply_topic_configs(self, topic: str, configs: dict[str, str]) -> None:
        """A topic's overrides from the controller: ``min.insync.replicas`` for its partitions here."""
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
                if partition.maybe_increment_leader_hw():
                    self._on_hw_moved(partition)

    def forget_topic(self, topic: str) -> None:
        """The topic's last partition here was deleted."""
        self.topic_min_isr.pop(topic, None)
        if self.topic_config_fetcher is not None:
            self.topic_config_fetcher.forget(topic)

    # ------------------------------------------------------------------ managed mode: ALTER_PARTITION

    def enable_alter_partition(self, submit: AlterSubmit) -> None:
        """From now on, leaders propose ISR changes to the controller instead of applying them."""
        self._alter_submit = submit
        for partition in self.partitions.values():
            partition.isr_proposer = self._propose_isr

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
        if error != Errors.NONE or not partition.is_leader or leader_epoch != partition.leader_epoch:
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
        self.fetch_purgatory.check_and_complete(tp)

    # ------------------------------------------------------------------ the fetchers' view (follower side)

    def follower_partition(self, tp: TopicPartition) -> FollowerPartition | None:
        partition = self.partitions.get(tp)
        if partition is None or partition.is_leader or partition.leader_id is None:
            return None
        return FollowerPartitionView(self, partition)

    def on_fetch_error(self, tp: TopicPartition, error_code: int, message: str) -> None:
        partition = self.partitions.get(tp)
        self.journal.emit_partition(
            "fetch_error",
            tp,
            error_code=error_code,
            error=error_name(error_code),
            reason=message,
            leader_id=None if partition is None else partition.leader_id,
            leader_epoch=None if partition is None else partition.leader_epoch,
        )

    def on_partition_failed(self, tp: TopicPartition, error_code: int, message: str) -> None:
        self.on_fetch_error(tp, error_code, f"partition marked failed: {message}")

    # ------------------------------------------------------------------ OFFSET_FOR_LEADER_EPOCH

    def last_offset_for_leader_epoch(
        self, tp: TopicPartition, current_leader_epoch: int, leader_epoch: int, fetch_only_from_leader: bool
    ) -> tuple[Errors, int, int]:
        try:
            partition = self.get_partition_or_error(tp)
        except KafkaError as exc:
            return exc.error, -1, -1
        return partition.last_offset_for_leader_epoch(
            current_leader_epoch, leader_epoch, fetch_only_from_leader
        )

    # ------------------------------------------------------------------ start-up and shutdown

    def checkpoint_high_watermarks(self) -> None:
        self.log_manager.checkpoint_high_watermarks(self.high_watermarks())

    def shutdown(self) -> None:
        self.produce_purgatory.complete_all()
        self.fetch_purgatory.complete_all()
        for partition in self.partitions.values():
            self.observe_offsets(partition)
        self.offsets_journal.flush()
        self.log_manager.shutdown(self.high_watermarks())
