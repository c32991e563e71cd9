"""The markers of a transaction reach every partition's leader, retried until written; a stale
coordinator stops; a deleted topic's partition is dropped."""

from __future__ import annotations

import trio

from coordinator.transaction.coordinator_core import TransactionCoordinatorCore, TxnConfig
from coordinator.transaction.marker_channel import UNKNOWN, TransactionMarkerChannelManager, TxnMarkerEntry
from coordinator.transaction.transaction_metadata import TransactionState, TxnTransitMetadata
from coordinator.transaction.txn_log import TransactionLoader, transaction_batch
from protocol.common import TopicPartition
from protocol.errors import Errors

ENTRY = TxnMarkerEntry(7, 3, True, 5, (("a", 0), ("a", 1), ("b", 0)))


async def test_markers_are_retried_until_every_leader_wrote_them() -> None:
    leaders = {("a", 0): 1, ("a", 1): 2, ("b", 0): None}
    sent: list[tuple[int, tuple[TopicPartition, ...]]] = []
    failures = {2: 2}  # broker 2 answers NOT_ENOUGH_REPLICAS twice

    async def send(broker: int, entry: TxnMarkerEntry) -> dict[TopicPartition, Errors]:
        assert (entry.producer_id, entry.producer_epoch, entry.commit, entry.coordinator_epoch) == (
            7,
            3,
            True,
            5,
        )
        sent.append((broker, entry.partitions))
        if failures.get(broker, 0) > 0:
            failures[broker] -= 1
            return dict.fromkeys(entry.partitions, Errors.NOT_ENOUGH_REPLICAS)
        leaders[("b", 0)] = 1  # b-0 gets a leader meanwhile
        return dict.fromkeys(entry.partitions, Errors.NONE)

    channel = TransactionMarkerChannelManager(0, leaders.get, send, retry_backoff_s=0.001)
    assert await channel.write_markers("t", ENTRY, lambda: True)
    assert channel.markers_sent == 3
    assert sent.count((2, (("a", 1),))) == 3
    assert (1, (("b", 0),)) in sent


async def test_a_fenced_coordinator_stops_and_a_deleted_topic_is_dropped() -> None:
    async def fenced(broker: int, entry: TxnMarkerEntry) -> dict[TopicPartition, Errors]:
        return dict.fromkeys(entry.partitions, Errors.TRANSACTION_COORDINATOR_FENCED)

    channel = TransactionMarkerChannelManager(0, lambda tp: 1, fenced, retry_backoff_s=0.001)
    assert not await channel.write_markers("t", ENTRY, lambda: True)

    async def fine(broker: int, entry: TxnMarkerEntry) -> dict[TopicPartition, Errors]:
        return dict.fromkeys(entry.partitions, Errors.NONE)

    channel = TransactionMarkerChannelManager(0, lambda tp: UNKNOWN if tp[0] == "b" else 1, fine)
    assert await channel.write_markers("t", ENTRY, lambda: True)
    assert channel.markers_sent == 2
    # No longer the coordinator: nothing is sent.
    assert not await channel.write_markers("t", ENTRY, lambda: False)


async def test_no_answer_is_retried() -> None:
    calls = 0

    async def flaky(broker: int, entry: TxnMarkerEntry) -> dict[TopicPartition, Errors]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("connection refused")
        if calls == 2:
            await trio.sleep(10)
        return dict.fromkeys(entry.partitions, Errors.NONE)

    channel = TransactionMarkerChannelManager(
        0, lambda tp: 1, flaky, retry_backoff_s=0.001, request_timeout_s=0.05
    )
    assert await channel.write_markers("t", ENTRY, lambda: True)
    assert calls == 3


def test_the_log_replays_to_the_last_value_of_each_id() -> None:
    def batch(txn_id: str, state: TransactionState, epoch: int) -> bytes:
        transit = TxnTransitMetadata(9, -1, epoch, -1, 60000, state, frozenset({("a", 0)}), 5, 6)
        return transaction_batch(txn_id, transit, 1000)

    loader = TransactionLoader()
    loader.add_batches(
        batch("x", TransactionState.ONGOING, 0)
        + batch("y", TransactionState.EMPTY, 0)
        + batch("x", TransactionState.PREPARE_COMMIT, 0)
    )
    assert loader.records == 3
    assert loader.transactions["x"].transaction_status == TransactionState.PREPARE_COMMIT.id
    core = TransactionCoordinatorCore(TxnConfig(num_partitions=1), lambda: 0, lambda: 1)
    core.on_election(0, 2)
    effects = core.on_loaded(0, 2, loader.transactions)
    assert [type(e).__name__ for e in effects] == ["SendMarkers"]
    assert core.describe("y").state == "Empty"
