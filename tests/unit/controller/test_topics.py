"""CREATE_TOPICS and DELETE_TOPICS on the controller, and its METADATA / DESCRIBE_CLUSTER answers."""

from __future__ import annotations

import pytest

from controller.core import ControllerCore
from controller.state import EPOCH_DURING_DELETE
from protocol import controller_messages as cm
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.common import LEADER_DURING_DELETE
from protocol.errors import Errors
from tests.unit.controller.support import (
    SESSION_MS,
    create_topic,
    events_named,
    heartbeat,
    lair_partitions,
    live_core,
    requests_by,
)


def test_create_assigns_elects_and_tells_the_brokers() -> None:
    core = live_core([1, 2, 3])
    got = create_topic(core, "orders", 3, 2)
    assert (got.error_code, got.error_message) == (0, None)
    topic = core.state.topics["orders"]
    for p in topic.partitions.values():
        assert len(p.replicas) == 2 and p.leader == p.replicas[0] and p.isr == p.replicas
        assert (p.leader_epoch, p.partition_epoch, p.controller_epoch) == (0, 0, 1)
    assert sorted(p.leader for p in topic.partitions.values()) == [1, 2, 3]
    effects = core.drain()
    assert effects.dirty
    created = events_named(effects, "topic_created")
    assert created[0]["topic"] == "orders" and created[0]["replication_factor"] == 2
    assert created[0]["assignment"] == {str(i): p.replicas for i, p in topic.partitions.items()}
    assert len(events_named(effects, "leader_elected")) == 3
    lair = requests_by(effects, ApiKeys.LEADER_AND_ISR)
    assert set(lair) == {1, 2, 3}
    for broker, request in lair.items():
        states = lair_partitions(request)
        assert all(s.is_new and broker in s.replicas for s in states.values())
        assert len(states) == 2
    assert set(requests_by(effects, ApiKeys.UPDATE_METADATA)) == {1, 2, 3}


def test_defaults_apply_for_minus_one() -> None:
    core = live_core([1, 2])
    assert create_topic(core, "d", -1, -1).error_code == 0
    assert [p.replicas for p in core.state.topics["d"].partitions.values()] in ([[1]], [[2]])


def test_fenced_and_shutting_down_brokers_get_no_replicas() -> None:
    core = live_core([1, 2, 3])
    heartbeat(core, 1, now_ms=SESSION_MS)
    heartbeat(core, 2, now_ms=SESSION_MS, want_shut_down=True)
    core.tick(SESSION_MS + 1)  # 3 fenced, 2 shut down
    got = create_topic(core, "x", 4, 2)
    assert got.error_code == Errors.INVALID_REPLICATION_FACTOR
    assert got.error_message == (
        "Unable to replicate the partition 2 time(s): The target replication factor of 2 cannot be reached "
        "because only 1 broker(s) are registered, unfenced and not shutting down: [1]."
    )
    assert create_topic(core, "x", 4, 1).error_code == 0
    assert {r for p in core.state.topics["x"].partitions.values() for r in p.replicas} == {1}


@pytest.mark.parametrize(
    ("name", "partitions", "rf", "configs", "error"),
    [
        ("bad name", 1, 1, {}, Errors.INVALID_TOPIC_EXCEPTION),
        ("t", 0, 1, {}, Errors.INVALID_PARTITIONS),
        ("t", -5, 1, {}, Errors.INVALID_PARTITIONS),
        ("t", 1, 0, {}, Errors.INVALID_REPLICATION_FACTOR),
        ("t", 1, 4, {}, Errors.INVALID_REPLICATION_FACTOR),
        ("t", 1, 1, {"no.such.config": "1"}, Errors.INVALID_CONFIG),
        ("t", 1, 1, {"retention.ms": "-2"}, Errors.INVALID_CONFIG),
        ("t", 1, 1, {"retention.bytes": "lots"}, Errors.INVALID_CONFIG),
        ("t", 1, 1, {"cleanup.policy": "compact,shred"}, Errors.INVALID_CONFIG),
        ("t", 1, 1, {"min.cleanable.dirty.ratio": "1.5"}, Errors.INVALID_CONFIG),
        ("t", 1, 1, {"segment.bytes": "13"}, Errors.INVALID_CONFIG),
        ("t", 1, 1, {"max.message.bytes": "2147483648"}, Errors.INVALID_CONFIG),
        ("t", 1, 1, {"min.insync.replicas": "0"}, Errors.INVALID_CONFIG),
        ("t", 1, 1, {"unclean.leader.election.enable": "maybe"}, Errors.INVALID_CONFIG),
    ],
)
def test_create_errors(name: str, partitions: int, rf: int, configs: dict[str, str], error: Errors) -> None:
    core = live_core([1, 2, 3])
    got = create_topic(core, name, partitions, rf, configs)
    assert got.error_code == error and got.error_message
    assert core.state.topics == {}
    assert not core.drain().dirty


def test_existing_and_duplicate_names() -> None:
    core = live_core([1])
    assert create_topic(core, "t", 1, 1).error_code == 0
    assert create_topic(core, "t", 1, 1).error_code == Errors.TOPIC_ALREADY_EXISTS
    topic = cm.CreateTopicsRequestTopic(name="u", num_partitions=1, replication_factor=1)
    other = cm.CreateTopicsRequestTopic(name="v", num_partitions=1, replication_factor=1)
    resp = core.create_topics(cm.CreateTopicsRequest(topics=[topic, other, topic]))
    # Kafka's ControllerApis answers a repeated name once (a client reads one result per topic)
    assert [(t.name, t.error_code) for t in resp.topics] == [("v", 0), ("u", Errors.INVALID_REQUEST)]
    assert resp.topics[1].error_message == "Duplicate topic name."
    assert "u" not in core.state.topics and "v" in core.state.topics


def test_a_created_topic_is_described_in_the_answer() -> None:
    """CreateTopics v5+ (KIP-525): partitions, replication factor and every effective config with its
    source; an error carries -1 and no configs."""
    core = live_core([1, 2, 3])
    topic = cm.CreateTopicsRequestTopic(
        name="t", num_partitions=4, replication_factor=2, configs={"min.insync.replicas": "2"}
    )
    bad = cm.CreateTopicsRequestTopic(name="u", num_partitions=1, replication_factor=9)
    made, failed = core.create_topics(cm.CreateTopicsRequest(topics=[topic, bad])).topics
    assert (made.num_partitions, made.replication_factor) == (4, 2)
    configs = {c.name: (c.value, c.config_source) for c in made.configs}
    assert configs["min.insync.replicas"] == ("2", cm.CONFIG_SOURCE_TOPIC)
    assert configs["compression.type"] == ("producer", cm.CONFIG_SOURCE_DEFAULT)
    assert (failed.num_partitions, failed.replication_factor, failed.configs) == (-1, -1, [])


@pytest.mark.parametrize(
    ("partitions", "rf", "configs", "error"),
    [
        (1, 4, {}, Errors.INVALID_REPLICATION_FACTOR),
        (1, 1, {"min.insync.replicas": "x"}, Errors.INVALID_CONFIG),
        (0, 1, {}, Errors.INVALID_PARTITIONS),
        (2, 3, {}, Errors.NONE),
    ],
)
def test_validate_only_checks_as_a_creation_and_creates_nothing(
    partitions: int, rf: int, configs: dict[str, str], error: Errors
) -> None:
    """Kafka's controller runs every check of a creation for validate_only (the replication factor against
    the registered brokers, the configs), then writes nothing."""
    core = live_core([1, 2, 3])
    core.drain()
    rng_state = core.rng.getstate()
    topic = cm.CreateTopicsRequestTopic(
        name="t", num_partitions=partitions, replication_factor=rf, configs=configs
    )
    (got,) = core.create_topics(cm.CreateTopicsRequest(topics=[topic], validate_only=True)).topics
    assert got.error_code == error
    if error == Errors.NONE:
        assert (got.num_partitions, got.replication_factor) == (2, 3)
    assert core.state.topics == {} and core.rng.getstate() == rng_state
    effects = core.drain()
    assert not effects.dirty and not events_named(effects, "topic_created")


def test_a_name_twice_in_delete_topics_is_answered_once_and_not_deleted() -> None:
    core = live_core([1])
    for name in ("t", "u"):
        assert create_topic(core, name, 1, 1).error_code == 0
    resp = core.delete_topics(cm.DeleteTopicsRequest(topic_names=["t", "u", "t"]))
    assert [(r.name, r.error_code) for r in resp.responses] == [("u", 0), ("t", Errors.INVALID_REQUEST)]
    assert resp.responses[1].error_message == "Duplicate topic name."
    assert set(core.state.topics) == {"t"}


def grow(
    core: ControllerCore,
    name: str,
    count: int,
    *,
    assignments: list[cm.CreatePartitionsAssignment] | None = None,
    validate_only: bool = False,
) -> cm.CreatePartitionsTopicResult:
    topic = cm.CreatePartitionsTopic(name=name, count=count, assignments=assignments)
    request = cm.CreatePartitionsRequest(topics=[topic], validate_only=validate_only)
    (result,) = core.create_partitions(request).results
    return result


def test_create_partitions_adds_led_partitions_with_the_topics_replication_factor() -> None:
    core = live_core([1, 2, 3])
    assert create_topic(core, "t", 2, 2).error_code == 0
    core.drain()
    got = grow(core, "t", 5)
    assert (got.error_code, got.error_message) == (0, None)
    parts = core.state.topics["t"].partitions
    assert sorted(parts) == [0, 1, 2, 3, 4]
    for i in (2, 3, 4):
        p = parts[i]
        assert len(p.replicas) == 2 and p.leader == p.replicas[0] and p.isr == p.replicas
        assert p.leader_epoch == 0
    effects = core.drain()
    assert effects.dirty
    [event] = events_named(effects, "partitions_created")
    assert (event["partitions"], event["previous_partitions"]) == (5, 2)
    assert sorted(e["partition"] for e in events_named(effects, "leader_elected")) == [2, 3, 4]
    lair = requests_by(effects, ApiKeys.LEADER_AND_ISR)
    new = {tp for request in lair.values() for tp in lair_partitions(request)}
    assert new == {("t", 2), ("t", 3), ("t", 4)}
    assert set(requests_by(effects, ApiKeys.UPDATE_METADATA)) == {1, 2, 3}


@pytest.mark.parametrize(
    ("count", "assignments", "error"),
    [
        (2, None, Errors.INVALID_PARTITIONS),  # not an increase
        (1, None, Errors.INVALID_PARTITIONS),
        (3, [], Errors.INVALID_REPLICA_ASSIGNMENT),  # one partition added, no assignment
        (3, [[1]], Errors.INVALID_REPLICA_ASSIGNMENT),  # not the topic's replication factor
        (3, [[1, 1]], Errors.INVALID_REPLICA_ASSIGNMENT),
        (3, [[1, 9]], Errors.INVALID_REPLICA_ASSIGNMENT),  # no such broker
    ],
)
def test_create_partitions_errors(count: int, assignments: list[list[int]] | None, error: Errors) -> None:
    core = live_core([1, 2, 3])
    assert create_topic(core, "t", 2, 2).error_code == 0
    core.drain()
    given = (
        None if assignments is None else [cm.CreatePartitionsAssignment(broker_ids=a) for a in assignments]
    )
    got = grow(core, "t", count, assignments=given)
    assert got.error_code == error and got.error_message
    assert sorted(core.state.topics["t"].partitions) == [0, 1]
    assert not core.drain().dirty


def test_create_partitions_unknown_topic_validate_only_assignment_and_duplicates() -> None:
    core = live_core([1, 2, 3])
    assert create_topic(core, "t", 1, 3).error_code == 0
    core.drain()
    assert grow(core, "nope", 2).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert grow(core, "t", 4, validate_only=True).error_code == 0
    assert sorted(core.state.topics["t"].partitions) == [0] and not core.drain().dirty
    given = [cm.CreatePartitionsAssignment(broker_ids=[3, 1, 2])]
    assert grow(core, "t", 2, assignments=given).error_code == 0
    assert core.state.topics["t"].partitions[1].replicas == [3, 1, 2]
    assert core.state.topics["t"].partitions[1].leader == 3
    twice = cm.CreatePartitionsTopic(name="t", count=5)
    resp = core.create_partitions(cm.CreatePartitionsRequest(topics=[twice, twice]))
    assert [(r.name, r.error_code) for r in resp.results] == [("t", Errors.INVALID_REQUEST)]
    assert sorted(core.state.topics["t"].partitions) == [0, 1]


def test_delete_stops_and_deletes_replicas_and_waits_for_fenced_brokers() -> None:
    core = live_core([1, 2])
    assert create_topic(core, "t", 2, 2).error_code == 0
    core.drain()
    heartbeat(core, 1, now_ms=SESSION_MS)
    core.tick(SESSION_MS + 1)  # broker 2 fenced
    core.drain()
    resp = core.delete_topics(cm.DeleteTopicsRequest(topic_names=["t", "nope"]))
    assert [(r.name, r.error_code) for r in resp.responses] == [
        ("t", 0),
        ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert "t" not in core.state.topics
    assert core.state.pending_deletions == {2: [("t", 0), ("t", 1)]}
    effects = core.drain()
    assert events_named(effects, "topic_deleted") == [{"topic": "t", "partitions": 2, "pending_brokers": [2]}]
    stop = requests_by(effects, ApiKeys.STOP_REPLICA)
    assert set(stop) == {1}
    body = stop[1].body
    assert isinstance(body, cm.StopReplicaRequest)
    assert {
        (p.partition_index, p.leader_epoch, p.delete_partition) for p in body.topic_states[0].partition_states
    } == {
        (0, EPOCH_DURING_DELETE, True),
        (1, EPOCH_DURING_DELETE, True),
    }
    um = requests_by(effects, ApiKeys.UPDATE_METADATA)[1].body
    assert isinstance(um, cm.UpdateMetadataRequest)
    assert {p.leader for p in um.topic_states[0].partition_states} == {LEADER_DURING_DELETE}
    # Not re-creatable until broker 2 has been told.
    assert create_topic(core, "t", 1, 1).error_code == Errors.TOPIC_ALREADY_EXISTS
    heartbeat(core, 2, now_ms=SESSION_MS + 2)
    effects = core.drain()
    stop = requests_by(effects, ApiKeys.STOP_REPLICA)
    assert set(stop) == {2} and effects.dirty
    assert core.state.pending_deletions == {}
    assert create_topic(core, "t", 1, 1).error_code == 0


def test_metadata_and_describe_cluster() -> None:
    core = live_core([1, 2])
    assert create_topic(core, "t", 1, 2).error_code == 0
    p = core.state.topics["t"].partitions[0]
    p.replicas, p.leader, p.isr = [1, 2], 1, [1, 2]
    heartbeat(core, 2, now_ms=SESSION_MS)
    core.tick(SESSION_MS + 1)  # broker 1 fenced, 2 leads
    md = core.metadata(m.MetadataRequest(topics=None))
    assert [b.node_id for b in md.brokers] == [2] and md.controller_id == 1000
    part = md.topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.isr_nodes, part.offline_replicas) == (0, 2, [2], [1])
    missing = core.metadata(m.MetadataRequest(topics=[m.MetadataRequestTopic(name="x")]))
    assert missing.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    described = core.describe_cluster()
    assert described.cluster_id == "test" and described.controller_id == 1000
    assert [(b.broker_id, b.fenced) for b in described.brokers] == [(1, True), (2, False)]


def test_metadata_of_an_offline_partition() -> None:
    core = live_core([1])
    assert create_topic(core, "t", 1, 1).error_code == 0
    core.tick(SESSION_MS + 1)
    part = core.metadata(m.MetadataRequest(topics=None)).topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.offline_replicas) == (Errors.LEADER_NOT_AVAILABLE, -1, [1])


def test_describe_configs_gives_overrides_and_defaults() -> None:
    core = live_core([1, 2, 3])
    create_topic(core, "strict", 1, 3, {"min.insync.replicas": "3"})
    create_topic(core, "plain", 1, 3)

    def describe(
        *names: str, resource_type: int = cm.CONFIG_RESOURCE_TOPIC
    ) -> list[cm.DescribeConfigsResponseResult]:
        resources = [
            cm.DescribeConfigsRequestResource(resource_type=resource_type, resource_name=n) for n in names
        ]
        return core.describe_configs(cm.DescribeConfigsRequest(resources=resources)).results

    strict, plain, missing = describe("strict", "plain", "nope")
    configs = {c.name: (c.value, c.is_default) for c in strict.configs}
    assert configs["min.insync.replicas"] == ("3", False)
    assert configs["unclean.leader.election.enable"] == ("false", True)
    assert all(c.is_default for c in plain.configs)
    # Kafka's list: every topic config isrsim acts on, with Kafka's defaults and their sources
    sources = {c.name: (c.value, c.config_source) for c in plain.configs}
    assert sources == {
        "cleanup.policy": ("delete", cm.CONFIG_SOURCE_DEFAULT),
        "compression.type": ("producer", cm.CONFIG_SOURCE_DEFAULT),
        "delete.retention.ms": ("86400000", cm.CONFIG_SOURCE_DEFAULT),
        "max.compaction.lag.ms": ("9223372036854775807", cm.CONFIG_SOURCE_DEFAULT),
        "max.message.bytes": ("1048588", cm.CONFIG_SOURCE_DEFAULT),
        "message.timestamp.type": ("CreateTime", cm.CONFIG_SOURCE_DEFAULT),
        "min.cleanable.dirty.ratio": ("0.5", cm.CONFIG_SOURCE_DEFAULT),
        "min.compaction.lag.ms": ("0", cm.CONFIG_SOURCE_DEFAULT),
        "min.insync.replicas": ("1", cm.CONFIG_SOURCE_DEFAULT),
        "retention.bytes": ("-1", cm.CONFIG_SOURCE_DEFAULT),
        "retention.ms": ("604800000", cm.CONFIG_SOURCE_DEFAULT),
        "segment.bytes": ("1073741824", cm.CONFIG_SOURCE_DEFAULT),
        "segment.ms": ("604800000", cm.CONFIG_SOURCE_DEFAULT),
        "unclean.leader.election.enable": ("false", cm.CONFIG_SOURCE_DEFAULT),
    }
    # Kafka's ConfigType (DescribeConfigs v3+): never UNKNOWN for a topic config
    types = {c.name: c.config_type for c in plain.configs}
    assert types["retention.ms"] == 5 and types["segment.bytes"] == 3 and types["cleanup.policy"] == 7
    assert types["unclean.leader.election.enable"] == 1 and types["min.cleanable.dirty.ratio"] == 6
    assert all(t != 0 for t in types.values())
    assert {c.name: c.config_source for c in strict.configs}["min.insync.replicas"] == cm.CONFIG_SOURCE_TOPIC
    (only,) = core.describe_configs(
        cm.DescribeConfigsRequest(
            resources=[
                cm.DescribeConfigsRequestResource(
                    resource_type=cm.CONFIG_RESOURCE_TOPIC,
                    resource_name="plain",
                    configuration_keys=["compression.type", "no.such.config"],
                )
            ]
        )
    ).results
    assert [(c.name, c.value) for c in only.configs] == [("compression.type", "producer")]
    # an empty list of keys is every key, as a null one (Kafka's ConfigHelper.describeConfigs)
    (every,) = core.describe_configs(
        cm.DescribeConfigsRequest(
            resources=[
                cm.DescribeConfigsRequestResource(
                    resource_type=cm.CONFIG_RESOURCE_TOPIC, resource_name="plain", configuration_keys=[]
                )
            ]
        )
    ).results
    assert [c.name for c in every.configs] == [c.name for c in plain.configs]
    assert missing.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION and not missing.configs
    (broker,) = describe("1", resource_type=4)
    assert broker.error_code == Errors.INVALID_REQUEST and "only topics" in (broker.error_message or "")


def test_describe_configs_names_the_controllers_own_setting_static() -> None:
    """unclean.leader.election.enable=true on the controller differs from Kafka's default: the topic shows it
    as a static broker setting, not a default and not the topic's own."""
    core = live_core([1], unclean=True)
    create_topic(core, "t", 1, 1)
    (result,) = core.describe_configs(
        cm.DescribeConfigsRequest(
            resources=[
                cm.DescribeConfigsRequestResource(resource_type=cm.CONFIG_RESOURCE_TOPIC, resource_name="t")
            ]
        )
    ).results
    entry = {c.name: c for c in result.configs}["unclean.leader.election.enable"]
    assert (entry.value, entry.config_source, entry.is_default) == (
        "true",
        cm.CONFIG_SOURCE_STATIC_BROKER,
        False,
    )


def manual(
    name: str, assignments: dict[int, list[int]], partitions: int = -1, rf: int = -1
) -> cm.CreateTopicsRequestTopic:
    return cm.CreateTopicsRequestTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=[
            cm.CreateTopicsRequestAssignment(partition_index=i, broker_ids=b) for i, b in assignments.items()
        ],
    )


def test_a_manual_assignment_places_the_replicas_as_given() -> None:
    core = live_core([1, 2, 3])
    (got,) = core.create_topics(
        cm.CreateTopicsRequest(topics=[manual("m", {0: [3, 1], 1: [2, 3], 2: [3, 1]})])
    ).topics
    assert (got.error_code, got.num_partitions, got.replication_factor) == (0, 3, 2)
    parts = core.state.topics["m"].partitions
    assert {i: (p.replicas, p.leader, p.isr) for i, p in parts.items()} == {
        0: ([3, 1], 3, [3, 1]),
        1: ([2, 3], 2, [2, 3]),
        2: ([3, 1], 3, [3, 1]),
    }


def test_a_manual_assignment_with_a_fenced_broker_leaves_it_out_of_the_isr() -> None:
    core = live_core([1, 2, 3])
    heartbeat(core, 1, now_ms=SESSION_MS)
    heartbeat(core, 2, now_ms=SESSION_MS)
    core.tick(SESSION_MS + 1)  # 3 fenced
    (got,) = core.create_topics(cm.CreateTopicsRequest(topics=[manual("m", {0: [3, 1]})])).topics
    assert got.error_code == 0
    p = core.state.topics["m"].partitions[0]
    assert (p.replicas, p.leader, p.isr) == ([3, 1], 1, [1])
    (only_fenced,) = core.create_topics(cm.CreateTopicsRequest(topics=[manual("n", {0: [3]})])).topics
    assert only_fenced.error_code == Errors.INVALID_REPLICA_ASSIGNMENT


@pytest.mark.parametrize(
    ("assignments", "partitions", "rf", "error"),
    [
        ({0: [1, 2]}, -1, 2, Errors.INVALID_REQUEST),  # counts and an assignment together
        ({0: [1, 2]}, 1, -1, Errors.INVALID_REQUEST),
        ({0: [1, 2], 2: [2, 3]}, -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT),  # not 0..n-1
        ({0: [1, 2], 1: [2]}, -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT),  # replication factors differ
        ({0: [1, 1]}, -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT),
        ({0: [1, 9]}, -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT),  # not registered
        ({0: []}, -1, -1, Errors.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_manual_assignment_errors(
    assignments: dict[int, list[int]], partitions: int, rf: int, error: Errors
) -> None:
    core = live_core([1, 2, 3])
    core.drain()
    (got,) = core.create_topics(
        cm.CreateTopicsRequest(topics=[manual("m", assignments, partitions, rf)])
    ).topics
    assert got.error_code == error and got.error_message
    assert "m" not in core.state.topics and not core.drain().dirty


def test_a_name_that_collides_with_a_topic_once_dot_and_underscore_are_one_is_refused() -> None:
    """Kafka's Topic.hasCollision: `a.b` and `a_b` would share metric names, so the second is refused."""
    core = live_core([1])
    assert create_topic(core, "metrics.in", 1, 1).error_code == 0
    for name in ("metrics_in", "metrics.in"):
        got = create_topic(core, name, 1, 1)
        if name == "metrics.in":
            assert got.error_code == Errors.TOPIC_ALREADY_EXISTS
        else:
            assert got.error_code == Errors.INVALID_TOPIC_EXCEPTION
            assert got.error_message == "Topic 'metrics_in' collides with existing topic: metrics.in"
    assert create_topic(core, "metrics-in", 1, 1).error_code == 0  # '-' is not one of them


def test_the_cluster_metadata_topic_may_not_be_created() -> None:
    core = live_core([1])
    got = create_topic(core, "__cluster_metadata", 1, 1)
    assert got.error_code == Errors.INVALID_REQUEST
    assert got.error_message == "Creation of internal topic __cluster_metadata is prohibited."
    assert create_topic(core, "__other", 1, 1).error_code == 0
