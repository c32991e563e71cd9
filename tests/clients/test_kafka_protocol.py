"""Kafka's binary protocol on a broker's listener, byte for byte (docs/clients.md): what is
advertised, how refused versions and bad input are answered, and that nothing crashes a broker."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator

import pytest
import trio

from protocol import kafka_codec
from protocol.api_keys import ApiKeys
from protocol.api_specs import SPECS
from protocol.errors import Errors
from protocol.records import build_simple_batch, iter_batches
from tests.clients.kafka_wire import KafkaWire
from tests.integration.harness import BrokerLauncher, BrokerProcess, request

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(module_launcher: BrokerLauncher) -> Iterator[BrokerProcess]:
    yield module_launcher.start(1, {"initial.leader.partitions": "t-0,t-1"})


async def still_serves(b: BrokerProcess) -> None:
    """A new connection in each encoding is still answered."""
    async with KafkaWire(b.host, b.port) as wire:
        resp = await wire.call(ApiKeys.API_VERSIONS, 3, {})
        assert resp["error_code"] == 0
    resp = await request(b.host, b.port, ApiKeys.API_VERSIONS, {})
    assert resp["error_code"] == 0


async def test_api_versions_lists_kafka_ranges(broker: BrokerProcess) -> None:
    async with KafkaWire(broker.host, broker.port) as wire:
        for version in (0, 1, 2, 3):
            resp = await wire.call(ApiKeys.API_VERSIONS, version, {}, correlation_id=version + 10)
            ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
            assert resp["error_code"] == 0
            assert ranges[ApiKeys.PRODUCE] == (0, 9)
            assert ranges[ApiKeys.FETCH] == (4, 12)
            assert ranges[ApiKeys.METADATA] == (1, 12)
            assert ranges[ApiKeys.API_VERSIONS] == (0, 3)
            assert ranges[ApiKeys.SASL_HANDSHAKE] == (0, 1)
            for key, span in ranges.items():
                assert span == SPECS[key].kafka_versions  # only what works, from the one table
    # the msgpack encoding on the same listener still has its own versions
    resp = await request(broker.host, broker.port, ApiKeys.API_VERSIONS, {})
    assert {k["api_key"]: k["max_version"] for k in resp["api_keys"]}[ApiKeys.METADATA] == 0


async def test_unknown_api_versions_version_gets_v0_with_ranges(broker: BrokerProcess) -> None:
    async with KafkaWire(broker.host, broker.port) as wire:
        # KIP-511: a newer client's ApiVersions (header v2) is answered with a version 0 body
        frame = struct.pack(">hhih", 18, 9, 5, 4) + b"next" + b"\x00" + b"\x00\x00"
        await wire.send(struct.pack(">I", len(frame)) + frame)
        payload = await wire.receive_frame()
        assert payload is not None
        cid, body = kafka_codec.decode_response(18, 0, payload)
        assert cid == 5 and body["error_code"] == Errors.UNSUPPORTED_VERSION
        assert {k["api_key"] for k in body["api_keys"]} >= {0, 1, 3, 18}
        # ... and, unlike any other unsupported version, the connection goes on
        assert (await wire.call(ApiKeys.API_VERSIONS, 3, {}, correlation_id=6))["error_code"] == 0


async def test_metadata_every_version(broker: BrokerProcess) -> None:
    async with KafkaWire(broker.host, broker.port) as wire:
        for version in range(1, 13):
            body = {"topics": [{"name": "t"}], "allow_auto_topic_creation": False}
            resp = await wire.call(ApiKeys.METADATA, version, body, correlation_id=version)
            assert [(b["node_id"], b["port"]) for b in resp["brokers"]] == [(1, broker.port)]
            (topic,) = resp["topics"]
            assert topic["name"] == "t" and topic["error_code"] == 0
            parts = sorted(topic["partitions"], key=lambda p: p["partition_index"])
            assert [(p["partition_index"], p["leader_id"], p["isr_nodes"]) for p in parts] == [
                (0, 1, [1]),
                (1, 1, [1]),
            ]


async def test_metadata_unknown_topic_without_auto_creation(broker: BrokerProcess) -> None:
    async with KafkaWire(broker.host, broker.port) as wire:
        body = {"topics": [{"name": "nope"}], "allow_auto_topic_creation": False}
        resp = await wire.call(ApiKeys.METADATA, 12, body)
        assert [(t["name"], t["error_code"]) for t in resp["topics"]] == [
            ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION)
        ]


async def test_produce_v0_to_v2_advertised_and_refused(broker: BrokerProcess) -> None:
    data = [{"name": "t", "partition_data": [{"index": 0, "records": b""}, {"index": 1, "records": b""}]}]
    async with KafkaWire(broker.host, broker.port) as wire:
        for version in (0, 1, 2):
            resp = await wire.call(
                ApiKeys.PRODUCE, version, {"acks": 1, "timeout_ms": 1000, "topic_data": data}
            )
            parts = resp["responses"][0]["partition_responses"]
            assert [(p["index"], p["error_code"]) for p in parts] == [(0, 35), (1, 35)]


async def test_produce_refuses_a_partition_with_other_than_one_batch(module_launcher: BrokerLauncher) -> None:
    # Kafka's ProduceRequest.validateRecords (v3+): exactly one record batch per partition, else
    # INVALID_RECORD for that partition; the request's other partitions are served.
    broker = module_launcher.start(2, {"initial.leader.partitions": "t-0,t-1"})
    one = build_simple_batch([b"a"], base_timestamp=1_000)
    two = one + build_simple_batch([b"b"], base_timestamp=1_000)
    data = [{"name": "t", "partition_data": [{"index": 0, "records": two}, {"index": 1, "records": one}]}]
    async with KafkaWire(broker.host, broker.port) as wire:
        resp = await wire.call(ApiKeys.PRODUCE, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": data})
        parts = {p["index"]: p for p in resp["responses"][0]["partition_responses"]}
        assert parts[0]["error_code"] == Errors.INVALID_RECORD
        assert "exactly one record batch per partition" in parts[0]["error_message"]
        assert parts[1]["error_code"] == Errors.NONE and parts[1]["base_offset"] >= 0
        empty = [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}]
        resp = await wire.call(ApiKeys.PRODUCE, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": empty})
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == Errors.INVALID_RECORD
    await still_serves(broker)


async def test_version_below_range_is_unsupported(broker: BrokerProcess) -> None:
    fetch = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "topics": [
            {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1}]}
        ],
    }
    async with KafkaWire(broker.host, broker.port) as wire:
        resp = await wire.call(ApiKeys.FETCH, 3, fetch)
        assert resp["responses"][0]["partitions"][0]["error_code"] == Errors.UNSUPPORTED_VERSION


async def test_fetch_and_list_offsets_with_kafka_semantics(broker: BrokerProcess) -> None:
    async with KafkaWire(broker.host, broker.port) as wire:
        lo = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        }
        resp = await wire.call(ApiKeys.LIST_OFFSETS, 7, lo)
        part = resp["topics"][0]["partitions"][0]
        assert (part["error_code"], part["offset"]) == (0, 0)
        fetch = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
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
                            "current_leader_epoch": 99,
                            "fetch_offset": 0,
                            "partition_max_bytes": 1024,
                        },
                        {
                            "partition": 1,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "partition_max_bytes": 1024,
                        },
                    ],
                }
            ],
            "forgotten_topics_data": [],
        }
        resp = await wire.call(ApiKeys.FETCH, 12, fetch)
        parts = {p["partition_index"]: p for p in resp["responses"][0]["partitions"]}
        assert parts[0]["error_code"] == Errors.UNKNOWN_LEADER_EPOCH  # KIP-320: a newer epoch than ours
        assert (parts[1]["error_code"], parts[1]["high_watermark"]) == (0, 0)
        assert parts[1].get("preferred_read_replica", -1) == -1


async def test_unknown_api_key_gets_unsupported_version_then_the_connection_closes(
    broker: BrokerProcess,
) -> None:
    """SPEC §10's UNSUPPORTED_VERSION answer, then what Kafka's SocketServer does with a header it cannot
    parse (an unknown key) or a version it does not support: the connection is closed."""
    async with KafkaWire(broker.host, broker.port) as wire:
        frame = struct.pack(">hhih", 200, 0, 77, -1)
        await wire.send(struct.pack(">I", len(frame)) + frame)
        payload = await wire.receive_frame()
        assert payload == struct.pack(">ih", 77, Errors.UNSUPPORTED_VERSION)
        assert await wire.closed()
    async with KafkaWire(broker.host, broker.port) as wire:
        frame = struct.pack(">hhih", ApiKeys.METADATA, 99, 78, -1) + b"\x00"  # header v2: no tagged fields
        await wire.send(struct.pack(">I", len(frame)) + frame)
        assert await wire.receive_frame() == struct.pack(">ih", 78, Errors.UNSUPPORTED_VERSION)
        assert await wire.closed()
    await still_serves(broker)


async def test_malformed_header_closes_the_connection(broker: BrokerProcess) -> None:
    async with KafkaWire(broker.host, broker.port) as wire:
        # a client_id length past the frame's end
        frame = struct.pack(">hhih", 3, 12, 1, 500) + b"abc"
        await wire.send(struct.pack(">I", len(frame)) + frame)
        assert await wire.closed()
    await still_serves(broker)


async def test_body_that_does_not_parse_closes_the_connection(broker: BrokerProcess) -> None:
    good = kafka_codec.encode_request(3, 12, 1, "c", {"topics": [{"name": "t"}]})
    truncated = good[4:-3]
    async with KafkaWire(broker.host, broker.port) as wire:
        await wire.send(struct.pack(">I", len(truncated)) + truncated)
        assert await wire.closed()
    await still_serves(broker)


async def test_invalid_values_get_invalid_request(broker: BrokerProcess) -> None:
    async with KafkaWire(broker.host, broker.port) as wire:
        fetch = {
            "replica_id": -1,
            "max_wait_ms": -5,  # never valid
            "min_bytes": 0,
            "topics": [
                {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1}]}
            ],
        }
        resp = await wire.call(ApiKeys.FETCH, 12, fetch)
        assert resp["error_code"] == Errors.INVALID_REQUEST


def log_batches(b: BrokerProcess, topic: str, partition: int) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch on disk, each checked whole (CRC included)."""
    data = b"".join(p.read_bytes() for p in sorted((b.log_dir / f"{topic}-{partition}").glob("*.log")))
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]


async def test_random_bytes_never_crash_the_broker_or_corrupt_a_log(broker: BrokerProcess) -> None:
    rng = random.Random(23)
    batch = build_simple_batch([b"fuzz-%d" % i for i in range(3)])
    produce = {
        "acks": 1,
        "timeout_ms": 100,
        "topic_data": [{"name": "t", "partition_data": [{"index": 1, "records": batch}]}],
    }
    templates = [
        kafka_codec.encode_request(3, 12, 1, "c", {"topics": [{"name": "t"}]})[4:],
        kafka_codec.encode_request(0, 9, 1, "c", produce)[4:],
        kafka_codec.encode_request(0, 3, 1, "c", produce)[4:],
        kafka_codec.encode_request(18, 3, 1, "c", {})[4:],
    ]
    for i in range(150):
        base = bytearray(rng.choice(templates))
        for _ in range(rng.randint(1, 6)):
            base[rng.randrange(len(base))] = rng.randrange(256)
        if i % 3 == 0:
            base = base[: rng.randrange(1, len(base) + 1)]
        base[0] = 0  # stays a Kafka frame
        async with KafkaWire(broker.host, broker.port) as wire:
            await wire.send(struct.pack(">I", len(base)) + bytes(base))
            with trio.move_on_after(0.5):
                await wire.receive_frame(1.0)
    assert broker.is_running()
    await still_serves(broker)
    # whatever was appended is whole batches with contiguous offsets from 0
    for partition in (0, 1):
        batches = log_batches(broker, "t", partition)
        expected = 0
        for base, last in batches:
            assert base == expected
            expected = last + 1


async def test_fetch_v12_last_fetched_epoch_answers_the_diverging_epoch(broker: BrokerProcess) -> None:
    """Kafka's Partition.fetchRecords for a fetcher that names its last fetched epoch (Fetch v12+): where
    the leader's log for that epoch ends before the fetch offset, or the leader has only an older epoch,
    nothing is read and ``diverging_epoch`` says the epoch and its end offset; otherwise records as usual."""
    from kit.unmanaged import leader_and_isr_body, send_leader_and_isr

    async def lead(epoch: int) -> None:
        await send_leader_and_isr(
            [broker], leader_and_isr_body("div", {0: 1}, leader_epoch=epoch, replicas=[1])
        )

    async def produce(n: int, first: int) -> None:
        batch = build_simple_batch([b"r%d" % i for i in range(first, first + n)])
        body = {
            "acks": 1,
            "timeout_ms": 5000,
            "topic_data": [{"name": "div", "partition_data": [{"index": 0, "records": batch}]}],
        }
        resp = await request(broker.host, broker.port, ApiKeys.PRODUCE, body)
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0, resp

    await lead(3)
    await produce(5, 0)  # epoch 3: offsets 0-4
    await lead(5)
    await produce(3, 5)  # epoch 5: offsets 5-7; LEO 8

    async def fetch(last_fetched_epoch: int, offset: int, version: int = 12) -> dict:
        body = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "div",
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": 5,
                            "fetch_offset": offset,
                            "last_fetched_epoch": last_fetched_epoch,
                            "partition_max_bytes": 1 << 16,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        }
        async with KafkaWire(broker.host, broker.port) as wire:
            resp = await wire.call(ApiKeys.FETCH, version, body)
        return resp["responses"][0]["partitions"][0]

    def diverging(p: dict) -> tuple[int, int]:
        d = p.get("diverging_epoch") or {"epoch": -1, "end_offset": -1}  # a tagged field: absent by default
        return d["epoch"], d["end_offset"]

    # The fetcher had epoch 4 up to offset 7: the leader never had epoch 4; its epoch 3 ended at 5.
    p = await fetch(4, 7)
    assert (p["error_code"], diverging(p), p["records"] or b"") == (0, (3, 5), b"")
    assert p["high_watermark"] == 8
    # Epoch 3 up to offset 6: the leader's epoch 3 ended at 5, before 6.
    p = await fetch(3, 6)
    assert (p["error_code"], diverging(p)) == (0, (3, 5))
    # Epoch 3 up to its end, and epoch 5 up to the LEO: no divergence, records as usual.
    p = await fetch(3, 5)
    assert p["error_code"] == 0 and diverging(p) == (-1, -1)
    assert [(h.base_offset, h.last_offset) for _, h in iter_batches(p["records"])] == [(5, 7)]
    p = await fetch(5, 8)
    assert p["error_code"] == 0 and diverging(p) == (-1, -1) and not p["records"]
    # No last fetched epoch (-1, what consumers send): no check.
    p = await fetch(-1, 6)
    assert p["error_code"] == 0 and diverging(p) == (-1, -1) and p["records"]
    # Before v12 the field does not exist: the records are read as before.
    p = await fetch(4, 7, version=11)
    assert p["error_code"] == 0 and p.get("diverging_epoch") is None and p["records"]
