"""The one table of APIs (protocol/api_specs.py): its coherence, and the error response each spec spreads."""

from __future__ import annotations

from typing import Any

import pytest

from protocol import kafka_codec as kc
from protocol.api_keys import ApiKeys
from protocol.api_specs import API_SPECS, SPECS, Node, check_handlers, error_response, handled_by
from protocol.framing import RequestHeader
from server.security.acl import AclOperation

E, MSG = 41, "not the controller"


def test_every_spec_is_coherent() -> None:
    for s in API_SPECS:
        assert s.kafka_refused is None or s.kafka_versions is not None, s.name
        if s.kafka_versions is not None:
            schema = kc.schema_versions(s.key)
            assert schema is not None and s.kafka_versions[1] <= schema[1], s.name
        for serving in (s.broker, s.controller):
            if serving is not None and serving.cluster_operation is not None:
                assert serving.cluster_operation in AclOperation.__members__, s.name
    assert SPECS[ApiKeys.FETCH].controller is not None and SPECS[ApiKeys.FETCH].controller.quorum


def test_a_handler_set_must_match_the_specs() -> None:
    keys = handled_by(Node.BROKER)
    check_handlers(Node.BROKER, keys)
    with pytest.raises(ValueError, match=r"no handler for \['PRODUCE'\]"):
        check_handlers(Node.BROKER, keys - {ApiKeys.PRODUCE})
    with pytest.raises(ValueError, match=r"no spec for \['VOTE'\]"):
        check_handlers(Node.BROKER, {*keys, ApiKeys.VOTE})


# What a Kafka client's request body (as the codec decodes it) gets as an error-only answer, per API: the
# same bodies Kafka's getErrorResponse builds.
CASES: list[tuple[ApiKeys, dict[str, Any], dict[str, Any]]] = [
    (
        ApiKeys.PRODUCE,
        {"topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}, {"index": 3}]}]},
        {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {
                            "index": i,
                            "error_code": E,
                            "base_offset": -1,
                            "log_start_offset": -1,
                            "error_message": MSG,
                        }
                        for i in (0, 3)
                    ],
                }
            ]
        },
    ),
    (
        ApiKeys.FETCH,
        {"topics": [{"topic": "t", "partitions": [{"partition": 1}]}]},
        {
            "error_code": E,
            "error_message": MSG,
            "responses": [{"topic": "t", "partitions": [{"partition_index": 1, "error_code": E}]}],
        },
    ),
    (
        ApiKeys.LIST_OFFSETS,
        {"topics": [{"name": "t", "partitions": [{"partition_index": 2}]}]},
        {"topics": [{"name": "t", "partitions": [{"partition_index": 2, "error_code": E}]}]},
    ),
    (
        ApiKeys.OFFSET_FOR_LEADER_EPOCH,
        {"topics": [{"topic": "t", "partitions": [{"partition": 0}]}]},
        {"topics": [{"topic": "t", "partitions": [{"partition": 0, "error_code": E}]}]},
    ),
    (
        ApiKeys.METADATA,
        {"topics": [{"name": "a"}, {"name": "b"}]},
        {"topics": [{"name": "a", "error_code": E}, {"name": "b", "error_code": E}]},
    ),
    (
        ApiKeys.CREATE_TOPICS,
        {"topics": [{"name": "a", "num_partitions": 1}]},
        {"topics": [{"name": "a", "error_code": E, "error_message": MSG}]},
    ),
    (
        ApiKeys.CREATE_PARTITIONS,
        {"topics": [{"name": "a", "count": 3}]},
        {"results": [{"name": "a", "error_code": E, "error_message": MSG}]},
    ),
    (
        ApiKeys.DELETE_TOPICS,
        {"topic_names": ["a"], "topics": [{"name": "b", "topic_id": None}]},
        {"responses": [{"name": n, "error_code": E, "error_message": MSG} for n in ("a", "b")]},
    ),
    (
        ApiKeys.DESCRIBE_CONFIGS,
        {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}]},
        {"results": [{"error_code": E, "error_message": MSG, "resource_type": 2, "resource_name": "t"}]},
    ),
    (
        ApiKeys.OFFSET_COMMIT,
        {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": E}]}]},
    ),
    (
        ApiKeys.FIND_COORDINATOR,
        {"key": "", "coordinator_keys": ["g1", "g2"]},
        {
            "error_code": E,
            "error_message": MSG,
            "coordinators": [{"key": k, "error_code": E, "error_message": MSG} for k in ("g1", "g2")],
        },
    ),
    (
        ApiKeys.DESCRIBE_GROUPS,
        {"groups": ["g"]},
        {"groups": [{"group_id": "g", "error_code": E}]},
    ),
    *(
        (
            key,
            {"resources": [{"resource_type": 2, "resource_name": "t", "configs": []}]},
            {
                "responses": [
                    {"resource_name": "t", "error_code": E, "error_message": MSG, "resource_type": 2}
                ]
            },
        )
        for key in (ApiKeys.ALTER_CONFIGS, ApiKeys.INCREMENTAL_ALTER_CONFIGS)
    ),
    (
        ApiKeys.TXN_OFFSET_COMMIT,
        {
            "transactional_id": "x",
            "group_id": "g",
            "topics": [{"name": "t", "partitions": [{"partition_index": 1}]}],
        },
        {"topics": [{"name": "t", "partitions": [{"partition_index": 1, "error_code": E}]}]},
    ),
    (
        ApiKeys.DESCRIBE_TRANSACTIONS,
        {"transactional_ids": ["x", "y"]},
        {
            "transaction_states": [
                {"transactional_id": "x", "error_code": E},
                {"transactional_id": "y", "error_code": E},
            ]
        },
    ),
    (
        ApiKeys.DELETE_GROUPS,
        {"groups_names": ["g", "h"]},
        {"results": [{"group_id": "g", "error_code": E}, {"group_id": "h", "error_code": E}]},
    ),
    (
        ApiKeys.OFFSET_FETCH,
        {"groups": [{"group_id": "g", "topics": None}]},
        {"error_code": E, "error_message": MSG, "groups": [{"group_id": "g", "error_code": E}]},
    ),
    (
        ApiKeys.WRITE_TXN_MARKERS,
        {
            "markers": [
                {
                    "producer_id": 7,
                    "producer_epoch": 1,
                    "transaction_result": True,
                    "topics": [{"name": "t", "partition_indexes": [0, 2]}],
                    "coordinator_epoch": 3,
                }
            ]
        },
        {
            "markers": [
                {
                    "producer_id": 7,
                    "topics": [
                        {
                            "name": "t",
                            "partitions": [{"partition_index": i, "error_code": E} for i in (0, 2)],
                        }
                    ],
                }
            ]
        },
    ),
    (
        ApiKeys.DESCRIBE_PRODUCERS,
        {"topics": [{"name": "t", "partition_indexes": [1]}]},
        {
            "topics": [
                {
                    "name": "t",
                    "partitions": [{"partition_index": 1, "error_code": E, "error_message": MSG}],
                }
            ]
        },
    ),
    (
        ApiKeys.DELETE_RECORDS,
        {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 5}]}], "timeout_ms": 10},
        {
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "error_code": E, "low_watermark": -1}]}
            ]
        },
    ),
    (
        ApiKeys.CREATE_ACLS,
        {"creations": [{"principal": "User:a"}, {"principal": "User:b"}]},
        {
            "results": [
                {"creation": {"principal": p}, "error_code": E, "error_message": MSG}
                for p in ("User:a", "User:b")
            ]
        },
    ),
    (
        ApiKeys.DELETE_ACLS,
        {"filters": [{"principal_filter": None}]},
        {"filter_results": [{"filter": {"principal_filter": None}, "error_code": E, "error_message": MSG}]},
    ),
    # Everything else: the code at the top level only.
    (ApiKeys.HEARTBEAT, {"group_id": "g"}, {"error_code": E, "error_message": MSG}),
    (ApiKeys.LIST_GROUPS, {}, {"error_code": E, "error_message": MSG}),
    (ApiKeys.DESCRIBE_CLUSTER, {}, {"error_code": E, "error_message": MSG}),
]


@pytest.mark.parametrize(("api", "request_body", "expected"), CASES, ids=lambda v: getattr(v, "name", None))
def test_error_response_is_spread_as_kafka_does(
    api: ApiKeys, request_body: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert error_response(api, request_body, E, MSG) == expected


# APIs whose error answers reach no client (none: a refused DeleteGroups names each group, as Kafka's).
NOT_SPREAD_YET: set[ApiKeys] = set()


def test_every_served_kafka_version_encodes_its_error_response() -> None:
    """An error-only answer is written at every version of every API a client can reach, and at the newest
    version the code reaches the client (older ones may have nowhere to put it: OffsetFetch v1)."""
    for s in API_SPECS:
        if s.kafka_versions is None or s.key == ApiKeys.API_VERSIONS:
            continue
        body = next((req for api, req, _ in CASES if api == s.key), {})
        for version in range(s.kafka_versions[0], s.kafka_versions[1] + 1):
            header = RequestHeader(s.key, version, 5, "c")
            length, payload = kc.encode_response_parts(header, body, {"error_code": E, "error_message": MSG})
            assert int.from_bytes(length, "big") == len(payload), (s.name, version)
            _, decoded = kc.decode_response(s.key, version, payload)
            if version == s.kafka_versions[1]:
                assert (E in _codes(decoded)) == (s.key not in NOT_SPREAD_YET), (s.name, version, decoded)


def _codes(value: Any) -> set[int]:
    """Every error_code anywhere in a decoded response."""
    if isinstance(value, dict):
        own = {value["error_code"]} if "error_code" in value else set()
        return own.union(*(_codes(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_codes(v) for v in value))
    return set()
