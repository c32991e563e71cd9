"""Compressed batches through real brokers: `isrsim produce --compression-type` for each of Kafka's codecs,
replicated to three brokers; every replica's segments decode with kafka-python's reader (CRC and every
record), hold the batches as the producer compressed them, and `isrsim consume` reads the records back."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from protocol.records import iter_batches
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import REPO_ROOT, BrokerLauncher, python_cmd, wait_until
from tests.integration.replication_support import (
    leader_and_isr_body,
    segment_bytes,
    send_leader_and_isr,
    start_producer,
    wait_converged,
)

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
COUNT = 600


def test_each_codec_is_replicated_as_sent_and_read_back(
    broker_launcher: BrokerLauncher, tmp_path: Path
) -> None:
    brokers = broker_launcher.start_many([1, 2, 3], {"min.insync.replicas": "2"})
    for p, codec in enumerate(CODECS):
        send_leader_and_isr(
            brokers,
            leader_and_isr_body(
                brokers, codec, [0], leader=brokers[p % 3].broker_id, leader_epoch=1, isr=[1, 2, 3]
            ),
        )
    # One producer per codec, each to its own topic, all at once (their start-ups overlap).
    producers = {
        codec: start_producer(
            codec,
            COUNT,
            brokers,
            tmp_path / "workload",
            extra=["--compression-type", codec, "--batch-records", "100"],
        )
        for codec in CODECS
    }
    try:
        for codec, prod in producers.items():
            _, err = prod.communicate(timeout=120)
            assert prod.returncode == 0, err
            wait_converged(brokers, codec, [0])
    finally:
        _kill_running(producers.values())

    acked = [
        json.loads(line)
        for f in (tmp_path / "workload").glob("acked-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    crcs = {(a["topic"], a["base_offset"]): a["crc"] for a in acked}
    for codec_id, codec in enumerate(CODECS):
        for b in brokers:
            data = segment_bytes(b, codec, 0)
            offsets = []
            for pos, header in iter_batches(data):
                assert header.attributes & 7 == codec_id
                # stored as the producer compressed it: the CRC it computed is the one on disk
                assert crcs[(codec, header.base_offset)] == header.crc
                theirs = DefaultRecordBatch(bytearray(data[pos : pos + header.size]))
                assert theirs.validate_crc() and theirs.compression_type == codec_id
                records = list(theirs)
                assert len(records) == header.records_count
                offsets += [r.offset for r in records]
            assert offsets == list(range(COUNT)), f"broker {b.broker_id}, {codec}"
    # `isrsim consume` reads each topic back; the five run at once.
    consumers = {codec: _start_consumer(codec, brokers[0].address) for codec in CODECS}
    try:
        for codec, consumer in consumers.items():
            out, err = consumer.communicate(timeout=120)
            assert consumer.returncode == 0, f"consume {codec}: exit {consumer.returncode}\n{err[-4000:]}"
            lines = out.splitlines()
            assert len(lines) == COUNT and all(":" in line for line in lines), out[-500:]
    finally:
        _kill_running(consumers.values())


def _kill_running(procs: Iterable[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start_consumer(topic: str, bootstrap: str) -> subprocess.Popen[str]:
    args = ["consume", topic, "--from-beginning", "--max-records", str(COUNT)]
    args += ["--bootstrap-server", bootstrap]
    return subprocess.Popen(
        python_cmd(*args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_topic_compression_type_recompresses_as_kafka_does(tmp_path: Path) -> None:
    """compression.type=zstd on a topic (managed cluster): the leader recompresses an uncompressed
    producer's batches to zstd; on a topic with the default (producer) they are kept as sent."""
    root = tmp_path / "c"
    for cluster in cluster_up(root, brokers=1, settings=("broker.session.timeout.ms=3000",)):
        cluster.cli(
            "topic", "create", "z", "--partitions", "1", "--replication-factor", "1",
            "--config", "compression.type=zstd",
        )  # fmt: skip
        cluster.cli("topic", "create", "p", "--partitions", "1", "--replication-factor", "1")
        bad = cluster.cli(
            "topic", "create", "x", "--partitions", "1", "--replication-factor", "1",
            "--config", "compression.type=brotli", check=False,
        )  # fmt: skip
        assert bad.returncode != 0 and "compression.type" in bad.stderr

        def codecs(topic: str) -> list[int]:
            directory = root / "broker-1" / "data" / f"{topic}-0"
            data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
            return [h.attributes & 7 for _, h in iter_batches(data)]

        def produce(topic: str, cluster: Cluster = cluster) -> list[int]:
            cluster.cli("produce", topic, "--count", "100", "--batch-records", "100", "--no-progress")
            return codecs(topic)

        # The broker asks the controller for a topic's configs once it hosts the topic: until the answer
        # arrives batches are kept as sent; from then on each is recompressed.
        wait_until(lambda: produce("z")[-1] == 4, timeout=30, message="a zstd batch in z-0")
        assert produce("z")[-1] == 4
        assert produce("p") == [0]
        total = 100 * len(codecs("z"))
        out = cluster.cli("consume", "z", "--from-beginning", "--max-records", str(total))
        assert len(out.stdout.splitlines()) == total
