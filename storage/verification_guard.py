"""KIP-890 part 1 on a partition leader: Kafka's ``VerificationGuard`` and ``VerificationStateEntry``.

Before a leader appends a transactional batch of a producer that has no open transaction on the partition,
it asks the transaction coordinator whether the partition is in the producer's ongoing transaction
(AddPartitionsToTxn v4 ``verify_only``). The question and its answer are tied together by a guard: the
leader makes a fresh guard for the producer when it starts to verify (:meth:`VerificationStates.start`),
and the append, once the coordinator confirmed, carries the guard it was given. The log accepts the
transactional batch only if the producer then has an open transaction, or if the guard it carries is still
the producer's guard. Any transactional batch or marker of the producer written in between clears the
producer's guard, so an append verified before an abort's marker and arriving after it is refused
(INVALID_TXN_STATE) instead of opening a transaction nobody will end (a hanging transaction).

A guard is compared by identity; :data:`SENTINEL` is the guard of "no verification" (a non-transactional
append, the replication path, the legacy mode) and never verifies. The entries of idle producers go with
``producer.id.expiration.ms``, as Kafka's ``removeExpiredProducers`` drops them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

_ids = itertools.count(1)


class VerificationGuard:
    """An object whose identity ties a verification to the append it allows (Kafka's
    ``VerificationGuard``)."""

    __slots__ = ("_id",)

    def __init__(self) -> None:
        self._id = next(_ids)

    def verify(self, verifying: VerificationGuard) -> bool:
        """Whether ``verifying`` (an append's guard) is this guard, and this is not the sentinel."""
        return self is not SENTINEL and verifying is self

    def __repr__(self) -> str:
        return "VerificationGuard(SENTINEL)" if self is SENTINEL else f"VerificationGuard({self._id})"


SENTINEL = VerificationGuard()


@dataclass(slots=True)
class VerificationStateEntry:
    """A producer's verification in progress on one partition (Kafka's ``VerificationStateEntry``): its
    guard, when it started, and the lowest sequence and latest epoch the verifications asked with."""

    guard: VerificationGuard
    timestamp_ms: int
    lowest_sequence: int
    epoch: int

    def maybe_update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence
        elif epoch == self.epoch:
            self.lowest_sequence = min(self.lowest_sequence, sequence)


class VerificationStates:
    """The verification entries of one partition's producers, by producer id (kept beside the
    partition's ``ProducerStateManager``)."""

    def __init__(self) -> None:
        self._entries: dict[int, VerificationStateEntry] = {}

    def start(self, producer_id: int, sequence: int, epoch: int, now_ms: int) -> VerificationStateEntry:
        """The producer's entry, made with a fresh guard if it has none (Kafka's
        ``maybeCreateVerificationStateEntry``: a second verification before the first append reuses the
        guard, so a retry verified twice still appends once)."""
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = VerificationStateEntry(VerificationGuard(), now_ms, sequence, epoch)
            self._entries[producer_id] = entry
        else:
            entry.maybe_update_lowest_sequence_and_epoch(sequence, epoch)
        return entry

    def entry(self, producer_id: int) -> VerificationStateEntry | None:
        return self._entries.get(producer_id)

    def guard(self, producer_id: int) -> VerificationGuard:
        """The producer's current guard, :data:`SENTINEL` when it has none."""
        entry = self._entries.get(producer_id)
        return SENTINEL if entry is None else entry.guard

    def clear(self, producer_id: int) -> None:
        self._entries.pop(producer_id, None)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        for producer_id in [p for p, e in self._entries.items() if now_ms - e.timestamp_ms >= expiration_ms]:
            del self._entries[producer_id]

    def __len__(self) -> int:
        return len(self._entries)
