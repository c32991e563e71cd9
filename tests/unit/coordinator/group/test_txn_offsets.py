"""TxnOffsetCommit at the group coordinator: offsets held for the producer's transaction, made committed by
its commit marker, dropped by an abort marker, and unstable (KIP-447) until then."""

from __future__ import annotations

from coordinator.group.coordinator_core import (
    CommitResult,
    GroupConfig,
    GroupCoordinatorCore,
    Respond,
    StoreOffsets,
)
from coordinator.group.group_metadata import OffsetAndMetadata
from protocol.common import MockTime
from protocol.errors import Errors

GROUP = "g"
TP = ("t", 0)


def core() -> tuple[GroupCoordinatorCore, int]:
    c = GroupCoordinatorCore(GroupConfig(), MockTime(1_000), new_member_id=lambda p: p)
    partition = c.partition_for(GROUP)
    c.on_election(partition)
    c.on_loaded(partition, {})
    return c, partition


def test_offsets_are_held_until_the_commit_marker() -> None:
    c, partition = core()
    effects = c.txn_commit_offsets("tok", GROUP, 7, "", -1, {TP: OffsetAndMetadata(5)})
    assert effects == [Respond("tok", CommitResult({TP: Errors.NONE}))]
    assert c.fetch_offsets(GROUP, [TP]) == (Errors.NONE, {TP: None})
    assert c.unstable_offsets(GROUP) == {TP}
    # Another producer's marker, or one on another partition, changes nothing.
    assert c.complete_txn_offsets(8, partition, True) == []
    assert c.complete_txn_offsets(7, partition + 1, True) == []
    (store,) = c.complete_txn_offsets(7, partition, True)
    assert isinstance(store, StoreOffsets) and store.offsets[TP].offset == 5
    assert c.unstable_offsets(GROUP) == {TP}  # being written
    c.on_offsets_stored(store, Errors.NONE)
    assert c.unstable_offsets(GROUP) == set()
    error, offsets = c.fetch_offsets(GROUP, [TP])
    assert error == Errors.NONE and offsets[TP] is not None and offsets[TP].offset == 5


def test_an_abort_marker_drops_them() -> None:
    c, partition = core()
    c.txn_commit_offsets("tok", GROUP, 7, "", -1, {TP: OffsetAndMetadata(5)})
    assert c.complete_txn_offsets(7, partition, False) == []
    assert c.unstable_offsets(GROUP) == set()
    assert c.fetch_offsets(GROUP, [TP]) == (Errors.NONE, {TP: None})


def test_a_member_must_be_known_and_of_the_current_generation() -> None:
    c, _ = core()
    effects = c.txn_commit_offsets("tok", GROUP, 7, "stranger", 3, {TP: OffsetAndMetadata(5)})
    assert effects == [Respond("tok", CommitResult({TP: Errors.UNKNOWN_MEMBER_ID}))]
    assert c.unstable_offsets(GROUP) == set()
