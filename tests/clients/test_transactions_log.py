"""The partition side of transactions on a real cluster (docs/transactions.md): transactional batches
produced by hand, markers written with WRITE_TXN_MARKERS as a transaction coordinator sends them, then
read_committed reads (FETCH, LIST_OFFSETS, a librdkafka consumer) see only committed data, every replica
holds the same ``.txnindex``, and DESCRIBE_PRODUCERS shows the open transactions."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from protocol.api_keys import ApiKeys
from protocol.client import open_connection
from protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    is_control,
)
from protocol.errors import Errors
from protocol.record_codec import Record
from protocol.records import TRANSACTIONAL_FLAG_MASK, build_batch, decode_records, iter_batches
from storage.transaction_index import AbortedTxn, decode_aborted_txns
from tests.clients.conftest import bootstrap
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import request, wait_until

pytestmark = pytest.mark.integration

TOPIC = "txn-log"
ABORTED, COMMITTED = 9001, 9002


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """These tests write transactional batches straight to the leader, with no coordinator in between: the
    log side of transactions (markers, LSO, ``.txnindex``) under Kafka's legacy mode, without KIP-890's
    verification (the verified path: test_transaction_verification_clients.py)."""
    settings = (*FAST, "transaction.partition.verification.enable=false")
    yield from cluster_up(tmp_path_factory.mktemp("cluster") / "root", 3, settings)


def txn_batch(producer_id: int, seq: int, values: list[bytes], *, epoch: int = 0) -> bytes:
    return build_batch(
        [Record(i, 0, None, v) for i, v in enumerate(values)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        attributes=TRANSACTIONAL_FLAG_MASK,
    )


def ask(c: Cluster, broker_id: int, api: int, body: dict[str, Any]) -> dict[str, Any]:
    b = c.info.broker(broker_id)
    return trio.run(functools.partial(request, b.host, b.port, api, body, timeout=30))  # type: ignore[no-any-return]


def produce(
    c: Cluster, records: bytes, *, transactional_id: str | None = "tx", broker: int | None = None
) -> dict[str, Any]:
    body = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout_ms": 10_000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
    }
    resp = ask(c, c.leader(TOPIC, 0) if broker is None else broker, ApiKeys.PRODUCE, body)
    return resp["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def write_marker(
    c: Cluster,
    producer_id: int,
    commit: bool,
    *,
    epoch: int = 0,
    coordinator_epoch: int = 1,
    topic: str = TOPIC,
    broker: int | None = None,
) -> int:
    body = {
        "markers": [
            {
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "transaction_result": commit,
                "topics": [{"name": topic, "partition_indexes": [0]}],
                "coordinator_epoch": coordinator_epoch,
            }
        ]
    }
    resp = ask(c, c.leader(TOPIC, 0) if broker is None else broker, ApiKeys.WRITE_TXN_MARKERS, body)
    marker = resp["markers"][0]
    assert marker["producer_id"] == producer_id
    return int(marker["topics"][0]["partitions"][0]["error_code"])


def fetch(c: Cluster, offset: int, isolation_level: int) -> dict[str, Any]:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "isolation_level": isolation_level,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    resp = ask(c, c.leader(TOPIC, 0), ApiKeys.FETCH, body)
    return resp["responses"][0]["partitions"][0]  # type: ignore[no-any-return]


def latest(c: Cluster, isolation_level: int) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
    }
    part = ask(c, c.leader(TOPIC, 0), ApiKeys.LIST_OFFSETS, body)["topics"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    return int(part["offset"])


def describe_producers(c: Cluster, broker: int) -> dict[str, Any]:
    body = {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    return ask(c, broker, ApiKeys.DESCRIBE_PRODUCERS, body)["topics"][0]["partitions"][0]  # type: ignore[no-any-return]


def data_values(records: bytes) -> list[bytes]:
    out: list[bytes] = []
    for pos, header in iter_batches(records):
        if is_control(header):
            continue
        out += [r.value or b"" for r in decode_records(records, pos)[1]]
    return out


def txn_indexes(c: Cluster) -> dict[int, list[AbortedTxn]]:
    out: dict[int, list[AbortedTxn]] = {}
    for b in c.info.brokers:
        directory = Path(b.data_dir) / f"{TOPIC}-0"
        out[b.id] = [
            t for p in sorted(directory.glob("*.txnindex")) for t in decode_aborted_txns(p.read_bytes())
        ]
    return out


def test_markers_end_transactions_and_read_committed_sees_only_committed_data(kafka_cluster: Cluster) -> None:
    c = kafka_cluster
    c.cli("topic", "create", TOPIC, "--partitions", "1", "--replication-factor", "3")
    wait_until(lambda: c.isr_full(TOPIC), timeout=30, message="the topic's full ISR")
    leader = c.leader(TOPIC, 0)

    # Kafka's rules for who may write what.
    refused = produce(c, txn_batch(ABORTED, 0, [b"x"]), transactional_id=None)
    assert refused["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    marker = build_end_txn_marker_batch(
        ABORTED, 0, EndTransactionMarker(ControlRecordType.COMMIT, 1), timestamp_ms=1
    )
    assert produce(c, marker)["error_code"] == Errors.INVALID_RECORD

    # Offsets 0-1 and 4-5: the transaction to abort; 2-3 the one to commit; 6 not transactional.
    assert produce(c, txn_batch(ABORTED, 0, [b"a0", b"a1"]))["base_offset"] == 0
    assert produce(c, txn_batch(COMMITTED, 0, [b"c0", b"c1"]))["base_offset"] == 2
    assert produce(c, txn_batch(ABORTED, 2, [b"a2", b"a3"]))["base_offset"] == 4
    plain = build_batch([Record(0, 0, None, b"p0")])
    assert produce(c, plain, transactional_id=None)["base_offset"] == 6

    # Nothing is stable yet: read_committed reads nothing, and the latest offset it may read is 0.
    assert latest(c, 0) == 7 and latest(c, 1) == 0
    part = fetch(c, 0, 1)
    assert (part["error_code"], part["high_watermark"], part["last_stable_offset"]) == (0, 7, 0)
    assert (part["records"], part["aborted_transactions"]) == (b"", [])
    assert data_values(fetch(c, 0, 0)["records"]) == [b"a0", b"a1", b"c0", b"c1", b"a2", b"a3", b"p0"]
    producers = describe_producers(c, leader)
    assert producers["error_code"] == 0
    assert {p["producer_id"]: p["current_txn_start_offset"] for p in producers["active_producers"]} == {
        ABORTED: 0,
        COMMITTED: 2,
    }

    # Markers from the coordinator: abort at 7, commit at 8.
    assert write_marker(c, ABORTED, False) == Errors.NONE
    assert write_marker(c, COMMITTED, True) == Errors.NONE
    assert latest(c, 1) == 9
    part = fetch(c, 0, 1)
    assert part["last_stable_offset"] == 9
    assert part["aborted_transactions"] == [{"producer_id": ABORTED, "first_offset": 0}]
    assert data_values(part["records"]) == [b"a0", b"a1", b"c0", b"c1", b"a2", b"a3", b"p0"]

    # Fencing: a new producer epoch opens a transaction at 9; a marker of the old epoch, or from an older
    # coordinator epoch, is refused; partitions the broker does not lead, or that do not exist, too.
    assert produce(c, txn_batch(ABORTED, 0, [b"e1"], epoch=1))["base_offset"] == 9
    assert write_marker(c, ABORTED, True, epoch=0) == Errors.INVALID_PRODUCER_EPOCH
    assert (
        write_marker(c, ABORTED, True, epoch=1, coordinator_epoch=0) == Errors.TRANSACTION_COORDINATOR_FENCED
    )
    follower = next(b.id for b in c.info.brokers if b.id != leader)
    assert write_marker(c, ABORTED, True, epoch=1, broker=follower) == Errors.NOT_LEADER_OR_FOLLOWER
    assert write_marker(c, ABORTED, True, epoch=1, topic="no-such-topic") == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert latest(c, 1) == 9
    assert write_marker(c, ABORTED, True, epoch=1) == Errors.NONE
    assert latest(c, 1) == 11

    # Every replica rebuilt the same state from what it fetched: the same .txnindex entry.
    expected = [AbortedTxn(ABORTED, 0, 7, 2)]  # the LSO after the abort: the open transaction at 2
    wait_until(
        lambda: all(v == expected for v in txn_indexes(c).values()),
        timeout=30,
        message=f"the .txnindex entry on every replica: {txn_indexes(c)}",
    )
    assert describe_producers(c, follower)["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER


def test_a_librdkafka_read_committed_consumer_reads_exactly_the_committed_records(
    kafka_cluster: Cluster,
) -> None:
    """Runs on the log the test above left: committed c0, c1, p0 and e1; aborted a0-a3."""
    c = kafka_cluster
    wait_until(lambda: latest(c, 1) == 11, timeout=30, message="the log of the test before")

    def consume(isolation: str) -> list[bytes]:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap(c),
                "group.id": f"txn-{isolation}",
                "isolation.level": isolation,
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            got: list[bytes] = []
            for _ in range(60):
                for msg in consumer.consume(num_messages=100, timeout=0.5):
                    if msg.error() is None:
                        got.append(msg.value())
                position = consumer.position([TopicPartition(TOPIC, 0)])[0].offset
                if position >= 11:
                    break
            return got
        finally:
            consumer.close()

    assert consume("read_committed") == [b"c0", b"c1", b"p0", b"e1"]
    assert consume("read_uncommitted") == [b"a0", b"a1", b"c0", b"c1", b"a2", b"a3", b"p0", b"e1"]


def test_a_kafka_python_read_committed_consumer_reads_exactly_the_committed_records(
    kafka_cluster: Cluster,
) -> None:
    c = kafka_cluster
    wait_until(lambda: latest(c, 1) == 11, timeout=30, message="the log of the first test")
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap(c),
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        tp = KafkaTopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = [m.value for m in consumer]
    finally:
        consumer.close()
    assert got == [b"c0", b"c1", b"p0", b"e1"]


def test_a_waiting_read_committed_fetch_is_answered_when_the_lso_moves(kafka_cluster: Cluster) -> None:
    c = kafka_cluster
    wait_until(lambda: latest(c, 1) == 11, timeout=30, message="the log of the first test")
    pid = 9003
    assert produce(c, txn_batch(pid, 0, [b"late"]))["base_offset"] == 11
    leader = c.info.broker(c.leader(TOPIC, 0))
    body = {
        "replica_id": -1,
        "max_wait_ms": 20_000,
        "min_bytes": 1,
        "isolation_level": 1,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [{"partition": 0, "fetch_offset": 11, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    marker = {
        "markers": [
            {
                "producer_id": pid,
                "producer_epoch": 0,
                "transaction_result": True,
                "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                "coordinator_epoch": 1,
            }
        ]
    }

    async def run() -> list[dict[str, Any]]:
        # One connection, both requests at once: the broker takes the FETCH first and parks it (nothing
        # below the LSO, 11, to read), then writes the marker; the answers come back in request order.
        async with open_connection(leader.host, leader.port, client_id="txn-test") as conn:
            return await conn.request_many([(ApiKeys.FETCH, body), (ApiKeys.WRITE_TXN_MARKERS, marker)])

    fetched, marked = trio.run(run)
    assert marked["markers"][0]["topics"][0]["partitions"][0]["error_code"] == 0
    part = fetched["responses"][0]["partitions"][0]
    assert part["last_stable_offset"] == 13
    assert data_values(part["records"]) == [b"late"] and part["aborted_transactions"] == []
