"""``TransactionCoordinatorCore``: every decision of Kafka's ``TransactionCoordinator`` and
``TransactionStateManager``, pure (requests and completions in, effects out, an injected clock).

The core holds the transactional ids of the ``__transaction_state`` partitions this broker leads (each with
its coordinator epoch: the partition's leader epoch). A request's answer is an opaque token handed back in a
``Respond`` effect. A state change is an ``AppendTxn`` effect: the shell writes the record with acks=all and
calls ``on_appended``; only then is the change applied (or undone). Ending a transaction writes
PrepareCommit/PrepareAbort, answers the client, then asks for the markers (``SendMarkers``); once every
partition has its marker the shell calls ``on_markers_written`` and the core writes CompleteCommit /
CompleteAbort (docs/transactions.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from coordinator.transaction.transaction_metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from protocol.common import Clock, TopicPartition
from protocol.errors import Errors, KafkaError
from protocol.group_records import GROUP_METADATA_TOPIC_NAME, partition_for_group
from protocol.txn_records import TransactionLogValue, partition_for_transactional_id

S = TransactionState


@dataclass(frozen=True, slots=True)
class TxnConfig:
    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    offsets_num_partitions: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn's partition)
    retry_backoff_ms: int = 100  # between retries of a CompleteCommit/CompleteAbort write


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: Errors
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


# ---------------------------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class Respond:
    token: Any
    result: Any


@dataclass(frozen=True, slots=True)
class AppendTxn:
    """Write ``transit`` of ``transactional_id`` to ``__transaction_state`` partition ``partition``
    (acks=all), after ``delay_ms``; then ``on_appended``. ``purpose`` says what follows a success:
    init (answer the producer id), add (answer NONE), prepare (answer ``prepare_answer`` if there is a
    token, then markers), complete (nothing)."""

    partition: int
    coordinator_epoch: int
    transactional_id: str
    transit: TxnTransitMetadata
    purpose: str
    token: Any = None
    prepare_answer: Errors = Errors.NONE
    epoch_fence: bool = False
    delay_ms: int = 0
    # The token is an InitProducerId's (answered with an ``InitProducerIdResult``).
    answers_init: bool = False


@dataclass(frozen=True, slots=True)
class SendMarkers:
    """Kafka's ``addTxnMarkersToSend``: a marker for each partition (to its leader, retried until
    written), then ``on_markers_written``."""

    transactional_id: str
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class TransactionCompleted:
    """A transaction's Complete* record is written (for the journal)."""

    transactional_id: str
    partition: int
    producer_id: int
    producer_epoch: int
    state: TransactionState
    partitions: frozenset[TopicPartition]


Effect = Respond | AppendTxn | SendMarkers | TransactionCompleted


@dataclass(slots=True)
class TransactionDescription:
    error: Errors
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_time_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: list[TopicPartition] = field(default_factory=list)


def _append_error(error: Errors) -> Errors:
    """What a failed write to ``__transaction_state`` answers (Kafka's ``appendTransactionToLog``)."""
    if error in (
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.REQUEST_TIMED_OUT,
    ):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if error in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR):
        return Errors.NOT_COORDINATOR
    if error in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE):
        return Errors.UNKNOWN_SERVER_ERROR
    return error


class TransactionCoordinatorCore:
    def __init__(self, config: TxnConfig, clock_ms: Clock, generate_producer_id: Callable[[], int]) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.generate_producer_id = generate_producer_id
        # __transaction_state partitions led here and loaded: partition -> coordinator epoch.
        self.owned_partitions: dict[int, int] = {}
        self.loading_partitions: dict[int, int] = {}
        self.txns: dict[str, TransactionMetadata] = {}

    # ------------------------------------------------------------------ ownership

    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self.config.num_partitions)

    def _coordinator_error(self, transactional_id: str) -> Errors | None:
        partition = self.partition_for(transactional_id)
        if partition in self.loading_partitions:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return Errors.NOT_COORDINATOR
        return None

    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        self.owned_partitions.pop(partition, None)
        self.loading_partitions[partition] = coordinator_epoch
        for txn_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[txn_id]

    def on_loaded(
        self, partition: int, coordinator_epoch: int, loaded: dict[str, TransactionLogValue]
    ) -> list[Effect]:
        """The partition replayed (the last value of each id; tombstones already dropped): serve its ids,
        and finish what was being ended when the last coordinator stopped (Kafka's
        ``onTransactionStateLoaded``: markers for PrepareCommit/PrepareAbort)."""
        if self.loading_partitions.get(partition) != coordinator_epoch:
            return []
        del self.loading_partitions[partition]
        self.owned_partitions[partition] = coordinator_epoch
        effects: list[Effect] = []
        for txn_id, value in loaded.items():
            meta = TransactionMetadata.from_log_value(txn_id, value)
            if meta.state == S.DEAD:
                continue
            self.txns[txn_id] = meta
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                effects.append(self._markers(meta, coordinator_epoch))
        return effects

    def on_resignation(self, partition: int) -> None:
        self.owned_partitions.pop(partition, None)
        self.loading_partitions.pop(partition, None)
        for txn_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[txn_id]

    def shutdown(self) -> None:
        self.owned_partitions.clear()
        self.loading_partitions.clear()
        self.txns.clear()

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(
        self,
        token: Any,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> list[Effect]:
        def fail(error: Errors) -> list[Effect]:
            return [Respond(token, InitProducerIdResult(error))]

        if not transactional_id:
            return fail(Errors.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return fail(Errors.INVALID_TRANSACTION_TIMEOUT)
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return fail(error)
        partition = self.partition_for(transactional_id)
        epoch = self.owned_partitions[partition]
        meta = self.txns.get(transactional_id)
        if meta is None:
            try:
                producer_id = self.generate_producer_id()
            except KafkaError as exc:
                return fail(exc.error)
            meta = TransactionMetadata(
                transactional_id,
                producer_id,
                txn_timeout_ms=timeout_ms,
                txn_last_update_timestamp=self.clock_ms(),
            )
            self.txns[transactional_id] = meta
        expected = (expected_producer_id, expected_epoch) if expected_producer_id != NO_PRODUCER_ID else None
        if meta.pending_transition_in_progress:
            return fail(Errors.CONCURRENT_TRANSACTIONS)
        if expected is not None and not _valid_producer_id(meta, *expected):
            return fail(Errors.PRODUCER_FENCED)
        now = self.clock_ms()
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return fail(Errors.CONCURRENT_TRANSACTIONS)
        if meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if meta.is_producer_epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
                try:
                    producer_id = self.generate_producer_id()
                except KafkaError as exc:
                    return fail(exc.error)
                transit = meta.prepare_producer_id_rotation(
                    producer_id, timeout_ms, now, expected is not None
                )
            else:
                maybe = meta.prepare_increment_producer_epoch(
                    timeout_ms, None if expected is None else expected[1], now
                )
                if maybe is None:
                    return fail(Errors.PRODUCER_FENCED)
                transit = maybe
            return [AppendTxn(partition, epoch, transactional_id, transit, "init", token, answers_init=True)]
        if meta.state == S.ONGOING:
            # Abort the open transaction with a bumped epoch; the producer retries once it is complete.
            return self._fence_and_abort(
                meta, partition, epoch, token, Errors.CONCURRENT_TRANSACTIONS, init=True
            )
        return fail(Errors.CONCURRENT_TRANSACTIONS)  # Dead, PrepareEpochFence

    def _fence_and_abort(
        self, meta: TransactionMetadata, partition: int, epoch: int, token: Any, answer: Errors, *, init: bool
    ) -> list[Effect]:
        fence = meta.prepare_fence_producer_epoch()
        meta.clear_pending()
        meta.producer_epoch = fence.producer_epoch
        meta.last_producer_epoch = NO_PRODUCER_EPOCH
        transit = meta.prepare_abort_or_commit(S.PREPARE_ABORT, self.clock_ms())
        return [
            AppendTxn(
                partition,
                epoch,
                meta.transactional_id,
                transit,
                "prepare",
                token,
                answer,
                epoch_fence=True,
                answers_init=init,
            )
        ]

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> Errors | None:
        if not transactional_id:
            return Errors.INVALID_REQUEST
        error = self._coordinator_error(transactional_id)
        if error is not None:
            return error
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return Errors.PRODUCER_FENCED
        return None

    def add_partitions(
        self,
        token: Any,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
    ) -> list[Effect]:
        error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is not None:
            return [Respond(token, error)]
        meta = self.txns[transactional_id]
        if meta.pending_transition_in_progress or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return [Respond(token, Errors.CONCURRENT_TRANSACTIONS)]
        if meta.state == S.ONGOING and partitions <= meta.partitions:
            return [Respond(token, Errors.NONE)]
        if meta.state not in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return [Respond(token, Errors.INVALID_TXN_STATE)]
        partition = self.partition_for(transactional_id)
        transit = meta.prepare_add_partitions(partitions, self.clock_ms())
        return [
            AppendTxn(partition, self.owned_partitions[partition], transactional_id, transit, "add", token)
        ]

    def add_offsets(
        self, token: Any, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> list[Effect]:
        tp = (GROUP_METADATA_TOPIC_NAME, partition_for_group(group_id, self.config.offsets_num_partitions))
        return self.add_partitions(token, transactional_id, producer_id, producer_epoch, {tp})

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, Errors]:
        """KIP-890's check of a leader before it appends a transactional batch (AddPartitionsToTxn v4
        ``verify_only``): INVALID_TXN_STATE for a partition not in the producer's ongoing transaction."""
        wanted = list(partitions)
        error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is None:
            meta = self.txns[transactional_id]
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                error = Errors.CONCURRENT_TRANSACTIONS
            else:
                return {
                    tp: Errors.NONE
                    if meta.state == S.ONGOING and tp in meta.partitions
                    else Errors.INVALID_TXN_STATE
                    for tp in wanted
                }
        return dict.fromkeys(wanted, error)

    # ------------------------------------------------------------------ EndTxn

    def end_txn(
        self, token: Any, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> list[Effect]:
        error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error is not None:
            return [Respond(token, error)]
        meta = self.txns[transactional_id]
        if meta.pending_transition_in_progress:
            return [Respond(token, Errors.CONCURRENT_TRANSACTIONS)]
        state = meta.state
        if state == S.ONGOING:
            partition = self.partition_for(transactional_id)
            transit = meta.prepare_abort_or_commit(
                S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, self.clock_ms()
            )
            return [
                AppendTxn(
                    partition, self.owned_partitions[partition], transactional_id, transit, "prepare", token
                )
            ]
        if state == S.COMPLETE_COMMIT:
            return [Respond(token, Errors.NONE if commit else Errors.INVALID_TXN_STATE)]
        if state == S.COMPLETE_ABORT:
            return [Respond(token, Errors.NONE if not commit else Errors.INVALID_TXN_STATE)]
        if state == S.PREPARE_COMMIT:
            return [Respond(token, Errors.CONCURRENT_TRANSACTIONS if commit else Errors.INVALID_TXN_STATE)]
        if state == S.PREPARE_ABORT:
            return [
                Respond(token, Errors.CONCURRENT_TRANSACTIONS if not commit else Errors.INVALID_TXN_STATE)
            ]
        return [Respond(token, Errors.INVALID_TXN_STATE)]  # Empty, Dead

    # ------------------------------------------------------------------ timeouts

    def abort_timed_out_transactions(self) -> list[Effect]:
        """Kafka's ``abortTimedOutTransactions``: every ongoing transaction open past its timeout is
        aborted with a bumped epoch (its producer fenced)."""
        now = self.clock_ms()
        effects: list[Effect] = []
        for txn_id, meta in list(self.txns.items()):
            partition = self.partition_for(txn_id)
            if partition not in self.owned_partitions:
                continue
            if (
                meta.state == S.ONGOING
                and not meta.pending_transition_in_progress
                and meta.txn_start_timestamp + meta.txn_timeout_ms < now
                and meta.producer_epoch < MAX_PRODUCER_EPOCH
            ):
                effects += self._fence_and_abort(
                    meta, partition, self.owned_partitions[partition], None, Errors.NONE, init=False
                )
        return effects

    # ------------------------------------------------------------------ completions

    def _current(self, append_or_send: AppendTxn | SendMarkers) -> TransactionMetadata | None:
        """The metadata, if this broker still coordinates the id with the same coordinator epoch."""
        partition = self.partition_for(append_or_send.transactional_id)
        if self.owned_partitions.get(partition) != append_or_send.coordinator_epoch:
            return None
        return self.txns.get(append_or_send.transactional_id)

    def on_appended(self, append: AppendTxn, error: Errors) -> list[Effect]:
        meta = self._current(append)
        token = append.token
        if meta is None:
            return [] if token is None else [Respond(token, self._result(append, Errors.NOT_COORDINATOR))]
        if error != Errors.NONE:
            answer = _append_error(error)
            if meta.pending_state == append.transit.state:
                meta.clear_pending()
                if append.epoch_fence:
                    meta.has_failed_epoch_fence = True
            if append.purpose == "complete" and answer == Errors.COORDINATOR_NOT_AVAILABLE:
                transit = meta.prepare_complete(self.clock_ms())
                return [
                    AppendTxn(
                        append.partition,
                        append.coordinator_epoch,
                        append.transactional_id,
                        transit,
                        "complete",
                        delay_ms=self.config.retry_backoff_ms,
                    )
                ]
            return [] if token is None else [Respond(token, self._result(append, answer))]
        ended = frozenset(meta.partitions)
        meta.complete_transition_to(append.transit)
        transit = append.transit
        if append.purpose == "init":
            return [
                Respond(token, InitProducerIdResult(Errors.NONE, transit.producer_id, transit.producer_epoch))
            ]
        if append.purpose == "add":
            return [Respond(token, Errors.NONE)]
        if append.purpose == "prepare":
            effects: list[Effect] = []
            if token is not None:
                effects.append(Respond(token, self._result(append, append.prepare_answer)))
            effects.append(self._markers(meta, append.coordinator_epoch))
            return effects
        return [
            TransactionCompleted(
                append.transactional_id,
                append.partition,
                transit.producer_id,
                transit.producer_epoch,
                transit.state,
                ended,
            )
        ]

    @staticmethod
    def _result(append: AppendTxn, error: Errors) -> Any:
        return InitProducerIdResult(error) if append.answers_init else error

    def _markers(self, meta: TransactionMetadata, coordinator_epoch: int) -> SendMarkers:
        return SendMarkers(
            meta.transactional_id,
            coordinator_epoch,
            meta.producer_id,
            meta.producer_epoch,
            meta.state == S.PREPARE_COMMIT,
            frozenset(meta.partitions),
        )

    def on_markers_written(self, send: SendMarkers) -> list[Effect]:
        """Every partition has its marker: write CompleteCommit / CompleteAbort."""
        meta = self._current(send)
        if meta is None or meta.pending_transition_in_progress:
            return []
        if (
            meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
            or meta.producer_epoch != send.producer_epoch
        ):
            return []
        partition = self.partition_for(send.transactional_id)
        transit = meta.prepare_complete(self.clock_ms())
        return [AppendTxn(partition, send.coordinator_epoch, send.transactional_id, transit, "complete")]

    # ------------------------------------------------------------------ Describe- / ListTransactions

    def describe(self, transactional_id: str) -> TransactionDescription:
        error = self._coordinator_error(transactional_id) if transactional_id else Errors.INVALID_REQUEST
        if error is not None:
            return TransactionDescription(error, transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None:
            return TransactionDescription(Errors.TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
        return TransactionDescription(
            Errors.NONE,
            transactional_id,
            meta.state.value,
            meta.txn_timeout_ms,
            meta.txn_start_timestamp,
            meta.producer_id,
            meta.producer_epoch,
            sorted(meta.partitions),
        )

    def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1
    ) -> tuple[Errors, list[str], list[tuple[str, int, str]]]:
        """(error, unknown state filters, [(transactional id, producer id, state)]) of the ids of every
        loaded partition; COORDINATOR_LOAD_IN_PROGRESS while one is loading (as Kafka)."""
        if self.loading_partitions:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, [], []
        wanted = set(states)
        unknown = sorted(s for s in wanted if TransactionState.from_name(s) is None)
        pids = set(producer_ids)
        now = self.clock_ms()
        out = []
        for txn_id, meta in sorted(self.txns.items()):
            if wanted and meta.state.value not in wanted:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if duration_ms >= 0 and (
                meta.state != S.ONGOING or now - meta.txn_start_timestamp <= duration_ms
            ):
                continue
            out.append((txn_id, meta.producer_id, meta.state.value))
        return Errors.NONE, unknown, out


def _valid_producer_id(meta: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """Kafka's ``isValidProducerId``: the id just created, the current id, or the previous one after an
    exhausted epoch (a retry of a rotation whose answer was lost)."""
    return (
        meta.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == meta.producer_id
        or (producer_id == meta.previous_producer_id and epoch >= MAX_PRODUCER_EPOCH - 1)
    )
