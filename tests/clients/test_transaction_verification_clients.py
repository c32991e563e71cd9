"""KIP-890 part 1 with Kafka's own client (docs/transactions.md "Verification"): a confluent-kafka
transactional producer writes to partition 0 of its transaction; a transactional batch of the same producer
for partition 1, which is not in the transaction, is refused with INVALID_TXN_STATE under
``transaction.partition.verification.enable=true`` (the default), and under the legacy mode (false) is
appended and opens a transaction on partition 1 that the commit does not end. No client sends such a batch
by itself (it adds the partition first), so it goes out as a raw PRODUCE with the producer's id and epoch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from confluent_kafka import Producer

from protocol import ApiKeys, Errors, build_simple_batch, open_connection
from tests.clients.conftest import bootstrap
from tests.integration.cluster_support import FAST, Cluster, cluster_up

pytestmark = [pytest.mark.integration, pytest.mark.clients]

TOPIC = "verified"
SETTINGS = (
    *FAST,
    "transaction.state.log.num.partitions=2",
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "offsets.topic.num.partitions=2",
    "min.insync.replicas=1",
)
TRANSACTIONAL = 0x10


@pytest.fixture(scope="module", params=[True, False], ids=["verification", "legacy"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    verification: bool = request.param
    settings = (*SETTINGS, f"transaction.partition.verification.enable={str(verification).lower()}")
    for c in cluster_up(tmp_path_factory.mktemp("verify") / "root", 1, settings):
        c.cli("topic", "create", TOPIC, "--partitions", "2", "--replication-factor", "1")
        c.verification = verification  # type: ignore[attr-defined]
        yield c


def stray_produce(cluster: Cluster, transactional_id: str, producer_id: int, epoch: int) -> dict[str, Any]:
    """One transactional batch of the producer for partition 1, as a Kafka client's PRODUCE would carry."""
    broker = cluster.info.brokers[0]
    batch = build_simple_batch(
        [b"stray"], producer_id=producer_id, producer_epoch=epoch, base_sequence=0, attributes=TRANSACTIONAL
    )
    body = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout_ms": 10_000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 1, "records": batch}]}],
    }

    async def send() -> dict[str, Any]:
        async with open_connection(broker.host, broker.port) as conn:
            resp = await conn.request(ApiKeys.PRODUCE, body, timeout=20)
        part: dict[str, Any] = resp["responses"][0]["partition_responses"][0]
        return part

    return trio.run(send)


def open_txn_start(cluster: Cluster, partition: int, producer_id: int) -> int | None:
    out = cluster.cli(
        "transactions", "describe-producers", "--topic", TOPIC, "--partition", str(partition), "-o", "json"
    ).stdout
    entries = [e for e in json.loads(out)["producers"] if e["producer_id"] == producer_id]
    return int(entries[0]["current_txn_start_offset"]) if entries else None


def test_a_batch_for_a_partition_outside_the_transaction(cluster: Cluster) -> None:
    verification: bool = cluster.verification  # type: ignore[attr-defined]
    txn_id = "verify-me"
    p = Producer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "transactional.id": txn_id,
            "transaction.timeout.ms": 20_000,
            "message.timeout.ms": 20_000,
            "linger.ms": 0,
        }
    )
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(TOPIC, value=b"in-the-transaction", partition=0)
    assert p.flush(30) == 0
    described = json.loads(cluster.cli("transactions", "describe", txn_id, "-o", "json").stdout)
    producer_id, epoch = int(described["producer_id"]), int(described["producer_epoch"])

    part = stray_produce(cluster, txn_id, producer_id, epoch)
    if verification:
        assert part["error_code"] == Errors.INVALID_TXN_STATE, part
        assert "not added to the transaction" in (part.get("error_message") or "")
    else:
        assert part["error_code"] == Errors.NONE, part
    p.commit_transaction(60)

    assert open_txn_start(cluster, 0, producer_id) == -1  # the commit's marker ended partition 0's
    stray_txn = open_txn_start(cluster, 1, producer_id)
    if verification:
        assert stray_txn is None  # nothing of the producer was written to partition 1
    else:
        assert stray_txn == 0  # a transaction the coordinator does not know of: it hangs
