"""Transactions in the log: Kafka's TransactionIndexTest, the transactional cases of
ProducerStateManagerTest and UnifiedLogTest's LSO and aborted-transaction cases, replayed on isrsim's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    decode_end_txn_marker,
    read_end_txn_marker,
)
from protocol.errors import Errors, KafkaError
from protocol.record_codec import Record
from protocol.records import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    build_batch,
    read_header,
)
from storage.log import Log, LogConfig
from storage.log_validator import validate_records_as_leader
from storage.producer_state import ProducerStateManager, decode_snapshot, encode_snapshot
from storage.producer_state_entry import AppendOrigin, ProducerStateEntry
from storage.transaction_index import ABORTED_TXN_SIZE, AbortedTxn, CompletedTxn, TransactionIndex

EPOCH = 0


# ------------------------------------------------------------------ control records


def test_end_transaction_marker_bytes_are_kafkas() -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 7)
    assert marker.key_bytes() == b"\x00\x00\x00\x01"  # version 0, type 1
    assert marker.value_bytes() == b"\x00\x00\x00\x00\x00\x07"  # version 0, coordinator epoch 7
    batch = build_end_txn_marker_batch(42, 3, marker, timestamp_ms=1000)
    header = read_header(batch)
    assert header.attributes == CONTROL_FLAG_MASK | TRANSACTIONAL_FLAG_MASK
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    assert header.records_count == 1
    assert read_end_txn_marker(batch) == (marker, 1000)
    with pytest.raises(KafkaError) as e:
        decode_end_txn_marker(b"\x00\x00\x00\x05", marker.value_bytes())
    assert e.value.error is Errors.INVALID_RECORD


def test_the_validator_takes_control_batches_only_from_the_leader_itself() -> None:
    batch = build_end_txn_marker_batch(
        42, 0, EndTransactionMarker(ControlRecordType.ABORT, 0), timestamp_ms=1
    )
    with pytest.raises(KafkaError, match="control") as e:
        validate_records_as_leader(batch)
    assert e.value.error is Errors.INVALID_RECORD
    assert validate_records_as_leader(batch, allow_control=True).batches[0][1].producer_id == 42
    # A transactional batch needs a producer id (and, from a client, a sequence).
    orphan = build_batch([Record(0, 0, None, b"v")], attributes=TRANSACTIONAL_FLAG_MASK)
    with pytest.raises(KafkaError, match="producer id"):
        validate_records_as_leader(orphan)


# ------------------------------------------------------------------ TransactionIndexTest


def test_aborted_txn_is_34_bytes_as_kafka_writes_it() -> None:
    txn = AbortedTxn(producer_id=983493, first_offset=5, last_offset=10, last_stable_offset=2)
    data = txn.encode()
    assert len(data) == ABORTED_TXN_SIZE == 34
    assert data == (
        (0).to_bytes(2, "big")
        + (983493).to_bytes(8, "big")
        + (5).to_bytes(8, "big")
        + (10).to_bytes(8, "big")
        + (2).to_bytes(8, "big")
    )


def test_collect_aborted_transactions(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    aborted = [
        AbortedTxn(0, 0, 10, 11),
        AbortedTxn(1, 5, 15, 13),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    for txn in aborted:
        index.append(txn)
    assert index.collect_aborted_txns(0, 100) == (aborted, False)
    assert index.collect_aborted_txns(0, 32) == (aborted[:3], True)
    assert index.collect_aborted_txns(0, 35) == (aborted, True)
    assert index.collect_aborted_txns(10, 35) == (aborted, True)
    assert index.collect_aborted_txns(11, 35) == (aborted[1:4], True)
    assert index.collect_aborted_txns(20, 41) == (aborted[2:4], False)
    # Reopened, the file holds the same entries.
    assert TransactionIndex(index.path, 0).entries == aborted


def test_truncate_and_reset(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    aborted = [
        AbortedTxn(0, 0, 10, 2),
        AbortedTxn(1, 5, 15, 16),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    for txn in aborted:
        index.append(txn)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100)[0] == aborted
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100)[0] == aborted[:3]
    assert TransactionIndex(index.path, 0).entries == aborted[:3]
    index.reset()
    assert index.collect_aborted_txns(0, 100)[0] == [] and not index.path.exists()


def test_last_offset_must_increase_and_a_torn_entry_is_dropped(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 15, 11))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 10, 11))
    assert not index.maybe_append(AbortedTxn(1, 5, 15, 13))
    index.path.write_bytes(index.path.read_bytes() + b"\x00" * 20)  # a kill mid-append
    assert TransactionIndex(index.path, 0).entries == [AbortedTxn(1, 5, 15, 13)]
    assert index.path.stat().st_size == ABORTED_TXN_SIZE


# ------------------------------------------------------------------ ProducerStateManagerTest (transactional)


def _txn_batch(
    pid: int, seq: int, n: int, offset: int, *, epoch: int = EPOCH, transactional: bool = True
) -> BatchHeader:
    return read_header(
        build_batch(
            [Record(i, 0, None, b"v") for i in range(n)],
            base_offset=offset,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            attributes=TRANSACTIONAL_FLAG_MASK if transactional else 0,
            base_timestamp=1_000,
        )
    )


def _header_at(pid: int, offset: int, epoch: int) -> BatchHeader:
    batch = bytearray(
        build_end_txn_marker_batch(
            pid, epoch, EndTransactionMarker(ControlRecordType.ABORT, 0), timestamp_ms=1
        )
    )
    batch[0:8] = offset.to_bytes(8, "big")
    return read_header(batch)


def _manager(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager("t-0", tmp_path, clock_ms=lambda: 1_000)


def _append(
    manager: ProducerStateManager,
    header: BatchHeader,
    marker: EndTransactionMarker | None = None,
    origin: AppendOrigin = AppendOrigin.CLIENT,
) -> CompletedTxn | None:
    info = manager.prepare_update(header.producer_id, origin)
    completed = info.append(header, marker, 1)
    manager.update(info)
    manager.update_map_end_offset(header.next_offset)
    if completed is not None:
        manager.complete_txn(completed)
    return completed


def test_a_non_transactional_append_with_an_ongoing_transaction_is_refused(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    _append(manager, _txn_batch(1, 0, 1, 99))
    info = manager.prepare_update(1, AppendOrigin.CLIENT)
    with pytest.raises(KafkaError) as e:
        info.append(_txn_batch(1, 1, 1, 100, transactional=False))
    assert e.value.error is Errors.INVALID_TXN_STATE


def test_first_unstable_offset_and_last_stable_offset_of_a_completed_transaction(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    assert manager.first_unstable_offset() is None
    _append(manager, _txn_batch(1, 0, 1, 99))
    _append(manager, _txn_batch(2, 0, 1, 100))
    assert manager.first_unstable_offset() == 99
    assert manager.last_entry(1).current_txn_first_offset == 99  # type: ignore[union-attr]
    commit = EndTransactionMarker(ControlRecordType.COMMIT, 0)
    info = manager.prepare_update(1, AppendOrigin.COORDINATOR)
    completed = info.append(_header_at(1, 101, EPOCH), commit, 1)
    assert completed == CompletedTxn(1, 99, 101, is_aborted=False)
    assert manager.last_stable_offset(completed) == 100  # the other producer's transaction
    manager.update(info)
    manager.complete_txn(completed)
    # Decided, but its marker is not below the high watermark yet.
    assert manager.first_unstable_offset() == 99
    manager.on_high_watermark_updated(102)
    assert manager.first_unstable_offset() == 100
    assert manager.first_undecided_offset() == 100


def test_markers_check_the_producer_epoch_and_the_coordinator_epoch(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    _append(manager, _txn_batch(1, 0, 1, 0, epoch=2))
    info = manager.prepare_update(1, AppendOrigin.COORDINATOR)
    with pytest.raises(KafkaError) as e:
        info.append(_header_at(1, 1, 1), EndTransactionMarker(ControlRecordType.COMMIT, 0), 1)
    assert e.value.error is Errors.INVALID_PRODUCER_EPOCH
    _append(
        manager,
        _header_at(1, 1, 2),
        EndTransactionMarker(ControlRecordType.COMMIT, 5),
        AppendOrigin.COORDINATOR,
    )
    assert manager.last_entry(1).coordinator_epoch == 5  # type: ignore[union-attr]
    _append(manager, _txn_batch(1, 1, 1, 2, epoch=2))
    info = manager.prepare_update(1, AppendOrigin.COORDINATOR)
    with pytest.raises(KafkaError) as e:
        info.append(_header_at(1, 3, 2), EndTransactionMarker(ControlRecordType.COMMIT, 4), 1)
    assert e.value.error is Errors.TRANSACTION_COORDINATOR_FENCED
    # A follower takes it (logged, as Kafka does).
    info = manager.prepare_update(1, AppendOrigin.REPLICATION)
    assert info.append(_header_at(1, 3, 2), EndTransactionMarker(ControlRecordType.COMMIT, 4), 1) is not None


def test_a_marker_without_an_open_transaction_completes_nothing(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    completed = _append(
        manager,
        _header_at(1, 0, 0),
        EndTransactionMarker(ControlRecordType.ABORT, 0),
        AppendOrigin.COORDINATOR,
    )
    assert completed is None and manager.first_unstable_offset() is None


def test_snapshots_carry_the_open_transaction_and_an_open_transaction_never_expires(tmp_path: Path) -> None:
    entry = ProducerStateEntry(7, 1, 3, 500, current_txn_first_offset=42)
    assert decode_snapshot(encode_snapshot([entry]))[0].current_txn_first_offset == 42
    manager = _manager(tmp_path)
    _append(manager, _txn_batch(1, 0, 2, 10))
    _append(manager, _txn_batch(2, 0, 2, 12, transactional=False))
    manager.take_snapshot()
    reloaded = ProducerStateManager("t-0", tmp_path, clock_ms=lambda: 1_000)
    reloaded.truncate_and_reload(0, 14, now_ms=10**12)  # long after both producers' last write
    assert set(reloaded.active_producers) == {1}  # the idle one expired, the one in a transaction not
    assert reloaded.first_unstable_offset() == 10


# ------------------------------------------------------------------ UnifiedLogTest (LSO, .txnindex)


class _Writer:
    """Appends like Kafka's UnifiedLogTest helpers: transactional data per producer, plain data, markers."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}

    def txn(self, pid: int, n: int) -> None:
        seq = self.sequences.get(pid, 0)
        batch = build_batch(
            [Record(i, 0, None, b"t") for i in range(n)],
            producer_id=pid,
            producer_epoch=EPOCH,
            base_sequence=seq,
            attributes=TRANSACTIONAL_FLAG_MASK,
        )
        self.sequences[pid] = seq + n
        self.log.append_as_leader(batch, 0)

    def plain(self, n: int) -> None:
        self.log.append_as_leader(build_batch([Record(i, 0, None, b"p") for i in range(n)]), 0)

    def marker(self, pid: int, control_type: ControlRecordType) -> None:
        batch = build_end_txn_marker_batch(pid, EPOCH, EndTransactionMarker(control_type, 0), timestamp_ms=1)
        self.log.append_as_leader(batch, 0, AppendOrigin.COORDINATOR)


def _mixed_log(directory: Path, segment_bytes: int = 1 << 30) -> Log:
    """UnifiedLogTest.testTransactionIndexUpdated's log: four producers, two aborts, two commits."""
    log = Log.open(directory, "t", 0, LogConfig(segment_bytes=segment_bytes))
    w = _Writer(log)
    pid1, pid2, pid3, pid4 = 1, 2, 3, 4
    w.txn(pid1, 5)  # 5
    w.plain(3)  # 8
    w.txn(pid2, 2)  # 10
    w.txn(pid1, 4)  # 14
    w.txn(pid3, 3)  # 17
    w.plain(2)  # 19
    w.txn(pid1, 10)  # 29
    w.marker(pid1, ControlRecordType.ABORT)  # 30
    w.txn(pid2, 6)  # 36
    w.txn(pid4, 3)  # 39
    w.plain(10)  # 49
    w.txn(pid3, 9)  # 58
    w.marker(pid3, ControlRecordType.COMMIT)  # 59
    w.txn(pid4, 8)  # 67
    w.txn(pid2, 7)  # 74
    w.marker(pid2, ControlRecordType.ABORT)  # 75
    w.plain(10)  # 85
    w.txn(pid4, 4)  # 89
    w.marker(pid4, ControlRecordType.COMMIT)  # 90
    return log


EXPECTED_ABORTED = [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]


def test_the_transaction_index_and_the_first_unstable_offset(tmp_path: Path) -> None:
    log = _mixed_log(tmp_path / "t-0")
    assert log.log_end_offset == 90
    assert log.aborted_transactions() == EXPECTED_ABORTED
    assert log.last_stable_offset(30) == 8
    assert log.last_stable_offset(75) == 36
    assert log.last_stable_offset(90) == 90 and log.first_unstable_offset() is None
    assert log.collect_aborted_transactions(0, 90) == EXPECTED_ABORTED
    assert log.collect_aborted_transactions(30, 90) == [EXPECTED_ABORTED[1]]
    assert log.collect_aborted_transactions(75, 90) == []


def test_a_follower_builds_the_same_index_and_recovery_rebuilds_it(tmp_path: Path) -> None:
    leader = _mixed_log(tmp_path / "leader" / "t-0", segment_bytes=500)
    assert len(leader.segments) > 2
    follower = Log.open(tmp_path / "follower" / "t-0", "t", 0, LogConfig(segment_bytes=500))
    offset = 0
    while offset < leader.log_end_offset:
        data = leader.read(offset, 300)
        follower.append_as_follower(data)
        offset = follower.log_end_offset
    assert follower.aborted_transactions() == EXPECTED_ABORTED
    # Each entry sits in the segment of its marker, on both.
    assert [[t for t in s.txn_index] for s in follower.segments] == [
        [t for t in s.txn_index] for s in leader.segments
    ]
    assert follower.last_stable_offset(follower.log_end_offset) == 90

    # Lost .txnindex files and snapshots: the replay of the log on opening writes them again.
    follower.close()
    directory = tmp_path / "follower" / "t-0"
    for path in [*directory.glob("*.txnindex"), *directory.glob("*.snapshot")]:
        path.unlink()
    reopened = Log.open(directory, "t", 0, LogConfig(segment_bytes=500))
    assert reopened.aborted_transactions() == EXPECTED_ABORTED


def test_truncation_takes_the_index_and_the_open_transactions_back(tmp_path: Path) -> None:
    log = _mixed_log(tmp_path / "t-0")
    log.truncate_to(74)  # pid2's abort marker goes
    assert log.aborted_transactions() == [EXPECTED_ABORTED[0]]
    assert log.last_stable_offset(74) == 8  # pid2's transaction at 8 is open again
    log.truncate_to(29)  # pid1's abort marker goes
    assert log.aborted_transactions() == []
    assert log.last_stable_offset(29) == 0
    # A snapshot of the truncated log knows the open transactions after a restart.
    log.take_producer_snapshot()
    log.close()
    reopened = Log.open(tmp_path / "t-0", "t", 0, LogConfig(), had_clean_shutdown=True)
    assert reopened.last_stable_offset(29) == 0
    assert {
        p: e.current_txn_first_offset for p, e in reopened.producer_state_manager.active_producers.items()
    } == {
        1: 0,
        2: 8,
        3: 14,
    }
