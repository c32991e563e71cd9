"""TxnOffsetCommit at the group coordinator, as Kafka's: the offsets are written to the group's
``__consumer_offsets`` partition as records of the producer's transaction, answered once written, held for
the transaction, made committed by its commit marker (no second write), dropped by an abort marker, and
unstable (KIP-447) until then; a load of the partition decides them from the markers in the log."""

from __future__ import annotations

from coordinator.group.coordinator_core import (
    CommitResult,
    GroupConfig,
    GroupCoordinatorCore,
    LoadedGroup,
    Respond,
    StoreTxnOffsets,
    TxnOffsetsCommitted,
)
from coordinator.group.group_metadata import OffsetAndMetadata
from coordinator.group.offsets_log import GroupLoader, offset_commit_batch
from protocol.common import MockTime
from protocol.control_records import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
from protocol.errors import Errors
from protocol.records import read_header

GROUP = "g"
TP = ("t", 0)


def core() -> tuple[GroupCoordinatorCore, int]:
    c = GroupCoordinatorCore(GroupConfig(), MockTime(1_000), new_member_id=lambda p: p)
    partition = c.partition_for(GROUP)
    c.on_election(partition)
    c.on_loaded(partition, {})
    return c, partition


def stored(c: GroupCoordinatorCore, offset: int, producer_id: int = 7) -> StoreTxnOffsets:
    (store,) = c.txn_commit_offsets(
        "tok", GROUP, producer_id, "", -1, {TP: OffsetAndMetadata(offset)}, producer_epoch=2
    )
    assert isinstance(store, StoreTxnOffsets)
    assert (store.producer_id, store.producer_epoch, store.offsets[TP].offset) == (producer_id, 2, offset)
    assert c.unstable_offsets(GROUP) == {TP}  # being written
    assert c.on_txn_offsets_stored(store, Errors.NONE, "written") == [
        Respond("tok", CommitResult({TP: Errors.NONE}))
    ]
    return store


def test_offsets_are_written_then_held_until_the_commit_marker() -> None:
    c, partition = core()
    store = stored(c, 5)
    assert c.fetch_offsets(GROUP, [TP]) == (Errors.NONE, {TP: None})
    assert c.unstable_offsets(GROUP) == {TP}
    # Another producer's marker, or one on another partition, changes nothing.
    assert c.complete_txn_offsets(8, partition, True) == []
    assert c.complete_txn_offsets(7, partition + 1, True) == []
    assert c.complete_txn_offsets(7, partition, True) == [TxnOffsetsCommitted(store, "written")]
    assert c.unstable_offsets(GROUP) == set()
    error, offsets = c.fetch_offsets(GROUP, [TP])
    assert error == Errors.NONE and offsets[TP] is not None and offsets[TP].offset == 5


def test_an_abort_marker_drops_them() -> None:
    c, partition = core()
    stored(c, 5)
    assert c.complete_txn_offsets(7, partition, False) == []
    assert c.unstable_offsets(GROUP) == set()
    assert c.fetch_offsets(GROUP, [TP]) == (Errors.NONE, {TP: None})


def test_a_failed_write_is_answered_and_holds_nothing() -> None:
    c, partition = core()
    (store,) = c.txn_commit_offsets("tok", GROUP, 7, "", -1, {TP: OffsetAndMetadata(5)}, producer_epoch=0)
    assert isinstance(store, StoreTxnOffsets)
    assert c.on_txn_offsets_stored(store, Errors.NOT_ENOUGH_REPLICAS) == [
        Respond("tok", CommitResult({TP: Errors.COORDINATOR_NOT_AVAILABLE}))
    ]
    assert c.unstable_offsets(GROUP) == set()
    assert c.complete_txn_offsets(7, partition, True) == []


def test_a_member_must_be_known_and_of_the_current_generation() -> None:
    c, _ = core()
    effects = c.txn_commit_offsets("tok", GROUP, 7, "stranger", 3, {TP: OffsetAndMetadata(5)})
    assert effects == [Respond("tok", CommitResult({TP: Errors.UNKNOWN_MEMBER_ID}))]
    assert c.unstable_offsets(GROUP) == set()


def _marker(producer_id: int, commit: bool) -> bytes:
    control = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_end_txn_marker_batch(producer_id, 2, EndTransactionMarker(control, 0), timestamp_ms=1)


def _txn_batch(producer_id: int, offset: int) -> bytes:
    return offset_commit_batch(
        GROUP, {TP: OffsetAndMetadata(offset)}, 1_000, producer_id=producer_id, producer_epoch=2
    )


def test_a_load_decides_transactional_offsets_by_their_markers() -> None:
    assert read_header(_txn_batch(7, 1)).attributes & 0x10  # a transactional batch of the producer
    loader = GroupLoader()
    loader.add_batches(_txn_batch(7, 5) + _marker(7, commit=True))  # committed
    loader.add_batches(_txn_batch(8, 9) + _marker(8, commit=False))  # aborted: dropped
    loader.add_batches(_txn_batch(9, 12))  # no marker yet: still the transaction's
    loaded = loader.result()
    assert loaded[GROUP].offsets[TP].offset == 5
    assert {p: o[TP].offset for p, o in loaded[GROUP].pending_txn_offsets.items()} == {9: 12}


def test_offsets_pending_at_the_load_are_completed_by_a_later_marker() -> None:
    c = GroupCoordinatorCore(GroupConfig(), MockTime(1_000), new_member_id=lambda p: p)
    partition = c.partition_for(GROUP)
    c.on_election(partition)
    c.on_loaded(partition, {GROUP: LoadedGroup(pending_txn_offsets={9: {TP: OffsetAndMetadata(12)}})})
    assert c.unstable_offsets(GROUP) == {TP}
    assert c.complete_txn_offsets(9, partition, True) == []  # no write of this coordinator's to journal
    error, offsets = c.fetch_offsets(GROUP, [TP])
    assert error == Errors.NONE and offsets[TP] is not None and offsets[TP].offset == 12
