"""Kafka's ``TransactionState`` and ``TransactionMetadata``: one transactional id's producer id and epoch,
its state and the partitions of its open transaction, changed only through a prepared transition
(``TxnTransitMetadata``) that is written to ``__transaction_state`` first and applied once it is committed
(``complete_transition_to``). While a transition is pending (``pending_state``) the id takes no other.
Pure: no clock but the timestamps handed in.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from protocol.common import TopicPartition
from protocol.txn_records import STATE_IDS, TransactionLogValue

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka bumps to a new producer id when the epoch reaches Short.MaxValue - 1 (one epoch kept for fencing).
MAX_PRODUCER_EPOCH = 32767


class TransactionState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        return STATE_IDS[self.value]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return next((s for s in cls if s.value == name), None)


S = TransactionState

# Kafka's ``TransactionState.validPreviousStates``.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTransition(Exception):
    """A transition Kafka's state machine does not allow (a bug of the caller, never a client's doing)."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """What a transition will make the metadata (Kafka's ``TxnTransitMetadata``), written to the log first."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    def to_log_value(self) -> TransactionLogValue:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            by_topic.setdefault(topic, []).append(partition)
        return TransactionLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms,
            transaction_status=self.state.id,
            transaction_partitions=by_topic,
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp,
            previous_producer_id=self.previous_producer_id,
        )


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60000
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    # The epoch fence was written and failed: a retry does not bump the epoch again
    # (Kafka's hasFailedEpochFence).
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_log_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        return cls(
            transactional_id=transactional_id,
            producer_id=value.producer_id,
            previous_producer_id=value.previous_producer_id,
            producer_epoch=value.producer_epoch,
            txn_timeout_ms=value.transaction_timeout_ms,
            state=TransactionState.from_id(value.transaction_status),
            partitions={(t, p) for t, ps in value.transaction_partitions.items() for p in ps},
            txn_start_timestamp=value.transaction_start_timestamp_ms,
            txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
        )

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_PRODUCER_EPOCH - 1

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    # ------------------------------------------------------------------ prepared transitions

    def _transit(
        self,
        state: TransactionState,
        *,
        producer_id: int | None = None,
        previous_producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        txn_timeout_ms: int | None = None,
        partitions: frozenset[TopicPartition] | None = None,
        txn_start_timestamp: int | None = None,
        update_timestamp: int | None = None,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: transition to {state.value} "
                f"while {self.pending_state.value} is pending"
            )
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.value} -> {state.value}")
        self.pending_state = state
        return TxnTransitMetadata(
            producer_id=self.producer_id if producer_id is None else producer_id,
            previous_producer_id=(
                self.previous_producer_id if previous_producer_id is None else previous_producer_id
            ),
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_epoch=self.last_producer_epoch
            if last_producer_epoch is None
            else last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state=state,
            partitions=frozenset(self.partitions) if partitions is None else partitions,
            txn_start_timestamp=self.txn_start_timestamp
            if txn_start_timestamp is None
            else txn_start_timestamp,
            txn_last_update_timestamp=(
                self.txn_last_update_timestamp if update_timestamp is None else update_timestamp
            ),
        )

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """An ongoing transaction to be aborted by the coordinator: the epoch bumped (once, even if the
        first try failed to be written) so that the producer of the old one is fenced."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransition(
                f"{self.transactional_id}: cannot fence producer epoch {self.producer_epoch}"
            )
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._transit(
            S.PREPARE_EPOCH_FENCE, producer_epoch=bumped, last_producer_epoch=NO_PRODUCER_EPOCH
        )

    def prepare_increment_producer_epoch(
        self, new_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | None:
        """InitProducerId on a completed or empty transaction: epoch + 1 (None: the expected epoch is
        neither the current nor the last one, so the asker is fenced)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(
                f"{self.transactional_id}: producer epoch {self.producer_epoch} exhausted"
            )
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # a retry of the last bump
        else:
            return None
        return self._transit(
            S.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last,
            txn_timeout_ms=new_timeout_ms,
            partitions=frozenset(),
            txn_start_timestamp=-1,
            update_timestamp=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """A new producer id with epoch 0 (the epoch of the old one exhausted)."""
        return self._transit(
            S.EMPTY,
            producer_id=new_producer_id,
            previous_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=new_timeout_ms,
            partitions=frozenset(),
            txn_start_timestamp=-1,
            update_timestamp=now_ms,
        )

    def prepare_add_partitions(self, added: set[TopicPartition], now_ms: int) -> TxnTransitMetadata:
        start = (
            now_ms
            if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            else self.txn_start_timestamp
        )
        current = set() if self.state != S.ONGOING else set(self.partitions)
        return self._transit(
            S.ONGOING,
            partitions=frozenset(current | added),
            txn_start_timestamp=start,
            update_timestamp=now_ms,
        )

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TxnTransitMetadata:
        return self._transit(state, update_timestamp=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._transit(state, partitions=frozenset(), update_timestamp=now_ms)

    def clear_pending(self) -> None:
        self.pending_state = None

    # ------------------------------------------------------------------ applying a written transition

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Applies a transition whose record is committed (Kafka's ``completeTransitionTo``)."""
        expected = self.pending_state
        if expected is None or (transit.state != expected and expected != S.PREPARE_EPOCH_FENCE):
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state.value} but "
                f"{expected.value if expected else 'nothing'} is pending"
            )
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.has_failed_epoch_fence = False
