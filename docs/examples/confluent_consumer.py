"""A small confluent-kafka consumer for `isrsim run` (docs/your-application.md): reads a topic in a group,
committing what it processed, until it has seen --count records or --idle-s passed without one.

    isrsim run -- sh -c 'python docs/examples/confluent_producer.py &&
                         python docs/examples/confluent_consumer.py'
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from confluent_kafka import Consumer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--group", default="orders-app")
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--client-id", default="orders-consumer")
    args = parser.parse_args()
    consumer = Consumer(
        {
            "bootstrap.servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"],
            "client.id": args.client_id,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,  # commit only what was processed: no record is skipped
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([args.topic])
    seen = committed = 0
    last = time.monotonic()
    while seen < args.count and time.monotonic() - last < args.idle_s:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            print(f"consumer error: {msg.error()}")
            continue
        seen += 1
        last = time.monotonic()
        if seen - committed >= 500:
            consumer.commit(asynchronous=False)
            committed = seen
    if seen > committed:
        consumer.commit(asynchronous=False)
    consumer.close()
    print(f"consumed {seen} records")
    return 0 if seen >= args.count else 1


if __name__ == "__main__":
    sys.exit(main())
