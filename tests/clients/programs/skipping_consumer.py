"""A kafka-python group consumer that commits past what it received (the report's ``consumer_no_skip``
must say so): it reads the 100 records of ``ledger`` (one partition), 100 more are written, and it commits
offset 200 without fetching them. Exits 0 once the commit is acknowledged.

Run under ``isrsim run``: the cluster's address comes from ``KAFKA_BOOTSTRAP_SERVERS``."""

from __future__ import annotations

import os
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

TOPIC = "ledger"
GROUP = "ledger-app"


def main() -> None:
    servers = os.environ["KAFKA_BOOTSTRAP_SERVERS"].split(",")
    producer = KafkaProducer(bootstrap_servers=servers, client_id="ledger-producer", acks="all")
    for i in range(100):
        producer.send(TOPIC, f"entry-{i}".encode(), partition=0)
    producer.flush()
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=servers,
        client_id="ledger-consumer",
        group_id=GROUP,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    received = 0
    deadline = time.monotonic() + 60
    while received < 100 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            received += len(records)
    assert received == 100, f"received {received} of 100"
    for i in range(100, 200):
        producer.send(TOPIC, f"entry-{i}".encode(), partition=0)
    producer.flush()
    # The bug: the position is taken from what was written, not from what was read.
    consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(200, "", -1)})
    print(f"received {received}, committed 200")
    consumer.close(autocommit=False)
    producer.close()


if __name__ == "__main__":
    main()
