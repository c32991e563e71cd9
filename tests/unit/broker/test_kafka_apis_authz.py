"""``KafkaApis`` with the authorizer on: each request carries the principal its connection authenticated as
(set here directly on the connection, as the SASL layer sets it), and is answered as Kafka answers it:
CLUSTER_AUTHORIZATION_FAILED for a cluster action by someone who may not act as the cluster (and nothing
changes), TOPIC_AUTHORIZATION_FAILED per topic for produce, fetch, offsets; METADATA filtered. The issue's
three attacks are replayed against a real broker core: a STOP_REPLICA that deletes, a LEADER_AND_ISR with a
higher epoch, a FETCH claiming to be a follower."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from server.auth_helper import AuthHelper
from server.request_channel import Request
from server.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from server.security.authorizer import StandardAuthorizer
from server.security.credentials import CredentialStore, ScramCredential
from server.security.principal import ANONYMOUS, KafkaPrincipal
from server.security.security_metadata import BrokerSecurityMetadata, SecurityMetadata

from .broker_support import (
    TP,
    Broker,
    batch,
    fetch_request,
    make_request,
    produce_request,
    response,
    response_body,
)

ADMIN = KafkaPrincipal("User", "admin")  # in super.users, as the brokers' and controller's own user
ALICE = KafkaPrincipal("User", "alice")
FOLLOWER = 1


def allow(
    principal: str, op: AclOperation, name: str = "t", rt: ResourceType = ResourceType.TOPIC
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rt, name, PatternType.LITERAL),
        AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW),
    )


@pytest.fixture
def authz() -> StandardAuthorizer:
    return StandardAuthorizer(super_users={str(ADMIN)})


@pytest.fixture
def broker(tmp_path: Path, authz: StandardAuthorizer) -> Broker:
    b = Broker(tmp_path)
    b.apis.auth = AuthHelper(authz)
    # broker 0 leads t-0 with broker 1 in the ISR (as the controller would have said)
    b.leader_and_isr(0, 1, [0, 1], [0, 1])
    return b


async def handle(b: Broker, principal: KafkaPrincipal, api_key: ApiKeys, message: Any) -> Request:
    request = make_request(api_key, message)
    conn: Any = request.connection
    conn.principal = principal
    conn.address = "127.0.0.1"
    await b.apis.handle(request)
    return request


def partition_errors(resp: Any) -> dict[tuple[str, int], int]:
    return {(e.topic_name, e.partition_index): e.error_code for e in resp.partition_errors}


def leader_and_isr(leader: int, leader_epoch: int) -> m.LeaderAndIsrRequest:
    return m.LeaderAndIsrRequest(
        controller_id=9,
        controller_epoch=1,
        topic_states=[
            m.LeaderAndIsrRequestTopicState(
                topic_name="t",
                partition_states=[
                    m.LeaderAndIsrRequestPartitionState(
                        partition_index=0,
                        controller_epoch=1,
                        leader=leader,
                        leader_epoch=leader_epoch,
                        isr=[0, 1],
                        replicas=[0, 1],
                    )
                ],
            )
        ],
        live_leaders=[m.LeaderAndIsrRequestLiveLeader(broker_id=FOLLOWER, host_name="127.0.0.1", port=9001)],
    )


def stop_replica(delete: bool) -> m.StopReplicaRequest:
    return m.StopReplicaRequest(
        controller_id=9,
        controller_epoch=1,
        topic_states=[
            m.StopReplicaRequestTopicState(
                topic_name="t",
                partition_states=[
                    m.StopReplicaRequestPartitionState(
                        partition_index=0, leader_epoch=5, delete_partition=delete
                    )
                ],
            )
        ],
    )


def update_metadata(topics: list[str], security: Any = None) -> m.UpdateMetadataRequest:
    return m.UpdateMetadataRequest(
        controller_id=9,
        controller_epoch=1,
        topic_states=[
            m.UpdateMetadataRequestTopicState(
                topic_name=name,
                partition_states=[
                    m.UpdateMetadataRequestPartitionState(
                        partition_index=0, controller_epoch=1, leader=0, leader_epoch=1, isr=[0], replicas=[0]
                    )
                ],
            )
            for name in topics
        ],
        live_brokers=[m.UpdateMetadataRequestBroker(id=0, host="127.0.0.1", port=9000)],
        security=security,
    )


def produced(request: Request) -> m.ProduceResponsePartition:
    [topic] = response(request, m.ProduceResponse).responses
    [partition] = topic.partition_responses
    return partition


def fetched(request: Request) -> m.FetchResponsePartition:
    [topic] = response(request, m.FetchResponse).responses
    [partition] = topic.partitions
    return partition


# ------------------------------------------------------------------------------ the attacks


@pytest.mark.parametrize("who", [ANONYMOUS, ALICE])
async def test_stop_replica_with_delete_is_refused_and_nothing_is_deleted(
    broker: Broker, who: KafkaPrincipal, authz: StandardAuthorizer
) -> None:
    authz.replace_acls([allow(str(ALICE), AclOperation.ALL)])  # even ALL on the topic is not the cluster
    body = response_body(await handle(broker, who, ApiKeys.STOP_REPLICA, stop_replica(True)))
    assert body["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED == 31
    assert str(who) in body["error_message"] and "ClusterAction" in body["error_message"]
    assert (broker.log_dir / "t-0").is_dir()
    assert broker.rm.partitions[TP].is_leader


@pytest.mark.parametrize("who", [ANONYMOUS, ALICE])
async def test_leader_and_isr_with_a_higher_epoch_is_refused(broker: Broker, who: KafkaPrincipal) -> None:
    body = response_body(await handle(broker, who, ApiKeys.LEADER_AND_ISR, leader_and_isr(FOLLOWER, 2)))
    assert body["error_code"] == 31
    partition = broker.rm.partitions[TP]
    assert partition.is_leader and partition.leader_epoch == 1
    assert TP not in broker.fetchers.added


@pytest.mark.parametrize("who", [ANONYMOUS, ALICE])
async def test_fetch_claiming_to_be_a_follower_is_refused_and_acks_all_waits(
    broker: Broker, who: KafkaPrincipal, authz: StandardAuthorizer
) -> None:
    authz.replace_acls([allow(str(ALICE), AclOperation.ALL)])
    produce = await handle(broker, ADMIN, ApiKeys.PRODUCE, produce_request(-1, batch(3)))
    assert not produce.done
    body = response_body(await handle(broker, who, ApiKeys.FETCH, fetch_request(FOLLOWER, 3)))
    assert body["error_code"] == 31 and not body.get("responses")
    assert not produce.done  # the fake follower moved neither the follower's LEO nor the HW
    assert broker.rm.partitions[TP].high_watermark == 0
    # The real follower (authenticated as a super user) does.
    await handle(broker, ADMIN, ApiKeys.FETCH, fetch_request(FOLLOWER, 3))
    assert produced(produce).error_code == 0


async def test_a_user_with_cluster_action_may_act_as_the_cluster(
    broker: Broker, authz: StandardAuthorizer
) -> None:
    authz.replace_acls([allow(str(ALICE), AclOperation.CLUSTER_ACTION, CLUSTER_NAME, ResourceType.CLUSTER)])
    resp = response(
        await handle(broker, ALICE, ApiKeys.LEADER_AND_ISR, leader_and_isr(FOLLOWER, 2)),
        m.LeaderAndIsrResponse,
    )
    assert resp.error_code == 0 and partition_errors(resp) == {TP: 0}
    assert not broker.rm.partitions[TP].is_leader


@pytest.mark.parametrize("api", [ApiKeys.UPDATE_METADATA, ApiKeys.DESCRIBE_REPLICA_STATE])
async def test_other_cluster_apis_are_refused(broker: Broker, api: ApiKeys) -> None:
    message: Any = (
        update_metadata(["t"]) if api == ApiKeys.UPDATE_METADATA else m.DescribeReplicaStateRequest()
    )
    assert response_body(await handle(broker, ALICE, api, message))["error_code"] == 31
    assert response_body(await handle(broker, ADMIN, api, message))["error_code"] == 0


async def test_offset_for_leader_epoch(broker: Broker, authz: StandardAuthorizer) -> None:
    def request(replica_id: int) -> m.OffsetForLeaderEpochRequest:
        return m.OffsetForLeaderEpochRequest(
            replica_id=replica_id,
            topics=[
                m.OffsetForLeaderEpochRequestTopic(
                    topic="t",
                    partitions=[
                        m.OffsetForLeaderEpochRequestPartition(
                            partition=0, current_leader_epoch=-1, leader_epoch=1
                        )
                    ],
                )
            ],
        )

    def error(req: Request) -> int:
        return response(req, m.OffsetForLeaderEpochResponse).topics[0].partitions[0].error_code

    assert (
        response_body(await handle(broker, ALICE, ApiKeys.OFFSET_FOR_LEADER_EPOCH, request(FOLLOWER)))[
            "error_code"
        ]
        == 31
    )
    assert error(await handle(broker, ALICE, ApiKeys.OFFSET_FOR_LEADER_EPOCH, request(-1))) == 29
    authz.replace_acls([allow(str(ALICE), AclOperation.DESCRIBE)])
    assert error(await handle(broker, ALICE, ApiKeys.OFFSET_FOR_LEADER_EPOCH, request(-1))) == 0
    assert (
        response_body(await handle(broker, ALICE, ApiKeys.OFFSET_FOR_LEADER_EPOCH, request(FOLLOWER)))[
            "error_code"
        ]
        == 31
    )
    assert error(await handle(broker, ADMIN, ApiKeys.OFFSET_FOR_LEADER_EPOCH, request(FOLLOWER))) == 0


# ------------------------------------------------------------------------------ topics


async def test_produce_needs_write(broker: Broker, authz: StandardAuthorizer) -> None:
    authz.replace_acls([allow(str(ALICE), AclOperation.READ)])
    refused = produced(await handle(broker, ALICE, ApiKeys.PRODUCE, produce_request(1, batch(2))))
    assert refused.error_code == Errors.TOPIC_AUTHORIZATION_FAILED == 29
    assert refused.error_message is not None and "Write" in refused.error_message
    assert broker.rm.partitions[TP].log.log_end_offset == 0
    authz.replace_acls([allow(str(ALICE), AclOperation.WRITE)])
    ok = produced(await handle(broker, ALICE, ApiKeys.PRODUCE, produce_request(1, batch(2))))
    assert (ok.error_code, ok.base_offset) == (0, 0)


async def test_produce_to_two_topics_refuses_only_the_unauthorized_one(
    broker: Broker, authz: StandardAuthorizer
) -> None:
    authz.replace_acls([allow(str(ALICE), AclOperation.WRITE)])
    request = m.ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            m.ProduceRequestTopic(
                name=name, partition_data=[m.ProduceRequestPartition(index=0, records=batch(1))]
            )
            for name in ("t", "secret")
        ],
    )
    resp = response(await handle(broker, ALICE, ApiKeys.PRODUCE, request), m.ProduceResponse)
    assert {t.name: t.partition_responses[0].error_code for t in resp.responses} == {"t": 0, "secret": 29}


async def test_consumer_fetch_needs_read(broker: Broker, authz: StandardAuthorizer) -> None:
    authz.replace_acls([allow(str(ALICE), AclOperation.WRITE)])
    assert fetched(await handle(broker, ALICE, ApiKeys.FETCH, fetch_request(-1, 0))).error_code == 29
    authz.replace_acls([allow(str(ALICE), AclOperation.READ)])
    assert fetched(await handle(broker, ALICE, ApiKeys.FETCH, fetch_request(-1, 0))).error_code == 0


async def test_list_offsets_needs_describe(broker: Broker, authz: StandardAuthorizer) -> None:
    request = m.ListOffsetsRequest(
        replica_id=-1,
        topics=[
            m.ListOffsetsRequestTopic(
                name="t", partitions=[m.ListOffsetsRequestPartition(partition_index=0, timestamp=-1)]
            )
        ],
    )

    def error(req: Request) -> int:
        return response(req, m.ListOffsetsResponse).topics[0].partitions[0].error_code

    assert error(await handle(broker, ALICE, ApiKeys.LIST_OFFSETS, request)) == 29
    authz.replace_acls([allow(str(ALICE), AclOperation.WRITE)])  # WRITE implies DESCRIBE
    assert error(await handle(broker, ALICE, ApiKeys.LIST_OFFSETS, request)) == 0


async def test_metadata_lists_only_describable_topics(broker: Broker, authz: StandardAuthorizer) -> None:
    await handle(broker, ADMIN, ApiKeys.UPDATE_METADATA, update_metadata(["t", "secret"]))
    authz.replace_acls([allow(str(ALICE), AclOperation.READ)])
    every = response(
        await handle(broker, ALICE, ApiKeys.METADATA, m.MetadataRequest(topics=None)), m.MetadataResponse
    )
    assert [t.name for t in every.topics] == ["t"]
    named = response(
        await handle(
            broker,
            ALICE,
            ApiKeys.METADATA,
            m.MetadataRequest(topics=[m.MetadataRequestTopic(name=n) for n in ("t", "secret", "missing")]),
        ),
        m.MetadataResponse,
    )
    # secret exists, missing does not: both answered alike, so existence does not leak
    assert {t.name: (t.error_code, len(t.partitions)) for t in named.topics} == {
        "t": (0, 1),
        "secret": (29, 0),
        "missing": (29, 0),
    }
    admin = response(
        await handle(broker, ADMIN, ApiKeys.METADATA, m.MetadataRequest(topics=None)), m.MetadataResponse
    )
    assert [t.name for t in admin.topics] == ["secret", "t"]


async def test_allow_everyone_if_no_acl_found_opens_what_has_no_acl(broker: Broker) -> None:
    broker.apis.auth = AuthHelper(StandardAuthorizer(allow_everyone_if_no_acl_found=True))
    assert (
        produced(await handle(broker, ANONYMOUS, ApiKeys.PRODUCE, produce_request(1, batch(1)))).error_code
        == 0
    )


async def test_no_authorizer_allows_everything(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.leader_and_isr(0, 1, [0, 1], [0, 1])
    body = response_body(await handle(b, ANONYMOUS, ApiKeys.LEADER_AND_ISR, leader_and_isr(FOLLOWER, 2)))
    assert body["error_code"] == 0


# ------------------------------------------------------------------------------ the controller's copy


def security_copy(version: int, acls: list[AclBinding], users: dict[str, str]) -> Any:
    store = CredentialStore()
    for user, password in users.items():
        store.put(user, ScramCredential.from_password(password))
    return SecurityMetadata(version, set(acls), store).to_message()


async def test_update_metadata_carries_acls_and_credentials_kept_on_disk(
    broker: Broker, authz: StandardAuthorizer, tmp_path: Path
) -> None:
    directory = tmp_path / "data" / "security"
    store = CredentialStore()
    broker.apis.security_metadata = BrokerSecurityMetadata(directory, authz, store)
    copy = security_copy(3, [allow(str(ALICE), AclOperation.WRITE)], {"alice": "alice-secret"})
    # From someone who may not act as the cluster: refused, nothing taken.
    assert (
        response_body(await handle(broker, ALICE, ApiKeys.UPDATE_METADATA, update_metadata(["t"], copy)))[
            "error_code"
        ]
        == 31
    )
    assert store.get("alice") is None and not directory.exists()

    assert (
        response_body(await handle(broker, ADMIN, ApiKeys.UPDATE_METADATA, update_metadata(["t"], copy)))[
            "error_code"
        ]
        == 0
    )
    credential = store.get("alice")
    assert credential is not None and credential.matches_password("alice-secret")
    assert (
        produced(await handle(broker, ALICE, ApiKeys.PRODUCE, produce_request(1, batch(1)))).error_code == 0
    )
    for name in ("acls.json", "credentials.json"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
    assert b"alice-secret" not in (directory / "credentials.json").read_bytes()

    # A restarted broker takes the copy from disk before it hears from the controller.
    restarted_authz = StandardAuthorizer()
    restarted = BrokerSecurityMetadata(directory, restarted_authz, CredentialStore())
    restarted.load()
    assert restarted.version == 3
    assert restarted_authz.acls() == [allow(str(ALICE), AclOperation.WRITE)]
    assert restarted.credential_store.get("alice") == credential

    # A later version replaces the whole copy; the same version again is not re-applied.
    newer = security_copy(4, [], {})
    assert (
        response_body(await handle(broker, ADMIN, ApiKeys.UPDATE_METADATA, update_metadata(["t"], newer)))[
            "error_code"
        ]
        == 0
    )
    assert store.get("alice") is None
    assert (
        produced(await handle(broker, ALICE, ApiKeys.PRODUCE, produce_request(1, batch(1)))).error_code == 29
    )
    assert not broker.apis.security_metadata.apply(newer)


# ------------------------------------------------------------------------------ the helper itself


def test_denials_are_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    auth = AuthHelper(StandardAuthorizer(), "broker 0", clock=lambda: now[0])
    request = make_request(ApiKeys.PRODUCE, produce_request(1, batch(1)))
    conn: Any = request.connection
    conn.principal, conn.address = ALICE, "10.0.0.7"
    with caplog.at_level("INFO", logger="kafka.authorizer.logger"):
        for _ in range(5):
            assert not auth.authorize(request, AclOperation.WRITE, ResourceType.TOPIC, "t")
        now[0] += 11
        assert not auth.authorize(request, AclOperation.WRITE, ResourceType.TOPIC, "t")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "Principal = User:alice is Denied operation = Write from host = 10.0.0.7" in lines[0]
    assert "Topic:t" in lines[0] and "PRODUCE" in lines[0]
    assert "4 more like it not logged" in lines[1]


def test_net_faults_needs_alter_on_the_cluster(authz: StandardAuthorizer) -> None:
    auth = AuthHelper(authz)
    request = make_request(ApiKeys.NET_FAULTS, {"operation": "status"})
    conn: Any = request.connection
    conn.principal, conn.address = ALICE, "127.0.0.1"
    denied = auth.net_faults_check(request)
    assert denied is not None and "Alter" in denied and "User:alice" in denied
    authz.replace_acls([allow(str(ALICE), AclOperation.ALTER, CLUSTER_NAME, ResourceType.CLUSTER)])
    assert auth.net_faults_check(request) is None
    assert AuthHelper(None).net_faults_check(request) is None


def test_authorized_operations_are_the_supported_ones_allowed(
    authz: StandardAuthorizer, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's ``authorizedOperations``: the resource type's supported operations the principal may perform,
    bit N for operation code N; READ implies DESCRIBE; nothing logged for the denials; no authorizer: all."""
    auth = AuthHelper(authz)
    request = make_request(ApiKeys.METADATA, m.MetadataRequest(topics=None))
    conn: Any = request.connection
    conn.principal, conn.address = ALICE, "127.0.0.1"
    authz.replace_acls([allow(str(ALICE), AclOperation.READ)])
    with caplog.at_level("INFO", logger="kafka.authorizer.logger"):
        bits = auth.authorized_operations(request, ResourceType.TOPIC, "t")
    assert bits == (1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE)
    assert not caplog.records
    assert auth.authorized_operations(request, ResourceType.TOPIC, "other") == 0
    every_topic_op = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # READ .. ALTER_CONFIGS, not 9 or 12
    assert AuthHelper(None).authorized_operations(request, ResourceType.TOPIC, "t") == every_topic_op
    assert AuthHelper(None).authorized_operations(request, ResourceType.GROUP, "g") == sum(
        1 << op for op in (3, 6, 8)
    )


async def test_metadata_names_a_topics_authorized_operations_when_asked(
    broker: Broker, authz: StandardAuthorizer
) -> None:
    """Metadata v8+ with include_topic_authorized_operations, in Kafka's encoding: the principal's
    operations on each topic it may describe; not asked, Kafka's "not requested"."""
    from tests.unit.broker.test_admin_apis import kafka_answer, kafka_request

    await handle(broker, ADMIN, ApiKeys.UPDATE_METADATA, update_metadata(["t"]))
    authz.replace_acls([allow(str(ALICE), AclOperation.WRITE)])
    answers = []
    for asked in (True, False):
        request = kafka_request(
            3, 12, {"topics": [{"name": "t"}], "include_topic_authorized_operations": asked}
        )
        conn: Any = request.connection
        conn.principal, conn.address = ALICE, "127.0.0.1"
        await broker.apis.handle(request)
        [topic] = kafka_answer(request)["topics"]
        answers.append(topic["authorized_operations"])  # the library's name; the bit positions
    assert answers == [{int(AclOperation.WRITE), int(AclOperation.DESCRIBE)}, None]
