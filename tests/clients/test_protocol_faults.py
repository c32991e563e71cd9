"""Protocol-level fault rules (`isrsim fault ...`, docs/faults.md) against real Kafka clients on a real
cluster: NOT_LEADER_OR_FOLLOWER retried and written once by an idempotent producer, a lost produce answer
that makes a producer without idempotence write twice (and one with it once), a delayed METADATA seen by
kcat, faults.jsonl, and bad input. One cluster for the module."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from kit.fault_journal import read_faults
from tests.clients.conftest import bootstrap, kcat
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]  # make clients (a minute: a cluster of its own)


@pytest.fixture(autouse=True)
def no_rules_left(kafka_cluster: Cluster) -> Iterator[None]:
    yield
    kafka_cluster.cli("fault", "remove", "--all")


def create(cluster: Cluster, name: str) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    client.create_topics([NewTopic(name, 1, 3)], request_timeout=30)[name].result(timeout=60)
    wait_until(lambda: cluster.isr_full(name), 30)


def add_rule(cluster: Cluster, *args: str) -> int:
    return int(cluster.cli("fault", "add", *args).stdout.strip())


def values(cluster: Cluster, topic: str, expect_at_least: int, timeout: float = 20.0) -> list[bytes]:
    """Every record value of partition 0, read until ``expect_at_least`` came and then 1 s more."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(cluster), "group.id": "assign-only", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        quiet_until: float | None = None
        while time.monotonic() < (quiet_until or deadline):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
            if quiet_until is None and len(got) >= expect_at_least:
                quiet_until = time.monotonic() + 1.0
        return got
    finally:
        consumer.close()


def hits(cluster: Cluster, rule_id: int) -> list[dict[str, Any]]:
    return [r for r in read_faults(cluster.root) if r["action"] == "rule_hit" and r["rule_id"] == rule_id]


def test_not_leader_is_retried_and_written_once_by_an_idempotent_producer(kafka_cluster: Cluster) -> None:
    c = kafka_cluster
    create(c, "pf-nlof")
    rule = add_rule(
        c, "--api", "Produce", "--topic", "pf-nlof", "--error", "NOT_LEADER_OR_FOLLOWER", "--count", "3"
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap(c),
            "enable.idempotence": True,
            "retry.backoff.ms": 50,
            "linger.ms": 0,
        }
    )
    reports: list[Any] = []
    producer.produce("pf-nlof", b"only-once", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    assert reports == [None]  # delivered after the three refusals
    waited = c.cli("fault", "wait", str(rule), "--hits", "3", "--timeout", "10")
    assert f"rule {rule} fired 3 time(s)" in waited.stdout
    assert values(c, "pf-nlof", 1) == [b"only-once"]
    # The hits are in faults.jsonl, once each, with the request they matched.
    c.cli("fault", "list")
    journal = hits(c, rule)
    assert [h["hit"] for h in journal] == [1, 2, 3]
    assert {(h["api"], h["topic"], h["partition"], h["effect"]) for h in journal} == {
        ("Produce", "pf-nlof", 0, "error")
    }
    assert journal[0]["rule"]["error"] == "NOT_LEADER_OR_FOLLOWER"
    listed = c.cli("fault", "list").stdout
    assert f"   {rule}       3  Produce topic=pf-nlof" in listed


@pytest.mark.parametrize("idempotence", [False, True])
def test_a_lost_produce_answer_is_a_duplicate_without_idempotence(
    kafka_cluster: Cluster, idempotence: bool
) -> None:
    c = kafka_cluster
    topic = f"pf-lost-{'idem' if idempotence else 'plain'}"
    create(c, topic)
    rule = add_rule(
        c, "--api", "Produce", "--topic", topic, "--drop-response", "--when", "after", "--count", "1"
    )
    producer = KafkaProducer(
        bootstrap_servers=bootstrap(c),
        acks="all",
        enable_idempotence=idempotence,
        retries=5,
        request_timeout_ms=2000,
        retry_backoff_ms=100,
        max_in_flight_requests_per_connection=1,
        linger_ms=0,
    )
    try:
        producer.send(topic, b"record").get(timeout=30)
    finally:
        producer.close(timeout=5)
    c.cli("fault", "wait", str(rule), "--hits", "1", "--timeout", "5")
    got = values(c, topic, 2 if not idempotence else 1)
    assert got == ([b"record"] if idempotence else [b"record", b"record"])
    (hit,) = hits(c, rule)
    assert (hit["effect"], hit["when"], hit["topic"]) == ("drop-response", "after", topic)


def test_kcat_sees_a_delayed_metadata_and_bad_input_is_refused(kafka_cluster: Cluster) -> None:
    c = kafka_cluster
    b = bootstrap(c, brokers=(1,))

    def metadata_seconds() -> float:
        start = time.monotonic()
        out = kcat("-L", "-b", b, "-m", "10")
        assert out.returncode == 0, out.stderr
        return time.monotonic() - start

    fast = metadata_seconds()
    rule = add_rule(c, "--api", "Metadata", "--delay-ms", "1500", "--node", "1")
    assert metadata_seconds() >= 1.5 > fast
    c.cli("fault", "wait", str(rule), "--hits", "1", "--timeout", "5")
    c.cli("fault", "remove", str(rule))
    assert metadata_seconds() < 1.5
    assert [r["action"] for r in read_faults(c.root) if r.get("rule_id") == rule][-1] == "rule_remove"

    # Observing: each match counted and journaled, the request answered as usual.
    proc = c.cli("fault", "observe", "--api", "Metadata", "--node", "1")
    watch = int(proc.stdout.strip())
    assert metadata_seconds() < 1.5 and metadata_seconds() < 1.5
    c.cli("fault", "wait", str(watch), "--hits", "2", "--timeout", "5")
    hits = [r for r in read_faults(c.root) if r.get("rule_id") == watch and r["action"] == "rule_hit"]
    assert hits and {h["effect"] for h in hits} == {"observe"}
    c.cli("fault", "remove", str(watch))

    # Bad input: one line each, exit 2.
    for args, why in (
        (["--api", "Produc", "--error", "6"], "unknown API 'Produc'"),
        (["--api", "Produce", "--error", "NOT_AN_ERROR"], "unknown error 'NOT_AN_ERROR'"),
        (["--api", "Produce", "--error", "6", "--disconnect"], "exactly one"),
    ):
        proc = c.cli("fault", "add", *args, check=False)
        assert proc.returncode == 2, proc.stderr
        assert why in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = c.cli("fault", "remove", "4242", check=False)
    assert proc.returncode == 2 and "no rule 4242" in proc.stderr
    # A topic that does not exist: accepted, listed, never hits; waiting for it times out (exit 1).
    proc = c.cli("fault", "add", "--api", "Produce", "--topic", "no-such-topic", "--error", "6")
    ghost = int(proc.stdout.strip())
    assert "does not exist" in proc.stderr
    assert f"{ghost}       0  Produce topic=no-such-topic" in c.cli("fault", "list").stdout
    proc = c.cli("fault", "wait", str(ghost), "--hits", "1", "--timeout", "0.5", check=False)
    assert proc.returncode == 1 and f"rule {ghost} fired 0 time(s), not 1" in proc.stderr


def test_chaos_refuses_a_bad_rules_file_before_anything_is_done(
    kafka_cluster: Cluster, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("- api: Produce\n  error: NOT_AN_ERROR\n")
    before = read_faults(kafka_cluster.root)
    proc = kafka_cluster.cli("chaos", "--duration", "30", "--rules", str(rules), check=False, timeout=60)
    assert proc.returncode == 2 and "rule 1: unknown error 'NOT_AN_ERROR'" in proc.stderr, proc.stderr
    assert read_faults(kafka_cluster.root) == before


@pytest.mark.chaos  # a cluster of its own and a short chaos run (about 30 s): `make chaos`
@pytest.mark.timeout(300)
def test_chaos_keeps_its_rules_on_restarted_brokers_and_removes_them(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "- api: Produce\n  topic: chaos\n  error: NOT_LEADER_OR_FOLLOWER\n  probability: 0.2\n  seed: 3\n"
    )
    for c in cluster_up(tmp_path / "root", 3, FAST):
        proc = c.cli(
            "chaos", "--seed", "1", "--duration", "12", "--interval", "2", "--faults", "kill",
            "--rate", "200", "--no-report", "--rules", str(rules), check=False, timeout=240,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        records = read_faults(c.root)
        actions = [r["action"] for r in records if r.get("rule_id") == 1]
        assert actions[0] == "rule_add" and actions[-1] == "rule_remove" and "rule_hit" in actions
        killed = {r["nodes"][0] for r in records if r["action"] == "kill"}
        assert killed
        # Every broker restarted while the rules were in force got them back (a broker the schedule kept
        # down until the end is restarted by the healing, after the rules were removed).
        removed_ms = next(r["ts_ms"] for r in records if r["action"] == "rule_remove")
        restarted = {r["nodes"][0] for r in records if r["action"] == "restart" and r["ts_ms"] < removed_ms}
        readded = {r["nodes"][0] for r in records if r["action"] == "rule_add" and len(r["nodes"]) == 1}
        assert restarted <= readded, (restarted, readded)
        assert "removed fault rule 1" in proc.stdout


def test_a_lost_offset_commit_answer_is_committed_again(kafka_cluster: Cluster) -> None:
    """A dropped OffsetCommit answer (the commit took effect): kafka-python's synchronous commit gives up,
    the application commits again, and the group's offset is right. An observe rule counts both
    OffsetCommit requests."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import KafkaTimeoutError

    c = kafka_cluster
    create(c, "commits")
    producer = KafkaProducer(bootstrap_servers=bootstrap(c), acks="all")
    for i in range(10):
        producer.send("commits", f"r{i}".encode(), partition=0)
    producer.flush(timeout=30)
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap(c),
        group_id="recommit",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=7000,
        session_timeout_ms=6000,  # group.min.session.timeout.ms
        heartbeat_interval_ms=1000,
    )
    try:
        consumer.subscribe(["commits"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        assert len(got) == 10
        watch = int(c.cli("fault", "observe", "--api", "OffsetCommit", "--group", "recommit").stdout.strip())
        lost = add_rule(
            c,
            "--api",
            "OffsetCommit",
            "--group",
            "recommit",
            "--drop-response",
            "--when",
            "after",
            "--count",
            "1",
        )
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):  # the answer never came: the client cannot know it took effect
            consumer.commit(timeout_ms=5000)
        print(f"commit with a lost answer gave up after {time.monotonic() - started:.1f} s")
        consumer.commit(timeout_ms=10000)  # the application commits again, and is answered
        c.cli("fault", "wait", str(lost), "--hits", "1", "--timeout", "5")
        c.cli("fault", "wait", str(watch), "--hits", "2", "--timeout", "5")  # the commit and the recommit
        assert consumer.committed(KTopicPartition("commits", 0)) == 10
    finally:
        consumer.close(autocommit=False)
