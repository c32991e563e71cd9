"""The transaction coordinator's API handlers (Kafka's ``KafkaApis.handleInitProducerIdRequest`` with a
transactional id, ``handleAddPartitionsToTxnRequest``, ``handleAddOffsetsToTxnRequest``,
``handleEndTxnRequest``, ``handleDescribeTransactionsRequest``, ``handleListTransactionsRequest`` and
FindCoordinator's transaction key): authorization, version differences, and the mapping between the bodies
and the coordinator core's calls (docs/transactions.md). ``KafkaApis`` dispatches to them.

Before the version that knows PRODUCER_FENCED (KIP-588: InitProducerId 4, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn 2, TxnOffsetCommit 2) a fenced producer is told INVALID_PRODUCER_EPOCH, as Kafka
does.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from broker.coordinator_lookup import coordinator_error, find_coordinator_node
from broker.metadata_cache import MetadataCache
from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.coordinator_core import CommitResult
from coordinator.group.group_metadata import OffsetAndMetadata
from coordinator.transaction.coordinator import TransactionCoordinator
from coordinator.transaction.coordinator_core import InitProducerIdResult
from protocol import group_messages as g
from protocol import producer_id_messages as pim
from protocol import txn_coordinator_messages as tm
from protocol.api_keys import ApiKeys
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.schema import to_body
from server.auth_helper import AuthHelper
from server.request_channel import Request
from server.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

Handler = Callable[[Request, Any], None]


def _fenced(error: Errors, version: int, first_version: int) -> Errors:
    return (
        Errors.INVALID_PRODUCER_EPOCH
        if error == Errors.PRODUCER_FENCED and version < first_version
        else error
    )


class TxnApis:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        auth: AuthHelper,
        metadata_cache: MetadataCache,
        group_coordinator: GroupCoordinator,
    ) -> None:
        self.coordinator = coordinator
        self.group_coordinator = group_coordinator
        self.core = coordinator.core
        self.auth = auth
        self.metadata_cache = metadata_cache

    def handlers(self) -> dict[int, Handler]:
        return {
            ApiKeys.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKeys.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKeys.END_TXN: self.handle_end_txn,
            ApiKeys.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
            ApiKeys.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKeys.LIST_TRANSACTIONS: self.handle_list_transactions,
        }

    def _txn_allowed(self, request: Request, operation: AclOperation, transactional_id: str) -> bool:
        return self.auth.authorize(request, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)

    # ------------------------------------------------------------------ FindCoordinator (key_type 1)

    def find_coordinator(self, request: Request, key: str) -> g.FindCoordinatorResponseCoordinator:
        if not key:
            return coordinator_error(
                key, Errors.INVALID_REQUEST, "an empty transactional id has no coordinator"
            )
        if not self._txn_allowed(request, AclOperation.DESCRIBE, key):
            return coordinator_error(
                key,
                Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                f"not authorized to describe transactional id {key!r}",
            )
        return find_coordinator_node(
            self.metadata_cache,
            request.listener_name,
            key,
            self.coordinator.transaction_topic_partition(key),
            self.coordinator.maybe_create_transaction_topic,
        )

    # ------------------------------------------------------------------ InitProducerId

    def handle_init_producer_id(self, request: Request, req: pim.InitProducerIdRequest) -> None:
        version = request.header.api_version
        transactional_id = req.transactional_id or ""

        def answer(result: InitProducerIdResult) -> None:
            request.complete(
                to_body(
                    pim.InitProducerIdResponse(
                        error_code=int(_fenced(result.error, version, 4)),
                        producer_id=result.producer_id,
                        producer_epoch=result.producer_epoch,
                    )
                )
            )

        if not self._txn_allowed(request, AclOperation.WRITE, transactional_id):
            answer(InitProducerIdResult(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            return
        if (req.producer_id == -1) != (req.producer_epoch == -1):
            answer(InitProducerIdResult(Errors.INVALID_REQUEST))
            return
        self.coordinator.apply(
            self.core.init_producer_id(
                answer, transactional_id, req.transaction_timeout_ms, req.producer_id, req.producer_epoch
            )
        )

    # ------------------------------------------------------------------ AddPartitionsToTxn

    def handle_add_partitions_to_txn(self, request: Request, req: tm.AddPartitionsToTxnRequest) -> None:
        version = request.header.api_version
        if version < 4:
            txn = tm.AddPartitionsToTxnTransaction(
                transactional_id=req.v3_and_below_transactional_id,
                producer_id=req.v3_and_below_producer_id,
                producer_epoch=req.v3_and_below_producer_epoch,
                topics=req.v3_and_below_topics,
            )

            def answer_one(results: dict[TopicPartition, Errors]) -> None:
                request.complete(
                    to_body(
                        tm.AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(results))
                    )
                )

            self._add_partitions(request, txn, version, answer_one)
            return
        # Version 4 (KIP-890): a broker's, any number of transactions, each added or only verified.
        if not req.transactions:
            request.complete(to_body(tm.AddPartitionsToTxnResponse()))
            return
        if any(not t.verify_only for t in req.transactions) and not self.auth.authorize(
            request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER
        ):
            request.complete(
                to_body(tm.AddPartitionsToTxnResponse(error_code=int(Errors.CLUSTER_AUTHORIZATION_FAILED)))
            )
            return
        results: dict[str, tm.AddPartitionsToTxnResult] = {}
        waiting = len(req.transactions)

        def collect(txn_id: str, partition_errors: dict[TopicPartition, Errors]) -> None:
            nonlocal waiting
            results[txn_id] = tm.AddPartitionsToTxnResult(
                transactional_id=txn_id, topic_results=_topic_results(partition_errors)
            )
            waiting -= 1
            if waiting == 0:
                ordered = [
                    results[t.transactional_id] for t in req.transactions if t.transactional_id in results
                ]
                request.complete(to_body(tm.AddPartitionsToTxnResponse(results_by_transaction=ordered)))

        for txn in req.transactions:
            self._add_partitions(request, txn, version, functools.partial(collect, txn.transactional_id))

    def _add_partitions(
        self,
        request: Request,
        txn: tm.AddPartitionsToTxnTransaction,
        version: int,
        answer: Callable[[dict[TopicPartition, Errors]], None],
    ) -> None:
        wanted = [(t.name, p) for t in txn.topics for p in t.partitions]
        if not self._txn_allowed(request, AclOperation.WRITE, txn.transactional_id):
            answer(dict.fromkeys(wanted, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            return
        refused: dict[TopicPartition, Errors] = {}
        allowed_topics = {
            name
            for name in {tp[0] for tp in wanted}
            if self.auth.authorize(request, AclOperation.WRITE, ResourceType.TOPIC, name)
        }
        for tp in wanted:
            if tp[0] not in allowed_topics:
                refused[tp] = Errors.TOPIC_AUTHORIZATION_FAILED
            elif tp not in self.metadata_cache.partitions:
                refused[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
        if refused:
            answer({tp: refused.get(tp, Errors.OPERATION_NOT_ATTEMPTED) for tp in wanted})
            return
        if txn.verify_only:
            verified = self.core.verify_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted
            )
            answer({tp: _fenced(e, version, 2) for tp, e in verified.items()})
            return

        def done(error: Errors) -> None:
            answer(dict.fromkeys(wanted, _fenced(error, version, 2)))

        self.coordinator.apply(
            self.core.add_partitions(
                done, txn.transactional_id, txn.producer_id, txn.producer_epoch, set(wanted)
            )
        )

    # ------------------------------------------------------------------ AddOffsetsToTxn / EndTxn

    def handle_add_offsets_to_txn(self, request: Request, req: tm.AddOffsetsToTxnRequest) -> None:
        version = request.header.api_version

        def answer(error: Errors) -> None:
            request.complete(to_body(tm.AddOffsetsToTxnResponse(error_code=int(_fenced(error, version, 2)))))

        if not self._txn_allowed(request, AclOperation.WRITE, req.transactional_id):
            answer(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return
        if not self.auth.authorize(request, AclOperation.READ, ResourceType.GROUP, req.group_id):
            answer(Errors.GROUP_AUTHORIZATION_FAILED)
            return
        self.coordinator.apply(
            self.core.add_offsets(
                answer, req.transactional_id, req.producer_id, req.producer_epoch, req.group_id
            )
        )

    def handle_end_txn(self, request: Request, req: tm.EndTxnRequest) -> None:
        version = request.header.api_version

        def answer(error: Errors) -> None:
            request.complete(to_body(tm.EndTxnResponse(error_code=int(_fenced(error, version, 2)))))

        if not self._txn_allowed(request, AclOperation.WRITE, req.transactional_id):
            answer(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return
        self.coordinator.apply(
            self.core.end_txn(
                answer, req.transactional_id, req.producer_id, req.producer_epoch, req.committed
            )
        )

    # ------------------------------------------------------------------ TxnOffsetCommit

    def handle_txn_offset_commit(self, request: Request, req: tm.TxnOffsetCommitRequest) -> None:
        """Kafka's ``handleTxnOffsetCommitRequest``: Write on the transactional id, Read on the group and on
        each topic; the group coordinator holds the offsets until the transaction's marker."""
        version = request.header.api_version
        wanted = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]

        def answer(result: CommitResult) -> None:
            by_topic: dict[str, list[tm.TxnOffsetCommitResponsePartition]] = {}
            for (topic, partition), error in result.errors.items():
                by_topic.setdefault(topic, []).append(
                    tm.TxnOffsetCommitResponsePartition(
                        partition_index=partition, error_code=int(_fenced(error, version, 2))
                    )
                )
            request.complete(
                to_body(
                    tm.TxnOffsetCommitResponse(
                        topics=[
                            tm.TxnOffsetCommitResponseTopic(name=t, partitions=ps)
                            for t, ps in by_topic.items()
                        ]
                    )
                )
            )

        if not self._txn_allowed(request, AclOperation.WRITE, req.transactional_id):
            answer(CommitResult(dict.fromkeys(wanted, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))
            return
        if not self.auth.authorize(request, AclOperation.READ, ResourceType.GROUP, req.group_id):
            answer(CommitResult(dict.fromkeys(wanted, Errors.GROUP_AUTHORIZATION_FAILED)))
            return
        refused: dict[TopicPartition, Errors] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in req.topics:
            allowed = self.auth.authorize(request, AclOperation.READ, ResourceType.TOPIC, t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if not allowed:
                    refused[tp] = Errors.TOPIC_AUTHORIZATION_FAILED
                elif tp not in self.metadata_cache.partitions:
                    refused[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    offsets[tp] = OffsetAndMetadata(
                        p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", -1
                    )
        if not offsets:
            answer(CommitResult(refused))
            return

        def answer_with_refused(result: CommitResult) -> None:
            answer(CommitResult({**result.errors, **refused}))

        self.group_coordinator.apply(
            self.group_coordinator.core.txn_commit_offsets(
                answer_with_refused,
                req.group_id,
                req.producer_id,
                req.member_id,
                req.generation_id,
                offsets,
                group_instance_id=req.group_instance_id,
                producer_epoch=req.producer_epoch,
            )
        )

    # ------------------------------------------------------------------ Describe- / ListTransactions

    def handle_describe_transactions(self, request: Request, req: tm.DescribeTransactionsRequest) -> None:
        states: list[tm.DescribeTransactionsState] = []
        for txn_id in req.transactional_ids:
            if not self._txn_allowed(request, AclOperation.DESCRIBE, txn_id):
                states.append(
                    tm.DescribeTransactionsState(
                        transactional_id=txn_id, error_code=int(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                    )
                )
                continue
            d = self.core.describe(txn_id)
            by_topic: dict[str, list[int]] = {}
            for topic, partition in d.partitions:
                if self.auth.authorize(request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
                    by_topic.setdefault(topic, []).append(partition)
            states.append(
                tm.DescribeTransactionsState(
                    error_code=int(d.error),
                    transactional_id=txn_id,
                    transaction_state=d.state,
                    transaction_timeout_ms=d.timeout_ms,
                    transaction_start_time_ms=d.start_time_ms,
                    producer_id=d.producer_id,
                    producer_epoch=d.producer_epoch,
                    topics=[
                        tm.DescribeTransactionsTopicData(topic=t, partitions=ps) for t, ps in by_topic.items()
                    ],
                )
            )
        request.complete(to_body(tm.DescribeTransactionsResponse(transaction_states=states)))

    def handle_list_transactions(self, request: Request, req: tm.ListTransactionsRequest) -> None:
        duration = req.duration_filter if request.header.api_version >= 1 else -1
        error, unknown, found = self.core.list_transactions(
            req.state_filters, req.producer_id_filters, duration
        )
        states = [
            tm.ListTransactionsState(transactional_id=t, producer_id=pid, transaction_state=state)
            for t, pid, state in found
            if self._txn_allowed(request, AclOperation.DESCRIBE, t)
        ]
        request.complete(
            to_body(
                tm.ListTransactionsResponse(
                    error_code=int(error), unknown_state_filters=unknown, transaction_states=states
                )
            )
        )


def _topic_results(results: dict[TopicPartition, Errors]) -> list[tm.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[tm.AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append(
            tm.AddPartitionsToTxnPartitionResult(partition_index=partition, partition_error_code=int(error))
        )
    return [tm.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]
