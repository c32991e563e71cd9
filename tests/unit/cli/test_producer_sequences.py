"""An idempotent producer's per-partition sequences: sequences per batch, the five-batch window counted
from the earliest unacknowledged batch, one batch at a time until the leader knows the producer, resends in
sequence order, and the epoch bump that starts the unacknowledged batches at sequence 0 again."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli.producer_sequences import (
    INT32_MAX,
    Assignment,
    EpochExhaustedError,
    PartitionSequences,
    increment_sequence,
)


def test_batches_get_consecutive_sequences_of_the_epoch() -> None:
    s = PartitionSequences(epoch=3)
    assert s.add(1, 200) == Assignment(3, 0)
    assert s.add(2, 50) == Assignment(3, 200)
    assert s.next_sequence == 250
    assert s.assignment(1) == Assignment(3, 0)


def test_one_batch_at_a_time_until_one_is_acknowledged() -> None:
    s = PartitionSequences()
    assert s.has_room(5)
    s.add(1, 10)
    assert not s.has_room(5)  # the leader may not know the producer: any sequence would be its first
    s.done(1, acked=True)
    assert s.confirmed and s.has_room(5)


def test_window_counts_from_the_earliest_unacknowledged_batch() -> None:
    s = PartitionSequences()
    s.add(0, 1)
    s.done(0, acked=True)
    for b in range(1, 6):
        s.add(b, 1)
    assert s.window == 5 and not s.has_room(5)
    # Later batches acknowledged while batch 1 waits: the leader has written them after it, so a retry of
    # batch 1 must still be among the leader's last five: no new batch yet.
    for b in (2, 3, 4, 5):
        s.done(b, acked=True)
    assert s.window == 5 and not s.has_room(5)
    s.done(1, acked=True)
    assert s.window == 0 and s.has_room(5)


def test_a_resend_goes_before_any_later_batch() -> None:
    s = PartitionSequences()
    for b in range(3):
        s.add(b, 1)
        s.sending(b)
    s.to_resend(1)
    assert s.may_send(1) and s.may_send(0)
    assert not s.may_send(2)  # batch 1 must go out again first
    s.sending(1)
    assert s.may_send(2)
    assert s.is_first(0) and not s.is_first(1)


def test_epoch_bump_starts_the_unacknowledged_batches_at_zero_in_order() -> None:
    s = PartitionSequences(epoch=0)
    for b, n in enumerate((10, 20, 30)):
        s.add(b, n)
    s.done(1, acked=True)  # written: stays out of the new epoch
    s.bump_epoch()
    assert (s.epoch, s.epoch_bumps, s.confirmed) == (1, 1, False)
    assert s.assignment(0) == Assignment(1, 0)
    assert s.assignment(2) == Assignment(1, 10)
    assert s.add(3, 5) == Assignment(1, 40)


def test_epoch_cannot_pass_int16() -> None:
    s = PartitionSequences(epoch=2**15 - 1)
    with pytest.raises(EpochExhaustedError):
        s.bump_epoch()


@given(st.integers(0, INT32_MAX), st.integers(0, 100_000))
def test_sequences_wrap_as_kafkas(sequence: int, increment: int) -> None:
    assert increment_sequence(sequence, increment) == (sequence + increment) % (INT32_MAX + 1)
