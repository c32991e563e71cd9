"""Kafka's admin APIs from real clients on a real cluster (docs/clients.md): DeleteRecords (kafka-python's
``delete_records``, confluent-kafka's ``delete_records``)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient

from protocol.api_keys import ApiKeys
from tests.clients.conftest import bootstrap
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import request, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]


@pytest.fixture(scope="module")
def admin_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path_factory.mktemp("admin") / "root", 3, FAST)


def replica_starts(cluster: Cluster, topic: str, partition: int = 0) -> dict[int, int]:
    """The log start offset of ``topic``-``partition`` on each broker hosting it."""
    out: dict[int, int] = {}
    for b in cluster.info.brokers:
        resp = trio.run(
            partial(request, security=None),
            b.host,
            b.port,
            ApiKeys.DESCRIBE_REPLICA_STATE,
            {"topics": [{"name": topic}]},
        )
        for p in resp["partitions"]:
            if p["partition"] == partition:
                out[b.id] = p["log_start_offset"]
    return out


def produce(cluster: Cluster, topic: str, count: int, partition: int = 0) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap(cluster), acks="all", linger_ms=0)
    try:
        for i in range(count):
            producer.send(topic, value=b"v%d" % i, partition=partition).get(timeout=30)
    finally:
        producer.close()


def test_delete_records_moves_every_replicas_log_start(admin_cluster: Cluster) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import OffsetOutOfRangeError

    cluster = admin_cluster
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("trimmed", 1, 3)])
        wait_until(lambda: cluster.isr_full("trimmed"), 30)
        produce(cluster, "trimmed", 20)
        tp = TopicPartition("trimmed", 0)
        result = admin.delete_records({tp: 7})
        # the answer waits for the low watermark: every replica on a live broker has moved its log start
        assert result[tp]["low_watermark"] == 7
        assert result[tp]["error_code"] == 0
        assert replica_starts(cluster, "trimmed") == {1: 7, 2: 7, 3: 7}
        # beyond the high watermark: OFFSET_OUT_OF_RANGE, nothing moves
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({tp: 21})
        # -1 is the high watermark
        result = admin.delete_records({tp: -1})
        assert result[tp]["low_watermark"] == 20
        wait_until(lambda: set(replica_starts(cluster, "trimmed").values()) == {20}, 30)
    finally:
        admin.close()
    # the leader checkpoints the log start at once (followers at their next periodic checkpoint)
    leader = AdminClient({"bootstrap.servers": bootstrap(cluster)}).list_topics("trimmed", timeout=30)
    leader_id = leader.topics["trimmed"].partitions[0].leader
    text = (Path(cluster.info.broker(leader_id).data_dir) / "log-start-offset-checkpoint").read_text()
    assert "trimmed 0 20" in text.splitlines(), text


def test_delete_records_from_confluent_kafka_and_fetch_below_it(admin_cluster: Cluster) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    cluster = admin_cluster
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    for future in admin.create_topics([NewTopic("cut", 2, 3)]).values():
        future.result(timeout=60)
    wait_until(lambda: cluster.isr_full("cut"), 30)
    produce(cluster, "cut", 10, partition=1)
    futures = admin.delete_records([CkTopicPartition("cut", 1, 4)], request_timeout=30)
    deleted = futures[CkTopicPartition("cut", 1, 4)].result(timeout=60)
    assert deleted.low_watermark == 4
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": "cut-reader", "auto.offset.reset": "error"}
    )
    try:
        low, high = consumer.get_watermark_offsets(CkTopicPartition("cut", 1), timeout=10)
        assert (low, high) == (4, 10)
        # a fetch below the log start is answered OFFSET_OUT_OF_RANGE (auto.offset.reset=error reports it)
        consumer.assign([CkTopicPartition("cut", 1, 2)])
        error = None
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is not None:
                error = msg.error()
                break
        assert error is not None and "out of range" in error.str().lower(), error
    finally:
        consumer.close()
    # an unknown partition is answered UNKNOWN_TOPIC_OR_PARTITION
    futures = admin.delete_records([CkTopicPartition("cut", 9, 1)], request_timeout=30)
    with pytest.raises(KafkaException):
        futures[CkTopicPartition("cut", 9, 1)].result(timeout=60)


def test_acl_apis_without_an_authorizer_are_security_disabled(admin_cluster: Cluster) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import SecurityDisabledError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap(admin_cluster), request_timeout_ms=30000)
    try:
        acl_filter = ACLFilter(
            principal=None,
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(acl_filter)
        acl = ACL(
            principal="User:bob",
            host="*",
            operation=ACLOperation.READ,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(ResourceType.TOPIC, "t", ACLResourcePatternType.LITERAL),
        )
        created = admin.create_acls([acl])
        # one result per creation, each SECURITY_DISABLED
        assert created == {"succeeded": [], "failed": [SecurityDisabledError]}
    finally:
        admin.close()


def test_preferred_leader_election_through_the_controller(admin_cluster: Cluster) -> None:
    """kafka-python's elect_leaders (ElectLeaders, forwarded to the controller): a partition whose preferred
    replica returned after a failover gets it back as leader; asked again, ELECTION_NOT_NEEDED; an unclean
    election of a partition that has a leader is not needed either."""
    from kafka.admin import KafkaAdminClient, NewTopic

    cluster = admin_cluster
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("elected", 1, 3)])
        wait_until(lambda: cluster.isr_full("elected"), 30)
        replicas = cluster.metadata("elected")[0]["replica_nodes"]
        preferred = replicas[0]
        assert cluster.leader("elected", 0) == preferred
        cluster.cli("broker", "kill", str(preferred))
        wait_until(lambda: cluster.leader("elected", 0) not in (preferred, -1), 60)
        cluster.cli("broker", "restart", str(preferred))
        wait_until(lambda: cluster.isr_full("elected"), 60)
        assert cluster.leader("elected", 0) != preferred  # no automatic rebalance

        response = admin.elect_leaders(0, {"elected": [0]})
        [result] = response.replica_election_results
        assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, 0)]
        wait_until(lambda: cluster.leader("elected", 0) == preferred, 30)

        response = admin.elect_leaders(0, {"elected": [0]}, raise_errors=False)
        [result] = response.replica_election_results
        assert [p.error_code for p in result.partition_result] == [84]  # ELECTION_NOT_NEEDED
        response = admin.elect_leaders(1, {"elected": [0], "nowhere": [0]}, raise_errors=False)
        codes = {
            r.topic: [p.error_code for p in r.partition_result] for r in response.replica_election_results
        }
        assert codes == {"elected": [84], "nowhere": [3]}  # UNKNOWN_TOPIC_OR_PARTITION
        # the command line (kafka-leader-election): not needed is no failure
        out = cluster.cli("leader-election", "--election-type", "preferred", "--topic", "elected")
        assert "elected-0: ELECTION_NOT_NEEDED" in out.stdout, out.stdout
        # every topic (kafka-python names each partition): elected, or not needed
        response = admin.elect_leaders(0, None, raise_errors=False)
        every = [p for r in response.replica_election_results for p in r.partition_result]
        assert every and {p.error_code for p in every} <= {0, 84}, every
    finally:
        admin.close()


def test_describe_log_dirs(admin_cluster: Cluster) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    cluster = admin_cluster
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("sized", 2, 3)])
        wait_until(lambda: cluster.isr_full("sized"), 30)
        produce(cluster, "sized", 10, partition=1)
        broker = cluster.info.brokers[0]
        wait_until(lambda: cluster.replica_offsets("sized").get((broker.id, 1), (0, 0))[0] == 10, 30)
        [answer] = admin.describe_log_dirs(brokers=[broker.id])
        assert answer["broker"] == broker.id
        [log_dir] = answer["log_dirs"]
        assert log_dir["error_code"] == 0
        assert Path(log_dir["log_dir"]) == Path(broker.data_dir).resolve()
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        sized = {t["name"]: t["partitions"] for t in log_dir["topics"]}["sized"]
        by_index = {p["partition_index"]: p for p in sized}
        size_on_disk = sum(f.stat().st_size for f in (Path(broker.data_dir) / "sized-1").glob("*.log"))
        assert by_index[1]["partition_size"] == size_on_disk > 0
        assert by_index[0]["partition_size"] == 0
        assert all(p["offset_lag"] == 0 and p["is_future_key"] is False for p in sized)
        # only the partitions asked for
        [answer] = admin.describe_log_dirs({"sized": [1]}, brokers=[broker.id])
        [topic] = answer["log_dirs"][0]["topics"]
        assert (topic["name"], [p["partition_index"] for p in topic["partitions"]]) == ("sized", [1])
    finally:
        admin.close()


def test_partition_reassignment_through_the_controller(admin_cluster: Cluster) -> None:
    """kafka-python's alter/list_partition_reassignments: a replica moves to another broker (added, caught
    up into the ISR, then the old one removed and its log deleted), the records all still there; a
    reassignment to a broker that is down stays ongoing and is cancelled with null replicas."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import NoReassignmentInProgressError

    cluster = admin_cluster
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("moved", 1, 2)])
        wait_until(lambda: cluster.isr_full("moved"), 30)
        produce(cluster, "moved", 30)
        old = list(cluster.metadata("moved")[0]["replica_nodes"])
        [spare] = [b.id for b in cluster.info.brokers if b.id not in old]
        target = [old[1], spare]
        tp = TopicPartition("moved", 0)
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}

        def moved() -> bool:
            meta = cluster.metadata("moved")[0]
            return (
                list(meta["replica_nodes"]) == target
                and sorted(meta["isr_nodes"]) == sorted(target)
                and not admin.list_partition_reassignments()
            )

        wait_until(moved, 60)
        assert cluster.leader("moved", 0) in target
        gone = Path(cluster.info.broker(old[0]).data_dir) / "moved-0"
        wait_until(lambda: not gone.exists(), 30)
        wait_until(lambda: cluster.replica_offsets("moved").get((spare, 0), (0, 0))[0] == 30, 30)
        consumer = KafkaConsumer(bootstrap_servers=bootstrap(cluster), auto_offset_reset="earliest")
        try:
            consumer.assign([tp])
            got: list[bytes] = []
            for _ in range(30):
                for records in consumer.poll(timeout_ms=1000).values():
                    got += [r.value for r in records]
                if len(got) >= 30:
                    break
            assert got == [b"v%d" % i for i in range(30)]
        finally:
            consumer.close()

        # nothing to cancel
        assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
        # a reassignment that cannot complete (the new replica's broker is down), then cancelled
        cluster.cli("broker", "kill", str(old[0]))
        wait_until(
            lambda: (
                old[0] not in {b["node_id"] for b in cluster.ask(target[0], 3, {"topics": []})["brokers"]}
            ),
            30,
        )
        admin.close()
        live = tuple(b for b in target)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster, brokers=live), request_timeout_ms=30000)
        assert admin.alter_partition_reassignments({tp: [*target, old[0]]}) == {tp: None}
        ongoing = admin.list_partition_reassignments()
        assert ongoing == {
            tp: {"replicas": [*target, old[0]], "adding_replicas": [old[0]], "removing_replicas": []}
        }
        out = cluster.cli("reassign-partitions", "--list")
        line = f"moved-0: replicas {[*target, old[0]]} adding {[old[0]]} removing []"
        assert line in out.stdout, out.stdout
        cluster.cli("reassign-partitions", "--topic", "moved", "--partition", "0", "--cancel")
        assert admin.list_partition_reassignments() == {}
        assert list(cluster.metadata("moved")[0]["replica_nodes"]) == target
        cluster.cli("broker", "restart", str(old[0]))
    finally:
        admin.close()


def test_four_kafka_python_consumers_reach_one_generation(admin_cluster: Cluster) -> None:
    """kafka-python's own integration test_group: four consumers of a 4-partition topic, each in its thread,
    share one stable generation (none rejoining, each with a partition) within 15 s. The coordinator's
    initial delay (group.initial.rebalance.delay.ms, 3 s, extended once while members keep arriving, as
    Kafka's InitialDelayedJoin) takes about 6 s of it."""
    import threading
    import time

    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient, NewTopic

    cluster = admin_cluster
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("grouped", 4, 3)])
    finally:
        admin.close()
    wait_until(lambda: cluster.isr_full("grouped"), 30)
    consumers: dict[int, KafkaConsumer] = {}
    stop = threading.Event()

    def consume(i: int) -> None:
        consumer = KafkaConsumer(
            "grouped",
            bootstrap_servers=bootstrap(cluster),
            group_id="four",
            client_id=f"consumer_thread-{i}",
            heartbeat_interval_ms=500,
        )
        consumers[i] = consumer
        while not stop.is_set():
            consumer.poll(timeout_ms=200)
        consumer.close(timeout_ms=500)

    threads = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    try:

        def stable() -> bool:
            if len(consumers) < 4:
                return False
            members = list(consumers.values())
            generations = {c._coordinator._generation.generation_id for c in members}
            return (
                all(c.assignment() for c in members)
                and len(generations) == 1
                and not any(c._coordinator.rejoining for c in members)
            )

        start = time.monotonic()
        wait_until(stable, 15)
        assigned = [tp for c in consumers.values() for tp in c.assignment()]
        assert sorted(tp.partition for tp in assigned) == [0, 1, 2, 3]
        print(f"one generation after {time.monotonic() - start:.1f} s")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
