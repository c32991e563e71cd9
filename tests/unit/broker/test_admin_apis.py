"""A Kafka client's admin requests on a broker without sockets (broker/admin_apis.py): auto-creation on
METADATA, forwarding to the controller (a recording stand-in for its channel), validate_only,
DescribeCluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from broker.forwarding import ForwardCallback, ForwardingManager
from protocol import kafka_codec
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.api_specs import REQUEST_TYPES
from protocol.errors import Errors
from protocol.framing import decode_request, encode_request
from protocol.schema import to_body
from server.controller_channel import ControllerChannel
from server.request_channel import Request
from tests.unit.broker.broker_support import Broker, InMemoryConnection

BODY_TYPES = {int(k): v for k, v in REQUEST_TYPES.items()}


class RecordingForwarding(ForwardingManager):
    """Keeps what would go to the controller; a test answers it."""

    def __init__(self) -> None:
        super().__init__(1, cast(ControllerChannel, None))
        self.sent: list[tuple[ApiKeys, Any, ForwardCallback]] = []

    def forward(self, api_key: ApiKeys, body: Any, callback: ForwardCallback, *, timeout_s: float) -> None:
        self.sent.append((api_key, body, callback))


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    b = Broker(tmp_path)
    b.apis.admin.forwarding = RecordingForwarding()
    return b


def forwarding(b: Broker) -> RecordingForwarding:
    return cast(RecordingForwarding, b.apis.admin.forwarding)


def kafka_request(api_key: int, version: int, body: dict[str, Any]) -> Request:
    frame = kafka_codec.encode_request(api_key, version, 7, "unit", body)
    decoded = kafka_codec.decode_request(frame[4:], BODY_TYPES)
    assert decoded.body is not None
    request = Request(decoded.header, decoded.body, InMemoryConnection(), 0.0, len(frame))
    request.response_encoder = lambda r, b: kafka_codec.encode_response_parts(r.header, r.body, b)
    return request


def kafka_answer(request: Request) -> dict[str, Any]:
    assert request.response_parts is not None
    _, body = kafka_codec.decode_response(
        request.header.api_key, request.header.api_version, request.response_parts[1]
    )
    return body


async def metadata(b: Broker, names: list[str], *, allow: bool = True, version: int = 12) -> dict[str, Any]:
    request = kafka_request(
        3, version, {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": allow}
    )
    await b.apis.handle(request)
    return kafka_answer(request)


async def test_metadata_creates_an_unknown_topic_once(broker: Broker) -> None:
    answer = await metadata(broker, ["fresh", "bad name!", "__consumer_offsets"])
    errors = {t["name"]: t["error_code"] for t in answer["topics"]}
    assert errors == {
        "fresh": Errors.LEADER_NOT_AVAILABLE,  # being created: ask again
        "bad name!": Errors.INVALID_TOPIC_EXCEPTION,
        "__consumer_offsets": Errors.UNKNOWN_TOPIC_OR_PARTITION,  # made by its owner, not here
    }
    [(api, body, callback)] = forwarding(broker).sent
    assert api == ApiKeys.CREATE_TOPICS
    [topic] = body.topics
    # num.partitions 1; default.replication.factor -1: min(3, live brokers), one broker known here
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("fresh", 1, 1)
    await metadata(broker, ["fresh"])
    assert len(forwarding(broker).sent) == 1  # not asked again while the first is under way
    callback({"topics": [{"name": "fresh", "error_code": 0}]}, "")
    await metadata(broker, ["fresh"])
    assert len(forwarding(broker).sent) == 2  # still unknown to this broker after the answer: asked again


async def test_metadata_without_auto_creation(broker: Broker) -> None:
    answer = await metadata(broker, ["absent"], allow=False)
    assert answer["topics"][0]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    broker.apis.admin.auto_create.enable = False
    answer = await metadata(broker, ["absent"], allow=True)
    assert answer["topics"][0]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert forwarding(broker).sent == []


async def test_msgpack_metadata_never_creates(broker: Broker) -> None:
    frame = encode_request(
        ApiKeys.METADATA, 0, 1, "cli", to_body(m.MetadataRequest(topics=[m.MetadataRequestTopic(name="x")]))
    )
    header, body = decode_request(frame[4:])
    await broker.apis.handle(Request(header, body, InMemoryConnection(), 0.0, len(frame)))
    assert forwarding(broker).sent == []


async def test_kafka_metadata_names_this_broker_as_controller_and_the_cluster(broker: Broker) -> None:
    answer = await metadata(broker, [], version=12)
    assert answer["controller_id"] == broker.apis.broker_id
    assert answer["cluster_id"] == "isrsim"


async def test_create_topics_is_forwarded_and_answered_with_the_controllers_reply(broker: Broker) -> None:
    body = {
        "topics": [
            {"name": "a", "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": {}}
        ],
        "timeout_ms": 5000,
    }
    request = kafka_request(19, 7, body)
    await broker.apis.handle(request)
    assert not request.done
    [(api, forwarded, callback)] = forwarding(broker).sent
    assert api == ApiKeys.CREATE_TOPICS and forwarded.timeout_ms == 5000
    callback({"topics": [{"name": "a", "error_code": 36, "error_message": "Topic 'a' already exists."}]}, "")
    [topic] = kafka_answer(request)["topics"]
    assert (topic["name"], topic["error_code"], topic["error_message"]) == (
        "a",
        36,
        "Topic 'a' already exists.",
    )


async def test_create_topics_without_an_answer_times_out(broker: Broker) -> None:
    request = kafka_request(
        19,
        4,
        {
            "topics": [
                {"name": "a", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": {}}
            ]
        },
    )
    await broker.apis.handle(request)
    forwarding(broker).sent[0][2](None, "the controller did not answer CREATE_TOPICS in time")
    assert kafka_answer(request)["topics"][0]["error_code"] == Errors.REQUEST_TIMED_OUT


async def test_create_topics_validate_only_is_checked_by_the_controller(broker: Broker) -> None:
    """As Kafka's broker, validate_only goes to the controller with the rest (only it knows the registered
    brokers a replication factor is checked against); the answer is the controller's."""
    topics = [{"name": "ok", "num_partitions": 1, "replication_factor": 5, "assignments": [], "configs": {}}]
    request = kafka_request(19, 7, {"topics": topics, "validate_only": True})
    await broker.apis.handle(request)
    [(api, body, callback)] = forwarding(broker).sent
    assert api == ApiKeys.CREATE_TOPICS and body.validate_only
    callback(
        {
            "topics": [
                {"name": "ok", "error_code": int(Errors.INVALID_REPLICATION_FACTOR), "error_message": "5 > 3"}
            ]
        },
        "",
    )
    [answer] = kafka_answer(request)["topics"]
    assert (answer["name"], answer["error_code"]) == ("ok", Errors.INVALID_REPLICATION_FACTOR)


async def test_without_a_controller_create_topics_is_not_controller(broker: Broker) -> None:
    broker.apis.admin.forwarding = None
    request = kafka_request(20, 6, {"topics": [{"name": "a"}], "timeout_ms": 10})
    await broker.apis.handle(request)
    assert kafka_answer(request)["responses"][0]["error_code"] == Errors.NOT_CONTROLLER


async def test_describe_cluster_from_the_metadata_cache(broker: Broker) -> None:
    request = kafka_request(60, 1, {})
    await broker.apis.handle(request)
    answer = kafka_answer(request)
    assert answer["error_code"] == 0 and answer["cluster_id"] == "isrsim"
    assert [b["broker_id"] for b in answer["brokers"]] == [broker.apis.broker_id]


async def test_an_over_large_create_topics_is_refused_without_forwarding(broker: Broker) -> None:
    """The broker refuses what the controller would (docs/controller.md): more than 10,000 partitions in one
    CreateTopics, every topic answered POLICY_VIOLATION with Kafka's message; nothing is forwarded."""
    topics = [
        {
            "name": "huge",
            "num_partitions": 1_000_000,
            "replication_factor": 3,
            "assignments": [],
            "configs": {},
        },
        {"name": "small", "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": {}},
    ]
    request = kafka_request(19, 7, {"topics": topics, "timeout_ms": 5000})
    await broker.apis.handle(request)
    assert forwarding(broker).sent == []
    assert [(t["name"], t["error_code"], t["error_message"]) for t in kafka_answer(request)["topics"]] == [
        ("huge", Errors.POLICY_VIOLATION, "Excessively large number of partitions per request."),
        ("small", Errors.POLICY_VIOLATION, "Excessively large number of partitions per request."),
    ]


async def test_incremental_alter_configs_is_authorized_then_forwarded(broker: Broker) -> None:
    """AlterConfigs on each topic (else 29 for it) and on the cluster for a BROKER resource (else 31); the
    rest goes to the controller and its answer is merged with the refusals, in Kafka's encoding (v1)."""
    from server.auth_helper import AuthHelper
    from server.security.acl import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )
    from server.security.authorizer import StandardAuthorizer

    authz = StandardAuthorizer(super_users=set())
    authz.replace_acls(
        [
            AclBinding(
                ResourcePattern(ResourceType.TOPIC, "mine", PatternType.LITERAL),
                AccessControlEntry(
                    "User:ANONYMOUS", "*", AclOperation.ALTER_CONFIGS, AclPermissionType.ALLOW
                ),
            )
        ]
    )
    broker.apis.admin.auth = AuthHelper(authz)

    def resource(rtype: int, name: str) -> dict[str, Any]:
        return {
            "resource_type": rtype,
            "resource_name": name,
            "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}],
        }

    body = {
        "resources": [resource(2, "mine"), resource(2, "theirs"), resource(4, "1")],
        "validate_only": True,
    }
    request = kafka_request(44, 1, body)
    await broker.apis.handle(request)
    [(api, forwarded, callback)] = forwarding(broker).sent
    assert api == ApiKeys.INCREMENTAL_ALTER_CONFIGS and forwarded.validate_only
    assert [(r.resource_name, r.configs[0].value) for r in forwarded.resources] == [("mine", "1000")]
    callback({"responses": [{"error_code": 0, "resource_type": 2, "resource_name": "mine"}]}, "")
    answers = {r["resource_name"]: r["error_code"] for r in kafka_answer(request)["responses"]}
    assert answers == {"mine": 0, "theirs": 29, "1": 31}
