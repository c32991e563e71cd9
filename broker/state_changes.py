"""How a broker's replicas change state on the controller's word: LEADER_AND_ISR, STOP_REPLICA and
UPDATE_METADATA (Kafka's ``ReplicaManager.becomeLeaderOrFollower``, ``makeLeaders``, ``makeFollowers``,
``stopReplicas``, ``maybeUpdateMetadataCache``). Functions of the replica manager, kept apart from its data
path (produce, fetch, HW and ISR)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from broker.metadata_cache import PartitionMetadata
from broker.partition import LeaderAndIsrState, Partition
from protocol.common import LEADER_DURING_DELETE, BrokerEndpoint, TopicPartition
from protocol.errors import Errors
from protocol.replication import InitialFetchState

if TYPE_CHECKING:
    from broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


def become_leader_or_follower(
    rm: ReplicaManager,
    controller_id: int,
    controller_epoch: int,
    states: Sequence[tuple[TopicPartition, LeaderAndIsrState]],
    live_leaders: Iterable[BrokerEndpoint],
) -> tuple[Errors, dict[TopicPartition, Errors]]:
    if controller_epoch < rm.controller_epoch:
        log.warning(
            "broker %d ignoring LEADER_AND_ISR from controller %d with epoch %d: current controller "
            "epoch is %d",
            rm.broker_id,
            controller_id,
            controller_epoch,
            rm.controller_epoch,
        )
        return Errors.STALE_CONTROLLER_EPOCH, {tp: Errors.STALE_CONTROLLER_EPOCH for tp, _ in states}
    rm.controller_epoch = controller_epoch
    rm.metadata_cache.update_brokers(list(live_leaders), replace=False)
    errors: dict[TopicPartition, Errors] = {}
    to_leader: list[tuple[Partition, LeaderAndIsrState]] = []
    to_follower: list[tuple[Partition, LeaderAndIsrState]] = []
    for tp, state in states:
        existing = rm.partitions.get(tp)
        current_epoch = existing.leader_epoch if existing is not None else -1
        if rm.broker_id not in state.replicas:
            log.warning("broker %d is not a replica of %s-%d in %s", rm.broker_id, tp[0], tp[1], state)
            errors[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
            continue
        if state.leader_epoch <= current_epoch:
            log.info(
                "broker %d ignoring LEADER_AND_ISR for %s-%d: leader epoch %d is not newer than %d",
                rm.broker_id,
                tp[0],
                tp[1],
                state.leader_epoch,
                current_epoch,
            )
            errors[tp] = Errors.STALE_CONTROLLER_EPOCH
            continue
        partition = rm.get_or_create_partition(tp)
        rm.metadata_cache.update_partition(
            tp,
            PartitionMetadata(state.leader, state.leader_epoch, list(state.isr), list(state.replicas)),
        )
        errors[tp] = Errors.NONE
        (to_leader if state.leader == rm.broker_id else to_follower).append((partition, state))
    if to_leader:
        make_leaders(rm, to_leader)
    if to_follower:
        make_followers(rm, to_follower)
    return Errors.NONE, errors


def make_leaders(rm: ReplicaManager, items: list[tuple[Partition, LeaderAndIsrState]]) -> None:
    rm.fetcher_manager.remove_fetcher_for_partitions([p.tp for p, _ in items])
    for partition, state in items:
        partition.make_leader(state)
        rm.journal.emit_partition(
            "became_leader",
            partition.tp,
            leader_epoch=state.leader_epoch,
            leader_id=rm.broker_id,
            isr=list(state.isr),
            replicas=list(state.replicas),
            log_end_offset=partition.log_end_offset,
            high_watermark=partition.high_watermark,
        )
        rm.journal.emit_partition(
            "epoch_assigned",
            partition.tp,
            leader_epoch=state.leader_epoch,
            start_offset=partition.leader_epoch_start_offset,
        )
        rm.observe_offsets(partition)
        rm._complete_delayed(partition.tp)


def make_followers(rm: ReplicaManager, items: list[tuple[Partition, LeaderAndIsrState]]) -> None:
    changed: list[tuple[Partition, LeaderAndIsrState]] = []
    for partition, state in items:
        if partition.make_follower(state):
            changed.append((partition, state))
            rm.journal.emit_partition(
                "became_follower",
                partition.tp,
                leader_epoch=state.leader_epoch,
                leader_id=state.leader,
                log_end_offset=partition.log_end_offset,
                high_watermark=partition.high_watermark,
            )
    rm.fetcher_manager.remove_fetcher_for_partitions([p.tp for p, _ in changed])
    for partition, _ in changed:
        rm._complete_delayed(partition.tp)
    initial: dict[TopicPartition, InitialFetchState] = {}
    for partition, state in changed:
        leader = rm.metadata_cache.alive_broker(state.leader)
        if leader is None:
            log.warning(
                "broker %d: leader %d of %s is not known alive; not fetching yet",
                rm.broker_id,
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
        rm.fetcher_manager.add_fetcher_for_partitions(initial)


def stop_replicas(
    rm: ReplicaManager,
    controller_id: int,
    controller_epoch: int,
    states: Sequence[tuple[TopicPartition, int, bool]],
) -> tuple[Errors, dict[TopicPartition, Errors]]:
    """``states``: (tp, leader_epoch, delete_partition). Kafka's epoch rules: an older leader epoch
    is FENCED_LEADER_EPOCH; -1 (no epoch), -2 (deletion sentinel) or a newer/equal one is done."""
    if controller_epoch < rm.controller_epoch:
        return Errors.STALE_CONTROLLER_EPOCH, {tp: Errors.STALE_CONTROLLER_EPOCH for tp, _, _ in states}
    rm.controller_epoch = controller_epoch
    errors: dict[TopicPartition, Errors] = {}
    to_stop: list[tuple[TopicPartition, bool]] = []
    for tp, leader_epoch, delete in states:
        partition = rm.partitions.get(tp)
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
                rm.broker_id,
                partition.describe(),
                leader_epoch,
                partition.leader_epoch,
            )
            errors[tp] = Errors.FENCED_LEADER_EPOCH
    rm.fetcher_manager.remove_fetcher_for_partitions([tp for tp, _ in to_stop])
    for tp, delete in to_stop:
        partition = rm.partitions.pop(tp, None)
        if partition is not None:
            rm._complete_delayed(tp)
        if delete:
            rm.log_manager.delete_log(tp)
            if not any(t == tp[0] for t, _ in rm.partitions):
                rm.forget_topic(tp[0])
            rm._hw_checkpoint.pop(tp, None)
            rm.metadata_cache.remove_partition(tp)
            rm.offsets_journal.forget(tp)
        elif partition is not None:
            rm._hw_checkpoint[tp] = partition.high_watermark
        rm.journal.emit_partition("partition_stopped", tp, deleted=delete)
    return Errors.NONE, errors


def update_metadata(
    rm: ReplicaManager,
    controller_epoch: int,
    brokers: list[BrokerEndpoint],
    partitions: list[tuple[TopicPartition, PartitionMetadata]],
) -> Errors:
    if controller_epoch < rm.controller_epoch:
        return Errors.STALE_CONTROLLER_EPOCH
    rm.controller_epoch = controller_epoch
    rm.metadata_cache.update_brokers(brokers, replace=True)
    for tp, meta in partitions:
        if meta.leader == LEADER_DURING_DELETE:
            rm.metadata_cache.remove_partition(tp)
        else:
            rm.metadata_cache.update_partition(tp, meta)
    return Errors.NONE


def host_initial_leaders(rm: ReplicaManager, tps: Iterable[TopicPartition]) -> None:
    """An unmanaged broker told to lead partitions alone from start-up (``initial.leader.partitions``)."""
    for tp in tps:
        partition = rm.get_or_create_partition(tp)
        latest = partition.log.leader_epoch_cache.latest_epoch()
        epoch = 0 if latest is None else latest
        partition.leader_epoch = epoch - 1
        partition.make_leader(LeaderAndIsrState(rm.broker_id, epoch, [rm.broker_id], [rm.broker_id]))
        rm.metadata_cache.update_partition(
            tp, PartitionMetadata(rm.broker_id, epoch, [rm.broker_id], [rm.broker_id])
        )
        rm.journal.emit_partition(
            "became_leader",
            tp,
            leader_epoch=epoch,
            leader_id=rm.broker_id,
            isr=[rm.broker_id],
            replicas=[rm.broker_id],
            log_end_offset=partition.log_end_offset,
            high_watermark=partition.high_watermark,
        )
        rm.observe_offsets(partition)
