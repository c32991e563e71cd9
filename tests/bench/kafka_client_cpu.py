"""Broker CPU per 1,000 records: a librdkafka producer (Kafka's encoding) against `isrsim produce` (msgpack)
on the same `cluster up` cluster, acks=all, RF 3, 100-byte records (docs/clients.md, "Cost on the broker").

    isrsim cluster up --data-dir /tmp/cpu --base-port 0
    isrsim topic create bench --partitions 3 --replication-factor 3 --data-dir /tmp/cpu
    .venv/bin/python tests/bench/kafka_client_cpu.py /tmp/cpu 50000

A benchmark, not a test: the brokers' user+system CPU (from /proc) over each run, and the records per
second the client saw (isrsim produce's time includes its start-up). librdkafka's batches are its own
(linger.ms 5: far more records per batch than `isrsim produce`'s 200), so this compares what each client
costs the brokers as it is used, not the codecs alone (tests/bench/codec_bench.py does that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def main(root: Path, count: int) -> None:
    info = json.loads((root / "cluster.json").read_text())
    pids = [b["pid"] for b in info["brokers"]]
    bootstrap = ",".join(f"{b['host']}:{b['port']}" for b in info["brokers"])
    tick = os.sysconf("SC_CLK_TCK")

    def broker_cpu_s() -> float:
        total = 0
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / tick

    def run(label: str, produce: Callable[[], None]) -> None:
        cpu0, t0 = broker_cpu_s(), time.monotonic()
        produce()
        cpu1, t1 = broker_cpu_s(), time.monotonic()
        per_1000_ms = (cpu1 - cpu0) / count * 1000 * 1000
        rate = count / (t1 - t0)
        print(f"{label:30s} {rate:9.0f} records/s   broker CPU {per_1000_ms:6.1f} ms / 1,000 records")

    def librdkafka() -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        value = b"x" * 100
        for i in range(count):
            while True:
                try:
                    producer.produce("bench", value=value)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0

    def isrsim() -> None:
        args = [
            str(Path(sys.executable).parent / "isrsim"),
            "produce",
            "bench",
            "--count",
            str(count),
            "--acks",
            "all",
            "--record-size",
            "100",
        ]
        subprocess.run([*args, "--data-dir", str(root)], check=True, capture_output=True)

    for _ in range(2):
        run("librdkafka (Kafka encoding)", librdkafka)
        run("isrsim produce (msgpack)", isrsim)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 50_000)
