"""Transactions with Kafka's own client (docs/transactions.md): confluent-kafka's transactional producer
commits and aborts transactions over two partitions and a read_committed consumer reads exactly the
committed records; a second producer with the same transactional id fences the first; a transaction open
past its timeout is aborted; offsets sent to a transaction are committed with it; the coordinator moves
with its __transaction_state partition and a new one finishes a prepared commit; the CLI's transactional
produce and read_committed consume; the coordinator's state is what `isrsim transactions describe` shows."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.clients.conftest import bootstrap
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]  # make clients (30 s)

TOPIC = "txn-topic"
SETTINGS = (
    *FAST,
    "transaction.state.log.num.partitions=4",
    "offsets.topic.num.partitions=4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    for c in cluster_up(tmp_path_factory.mktemp("txn") / "root", 3, SETTINGS):
        c.cli("topic", "create", TOPIC, "--partitions", "2", "--replication-factor", "3")
        yield c


def producer(cluster: Cluster, transactional_id: str, timeout_ms: int = 20000) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": timeout_ms,
            "message.timeout.ms": timeout_ms,
            "linger.ms": 0,
        }
    )
    p.init_transactions(60)
    return p


def transaction(p: Producer, values: list[str], *, commit: bool) -> None:
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v.encode(), partition=i % 2)
    if commit:
        p.commit_transaction(60)
    else:
        p.flush(30)
        p.abort_transaction(60)


def read_all(cluster: Cluster, isolation: str) -> list[str]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "group.id": f"reader-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(TOPIC, p, 0) for p in (0, 1)])
    got: list[str] = []
    eof: set[int] = set()
    try:
        for _ in range(300):
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    if eof == {0, 1}:
                        break
                    continue
                raise KafkaException(msg.error())
            eof.discard(msg.partition())
            got.append(msg.value().decode())
    finally:
        c.close()
    return sorted(got)


def describe(cluster: Cluster, transactional_id: str) -> dict[str, object]:
    out = cluster.cli("transactions", "describe", transactional_id, "-o", "json").stdout
    result: dict[str, object] = json.loads(out)
    return result


def test_committed_records_only_are_read_committed(cluster: Cluster) -> None:
    p = producer(cluster, "txn-a")
    transaction(p, ["c0", "c1"], commit=True)
    transaction(p, ["a0", "a1", "a2"], commit=False)
    transaction(p, ["c2", "c3", "c4"], commit=True)
    assert read_all(cluster, "read_committed") == ["c0", "c1", "c2", "c3", "c4"]
    assert read_all(cluster, "read_uncommitted") == ["a0", "a1", "a2", "c0", "c1", "c2", "c3", "c4"]
    d = describe(cluster, "txn-a")
    assert d["state"] == "CompleteCommit"
    assert d["producer_epoch"] == 0 and d["partitions"] == []
    info = cluster.info
    assert d["coordinator"] in {b.id for b in info.brokers}
    listed = json.loads(cluster.cli("transactions", "list", "-o", "json").stdout)
    assert {"transactional_id": "txn-a", "producer_id": d["producer_id"], "state": "CompleteCommit"} in [
        {k: t[k] for k in ("transactional_id", "producer_id", "state")} for t in listed
    ]
    p.flush(10)


def test_a_new_producer_fences_the_zombie(cluster: Cluster) -> None:
    zombie = producer(cluster, "txn-z")
    zombie.begin_transaction()
    zombie.produce(TOPIC, value=b"zombie", partition=0)
    zombie.flush(30)
    assert describe(cluster, "txn-z")["state"] == "Ongoing"
    # The new instance aborts the zombie's open transaction and bumps the epoch.
    fresh = producer(cluster, "txn-z")
    d = describe(cluster, "txn-z")
    assert (d["state"], d["producer_epoch"]) == ("Empty", 2)
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    transaction(fresh, ["fresh"], commit=True)
    committed = read_all(cluster, "read_committed")
    assert "fresh" in committed and "zombie" not in committed


def test_an_open_transaction_past_its_timeout_is_aborted(cluster: Cluster) -> None:
    p = producer(cluster, "txn-slow", timeout_ms=2000)
    p.begin_transaction()
    p.produce(TOPIC, value=b"too-slow", partition=1)
    p.flush(10)
    assert describe(cluster, "txn-slow")["state"] == "Ongoing"
    done = wait_until(
        lambda: (d := describe(cluster, "txn-slow"))["state"] == "CompleteAbort" and d,
        timeout=20,
        message="the coordinator to abort txn-slow",
    )
    assert done["producer_epoch"] == 1  # bumped: the producer is fenced
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert "too-slow" not in read_all(cluster, "read_committed")


def test_offsets_sent_to_a_transaction_are_committed_with_it(cluster: Cluster) -> None:
    group = "txn-group"
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": group, "enable.auto.commit": False}
    )
    p = producer(cluster, "txn-offsets")
    try:
        metadata = consumer.consumer_group_metadata()
        for offset, commit in ((3, True), (5, False)):
            p.begin_transaction()
            p.produce(TOPIC, value=f"with-offsets-{offset}".encode(), partition=0)
            p.send_offsets_to_transaction([TopicPartition(TOPIC, 0, offset)], metadata, 30)
            if commit:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)
        committed = consumer.committed([TopicPartition(TOPIC, 0)], 30)
        assert committed[0].offset == 3  # the aborted transaction's offset 5 was dropped
    finally:
        consumer.close()


def test_the_coordinator_moves_with_its_partition(cluster: Cluster) -> None:
    """The coordinator's broker is killed: the new leader of the id's __transaction_state partition loads
    it, and the next InitProducerId of the id bumps the same producer id's epoch."""
    first = producer(cluster, "txn-move")
    before = describe(cluster, "txn-move")
    assert before["producer_epoch"] == 0
    first.flush(1)
    old = int(str(before["coordinator"]))
    cluster.cli("broker", "kill", str(old))
    try:
        wait_until(
            lambda: describe_or_none(cluster, "txn-move") not in (None, old),
            timeout=30,
            message="a new coordinator for txn-move",
        )
        producer(cluster, "txn-move").flush(1)
        after = describe(cluster, "txn-move")
        assert after["coordinator"] != old
        assert (after["producer_id"], after["producer_epoch"], after["state"]) == (
            before["producer_id"],
            1,
            "Empty",
        )
    finally:
        cluster.cli("broker", "restart", str(old))


def test_a_new_coordinator_finishes_a_prepared_commit(cluster: Cluster) -> None:
    """The markers fail (a protocol fault on WriteTxnMarkers), so the transaction stays in PrepareCommit;
    the coordinator's broker is killed; the new leader of its __transaction_state partition loads it in
    PrepareCommit, sends the markers again once they can be written, and completes the commit."""
    rule = cluster.cli("fault", "add", "--api", "WriteTxnMarkers", "--error", "NOT_ENOUGH_REPLICAS")
    rule_id = rule.stdout.split()[0]
    p = producer(cluster, "txn-prepared")
    p.begin_transaction()
    p.produce(TOPIC, value=b"prepared-0", partition=0)
    p.produce(TOPIC, value=b"prepared-1", partition=1)
    p.commit_transaction(30)  # answered once PrepareCommit is written
    before = describe(cluster, "txn-prepared")
    assert before["state"] == "PrepareCommit"
    old = int(str(before["coordinator"]))
    cluster.cli("broker", "kill", str(old))
    try:
        wait_until(
            lambda: describe_or_none(cluster, "txn-prepared") not in (None, old),
            timeout=30,
            message="a new coordinator for txn-prepared",
        )
        assert describe(cluster, "txn-prepared")["state"] == "PrepareCommit"
        cluster.cli("fault", "remove", rule_id, check=False)  # the killed node's rule went with it
        wait_until(
            lambda: describe(cluster, "txn-prepared")["state"] == "CompleteCommit",
            timeout=30,
            message="the new coordinator to complete the commit",
        )
        committed = read_all(cluster, "read_committed")
        assert "prepared-0" in committed and "prepared-1" in committed
    finally:
        cluster.cli("fault", "remove", "--all", check=False)
        cluster.cli("broker", "restart", str(old))


def describe_or_none(cluster: Cluster, transactional_id: str) -> object:
    proc = cluster.cli("transactions", "describe", transactional_id, "-o", "json", check=False, timeout=60)
    return json.loads(proc.stdout)["coordinator"] if proc.returncode == 0 else None


def test_cli_produces_transactions_and_consumes_read_committed(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "cli-txn", "--partitions", "3", "--replication-factor", "3")
    out = cluster.cli(
        "produce", "cli-txn", "--count", "300", "--transactional-id", "cli-1",
        "--transaction-records", "50", "--abort-every", "2",
    ).stdout  # fmt: skip
    assert "3 transactions committed (150 records), 3 aborted (150 records)" in out

    def consumed(*isolation: str) -> str:
        args = ("consume", "cli-txn", "--from-beginning", "-e", "--count-only", *isolation)
        return cluster.cli(*args).stderr

    assert "Processed a total of 150 messages" in consumed("--isolation-level", "read_committed")
    assert "Processed a total of 300 messages" in consumed()
    producer_id = describe(cluster, "cli-1")["producer_id"]
    entries = []
    for p in range(3):
        args = (
            "transactions",
            "describe-producers",
            "--topic",
            "cli-txn",
            "--partition",
            str(p),
            "-o",
            "json",
        )
        entries += [
            e for e in json.loads(cluster.cli(*args).stdout)["producers"] if e["producer_id"] == producer_id
        ]
    assert entries and all(e["current_txn_start_offset"] == -1 for e in entries)  # every transaction ended
