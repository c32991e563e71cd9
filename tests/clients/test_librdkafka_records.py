"""librdkafka (confluent-kafka) writes to a real isrsim broker over Kafka's protocol, uncompressed and with
each codec: the broker stores the batches librdkafka built as they came. The CRC librdkafka computed over
every byte from the attributes on is the one on disk and still matches (the leader rewrites only
base_offset and the leader epoch, which it does not cover), and isrsim's own encoder writes the same records
back byte for byte; a librdkafka consumer reads every record, key and header back, and finds offsets by
timestamp (ListOffsets through the time index)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.compression import CompressionType, decompress
from protocol.record_codec import encode_records
from protocol.records import BATCH_HEADER_SIZE, build_batch, decode_records, iter_batches
from tests.integration.harness import BrokerLauncher, BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.clients]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
COUNT = 300
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(module_launcher: BrokerLauncher) -> Iterator[BrokerProcess]:
    yield module_launcher.start(1, {"initial.leader.partitions": ",".join(f"{c}-0" for c in CODECS)})


def segment(broker: BrokerProcess, topic: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((broker.log_dir / f"{topic}-0").glob("*.log")))


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_batches_are_stored_as_sent(broker: BrokerProcess, codec: str) -> None:
    producer = Producer(
        {"bootstrap.servers": broker.address, "compression.type": codec, "linger.ms": 20, "acks": "all"}
    )
    failures: list[str] = []
    for i in range(COUNT):
        producer.produce(
            codec,
            value=b"value-%d " % i * 4,
            key=None if i % 7 == 0 else b"key-%d" % i,
            partition=0,
            headers=[("h", b"x%d" % i), ("empty", None)] if i % 3 == 0 else None,
            timestamp=BASE_TS + 10 * i,
            on_delivery=lambda err, msg: failures.append(str(err)) if err else None,
        )
    assert producer.flush(30) == 0
    assert failures == []

    data = segment(broker, codec)
    codec_id = int(CompressionType.for_name(codec))
    offsets: list[int] = []
    for pos, header in iter_batches(data):  # every CRC checked: the producer's, untouched
        batch = data[pos : pos + header.size]
        assert header.attributes & 7 == codec_id
        _, records = decode_records(batch)
        offsets += [header.base_offset + r.offset_delta for r in records]
        if codec_id == 0:
            again = build_batch(
                records,
                base_offset=header.base_offset,
                partition_leader_epoch=header.partition_leader_epoch,
                base_timestamp=header.base_timestamp,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                attributes=header.attributes,
            )
            assert again == batch
        else:
            assert decompress(codec_id, batch[BATCH_HEADER_SIZE:]) == encode_records(records)
    assert offsets == list(range(COUNT))

    consumer = Consumer(
        {"bootstrap.servers": broker.address, "group.id": f"g-{codec}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(codec, 0, 0)])
        got = []
        while len(got) < COUNT:
            msgs = consumer.consume(COUNT, timeout=10)
            assert msgs, f"no records after {len(got)}"
            for msg in msgs:
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    assert [m.offset() for m in got] == list(range(COUNT))
    assert got[3].value() == b"value-3 " * 4 and got[3].key() == b"key-3"
    assert got[7].key() is None
    assert got[3].headers() == [("h", b"x3"), ("empty", None)]
    assert got[3].timestamp() == (1, BASE_TS + 30)  # CreateTime

    # ListOffsets by timestamp (the time index): the first record at or after it
    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": f"t-{codec}"})
    try:
        found = [
            consumer.offsets_for_times([TopicPartition(codec, 0, ts)], timeout=10)[0].offset
            for ts in (BASE_TS + 10 * 100 - 5, BASE_TS + 10 * 100, BASE_TS + 10**9)
        ]
    finally:
        consumer.close()
    assert found == [100, 100, -1]
