"""Real Kafka clients across a leader failure: a librdkafka producer with acks=all loses nothing
it was told was written when the leader is killed mid-stream, and a librdkafka consumer validates its
position against the new leader (KIP-320: OffsetForLeaderEpoch with the leader epoch it last fetched) and
reads on without a gap or a repeat."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.conftest import bootstrap
from tests.clients.kafka_wire import KafkaWire
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", 3, FAST)


def create(cluster: Cluster, name: str, partitions: int) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    client.create_topics([NewTopic(name, partitions, 3)], request_timeout=30)[name].result(timeout=60)
    wait_until(lambda: cluster.isr_full(name), 30)


def kill(cluster: Cluster, broker_id: int) -> None:
    cluster.cli("broker", "kill", str(broker_id))


def test_leader_killed_mid_stream_loses_nothing_acknowledged(cluster: Cluster) -> None:
    create(cluster, "failover", 3)
    victim = cluster.leader("failover", 0)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "enable.idempotence": False,  # duplicates allowed: this test is about loss
        }
    )
    acked: set[bytes] = set()
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err:
            failed.append(str(err))
        else:
            acked.add(msg.value())

    total = 3000
    for i in range(total):
        producer.produce("failover", key=b"k%d" % (i % 50), value=b"v%06d" % i, on_delivery=report)
        producer.poll(0)
        if i == total // 3:
            producer.flush(30)
            kill(cluster, victim)
        if i % 200 == 0:
            time.sleep(0.05)
    assert producer.flush(90) == 0
    assert len(acked) > total // 3, failed[:5]
    wait_until(lambda: cluster.leader("failover", 0) not in (-1, victim), 30)

    consumer = Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": "assign-only", "enable.auto.commit": False}
    )
    seen: set[bytes] = set()
    try:
        consumer.assign([TopicPartition("failover", p, 0) for p in range(3)])
        deadline = time.monotonic() + 60
        while not acked <= seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.add(msg.value())
    finally:
        consumer.close()
    lost = acked - seen
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_consumer_validates_its_position_after_a_leader_change(cluster: Cluster) -> None:
    create(cluster, "validated", 1)
    first = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "enable.idempotence": False})
    for i in range(100):
        first.produce("validated", value=b"%04d" % i, partition=0)
    assert first.flush(30) == 0

    capture = _Capture()
    logger = logging.getLogger("validated-consumer")
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "group.id": "assign-only",
            "enable.auto.commit": False,
            "debug": "fetch,topic",
            "topic.metadata.refresh.interval.ms": 1000,
        },
        logger=logger,
    )
    values: list[bytes] = []
    stop = threading.Event()

    def poll_until(count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline and not stop.is_set():
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())

    try:
        consumer.assign([TopicPartition("validated", 0, 0)])
        poll_until(100, 30)
        assert len(values) == 100
        old_leader = cluster.leader("validated", 0)
        kill(cluster, old_leader)
        wait_until(lambda: cluster.leader("validated", 0) not in (-1, old_leader), 30)
        second = Producer(
            {"bootstrap.servers": bootstrap(cluster), "acks": "all", "enable.idempotence": False}
        )
        for i in range(100, 200):
            second.produce("validated", value=b"%04d" % i, partition=0)
        assert second.flush(60) == 0
        poll_until(200, 60)
    finally:
        stop.set()
        consumer.close()
    assert values == [b"%04d" % i for i in range(200)]  # no gap, no repeat
    # librdkafka asked the new leader where its epoch ends (OffsetForLeaderEpoch) before fetching on (KIP-320)
    validated = [line for line in capture.lines if "offset and epoch validation succeeded" in line]
    assert validated and "broker end offset 100 (offset leader epoch 0)" in validated[-1], validated


def test_offset_for_leader_epoch_for_a_consumer(cluster: Cluster) -> None:
    """The wire view of KIP-320: after a leader change the old epoch ends where the new leader's log says;
    a consumer naming an older current epoch is fenced, a newer one is unknown."""
    create(cluster, "epochs", 1)
    producer = Producer({"bootstrap.servers": bootstrap(cluster), "acks": "all", "enable.idempotence": False})
    for i in range(10):
        producer.produce("epochs", value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    before = cluster.metadata("epochs")[0]
    kill(cluster, before["leader_id"])
    wait_until(lambda: cluster.metadata("epochs")[0]["leader_id"] not in (-1, before["leader_id"]), 30)
    after = cluster.metadata("epochs")[0]
    leader = cluster.info.broker(after["leader_id"])

    def ask(current: int, epoch: int) -> dict[str, Any]:
        return {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "epochs",
                    "partitions": [{"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}],
                }
            ],
        }

    async def exchange() -> list[dict[str, Any]]:
        async with KafkaWire(leader.host, leader.port) as wire:
            return [
                await wire.call(23, 4, ask(after["leader_epoch"], before["leader_epoch"])),
                await wire.call(23, 4, ask(before["leader_epoch"], before["leader_epoch"]), correlation_id=2),
                await wire.call(
                    23, 3, ask(after["leader_epoch"] + 5, before["leader_epoch"]), correlation_id=3
                ),
            ]

    # The controller's metadata names the new leader a moment before that broker has applied its epoch;
    # until then it answers UNKNOWN_LEADER_EPOCH (75), which Kafka's clients retry.
    def answered() -> list[dict[str, Any]] | None:
        got = trio.run(exchange)
        return None if got[0]["topics"][0]["partitions"][0]["error_code"] == 75 else got

    found, fenced, unknown = wait_until(answered, 30, message="the new leader knowing its epoch")
    part = found["topics"][0]["partitions"][0]
    assert (part["error_code"], part["leader_epoch"], part["end_offset"]) == (0, before["leader_epoch"], 10)
    assert fenced["topics"][0]["partitions"][0]["error_code"] == 74  # FENCED_LEADER_EPOCH
    assert unknown["topics"][0]["partitions"][0]["error_code"] == 75  # UNKNOWN_LEADER_EPOCH


def test_leader_cut_from_its_followers_while_librdkafka_produces(cluster: Cluster) -> None:
    """The leader of partition 0 cannot reach its followers: its ISR shrinks below min.insync.replicas=2,
    acks=all writes wait or get NOT_ENOUGH_REPLICAS and librdkafka retries them; after the heal the ISR
    grows back, every record is delivered, and nothing acknowledged is missing."""
    create(cluster, "cut", 1)
    leader = cluster.leader("cut", 0)
    followers = [b.id for b in cluster.info.brokers if b.id != leader]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "enable.idempotence": True,
        }
    )
    acked: set[bytes] = set()
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err:
            failed.append(str(err))
        else:
            acked.add(msg.value())

    def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce("cut", value=b"v%05d" % i, partition=0, on_delivery=report)
            producer.poll(0)

    produce(0, 200)
    assert producer.flush(30) == 0 and len(acked) == 200
    for f in followers:
        cluster.cli("net", "partition", str(leader), str(f))
    try:
        # new records leave the followers behind: the leader drops them from the ISR (Kafka's
        # replica.lag.time.max.ms; an idle partition keeps them), and acks=all waits
        produce(200, 200)
        wait_until(
            lambda: producer.poll(0.2) >= 0 and cluster.metadata("cut")[0]["isr_nodes"] == [leader], 30
        )
        assert len(acked) == 200
    finally:
        cluster.cli("net", "heal")
    assert producer.flush(90) == 0
    assert failed == []
    assert acked == {b"v%05d" % i for i in range(400)}
    wait_until(lambda: sorted(cluster.metadata("cut")[0]["isr_nodes"]) == [1, 2, 3], 30)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": "assign-only", "enable.auto.commit": False}
    )
    seen: list[bytes] = []
    try:
        consumer.assign([TopicPartition("cut", 0, 0)])
        deadline = time.monotonic() + 30
        while len(seen) < 400 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append(msg.value())
    finally:
        consumer.close()
    assert seen == [b"v%05d" % i for i in range(400)]  # idempotent: no duplicate, in order
