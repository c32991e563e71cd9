"""KIP-890 part 1 on the leader's side: Kafka's AddPartitionsToTxnManagerTest (one request in flight per
coordinator, a second verification of a transactional id replacing the first by epoch, the errors a
producer is answered) with the broker-to-broker request replaced by a recorder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from broker.metadata_cache import MetadataCache, PartitionMetadata
from broker.txn_verification import (
    AddPartitionsToTxnManager,
    transactional_batch_info,
    verification_error_status,
)
from protocol import txn_coordinator_messages as tm
from protocol.common import BrokerEndpoint, TopicPartition
from protocol.errors import Errors, KafkaError
from protocol.record_codec import Record
from protocol.records import TRANSACTIONAL_FLAG_MASK, build_batch

TXN_TOPIC = "__transaction_state"


class Coordinators:
    """Answers AddPartitionsToTxn like a coordinator would, one request at a time (``release``)."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, list[tm.AddPartitionsToTxnTransaction]]] = []
        self.answers: list[dict[str, Any] | BaseException] = []
        self.release = trio.Semaphore(0)

    async def send(self, node: int, txns: list[tm.AddPartitionsToTxnTransaction]) -> dict[str, Any]:
        self.requests.append((node, txns))
        await self.release.acquire()
        answer = self.answers.pop(0) if self.answers else ok(txns)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def ok(txns: list[tm.AddPartitionsToTxnTransaction], error: Errors = Errors.NONE) -> dict[str, Any]:
    return {
        "results_by_transaction": [
            {
                "transactional_id": t.transactional_id,
                "topic_results": [
                    {
                        "name": topic.name,
                        "results_by_partition": [
                            {"partition_index": p, "partition_error_code": int(error)}
                            for p in topic.partitions
                        ],
                    }
                    for topic in t.topics
                ],
            }
            for t in txns
        ]
    }


@pytest.fixture
def cache() -> MetadataCache:
    cache = MetadataCache(BrokerEndpoint(1, "127.0.0.1", 1))
    cache.update_brokers([BrokerEndpoint(2, "127.0.0.1", 2)], replace=False)
    for partition, leader in ((0, 1), (1, 2), (2, -1)):
        cache.update_partition((TXN_TOPIC, partition), PartitionMetadata(leader, 0, [leader], [leader]))
    return cache


@pytest.fixture
async def coordinators(cache: MetadataCache) -> AsyncIterator[tuple[AddPartitionsToTxnManager, Coordinators]]:
    coordinators = Coordinators()
    # "a..." -> partition 0 (broker 1), "b..." -> partition 1 (broker 2), "c..." -> 2 (no leader).
    manager = AddPartitionsToTxnManager(
        1, cache, lambda t: (TXN_TOPIC, "abc".index(t[0])), send=coordinators.send
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager, coordinators
        nursery.cancel_scope.cancel()


Answers = list[dict[TopicPartition, Errors]]


def recorder() -> tuple[Answers, Any]:
    got: Answers = []
    return got, got.append


async def test_verification_goes_to_the_coordinator_and_answers_what_was_not_verified(
    coordinators: tuple[AddPartitionsToTxnManager, Coordinators],
) -> None:
    manager, c = coordinators
    got, callback = recorder()
    manager.verify_transaction("a-1", 5, 0, [("t", 0), ("t", 1)], callback)
    await trio.testing.wait_all_tasks_blocked()
    assert [(node, [t.verify_only for t in txns]) for node, txns in c.requests] == [(1, [True])]
    txn = c.requests[0][1][0]
    assert (txn.transactional_id, txn.producer_id, txn.producer_epoch) == ("a-1", 5, 0)
    c.answers.append(
        {
            "results_by_transaction": [
                {
                    "transactional_id": "a-1",
                    "topic_results": [
                        {
                            "name": "t",
                            "results_by_partition": [
                                {"partition_index": 0, "partition_error_code": 0},
                                {"partition_index": 1, "partition_error_code": int(Errors.INVALID_TXN_STATE)},
                            ],
                        }
                    ],
                }
            ]
        }
    )
    c.release.release()
    await trio.testing.wait_all_tasks_blocked()
    assert got == [{("t", 1): Errors.INVALID_TXN_STATE}]


async def test_one_request_in_flight_per_coordinator_and_the_waiting_ones_batched(
    coordinators: tuple[AddPartitionsToTxnManager, Coordinators],
) -> None:
    manager, c = coordinators
    got, callback = recorder()
    manager.verify_transaction("a-1", 5, 0, [("t", 0)], callback)
    await trio.testing.wait_all_tasks_blocked()
    manager.verify_transaction("a-2", 6, 0, [("t", 0)], callback)
    manager.verify_transaction("a-3", 7, 0, [("t", 1)], callback)
    manager.verify_transaction("b-1", 8, 0, [("t", 0)], callback)
    await trio.testing.wait_all_tasks_blocked()
    assert [(n, [t.transactional_id for t in txns]) for n, txns in c.requests] == [(1, ["a-1"]), (2, ["b-1"])]
    c.release.release()
    c.release.release()
    await trio.testing.wait_all_tasks_blocked()
    assert [(n, [t.transactional_id for t in txns]) for n, txns in c.requests][2:] == [(1, ["a-2", "a-3"])]
    c.release.release()
    await trio.testing.wait_all_tasks_blocked()
    assert got == [{}, {}, {}, {}]


async def test_a_second_verification_of_a_transactional_id_replaces_the_first_by_epoch(
    coordinators: tuple[AddPartitionsToTxnManager, Coordinators],
) -> None:
    manager, c = coordinators
    busy, first, second, third, fourth = (recorder() for _ in range(5))
    manager.verify_transaction("a-0", 1, 0, [("t", 9)], busy[1])  # keeps broker 1 busy
    await trio.testing.wait_all_tasks_blocked()
    manager.verify_transaction("a-1", 5, 3, [("t", 0)], first[1])
    manager.verify_transaction("a-1", 5, 3, [("t", 0)], second[1])  # a retry: the first is told to retry
    assert first[0] == [{("t", 0): Errors.NETWORK_EXCEPTION}]
    manager.verify_transaction("a-1", 5, 4, [("t", 0)], third[1])  # a newer epoch fences the waiting one
    assert second[0] == [{("t", 0): Errors.INVALID_PRODUCER_EPOCH}]
    manager.verify_transaction("a-1", 5, 2, [("t", 0)], fourth[1])  # an older epoch is fenced at once
    assert fourth[0] == [{("t", 0): Errors.INVALID_PRODUCER_EPOCH}]
    c.release.release()
    c.release.release()
    await trio.testing.wait_all_tasks_blocked()
    assert [t.producer_epoch for t in c.requests[1][1]] == [4]
    assert third[0] == [{}]


async def test_errors_of_the_coordinator_and_of_the_network(
    coordinators: tuple[AddPartitionsToTxnManager, Coordinators],
) -> None:
    manager, c = coordinators
    got, callback = recorder()
    manager.verify_transaction("c-1", 5, 0, [("t", 0)], callback)  # its partition has no leader
    assert got == [{("t", 0): Errors.COORDINATOR_NOT_AVAILABLE}]
    txn = [tm.AddPartitionsToTxnTransaction(transactional_id="a-1", producer_id=5, producer_epoch=0)]
    txn[0].topics = [tm.AddPartitionsToTxnTopic(name="t", partitions=[0])]
    c.answers += [
        ok(txn, Errors.PRODUCER_FENCED),
        {"error_code": int(Errors.CLUSTER_AUTHORIZATION_FAILED)},
        OSError("connection refused"),
        {"results_by_transaction": []},
    ]
    for expected in (
        Errors.INVALID_PRODUCER_EPOCH,
        Errors.INVALID_TXN_STATE,
        Errors.NETWORK_EXCEPTION,
        Errors.NETWORK_EXCEPTION,
    ):
        got.clear()
        manager.verify_transaction("a-1", 5, 0, [("t", 0)], callback)
        await trio.testing.wait_all_tasks_blocked()
        c.release.release()
        await trio.testing.wait_all_tasks_blocked()
        assert got == [{("t", 0): expected}]


def test_what_a_producer_is_answered_for_an_unverified_partition() -> None:
    assert verification_error_status(Errors.INVALID_TXN_STATE).error is Errors.INVALID_TXN_STATE
    for retriable in (
        Errors.NETWORK_EXCEPTION,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.COORDINATOR_NOT_AVAILABLE,
        Errors.NOT_COORDINATOR,
        Errors.CONCURRENT_TRANSACTIONS,
    ):
        status = verification_error_status(retriable)
        assert status.error is Errors.NOT_ENOUGH_REPLICAS and retriable.name in status.error_message
    assert verification_error_status(Errors.INVALID_PRODUCER_EPOCH).error is Errors.INVALID_PRODUCER_EPOCH


def test_the_producer_of_the_transactional_batches() -> None:
    def txn(pid: int, seq: int) -> bytes:
        return build_batch(
            [Record(0, 0, None, b"v")],
            producer_id=pid,
            producer_epoch=2,
            base_sequence=seq,
            attributes=TRANSACTIONAL_FLAG_MASK,
        )

    plain = build_batch([Record(0, 0, None, b"v")])
    assert transactional_batch_info(plain) is None
    info = transactional_batch_info(plain + txn(9, 4) + txn(9, 5))
    assert info is not None and (info.producer_id, info.producer_epoch, info.base_sequence) == (9, 2, 4)
    with pytest.raises(KafkaError) as e:
        transactional_batch_info(txn(9, 4) + txn(10, 0))
    assert e.value.error is Errors.INVALID_RECORD
    assert transactional_batch_info(b"\x00\x01") is None
