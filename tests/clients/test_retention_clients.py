"""Retention and topic configs from real Kafka clients (docs/storage.md, docs/clients.md): a topic created
by kafka-python's KafkaAdminClient with small segments and a retention.bytes loses its oldest segments on
every replica and its earliest offset moves; retention.ms changed by confluent-kafka's
IncrementalAlterConfigs reaches the brokers at once and DescribeConfigs shows it."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from protocol.api_keys import ApiKeys
from tests.clients.conftest import bootstrap
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import request, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]

RETENTION = (*FAST, "log.retention.check.interval.ms=200")


@pytest.fixture(scope="module")
def retention_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path_factory.mktemp("retention") / "root", 3, RETENTION)


def replica_starts(cluster: Cluster, topic: str) -> dict[int, tuple[int, int]]:
    """(log start, log end) of partition 0 on each broker."""
    out: dict[int, tuple[int, int]] = {}
    for b in cluster.info.brokers:
        resp = trio.run(
            partial(request, security=None),
            b.host,
            b.port,
            ApiKeys.DESCRIBE_REPLICA_STATE,
            {"topics": [{"name": topic}]},
        )
        for p in resp["partitions"]:
            if p["partition"] == 0:
                out[b.id] = (p["log_start_offset"], p["log_end_offset"])
    return out


def segment_files(cluster: Cluster, broker_id: int, topic: str) -> list[Path]:
    return sorted((Path(cluster.info.broker(broker_id).data_dir) / f"{topic}-0").glob("*.log"))


def earliest(cluster: Cluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "unused"})
    try:
        low, _ = consumer.get_watermark_offsets(CkTopicPartition(topic, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def test_retention_bytes_and_an_altered_retention_ms(retention_cluster: Cluster) -> None:
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic

    cluster = retention_cluster
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=30000)
    try:
        kp_admin.create_topics(
            [NewTopic("kept", 1, 3, topic_configs={"segment.bytes": "1024", "retention.bytes": "3072"})]
        )
        wait_until(lambda: cluster.isr_full("kept"), 30)
        producer = KafkaProducer(bootstrap_servers=bootstrap(cluster), acks="all", linger_ms=0)
        try:
            for i in range(60):
                producer.send("kept", value=b"%04d" % i + b"x" * 200, partition=0).get(timeout=30)
        finally:
            producer.close()

        # every replica deletes its oldest segments (whole ones, below the HW) while what is left would still
        # hold retention.bytes (Kafka): it keeps at least retention.bytes and less than one more segment
        def trimmed() -> dict[int, tuple[int, int]] | None:
            starts = replica_starts(cluster, "kept")
            files = {b: segment_files(cluster, b, "kept") for b in starts}
            ok = len(starts) == 3 and all(s > 0 and e == 60 for s, e in starts.values())
            return (
                starts
                if ok
                and all(3072 <= sum(f.stat().st_size for f in fs) < 3072 + 1024 for fs in files.values())
                # the first segment left starts at the log start the broker reports (no retention pass
                # between the two reads)
                and all(fs and fs[0].name == f"{starts[b][0]:020d}.log" for b, fs in files.items())
                else None
            )

        wait_until(trimmed, 30, message=lambda: f"log starts {replica_starts(cluster, 'kept')}")
        wait_until(lambda: earliest(cluster, "kept") > 0, 30)

        # retention.ms through IncrementalAlterConfigs: every record is older than 1 ms once the change
        # arrives, so the brokers delete everything below the HW (rolling the active segment)
        ck_admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
        resource = ConfigResource(
            "topic",
            "kept",
            incremental_configs=[
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for future in ck_admin.incremental_alter_configs([resource], request_timeout=30).values():
            future.result(timeout=60)
        wait_until(lambda: earliest(cluster, "kept") == 60, 30)
        wait_until(lambda: all(s == 60 for s, _ in replica_starts(cluster, "kept").values()), 30)

        described = kp_admin.describe_configs(
            [KpConfigResource(ConfigResourceType.TOPIC, "kept")], config_filter="all"
        )
        configs = described["topic"]["kept"]
        assert configs["retention.ms"]["value"] == "1"
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["retention.ms"]["config_type"] == "LONG"
        assert configs["retention.bytes"]["value"] == "3072"
        assert configs["delete.retention.ms"]["value"] == "86400000"
        assert all(c["config_type"] != "UNKNOWN" for c in configs.values())

        # Kafka's errors: an invalid value, an unknown topic
        bad = ConfigResource(
            "topic",
            "kept",
            incremental_configs=[
                ConfigEntry("retention.ms", "-7", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        with pytest.raises(Exception, match=r"INVALID_CONFIG"):
            ck_admin.incremental_alter_configs([bad], request_timeout=30)[bad].result(timeout=60)
        missing = ConfigResource(
            "topic",
            "no-such-topic",
            incremental_configs=[
                ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        with pytest.raises(Exception, match=r"UNKNOWN_TOPIC_OR_PART"):
            ck_admin.incremental_alter_configs([missing], request_timeout=30)[missing].result(timeout=60)
    finally:
        kp_admin.close()


def test_max_message_bytes_and_legacy_alter_configs(retention_cluster: Cluster) -> None:
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient, NewTopic
    from kafka.errors import MessageSizeTooLargeError

    cluster = retention_cluster
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=30000)
    producer = KafkaProducer(bootstrap_servers=bootstrap(cluster), acks="all", linger_ms=0, retries=0)
    try:
        kp_admin.create_topics([NewTopic("small", 1, 3, topic_configs={"max.message.bytes": "500"})])
        wait_until(lambda: cluster.isr_full("small"), 30)
        producer.send("small", value=b"y" * 100).get(timeout=30)
        with pytest.raises(MessageSizeTooLargeError):
            producer.send("small", value=b"y" * 1000).get(timeout=30)
        # AlterConfigs (33), which replaces the topic's configs (kafka-python sends the other modified ones
        # along); the leader takes the larger batch once the change has reached it
        topic = KpConfigResource(
            ConfigResourceType.TOPIC,
            "small",
            configs={"max.message.bytes": "2000", "retention.bytes": "100000"},
        )
        result = kp_admin.alter_configs([topic], incremental=False)
        assert result == {"topic": {"small": "OK"}}

        def taken() -> bool:
            try:
                producer.send("small", value=b"y" * 1000).get(timeout=30)
            except MessageSizeTooLargeError:
                return False
            return True

        wait_until(taken, 30)
        described = kp_admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "small")])
        modified = described["topic"]["small"]
        assert {k: v["value"] for k, v in modified.items()} == {
            "max.message.bytes": "2000",
            "retention.bytes": "100000",
        }
    finally:
        producer.close()
        kp_admin.close()


def test_dynamic_broker_configs_apply_to_topics_that_set_nothing(retention_cluster: Cluster) -> None:
    from kafka import KafkaProducer
    from kafka.admin import AlterConfigOp, ConfigResourceType, KafkaAdminClient, NewTopic
    from kafka.admin import ConfigResource as KpConfigResource

    cluster = retention_cluster
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=30000)
    try:
        kp_admin.create_topics([NewTopic("plain", 1, 3)])
        wait_until(lambda: cluster.isr_full("plain"), 30)
        producer = KafkaProducer(bootstrap_servers=bootstrap(cluster), acks="all", linger_ms=0)
        try:
            for i in range(5):
                producer.send("plain", value=b"%d" % i, partition=0).get(timeout=30)
        finally:
            producer.close()
        assert earliest(cluster, "plain") == 0
        # log.retention.ms for each broker (kafka-python names a broker resource by its id; the cluster
        # default, resource "", is the unit tests')
        ids = [str(b.id) for b in cluster.info.brokers]
        every = [
            KpConfigResource(
                ConfigResourceType.BROKER, i, configs={"log.retention.ms": (AlterConfigOp.SET, "1")}
            )
            for i in ids
        ]
        assert kp_admin.alter_configs(every) == {"broker": dict.fromkeys(ids, "OK")}
        try:
            wait_until(lambda: all(s == 5 for s, _ in replica_starts(cluster, "plain").values()), 30)
            assert earliest(cluster, "plain") == 5
            described = kp_admin.describe_configs(
                [KpConfigResource(ConfigResourceType.BROKER, "2")], config_filter="all"
            )
            entry = described["broker"]["2"]["log.retention.ms"]
            assert (entry["value"], entry["config_source"], entry["read_only"]) == (
                "1",
                "DYNAMIC_BROKER_CONFIG",
                False,
            )
            assert described["broker"]["2"]["num.io.threads"]["read_only"] is True
        finally:
            undo = [
                KpConfigResource(
                    ConfigResourceType.BROKER, i, configs={"log.retention.ms": (AlterConfigOp.DELETE, None)}
                )
                for i in ids
            ]
            assert kp_admin.alter_configs(undo) == {"broker": dict.fromkeys(ids, "OK")}
    finally:
        kp_admin.close()
