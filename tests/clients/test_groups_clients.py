"""Consumer groups with Kafka's own clients (docs/groups.md): kafka-python and confluent-kafka
(librdkafka) group consumers split a topic's partitions and rebalance when a member leaves, commit, close and
resume where they committed, also after the coordinator's broker is killed; kcat's balanced consumer reads a
topic."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient as CKAdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.errors import CommitFailedError

from protocol.api_keys import ApiKeys
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import BrokerLauncher, BrokerProcess, run_cli, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]

TOPIC = "t"
PARTITIONS = 4

Record = tuple[int, int, bytes]  # partition, offset, value


def produce(bootstrap: str, count: int, *, start: int = 0, partitions: int = PARTITIONS) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    for i in range(start, start + count):
        producer.send(TOPIC, value=f"v{i}".encode(), partition=i % partitions)
    producer.flush(timeout=30)
    producer.close()


# ------------------------------------------------------------------------------------------- consumers


@dataclass
class Member:
    """A group consumer polling in its own thread (a client's group work happens inside poll)."""

    name: str
    poll: Callable[[], list[Record]]
    assignment: Callable[[], set[int]]
    commit: Callable[[], None]
    close: Callable[[], None]
    records: list[Record] = field(default_factory=list)
    assigned: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    closed: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    empty_polls: int = 0  # polls that returned nothing

    def start(self) -> Member:
        threading.Thread(target=self._run, name=self.name, daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                got = self.poll()
                if got:
                    self.records += got
                    self.commit()
                else:
                    self.empty_polls += 1
                self.assigned = self.assignment()
        except BaseException as exc:  # shown by the test that waits on this member
            self.error = exc
        finally:
            try:
                self.close()
            finally:
                self.closed.set()

    def shutdown(self, timeout: float = 20) -> None:
        self.stop.set()
        assert self.closed.wait(timeout), f"{self.name} did not close"
        assert self.error is None, f"{self.name} failed: {self.error!r}"


def kafka_python_member(bootstrap: str, group: str, name: str) -> Member:
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        max_poll_interval_ms=30000,
    )

    def poll() -> list[Record]:
        # A long poll: kafka-python 3.0.12 leaves a member without heartbeats when a JoinGroup outlasts the
        # poll that sent it (docs/groups.md), and a rebalance waits for the other members to rejoin.
        batches = consumer.poll(timeout_ms=3000)
        return [(m.partition, m.offset, m.value) for msgs in batches.values() for m in msgs]

    def commit() -> None:
        # A commit refused because the group rebalanced under it: as an application does, poll again.
        with contextlib.suppress(CommitFailedError):
            consumer.commit()

    return Member(
        name,
        poll,
        lambda: {tp.partition for tp in consumer.assignment()},
        commit,
        lambda: consumer.close(),
    )


def confluent_member(bootstrap: str, group: str, name: str, instance: str | None = None) -> Member:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if instance is not None:
        config["group.instance.id"] = instance  # a static member (KIP-345)
    consumer = CKConsumer(config)
    consumer.subscribe([TOPIC])

    def poll() -> list[Record]:
        out: list[Record] = []
        for msg in consumer.consume(num_messages=100, timeout=0.2):
            if msg.error() is None:
                out.append((msg.partition(), msg.offset(), msg.value()))
        return out

    def commit() -> None:
        # A commit refused because the group rebalanced under it: as an application does, poll again.
        with contextlib.suppress(KafkaException):
            consumer.commit(asynchronous=False)

    return Member(
        name,
        poll,
        lambda: {tp.partition for tp in consumer.assignment()},
        commit,
        lambda: consumer.close(),
    )


MEMBERS: dict[str, Callable[[str, str, str], Member]] = {
    "kafka-python": kafka_python_member,
    "confluent-kafka": confluent_member,
}


def wait_records(members: list[Member], count: int, timeout: float = 60) -> None:
    def done() -> bool:
        for member in members:
            assert member.error is None, f"{member.name} failed: {member.error!r}"
        return len({(p, o) for m in members for p, o, _ in m.records}) >= count

    wait_until(
        done,
        timeout=timeout,
        interval=0.1,
        message=lambda: f"{count} records; got {[len(m.records) for m in members]}",
    )


def wait_nothing_more(member: Member, timeout: float = 30) -> None:
    """Until a whole poll of ``member``, begun after it read what it had to, returned nothing."""
    seen = member.empty_polls
    # (a poll under way now began after the last records were read: if it returns nothing, nothing more came)
    wait_until(lambda: member.empty_polls > seen, timeout=timeout, interval=0.05, message="an empty poll")


def values(members: list[Member]) -> list[bytes]:
    return sorted(v for m in members for _, _, v in m.records)


def expected(start: int, stop: int) -> list[bytes]:
    return sorted(f"v{i}".encode() for i in range(start, stop))


# ------------------------------------------------------------------------------------------- one broker


@pytest.fixture
def broker(broker_launcher: BrokerLauncher) -> Iterator[BrokerProcess]:
    parts = ",".join(f"{TOPIC}-{p}" for p in range(PARTITIONS))
    yield broker_launcher.start(
        1,
        {
            "initial.leader.partitions": f"{parts},__consumer_offsets-0",
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
    )


@pytest.mark.parametrize("client", MEMBERS)
def test_two_members_split_the_partitions_rebalance_when_one_leaves_and_resume(
    broker: BrokerProcess, client: str
) -> None:
    bootstrap = broker.address
    make = MEMBERS[client]
    produce(bootstrap, 40)
    a = make(bootstrap, "split", f"{client}-a").start()
    b = make(bootstrap, "split", f"{client}-b").start()
    try:
        # (Each member's view is the one its last poll left: during the rebalance they may overlap.)
        wait_until(
            lambda: (
                a.assigned
                and b.assigned
                and not a.assigned & b.assigned
                and len(a.assigned | b.assigned) == PARTITIONS
            ),
            timeout=60,
            message=lambda: f"the partitions split between the two members: {a.assigned} / {b.assigned}",
        )
        wait_records([a, b], 40)

        def described() -> dict[str, Any] | None:
            out = run_cli("group", "describe", "split", "--bootstrap-server", bootstrap, "-o", "json")
            doc: dict[str, Any] = json.loads(out.stdout)
            done = len(doc["members"]) == 2 and len(doc["partitions"]) == PARTITIONS and doc["total_lag"] == 0
            return doc if done else None

        # `isrsim group describe` (kafka-consumer-groups): two members, each partition owned, no lag left.
        doc = wait_until(described, timeout=30, message="the group described with no lag")
        assert doc["state"] == "Stable" and doc["protocol"] == "range"
        owners = {r["partition"]: r["client_id"] for r in doc["partitions"]}
        assert set(owners.values()) == {f"{client}-a", f"{client}-b"}
        assert all(r["committed_offset"] == r["log_end_offset"] == 10 for r in doc["partitions"])
        b.shutdown()  # LeaveGroup: a takes every partition
        wait_until(
            lambda: a.assigned == set(range(PARTITIONS)),
            timeout=60,
            message=lambda: f"all partitions on the remaining member: {a.assigned}",
        )
        produce(bootstrap, 20, start=40)
        wait_records([a, b], 60)
    finally:
        a.shutdown()
        b.stop.set()
    assert values([a, b]) == expected(0, 60)  # each record exactly once across the rebalance

    # Closed with everything committed: a new member starts at the committed offsets.
    produce(bootstrap, 8, start=60)
    c = make(bootstrap, "split", f"{client}-c").start()
    try:
        wait_records([c], 8)
        wait_nothing_more(c)
    finally:
        c.shutdown()
    assert values([c]) == expected(60, 68)
    rebalanced = broker.events("group_rebalanced")
    assert [e["generation_id"] for e in rebalanced if e["group_id"] == "split"][-1] >= 3


def test_kcat_balanced_consumer_reads_the_topic(broker: BrokerProcess) -> None:
    produce(broker.address, 12)
    out = subprocess.run(
        ["kcat", "-b", broker.address, "-G", "kcat-group", "-o", "beginning", "-e", "-q", TOPIC],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert sorted(out.stdout.split()) == sorted(f"v{i}" for i in range(12))
    joined = [e for e in broker.events("group_rebalanced") if e["group_id"] == "kcat-group"]
    assert joined and joined[0]["protocol_type"] == "consumer"


def test_kafka_python_admin_lists_and_describes_groups_and_their_offsets(broker: BrokerProcess) -> None:
    produce(broker.address, 8)
    member = kafka_python_member(broker.address, "admin-seen", "admin-member").start()
    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        wait_records([member], 8)
        wait_until(
            lambda: admin.describe_groups(["admin-seen"])["admin-seen"]["group_state"] == "Stable",
            timeout=30,
            message="the group Stable",
        )
        assert {
            "group_id": "admin-seen",
            "protocol_type": "consumer",
            "group_state": "Stable",
        } in admin.list_groups()
        group = admin.describe_groups(["admin-seen"])["admin-seen"]
        assert group["protocol_data"] == "range" and group["members"][0]["client_id"] == "admin-member"
        offsets = admin.list_group_offsets("admin-seen")["admin-seen"]
        assert {tp.partition: o.offset for tp, o in offsets.items()} == {p: 2 for p in range(PARTITIONS)}
    finally:
        member.shutdown()
        admin.close()
    assert admin_group_state(broker.address, "admin-seen") == "Empty"


def test_confluent_admin_deletes_an_empty_group_only(broker: BrokerProcess) -> None:
    """librdkafka's AdminClient.delete_consumer_groups (DeleteGroups): refused with NON_EMPTY_GROUP while a
    member is in the group, done once it left; the group and its offsets are then gone."""
    produce(broker.address, 8)
    member = confluent_member(broker.address, "to-delete", "deleted-member").start()
    admin = CKAdminClient({"bootstrap.servers": broker.address})

    def delete(group: str) -> KafkaError | None:
        try:
            admin.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=30)
        except KafkaException as exc:
            return exc.args[0]  # type: ignore[no-any-return]
        return None

    try:
        wait_records([member], 8)
        refused = delete("to-delete")
        assert refused is not None and refused.code() == KafkaError.NON_EMPTY_GROUP, refused
    finally:
        member.shutdown()
    missing = delete("never-seen")
    assert missing is not None and missing.code() == KafkaError.GROUP_ID_NOT_FOUND, missing
    assert delete("to-delete") is None
    assert admin_group_state(broker.address, "to-delete") == "Dead"
    kp_admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        assert kp_admin.list_group_offsets("to-delete")["to-delete"] == {}
    finally:
        kp_admin.close()


def test_confluent_static_member_restarts_in_its_place_without_a_rebalance(broker: BrokerProcess) -> None:
    """KIP-345 with librdkafka's ``group.instance.id``: a static member closes without leaving the group,
    and a new consumer with the same instance id takes its place (a new member id, the same assignment)
    with no new generation, and reads on from the committed offsets."""
    produce(broker.address, 8)

    def generations() -> list[int]:
        return [e["generation_id"] for e in broker.events("group_rebalanced") if e["group_id"] == "static"]

    def describe() -> dict[str, Any]:
        out = run_cli("group", "describe", "static", "--bootstrap-server", broker.address, "-o", "json")
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    first = confluent_member(broker.address, "static", "first", instance="static-1").start()
    wait_records([first], 8)
    wait_until(lambda: describe()["state"] == "Stable", timeout=30, message="the group Stable")
    before = generations()
    old_member = describe()["members"][0]["member_id"]
    first.shutdown()
    # A static member does not leave on close: the group keeps it, Stable.
    kept = describe()
    assert kept["state"] == "Stable" and [m["member_id"] for m in kept["members"]] == [old_member]

    produce(broker.address, 8, start=8)
    second = confluent_member(broker.address, "static", "second", instance="static-1").start()
    try:
        wait_records([second], 8)
        assert sorted(values([second])) == expected(8, 16)
        now = describe()
        assert now["state"] == "Stable"
        assert [(m["group_instance_id"], m["member_id"] != old_member) for m in now["members"]] == [
            ("static-1", True)
        ]
        assert generations() == before  # no rebalance
    finally:
        second.shutdown()


def test_confluent_static_member_is_fenced_by_its_twin(broker: BrokerProcess) -> None:
    """Two librdkafka consumers with the same ``group.instance.id``: the later one takes the place, and
    the earlier one is fenced (FENCED_INSTANCE_ID on its next heartbeat), which librdkafka reports as a
    fatal error (_FATAL, "Static consumer fenced by other consumer with same group.instance.id")."""
    produce(broker.address, 4)
    errors: list[KafkaError] = []  # what the first twin's polls report

    def consumer(name: str) -> CKConsumer:
        c = CKConsumer(
            {
                "bootstrap.servers": broker.address,
                "group.id": "twins",
                "client.id": name,
                "group.instance.id": "twin",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        c.subscribe([TOPIC])
        return c

    def assigned(c: CKConsumer) -> bool:
        c.poll(0.2)
        return bool(c.assignment())

    first = consumer("first")
    second: CKConsumer | None = None
    try:
        wait_until(lambda: assigned(first), timeout=30, message="the first twin assigned")
        second = consumer("second")
        twin = second
        wait_until(lambda: assigned(twin), timeout=30, message="the second twin assigned")

        def fenced() -> bool:
            try:
                msg = first.poll(0.2)
            except KafkaException as exc:
                errors.append(exc.args[0])
            else:
                if msg is not None and msg.error() is not None:
                    errors.append(msg.error())
            return any(e.code() == KafkaError._FATAL and "fenced" in e.str() for e in errors)

        wait_until(fenced, timeout=30, message=lambda: f"the first twin fenced: {errors}")
        # The twin that took the place carries on.
        for _ in range(5):
            msg = twin.poll(0.2)
            assert msg is None or msg.error() is None or msg.error().code() != KafkaError._FATAL
        assert twin.assignment()
    finally:
        for c in (first, second):
            if c is not None:
                with contextlib.suppress(Exception):
                    c.close()


def admin_group_state(bootstrap: str, group: str) -> str:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return str(admin.describe_groups([group])[group]["group_state"])
    finally:
        admin.close()


# ------------------------------------------------------------------------------------------- a cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    settings = (*FAST, "offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=0")
    yield from cluster_up(tmp_path_factory.mktemp("groups") / "root", settings=settings)


def _coordinator(cluster: Cluster, group: str) -> int | None:
    for b in cluster.info.brokers:
        try:
            resp = cluster.ask(b.id, ApiKeys.FIND_COORDINATOR, {"key": group})
        except Exception:
            continue
        if resp["error_code"] == 0:
            return int(resp["node_id"])
    return None


@pytest.mark.parametrize("client", MEMBERS)
def test_resume_after_the_coordinators_broker_is_killed_skips_nothing(cluster: Cluster, client: str) -> None:
    group = f"failover-{client}"
    if TOPIC not in {t for t in _topics(cluster)}:
        cluster.cli("topic", "create", TOPIC, "--partitions", str(PARTITIONS), "--replication-factor", "3")
        wait_until(lambda: cluster.isr_full(TOPIC), timeout=30, message="the topic fully replicated")
    live = [b for b in cluster.info.brokers if _alive(cluster, b.id)]
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in live)
    base = _log_end(cluster)
    produce(bootstrap, 40, start=base)

    # A new group reads the topic from the beginning (records of earlier tests included).
    first = MEMBERS[client](bootstrap, group, f"{client}-first").start()
    try:
        wait_records([first], base + 40)
    finally:
        first.shutdown()  # every record read was committed before the close
    assert values([first]) == expected(0, base + 40)

    coordinator = wait_until(lambda: _coordinator(cluster, group), timeout=30, message="the coordinator")
    wait_until(
        lambda: cluster.isr_full("__consumer_offsets"), timeout=30, message="__consumer_offsets in sync"
    )
    cluster.cli("broker", "kill", str(coordinator), "--signal", "KILL")
    moved = wait_until(
        lambda: (c := _coordinator(cluster, group)) is not None and c != coordinator and c,
        timeout=60,
        message="a new coordinator",
    )
    assert moved != coordinator

    survivors = ",".join(f"{b.host}:{b.port}" for b in cluster.info.brokers if b.id != coordinator)
    produce(survivors, 20, start=base + 40)
    second = MEMBERS[client](survivors, group, f"{client}-second").start()
    try:
        wait_records([second], 20)
        wait_nothing_more(second)  # a consumer that started before the committed offsets would read more
    finally:
        second.shutdown()
    assert values([second]) == expected(
        base + 40, base + 60
    )  # from the committed offsets: none skipped, none twice
    cluster.cli("broker", "restart", str(coordinator))


def _topics(cluster: Cluster) -> set[str]:
    resp = cluster.ask("controller", ApiKeys.METADATA, {"topics": None})
    return {t["name"] for t in resp["topics"]}


def _alive(cluster: Cluster, broker_id: int) -> bool:
    try:
        cluster.ask(broker_id, ApiKeys.API_VERSIONS, {})
    except Exception:
        return False
    return True


def _log_end(cluster: Cluster) -> int:
    """How many records the test topic holds (earlier tests of the module wrote some)."""
    total = 0
    for p, meta in cluster.metadata(TOPIC).items():
        resp = cluster.ask(
            meta["leader_id"],
            ApiKeys.LIST_OFFSETS,
            {
                "replica_id": -1,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": -1}]}],
            },
        )
        total += int(resp["topics"][0]["partitions"][0]["offset"])
    return total


def test_members_carry_on_when_the_coordinator_is_isolated(cluster: Cluster) -> None:
    """The coordinator's broker cut off from everyone (``net isolate``): the controller moves the group's
    ``__consumer_offsets`` partition to another broker, the member finds the new coordinator there and goes
    on; after the heal every record was read (at least once: what was read but not committed before the
    isolation may be read again) and the group's committed offsets reach the end of the topic."""
    client = "kafka-python"
    group = "isolated-coordinator"
    if TOPIC not in _topics(cluster):
        cluster.cli("topic", "create", TOPIC, "--partitions", str(PARTITIONS), "--replication-factor", "3")
        wait_until(lambda: cluster.isr_full(TOPIC), timeout=30, message="the topic fully replicated")
    wait_until(
        lambda: all(_alive(cluster, b.id) for b in cluster.info.brokers), timeout=30, message="brokers up"
    )
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in cluster.info.brokers)
    base = _log_end(cluster)
    produce(bootstrap, 20, start=base)
    member = MEMBERS[client](bootstrap, group, f"{client}-isolated").start()
    try:
        wait_records([member], base + 20)
        coordinator = wait_until(lambda: _coordinator(cluster, group), timeout=30, message="the coordinator")
        wait_until(lambda: cluster.isr_full("__consumer_offsets"), timeout=30, message="offsets in sync")
        cluster.cli("net", "isolate", str(coordinator))
        try:
            others = [b for b in cluster.info.brokers if b.id != coordinator]
            moved = wait_until(
                lambda: (c := _coordinator(cluster, group)) is not None and c != coordinator and c,
                timeout=60,
                message="the coordinator to move away from the isolated broker",
            )
            produce(",".join(f"{b.host}:{b.port}" for b in others), 20, start=base + 20)
            wait_records([member], base + 40, timeout=90)
        finally:
            cluster.cli("net", "heal")

        def lag() -> int:
            out = run_cli(
                "group", "describe", group, "--bootstrap-server", bootstrap, "-o", "json", timeout=60
            )
            return int(json.loads(out.stdout)["total_lag"])

        # A commit refused while the group moved is made again once the member rejoined and read again.
        wait_until(lambda: lag() == 0, timeout=60, interval=1, message="the group's lag to reach 0")
    finally:
        member.shutdown(timeout=60)
    assert set(values([member])) == set(expected(0, base + 40))  # nothing skipped
    assert moved != coordinator
