"""The partition side of transactions (docs/transactions.md): WRITE_TXN_MARKERS and DESCRIBE_PRODUCERS,
dispatched by ``KafkaApis``.

WRITE_TXN_MARKERS (Kafka's ``handleWriteTxnMarkersRequest``): for each marker, an end-transaction control
batch (``protocol.control_records``) with the marker's producer id and epoch is appended to each named
partition this broker leads, through the produce path with acks=all and ``AppendOrigin.COORDINATOR`` (the
control bit allowed, epochs checked: INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED); each
partition is answered once the marker is committed or with its error (UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT ...). The request is answered when every
marker's appends are. Listeners added with :meth:`TxnMarkerApis.add_marker_listener` hear of every marker
written (the group coordinator completes a transaction's offsets on ``__consumer_offsets`` that way).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Coroutine
from typing import Any

from broker.delayed_ops import ProducePartitionStatus
from broker.replica_manager import ReplicaManager
from protocol import txn_marker_messages as tm
from protocol.api_keys import ApiKeys
from protocol.common import TopicPartition
from protocol.control_records import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
from protocol.errors import Errors, KafkaError
from protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    BATCH_LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_FLAG_MASK,
)
from protocol.schema import to_body
from server.auth_helper import AuthHelper
from server.request_channel import Request
from server.security.acl import AclOperation
from storage.producer_state_entry import AppendOrigin

log = logging.getLogger(__name__)

Handler = Callable[[Request, Any], Coroutine[Any, Any, None] | None]
# (producer_id, committed, the partitions whose marker is written): after a marker's appends complete.
MarkerListener = Callable[[int, bool, list[TopicPartition]], None]

_ATTRIBUTES = struct.Struct(">h")
_BATCH_LENGTH = struct.Struct(">i")


def has_transactional_batch(records: bytes) -> bool:
    """Whether any batch of a PRODUCE's ``records`` has the transactional bit (Kafka's
    ``RequestUtils.flag``). Only well-framed batches count (magic 2, a length within the bytes): what does
    not frame is the log validation's to refuse (CORRUPT_MESSAGE)."""
    pos, end = 0, len(records)
    while pos + BATCH_HEADER_SIZE <= end:
        length = _BATCH_LENGTH.unpack_from(records, pos + BATCH_LENGTH_OFFSET)[0]
        if (
            records[pos + MAGIC_OFFSET] != MAGIC
            or length < MIN_BATCH_LENGTH
            or pos + LOG_OVERHEAD + length > end
        ):
            return False
        if _ATTRIBUTES.unpack_from(records, pos + ATTRIBUTES_OFFSET)[0] & TRANSACTIONAL_FLAG_MASK:
            return True
        pos += LOG_OVERHEAD + length
    return False


# Kafka's request.timeout.ms default: how long a marker's acks=all append may wait for the ISR.
DEFAULT_MARKER_TIMEOUT_MS = 30_000


class TxnMarkerApis:
    def __init__(
        self,
        replica_manager: ReplicaManager,
        auth: AuthHelper,
        *,
        timeout_ms: int = DEFAULT_MARKER_TIMEOUT_MS,
    ) -> None:
        self.replica_manager = replica_manager
        self.auth = auth
        self.timeout_ms = timeout_ms
        self._listeners: list[MarkerListener] = []

    def handlers(self) -> dict[int, Handler]:
        return {
            ApiKeys.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            ApiKeys.DESCRIBE_PRODUCERS: self.handle_describe_producers,
        }

    def add_marker_listener(self, listener: MarkerListener) -> None:
        """``listener`` hears of each marker's successful appends (before the request is answered)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ WRITE_TXN_MARKERS

    def handle_write_txn_markers(self, request: Request, req: tm.WriteTxnMarkersRequest) -> None:
        results: list[dict[TopicPartition, Errors]] = [{} for _ in req.markers]
        pending = [len(req.markers)]

        def answer() -> None:
            markers = []
            for marker, errors in zip(req.markers, results, strict=True):
                topics: dict[str, tm.WriteTxnMarkersResponseTopic] = {}
                for (topic, partition), error in errors.items():
                    out = topics.setdefault(topic, tm.WriteTxnMarkersResponseTopic(name=topic))
                    out.partitions.append(
                        tm.WriteTxnMarkersResponsePartition(partition_index=partition, error_code=int(error))
                    )
                markers.append(
                    tm.WriteTxnMarkersResponseMarker(
                        producer_id=marker.producer_id, topics=list(topics.values())
                    )
                )
            request.complete(to_body(tm.WriteTxnMarkersResponse(markers=markers)))

        def one_done() -> None:
            pending[0] -= 1
            if pending[0] == 0:
                answer()

        if not req.markers:
            answer()
            return
        for i, marker in enumerate(req.markers):
            self._write_marker(marker, results[i], one_done)

    def _write_marker(
        self,
        marker: tm.WriteTxnMarkersRequestMarker,
        errors: dict[TopicPartition, Errors],
        done: Callable[[], None],
    ) -> None:
        control_type = ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT
        end_marker = EndTransactionMarker(control_type, marker.coordinator_epoch)
        entries: dict[TopicPartition, bytes] = {}
        for topic in marker.topics:
            for index in topic.partition_indexes:
                tp = (topic.name, index)
                errors[tp] = Errors.NONE
                if (
                    not self.replica_manager.metadata_cache.contains(tp)
                    and tp not in self.replica_manager.partitions
                ):
                    errors[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                entries[tp] = build_end_txn_marker_batch(
                    marker.producer_id,
                    marker.producer_epoch,
                    end_marker,
                    timestamp_ms=self.replica_manager.clock_ms(),
                )
        if not entries:
            done()
            return

        def respond(statuses: dict[TopicPartition, ProducePartitionStatus]) -> None:
            written: list[TopicPartition] = []
            for tp, status in statuses.items():
                errors[tp] = status.error
                if status.error == Errors.NONE:
                    written.append(tp)
                else:
                    log.info(
                        "broker %d: %s marker of producer %d (epoch %d) on %s-%d: %s %s",
                        self.replica_manager.broker_id,
                        control_type.name,
                        marker.producer_id,
                        marker.producer_epoch,
                        tp[0],
                        tp[1],
                        status.error.name,
                        status.error_message,
                    )
            for listener in self._listeners:
                try:
                    listener(marker.producer_id, marker.transaction_result, written)
                except Exception:  # a listener's bug must not lose the answer
                    log.exception(
                        "broker %d: transaction marker listener failed", self.replica_manager.broker_id
                    )
            done()

        self.replica_manager.append_records(
            self.timeout_ms,
            -1,
            entries,
            respond,
            internal_topics_allowed=True,
            origin=AppendOrigin.COORDINATOR,
        )

    # ------------------------------------------------------------------ DESCRIBE_PRODUCERS

    def handle_describe_producers(self, request: Request, req: tm.DescribeProducersRequest) -> None:
        """Kafka's ``handleDescribeProducersRequest``: Read on the topic, then the leader's producer state
        (``Partition.activeProducerState``)."""
        readable = self.auth.authorized_topics(request, AclOperation.READ, (t.name for t in req.topics))
        topics: list[tm.DescribeProducersResponseTopic] = []
        for t in req.topics:
            out = tm.DescribeProducersResponseTopic(name=t.name)
            for index in t.partition_indexes:
                part = tm.DescribeProducersResponsePartition(partition_index=index)
                if t.name not in readable:
                    part.error_code = int(Errors.TOPIC_AUTHORIZATION_FAILED)
                else:
                    try:
                        part.active_producers = self.active_producers((t.name, index))
                    except KafkaError as exc:
                        part.error_code = int(exc.error)
                        part.error_message = exc.message
                out.partitions.append(part)
            topics.append(out)
        request.complete(to_body(tm.DescribeProducersResponse(topics=topics)))

    def active_producers(self, tp: TopicPartition) -> list[tm.DescribeProducersResponseProducer]:
        """The leader's producer state of ``tp``; raises NOT_LEADER_OR_FOLLOWER on a follower."""
        partition = self.replica_manager.get_partition_or_error(tp)
        if not partition.is_leader:
            raise KafkaError(
                Errors.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.replica_manager.broker_id} is not the leader of {tp[0]}-{tp[1]}",
            )
        return [
            tm.DescribeProducersResponseProducer(
                producer_id=entry.producer_id,
                producer_epoch=entry.producer_epoch,
                last_sequence=entry.last_seq,
                last_timestamp=entry.last_timestamp,
                coordinator_epoch=entry.coordinator_epoch,
                current_txn_start_offset=entry.current_txn_first_offset,
            )
            for entry in partition.log.producer_state_manager.active_producers.values()
        ]
