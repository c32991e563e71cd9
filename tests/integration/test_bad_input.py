"""What a client sends can never crash a broker or damage its log (docs/protocol.md, Kafka's error codes).

One broker process serves the whole module. It leads ``t-0`` and ``t-1`` alone, plus ``h-0`` with a
follower (2) that never fetches, so ``h-0``'s high watermark stays at 0 while its log grows. Every test
takes a snapshot of the logs first (LEO, HW and the bytes), sends its bad input, and then proves on a NEW
connection that the broker still serves and that the logs are byte-for-byte what they were.
"""

from __future__ import annotations

import copy
import random
import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack
import pytest
import trio
from crc32c import crc32c

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.framing import encode_frame, encode_request
from protocol.record_codec import Record, encode_record, varint
from protocol.records import build_simple_batch, iter_batches
from tests.integration.harness import (
    BrokerLauncher,
    BrokerProcess,
    RawConnection,
    fetch_body,
    list_offset,
    read_partition,
    request,
)

pytestmark = pytest.mark.integration

MAX_REQUEST_BYTES = 200_000
MAX_MESSAGE_BYTES = 20_000
PARTITIONS = (("t", 0), ("t", 1), ("h", 0))


@pytest.fixture(scope="module")
def module_broker(module_launcher: BrokerLauncher) -> Iterator[BrokerProcess]:
    b = module_launcher.start(
        1,
        {
            "initial.leader.partitions": "t-0,t-1",
            "socket.request.max.bytes": str(MAX_REQUEST_BYTES),
            "message.max.bytes": str(MAX_MESSAGE_BYTES),
            "replica.lag.time.max.ms": "600000",  # the absent follower of h-0 stays in the ISR
        },
    )
    trio.run(_seed, b)
    yield b


async def _seed(b: BrokerProcess) -> None:
    resp = await request(b.host, b.port, ApiKeys.LEADER_AND_ISR, leader_and_isr("h", 0, [1, 2], [1, 2]))
    assert resp["error_code"] == 0 and resp["partition_errors"][0]["error_code"] == 0, resp
    for topic, partition in PARTITIONS:
        for i in range(3):
            part = await produce(
                b, topic, partition, [f"{topic}{partition}-{i}-{j}".encode() for j in range(5)]
            )
            assert part["error_code"] == 0, part


@pytest.fixture
async def intact(module_broker: BrokerProcess) -> AsyncIterator[Snapshot]:
    """Snapshot before the test; after it, the broker process must be alive, answer on a new connection,
    and hold the same logs (unless the test appended on purpose and said so via ``snapshot.appended``)."""
    broker = module_broker
    before = await snapshot(broker)
    yield before
    assert broker.is_running(), f"the broker died:\n{broker.stderr_tail()}"
    resp = await request(broker.host, broker.port, ApiKeys.API_VERSIONS, {})
    assert resp["error_code"] == 0
    after = await snapshot(broker)
    for tp in PARTITIONS:
        if tp in before.appended:
            assert after.data[tp].startswith(before.data[tp]) and after.leo[tp] > before.leo[tp]
        else:
            assert after.leo[tp] == before.leo[tp], f"{tp}: LEO changed"
            assert after.hw[tp] == before.hw[tp], f"{tp}: HW changed"
            assert after.data[tp] == before.data[tp], f"{tp}: log bytes changed"


@pytest.fixture
def broker(module_broker: BrokerProcess, intact: Snapshot) -> BrokerProcess:
    """The module's broker, checked by ``intact`` around every test that uses it. (An async autouse
    fixture would not be run by pytest-trio for tests that do not name it, so the check hangs off this.)"""
    return module_broker


# ---------------------------------------------------------------------------------------------- helpers


@dataclass
class Snapshot:
    leo: dict[tuple[str, int], int]
    hw: dict[tuple[str, int], int]
    data: dict[tuple[str, int], bytes]
    appended: set[tuple[str, int]]


async def snapshot(b: BrokerProcess) -> Snapshot:
    s = Snapshot({}, {}, {}, set())
    for topic, partition in PARTITIONS:
        s.leo[(topic, partition)] = await list_offset(b.host, b.port, topic, partition, replica_id=-2)
        s.hw[(topic, partition)] = await list_offset(b.host, b.port, topic, partition, replica_id=-1)
        # Replica 1 is the broker itself: a fetch "from a follower" reads up to the LEO, not the HW.
        s.data[(topic, partition)] = await read_partition(b.host, b.port, topic, partition, replica_id=1)
    return s


def leader_and_isr(topic: str, partition: int, replicas: list[int], isr: list[int], epoch: int = 1) -> Any:
    return {
        "controller_id": 9000,
        "controller_epoch": 1,
        "broker_epoch": -1,
        "topic_states": [
            {
                "topic_name": topic,
                "partition_states": [
                    {
                        "partition_index": partition,
                        "controller_epoch": 1,
                        "leader": 1,
                        "leader_epoch": epoch,
                        "isr": isr,
                        "partition_epoch": epoch,
                        "replicas": replicas,
                        "is_new": True,
                    }
                ],
            }
        ],
        "live_leaders": [],
    }


def produce_body(
    topic: str, partition: int, records: Any, acks: Any = 1, transactional_id: str | None = None
) -> dict[str, Any]:
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


async def produce(b: BrokerProcess, topic: str, partition: int, values: list[bytes]) -> dict[str, Any]:
    body = produce_body(topic, partition, build_simple_batch(values))
    resp = await request(b.host, b.port, ApiKeys.PRODUCE, body)
    part: dict[str, Any] = resp["responses"][0]["partition_responses"][0]
    return part


async def produce_raw(b: BrokerProcess, body: dict[str, Any]) -> dict[str, Any]:
    return await request(b.host, b.port, ApiKeys.PRODUCE, body)


def list_offsets_body(topic: str, partition: int, replica_id: int, timestamp: int) -> dict[str, Any]:
    return {
        "replica_id": replica_id,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}
                ],
            }
        ],
    }


async def expect_closed(b: BrokerProcess, data: bytes) -> None:
    """Sends ``data``; the broker must close the connection without answering."""
    async with RawConnection(b.host, b.port) as raw:
        await raw.send(data)
        assert await raw.wait_closed(5.0), "the broker kept the connection open"
        assert raw._decoder.buffered == 0, "the broker answered instead of closing"


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


VALID_HEADER = {"api_key": 18, "api_version": 0, "correlation_id": 7, "client_id": "x", "body": {}}


# ---------------------------------------------------------------------------------------------- framing


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\xc1", id="reserved-msgpack-byte"),
        pytest.param(b"\xde\xad\xbe\xef" * 8, id="garbage"),
        pytest.param(b"", id="empty-payload"),
        pytest.param(msgpack.packb(VALID_HEADER) + b"\x00", id="trailing-bytes"),
        pytest.param(b"\x85\xa7api_key", id="truncated-map"),
        pytest.param(b"\x91" * 100_000 + b"\xc0", id="deeply-nested"),
        pytest.param(b"\xa3\xff\xfe\xfd", id="invalid-utf8-str"),
    ],
)
async def test_malformed_frame_closes_the_connection(broker: BrokerProcess, payload: bytes) -> None:
    await expect_closed(broker, frame(payload))


async def test_oversized_length_prefix_closes_the_connection(broker: BrokerProcess) -> None:
    # Only the prefix is sent: the broker must not wait for (or buffer) the announced payload.
    await expect_closed(broker, struct.pack(">I", MAX_REQUEST_BYTES + 1))
    await expect_closed(broker, struct.pack(">I", 0xFFFFFFFF))


async def test_frame_at_the_size_limit_is_read(broker: BrokerProcess) -> None:
    header = msgpack.packb({**VALID_HEADER, "client_id": ""})
    pad = MAX_REQUEST_BYTES - len(header) - 5  # client_id as a str8/16/32 of exactly the right size
    payload = msgpack.packb({**VALID_HEADER, "client_id": "p" * pad})
    payload = msgpack.packb({**VALID_HEADER, "client_id": "p" * (pad - (len(payload) - MAX_REQUEST_BYTES))})
    assert len(payload) == MAX_REQUEST_BYTES
    async with RawConnection(broker.host, broker.port) as raw:
        await raw.send(frame(payload))
        [(cid, body)] = await raw.receive_responses(1)
    assert cid == 7 and body["error_code"] == 0


@pytest.mark.parametrize(
    "message",
    [
        pytest.param([18, 0, 7, "x", {}], id="header-not-a-map"),
        pytest.param(42, id="header-an-int"),
        pytest.param(
            {k: v for k, v in VALID_HEADER.items() if k != "correlation_id"}, id="no-correlation-id"
        ),
        pytest.param({**VALID_HEADER, "correlation_id": "7"}, id="correlation-id-str"),
        pytest.param({**VALID_HEADER, "correlation_id": 2**31}, id="correlation-id-out-of-int32"),
        pytest.param({k: v for k, v in VALID_HEADER.items() if k != "api_key"}, id="no-api-key"),
        pytest.param({**VALID_HEADER, "api_key": 18.0}, id="api-key-float"),
        pytest.param({**VALID_HEADER, "api_version": None}, id="api-version-nil"),
        pytest.param({**VALID_HEADER, "client_id": 5}, id="client-id-int"),
        pytest.param({k: v for k, v in VALID_HEADER.items() if k != "body"}, id="no-body"),
        pytest.param({**VALID_HEADER, "body": [1, 2]}, id="body-a-list"),
        pytest.param({1: 2}, id="int-map-key"),
    ],
)
async def test_bad_header_closes_the_connection(broker: BrokerProcess, message: Any) -> None:
    await expect_closed(broker, frame(msgpack.packb(message, use_bin_type=True, strict_types=False)))


async def test_requests_before_a_bad_frame_are_still_answered(broker: BrokerProcess) -> None:
    async with RawConnection(broker.host, broker.port) as raw:
        await raw.send(encode_request(ApiKeys.API_VERSIONS, 0, 1, "x", {}) + frame(b"\xc1"))
        [(cid, body)] = await raw.receive_responses(1)
        assert cid == 1 and body["error_code"] == 0
        assert await raw.wait_closed(5.0)


async def test_requests_before_end_of_stream_are_answered(broker: BrokerProcess) -> None:
    # A parked consumer FETCH (at the HW of h-0, waiting 200 ms) and a METADATA, then a half-close.
    async with RawConnection(broker.host, broker.port) as raw:
        body = fetch_body("h", 0, 0, replica_id=-1, max_wait_ms=200, min_bytes=1)
        await raw.send(
            encode_request(ApiKeys.FETCH, 0, 1, "x", body)
            + encode_request(ApiKeys.METADATA, 0, 2, "x", {"topics": None})
        )
        await raw.send_eof()
        responses = await raw.receive_responses(2)
        assert [cid for cid, _ in responses] == [1, 2]
        assert await raw.wait_closed(5.0)


async def test_half_sent_frame_then_disconnect(broker: BrokerProcess) -> None:
    data = encode_request(ApiKeys.PRODUCE, 0, 1, "x", produce_body("t", 0, build_simple_batch([b"half"])))
    async with RawConnection(broker.host, broker.port) as raw:
        await raw.send(data[: len(data) // 2])
    # The fixture checks that nothing of it was appended.


# ---------------------------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("api_key", "api_version"),
    [
        pytest.param(777, 0, id="unknown-api-key"),
        pytest.param(-1, 0, id="negative-api-key"),
        pytest.param(2**40, 0, id="huge-api-key"),
        pytest.param(ApiKeys.BROKER_HEARTBEAT, 0, id="controller-api-on-a-broker"),
        pytest.param(ApiKeys.PRODUCE, 9, id="unsupported-version"),
        pytest.param(ApiKeys.FETCH, -1, id="negative-version"),
    ],
)
async def test_unsupported_api_gets_error_35(broker: BrokerProcess, api_key: int, api_version: int) -> None:
    async with RawConnection(broker.host, broker.port) as raw:
        await raw.send(encode_frame({"api_key": api_key, "api_version": api_version, "correlation_id": 99,
                                     "client_id": "x", "body": {"anything": 1}}))  # fmt: skip
        [(cid, body)] = await raw.receive_responses(1)
        assert cid == 99
        assert body["error_code"] == Errors.UNSUPPORTED_VERSION == 35
        assert isinstance(body["error_message"], str) and body["error_message"]
        # The connection stays usable.
        await raw.send_request(ApiKeys.API_VERSIONS, {}, correlation_id=100)
        [(cid, body)] = await raw.receive_responses(1)
        assert cid == 100 and body["error_code"] == 0


async def test_api_versions_lists_the_broker_apis(broker: BrokerProcess) -> None:
    body = await request(broker.host, broker.port, ApiKeys.API_VERSIONS, {})
    keys = {k["api_key"] for k in body["api_keys"]}
    assert {0, 1, 2, 3, 4, 5, 6, 18, 23, 1000} <= keys
    # The admin APIs a broker forwards to the active controller are listed (KIP-590); the controller's
    # own broker-facing APIs are not.
    assert {ApiKeys.CREATE_TOPICS, ApiKeys.DELETE_TOPICS, ApiKeys.DESCRIBE_QUORUM} <= keys
    assert ApiKeys.BROKER_HEARTBEAT not in keys and ApiKeys.BROKER_REGISTRATION not in keys


# ---------------------------------------------------------------------------------------------- schema


def _fetch(**partition_fields: Any) -> dict[str, Any]:
    body = fetch_body("t", 0, 0, replica_id=-1)
    body["topics"][0]["partitions"][0].update(partition_fields)
    return body


@pytest.mark.parametrize(
    ("api_key", "body", "field"),
    [
        pytest.param(ApiKeys.FETCH, _fetch(fetch_offset="0"), "fetch_offset", id="fetch_offset-str"),
        pytest.param(ApiKeys.FETCH, _fetch(fetch_offset=True), "fetch_offset", id="fetch_offset-bool"),
        pytest.param(ApiKeys.FETCH, _fetch(fetch_offset=1.5), "fetch_offset", id="fetch_offset-float"),
        pytest.param(ApiKeys.FETCH, _fetch(partition_max_bytes=-1), "partition_max_bytes", id="negative-max"),
        pytest.param(ApiKeys.FETCH, _fetch(partition=2**31), "partition", id="partition-out-of-int32"),
        pytest.param(ApiKeys.FETCH, _fetch(partition=-1), "partition", id="negative-partition"),
        pytest.param(
            ApiKeys.FETCH,
            {k: v for k, v in _fetch().items() if k != "replica_id"},
            "replica_id",
            id="missing-replica_id",
        ),
        pytest.param(ApiKeys.FETCH, {**_fetch(), "max_wait_ms": -5}, "max_wait_ms", id="negative-max_wait"),
        pytest.param(ApiKeys.FETCH, {**_fetch(), "isolation_level": 3}, "isolation_level", id="isolation"),
        pytest.param(ApiKeys.FETCH, {**_fetch(), "topics": {"t": 0}}, "topics", id="topics-a-map"),
        pytest.param(ApiKeys.PRODUCE, produce_body("t", 0, b"", acks="1"), "acks", id="acks-str"),
        pytest.param(ApiKeys.PRODUCE, produce_body("t", 0, "abc"), "records", id="records-str"),
        pytest.param(ApiKeys.PRODUCE, produce_body("t", 0, None), "records", id="records-nil"),
        pytest.param(ApiKeys.PRODUCE, produce_body(b"t", 0, b""), "name", id="topic-name-bin"),
        pytest.param(
            ApiKeys.PRODUCE,
            {k: v for k, v in produce_body("t", 0, b"").items() if k != "topic_data"},
            "topic_data",
            id="missing-topic_data",
        ),
        pytest.param(
            ApiKeys.PRODUCE, {**produce_body("t", 0, b""), "timeout_ms": -1}, "timeout_ms", id="timeout"
        ),
        pytest.param(
            ApiKeys.LIST_OFFSETS,
            list_offsets_body("t", 0, -1, "latest"),
            "timestamp",
            id="list_offsets-timestamp-str",
        ),
        pytest.param(ApiKeys.METADATA, {"topics": ["t"]}, "topics", id="metadata-topics-strs"),
        pytest.param(
            ApiKeys.OFFSET_FOR_LEADER_EPOCH,
            {"replica_id": -1, "topics": [{"topic": "t", "partitions": [{"partition": 0}]}]},
            "leader_epoch",
            id="ofle-missing-leader_epoch",
        ),
        pytest.param(
            ApiKeys.LEADER_AND_ISR,
            {**leader_and_isr("t", 0, [1], [1]), "controller_epoch": "1"},
            "controller_epoch",
            id="leader_and_isr-epoch-str",
        ),
    ],
)
async def test_body_not_matching_the_schema_gets_error_42(
    broker: BrokerProcess, api_key: int, body: dict[str, Any], field: str
) -> None:
    resp = await request(broker.host, broker.port, api_key, body)
    assert resp["error_code"] == Errors.INVALID_REQUEST == 42, resp
    assert field in resp["error_message"], resp["error_message"]


async def test_invalid_request_message_names_the_path(broker: BrokerProcess) -> None:
    resp = await request(broker.host, broker.port, ApiKeys.FETCH, _fetch(fetch_offset="0"))
    assert resp["error_message"] == "topics[0].partitions[0].fetch_offset: expected int, got str"
    body = _fetch()
    del body["topics"][0]["partitions"][0]["fetch_offset"]
    resp = await request(broker.host, broker.port, ApiKeys.FETCH, body)
    assert resp["error_code"] == 42
    assert resp["error_message"] == "missing field 'topics[0].partitions[0].fetch_offset'"


# ---------------------------------------------------------------------------------------------- FETCH


async def _fetch_partition(b: BrokerProcess, body: dict[str, Any]) -> dict[str, Any]:
    resp = await request(b.host, b.port, ApiKeys.FETCH, body)
    assert resp["error_code"] == 0, resp
    part: dict[str, Any] = resp["responses"][0]["partitions"][0]
    return part


@pytest.mark.parametrize("replica_id", [-1, -2, 1])
async def test_fetch_offset_out_of_range(broker: BrokerProcess, intact: Snapshot, replica_id: int) -> None:
    leo = intact.leo[("t", 0)]
    for offset in (-1, -(2**63), leo + 1, 2**63 - 1):
        part = await _fetch_partition(broker, fetch_body("t", 0, offset, replica_id=replica_id))
        assert part["error_code"] == Errors.OFFSET_OUT_OF_RANGE == 1, (offset, part)
        assert part["records"] == b""
    # At the LEO itself there is simply nothing yet.
    part = await _fetch_partition(broker, fetch_body("t", 0, leo, replica_id=replica_id))
    assert part["error_code"] == 0 and part["records"] == b"" and part["high_watermark"] == leo


async def test_fetch_unknown_topic_or_partition(broker: BrokerProcess) -> None:
    for topic, partition in (("nosuch", 0), ("t", 7)):
        part = await _fetch_partition(broker, fetch_body(topic, partition, 0, replica_id=-1))
        assert part["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION == 3, part


async def test_consumer_fetch_stops_at_the_high_watermark(broker: BrokerProcess, intact: Snapshot) -> None:
    assert intact.hw[("h", 0)] == 0 < intact.leo[("h", 0)]
    part = await _fetch_partition(broker, fetch_body("h", 0, 0, replica_id=-1))
    assert part["error_code"] == 0 and part["records"] == b"" and part["high_watermark"] == 0


async def test_fetch_from_a_broker_that_is_not_a_replica(broker: BrokerProcess) -> None:
    part = await _fetch_partition(broker, fetch_body("h", 0, 0, replica_id=5))
    assert part["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER, part


# ---------------------------------------------------------------------------------------------- PRODUCE


def _batch(values: int = 5) -> bytearray:
    return bytearray(build_simple_batch([f"v{i}".encode() for i in range(values)]))


def _corrupt_cases() -> list[Any]:
    good = _batch()
    bad_crc = _batch()
    bad_crc[-3] ^= 0xFF
    too_long = _batch()
    struct.pack_into(">i", too_long, 8, len(too_long) - 12 + 100)
    too_short = _batch()
    struct.pack_into(">i", too_short, 8, len(too_short) - 12 - 10)
    below_minimum = _batch()
    struct.pack_into(">i", below_minimum, 8, 10)
    negative_length = _batch()
    struct.pack_into(">i", negative_length, 8, -1)
    magic_1 = _batch()
    magic_1[16] = 1  # the CRC does not cover the magic byte: only the magic check can catch this
    cases = [
        ("bad-crc", bad_crc),
        ("batch_length-too-long", too_long),
        ("batch_length-too-short", too_short),
        ("batch_length-below-minimum", below_minimum),
        ("batch_length-negative", negative_length),
        ("truncated-records", good[:-5]),
        ("truncated-header", good[:30]),
        ("wrong-magic", magic_1),
        ("empty-records", b""),
        ("good-then-bad-crc", good + bad_crc),
        ("good-then-partial", good + good[:20]),
    ]
    return [pytest.param(bytes(data), id=name) for name, data in cases]


def _rebuild(batch: bytearray, **fields: int) -> bytearray:
    """Change header fields (records_count, last_offset_delta, attributes, max_timestamp, producer_id) and
    recompute the CRC, so only what was changed is wrong: the lie a CRC cannot catch."""

    layout = {
        "attributes": (">h", 21),
        "last_offset_delta": (">i", 23),
        "max_timestamp": (">q", 35),
        "producer_id": (">q", 43),
        "records_count": (">i", 57),
    }
    for name, value in fields.items():
        fmt, at = layout[name]
        struct.pack_into(fmt, batch, at, value)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return batch


def _with_records(payload: bytes, count: int) -> bytearray:
    """A batch whose records are the bytes ``payload`` as given (well formed or not), header consistent with
    ``count`` records."""
    good = _batch(1)
    batch = bytearray(good[:61]) + payload
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    return _rebuild(batch, records_count=count, last_offset_delta=count - 1)


def _record(offset_delta: int, value: bytes = b"v") -> bytes:
    return encode_record(Record(offset_delta, 0, None, value))


def _invalid_record_cases() -> list[Any]:
    ok = _record(0)
    body = _record(1)[1:]
    length_lies = varint(len(body) + 1) + body + b"\x00"  # the record's length: one byte more than its fields
    negative_headers = b"\x00\x00\x02\x01\x02v\x03"  # headers_count -2
    negative_headers = varint(len(negative_headers)) + negative_headers
    cases: list[tuple[str, bytearray, int, list[int]]] = [
        # The input: two real records under a header claiming 2^31-1 of them.
        (
            "header-claims-2^31-1-records",
            _rebuild(_batch(2), records_count=2**31 - 1, last_offset_delta=2**31 - 2),
            87,
            [],
        ),
        ("zero-record-count", _rebuild(_batch(), records_count=0), 87, []),
        ("records_count-vs-last_offset_delta", _rebuild(_batch(), records_count=4), 87, []),
        ("fewer-records-than-counted", _rebuild(_batch(5), records_count=4, last_offset_delta=3), 87, []),
        ("codec-5", _rebuild(_batch(), attributes=5), 76, []),
        ("codec-7", _rebuild(_batch(), attributes=7), 76, []),
        ("gzip-bytes-that-are-not-gzip", _rebuild(_batch(), attributes=1), 2, []),
        ("zstd-bytes-that-are-not-zstd", _rebuild(_batch(), attributes=4), 2, []),
        ("transactional-without-producer-id", _rebuild(_batch(), attributes=0x10), 87, []),
        ("control", _rebuild(_batch(), attributes=0x20), 87, []),
        (
            "log-append-time-unset",  # Kafka names every record of the batch
            _rebuild(_batch(), attributes=0x08, max_timestamp=-1),
            32,
            [0, 1, 2, 3, 4],
        ),
        ("producer-id-without-sequence", _rebuild(_batch(), producer_id=7), 87, []),
        ("record-length-lies", _with_records(ok + length_lies, 2), 87, [1]),
        ("negative-headers-count", _with_records(negative_headers, 1), 87, [0]),
        ("bytes-after-the-records", _with_records(ok + b"\x00\x00", 1), 87, []),
    ]
    return [pytest.param(bytes(data), code, idx, id=name) for name, data, code, idx in cases]


def _accepted_cases() -> list[Any]:
    """Batches Kafka's LogValidator takes (fixing what it fixes) although they are not what a client should
    send: (batch, whether its ``max_timestamp`` must be fixed; every record of these is stamped with the
    batch's ``base_timestamp``, so the fixed value is that)."""
    skipping = _with_records(_record(0) + _record(2), 2)
    return [
        pytest.param(bytes(_rebuild(_batch(), max_timestamp=-1)), True, id="max_timestamp-unset"),
        pytest.param(bytes(_rebuild(_batch(), max_timestamp=2**40)), True, id="max_timestamp-lies"),
        pytest.param(bytes(_rebuild(_batch(), attributes=0x08)), False, id="log-append-time-on-create-time"),
        pytest.param(bytes(_rebuild(_batch(), attributes=0x100)), False, id="unknown-attribute-bit"),
        pytest.param(bytes(skipping), False, id="uncompressed-offset-delta-skips"),
    ]


@pytest.mark.parametrize(("records", "fixed"), _accepted_cases())
async def test_batch_kafka_accepts_is_appended_fixed_as_kafka_fixes_it(
    broker: BrokerProcess, intact: Snapshot, records: bytes, fixed: bool
) -> None:
    """SPEC §3: the leader never refuses what Kafka's LogValidator takes; it fixes ``max_timestamp`` (and the
    CRC) in place, and stores the rest as sent."""
    resp = await produce_raw(broker, produce_body("t", 0, records, acks=-1))
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 0 and part["base_offset"] == intact.leo[("t", 0)], part
    intact.appended.add(("t", 0))
    stored = await read_partition(broker.host, broker.port, "t", 0, start=part["base_offset"])
    [(position, header)] = [b for b in iter_batches(stored) if b[1].base_offset == part["base_offset"]]
    batch = stored[position : position + 12 + header.batch_length]
    assert struct.unpack_from(">I", batch, 17)[0] == crc32c(batch[21:]), "the stored CRC covers the fix"
    if fixed:
        assert header.max_timestamp == struct.unpack_from(">q", records, 27)[0]  # the base timestamp


@pytest.mark.parametrize("records", _corrupt_cases())
@pytest.mark.parametrize("acks", [1, -1])
async def test_corrupt_batch_is_rejected_and_nothing_appended(
    broker: BrokerProcess, records: bytes, acks: int
) -> None:
    resp = await produce_raw(broker, produce_body("t", 0, records, acks=acks))
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == Errors.CORRUPT_MESSAGE == 2, part
    assert part["base_offset"] == -1 and part["error_message"]


@pytest.mark.parametrize(("records", "code", "record_errors"), _invalid_record_cases())
async def test_batch_whose_content_lies_is_refused_as_log_validator_does(
    broker: BrokerProcess, records: bytes, code: int, record_errors: list[int]
) -> None:
    """CRC-valid batches whose header disagrees with their records, whose records are malformed, or whose
    attributes ask for what Kafka refuses: nothing is appended (``intact``), the answer is Kafka's
    (INVALID_RECORD 87, UNSUPPORTED_COMPRESSION_TYPE 76, CORRUPT_MESSAGE 2 for a stream that does not
    decompress, INVALID_TIMESTAMP 32), with a record error naming the bad record. (The request names a
    transactional id, so that a transactional batch reaches the log's validation.)"""
    resp = await produce_raw(broker, produce_body("t", 0, records, acks=-1, transactional_id="bad-input"))
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == code, part
    assert part["base_offset"] == -1 and part["error_message"].startswith("t-0: "), part
    assert "batch at position 0" in (part["record_errors"] or [{}])[0].get(
        "batch_index_error_message", ""
    ) or (part["error_message"].startswith("t-0: batch at position 0")), part
    assert [e["batch_index"] for e in part["record_errors"]] == record_errors, part
    assert all(e["batch_index_error_message"] for e in part["record_errors"])


async def test_one_bad_partition_does_not_stop_the_others(broker: BrokerProcess, intact: Snapshot) -> None:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [
            {
                "name": "t",
                "partition_data": [
                    {"index": 0, "records": b"\x00" * 70},
                    {"index": 1, "records": build_simple_batch([b"ok-1", b"ok-2"])},
                ],
            },
            {"name": "nosuch", "partition_data": [{"index": 0, "records": build_simple_batch([b"x"])}]},
        ],
    }
    resp = await produce_raw(broker, body)
    [t, nosuch] = resp["responses"]
    codes = {p["index"]: p for p in t["partition_responses"]}
    assert codes[0]["error_code"] == Errors.CORRUPT_MESSAGE
    assert codes[1]["error_code"] == 0 and codes[1]["base_offset"] == intact.leo[("t", 1)]
    assert nosuch["partition_responses"][0]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    intact.appended.add(("t", 1))


@pytest.mark.parametrize("acks", [2, -2, 100])
async def test_bad_acks_gets_invalid_required_acks(broker: BrokerProcess, acks: int) -> None:
    resp = await produce_raw(broker, produce_body("t", 0, build_simple_batch([b"x"]), acks=acks))
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == Errors.INVALID_REQUIRED_ACKS == 21, part


@pytest.mark.parametrize(("topic", "partition"), [("nosuch", 0), ("t", 2), ("../escape", 0), ("", 0)])
async def test_produce_to_unknown_topic_or_partition(
    broker: BrokerProcess, topic: str, partition: int
) -> None:
    resp = await produce_raw(broker, produce_body(topic, partition, build_simple_batch([b"x"])))
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION == 3, part
    assert not (broker.log_dir / f"{topic}-{partition}").exists()


async def test_batch_larger_than_message_max_bytes(broker: BrokerProcess) -> None:
    big = build_simple_batch([b"x" * 1000] * 25)
    assert MAX_MESSAGE_BYTES < len(big) < MAX_REQUEST_BYTES
    resp = await produce_raw(broker, produce_body("t", 0, big))
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == Errors.MESSAGE_TOO_LARGE == 10, part


async def test_batch_at_message_max_bytes_is_accepted(broker: BrokerProcess, intact: Snapshot) -> None:
    values = [b"x" * 1000] * 19
    batch = build_simple_batch(values)
    assert len(batch) <= MAX_MESSAGE_BYTES
    part = await produce(broker, "t", 0, values)
    assert part["error_code"] == 0 and part["base_offset"] == intact.leo[("t", 0)]
    intact.appended.add(("t", 0))


async def test_acks_0_with_bad_input_gets_no_response_and_the_connection_closed(
    broker: BrokerProcess, intact: Snapshot
) -> None:
    # Kafka answers an acks=0 PRODUCE with nothing, so a failed one closes the connection: the only way
    # the client learns of it. What was asked before it is still answered; the log is untouched.
    async with RawConnection(broker.host, broker.port) as raw:
        await raw.send(
            encode_request(ApiKeys.API_VERSIONS, 0, 1, "x", {})
            + encode_request(ApiKeys.PRODUCE, 0, 2, "x", produce_body("t", 0, b"\x00" * 80, acks=0))
        )
        [(cid, body)] = await raw.receive_responses(1)
        assert cid == 1 and body["error_code"] == 0
        assert await raw.wait_closed(5.0)


async def test_acks_0_that_succeeds_keeps_the_connection(broker: BrokerProcess, intact: Snapshot) -> None:
    batch = build_simple_batch([b"zero"])
    async with RawConnection(broker.host, broker.port) as raw:
        await raw.send(
            encode_request(ApiKeys.PRODUCE, 0, 1, "x", produce_body("t", 1, batch, acks=0))
            + encode_request(ApiKeys.API_VERSIONS, 0, 2, "x", {})
        )
        [(cid, body)] = await raw.receive_responses(1)
        assert cid == 2 and body["error_code"] == 0
    intact.appended.add(("t", 1))


# ---------------------------------------------------------------------------------------------- LIST_OFFSETS


async def test_list_offsets_latest_and_earliest_by_replica_id(
    broker: BrokerProcess, intact: Snapshot
) -> None:
    leo = intact.leo[("h", 0)]
    assert leo > 0
    expected = {
        (-1, -1): 0,  # consumer, latest: the HW
        (-2, -1): leo,  # debug, latest: the LEO
        (2, -1): leo,  # a broker (the follower), latest: the LEO
        (-1, -2): 0,  # earliest: the log start offset, for everyone
        (-2, -2): 0,
        (2, -2): 0,
    }
    for (replica_id, timestamp), offset in expected.items():
        resp = await request(
            broker.host, broker.port, ApiKeys.LIST_OFFSETS, list_offsets_body("h", 0, replica_id, timestamp)
        )
        part = resp["topics"][0]["partitions"][0]
        assert part["error_code"] == 0, (replica_id, timestamp, part)
        assert part["offset"] == offset, (replica_id, timestamp, part)
        assert part["leader_epoch"] == 1, (replica_id, timestamp, part)


async def test_list_offsets_errors(broker: BrokerProcess) -> None:
    async def code(topic: str, partition: int, timestamp: int = -1, epoch: int = -1) -> int:
        body = list_offsets_body(topic, partition, -1, timestamp)
        body["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
        resp = await request(broker.host, broker.port, ApiKeys.LIST_OFFSETS, body)
        return int(resp["topics"][0]["partitions"][0]["error_code"])

    assert await code("nosuch", 0) == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert await code("h", 3) == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert await code("h", 0, epoch=0) == Errors.FENCED_LEADER_EPOCH
    assert await code("h", 0, epoch=5) == Errors.UNKNOWN_LEADER_EPOCH
    assert await code("h", 0, epoch=1) == Errors.NONE


# ---------------------------------------------------------------------------------------------- pipelining


async def test_pipelined_requests_are_answered_in_order(broker: BrokerProcess, intact: Snapshot) -> None:
    """Hundreds of requests in one write, some answered by the socket server at once (unknown API), some
    parked (a consumer FETCH at the HW waits max_wait_ms), some never answered (acks=0): the responses
    come back in request order, each to its own correlation id."""
    frames: list[bytes] = []
    expected: list[tuple[int, str]] = []
    leo = intact.leo[("t", 1)]
    appended = 0
    for cid in range(400):
        kind = cid % 8
        if kind == 0:
            body = fetch_body("h", 0, 0, replica_id=-1, max_wait_ms=100, min_bytes=1)
            frames.append(encode_request(ApiKeys.FETCH, 0, cid, "p", body))
            expected.append((cid, "fetch"))
        elif kind == 1:
            frames.append(encode_request(777, 0, cid, "p", {}))
            expected.append((cid, "unsupported"))
        elif kind == 2:
            body = produce_body("t", 1, build_simple_batch([f"pipe-{cid}".encode()]))
            frames.append(encode_request(ApiKeys.PRODUCE, 0, cid, "p", body))
            expected.append((cid, f"produce@{leo + appended}"))
            appended += 1
        elif kind == 3:
            body = produce_body("t", 1, build_simple_batch([f"pipe-{cid}".encode()]), acks=0)
            frames.append(encode_request(ApiKeys.PRODUCE, 0, cid, "p", body))
            appended += 1  # no response
        elif kind == 4:
            frames.append(encode_request(ApiKeys.FETCH, 0, cid, "p", _fetch(fetch_offset="x")))
            expected.append((cid, "invalid"))
        elif kind == 5:
            frames.append(encode_request(ApiKeys.METADATA, 0, cid, "p", {"topics": None}))
            expected.append((cid, "metadata"))
        else:
            frames.append(
                encode_request(ApiKeys.LIST_OFFSETS, 0, cid, "p", list_offsets_body("t", 1, -2, -2))
            )
            expected.append((cid, "list_offsets"))
    async with RawConnection(broker.host, broker.port) as raw:
        await raw.send(b"".join(frames))
        responses = await raw.receive_responses(len(expected), timeout=30)
    assert [cid for cid, _ in responses] == [cid for cid, _ in expected]
    for (cid, body), (_, kind) in zip(responses, expected, strict=True):
        if kind == "fetch":
            assert body["error_code"] == 0 and body["responses"][0]["partitions"][0]["records"] == b""
        elif kind == "unsupported":
            assert body["error_code"] == 35
        elif kind.startswith("produce@"):
            part = body["responses"][0]["partition_responses"][0]
            assert part["error_code"] == 0
            assert part["base_offset"] == int(kind.split("@")[1]), (cid, part)
        elif kind == "invalid":
            assert body["error_code"] == 42
        elif kind == "metadata":
            assert {t["name"] for t in body["topics"]} >= {"t", "h"}
        else:
            assert body["topics"][0]["partitions"][0]["offset"] == 0
    after = await read_partition(broker.host, broker.port, "t", 1, replica_id=1)
    new = [h for _, h in iter_batches(after[len(intact.data[("t", 1)]) :])]
    assert len(new) == appended and new[0].base_offset == leo
    intact.appended.add(("t", 1))


async def test_many_connections_at_once(broker: BrokerProcess) -> None:
    async def one(i: int) -> None:
        resp = await request(
            broker.host, broker.port, ApiKeys.LIST_OFFSETS, list_offsets_body("t", 0, -2, -2)
        )
        assert resp["topics"][0]["partitions"][0]["offset"] == 0

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(one, i)


# ---------------------------------------------------------------------------------------------- controller


def _entries(b: BrokerProcess) -> set[str]:
    return {str(p.relative_to(b.data_dir)) for p in b.data_dir.rglob("*")}


@pytest.mark.parametrize("index", range(7))
async def test_leader_and_isr_refuses_invalid_topic_names(broker: BrokerProcess, index: int) -> None:
    topic = ["../escape", "a" * 250, "a/b", ".", "..", "", "tab\tname"][index]
    good = f"ok{index}"
    body = leader_and_isr(topic, 0, [1], [1])
    body["topic_states"].append(leader_and_isr(good, 0, [1], [1])["topic_states"][0])
    files_before = _entries(broker)
    resp = await request(broker.host, broker.port, ApiKeys.LEADER_AND_ISR, body)
    assert resp["error_code"] == 0, resp
    codes = {(p["topic_name"], p["partition_index"]): p["error_code"] for p in resp["partition_errors"]}
    assert codes == {(topic, 0): Errors.INVALID_TOPIC_EXCEPTION, (good, 0): 0}
    new = {e for e in _entries(broker) - files_before if not e.startswith(f"data/{good}-0")}
    assert new <= {"data/events.jsonl"}, new


async def test_stop_replica_never_deletes_outside_the_data_dir(broker: BrokerProcess) -> None:
    victim = broker.data_dir / "victim-0"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    body = {
        "controller_id": 9000,
        "controller_epoch": 1,
        "broker_epoch": -1,
        "topic_states": [
            {
                "topic_name": "../victim",
                "partition_states": [{"partition_index": 0, "leader_epoch": -2, "delete_partition": True}],
            }
        ],
    }
    resp = await request(broker.host, broker.port, ApiKeys.STOP_REPLICA, body)
    assert resp["partition_errors"] == [
        {"topic_name": "../victim", "partition_index": 0, "error_code": Errors.INVALID_TOPIC_EXCEPTION}
    ], resp
    assert (victim / "precious").read_text() == "keep me"


# ---------------------------------------------------------------------------------------------- fuzz


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a body: map keys and list indexes, at any depth."""
    out = [path]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, (*path, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _paths(value, (*path, i))
    return out


def _get(body: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        body = body[step]
    return body


def _mutate(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    """One to three point mutations of a valid body: a value replaced (by one of the same type, mostly),
    a map key dropped, or a list doubled."""
    body = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(body)[1:]
        if rng.random() < 0.3:  # names reach the disk: give strings extra attention
            paths = [p for p in paths if isinstance(_get(body, p), str)] or paths
        if not paths:
            break
        path = rng.choice(paths)
        parent = body
        for step in path[:-1]:
            parent = parent[step]
        last, old = path[-1], parent[path[-1]]
        roll = rng.random()
        if roll < 0.1 and isinstance(parent, dict):
            del parent[last]
        elif roll < 0.2 and isinstance(old, list):
            parent[last] = old + copy.deepcopy(old)
        elif roll < 0.5:
            parent[last] = rng.choice(FUZZ_VALUES)
        elif isinstance(old, str):
            parent[last] = rng.choice(FUZZ_STRS)
        elif type(old) is int:
            parent[last] = rng.choice(FUZZ_INTS)
        else:
            parent[last] = rng.choice(FUZZ_VALUES)
    return body


FUZZ_VALUES: list[Any] = [
    None, True, 0, 1, -1, -2, 2, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63), 1.5, "", "t", "h",
    "../x", "a" * 300, b"", b"\x00" * 70, [], {}, [1], {"a": 1},
]  # fmt: skip


FUZZ_INTS = [0, 1, -1, -2, 2, 3, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
FUZZ_STRS = ["", "t", "h", "z", ".", "..", "../x", "a/b", "a" * 300]


def _fuzz_bodies() -> list[tuple[int, dict[str, Any]]]:
    batch = build_simple_batch([b"a", b"b"])
    stop = {
        "controller_id": 9000,
        "controller_epoch": 1,
        "topic_states": [
            {"topic_name": "z", "partition_states": [{"partition_index": 0, "delete_partition": True}]}
        ],
    }
    update = {
        "controller_id": 9000,
        "controller_epoch": 1,
        "topic_states": [
            {
                "topic_name": "t",
                "partition_states": [
                    {"partition_index": 0, "controller_epoch": 1, "leader": 1, "leader_epoch": 0,
                     "isr": [1], "replicas": [1]}
                ],
            }
        ],
        "live_brokers": [{"id": 1, "host": "127.0.0.1", "port": 1}],
    }  # fmt: skip
    ofle = {"topics": [{"topic": "t", "partitions": [{"partition": 0, "leader_epoch": 0}]}]}
    return [
        (ApiKeys.PRODUCE, produce_body("t", 0, batch)),
        (ApiKeys.PRODUCE, produce_body("h", 0, batch, acks=-1)),
        (ApiKeys.FETCH, fetch_body("t", 0, 0, replica_id=-1)),
        (ApiKeys.FETCH, {**fetch_body("t", 1, 0, replica_id=1), "session_epoch": 0}),
        (ApiKeys.FETCH, fetch_body("h", 0, 0, replica_id=2, max_wait_ms=5)),
        (ApiKeys.LIST_OFFSETS, list_offsets_body("t", 0, -1, -1)),
        (ApiKeys.METADATA, {"topics": [{"name": "t"}]}),
        (ApiKeys.LEADER_AND_ISR, leader_and_isr("z", 0, [1, 2], [1], epoch=3)),
        (ApiKeys.STOP_REPLICA, stop),
        (ApiKeys.UPDATE_METADATA, update),
        (ApiKeys.OFFSET_FOR_LEADER_EPOCH, ofle),
        (ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None}),
    ]


def _server_errors(body: Any, path: str = "") -> list[str]:
    if isinstance(body, dict):
        found = [path] if body.get("error_code") == Errors.UNKNOWN_SERVER_ERROR else []
        return found + [p for k, v in body.items() for p in _server_errors(v, f"{path}.{k}")]
    if isinstance(body, list):
        return [p for i, v in enumerate(body) for p in _server_errors(v, f"{path}[{i}]")]
    return []


async def test_mutated_requests_never_get_unknown_server_error(broker_launcher: BrokerLauncher) -> None:
    """Valid requests of every broker API with random parts replaced, dropped or duplicated: each gets a
    Kafka error code (or succeeds), never UNKNOWN_SERVER_ERROR, and the broker keeps serving."""
    b = broker_launcher.start(1, {"initial.leader.partitions": "t-0,t-1", "message.max.bytes": "20000"})
    rng = random.Random(20240611)
    bodies = _fuzz_bodies()
    failures: list[str] = []
    async with RawConnection(b.host, b.port) as raw:
        for cid in range(1500):
            api_key, body = rng.choice(bodies)
            mutated = _mutate(rng, body)
            if api_key == ApiKeys.PRODUCE and mutated.get("acks") == 0:
                continue  # no response to wait for
            if type(mutated.get("controller_epoch")) is int and mutated["controller_epoch"] > 1:
                mutated["controller_epoch"] = 1  # a huge one would make every later request stale
            await raw.send_request(api_key, mutated, correlation_id=cid)
            [(got, resp)] = await raw.receive_responses(1)
            assert got == cid
            failures += [f"{ApiKeys(api_key).name} {mutated!r:.300}: {p}" for p in _server_errors(resp)]
    assert not failures, "\n".join(failures)
    assert b.is_running()
    assert (await request(b.host, b.port, ApiKeys.API_VERSIONS, {}))["error_code"] == 0


# ---------------------------------------------------------------------------------------- request lists


async def test_metadata_naming_one_topic_many_times_answers_it_once(broker: BrokerProcess) -> None:
    """The issue's METADATA amplification, at this broker's request size limit: a topic named 20,000 times
    is described once, as Kafka (which takes the topics as a set) does."""
    resp = await request(broker.host, broker.port, ApiKeys.METADATA, {"topics": [{"name": "t"}] * 20_000})
    assert [t["name"] for t in resp["topics"]] == ["t"]
    names = [{"name": "nosuch"}, {"name": "t"}, {"name": "nosuch"}]
    resp = await request(broker.host, broker.port, ApiKeys.METADATA, {"topics": names})
    assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [("nosuch", 3), ("t", 0)]


async def test_produce_naming_a_partition_twice_gets_one_answer(
    broker: BrokerProcess, intact: Snapshot
) -> None:
    batch = build_simple_batch([b"twice"])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": "t", "partition_data": [{"index": 1, "records": batch}, {"index": 1, "records": batch}]},
            {"name": "t", "partition_data": [{"index": 1, "records": batch}]},
        ],
    }
    resp = await produce_raw(broker, body)
    [topic] = resp["responses"]
    [part] = topic["partition_responses"]
    assert part["index"] == 1 and part["error_code"] == 0 and part["base_offset"] == intact.leo[("t", 1)]
    intact.appended.add(("t", 1))
    assert await list_offset(broker.host, broker.port, "t", 1) == intact.leo[("t", 1)] + 1  # appended once


async def test_list_offsets_naming_a_partition_twice_is_invalid_request(broker: BrokerProcess) -> None:
    body = list_offsets_body("t", 0, -1, -1)
    body["topics"][0]["partitions"] *= 2
    body["topics"].append(list_offsets_body("t", 1, -1, -1)["topics"][0])
    resp = await request(broker.host, broker.port, ApiKeys.LIST_OFFSETS, body)
    codes = [
        (t["name"], p["partition_index"], p["error_code"]) for t in resp["topics"] for p in t["partitions"]
    ]
    assert codes == [("t", 0, 42), ("t", 0, 42), ("t", 1, 0)]
