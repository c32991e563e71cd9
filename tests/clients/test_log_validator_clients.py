"""What the leader fixes as Kafka's LogValidator does, over Kafka's binary protocol: a hand-built batch
whose max_timestamp is -1 (as some Go clients send it), uncompressed and gzip, is accepted, stored with the
largest record timestamp and a CRC computed again, and a librdkafka consumer reads every record back with
its timestamp."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from crc32c import crc32c

from protocol.api_keys import ApiKeys
from protocol.compression import CompressionType, compress
from protocol.errors import Errors
from protocol.record_codec import Record, encode_records
from protocol.records import iter_batches
from tests.clients.kafka_wire import KafkaWire
from tests.integration.harness import BrokerLauncher, BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.clients]

BASE_TS = 1_700_000_000_000
DELTAS = [0, 40, 7, 13, 2]  # the largest is the second record's


@pytest.fixture(scope="module")
def broker(module_launcher: BrokerLauncher) -> Iterator[BrokerProcess]:
    yield module_launcher.start(1, {"initial.leader.partitions": "none-0,gzip-0"})


def batch_without_max_timestamp(codec: CompressionType) -> bytes:
    """A v2 batch as a client that leaves max_timestamp unset builds it: -1 there, its CRC right."""
    records = [Record(i, d, b"k%d" % i, b"v%d" % i) for i, d in enumerate(DELTAS)]
    raw = encode_records(records)
    payload = raw if codec is CompressionType.NONE else compress(codec, raw)
    n = len(records)
    tail = struct.pack(">hiqqqhii", int(codec), n - 1, BASE_TS, -1, -1, -1, -1, n) + payload
    return struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc32c(tail)) + tail


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP], ids=lambda c: c.config_name)
async def test_max_timestamp_unset_is_accepted_fixed_and_read_back(
    broker: BrokerProcess, codec: CompressionType
) -> None:
    topic = codec.config_name
    sent = batch_without_max_timestamp(codec)
    body = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": sent}]}],
    }
    async with KafkaWire(broker.host, broker.port) as wire:
        resp = await wire.call(ApiKeys.PRODUCE, 9, body)
    part = resp["responses"][0]["partition_responses"][0]
    assert (part["error_code"], part["base_offset"], part["log_append_time_ms"]) == (Errors.NONE, 0, -1)

    data = b"".join(p.read_bytes() for p in sorted((broker.log_dir / f"{topic}-0").glob("*.log")))
    [(_, header)] = list(iter_batches(data))  # the stored CRC checked against the stored bytes
    assert header.max_timestamp == BASE_TS + max(DELTAS)
    assert header.crc != struct.unpack_from(">I", sent, 17)[0]
    assert data[61:] == sent[61:]  # the records as sent

    consumer = Consumer(
        {"bootstrap.servers": broker.address, "group.id": f"g-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(DELTAS) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.key(), msg.timestamp()[1]))
        assert got == [(i, b"k%d" % i, BASE_TS + d) for i, d in enumerate(DELTAS)]
        # ListOffsets by timestamp finds the record through the time index the fixed header fed.
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 30)], timeout=10)
        assert found.offset == 1
    finally:
        consumer.close()
