"""Metadata and admin requests from real Kafka clients (kcat, librdkafka through confluent-kafka,
kafka-python) against `isrsim cluster up` (docs/clients.md)."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.clients.conftest import bootstrap, kcat
from tests.integration.cluster_support import Cluster
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]


def admin(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap(cluster)})


def create(cluster: Cluster, name: str, partitions: int, rf: int, **config: str) -> None:
    client = admin(cluster)  # kept alive until the answer: a destroyed client fails its futures
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config)], request_timeout=30
    )
    futures[name].result(timeout=60)


def test_kcat_lists_brokers_topics_leaders_and_isr(kafka_cluster: Cluster) -> None:
    kafka_cluster.cli("topic", "create", "listed", "--partitions", "3", "--replication-factor", "3")
    info = kafka_cluster.info
    b = info.brokers[0]
    out = kcat("-b", f"{b.host}:{b.port}", "-L", "-t", "listed")
    assert out.returncode == 0, out.stderr
    assert " 3 brokers:" in out.stdout
    for broker in info.brokers:
        assert f"broker {broker.id} at {broker.host}:{broker.port}" in out.stdout
    assert 'topic "listed" with 3 partitions:' in out.stdout
    rows = re.findall(
        r"partition (\d+), leader (\d+), replicas: (\d+(?:,\d+)*), isrs: (\d+(?:,\d+)*)", out.stdout
    )
    assert len(rows) == 3
    for _, leader, replicas, isr in rows:
        assert leader in replicas.split(",") and sorted(isr.split(",")) == ["1", "2", "3"]


def test_create_describe_and_delete_topics_through_any_broker(kafka_cluster: Cluster) -> None:
    # each broker forwards to the controller (KIP-590); the first one is asked here
    client = AdminClient({"bootstrap.servers": bootstrap(kafka_cluster, brokers=(2,))})
    futures = client.create_topics(
        [NewTopic("made", num_partitions=4, replication_factor=2, config={"min.insync.replicas": "2"})],
        request_timeout=30,
    )
    assert futures["made"].result(timeout=60) is None
    again = client.create_topics(
        [NewTopic("made", num_partitions=1, replication_factor=1)], request_timeout=30
    )
    with pytest.raises(Exception, match=r"TOPIC_ALREADY_EXISTS"):
        again["made"].result(timeout=60)
    wait_until(lambda: len(client.list_topics(timeout=10).topics.get("made", None).partitions or {}) == 4, 30)
    configs = client.describe_configs([ConfigResource("topic", "made")], request_timeout=30)
    [result] = configs.values()
    assert result.result(timeout=30)["min.insync.replicas"].value == "2"
    described = client.describe_cluster(request_timeout=30).result(timeout=30)
    assert described.cluster_id == "isrsim"
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert client.delete_topics(["made"], request_timeout=30)["made"].result(timeout=60) is None
    wait_until(lambda: "made" not in client.list_topics(timeout=10).topics, 30)


def test_invalid_create_topics_get_kafkas_errors(kafka_cluster: Cluster) -> None:
    client = admin(kafka_cluster)
    futures = client.create_topics([NewTopic("bad name!", num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception, match=r"TOPIC_EXCEPTION,val=17"):
        futures["bad name!"].result(timeout=60)
    futures = client.create_topics([NewTopic("too-many-replicas", num_partitions=1, replication_factor=5)])
    with pytest.raises(Exception, match=r"INVALID_REPLICATION_FACTOR"):
        futures["too-many-replicas"].result(timeout=60)
    # validate_only creates nothing
    futures = client.create_topics(
        [NewTopic("only-checked", num_partitions=1, replication_factor=1)], validate_only=True
    )
    assert futures["only-checked"].result(timeout=60) is None
    assert "only-checked" not in client.list_topics(timeout=10).topics


def test_metadata_for_an_unknown_topic_creates_it(kafka_cluster: Cluster) -> None:
    b = kafka_cluster.info.brokers[2]

    def listed() -> str | None:
        out = kcat("-b", f"{b.host}:{b.port}", "-L", "-t", "auto-made")
        return out.stdout if "with 1 partitions" in out.stdout else None

    out = wait_until(listed, 30)
    # default.replication.factor -1: min(3, live brokers)
    (replicas,) = re.findall(r"replicas: (\d+(?:,\d+)*)", out)
    assert sorted(replicas.split(",")) == ["1", "2", "3"]


def test_watermarks_from_list_offsets(kafka_cluster: Cluster) -> None:
    create(kafka_cluster, "marks", 2, 3)
    consumer = Consumer({"bootstrap.servers": bootstrap(kafka_cluster), "group.id": "unused"})
    try:
        wait_until(
            lambda: consumer.get_watermark_offsets(TopicPartition("marks", 1), timeout=5) == (0, 0), 30
        )
    finally:
        consumer.close()


def test_kafka_python_admin_and_metadata(kafka_cluster: Cluster) -> None:
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    client = KafkaAdminClient(bootstrap_servers=bootstrap(kafka_cluster), request_timeout_ms=30000)
    try:
        client.create_topics([KpNewTopic("kp-made", 2, 3)])
        consumer = KafkaConsumer(bootstrap_servers=bootstrap(kafka_cluster))
        try:
            wait_until(lambda: consumer.partitions_for_topic("kp-made") == {0, 1}, 30)
        finally:
            consumer.close()
    finally:
        client.close()


def test_describe_a_brokers_own_configs(kafka_cluster: Cluster) -> None:
    broker = kafka_cluster.info.brokers[1]
    client = AdminClient({"bootstrap.servers": f"{broker.host}:{broker.port}"})
    [future] = client.describe_configs(
        [ConfigResource("broker", str(broker.id))], request_timeout=30
    ).values()
    configs = future.result(timeout=30)
    assert configs["broker.id"].value == str(broker.id)
    assert configs["min.insync.replicas"].value == "2"  # the cluster's override
    assert not configs["min.insync.replicas"].is_default
    assert (
        configs["auto.create.topics.enable"].value == "true"
        and configs["auto.create.topics.enable"].is_default
    )


def test_describe_a_topics_configs_lists_every_config_with_its_source(kafka_cluster: Cluster) -> None:
    """As Kafka: every topic config isrsim acts on, with its value and source (the topic's own, a broker's
    static setting, or Kafka's default)."""
    from confluent_kafka.admin import ConfigSource

    create(kafka_cluster, "configured", 1, 3, **{"compression.type": "gzip"})
    client = admin(kafka_cluster)
    [future] = client.describe_configs([ConfigResource("topic", "configured")], request_timeout=30).values()
    configs = future.result(timeout=30)
    shown = {name: (c.value, c.source, c.is_default) for name, c in configs.items()}
    assert shown["compression.type"] == ("gzip", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    # the cluster's min.insync.replicas=2 is a static setting, not Kafka's default of 1
    assert shown["min.insync.replicas"] == ("2", ConfigSource.STATIC_BROKER_CONFIG.value, False)
    for name, value in {
        "cleanup.policy": "delete",
        "max.message.bytes": "1048588",
        "message.timestamp.type": "CreateTime",
        "segment.bytes": "1073741824",
        "unclean.leader.election.enable": "false",
    }.items():
        assert shown[name] == (value, ConfigSource.DEFAULT_CONFIG.value, True), name


def test_validate_only_gets_every_check_a_creation_gets(kafka_cluster: Cluster) -> None:
    """Kafka's controller checks validate_only as a creation (replication factor against the registered
    brokers, configs) and creates nothing."""
    client = admin(kafka_cluster)
    futures = client.create_topics(
        [
            NewTopic("checked-rf", num_partitions=1, replication_factor=5),
            NewTopic(
                "checked-config", num_partitions=1, replication_factor=1, config={"min.insync.replicas": "x"}
            ),
            NewTopic("checked-ok", num_partitions=2, replication_factor=3),
        ],
        validate_only=True,
        request_timeout=30,
    )
    with pytest.raises(Exception, match=r"INVALID_REPLICATION_FACTOR"):
        futures["checked-rf"].result(timeout=60)
    with pytest.raises(Exception, match=r"INVALID_CONFIG"):
        futures["checked-config"].result(timeout=60)
    assert futures["checked-ok"].result(timeout=60) is None
    assert not {"checked-rf", "checked-config", "checked-ok"} & set(client.list_topics(timeout=10).topics)


def test_a_name_twice_in_one_create_topics_is_one_invalid_request(kafka_cluster: Cluster) -> None:
    """Kafka answers a repeated name once, INVALID_REQUEST, and creates the other topics; librdkafka refuses
    an answer that names a topic twice."""
    client = admin(kafka_cluster)
    futures = client.create_topics(
        [
            NewTopic("twice", num_partitions=1, replication_factor=1),
            NewTopic("once", num_partitions=1, replication_factor=1),
            NewTopic("twice", num_partitions=1, replication_factor=1),
        ],
        request_timeout=30,
    )
    with pytest.raises(Exception, match=r"INVALID_REQUEST"):
        futures["twice"].result(timeout=60)
    assert futures["once"].result(timeout=60) is None
    wait_until(lambda: "once" in client.list_topics(timeout=10).topics, 30)
    assert "twice" not in client.list_topics(timeout=10).topics


def test_kafka_python_create_topics_answer_describes_the_topic(kafka_cluster: Cluster) -> None:
    """CreateTopics v5+ (KIP-525): the answer carries the partitions, replication factor and configs the
    topic was made with, defaults filled in, for a creation and for validate_only alike."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    client = KafkaAdminClient(bootstrap_servers=bootstrap(kafka_cluster), request_timeout_ms=30000)
    try:
        for validate_only in (True, False):
            answer = client.create_topics(
                [KpNewTopic("described", -1, 2, topic_configs={"compression.type": "lz4"})],
                validate_only=validate_only,
            )
            [topic] = answer["topics"]
            assert topic["error_code"] == 0
            assert (topic["num_partitions"], topic["replication_factor"]) == (1, 2)
            configs = {name: c["value"] for name, c in topic["configs"].items()}  # keyed by name
            assert configs["compression.type"] == "lz4" and configs["min.insync.replicas"] == "2"
    finally:
        client.close()


def test_a_name_twice_in_one_delete_topics_is_one_invalid_request(kafka_cluster: Cluster) -> None:
    """As CreateTopics: the repeated name is answered once, INVALID_REQUEST, and stays; the others go."""
    create(kafka_cluster, "kept", 1, 1)
    create(kafka_cluster, "gone", 1, 1)
    client = admin(kafka_cluster)
    futures = client.delete_topics(["kept", "gone", "kept"], request_timeout=30)
    with pytest.raises(Exception, match=r"INVALID_REQUEST"):
        futures["kept"].result(timeout=60)
    assert futures["gone"].result(timeout=60) is None
    wait_until(lambda: "gone" not in client.list_topics(timeout=10).topics, 30)
    assert "kept" in client.list_topics(timeout=10).topics


def test_authorized_operations_when_asked(kafka_cluster: Cluster) -> None:
    """describe_topics / describe_cluster / describe_consumer_groups with include_authorized_operations: as
    Kafka without an authorizer, every operation the resource type supports; not asked, none."""
    from confluent_kafka import TopicCollection
    from kafka.admin import KafkaAdminClient

    create(kafka_cluster, "with-ops", 1, 1)
    client = admin(kafka_cluster)
    topic = client.describe_topics(TopicCollection(["with-ops"]), include_authorized_operations=True)
    ops = topic["with-ops"].result(timeout=30).authorized_operations
    assert sorted(o.name for o in ops) == [
        "ALTER",
        "ALTER_CONFIGS",
        "CREATE",
        "DELETE",
        "DESCRIBE",
        "DESCRIBE_CONFIGS",
        "READ",
        "WRITE",
    ]
    cluster = client.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert sorted(o.name for o in cluster.authorized_operations) == [
        "ALTER",
        "ALTER_CONFIGS",
        "CLUSTER_ACTION",
        "CREATE",
        "DESCRIBE",
        "DESCRIBE_CONFIGS",
        "IDEMPOTENT_WRITE",
    ]
    group = client.describe_consumer_groups(["no-such-group"], include_authorized_operations=True)
    ops = group["no-such-group"].result(timeout=30).authorized_operations
    assert sorted(o.name for o in ops) == ["DELETE", "DESCRIBE", "READ"]
    plain = client.describe_topics(TopicCollection(["with-ops"]))["with-ops"].result(timeout=30)
    assert plain.authorized_operations is None

    kp = KafkaAdminClient(bootstrap_servers=bootstrap(kafka_cluster), request_timeout_ms=30000)
    try:
        assert "IDEMPOTENT_WRITE" in kp.describe_cluster()["authorized_operations"]
        [described] = kp.describe_topics(["with-ops"])
        assert "WRITE" in described["authorized_operations"]
    finally:
        kp.close()


def test_create_partitions_grows_a_topic_that_clients_then_use(kafka_cluster: Cluster) -> None:
    """AdminClient create_partitions (Kafka's CreatePartitions, forwarded to the controller): the new
    partitions get leaders and the topic's replication factor, a producer and a consumer use them; a count
    that is not an increase is INVALID_PARTITIONS, an unknown topic UNKNOWN_TOPIC_OR_PARTITION, a manual
    assignment of another size INVALID_REPLICA_ASSIGNMENT; validate_only changes nothing."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewPartitions
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions

    create(kafka_cluster, "growing", 2, 3)
    client = admin(kafka_cluster)

    def partitions() -> dict[int, tuple[int, list[int], list[int]]]:
        topic = client.list_topics("growing", timeout=10).topics["growing"]
        return {p.id: (p.leader, p.replicas, p.isrs) for p in topic.partitions.values()}

    assert (
        client.create_partitions([NewPartitions("growing", 4)], request_timeout=30)["growing"].result(60)
        is None
    )
    wait_until(lambda: len(partitions()) == 4, 30)
    for leader, replicas, isr in partitions().values():
        assert len(replicas) == 3 and leader in replicas and sorted(isr) == sorted(replicas)

    def refused(new: NewPartitions, **kw: bool) -> str:
        with pytest.raises(Exception) as caught:
            client.create_partitions([new], request_timeout=30, **kw)[new.topic].result(60)
        return str(caught.value)

    assert "INVALID_PARTITIONS" in refused(NewPartitions("growing", 4))
    assert "INVALID_PARTITIONS" in refused(NewPartitions("growing", 3))
    assert "UNKNOWN_TOPIC" in refused(NewPartitions("no-such-topic", 3))
    assert "INVALID_REPLICA_ASSIGNMENT" in refused(NewPartitions("growing", 5, replica_assignment=[[1, 2]]))
    checked = client.create_partitions([NewPartitions("growing", 9)], validate_only=True, request_timeout=30)
    assert checked["growing"].result(60) is None
    assert len(partitions()) == 4

    kp = KafkaAdminClient(bootstrap_servers=bootstrap(kafka_cluster), request_timeout_ms=30000)
    try:
        [result] = kp.create_partitions({"growing": KpNewPartitions(5)}).results
        assert result.error_code == 0
    finally:
        kp.close()
    wait_until(lambda: len(partitions()) == 5, 30)
    delivered: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": bootstrap(kafka_cluster), "acks": "all"})
    producer.produce(
        "growing",
        value=b"new",
        partition=4,
        on_delivery=lambda e, m: delivered.append((m.partition(), m.offset())),
    )
    assert producer.flush(30) == 0 and delivered == [(4, 0)]
    consumer = Consumer({"bootstrap.servers": bootstrap(kafka_cluster), "group.id": "growing-reader"})
    try:
        consumer.assign([TopicPartition("growing", 4, 0)])
        message = consumer.poll(30)
        assert message is not None and message.error() is None and message.value() == b"new"
    finally:
        consumer.close()


def test_create_topics_with_a_manual_replica_assignment(kafka_cluster: Cluster) -> None:
    """NewTopic(replica_assignment=...) places each partition's replicas as given, the first the leader
    (Kafka's CreatableReplicaAssignment); an inconsistent one is INVALID_REPLICA_ASSIGNMENT."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    client = admin(kafka_cluster)
    futures = client.create_topics(
        [NewTopic("placed", 3, replica_assignment=[[3, 1], [2, 3], [1, 2]])], request_timeout=30
    )
    assert futures["placed"].result(timeout=60) is None

    def placed() -> dict[int, tuple[list[int], int]]:
        topic = client.list_topics("placed", timeout=10).topics["placed"]
        return {p.id: (p.replicas, p.leader) for p in topic.partitions.values()}

    wait_until(lambda: len(placed()) == 3, 30)
    assert placed() == {0: ([3, 1], 3), 1: ([2, 3], 2), 2: ([1, 2], 1)}
    uneven = client.create_topics(
        [NewTopic("uneven", 2, replica_assignment=[[3, 1], [2]])], request_timeout=30
    )
    with pytest.raises(Exception, match=r"INVALID_REPLICA_ASSIGNMENT"):
        uneven["uneven"].result(timeout=60)

    kp = KafkaAdminClient(bootstrap_servers=bootstrap(kafka_cluster), request_timeout_ms=30000)
    try:
        answer = kp.create_topics(
            [KpNewTopic("placed-kp", -1, -1, replica_assignments={0: [1, 2, 3], 1: [2, 3, 1]})]
        )
        [topic] = answer["topics"]
        assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (0, 2, 3)

        def replicas() -> dict[int, list[int]]:
            [described] = kp.describe_topics(["placed-kp"])
            return {p["partition_index"]: p["replica_nodes"] for p in described["partitions"]}

        wait_until(lambda: len(replicas()) == 2, 30)
        assert replicas() == {0: [1, 2, 3], 1: [2, 3, 1]}
    finally:
        kp.close()


def test_a_topic_name_colliding_through_dot_and_underscore_is_refused(kafka_cluster: Cluster) -> None:
    """As Kafka: `orders.eu` exists, so `orders_eu` (same metric names) is INVALID_TOPIC_EXCEPTION (17)."""
    create(kafka_cluster, "orders.eu", 1, 1)
    client = admin(kafka_cluster)
    futures = client.create_topics([NewTopic("orders_eu", 1, 1)], request_timeout=30)
    with pytest.raises(Exception, match=r"collides with existing topic: orders\.eu") as caught:
        futures["orders_eu"].result(timeout=60)
    assert "TOPIC_EXCEPTION" in str(caught.value)
    assert "orders_eu" not in client.list_topics(timeout=10).topics


def test_describe_configs_with_an_empty_key_list_lists_every_config(kafka_cluster: Cluster) -> None:
    """Kafka's ConfigHelper reads an empty configuration_keys as a null one: every config (kafka-python sends
    an empty list for ConfigResource(configs={}))."""
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    create(kafka_cluster, "all-keys", 1, 1)
    broker = kafka_cluster.info.brokers[0]
    kp = KafkaAdminClient(bootstrap_servers=f"{broker.host}:{broker.port}", request_timeout_ms=30000)
    try:
        for resource, name in (
            (ConfigResourceType.TOPIC, "all-keys"),
            (ConfigResourceType.BROKER, str(broker.id)),
        ):
            asked = kp.describe_configs([KpConfigResource(resource, name, configs={})], config_filter="all")
            plain = kp.describe_configs([KpConfigResource(resource, name)], config_filter="all")
            kind = resource.name.lower()
            assert len(plain[kind][name]) > 0
            assert set(asked[kind][name]) == set(plain[kind][name])
    finally:
        kp.close()


def test_the_cluster_metadata_topic_may_not_be_created(kafka_cluster: Cluster) -> None:
    """Kafka's ControllerApis refuses __cluster_metadata (the quorum's own log) with INVALID_REQUEST."""
    client = admin(kafka_cluster)
    futures = client.create_topics([NewTopic("__cluster_metadata", 1, 1)], request_timeout=30)
    with pytest.raises(Exception, match=r"INVALID_REQUEST.*prohibited"):
        futures["__cluster_metadata"].result(timeout=60)
    assert "__cluster_metadata" not in client.list_topics(timeout=10).topics
