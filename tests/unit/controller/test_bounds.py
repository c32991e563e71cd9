"""The bounds of one controller operation (controller/bounds.py, after Kafka's
``ReplicationControlManager.MAX_PARTITIONS_PER_BATCH`` and ``QuorumController.MAX_RECORDS_PER_USER_OP``):
an over-large request is answered with Kafka's error at once, before anything is assigned, and changes
nothing; requests at the bound still succeed."""

from __future__ import annotations

import time

from controller.core import ControllerCore
from controller.security_control import SecurityControl
from controller.state import PartitionState, TopicState
from protocol import controller_messages as cm
from protocol import security_messages as sm
from protocol.admin_bounds import (
    EXCESSIVE_BATCH_MESSAGE,
    EXCESSIVE_PARTITIONS_MESSAGE,
    MAX_PARTITIONS_PER_BATCH,
    MAX_RECORDS_PER_USER_OP,
    METADATA_STATE_MAX_BYTES,
    create_partitions_too_many,
    create_topics_too_many_partitions,
    new_partitions_bytes,
    new_topic_bytes,
)
from protocol.errors import Errors
from raft.records import encode_record
from server.security.security_metadata import SecurityMetadata
from tests.unit.controller.support import create_topic, live_core

from .test_security import creation, upsertion

INT32_MAX = 2**31 - 1


def topic(name: str, partitions: int, rf: int = 1, **kw: object) -> cm.CreateTopicsRequestTopic:
    return cm.CreateTopicsRequestTopic(name=name, num_partitions=partitions, replication_factor=rf, **kw)  # type: ignore[arg-type]


def untouched(core: ControllerCore) -> None:
    effects = core.drain()
    assert not effects.dirty and not effects.requests and not effects.events


# ------------------------------------------------------------------------------------ the counts


def test_create_topics_counts_partitions_as_kafka_does() -> None:
    assert not create_topics_too_many_partitions([topic("a", MAX_PARTITIONS_PER_BATCH)], 1)
    assert create_topics_too_many_partitions([topic("a", MAX_PARTITIONS_PER_BATCH + 1)], 1)
    # summed over the topics; -1 is the default; non-positive counts count nothing
    assert create_topics_too_many_partitions([topic("a", 5000), topic("b", 5000), topic("c", 1)], 1)
    assert create_topics_too_many_partitions([topic("a", 9999), topic("b", -1)], 2)
    assert not create_topics_too_many_partitions([topic("a", 10_000), topic("b", 0), topic("c", -5)], 1)
    # manual assignments count one partition each, whatever num_partitions says
    assignments = [cm.CreateTopicsRequestAssignment(partition_index=i, broker_ids=[1]) for i in range(10_001)]
    assert create_topics_too_many_partitions([topic("a", -1, -1, assignments=assignments)], 1)
    # no overflow, however many int32 counts are added
    assert create_topics_too_many_partitions([topic(f"t{i}", INT32_MAX) for i in range(3)], 1)


def test_create_partitions_counts_the_partitions_added() -> None:
    grow = [cm.CreatePartitionsTopic(name="a", count=10_003)]
    assert not create_partitions_too_many(grow, {"a": 3})
    assert create_partitions_too_many(grow, {"a": 2})
    # unknown topics and shrinking ones add nothing (they are refused on their own)
    assert not create_partitions_too_many([cm.CreatePartitionsTopic(name="x", count=INT32_MAX)], {})
    assert not create_partitions_too_many([cm.CreatePartitionsTopic(name="a", count=1)], {"a": 5})


# ------------------------------------------------------------------------------------ CreateTopics


def test_a_million_partition_topic_is_refused_at_once_and_changes_nothing() -> None:
    core = live_core([1, 2, 3])
    started = time.perf_counter()
    resp = core.create_topics(
        cm.CreateTopicsRequest(topics=[topic("huge", 1_000_000, 3), topic("small", 1), topic("small", 1)])
    )
    took = time.perf_counter() - started
    # every topic the request names, duplicates included, gets Kafka's answer (getErrorResponse)
    assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
        ("huge", Errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE),
        ("small", Errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE),
        ("small", Errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE),
    ]
    assert core.state.topics == {}
    untouched(core)
    print(f"1,000,000-partition CreateTopics refused in {took * 1000:.2f} ms")
    assert took < 0.5  # nothing proportional to the count was built (generous: a loaded machine)


def test_validate_only_is_bounded_too() -> None:
    core = live_core([1])
    resp = core.create_topics(cm.CreateTopicsRequest(topics=[topic("huge", INT32_MAX)], validate_only=True))
    assert resp.topics[0].error_code == Errors.POLICY_VIOLATION
    untouched(core)


def test_the_records_of_one_creation_are_bounded_as_kafkas_batch() -> None:
    """10,000 partitions pass the partition bound, but with the topic's own record they are 10,001 records:
    Kafka's BoundedList refuses the operation (so does isrsim)."""
    core = live_core([1])
    resp = core.create_topics(cm.CreateTopicsRequest(topics=[topic("full", MAX_PARTITIONS_PER_BATCH)]))
    assert (resp.topics[0].error_code, resp.topics[0].error_message) == (
        Errors.POLICY_VIOLATION,
        EXCESSIVE_BATCH_MESSAGE,
    )
    untouched(core)
    # a config is a record too
    one_config = topic("cfg", MAX_RECORDS_PER_USER_OP - 1, configs={"min.insync.replicas": "1"})
    resp = core.create_topics(cm.CreateTopicsRequest(topics=[one_config]))
    assert resp.topics[0].error_message == EXCESSIVE_BATCH_MESSAGE
    # topics refused on their own add no records
    core.state.topics["exists"] = TopicState("exists", {0: PartitionState([1], 1, 0, [1])})
    resp = core.create_topics(
        cm.CreateTopicsRequest(topics=[topic("ok", MAX_RECORDS_PER_USER_OP - 1), topic("exists", 1)])
    )
    assert [(t.name, t.error_code) for t in resp.topics] == [
        ("ok", 0),
        ("exists", Errors.TOPIC_ALREADY_EXISTS),
    ]
    assert len(core.state.topics["ok"].partitions) == MAX_RECORDS_PER_USER_OP - 1


def test_topics_of_one_request_see_each_other() -> None:
    """Checks are made as if the earlier topics of the request were created: a name colliding with one of
    them is refused, as when each topic was created in turn."""
    core = live_core([1])
    resp = core.create_topics(cm.CreateTopicsRequest(topics=[topic("a.b", 1), topic("a_b", 1)]))
    assert [t.error_code for t in resp.topics] == [0, Errors.INVALID_TOPIC_EXCEPTION]
    assert set(core.state.topics) == {"a.b"}


def test_replication_factor_above_the_live_brokers_is_refused_before_assigning() -> None:
    core = live_core([1, 2, 3])
    got = create_topic(core, "rf", 9999, 4)
    assert got.error_code == Errors.INVALID_REPLICATION_FACTOR
    assert got.error_message == (
        "Unable to replicate the partition 4 time(s): The target replication factor of 4 cannot be reached "
        "because only 3 broker(s) are registered, unfenced and not shutting down: [1, 2, 3]."
    )
    untouched(core)


# ------------------------------------------------------------------------------------ CreatePartitions


def test_create_partitions_to_int32_max_is_refused_at_once() -> None:
    core = live_core([1, 2, 3])
    assert create_topic(core, "t", 3, 3).error_code == 0
    core.drain()
    started = time.perf_counter()
    resp = core.create_partitions(
        cm.CreatePartitionsRequest(
            topics=[
                cm.CreatePartitionsTopic(name="t", count=INT32_MAX),
                cm.CreatePartitionsTopic(name="u", count=2),
            ]
        )
    )
    took = time.perf_counter() - started
    assert [(r.name, r.error_code, r.error_message) for r in resp.results] == [
        ("t", Errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE),
        ("u", Errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS_MESSAGE),
    ]
    assert len(core.state.topics["t"].partitions) == 3
    untouched(core)
    print(f"CreatePartitions to 2^31-1 refused in {took * 1000:.2f} ms")
    assert took < 0.5


def test_create_partitions_up_to_the_bound_succeeds() -> None:
    core = live_core([1, 2])
    assert create_topic(core, "t", 1, 2).error_code == 0
    resp = core.create_partitions(
        cm.CreatePartitionsRequest(
            topics=[cm.CreatePartitionsTopic(name="t", count=1 + MAX_PARTITIONS_PER_BATCH)]
        )
    )
    assert resp.results[0].error_code == 0
    assert len(core.state.topics["t"].partitions) == 1 + MAX_PARTITIONS_PER_BATCH


def test_create_partitions_replication_factor_above_the_live_brokers() -> None:
    core = live_core([1, 2, 3])
    assert create_topic(core, "t", 1, 3).error_code == 0
    core.heartbeat(
        cm.BrokerHeartbeatRequest(broker_id=3, broker_epoch=core.state.brokers[3].epoch, want_fence=True), 0
    )
    resp = core.create_partitions(
        cm.CreatePartitionsRequest(topics=[cm.CreatePartitionsTopic(name="t", count=5)])
    )
    assert (resp.results[0].error_code, resp.results[0].error_message) == (
        Errors.INVALID_REPLICATION_FACTOR,
        "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered, "
        "unfenced and not shutting down: [1, 2].",
    )


# ------------------------------------------------------------------------------------ DeleteTopics


def test_delete_topics_deletes_at_most_the_bound() -> None:
    core = live_core([1])
    for i in range(MAX_RECORDS_PER_USER_OP + 2):
        core.state.topics[f"t{i}"] = TopicState(f"t{i}", {0: PartitionState([1], 1, 0, [1])})
    names = [f"t{i}" for i in range(MAX_RECORDS_PER_USER_OP + 2)] + ["missing"]
    resp = core.delete_topics(cm.DeleteTopicsRequest(topic_names=names))
    errors = {r.name: r.error_code for r in resp.responses}
    assert sum(1 for e in errors.values() if e == 0) == MAX_RECORDS_PER_USER_OP
    assert [errors[f"t{MAX_RECORDS_PER_USER_OP + i}"] for i in range(2)] == [Errors.UNKNOWN_SERVER_ERROR] * 2
    assert errors["missing"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert set(core.state.topics) == {f"t{MAX_RECORDS_PER_USER_OP}", f"t{MAX_RECORDS_PER_USER_OP + 1}"}


# ------------------------------------------------------------------------------------ ACLs, SCRAM


def test_create_acls_past_the_bound_creates_none() -> None:
    control = SecurityControl(SecurityMetadata())
    creations = [creation(name=f"t{i}") for i in range(MAX_RECORDS_PER_USER_OP + 1)]
    creations.append(creation(name=""))  # invalid on its own: keeps its own answer
    resp, changed = control.create_acls(sm.CreateAclsRequest(creations=creations))
    assert not changed and control.metadata.acls == set() and control.metadata.version == 0
    assert {(r.error_code, r.error_message) for r in resp.results[:-1]} == {
        (Errors.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE)
    }
    assert resp.results[-1].error_code == Errors.INVALID_REQUEST
    # at the bound they are all created
    resp, changed = control.create_acls(sm.CreateAclsRequest(creations=creations[:MAX_RECORDS_PER_USER_OP]))
    assert changed and len(control.metadata.acls) == MAX_RECORDS_PER_USER_OP


def test_delete_acls_removes_at_most_the_bound() -> None:
    control = SecurityControl(SecurityMetadata())
    control.create_acls(
        sm.CreateAclsRequest(creations=[creation(name=f"t{i}") for i in range(MAX_RECORDS_PER_USER_OP)])
    )
    control.create_acls(sm.CreateAclsRequest(creations=[creation("User:bob", name="x")]))
    bob = sm.DeleteAclsFilter(
        resource_type_filter=1, principal_filter="User:bob", operation=1, permission_type=1
    )
    everyone = sm.DeleteAclsFilter(resource_type_filter=1, operation=1, permission_type=1)
    resp, changed = control.delete_acls(sm.DeleteAclsRequest(filters=[bob, everyone]))
    assert changed
    assert [(r.error_code, len(r.matching_acls)) for r in resp.filter_results] == [
        (0, 1),
        (Errors.UNKNOWN_SERVER_ERROR, 0),
    ]
    assert resp.filter_results[1].error_message == (
        f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single delete operation."
    )
    assert len(control.metadata.acls) == MAX_RECORDS_PER_USER_OP


def test_alter_scram_credentials_past_the_bound_changes_none() -> None:
    control = SecurityControl(SecurityMetadata())
    one = upsertion("alice", "pw")
    many = [
        sm.ScramCredentialUpsertion(**{**_fields(one), "name": f"u{i}"})
        for i in range(MAX_RECORDS_PER_USER_OP + 1)
    ]
    resp, changed = control.alter_scram_credentials(sm.AlterUserScramCredentialsRequest(upsertions=many))
    assert not changed and len(control.metadata.credentials) == 0
    assert len(resp.results) == MAX_RECORDS_PER_USER_OP + 1
    assert {(r.error_code, r.error_message) for r in resp.results} == {
        (Errors.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE)
    }


def _fields(u: sm.ScramCredentialUpsertion) -> dict[str, object]:
    return {
        "name": u.name,
        "mechanism": u.mechanism,
        "iterations": u.iterations,
        "salt": u.salt,
        "salted_password": u.salted_password,
    }


# ------------------------------------------------------------------------------------ a quorum's state record


def _record_bytes(core: ControllerCore) -> int:
    return len(encode_record("ControllerState", decisions=["state"], state=core.state.to_json()))


def test_the_estimate_of_new_partitions_is_an_upper_bound() -> None:
    core = live_core([1, 2, 3])
    before = _record_bytes(core)
    assert create_topic(core, "t", 5000, 3, {"min.insync.replicas": "2"}).error_code == 0
    grown = _record_bytes(core) - before
    estimate = new_topic_bytes("t", {"min.insync.replicas": "2"}) + new_partitions_bytes(5000, 3, 3)
    assert grown <= estimate <= 2 * grown


def test_a_quorum_state_record_never_grows_past_its_bound() -> None:
    core = live_core([1, 2, 3])
    core.state_record_bytes = METADATA_STATE_MAX_BYTES - new_partitions_bytes(100, 3, 3)
    got = create_topic(core, "t", 9999, 3)
    assert got.error_code == Errors.POLICY_VIOLATION
    assert (got.error_message or "").startswith(
        EXCESSIVE_BATCH_MESSAGE + " The cluster's metadata would take "
    )
    untouched(core)
    assert create_topic(core, "small", 10, 3).error_code == 0
    # CreatePartitions alike
    resp = core.create_partitions(
        cm.CreatePartitionsRequest(topics=[cm.CreatePartitionsTopic(name="small", count=5000)])
    )
    assert resp.results[0].error_code == Errors.POLICY_VIOLATION
    assert len(core.state.topics["small"].partitions) == 10
    # a single controller (no quorum) writes its state to a file: no such bound
    core.state_record_bytes = None
    assert create_topic(core, "t", 9999, 3).error_code == 0
