"""KIP-890 part 1 on the partition leader (docs/transactions.md "Verification"): before a transactional
batch of a producer with no open transaction on a partition is appended, the leader asks the producer's
transaction coordinator whether the partition is in the producer's ongoing transaction, and appends only if
it is; else the batch is answered INVALID_TXN_STATE (48) and nothing is written. This stops the hanging
transaction: a producer's late write after its transaction was aborted would otherwise open a new
transaction on the partition that no coordinator knows of, holding the last stable offset forever.

- :class:`AddPartitionsToTxnManager` (Kafka's ``AddPartitionsToTxnManager``): the broker-to-broker
  AddPartitionsToTxn v4 ``verify_only`` requests, batched per coordinator node with at most one request in
  flight per node; a second verification of the same transactional id waiting for the same node replaces
  the first (the older one is answered NETWORK_EXCEPTION for an equal epoch, INVALID_PRODUCER_EPOCH for an
  older one), as Kafka does.
- :class:`TxnVerification` (Kafka's ``ReplicaManager.appendRecordsWithTransactionVerification``): the
  produce path. Each partition's log hands out a verification guard (``storage.verification_guard``); the
  append the coordinator confirmed carries it, and the log refuses it if a marker or another transactional
  batch of the producer was written in between. Errors of the verification are answered as Kafka's
  leader does: INVALID_TXN_STATE as it is, PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, and the retriable
  coordinator errors (NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
  NOT_COORDINATOR, CONCURRENT_TRANSACTIONS) as NOT_ENOUGH_REPLICAS, which every producer retries.

Broker config ``transaction.partition.verification.enable`` (default true); false is the legacy mode: the
server builds neither, and the log checks nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from broker.delayed_ops import ProducePartitionStatus
from broker.metadata_cache import MetadataCache
from broker.peer_connections import PeerConnections
from broker.replica_manager import ReplicaManager
from protocol import txn_coordinator_messages as tm
from protocol.api_keys import ApiKeys
from protocol.client import ConnectionClosed
from protocol.common import TopicPartition
from protocol.control_records import is_control, is_transactional
from protocol.errors import CorruptRecordError, Errors, KafkaError
from protocol.records import iter_batches
from protocol.schema import to_body
from storage.verification_guard import SENTINEL, VerificationGuard

log = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN_VERSION = 4  # the version with verify_only (KIP-890)

# What a verification answers: the partitions that were NOT verified, with why (empty: all verified).
VerifyCallback = Callable[[dict[TopicPartition, Errors]], None]
# Sends one AddPartitionsToTxn v4 request to a broker; returns the response body.
SendRequest = Callable[[int, list[tm.AddPartitionsToTxnTransaction]], Awaitable[dict[str, Any]]]

# Errors of the verification that a producer must retry: answered NOT_ENOUGH_REPLICAS (Kafka's choice: it
# is retried by every producer and does not make it refresh its metadata).
RETRIABLE_VERIFICATION_ERRORS = frozenset(
    {
        Errors.NETWORK_EXCEPTION,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.COORDINATOR_NOT_AVAILABLE,
        Errors.NOT_COORDINATOR,
        Errors.CONCURRENT_TRANSACTIONS,
    }
)


@dataclass(slots=True)
class _Waiting:
    txn: tm.AddPartitionsToTxnTransaction
    callback: VerifyCallback


@dataclass(slots=True)
class _NodeQueue:
    by_txn: dict[str, _Waiting] = field(default_factory=dict)


def _partitions(txn: tm.AddPartitionsToTxnTransaction) -> list[TopicPartition]:
    return [(t.name, p) for t in txn.topics for p in t.partitions]


def _error(code: int) -> Errors:
    try:
        return Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR


class AddPartitionsToTxnManager:
    """Verifies transactional appends with their coordinators. ``partition_for`` names the
    ``__transaction_state`` partition of a transactional id (its leader is the coordinator)."""

    def __init__(
        self,
        broker_id: int,
        metadata_cache: MetadataCache,
        partition_for: Callable[[str], TopicPartition],
        *,
        request_timeout_s: float = 10.0,
        send: SendRequest | None = None,
        peers: PeerConnections | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.partition_for = partition_for
        self.request_timeout_s = request_timeout_s
        self.peers = peers  # how the requests reach the coordinators (unless ``send`` is given)
        self._send = send or self._send_request
        self._queues: dict[int, _NodeQueue] = {}
        self._inflight: set[int] = set()
        self._nursery: trio.Nursery | None = None
        self.verifications = 0
        self.failures = 0  # partitions not verified (Kafka's VerificationFailureRate)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def coordinator_of(self, transactional_id: str) -> int | None:
        """The live leader of the transactional id's ``__transaction_state`` partition, None if there is
        none (the topic not yet created, no leader, the leader not alive)."""
        meta = self.metadata_cache.partitions.get(self.partition_for(transactional_id))
        if meta is None or meta.leader < 0 or self.metadata_cache.alive_broker(meta.leader) is None:
            return None
        return meta.leader

    def verify_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        callback: VerifyCallback,
    ) -> None:
        self.verifications += 1
        node = self.coordinator_of(transactional_id)
        if node is None or self._nursery is None:
            self._answer(callback, dict.fromkeys(partitions, Errors.COORDINATOR_NOT_AVAILABLE))
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        txn = tm.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            verify_only=True,
            topics=[tm.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        queue = self._queues.setdefault(node, _NodeQueue())
        existing = queue.by_txn.get(transactional_id)
        if existing is not None:
            if existing.txn.producer_epoch <= producer_epoch:
                # The older one is a retry (same epoch: a retriable error) or fenced (older epoch).
                error = (
                    Errors.NETWORK_EXCEPTION
                    if existing.txn.producer_epoch == producer_epoch
                    else Errors.INVALID_PRODUCER_EPOCH
                )
                del queue.by_txn[transactional_id]
                self._answer(existing.callback, dict.fromkeys(_partitions(existing.txn), error))
            else:
                self._answer(callback, dict.fromkeys(partitions, Errors.INVALID_PRODUCER_EPOCH))
                return
        queue.by_txn[transactional_id] = _Waiting(txn, callback)
        if node not in self._inflight:
            self._inflight.add(node)
            self._nursery.start_soon(self._drain, node)

    def _answer(self, callback: VerifyCallback, unverified: dict[TopicPartition, Errors]) -> None:
        self.failures += len(unverified)
        try:
            callback(unverified)
        except Exception:  # a callback's bug must not stop the other verifications
            log.exception("broker %d: a transaction verification callback failed", self.broker_id)

    async def _drain(self, node: int) -> None:
        """Sends the node's waiting verifications, one request at a time, until none wait."""
        try:
            while True:
                queue = self._queues.pop(node, None)
                if queue is None or not queue.by_txn:
                    return
                waiting = list(queue.by_txn.values())
                try:
                    answer = await self._send(node, [w.txn for w in waiting])
                except (OSError, trio.TooSlowError, ConnectionClosed, KafkaError) as exc:
                    log.info(
                        "broker %d: AddPartitionsToTxn (verify_only) to broker %d failed: %r",
                        self.broker_id,
                        node,
                        exc,
                    )
                    for w in waiting:
                        self._answer(w.callback, dict.fromkeys(_partitions(w.txn), Errors.NETWORK_EXCEPTION))
                    continue
                self._on_response(waiting, answer)
        finally:
            self._inflight.discard(node)

    def _on_response(self, waiting: list[_Waiting], answer: Mapping[str, Any]) -> None:
        top = _error(answer.get("error_code", 0))
        if top != Errors.NONE:
            # A client must not see CLUSTER_AUTHORIZATION_FAILED: the verification did not complete.
            denied = top == Errors.CLUSTER_AUTHORIZATION_FAILED
            for w in waiting:
                self._answer(
                    w.callback,
                    dict.fromkeys(_partitions(w.txn), Errors.INVALID_TXN_STATE if denied else top),
                )
            return
        results = {r["transactional_id"]: r for r in answer.get("results_by_transaction", [])}
        for w in waiting:
            result = results.get(w.txn.transactional_id)
            if result is None:
                self._answer(w.callback, dict.fromkeys(_partitions(w.txn), Errors.NETWORK_EXCEPTION))
                continue
            unverified: dict[TopicPartition, Errors] = {}
            for topic in result.get("topic_results", []):
                for p in topic.get("results_by_partition", []):
                    code = _error(p.get("partition_error_code", 0))
                    # A producer expects INVALID_PRODUCER_EPOCH here, not PRODUCER_FENCED.
                    fenced = code == Errors.PRODUCER_FENCED
                    unverified[(topic["name"], p["partition_index"])] = (
                        Errors.INVALID_PRODUCER_EPOCH if fenced else code
                    )
            for tp in _partitions(w.txn):
                unverified.setdefault(tp, Errors.NETWORK_EXCEPTION)  # not answered: ask again
            self._answer(w.callback, {tp: e for tp, e in unverified.items() if e != Errors.NONE})

    async def _send_request(self, node: int, txns: list[tm.AddPartitionsToTxnTransaction]) -> dict[str, Any]:
        if self.peers is None:
            raise ConnectionClosed("no connections to the coordinators")
        return await self.peers.request(
            node,
            ApiKeys.ADD_PARTITIONS_TO_TXN,
            to_body(tm.AddPartitionsToTxnRequest(transactions=txns)),
            api_version=ADD_PARTITIONS_TO_TXN_VERSION,
            timeout=self.request_timeout_s,
        )


@dataclass(frozen=True, slots=True)
class TransactionalBatchInfo:
    """The producer of a partition's transactional data batches: what the leader verifies with."""

    producer_id: int
    producer_epoch: int
    base_sequence: int


def transactional_batch_info(records: bytes) -> TransactionalBatchInfo | None:
    """The first transactional data batch's producer id, epoch and sequence; None if there is none (or the
    records do not frame: the log's validation refuses them). Raises INVALID_RECORD if the transactional
    batches name more than one producer id (Kafka's check)."""
    found: TransactionalBatchInfo | None = None
    try:
        headers = [h for _, h in iter_batches(records, validate=False)]
    except CorruptRecordError:
        return None
    for header in headers:
        if not is_transactional(header) or is_control(header) or header.producer_id < 0:
            continue
        if found is None:
            found = TransactionalBatchInfo(header.producer_id, header.producer_epoch, header.base_sequence)
        elif found.producer_id != header.producer_id:
            raise KafkaError(
                Errors.INVALID_RECORD, "transactional records contained more than one producer id"
            )
    return found


def _refused(error: Errors, message: str) -> ProducePartitionStatus:
    return ProducePartitionStatus(-1, -1, -1, error, message, acks_pending=False)


def verification_error_status(error: Errors) -> ProducePartitionStatus:
    """What a producer is answered for a partition the coordinator did not verify (Kafka's leader)."""
    if error == Errors.INVALID_TXN_STATE:
        return _refused(error, "Partition was not added to the transaction")
    if error in RETRIABLE_VERIFICATION_ERRORS:
        return _refused(
            Errors.NOT_ENOUGH_REPLICAS,
            "Unable to verify the partition has been added to the transaction. Underlying error: "
            f"{error.name}",
        )
    return _refused(error, f"transaction verification failed: {error.name}")


class TxnVerification:
    """The produce path with KIP-890 verification (set on ``KafkaApis`` when
    ``transaction.partition.verification.enable`` is true)."""

    def __init__(self, replica_manager: ReplicaManager, manager: AddPartitionsToTxnManager) -> None:
        self.replica_manager = replica_manager
        self.manager = manager

    def append_records(
        self,
        transactional_id: str,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytes],
        respond: Callable[[dict[TopicPartition, ProducePartitionStatus]], None],
        *,
        client_id: str = "",
        received_ms: int | None = None,
    ) -> None:
        errors: dict[TopicPartition, ProducePartitionStatus] = {}
        guards: dict[TopicPartition, VerificationGuard] = {}
        to_verify: list[TopicPartition] = []
        producer: TransactionalBatchInfo | None = None
        for tp, records in entries.items():
            try:
                info = transactional_batch_info(records)
                if info is None:
                    continue
                if producer is not None and info.producer_id != producer.producer_id:
                    raise KafkaError(
                        Errors.INVALID_RECORD, "transactional records contained more than one producer id"
                    )
                producer = info
                partition = self.replica_manager.get_partition_or_error(tp)
                guard = partition.maybe_start_transaction_verification(
                    info.producer_id, info.base_sequence, info.producer_epoch
                )
            except KafkaError as exc:
                errors[tp] = _refused(exc.error, exc.message)
                continue
            guards[tp] = guard
            if guard is not SENTINEL:
                to_verify.append(tp)

        def append(unverified: dict[TopicPartition, Errors]) -> None:
            refused = {**errors, **{tp: verification_error_status(e) for tp, e in unverified.items()}}
            verified = {tp: r for tp, r in entries.items() if tp not in refused}
            if not verified:
                respond(refused)
                return

            def answer(statuses: dict[TopicPartition, ProducePartitionStatus]) -> None:
                respond({**statuses, **refused})

            self.replica_manager.append_records(
                timeout_ms,
                required_acks,
                verified,
                answer,
                client_id=client_id,
                received_ms=received_ms,
                verification_guards=guards,
            )

        if not to_verify or producer is None:
            append({})
            return
        self.manager.verify_transaction(
            transactional_id, producer.producer_id, producer.producer_epoch, to_verify, append
        )
