"""Compressed batches through real brokers: `isrsim produce --compression-type` for each of Kafka's codecs,
replicated to three brokers; every replica's segments decode with kafka-python's reader (CRC and every
record), hold the batches as the producer compressed them, and `isrsim consume` reads the records back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from protocol.records import iter_batches
from tests.integration.harness import BrokerLauncher, run_cli
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
    for codec in CODECS:
        prod = start_producer(
            codec,
            COUNT,
            brokers,
            tmp_path / "workload",
            extra=["--compression-type", codec, "--batch-records", "100"],
        )
        assert prod.wait(120) == 0, prod.stderr.read() if prod.stderr else ""
        wait_converged(brokers, codec, [0])

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
        out = run_cli(
            "consume",
            codec,
            "--from-beginning",
            "--max-records",
            str(COUNT),
            "--bootstrap-server",
            brokers[0].address,
        )
        lines = out.stdout.splitlines()
        assert len(lines) == COUNT and all(":" in line for line in lines), out.stdout[-500:]
