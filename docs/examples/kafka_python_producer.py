"""A small kafka-python producer for `isrsim run` (docs/your-application.md); exits 0 when every record was
acknowledged.

    isrsim run --seed 7 --duration 60 -- python docs/examples/kafka_python_producer.py --count 5000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", default="payments")
    parser.add_argument("--count", type=int, default=5_000)
    parser.add_argument("--client-id", default="payments-producer")
    parser.add_argument("--rate", type=float, default=0.0, help="records per second (0: as fast as it can)")
    args = parser.parse_args()
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"].split(",")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    with contextlib.suppress(TopicAlreadyExistsError):  # a second run
        admin.create_topics([NewTopic(args.topic, num_partitions=3, replication_factor=3)])
    admin.close()
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=args.client_id,
        acks="all",
        enable_idempotence=True,
        retries=2**31 - 1,
        delivery_timeout_ms=120_000,
        request_timeout_ms=10_000,
        linger_ms=5,
    )
    started = time.monotonic()
    futures = []
    for i in range(args.count):
        if args.rate > 0:
            ahead = started + i / args.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        futures.append(producer.send(args.topic, f"payment-{i}".encode()))
    producer.flush(150)
    failed = 0
    for f in futures:
        try:
            f.get(timeout=0)
        except Exception:
            failed += 1
    producer.close()
    print(f"sent {args.count} records: {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
