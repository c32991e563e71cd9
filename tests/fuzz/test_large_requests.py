"""Large Kafka-encoded requests (at least broker.network.OFF_LOOP_BYTES) are decoded, and answered, off the
event loop (docs/protocol.md, "Limits"), found by the fuzzer: a few MB of topics or partitions held a
broker's loop for seconds. These check that the answers stay what they were: every topic answered, and an
error-only answer spread over the request's partitions (which reads the request when it is encoded)."""

from __future__ import annotations

import pytest
import trio

from protocol import ApiKeys, Errors, kafka_codec
from server.network import OFF_LOOP_BYTES
from tests.clients.kafka_wire import KafkaWire
from tests.integration.harness import BrokerProcess

pytestmark = pytest.mark.integration


async def test_a_large_metadata_request_answers_every_topic(single_broker: BrokerProcess) -> None:
    names = [f"missing-topic-{i}" for i in range(30_000)]
    body = {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": False}
    assert len(kafka_codec.encode_request(ApiKeys.METADATA, 12, 7, "big", body)) > OFF_LOOP_BYTES
    async with KafkaWire(single_broker.host, single_broker.port) as wire:
        with trio.fail_after(60):
            answer = await wire.call(ApiKeys.METADATA, 12, body, correlation_id=7)
            small = await wire.call(ApiKeys.API_VERSIONS, 3, {}, correlation_id=8)
    assert [t["name"] for t in answer["topics"]] == names
    assert {t["error_code"] for t in answer["topics"]} == {Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert small["error_code"] == 0


async def test_a_large_refused_produce_is_answered_on_each_of_its_partitions(
    single_broker: BrokerProcess,
) -> None:
    partitions = list(range(60_000))
    body = {
        "acks": 5,  # refused as a whole: one error-only answer, spread over every partition
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": i, "records": None} for i in partitions]}],
    }
    assert len(kafka_codec.encode_request(ApiKeys.PRODUCE, 9, 1, "big", body)) > OFF_LOOP_BYTES
    async with KafkaWire(single_broker.host, single_broker.port) as wire:
        with trio.fail_after(60):
            answer = await wire.call(ApiKeys.PRODUCE, 9, body)
    (topic,) = answer["responses"]
    assert [p["index"] for p in topic["partition_responses"]] == partitions
    codes = {p["error_code"] for p in topic["partition_responses"]}
    assert len(codes) == 1 and Errors.NONE not in codes, codes
