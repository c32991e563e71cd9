"""Topic settings the controller applies: the defaults for CREATE_TOPICS and the per-topic configs it
accepts (Kafka's topic-level overrides of the same names)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from controller.elections import assign_replicas_to_brokers
from controller.log_configs import TOPIC_CONFIG_DEFS
from controller.state import ClusterState
from protocol import controller_messages as cm
from protocol.common import validate_topic_name
from protocol.errors import Errors

# KRaft's metadata log: not a topic a client may create
CLUSTER_METADATA_TOPIC_NAME = "__cluster_metadata"


@dataclass(frozen=True, slots=True)
class TopicSettings:
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False


# The topic configs DescribeConfigs lists, with Kafka's defaults (LogConfig), and those a topic may set
# (controller/log_configs.py: Kafka's LogConfig keys; docs/storage.md says which are enforced). A broker
# that forwards DescribeConfigs fills in its own value of a key's broker synonym where the topic has none.
KAFKA_TOPIC_CONFIG_DEFAULTS: dict[str, str] = {name: d.default for name, d in TOPIC_CONFIG_DEFS.items()}

TOPIC_CONFIGS = {name: d.check for name, d in TOPIC_CONFIG_DEFS.items()}


def validate_topic_configs(configs: Mapping[str, str]) -> str | None:
    """None if every config is known and valid, else what is wrong (for INVALID_CONFIG)."""
    for key, value in sorted(configs.items()):
        check = TOPIC_CONFIGS.get(key)
        if check is None:
            return f"unknown topic config {key!r} (known: {', '.join(sorted(TOPIC_CONFIGS))})"
        problem = check(value)
        if problem is not None:
            return f"{key}={value!r}: {problem}"
    return None


@dataclass(frozen=True, slots=True)
class TopicPlan:
    assignment: dict[int, list[int]]
    replication_factor: int


def plan_topic(
    t: cm.CreateTopicsRequestTopic,
    state: ClusterState,
    defaults: TopicSettings,
    eligible: list[int],
    rng: random.Random,
) -> TopicPlan | tuple[Errors, str]:
    """Kafka's CREATE_TOPICS checks, then the replica assignment over the ``eligible`` brokers; or the
    error code and message."""
    bad_name = validate_topic_name(t.name)
    if bad_name is not None:
        return Errors.INVALID_TOPIC_EXCEPTION, bad_name
    if t.name == CLUSTER_METADATA_TOPIC_NAME:  # the quorum's own log (Kafka's ControllerApis)
        return (
            Errors.INVALID_REQUEST,
            f"Creation of internal topic {CLUSTER_METADATA_TOPIC_NAME} is prohibited.",
        )
    if t.name in state.topics:
        return Errors.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists"
    colliding = _colliding_topic(t.name, state)
    if colliding is not None:
        return Errors.INVALID_TOPIC_EXCEPTION, f"Topic '{t.name}' collides with existing topic: {colliding}"
    waiting = sorted(b for b, tps in state.pending_deletions.items() if any(tp[0] == t.name for tp in tps))
    if waiting:
        return Errors.TOPIC_ALREADY_EXISTS, (
            f"topic {t.name!r} is being deleted: waiting for broker(s) {waiting} to come back"
        )
    if t.assignments:
        return _manual_plan(t, state, eligible)
    partitions = defaults.num_partitions if t.num_partitions == -1 else t.num_partitions
    if partitions <= 0:
        return Errors.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {partitions}"
    rf = defaults.default_replication_factor if t.replication_factor == -1 else t.replication_factor
    if rf <= 0:
        return Errors.INVALID_REPLICATION_FACTOR, f"replication factor must be at least 1, got {rf}"
    bad_config = validate_topic_configs(t.configs)
    if bad_config is not None:
        return Errors.INVALID_CONFIG, bad_config
    if rf > len(eligible):
        return Errors.INVALID_REPLICATION_FACTOR, (
            f"Unable to replicate the partition {rf} time(s): {replication_factor_unreachable(rf, eligible)}"
        )
    return TopicPlan(assign_replicas_to_brokers(eligible, partitions, rf, rng), rf)


def replication_factor_unreachable(rf: int, eligible: list[int]) -> str:
    """Why ``rf`` replicas cannot be placed on the ``eligible`` brokers, in the words of Kafka's replica
    placer (StripedReplicaPlacer); isrsim places on the brokers that are registered, unfenced and not
    shutting down, and names them."""
    if not eligible:
        return "All brokers are currently fenced."
    return (
        f"The target replication factor of {rf} cannot be reached because only {len(eligible)} broker(s) "
        f"are registered, unfenced and not shutting down: {eligible}."
    )


def _colliding_topic(name: str, state: ClusterState) -> str | None:
    """Kafka refuses a name that equals an existing topic's once '.' and '_' are taken as one character
    (Topic.hasCollision: their metric names would be the same); the least such name, or None."""
    if "." not in name and "_" not in name:
        return None
    unified = name.replace(".", "_")
    return min((other for other in state.topics if other.replace(".", "_") == unified), default=None)


def _manual_plan(
    t: cm.CreateTopicsRequestTopic, state: ClusterState, eligible: list[int]
) -> TopicPlan | tuple[Errors, str]:
    """Kafka's checks of a manual assignment (ReplicationControlManager.createTopic): the counts left at -1,
    each partition once with a non-empty list of distinct registered brokers, one replication factor, the
    partitions numbered 0..n-1, and at least one usable broker in each (the ISR is the usable ones)."""
    if t.replication_factor != -1:
        return Errors.INVALID_REQUEST, (
            "A manual partition assignment was specified, but replication factor was not set to -1."
        )
    if t.num_partitions != -1:
        return Errors.INVALID_REQUEST, (
            "A manual partition assignment was specified, but numPartitions was not set to -1."
        )
    bad_config = validate_topic_configs(t.configs)
    if bad_config is not None:
        return Errors.INVALID_CONFIG, bad_config
    assignment: dict[int, list[int]] = {}
    rf = -1
    for a in t.assignments:
        replicas = list(a.broker_ids)
        if a.partition_index in assignment:
            return Errors.INVALID_REPLICA_ASSIGNMENT, (
                f"Found multiple manual partition assignments for partition {a.partition_index}"
            )
        if not replicas:
            return (
                Errors.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        for b in replicas:
            if replicas.count(b) > 1:
                return Errors.INVALID_REPLICA_ASSIGNMENT, (
                    f"The manual partition assignment includes the broker {b} more than once."
                )
            if b not in state.brokers:
                return Errors.INVALID_REPLICA_ASSIGNMENT, (
                    f"The manual partition assignment includes broker {b}, but no such broker is registered."
                )
        if rf == -1:
            rf = len(replicas)
        elif len(replicas) != rf:
            return Errors.INVALID_REPLICA_ASSIGNMENT, (
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                f"this is not consistent with previous partitions, which have {rf} replica(s)."
            )
        if not any(b in eligible for b in replicas):
            return Errors.INVALID_REPLICA_ASSIGNMENT, (
                f"All brokers specified in the manual partition assignment for partition {a.partition_index} "
                "are fenced or in controlled shutdown."
            )
        assignment[a.partition_index] = replicas
    if sorted(assignment) != list(range(len(assignment))):
        return (
            Errors.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    return TopicPlan(assignment, rf)


__all__ = [
    "KAFKA_TOPIC_CONFIG_DEFAULTS",
    "TOPIC_CONFIGS",
    "TopicPlan",
    "TopicSettings",
    "plan_topic",
    "replication_factor_unreachable",
    "validate_topic_configs",
]
