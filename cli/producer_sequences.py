"""An idempotent producer's sequence numbers (KIP-98), per partition: pure, no I/O.

Each batch gets the partition's producer epoch and next sequence when it is created; its retries carry the
same (epoch, sequence), so a leader that already wrote it answers with the first write's offsets. A
partition's batches are written in sequence order because the leader refuses a gap
(OUT_OF_ORDER_SEQUENCE_NUMBER): a batch refused so while an earlier one of its partition is still unacked
waits for that one and goes again.

When the earliest unacked batch of a partition is itself refused as out of order, the gap cannot close (the
batch before it was lost, or failed for good). As Kafka's idempotent producer does since KIP-360, the
producer then bumps its epoch and starts the partition's sequences again at 0: every unacked batch of the
partition is given the new epoch and a new sequence, in order. (Kafka bumps the epoch for every partition;
a leader keeps its producer state per partition, so bumping the one partition is the same to the leader.)
A batch that was written under the old epoch and whose answer was lost may then be written a second time:
the one case in which an idempotent producer writes a duplicate, and rarer than with Kafka's clients.
"""

from __future__ import annotations

from dataclasses import dataclass

INT32_MAX = 2**31 - 1
INT16_MAX = 2**15 - 1


class EpochExhaustedError(Exception):
    """The producer epoch cannot go higher: a new producer id is needed (INIT_PRODUCER_ID)."""


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping from 2**31 - 1 to 0 as Kafka's producers and brokers do."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


@dataclass(frozen=True, slots=True)
class Assignment:
    """What a batch is sent with: the producer epoch and its first record's sequence."""

    epoch: int
    base_sequence: int


class PartitionSequences:
    """One partition's epoch, next sequence, and its batches from the earliest unacknowledged one on, in
    sequence order, with what keeps them in that order on the wire:

    - ``window``: a leader recognises a retry only among a producer's last five batches, so the batches
      from the earliest unacknowledged one to the newest (acknowledged or not) stay below five (Kafka's
      clients get the same bound from answers arriving in order on a connection);
    - ``confirmed``: until one batch of the epoch is acknowledged the leader may not know the producer, and
      would take any sequence as its first: one batch at a time until then;
    - ``may_send``: a batch goes out (first time or again) only when no earlier unacknowledged batch is
      waiting to go out again (Kafka's producer drains retried batches in sequence order)."""

    def __init__(self, epoch: int = 0) -> None:
        self.epoch = epoch
        self.next_sequence = 0
        self.confirmed = False
        # batch id -> its state, in sequence order; finished ones leave from the front.
        self._batches: dict[int, _Batch] = {}
        self.epoch_bumps = 0

    def add(self, batch_id: int, records: int) -> Assignment:
        """A new batch of ``records`` records: the next sequences of the current epoch."""
        assignment = Assignment(self.epoch, self.next_sequence)
        self._batches[batch_id] = _Batch(records, assignment)
        self.next_sequence = increment_sequence(self.next_sequence, records)
        return assignment

    def assignment(self, batch_id: int) -> Assignment:
        return self._batches[batch_id].assignment

    @property
    def window(self) -> int:
        """Batches from the earliest unacknowledged one to the newest."""
        return len(self._batches)

    def has_room(self, max_in_flight: int) -> bool:
        """Whether a new batch may be added now."""
        return self.window < (max_in_flight if self.confirmed else 1)

    @property
    def unacked(self) -> list[int]:
        return [b for b, batch in self._batches.items() if not batch.finished]

    def is_first(self, batch_id: int) -> bool:
        """Whether ``batch_id`` is the earliest unacked batch (no gap before it can still close)."""
        return next(iter(self._batches), None) == batch_id

    def may_send(self, batch_id: int) -> bool:
        for other, batch in self._batches.items():
            if other == batch_id:
                return True
            if not batch.finished and batch.to_send:
                return False
        return True

    def sending(self, batch_id: int) -> None:
        """The batch goes out now (its request is written next)."""
        self._batches[batch_id].to_send = False

    def to_resend(self, batch_id: int) -> None:
        """The batch's attempt failed: it goes out again (later batches wait for it)."""
        self._batches[batch_id].to_send = True

    def done(self, batch_id: int, *, acked: bool) -> None:
        """The batch was acknowledged, or failed for good."""
        batch = self._batches.get(batch_id)
        if batch is not None:
            batch.finished = True
            if acked and batch.assignment.epoch == self.epoch:
                self.confirmed = True
        while self._batches:
            first = next(iter(self._batches))
            if not self._batches[first].finished:
                break
            del self._batches[first]

    def bump_epoch(self) -> None:
        """A new epoch (KIP-360): the unacked batches get sequences from 0 again, in order."""
        if self.epoch >= INT16_MAX:
            raise EpochExhaustedError(f"producer epoch {self.epoch} cannot be bumped")
        self.epoch += 1
        self.epoch_bumps += 1
        self.next_sequence = 0
        self.confirmed = False
        for batch_id, batch in list(self._batches.items()):
            if batch.finished:
                del self._batches[batch_id]  # written under the old epoch: out of the new one's window
                continue
            batch.assignment = Assignment(self.epoch, self.next_sequence)
            self.next_sequence = increment_sequence(self.next_sequence, batch.records)


@dataclass(slots=True)
class _Batch:
    records: int
    assignment: Assignment
    to_send: bool = True
    finished: bool = False


__all__ = ["Assignment", "EpochExhaustedError", "PartitionSequences", "increment_sequence"]
