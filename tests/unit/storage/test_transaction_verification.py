"""KIP-890 part 1 in the log: the verification-guard cases of Kafka's ProducerStateManagerTest and
UnifiedLogTest (a guard per producer, reused until a transactional batch or marker clears it; a
transactional batch without an open transaction needs the current guard), replayed on isrsim's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.control_records import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
from protocol.errors import Errors, KafkaError
from protocol.record_codec import Record
from protocol.records import TRANSACTIONAL_FLAG_MASK, build_batch
from storage.log import Log, LogConfig
from storage.producer_state_entry import AppendOrigin
from storage.verification_guard import SENTINEL, VerificationGuard, VerificationStates

PID = 7
EPOCH = 0


def _txn(seq: int, n: int = 2, pid: int = PID, epoch: int = EPOCH) -> bytes:
    return build_batch(
        [Record(i, 0, None, b"t") for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=TRANSACTIONAL_FLAG_MASK,
    )


def _marker(control_type: ControlRecordType, pid: int = PID) -> bytes:
    return build_end_txn_marker_batch(pid, EPOCH, EndTransactionMarker(control_type, 0), timestamp_ms=1)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log.open(tmp_path / "t-0", "t", 0, LogConfig())


def _refused(log: Log, records: bytes, guard: VerificationGuard | None) -> Errors:
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(records, 0, AppendOrigin.CLIENT, guard)
    return e.value.error


def test_the_sentinel_never_verifies_and_a_guard_only_itself() -> None:
    a, b = VerificationGuard(), VerificationGuard()
    assert a.verify(a) and not a.verify(b) and not a.verify(SENTINEL)
    assert not SENTINEL.verify(SENTINEL)


def test_a_second_verification_reuses_the_guard_and_tracks_the_lowest_sequence_and_latest_epoch() -> None:
    states = VerificationStates()
    first = states.start(PID, 5, 0, now_ms=1)
    assert states.start(PID, 3, 0, now_ms=2).guard is first.guard
    assert (first.lowest_sequence, first.epoch) == (3, 0)
    states.start(PID, 9, 1, now_ms=3)  # a newer epoch: its sequence, whatever it is
    assert (first.lowest_sequence, first.epoch) == (9, 1)
    states.start(PID, 1, 0, now_ms=4)  # an older epoch changes nothing
    assert (first.lowest_sequence, first.epoch) == (9, 1)
    states.clear(PID)
    assert states.guard(PID) is SENTINEL
    assert states.start(PID, 0, 1, now_ms=5).guard is not first.guard


def test_entries_expire_with_the_producer_id_expiration() -> None:
    states = VerificationStates()
    states.start(PID, 0, 0, now_ms=1_000)
    states.start(PID + 1, 0, 0, now_ms=5_000)
    states.remove_expired(now_ms=6_000, expiration_ms=5_000)
    assert states.entry(PID) is None and states.entry(PID + 1) is not None


def test_a_transactional_batch_needs_the_producers_guard_when_no_transaction_is_open(log: Log) -> None:
    assert _refused(log, _txn(0), SENTINEL) is Errors.INVALID_TXN_STATE
    assert _refused(log, _txn(0), VerificationGuard()) is Errors.INVALID_TXN_STATE  # not the producer's
    assert log.log_end_offset == 0
    guard = log.maybe_start_transaction_verification(PID, 0, EPOCH)
    assert guard is not SENTINEL
    log.append_as_leader(_txn(0), 0, AppendOrigin.CLIENT, guard)
    assert log.has_ongoing_transaction(PID)
    # The transaction is open: its guard is gone, and the next batches need none.
    assert log.producer_state_manager.verification_states.entry(PID) is None
    assert log.maybe_start_transaction_verification(PID, 2, EPOCH) is SENTINEL
    log.append_as_leader(_txn(2), 0, AppendOrigin.CLIENT, SENTINEL)
    assert log.log_end_offset == 4


def test_a_marker_clears_the_guard_so_a_write_verified_before_an_abort_is_refused_after_it(log: Log) -> None:
    guard = log.maybe_start_transaction_verification(PID, 0, EPOCH)
    log.append_as_leader(_txn(0), 0, AppendOrigin.CLIENT, guard)
    late = log.maybe_start_transaction_verification(PID, 2, EPOCH)
    assert late is SENTINEL  # the transaction is open: nothing to verify
    log.append_as_leader(_marker(ControlRecordType.ABORT), 0, AppendOrigin.COORDINATOR)
    assert not log.has_ongoing_transaction(PID)
    # A late batch of the aborted transaction (in flight during the abort) opens nothing.
    assert _refused(log, _txn(2), late) is Errors.INVALID_TXN_STATE
    # Verification started before the marker, its append after it: the marker cleared the guard.
    before_marker = log.maybe_start_transaction_verification(PID, 2, EPOCH)
    log.append_as_leader(_marker(ControlRecordType.ABORT), 0, AppendOrigin.COORDINATOR)
    assert _refused(log, _txn(2), before_marker) is Errors.INVALID_TXN_STATE
    assert not log.has_ongoing_transaction(PID)


def test_the_legacy_mode_lets_a_late_write_open_a_hanging_transaction(log: Log) -> None:
    log.append_as_leader(_txn(0), 0)  # no guard given: transaction.partition.verification.enable=false
    log.append_as_leader(_marker(ControlRecordType.ABORT), 0, AppendOrigin.COORDINATOR)
    log.append_as_leader(_txn(2), 0)
    assert log.has_ongoing_transaction(PID)
    assert log.producer_state_manager.first_undecided_offset() == 3


def test_non_transactional_batches_need_no_verification(log: Log) -> None:
    idempotent = build_batch(
        [Record(0, 0, None, b"p")], producer_id=PID + 1, producer_epoch=0, base_sequence=0
    )
    log.append_as_leader(build_batch([Record(0, 0, None, b"p")]), 0, AppendOrigin.CLIENT, SENTINEL)
    log.append_as_leader(idempotent, 0, AppendOrigin.CLIENT, SENTINEL)
    assert log.log_end_offset == 2
