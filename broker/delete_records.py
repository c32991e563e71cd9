"""DELETE_RECORDS (21), Kafka's ``handleDeleteRecordsRequest`` / ``ReplicaManager.deleteRecords``: a client
moves the log start offset of partitions this broker leads (docs/clients.md).

For each partition (Delete on its topic, else TOPIC_AUTHORIZATION_FAILED): the leader checks it may
(``cleanup.policy`` must hold ``delete``, else POLICY_VIOLATION; not an internal topic, else
INVALID_TOPIC_EXCEPTION), takes offset -1 as its high watermark, refuses a negative offset or one beyond the
HW with OFFSET_OUT_OF_RANGE, moves its log start (segments wholly below it go), journals and checkpoints it
(``log-start-offset-checkpoint``). Followers follow through the ``log_start_offset`` of their FETCH
responses. The answer waits (Kafka's ``DelayedDeleteRecords``) until the partition's low watermark, the
least log start offset of the leader and of its replicas on live brokers, reaches the offset, or the request's
``timeout_ms`` passes (REQUEST_TIMED_OUT); ``low_watermark`` is that low watermark.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.delayed import DelayedOperation
from broker.partition import Partition
from broker.replica_manager import ReplicaManager
from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys
from protocol.common import TopicPartition
from protocol.errors import Errors, KafkaError
from protocol.schema import to_body
from server.auth_helper import AuthHelper
from server.request_channel import Request
from server.security.acl import AclOperation

log = logging.getLogger(__name__)

# Kafka's DeleteRecordsRequest.HIGH_WATERMARK: delete up to the partition's high watermark.
HIGH_WATERMARK = -1
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(slots=True)
class DeleteRecordsStatus:
    required_offset: int
    low_watermark: int
    error: Errors = Errors.NONE
    acks_pending: bool = False


def low_watermark_if_leader(replica_manager: ReplicaManager, partition: Partition) -> int:
    """Kafka's ``Partition.lowWatermarkIfLeader``: the least log start offset of the leader's log and of the
    replicas on live brokers (a replica that has not fetched in this leader epoch counts as -1)."""
    if not partition.is_leader:
        raise KafkaError(
            Errors.NOT_LEADER_OR_FOLLOWER,
            f"broker {replica_manager.broker_id} does not lead {partition.tp[0]}-{partition.tp[1]}",
        )
    low = partition.log_start_offset
    cache = replica_manager.metadata_cache
    for replica in partition.remote_replicas.values():
        if cache.alive_broker(replica.broker_id) is not None and replica.log_start_offset < low:
            low = replica.log_start_offset
    return low


def delete_records_on_leader(
    replica_manager: ReplicaManager, tp: TopicPartition, offset: int
) -> tuple[int, int]:
    """Kafka's ``Partition.deleteRecordsOnLeader``: moves the log start; returns (the offset asked, after
    -1 became the HW; the low watermark). Raises ``KafkaError`` with Kafka's code."""
    if tp[0] in INTERNAL_TOPICS:
        raise KafkaError(Errors.INVALID_TOPIC_EXCEPTION, f"Cannot delete data of internal topic {tp[0]}")
    partition = replica_manager.get_partition_or_error(tp)
    if not partition.is_leader:
        raise KafkaError(
            Errors.NOT_LEADER_OR_FOLLOWER,
            f"Leader not local for partition {tp[0]}-{tp[1]} on broker {replica_manager.broker_id}",
        )
    if not partition.log.config.delete:
        raise KafkaError(
            Errors.POLICY_VIOLATION,
            f"Records of partition {tp[0]}-{tp[1]} can not be deleted due to the configured policy",
        )
    converted = partition.high_watermark if offset == HIGH_WATERMARK else offset
    if converted < 0:
        raise KafkaError(
            Errors.OFFSET_OUT_OF_RANGE, f"The offset {converted} for partition {tp[0]}-{tp[1]} is not valid"
        )
    if converted > partition.high_watermark:
        raise KafkaError(
            Errors.OFFSET_OUT_OF_RANGE,
            f"Cannot increment the log start offset of {tp[0]}-{tp[1]} to {converted}: beyond the high "
            f"watermark {partition.high_watermark}",
        )
    if partition.maybe_increment_log_start_offset(converted):
        log.info(
            "broker %d: DeleteRecords moved the log start offset of %s-%d to %d",
            replica_manager.broker_id,
            tp[0],
            tp[1],
            partition.log_start_offset,
        )
        replica_manager.state_listener.on_offsets_changed(partition)
        replica_manager.log_manager.checkpoint_log_start_offsets()
    return converted, low_watermark_if_leader(replica_manager, partition)


class DelayedDeleteRecords(DelayedOperation):
    """Kafka's ``DelayedDeleteRecords``: done when each partition's low watermark reached its offset."""

    def __init__(
        self,
        delay_ms: int,
        statuses: dict[TopicPartition, DeleteRecordsStatus],
        replica_manager: ReplicaManager,
        respond: Callable[[dict[TopicPartition, DeleteRecordsStatus]], None],
    ) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.replica_manager = replica_manager
        self.respond = respond
        for status in statuses.values():
            if status.error == Errors.NONE:
                # cleared when the low watermark is reached
                status.acks_pending = True
                status.error = Errors.REQUEST_TIMED_OUT

    def try_complete(self) -> bool:
        for tp, status in self.statuses.items():
            if not status.acks_pending:
                continue
            partition = self.replica_manager.partitions.get(tp)
            try:
                if partition is None:
                    raise KafkaError(Errors.NOT_LEADER_OR_FOLLOWER, "no longer hosted")
                low = low_watermark_if_leader(self.replica_manager, partition)
            except KafkaError as exc:
                status.acks_pending = False
                status.error = exc.error
                status.low_watermark = -1
                continue
            if low >= status.required_offset:
                status.acks_pending = False
                status.error = Errors.NONE
                status.low_watermark = low
        if any(s.acks_pending for s in self.statuses.values()):
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        self.respond(self.statuses)


class DeleteRecordsApis:
    def __init__(self, replica_manager: ReplicaManager, auth: AuthHelper) -> None:
        self.replica_manager = replica_manager
        self.auth = auth

    def handlers(self) -> dict[int, Callable[[Request, Any], None]]:
        return {ApiKeys.DELETE_RECORDS: self.handle_delete_records}

    def handle_delete_records(self, request: Request, req: cm.DeleteRecordsRequest) -> None:
        rm = self.replica_manager
        order: list[TopicPartition] = []
        offsets: dict[TopicPartition, int] = {}
        for topic in req.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if tp not in offsets:
                    order.append(tp)
                offsets[tp] = p.offset
        allowed = self.auth.authorized_topics(request, AclOperation.DELETE, {tp[0] for tp in order})
        refused: dict[TopicPartition, DeleteRecordsStatus] = {}
        statuses: dict[TopicPartition, DeleteRecordsStatus] = {}
        for tp in order:
            if tp[0] not in allowed:
                refused[tp] = DeleteRecordsStatus(-1, -1, Errors.TOPIC_AUTHORIZATION_FAILED)
            elif tp not in rm.partitions and not rm.metadata_cache.contains(tp):
                refused[tp] = DeleteRecordsStatus(-1, -1, Errors.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                try:
                    required, low = delete_records_on_leader(rm, tp, offsets[tp])
                    statuses[tp] = DeleteRecordsStatus(required, low)
                except KafkaError as exc:
                    log.info("broker %d: DeleteRecords on %s-%d: %s", rm.broker_id, tp[0], tp[1], exc.message)
                    statuses[tp] = DeleteRecordsStatus(-1, -1, exc.error)

        def respond(done: dict[TopicPartition, DeleteRecordsStatus]) -> None:
            everything = {**done, **refused}
            request.complete(to_body(_response(order, everything)))

        if not any(s.error == Errors.NONE for s in statuses.values()):
            respond(statuses)
            return
        op = DelayedDeleteRecords(req.timeout_ms, statuses, rm, respond)
        rm.delete_records_purgatory.try_complete_else_watch(
            op, [tp for tp, s in statuses.items() if s.acks_pending]
        )


def _response(
    order: list[TopicPartition], statuses: dict[TopicPartition, DeleteRecordsStatus]
) -> cm.DeleteRecordsResponse:
    topics: dict[str, cm.DeleteRecordsResponseTopic] = {}
    for tp in order:
        status = statuses[tp]
        topic = topics.setdefault(tp[0], cm.DeleteRecordsResponseTopic(name=tp[0]))
        topic.partitions.append(
            cm.DeleteRecordsResponsePartition(
                partition_index=tp[1], low_watermark=status.low_watermark, error_code=int(status.error)
            )
        )
    return cm.DeleteRecordsResponse(topics=list(topics.values()))
