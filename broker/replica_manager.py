"""Kafka's ``ReplicaManager``: the partitions this broker hosts, leader and follower transitions, produce
and fetch on the leader, and the follower-side operations the replica fetchers call.

Synchronous: KafkaApis calls it on the broker's one trio thread. Responses that wait (acks=-1, long-poll
fetches) go through the purgatories, whose reaper tasks the server runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from broker.delayed import DelayedOperationPurgatory
from broker.delayed_ops import (
    DelayedFetch,
    DelayedProduce,
    FetchParams,
    FetchPartitionStatus,
    ProducePartitionStatus,
)
from broker.journal import Journal, OffsetsJournal
from broker.log_manager import LogManager
from broker.metadata_cache import BrokerEndpoint, MetadataCache, PartitionMetadata
from broker.partition import IsrChange, LeaderAndIsrState, LogReadResult, Partition
from fetcher.interface import (
    AppendResult,
    FetcherManagerLike,
    FollowerPartition,
    InitialFetchState,
    NoFetcherManager,
)
from protocol.api_keys import DEBUGGING_REPLICA_ID
from protocol.errors import Errors, KafkaError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# UPDATE_METADATA's leader for a partition being deleted (Kafka's LeaderAndIsr.LeaderDuringDelete).
LEADER_DURING_DELETE = -2
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
                min_insync_replicas=self.settings.min_insync_replicas,
                high_watermark=self._hw_checkpoint.get(tp, 0),
            )
            if self._alter_submit is not None:
                partition.isr_proposer = self._propose_isr
            self.partitions[tp] = partition
        return partition

    def observe_offsets(self, partition: Partition) -> None:
        self.offsets_journal.observe(
            partition.tp, partition.log_end_offset, partition.high_watermark, partition.log_start_offset
        )

    def high_watermarks(self) -> dict[TopicPartition, int]:
        hws = dict(self._hw_checkpoint)
        hws.update({tp: p.high_watermark for tp, p in self.partitions.items()})
        return {tp: hw for tp, hw in hws.items() if tp in self.log_manager.logs}

    # ------------------------------------------------------------------ LEADER_AND_ISR

    def become_leader_or_follower(
        self,
        controller_id: int,
        controller_epoch: int,
        states: Sequence[tuple[TopicPartition, LeaderAndIsrState]],
        live_leaders: Iterable[BrokerEndpoint],
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
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
        self.controller_epoch = controller_epoch
        self.metadata_cache.update_brokers(list(live_leaders), replace=False)
        errors: dict[TopicPartition, Errors] = {}
        to_leader: list[tuple[Partition, LeaderAndIsrState]] = []
        to_follower: list[tuple[Partition, LeaderAndIsrState]] = []
        for tp, state in states:
            existing = self.partitions.get(tp)
            current_epoch = existing.leader_epoch if existing is not None else -1
            if self.broker_id not in state.replicas:
                log.warning("broker %d is not a replica of %s-%d in %s", self.broker_id, tp[0], tp[1], state)
                errors[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if state.leader_epoch <= current_epoch:
                log.info(
                    "broker %d ignoring LEADER_AND_ISR for %s-%d: leader epoch %d is not newer than %d",
                    self.broker_id,
                    tp[0],
                    tp[1],
                    state.leader_epoch,
                    current_epoch,
                )
                errors[tp] = Errors.STALE_CONTROLLER_EPOCH
                continue
            partition = self.get_or_create_partition(tp)
            self.metadata_cache.update_partition(
                tp,
                PartitionMetadata(state.leader, state.leader_epoch, list(state.isr), list(state.replicas)),
            )
            errors[tp] = Errors.NONE
            (to_leader if state.leader == self.broker_id else to_follower).append((partition, state))
        if to_leader:
            self.make_leaders(to_leader)
        if to_follower:
            self.make_followers(to_follower)
        return Errors.NONE, errors

    def make_leaders(self, items: list[tuple[Partition, LeaderAndIsrState]]) -> None:
        self.fetcher_manager.remove_fetcher_for_partitions([p.tp for p, _ in items])
        for partition, state in items:
            partition.make_leader(state)
            self.journal.emit_partition(
                "became_leader",
                partition.tp,
                leader_epoch=state.leader_epoch,
                leader_id=self.broker_id,
                isr=list(state.isr),
                replicas=list(state.replicas),
                log_end_offset=partition.log_end_offset,
                high_watermark=partition.high_watermark,
            )
            self.journal.emit_partition(
                "epoch_assigned",
                partition.tp,
                leader_epoch=state.leader_epoch,
                start_offset=partition.leader_epoch_start_offset,
            )
            self.observe_offsets(partition)
            self._complete_delayed(partition.tp)

    def make_followers(self, items: list[tuple[Partition, LeaderAndIsrState]]) -> None:
        changed: list[tuple[Partition, LeaderAndIsrState]] = []
        for partition, state in items:
            if partition.make_follower(state):
                changed.append((partition, state))
                self.journal.emit_partition(
                    "became_follower",
                    partition.tp,
                    leader_epoch=state.leader_epoch,
                    leader_id=state.leader,
                    log_end_offset=partition.log_end_offset,
                    high_watermark=partition.high_watermark,
                )
        self.fetcher_manager.remove_fetcher_for_partitions([p.tp for p, _ in changed])
        for partition, _ in changed:
            self._complete_delayed(partition.tp)
        initial: dict[TopicPartition, InitialFetchState] = {}
        for partition, state in changed:
            leader = self.metadata_cache.alive_broker(state.leader)
            if leader is None:
                log.warning(
                    "broker %d: leader %d of %s is not known alive; not fetching yet",
                    self.broker_id,
                    state.leader,
                    partition.describe(),
                )
                continue
            lg = partition.log
            # With leader epochs, start at the LEO and let truncation find the divergence point (KIP-101);
            # without, start at the HW.
            fetch_offset = (
                lg.log_end_offset
                if lg.leader_epoch_cache.latest_epoch() is not None
                else (partition.high_watermark)
            )
            initial[partition.tp] = InitialFetchState(leader, state.leader_epoch, fetch_offset)
        if initial:
            self.fetcher_manager.add_fetcher_for_partitions(initial)

    # ------------------------------------------------------------------ STOP_REPLICA / UPDATE_METADATA

    def stop_replicas(
        self, controller_id: int, controller_epoch: int, states: Sequence[tuple[TopicPartition, int, bool]]
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        """``states``: (tp, leader_epoch, delete_partition). Kafka's epoch rules: an older leader epoch
        is FENCED_LEADER_EPOCH; -1 (no epoch), -2 (deletion sentinel) or a newer/equal one is done."""
        if controller_epoch < self.controller_epoch:
            return Errors.STALE_CONTROLLER_EPOCH, {tp: Errors.STALE_CONTROLLER_EPOCH for tp, _, _ in states}
        self.controller_epoch = controller_epoch
        errors: dict[TopicPartition, Errors] = {}
        to_stop: list[tuple[TopicPartition, bool]] = []
        for tp, leader_epoch, delete in states:
            partition = self.partitions.get(tp)
            if partition is None:
                errors[tp] = Errors.NONE
                to_stop.append((tp, delete))
                continue
            if leader_epoch in (-1, -2) or leader_epoch >= partition.leader_epoch:
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
                self._hw_checkpoint.pop(tp, None)
                self.metadata_cache.remove_partition(tp)
                self.offsets_journal.forget(tp)
            elif partition is not None:
                self._hw_checkpoint[tp] = partition.high_watermark
            self.journal.emit_partition("partition_stopped", tp, deleted=delete)
        return Errors.NONE, errors

    def update_metadata(
        self,
        controller_epoch: int,
        brokers: list[BrokerEndpoint],
        partitions: list[tuple[TopicPartition, PartitionMetadata]],
    ) -> Errors:
        if controller_epoch < self.controller_epoch:
            return Errors.STALE_CONTROLLER_EPOCH
        self.controller_epoch = controller_epoch
        self.metadata_cache.update_brokers(brokers, replace=True)
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
        self, tp: TopicPartition, status: FetchPartitionStatus, from_follower: bool
    ) -> int | None:
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
            error=_error_name(error_code),
            reason=message,
            leader_id=None if partition is None else partition.leader_id,
            leader_epoch=None if partition is None else partition.leader_epoch,
        )

    def on_partition_failed(self, tp: TopicPartition, reason: str) -> None:
        self.journal.emit_partition(
            "fetch_error", tp, error_code=int(Errors.FENCED_LEADER_EPOCH), reason=reason
        )

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

    def host_initial_leaders(self, tps: Iterable[TopicPartition]) -> None:
        """An unmanaged broker told to lead partitions alone from start-up (``initial.leader.partitions``)."""
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
            self.journal.emit_partition(
                "became_leader",
                tp,
                leader_epoch=epoch,
                leader_id=self.broker_id,
                isr=[self.broker_id],
                replicas=[self.broker_id],
                log_end_offset=partition.log_end_offset,
                high_watermark=partition.high_watermark,
            )
            self.observe_offsets(partition)

    def checkpoint_high_watermarks(self) -> None:
        self.log_manager.checkpoint_high_watermarks(self.high_watermarks())

    def shutdown(self) -> None:
        self.produce_purgatory.complete_all()
        self.fetch_purgatory.complete_all()
        for partition in self.partitions.values():
            self.observe_offsets(partition)
        self.offsets_journal.flush()
        self.log_manager.shutdown(self.high_watermarks())


def _error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


class FollowerPartitionView:
    """A follower partition as the replica fetcher sees it (``fetcher.interface.FollowerPartition``);
    journals truncations and offset changes."""

    def __init__(self, rm: ReplicaManager, partition: Partition) -> None:
        self._rm = rm
        self._p = partition

    @property
    def log_end_offset(self) -> int:
        return self._p.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._p.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._p.high_watermark

    @property
    def leader_epoch(self) -> int:
        return self._p.leader_epoch

    def latest_epoch(self) -> int | None:
        return self._p.log.leader_epoch_cache.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._p.log.leader_epoch_cache.end_offset_for(epoch, self._p.log_end_offset)

    def _journal_truncation(self, before_leo: int, before_hw: int, offset: int, reason: str) -> None:
        p = self._p
        self._rm.journal.emit_partition(
            "truncated",
            p.tp,
            truncate_to=offset,
            reason=reason,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            log_end_offset_before=before_leo,
            log_end_offset=p.log_end_offset,
            high_watermark_before=before_hw,
            high_watermark=p.high_watermark,
            latest_epoch=self.latest_epoch(),
        )
        if offset < before_hw:
            log.warning(
                "broker %d: truncating %s to %d below its high watermark %d (%s)",
                self._rm.broker_id,
                p.describe(),
                offset,
                before_hw,
                reason,
            )
        self._rm.observe_offsets(p)

    def truncate_to(self, offset: int, reason: str) -> None:
        before_leo, before_hw = self._p.log_end_offset, self._p.high_watermark
        self._p.truncate_to(offset)
        self._journal_truncation(before_leo, before_hw, offset, reason)

    def truncate_fully_and_start_at(self, offset: int, reason: str) -> None:
        before_leo, before_hw = self._p.log_end_offset, self._p.high_watermark
        self._p.truncate_fully_and_start_at(offset)
        self._journal_truncation(before_leo, before_hw, offset, reason)

    def append_as_follower(self, records: bytes) -> AppendResult | None:
        info = self._p.append_records_to_follower(records)
        self._rm.observe_offsets(self._p)
        return AppendResult(info.first_offset, info.last_offset, info.num_records, info.valid_bytes)

    def update_high_watermark(self, leader_hw: int) -> int:
        hw = self._p.update_follower_high_watermark(leader_hw)
        self._rm.observe_offsets(self._p)
        return hw

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int) -> None:
        if self._p.log_start_offset < leader_log_start_offset <= self._p.high_watermark:
            self._p.maybe_increment_log_start_offset(leader_log_start_offset)
            self._rm.observe_offsets(self._p)
