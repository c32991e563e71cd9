"""A leader journals every batch it acknowledges to any client in ``broker-<id>/acked.jsonl``
(docs/storage.md): here librdkafka's acks=all producer and an acks=0 one, on `cluster up` (the lines of an
idempotent producer's batches, and of a retry answered as a duplicate, are tests/unit/broker's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.clients.conftest import bootstrap
from tests.integration.cluster_support import Cluster
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]

COUNT = 200


def acked_lines(cluster: Cluster) -> list[dict[str, Any]]:
    out = []
    for b in cluster.info.brokers:
        path = Path(b.journal).parent / "acked.jsonl"
        if path.exists():
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def test_every_batch_acknowledged_to_librdkafka_is_in_its_leaders_acked_journal(
    kafka_cluster: Cluster,
) -> None:
    kafka_cluster.cli("topic", "create", "acked", "--partitions", "3", "--replication-factor", "3")
    delivered: list[tuple[int, int]] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap(kafka_cluster),
            "enable.idempotence": False,
            "acks": "all",
            "linger.ms": 5,
            "client.id": "acked-test",
        }
    )
    for i in range(COUNT):
        producer.produce(
            "acked",
            value=b"v%d" % i,
            partition=i % 3,
            on_delivery=lambda err, msg: (
                delivered.append((msg.partition(), msg.offset())) if not err else None
            ),
        )
    assert producer.flush(60) == 0
    assert len(delivered) == COUNT

    lines = [a for a in acked_lines(kafka_cluster) if a["topic"] == "acked"]
    covered = {(a["partition"], o) for a in lines for o in range(a["base_offset"], a["last_offset"] + 1)}
    assert set(delivered) <= covered
    assert {(a["acks"], a["client_id"]) for a in lines} == {(-1, "acked-test")}
    assert {(a["producer_id"], a["producer_epoch"], a["base_sequence"]) for a in lines} == {(-1, -1, -1)}
    for a in lines:  # journaled by the partition's leader
        assert a["broker_id"] == kafka_cluster.leader("acked", a["partition"])

    # acks=0: acknowledged to nobody, journaled nowhere (once the records are in the log).
    before = len(acked_lines(kafka_cluster))
    leader = kafka_cluster.leader("acked", 0)
    end = kafka_cluster.replica_offsets("acked")[(leader, 0)][0]
    quiet = Producer({"bootstrap.servers": bootstrap(kafka_cluster), "acks": "0", "linger.ms": 5})
    for i in range(50):
        quiet.produce("acked", value=b"q%d" % i, partition=0)
    assert quiet.flush(30) == 0
    wait_until(
        lambda: kafka_cluster.replica_offsets("acked")[(leader, 0)][0] >= end + 50,
        20,
        message="acks=0 records",
    )
    assert len(acked_lines(kafka_cluster)) == before
