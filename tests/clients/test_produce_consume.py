"""Real Kafka clients list metadata, produce with acks=all and consume back, keys and headers included,
against `isrsim cluster up`: librdkafka (confluent-kafka), kafka-python and kcat, with no isrsim code on
the client side. Consumers read by assign(), without a group. These are `make test`'s quick real-client
checks, one cluster for the module; the long runs (failovers, groups, a secure cluster, every codec,
chaos) are in `make clients`."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.conftest import bootstrap, kcat
from tests.integration.cluster_support import Cluster
from tests.integration.harness import wait_until

pytestmark = pytest.mark.integration


def create(cluster: Cluster, name: str, partitions: int = 3, rf: int = 3) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    client.create_topics([NewTopic(name, partitions, rf)], request_timeout=30)[name].result(timeout=60)
    wait_until(lambda: cluster.isr_full(name), 30)


def consume_all(
    cluster: Cluster, topic: str, partitions: int, count: int, timeout: float = 30.0
) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": "assign-only", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append(msg)
        return got
    finally:
        consumer.close()


def test_librdkafka_acks_all_round_trip_with_keys_and_headers(kafka_cluster: Cluster) -> None:
    create(kafka_cluster, "rt-librdkafka")
    # Metadata from any broker: every broker, the topic's partitions with a leader and a full ISR
    meta = AdminClient({"bootstrap.servers": bootstrap(kafka_cluster)}).list_topics(
        "rt-librdkafka", timeout=15
    )
    assert sorted(meta.brokers) == [b.id for b in kafka_cluster.info.brokers]
    parts = meta.topics["rt-librdkafka"].partitions
    assert sorted(parts) == [0, 1, 2]
    assert all(p.leader in meta.brokers and sorted(p.isrs) == sorted(p.replicas) for p in parts.values())
    producer = Producer(
        {
            "bootstrap.servers": bootstrap(kafka_cluster),
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": True,
        }
    )
    delivered: list[tuple[int, int]] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset()))

    for i in range(300):
        headers = [("seq", str(i).encode()), ("empty", None)] if i % 2 else None
        producer.produce(
            "rt-librdkafka", key=b"key-%d" % i, value=b"value-%d" % i, headers=headers, on_delivery=report
        )
    assert producer.flush(30) == 0
    assert errors == [] and len(delivered) == 300
    # offsets per partition are dense from 0
    for p in range(3):
        offsets = sorted(o for part, o in delivered if part == p)
        assert offsets == list(range(len(offsets)))

    got = consume_all(kafka_cluster, "rt-librdkafka", 3, 300)
    assert len(got) == 300
    by_key = {m.key(): m for m in got}
    for i in range(300):
        m = by_key[b"key-%d" % i]
        assert m.value() == b"value-%d" % i
        assert (m.headers() or None) == ([("seq", str(i).encode()), ("empty", None)] if i % 2 else None)
    # the same key goes to the same partition (librdkafka's partitioner), in order
    for p in range(3):
        offsets = [m.offset() for m in got if m.partition() == p]
        assert offsets == sorted(offsets)


def test_kafka_python_acks_all_round_trip(kafka_cluster: Cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition

    create(kafka_cluster, "rt-kafka-python", partitions=2)
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap(kafka_cluster).split(","))
    try:
        [described] = admin.describe_topics(["rt-kafka-python"])
        assert described["error_code"] == 0
        assert sorted(p.get("partition_index", p.get("partition")) for p in described["partitions"]) == [0, 1]
        assert {b.get("broker_id", b.get("node_id")) for b in admin.describe_cluster()["brokers"]} == {
            b.id for b in kafka_cluster.info.brokers
        }
    finally:
        admin.close()
    # kafka-python's default: an idempotent producer (InitProducerId, sequence numbers)
    producer = KafkaProducer(bootstrap_servers=bootstrap(kafka_cluster).split(","), acks="all", linger_ms=5)
    futures = [
        producer.send("rt-kafka-python", key=b"k%d" % i, value=b"v%d" % i, headers=[("n", b"%d" % i)])
        for i in range(100)
    ]
    producer.flush(30)
    metadata = [f.get(timeout=30) for f in futures]
    producer.close()
    assert all(md.offset >= 0 for md in metadata)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap(kafka_cluster).split(","),
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    try:
        consumer.assign([KpTopicPartition("rt-kafka-python", p) for p in (0, 1)])
        consumer.seek_to_beginning()
        got = {m.key: (m.value, m.headers) for m in consumer}
    finally:
        consumer.close()
    assert got == {b"k%d" % i: (b"v%d" % i, [("n", b"%d" % i)]) for i in range(100)}


def test_kcat_produce_and_consume(kafka_cluster: Cluster) -> None:
    create(kafka_cluster, "rt-kcat", partitions=1)
    broker = kafka_cluster.info.brokers[0]
    listing = kcat("-b", f"{broker.host}:{broker.port}", "-L", "-t", "rt-kcat")
    assert listing.returncode == 0, listing.stderr
    assert " 3 brokers:" in listing.stdout and 'topic "rt-kcat" with 1 partitions:' in listing.stdout
    lines = "".join(f"k{i}:v{i}\n" for i in range(20))
    out = kcat(
        "-b", f"{broker.host}:{broker.port}", "-P", "-t", "rt-kcat", "-K:", "-H", "origin=kcat",
        "-X", "acks=all", stdin=lines,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    out = kcat(
        "-b", f"{broker.host}:{broker.port}", "-C", "-t", "rt-kcat", "-o", "beginning", "-e",
        "-f", "%k=%s %h @%o\\n",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"k{i}=v{i} origin=kcat @{i}" for i in range(20)]


def test_acks_all_below_min_insync_replicas_is_refused(kafka_cluster: Cluster) -> None:
    """min.insync.replicas=2 (the cluster's setting) on a topic with one replica: NOT_ENOUGH_REPLICAS."""
    create(kafka_cluster, "rt-single", partitions=1, rf=1)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap(kafka_cluster),
            "acks": "all",
            "message.timeout.ms": 3000,
            "retries": 0,
        }
    )
    errors: list[Any] = []
    producer.produce("rt-single", value=b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].name() == "NOT_ENOUGH_REPLICAS", errors[0]
    # acks=1 needs only the leader
    ok = Producer({"bootstrap.servers": bootstrap(kafka_cluster), "acks": "1"})
    results: list[Any] = []
    ok.produce("rt-single", value=b"y", on_delivery=lambda err, msg: results.append(err))
    ok.flush(15)
    assert results == [None]


def test_offsets_for_times(kafka_cluster: Cluster) -> None:
    """ListOffsets by timestamp (librdkafka's offsets_for_times): the first record at or after the time."""
    create(kafka_cluster, "rt-times", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap(kafka_cluster), "acks": "all", "linger.ms": 0})
    base = 1_700_000_000_000
    for i in range(10):
        producer.produce("rt-times", value=b"%d" % i, partition=0, timestamp=base + 1000 * i)
        producer.flush(10)  # one batch per record
    consumer = Consumer({"bootstrap.servers": bootstrap(kafka_cluster), "group.id": "assign-only"})
    try:
        [exact] = consumer.offsets_for_times([TopicPartition("rt-times", 0, base + 3000)], timeout=15)
        [between] = consumer.offsets_for_times([TopicPartition("rt-times", 0, base + 3500)], timeout=15)
        [after] = consumer.offsets_for_times([TopicPartition("rt-times", 0, base + 99_000)], timeout=15)
    finally:
        consumer.close()
    assert (exact.offset, between.offset) == (3, 4)
    assert after.offset == -1  # no such record: OFFSET_END for librdkafka


def test_librdkafka_workload_is_judged_by_the_leaders_acknowledgements(kafka_cluster: Cluster) -> None:
    """The demo's and chaos's librdkafka workload (kit.librdkafka_producer): every record it counts as
    acknowledged lies in a batch some leader journaled in its acked.jsonl (what the report's acked_not_lost
    judges), and its attempts journal holds the summary the report's availability counts."""
    import json
    from pathlib import Path

    from kit.librdkafka_producer import LibrdkafkaWorkload, producer_config
    from kit.producer import AckJournal

    create(kafka_cluster, "rt-workload")
    info = kafka_cluster.info
    config = producer_config([(b.host, b.port) for b in info.brokers], client_id="rt-workload-client")
    assert (config["acks"], config["enable.idempotence"], config["linger.ms"]) == ("all", True, 5)
    journal = AckJournal(kafka_cluster.root / "workload", "rt-workload")
    workload = LibrdkafkaWorkload(
        config, "rt-workload", journal=journal, log_path=kafka_cluster.root / "workload" / "rt.log"
    )
    workload.start(3000, 3000.0, drain_s=30)
    stats = workload.join(60)
    journal.close()
    assert (stats.records_sent, stats.records_acked, stats.records_failed) == (3000, 3000, 0), (
        workload.summary()
    )

    acked = []
    for b in info.brokers:
        path = Path(b.journal).parent / "acked.jsonl"
        if path.exists():
            acked += [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    mine = [a for a in acked if a["topic"] == "rt-workload"]
    assert {a["client_id"] for a in mine} == {"rt-workload-client"}
    assert {a["acks"] for a in mine} == {-1}
    assert all(a["producer_id"] >= 0 for a in mine)  # idempotent: a producer id from InitProducerId
    assert sum(a["last_offset"] - a["base_offset"] + 1 for a in mine) == 3000  # each record once
    [summary] = [
        json.loads(x)
        for x in (kafka_cluster.root / "workload" / "attempts-rt-workload.jsonl").read_text().splitlines()
    ]
    assert summary["event"] == "summary"
    assert (summary["intended"], summary["acknowledged"], summary["failed"], summary["unknown"]) == (
        3000,
        3000,
        0,
        0,
    )
