"""What a partition knows of one producer id, and the checks of an append against it (KIP-98): Kafka's
``ProducerStateEntry``, ``BatchMetadata`` and ``ProducerAppendInfo``.

Per producer id a partition remembers the producer epoch and the last five batches written with it (their
sequence ranges and offsets). A leader checks every client batch that carries a producer id:

- a batch whose (epoch, first sequence, last sequence) equals one of the five is a retry of a batch already
  written: the log does not write it again and the producer gets the original offsets
  (:meth:`ProducerStateEntry.find_duplicate_batch`, asked by ``Log.append_as_leader``);
- an epoch older than the one known gets INVALID_PRODUCER_EPOCH (47);
- a new epoch must start at sequence 0, and within an epoch a batch must start right after the last one
  (with Kafka's wrap-around at 2**31 - 1), else OUT_OF_ORDER_SEQUENCE_NUMBER (45);
- a producer id the partition does not know (never seen, expired, or its batches truncated away) is
  accepted with any sequence, as Kafka does since 2.5 (KIP-360: no UNKNOWN_PRODUCER_ID).

Followers and log loading apply the same batches with no checks (:attr:`AppendOrigin.REPLICATION`).

Transactions (KIP-98): a transactional data batch of a producer with no open transaction opens one at its
first offset (``current_txn_first_offset``, one of the "started transactions" of the append); a
non-transactional batch while one is open gets INVALID_TXN_STATE (48). A control batch (an end-transaction
marker, written by WriteTxnMarkers) checks the producer epoch (older: INVALID_PRODUCER_EPOCH) and the
coordinator epoch (older: TRANSACTION_COORDINATOR_FENCED, 52), closes the open transaction (a
:class:`CompletedTxn`, for the LSO and the ``.txnindex``) and forgets the producer's batches, as Kafka's
``appendEndTxnMarker``. On the replication path these are logged, not refused.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass, field

from protocol.control_records import EndTransactionMarker, is_control, is_transactional
from protocol.errors import Errors, KafkaError
from protocol.records import BatchHeader
from storage.transaction_index import CompletedTxn

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping from 2**31 - 1 to 0 (Kafka's ``DefaultRecordBatch``)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` wrapping from 0 back to 2**31 - 1."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def last_sequence(header: BatchHeader) -> int:
    """The sequence of the batch's last record (NO_SEQUENCE if the batch has none)."""
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return increment_sequence(header.base_sequence, header.last_offset_delta)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class OutOfOrderSequenceError(KafkaError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (45): a sequence gap, or a new epoch not starting at 0."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, message)


class InvalidProducerEpochError(KafkaError):
    """INVALID_PRODUCER_EPOCH (47): a batch from an epoch older than the partition knows."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.INVALID_PRODUCER_EPOCH, message)


class InvalidTxnStateError(KafkaError):
    """INVALID_TXN_STATE (48): a non-transactional batch from a producer with an open transaction."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.INVALID_TXN_STATE, message)


class TransactionCoordinatorFencedError(KafkaError):
    """TRANSACTION_COORDINATOR_FENCED (52): a marker from an older coordinator epoch than the last one."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.TRANSACTION_COORDINATOR_FENCED, message)


class AppendOrigin(enum.Enum):
    """Who appends, which decides what is checked (Kafka's ``AppendOrigin``)."""

    CLIENT = "client"  # a producer: epoch and sequence checked
    REPLICATION = "replication"  # a follower or log loading: nothing checked
    COORDINATOR = "coordinator"  # a coordinator's own write: epoch checked, no sequences


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One written batch of a producer: its last sequence and offset, and the span of both."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """What a partition knows of one producer id: its epoch and its last (at most five) batches, oldest
    first."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    batch_metadata: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    # The first offset of the producer's open transaction in this partition, -1 when none (Kafka's
    # ``currentTxnFirstOffset``).
    current_txn_first_offset: int = -1

    @classmethod
    def empty(cls, producer_id: int) -> ProducerStateEntry:
        return cls(producer_id)

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def copy_without_batches(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            current_txn_first_offset=self.current_txn_first_offset,
        )

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """A different epoch forgets the batches of the old one."""
        if self.producer_epoch != producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch
            return True
        return False

    def add_batch(
        self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, next_entry: ProducerStateEntry) -> None:
        """Take in what an append found (``ProducerAppendInfo.to_entry``)."""
        self.maybe_update_producer_epoch(next_entry.producer_epoch)
        self.batch_metadata.extend(next_entry.batch_metadata)
        self.coordinator_epoch = next_entry.coordinator_epoch
        self.last_timestamp = next_entry.last_timestamp
        self.current_txn_first_offset = next_entry.current_txn_first_offset

    def end_transaction(self, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """A marker ended the transaction: Kafka's ``update(epoch, coordinatorEpoch, timestamp)``."""
        self.maybe_update_producer_epoch(producer_epoch)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = timestamp
        self.current_txn_first_offset = -1

    def find_duplicate_batch(
        self, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for metadata in self.batch_metadata:
            if metadata.first_seq == first_seq and metadata.last_seq == last_seq:
                return metadata
        return None


class ProducerAppendInfo:
    """The batches of one producer id in one append, checked against the state before the append (Kafka's
    ``ProducerAppendInfo``). Nothing changes in the manager until :meth:`ProducerStateManager.update`."""

    def __init__(
        self, topic_partition: str, producer_id: int, current_entry: ProducerStateEntry, origin: AppendOrigin
    ) -> None:
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.current_entry = current_entry
        self.origin = origin
        self.updated_entry = current_entry.copy_without_batches()
        # First offsets of the transactions this append opened.
        self.started_transactions: list[int] = []

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        current = self.updated_entry.producer_epoch
        if producer_epoch < current:
            message = (
                f"epoch of producer {self.producer_id} at offset {offset} in {self.topic_partition} is "
                f"{producer_epoch}, older than the last seen epoch {current}"
            )
            if self.origin is AppendOrigin.REPLICATION:
                logger.warning("%s", message)
            else:
                raise InvalidProducerEpochError(message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated = self.updated_entry
        if producer_epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for a new epoch of producer {self.producer_id} at offset "
                    f"{offset} in {self.topic_partition}: epoch {producer_epoch} (request), sequence "
                    f"{first_seq}, current epoch {updated.producer_epoch}; a new epoch starts at sequence 0"
                )
            return
        if not updated.is_empty:
            current_last_seq = updated.last_seq
        elif producer_epoch == self.current_entry.producer_epoch:
            current_last_seq = self.current_entry.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        # With no epoch known (every batch of the producer gone) any sequence is accepted.
        if not (
            self.current_entry.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(current_last_seq, first_seq)
        ):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {self.producer_id} at offset {offset} in "
                f"{self.topic_partition}: {first_seq} (incoming), {current_last_seq} (current end sequence)"
            )

    def append_data_batch(
        self,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        transactional: bool = False,
    ) -> None:
        self._check_producer_epoch(producer_epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(producer_epoch, first_seq, first_offset)
        updated = self.updated_entry
        updated.add_batch(producer_epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        if updated.current_txn_first_offset >= 0 and not transactional:
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {self.producer_id} at offset {first_offset} "
                f"in {self.topic_partition}: its transaction opened at offset "
                f"{updated.current_txn_first_offset} is not ended"
            )
        if updated.current_txn_first_offset < 0 and transactional:
            updated.current_txn_first_offset = first_offset
            self.started_transactions.append(first_offset)

    def append_end_txn_marker(
        self, marker: EndTransactionMarker, producer_epoch: int, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        """Kafka's ``appendEndTxnMarker``: the transaction it ends, None if the producer had none open here
        (a marker for an empty transaction changes neither the LSO nor the ``.txnindex``)."""
        self._check_producer_epoch(producer_epoch, offset)
        updated = self.updated_entry
        if updated.coordinator_epoch > marker.coordinator_epoch:
            message = (
                f"invalid coordinator epoch for producer {self.producer_id} at offset {offset} in "
                f"{self.topic_partition}: {marker.coordinator_epoch} (zombie), {updated.coordinator_epoch} "
                "(current)"
            )
            if self.origin is AppendOrigin.REPLICATION:
                logger.info("%s", message)
            else:
                raise TransactionCoordinatorFencedError(message)
        completed = None
        if updated.current_txn_first_offset >= 0:
            completed = CompletedTxn(
                self.producer_id, updated.current_txn_first_offset, offset, not marker.is_commit
            )
        updated.end_transaction(producer_epoch, marker.coordinator_epoch, timestamp)
        return completed

    def append(
        self, header: BatchHeader, marker: EndTransactionMarker | None = None, marker_timestamp: int = -1
    ) -> CompletedTxn | None:
        """Check and take in one batch whose offsets are assigned; for a control batch, ``marker`` is its
        end-transaction marker (None: an empty control batch, which changes nothing)."""
        if is_control(header):
            if marker is None:
                return None
            return self.append_end_txn_marker(
                marker, header.producer_epoch, header.base_offset, marker_timestamp
            )
        self.append_data_batch(
            header.producer_epoch,
            header.base_sequence,
            last_sequence(header),
            header.max_timestamp,
            header.base_offset,
            header.last_offset,
            is_transactional(header),
        )
        return None

    def to_entry(self) -> ProducerStateEntry:
        return self.updated_entry
