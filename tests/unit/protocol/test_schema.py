from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.api_keys import ApiKeys
from protocol.api_specs import API_SPECS, REQUEST_TYPES, RESPONSE_TYPES
from protocol.errors import Errors, InvalidRequestError
from protocol.framing import pack
from protocol.messages import (
    CreateTopicsRequest,
    DescribeReplicaStateResponse,
    DescribeReplicaStateResponseFetchState,
    DescribeReplicaStateResponsePartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchResponseTopic,
    LeaderAndIsrRequest,
    MetadataRequest,
    ProduceRequest,
)
from protocol.schema import Int8, Int16, Int32, Int64, IntRange, from_body, to_body

ALL_TYPES = sorted({*REQUEST_TYPES.values(), *RESPONSE_TYPES.values()}, key=lambda c: c.__name__)


def strategy_for(tp: Any, meta: typing.Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Valid values of a schema type, honouring the field's constraints."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, rng = typing.get_args(tp)
        assert base is int and isinstance(rng, IntRange)
        if "choices" in meta:
            return st.sampled_from(meta["choices"])
        return st.integers(max(rng.lo, meta.get("min", rng.lo)), min(rng.hi, meta.get("max", rng.hi)))
    if tp is str:
        return st.sampled_from(meta["choices"]) if "choices" in meta else st.text(max_size=10)
    if tp is bool:
        return st.booleans()
    if tp is bytes:
        return st.binary(max_size=20)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return st.none() | strategy_for(inner, meta)
    if origin is list:
        return st.lists(strategy_for(typing.get_args(tp)[0], meta), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)
    assert isinstance(tp, type) and dataclasses.is_dataclass(tp), tp
    return message_strategy(tp)


def message_strategy(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return st.builds(
        cls, **{f.name: strategy_for(hints[f.name], f.metadata) for f in dataclasses.fields(cls)}
    )


def error_of(cls: type, body: Any) -> str:
    with pytest.raises(InvalidRequestError) as info:
        from_body(cls, body)
    assert info.value.error is Errors.INVALID_REQUEST
    return info.value.message


def fetch_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replica_id": -1,
        "max_wait_ms": 100,
        "min_bytes": 1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {"partition": p, "fetch_offset": 10 * p, "partition_max_bytes": 1024} for p in range(3)
                ],
            }
        ],
    }
    body.update(overrides)
    return body


def test_tables_cover_every_api() -> None:
    assert [s.key for s in API_SPECS] == sorted(ApiKeys)  # one spec per API, in key order
    assert set(REQUEST_TYPES) == set(RESPONSE_TYPES) == set(ApiKeys)
    # Version 0 everywhere but the consumer-group and transaction APIs, which serve Kafka's versions
    # (docs/clients.md).
    group_apis = {s.key for s in API_SPECS if s.versions != (0, 0)}
    assert group_apis == {
        ApiKeys.FIND_COORDINATOR,
        ApiKeys.JOIN_GROUP,
        ApiKeys.SYNC_GROUP,
        ApiKeys.HEARTBEAT,
        ApiKeys.LEAVE_GROUP,
        ApiKeys.OFFSET_COMMIT,
        ApiKeys.OFFSET_FETCH,
        ApiKeys.LIST_GROUPS,
        ApiKeys.DESCRIBE_GROUPS,
        ApiKeys.DELETE_GROUPS,
        ApiKeys.ADD_PARTITIONS_TO_TXN,
        ApiKeys.ADD_OFFSETS_TO_TXN,
        ApiKeys.END_TXN,
        ApiKeys.TXN_OFFSET_COMMIT,
        ApiKeys.LIST_TRANSACTIONS,
    }
    assert all(s.versions == s.kafka_versions for s in API_SPECS if s.key in group_apis)
    for key, cls in REQUEST_TYPES.items():
        assert cls.__name__.endswith("Request")
        assert RESPONSE_TYPES[key].__name__ == cls.__name__[: -len("Request")] + "Response"


@pytest.mark.parametrize("cls", ALL_TYPES, ids=lambda c: c.__name__)
# No per-example deadline (as tests/conftest.py's profile, said here too so that the file holds on its own):
# a class's first example builds its decoder and encoder (compiled once), and on busy shared cores that one
# example took 300 ms where the next took 20, which hypothesis reported as a flaky DeadlineExceeded.
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_message_round_trips(cls: type, data: st.DataObject) -> None:
    obj = data.draw(message_strategy(cls))
    body = to_body(obj)
    assert from_body(cls, body) == obj
    wire = msgpack.unpackb(pack(body), raw=False)
    assert from_body(cls, wire) == obj


def test_fetch_request_defaults_and_values() -> None:
    req = from_body(FetchRequest, fetch_body())
    assert (req.max_bytes, req.isolation_level, req.session_id, req.session_epoch) == (2**31 - 1, 0, 0, -1)
    assert req.forgotten_topics_data == []
    part = req.topics[0].partitions[2]
    assert (part.partition, part.fetch_offset, part.current_leader_epoch, part.log_start_offset) == (
        2,
        20,
        -1,
        -1,
    )


def test_missing_fields_name_the_path() -> None:
    body = fetch_body()
    del body["replica_id"]
    assert error_of(FetchRequest, body) == "missing field 'replica_id'"
    body = fetch_body()
    del body["topics"][0]["partitions"][2]["fetch_offset"]
    assert error_of(FetchRequest, body) == "missing field 'topics[0].partitions[2].fetch_offset'"


def test_wrong_types_name_the_path() -> None:
    body = fetch_body()
    body["topics"][0]["partitions"][2]["fetch_offset"] = "7"
    assert error_of(FetchRequest, body) == "topics[0].partitions[2].fetch_offset: expected int, got str"
    assert error_of(FetchRequest, fetch_body(topics={"t": 1})) == "topics: expected array, got dict"
    assert error_of(FetchRequest, fetch_body(topics=[3])) == "topics[0]: expected map, got int"
    assert error_of(FetchRequest, [1]) == "expected map, got list"
    assert error_of(FetchRequest, None) == "expected map, got nil"
    assert (
        error_of(MetadataRequest, {"topics": [{"name": b"t"}]}) == "topics[0].name: expected str, got bytes"
    )


def test_bool_is_not_int_and_int_is_not_bool() -> None:
    assert error_of(FetchRequest, fetch_body(min_bytes=True)) == "min_bytes: expected int, got bool"
    body = fetch_body()
    body["topics"][0]["partitions"][0]["partition"] = False
    assert error_of(FetchRequest, body) == "topics[0].partitions[0].partition: expected int, got bool"
    lai: dict[str, Any] = {"controller_id": 0, "controller_epoch": 1, "topic_states": [
        {"topic_name": "t", "partition_states": [{
            "partition_index": 0, "controller_epoch": 1, "leader": 1, "leader_epoch": 0,
            "isr": [1], "replicas": [1], "is_new": 1,
        }]},
    ]}  # fmt: skip
    assert (
        error_of(LeaderAndIsrRequest, lai)
        == "topic_states[0].partition_states[0].is_new: expected bool, got int"
    )
    lai["topic_states"][0]["partition_states"][0]["is_new"] = True
    lai["topic_states"][0]["partition_states"][0]["isr"] = [1, True]
    assert error_of(LeaderAndIsrRequest, lai) == (
        "topic_states[0].partition_states[0].isr[1]: expected int, got bool"
    )


def test_integer_ranges() -> None:
    assert (
        error_of(FetchRequest, fetch_body(replica_id=2**31)) == "replica_id: 2147483648 is out of int32 range"
    )
    assert from_body(FetchRequest, fetch_body(replica_id=-(2**31))).replica_id == -(2**31)
    assert (
        error_of(FetchRequest, fetch_body(isolation_level=2))
        == "isolation_level: must be one of [0, 1], got 2"
    )
    body = fetch_body()
    body["topics"][0]["partitions"][1]["fetch_offset"] = 2**63
    assert (
        error_of(FetchRequest, body)
        == "topics[0].partitions[1].fetch_offset: 9223372036854775808 is out of int64 range"
    )
    body["topics"][0]["partitions"][1]["fetch_offset"] = 2**63 - 1
    assert from_body(FetchRequest, body).topics[0].partitions[1].fetch_offset == 2**63 - 1


def test_non_negative_constraints() -> None:
    for name in ("max_wait_ms", "min_bytes", "max_bytes"):
        assert error_of(FetchRequest, fetch_body(**{name: -1})) == f"{name}: must be >= 0, got -1"
    body = fetch_body()
    body["topics"][0]["partitions"][0]["partition_max_bytes"] = -5
    assert error_of(FetchRequest, body) == "topics[0].partitions[0].partition_max_bytes: must be >= 0, got -5"
    body = fetch_body(forgotten_topics_data=[{"topic": "t", "partitions": [0, -1]}])
    assert error_of(FetchRequest, body) == "forgotten_topics_data[0].partitions[1]: must be >= 0, got -1"


def test_values_the_broker_answers_pass_the_schema() -> None:
    body = fetch_body(session_epoch=-7, session_id=-3)
    body["topics"][0]["partitions"][0].update(fetch_offset=-10, current_leader_epoch=-1)
    req = from_body(FetchRequest, body)
    assert req.topics[0].partitions[0].fetch_offset == -10
    produce = from_body(ProduceRequest, {"acks": 5, "timeout_ms": 0, "topic_data": []})
    assert produce.acks == 5 and produce.transactional_id is None
    assert error_of(ProduceRequest, {"acks": 2**15, "timeout_ms": 0, "topic_data": []}) == (
        "acks: 32768 is out of int16 range"
    )


def test_unknown_fields_are_ignored() -> None:
    body = fetch_body(rack_id="r1", future={"x": 1})
    body["topics"][0]["partitions"][0]["new_thing"] = [1, 2]
    assert from_body(FetchRequest, body) == from_body(FetchRequest, fetch_body())


def test_optional_list_and_nil() -> None:
    assert from_body(MetadataRequest, {}).topics is None
    assert from_body(MetadataRequest, {"topics": None}).topics is None
    assert from_body(MetadataRequest, {"topics": []}).topics == []
    assert error_of(MetadataRequest, {"topics": "all"}) == "topics: expected array, got str"


def test_choices_on_strings_and_nested_optional() -> None:
    part = {"topic": "t", "partition": 0, "role": "leader", "fetch_state": {"state": "sleeping"}}
    body = {"partitions": [part]}
    assert error_of(DescribeReplicaStateResponse, body) == (
        "partitions[0].fetch_state.state: must be one of ['truncating', 'fetching', 'delayed', 'failed'], "
        "got 'sleeping'"
    )
    part["fetch_state"] = {"state": "fetching", "fetch_offset": 5}
    resp = from_body(DescribeReplicaStateResponse, body)
    assert resp.partitions[0] == DescribeReplicaStateResponsePartition(
        topic="t", partition=0, role="leader",
        fetch_state=DescribeReplicaStateResponseFetchState(state="fetching", fetch_offset=5),
    )  # fmt: skip
    part["role"] = "observer"
    assert error_of(DescribeReplicaStateResponse, body).startswith("partitions[0].role: must be one of")


def test_string_maps() -> None:
    topic = {
        "name": "t",
        "num_partitions": 3,
        "replication_factor": 2,
        "configs": {"min.insync.replicas": "2"},
    }
    req = from_body(CreateTopicsRequest, {"topics": [topic]})
    assert req.topics[0].configs == {"min.insync.replicas": "2"} and req.timeout_ms == 60000
    topic["configs"] = {"min.insync.replicas": 2}
    assert error_of(CreateTopicsRequest, {"topics": [topic]}) == (
        "topics[0].configs.min.insync.replicas: expected str, got int"
    )
    topic["configs"] = [("a", "b")]
    assert error_of(CreateTopicsRequest, {"topics": [topic]}) == "topics[0].configs: expected map, got list"


def test_bytes_like_and_int_subclasses_are_normalised() -> None:
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": Errors.NOT_LEADER_OR_FOLLOWER, "records": bytearray(b"ab")},
        {"partition_index": 1, "records": memoryview(b"cd")},
    ]}]}  # fmt: skip
    resp = from_body(FetchResponse, body)
    first, second = resp.responses[0].partitions
    assert type(first.error_code) is int and first.error_code == 6
    assert type(first.records) is bytes and first.records == b"ab"
    assert second.records == b"cd" and second.high_watermark == -1
    assert error_of(FetchResponse, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": "text"}]}]}) == (
        "responses[0].partitions[0].records: expected bytes, got str"
    )  # fmt: skip


def test_tuples_are_accepted_as_arrays() -> None:
    req = from_body(MetadataRequest, {"topics": ({"name": "a"},)})
    assert req.topics is not None and req.topics[0].name == "a"


@dataclass(slots=True, kw_only=True)
class Sample:
    ratio: float
    tiny: Int8 = field(default=0, metadata={"min": -3, "max": 3})
    wide: int = 0
    small: Int16 = 0
    big: Int64 = 0
    ids: list[Int32] = field(default_factory=list)


def test_float_plain_int_and_max() -> None:
    assert from_body(Sample, {"ratio": 1}).ratio == 1.0
    assert type(from_body(Sample, {"ratio": 1}).ratio) is float
    assert error_of(Sample, {"ratio": "1"}) == "ratio: expected float, got str"
    assert error_of(Sample, {"ratio": True}) == "ratio: expected float, got bool"
    assert error_of(Sample, {"ratio": 0.5, "tiny": 4}) == "tiny: must be <= 3, got 4"
    assert error_of(Sample, {"ratio": 0.5, "tiny": 200}) == "tiny: 200 is out of int8 range"
    assert (
        error_of(Sample, {"ratio": 0.5, "wide": 2**63}) == "wide: 9223372036854775808 is out of int64 range"
    )
    assert error_of(Sample, {"ratio": 0.5, "ids": [1, "2"]}) == "ids[1]: expected int, got str"


def test_to_body_is_plain_and_keeps_bytes() -> None:
    resp = FetchResponse(
        session_id=9,
        responses=[
            FetchResponseTopic(
                topic="t", partitions=[FetchResponsePartition(partition_index=0, records=b"\x00")]
            )
        ],
    )
    body = to_body(resp)
    assert body == {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 9,
        "responses": [{"topic": "t", "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "records": b"\x00",
            "diverging_epoch": None,
        }]}],
    }  # fmt: skip
    assert type(body["responses"][0]) is dict
    assert msgpack.unpackb(pack(body), raw=False) == body
    plain = {"a": 1}
    assert to_body(plain) is plain
    with pytest.raises(TypeError):
        to_body(3)
    with pytest.raises(TypeError):
        to_body(FetchResponse)


def test_nested_optional_dataclass_to_body() -> None:
    part = DescribeReplicaStateResponsePartition(topic="t", partition=1, role="none")
    assert to_body(part)["fetch_state"] is None
    part.fetch_state = DescribeReplicaStateResponseFetchState(state="failed")
    assert to_body(part)["fetch_state"] == {"state": "failed", "fetch_offset": -1, "lag": -1}


@dataclass
class Unsupported:
    value: int | str


def test_unsupported_types_fail_loudly_every_time() -> None:
    for _ in range(2):  # a failed build leaves nothing half-made in the cache
        with pytest.raises(TypeError, match=r"only X \| None"):
            from_body(Unsupported, {"value": 1})
        with pytest.raises(TypeError):
            to_body(Unsupported(value=1))
