"""Kafka's binary encoding (protocol/kafka_codec.py): the same bodies as msgpack, every version."""

from __future__ import annotations

import dataclasses
import struct
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import kafka_codec as kc
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.api_specs import API_SPECS, REQUEST_TYPES, RESPONSE_TYPES, SPECS, api_versions
from protocol.errors import Errors
from protocol.framing import InvalidFrame, RequestHeader
from protocol.schema import from_body

BODY_TYPES = {int(k): v for k, v in REQUEST_TYPES.items()}
KAFKA_VERSIONS = api_versions(API_SPECS, kafka=True)

PRODUCE = {
    "transactional_id": None,
    "acks": -1,
    "timeout_ms": 1500,
    "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": b"\x00batch-bytes"}]}],
}
FETCH = {
    "replica_id": -1,
    "max_wait_ms": 500,
    "min_bytes": 1,
    "max_bytes": 1 << 20,
    "isolation_level": 1,
    "session_id": 0,
    "session_epoch": -1,
    "topics": [
        {
            "topic": "t",
            "partitions": [
                {
                    "partition": 0,
                    "current_leader_epoch": 4,
                    "fetch_offset": 17,
                    "log_start_offset": -1,
                    "partition_max_bytes": 65536,
                }
            ],
        }
    ],
    "forgotten_topics_data": [],
}
METADATA_RESPONSE = {
    "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092}],
    "controller_id": 1,
    "topics": [
        {
            "error_code": 0,
            "name": "t",
            "partitions": [
                {
                    "error_code": 0,
                    "partition_index": 0,
                    "leader_id": 1,
                    "leader_epoch": 3,
                    "replica_nodes": [1, 2],
                    "isr_nodes": [1],
                    "offline_replicas": [2],
                }
            ],
        }
    ],
}


def decode(frame: bytes) -> kc.KafkaRequest:
    assert kc.is_kafka_frame(frame[4:])
    return kc.decode_request(frame[4:], BODY_TYPES)


def in_scope() -> list[tuple[ApiKeys, int, int]]:
    return [(ApiKeys(key), low, high) for key, (low, high) in KAFKA_VERSIONS.items()]


def test_every_advertised_version_is_described_by_the_library() -> None:
    for key, (_low, high) in KAFKA_VERSIONS.items():
        versions = kc.schema_versions(key)
        assert versions is not None, key
        assert high <= versions[1], (key, versions)


def _missing_names(cls: type, kstruct: Any, versions: range, path: str = "") -> list[str]:
    """Fields of ``cls`` that no version in ``versions`` of Kafka's struct has (a body holds the fields of
    every version served: the group APIs changed shape across theirs)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        kfield = kstruct.fields.get(f.name)
        if kfield is None or not any(kfield.for_version_q(v) for v in versions):
            out.append(path + f.name)
            continue
        _, sub = kc._kind(hints[f.name])
        if sub is not None and (kfield.is_struct() or kfield.is_struct_array()):
            out += _missing_names(sub, kfield, versions, f"{path}{f.name}.")
    return out


# docs/protocol.md fields that Kafka's newest version in range names otherwise (mapped by the codec) or lacks.
KNOWN_DIFFERENCES = {
    (ApiKeys.DELETE_TOPICS, "request"): ["topic_names"],  # v6: topics[{name, topic_id}]
    (ApiKeys.DESCRIBE_CONFIGS, "response"): ["results.configs.is_default"],  # v0 only in Kafka
    (ApiKeys.DESCRIBE_CLUSTER, "response"): ["brokers.fenced"],  # is_fenced, from v2
    (ApiKeys.METADATA, "request"): ["include_cluster_authorized_operations"],  # v8-10 only
}


@pytest.mark.parametrize(("api", "low", "high"), in_scope(), ids=lambda v: getattr(v, "name", str(v)))
def test_spec_field_names_are_kafkas(api: ApiKeys, low: int, high: int) -> None:
    """The mapping is by name: every body field is Kafka's JSON name (snake_case) at the newest version
    (for the group APIs: at one of the versions served)."""
    # Version 0 of a body is docs/protocol.md's, so the newest version is the reference for the others.
    served_alike = SPECS[api].versions == SPECS[api].kafka_versions  # the group APIs
    versions = range(low if served_alike else high, high + 1)
    req = _missing_names(REQUEST_TYPES[api], kc._REQUESTS[int(api)]._struct, versions)
    resp = _missing_names(RESPONSE_TYPES[api], kc._RESPONSES[int(api)]._struct, versions)
    assert req == KNOWN_DIFFERENCES.get((api, "request"), [])
    assert resp == KNOWN_DIFFERENCES.get((api, "response"), [])


@pytest.mark.parametrize("version", [3, 5, 7, 8, 9])
def test_produce_request_becomes_the_spec_body(version: int) -> None:
    req = decode(kc.encode_request(0, version, 41, "app", PRODUCE))
    assert req.header == RequestHeader(0, version, 41, "app")
    body = from_body(m.ProduceRequest, req.body)
    assert body.acks == -1 and body.timeout_ms == 1500
    assert body.topic_data[0].partition_data[0].records == b"\x00batch-bytes"  # opaque, as sent


@pytest.mark.parametrize("version", [4, 6, 7, 9, 11, 12])
def test_fetch_request_fields_absent_in_old_versions_take_spec_defaults(version: int) -> None:
    body = from_body(m.FetchRequest, decode(kc.encode_request(1, version, 1, None, FETCH)).body)
    part = body.topics[0].partitions[0]
    assert part.fetch_offset == 17 and body.isolation_level == 1
    # current_leader_epoch from v9, log_start_offset from v5, sessions from v7 (KIP-320, KIP-227)
    assert part.current_leader_epoch == (4 if version >= 9 else -1)
    assert (body.session_id, body.session_epoch) == (0, -1)


def test_metadata_request_all_topics_and_auto_creation_flag() -> None:
    body = decode(kc.encode_request(3, 12, 1, "c", {"topics": None, "allow_auto_topic_creation": False})).body
    req = from_body(m.MetadataRequest, body)
    assert req.topics is None and req.allow_auto_topic_creation is False
    # v1-v3 have no flag: Kafka allows auto-creation there
    body = decode(kc.encode_request(3, 1, 1, "c", {"topics": [{"name": "a"}]})).body
    req = from_body(m.MetadataRequest, body)
    assert [t.name for t in req.topics or []] == ["a"] and req.allow_auto_topic_creation is True


def test_name_value_arrays_become_maps_and_back() -> None:
    topic = {"name": "t", "num_partitions": 3, "replication_factor": 2, "assignments": []}
    frame = kc.encode_request(19, 7, 1, "c", {"topics": [{**topic, "configs": {"min.insync.replicas": "2"}}]})
    req = from_body(m.CreateTopicsRequest, decode(frame).body)
    assert req.topics[0].configs == {"min.insync.replicas": "2"}


def test_delete_topics_v6_topic_structs_become_names() -> None:
    frame = kc.encode_request(20, 6, 1, "c", {"topics": [{"name": "a"}, {"name": "b"}], "timeout_ms": 10})
    assert from_body(m.DeleteTopicsRequest, decode(frame).body).topic_names == ["a", "b"]


@pytest.mark.parametrize("version", [1, 4, 7, 9, 10, 12])
def test_metadata_response_at_each_version(version: int) -> None:
    prefix, payload = kc.encode_response_parts(RequestHeader(3, version, 99, "c"), {}, METADATA_RESPONSE)
    assert struct.unpack(">I", prefix)[0] == len(payload)
    correlation_id, body = kc.decode_response(3, version, payload)
    assert correlation_id == 99
    part = body["topics"][0]["partitions"][0]
    assert (part["leader_id"], part["isr_nodes"]) == (1, [1])
    assert part.get("leader_epoch", -1) == (3 if version >= 7 else -1)
    assert part.get("offline_replicas", []) == ([2] if version >= 5 else [])
    # flexible versions (9+) carry response header v1: an empty tagged-field section after the id
    assert (payload[4] == 0) == (version >= 9) or version < 9


def test_api_versions_header_is_always_v0() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}
    _, payload = kc.encode_response_parts(RequestHeader(18, 3, 5, "c"), {}, body)
    assert payload[:4] == struct.pack(">i", 5)
    assert payload[4:6] == b"\x00\x00"  # the error code follows the correlation id at once


def test_unsupported_api_versions_version_answers_v0_with_ranges() -> None:
    ranges = {0: (0, 9), 18: (0, 3)}
    _, payload = kc.encode_response_parts(
        RequestHeader(18, 7, 5, "c"),
        None,
        {"error_code": int(Errors.UNSUPPORTED_VERSION)},
        api_versions=ranges,
    )
    _, body = kc.decode_response(18, 7, payload)
    assert body["error_code"] == 35
    assert [(k["api_key"], k["min_version"], k["max_version"]) for k in body["api_keys"]] == [
        (0, 0, 9),
        (18, 0, 3),
    ]


def test_newer_api_versions_request_header_is_read() -> None:
    # A client newer than the schemas sends ApiVersions v9 with header v2: the correlation id is still read.
    frame = struct.pack(">hhih", 18, 9, 77, 3) + b"cli" + b"\x00" + b"\x00\x00"
    req = kc.decode_request(frame, BODY_TYPES)
    assert req.header == RequestHeader(18, 9, 77, "cli") and req.body is None


def test_error_only_body_is_spread_over_the_requests_partitions() -> None:
    frame = kc.encode_request(
        0, 2, 3, "old", {"acks": 1, "timeout_ms": 10, "topic_data": PRODUCE["topic_data"]}
    )
    req = decode(frame)
    _, payload = kc.encode_response_parts(
        req.header, req.body, {"error_code": 35, "error_message": "too old"}
    )
    _, body = kc.decode_response(0, 2, payload)
    part = body["responses"][0]["partition_responses"][0]
    assert body["responses"][0]["name"] == "t"
    assert (part["index"], part["error_code"], part["base_offset"]) == (2, 35, -1)


def test_unknown_api_gets_header_and_error_code() -> None:
    frame = struct.pack(">hhih", 250, 0, 12, -1)
    req = kc.decode_request(frame, BODY_TYPES)
    assert req.header.api_key == 250 and req.body is None
    _, payload = kc.encode_response_parts(req.header, None, {"error_code": 35, "error_message": "unknown"})
    assert payload == struct.pack(">ih", 12, 35)


@pytest.mark.parametrize("frame", [b"\x00", b"\x00\x03\x00", struct.pack(">hhih", 3, 1, 1, 50) + b"short"])
def test_malformed_header_is_an_invalid_frame(frame: bytes) -> None:
    with pytest.raises(InvalidFrame):
        kc.decode_request(frame, BODY_TYPES)


def test_truncated_body_is_reported_not_raised() -> None:
    frame = kc.encode_request(0, 9, 1, "c", PRODUCE)[4:]
    req = kc.decode_request(frame[:-5], BODY_TYPES)
    assert req.body is None and req.error


@settings(max_examples=300, deadline=None)
@given(
    api_key=st.sampled_from([*KAFKA_VERSIONS, 4, 250]),
    version=st.integers(0, 20),
    tail=st.binary(max_size=200),
)
def test_no_bytes_after_a_header_raise_anything_but_invalid_frame(
    api_key: int, version: int, tail: bytes
) -> None:
    frame = struct.pack(">hhi", api_key, version, 1) + tail
    try:
        req = kc.decode_request(frame, BODY_TYPES)
    except InvalidFrame:
        return
    if req.body is not None:
        kc.encode_response_parts(req.header, req.body, {"error_code": 42, "error_message": "x"})


def test_header_v2_tagged_fields_are_skipped() -> None:
    body = kc.encode_request(3, 12, 1, "c", {"topics": [{"name": "t"}]})[4:]
    fixed, rest = body[:8], body[8:]
    # client_id "c" (int16 length), then the header's tagged fields: one tag (7) of 3 bytes, then the body
    assert rest[:4] == b"\x00\x01c\x00"
    frame = fixed + rest[:3] + b"\x01\x07\x03xyz" + rest[4:]
    req = kc.decode_request(frame, BODY_TYPES)
    assert req.header == RequestHeader(3, 12, 1, "c")
    assert from_body(m.MetadataRequest, req.body).topics[0].name == "t"  # type: ignore[index]


def test_null_client_id() -> None:
    req = decode(kc.encode_request(18, 0, 4, None, {}))
    assert req.header == RequestHeader(18, 0, 4, "")


def test_a_client_id_that_is_not_utf8_is_read_as_kafka_reads_it() -> None:
    # Kafka decodes the header's client_id as Java's String does: bad bytes become U+FFFD and the request
    # is served (it is not a malformed frame).
    frame = struct.pack(">hhih", 3, 1, 9, 4) + b"ab\xff\xfe" + b"\x00\x00\x00\x00"
    req = kc.decode_request(frame, BODY_TYPES)
    assert req.header == RequestHeader(3, 1, 9, "ab\ufffd\ufffd")
    assert req.body is not None and req.error is None
