"""A small confluent-kafka producer for `isrsim run` (docs/your-application.md): it writes numbered records
to a topic and exits 0 when every one was acknowledged, 1 otherwise.

    isrsim run --seed 7 --duration 60 -- python docs/examples/confluent_producer.py --count 20000
"""

from __future__ import annotations

import argparse
import os
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def properties(path: str | None) -> dict[str, str]:
    """The librdkafka keys `isrsim run` wrote (bootstrap.servers, and SASL_SSL's on a secure cluster)."""
    conf: dict[str, str] = {}
    if path:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    key, value = line.split("=", 1)
                    conf[key.strip()] = value.strip()
    conf.setdefault("bootstrap.servers", os.environ["KAFKA_BOOTSTRAP_SERVERS"])
    return conf


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--client-id", default="orders-producer")
    args = parser.parse_args()
    conf = properties(os.environ.get("ISRSIM_CLIENT_PROPERTIES"))
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(args.topic, 6, 3)]).values():
        try:
            future.result()
        except Exception as exc:  # TOPIC_ALREADY_EXISTS on a second run
            print(f"topic: {exc}")
    producer = Producer(
        {
            **conf,
            "client.id": args.client_id,
            "acks": "all",  # every in-sync replica has the record before the answer
            "enable.idempotence": True,  # retries never duplicate or reorder
            "delivery.timeout.ms": 120_000,  # how long a record may wait through a failover
            "linger.ms": 5,
        }
    )
    failed = 0

    def delivered(err: object, _msg: object) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    for i in range(args.count):
        while True:
            try:
                producer.produce(args.topic, key=str(i % 64), value=f"order-{i}", on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(150)
    print(f"sent {args.count} records: {failed} failed, {left} not answered")
    return 0 if failed == 0 and left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
