"""Idempotent producers (KIP-98) on a managed cluster: a retried batch is written once, across a leader
failover (the follower rebuilt the producer state from what it fetched) and a restart (snapshot plus log
tail); sequence gaps and older epochs are refused."""

from __future__ import annotations

import functools
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.producer_id_manager import UNMANAGED_RANGE_SIZE
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.records import build_simple_batch, decode_records, iter_batches
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import REPO_ROOT, BrokerLauncher, python_cmd, request, wait_until

pytestmark = pytest.mark.integration

PID = 4242


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root")


def batch(seq: int, *, epoch: int = 0, count: int = 2) -> bytes:
    return build_simple_batch(
        [f"seq-{seq + i}".encode() for i in range(count)],
        producer_id=PID,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def produce(c: Cluster, broker_id: int, records: bytes, topic: str = "i") -> dict[str, Any]:
    b = c.info.broker(broker_id)
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    resp = trio.run(functools.partial(request, b.host, b.port, ApiKeys.PRODUCE, body, timeout=20))
    return resp["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def produce_ok(c: Cluster, records: bytes) -> int:
    """Sends to the current leader, retrying while leadership moves; returns the base offset answered."""

    def attempt() -> int | None:
        try:
            answer = produce(c, c.leader("i", 0), records)
        except Exception:
            return None
        if answer["error_code"] == Errors.NONE:
            return int(answer["base_offset"]) + 1  # truthy for offset 0
        assert answer["error_code"] in (
            Errors.NOT_LEADER_OR_FOLLOWER,
            Errors.NOT_ENOUGH_REPLICAS,
            Errors.REQUEST_TIMED_OUT,
            Errors.UNKNOWN_TOPIC_OR_PARTITION,
        ), answer
        return None

    return wait_until(attempt, timeout=30, interval=0.2, message="an answer from the leader") - 1


def sequences(c: Cluster, broker_id: int) -> list[tuple[int, int, int]]:
    directory = Path(c.info.broker(broker_id).data_dir) / "i-0"
    data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    return [(h.base_offset, h.producer_epoch, h.base_sequence) for _, h in iter_batches(data)]


def test_retries_are_written_once_across_failover_and_restart(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "i", "--partitions", "1", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("i"), timeout=30, message="a full ISR")
    offsets = {seq: produce_ok(cluster, batch(seq)) for seq in (0, 2, 4, 6)}
    assert offsets == {0: 0, 2: 2, 4: 4, 6: 6}

    # A retry on the same leader: the original offsets, nothing written.
    leader = cluster.leader("i", 0)
    again = produce(cluster, leader, batch(2))
    assert (again["error_code"], again["base_offset"]) == (Errors.NONE, 2)
    gap = produce(cluster, leader, batch(12))
    assert gap["error_code"] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "out of order sequence number" in gap["error_message"]
    offsets[8] = produce_ok(cluster, batch(8))

    # Failover: the new leader rebuilt the state as a follower, so the retries are found there too.
    cluster.cli("broker", "kill", str(leader))
    wait_until(lambda: cluster.leader("i", 0) not in (-1, leader), timeout=20, message="a new leader")
    for seq in (4, 6, 8):
        assert produce_ok(cluster, batch(seq)) == offsets[seq]
    offsets[10] = produce_ok(cluster, batch(10))
    assert offsets[10] == 10

    # The killed broker restarts (no clean stop: its roll snapshot or the log start, plus the tail) and
    # catches up; then the leader stops cleanly (a snapshot at its log end) and restarts.
    cluster.cli("broker", "restart", str(leader))
    wait_until(lambda: cluster.isr_full("i"), timeout=30, message="the restarted broker back in the ISR")
    second = cluster.leader("i", 0)
    cluster.cli("broker", "restart", str(second))
    wait_until(lambda: cluster.isr_full("i"), timeout=30, message="the ISR full again")
    for seq in (6, 8, 10):
        assert produce_ok(cluster, batch(seq)) == offsets[seq]
    # An older epoch is fenced once a newer one wrote.
    assert produce_ok(cluster, batch(0, epoch=1)) == 12
    old = produce(cluster, cluster.leader("i", 0), batch(12))
    assert old["error_code"] == Errors.INVALID_PRODUCER_EPOCH

    cluster.wait_converged("i", 1)
    expected = [(offsets[s], 0, s) for s in range(0, 12, 2)] + [(12, 1, 0)]
    for b in cluster.info.brokers:
        assert sequences(cluster, b.id) == expected, f"broker {b.id}"
    snapshots = list((Path(cluster.info.broker(second).data_dir) / "i-0").glob("*.snapshot"))
    assert snapshots, "the clean stop wrote a producer snapshot"


def init_producer_id(host: str, port: int) -> int:
    """INIT_PRODUCER_ID until it is answered with an id (COORDINATOR_LOAD_IN_PROGRESS while the broker
    waits for its first block)."""

    def attempt() -> int | None:
        resp = trio.run(
            functools.partial(request, host, port, ApiKeys.INIT_PRODUCER_ID, {"transactional_id": None})
        )
        if resp["error_code"] == Errors.COORDINATOR_LOAD_IN_PROGRESS:
            return None
        assert resp["error_code"] == Errors.NONE and resp["producer_epoch"] == 0, resp
        return int(resp["producer_id"]) + 1

    return wait_until(attempt, timeout=20, interval=0.1, message="a producer id") - 1


def test_producer_ids_come_from_durable_controller_blocks(cluster: Cluster) -> None:
    def pid(broker_id: int) -> int:
        b = cluster.info.broker(broker_id)
        return init_producer_id(b.host, b.port)

    one = [pid(1) for _ in range(3)]
    two = pid(2)
    assert one[1:] == [one[0] + 1, one[0] + 2]
    assert one[0] // 1000 != two // 1000 and {one[0] % 1000, two % 1000} == {0}
    seen = max([*one, two])
    cluster.cli("controller", "kill")
    cluster.cli("controller", "restart")
    cluster.cli("broker", "restart", "1")
    after = pid(1)
    assert after > seen and after % 1000 == 0, (after, seen)
    # The controller is a one-voter quorum (SPEC §11): the blocks are in its metadata log's
    # ControllerState records.
    state = last_controller_state(Path(cluster.info.controller.dir) / "__cluster_metadata-0")
    assert state["producer_ids"]["next_producer_id"] > after


def last_controller_state(metadata_log: Path) -> dict[str, Any]:
    """The cluster state of the last ControllerState record in a voter's metadata log (its segments)."""
    import msgpack

    states = []
    for segment in sorted(metadata_log.glob("*.log")):
        data = segment.read_bytes()
        for pos, _ in iter_batches(data):
            _, records = decode_records(data, pos)
            for r in records:
                value = msgpack.unpackb(r.value, raw=False)
                if value.get("type") == "ControllerState":
                    states.append(value["state"])
    assert states, f"no ControllerState record in {metadata_log}"
    return states[-1]


def test_unmanaged_broker_never_reuses_producer_ids(broker_launcher: BrokerLauncher) -> None:
    broker, other = broker_launcher.start_many([1, 2])
    first = init_producer_id(broker.host, broker.port)
    broker.stop()
    broker.restart()
    second = init_producer_id(broker.host, broker.port)
    # Each unmanaged broker has its own range of ids (broker_id * 2^31 on): a restart takes the next block.
    base = broker.broker_id * UNMANAGED_RANGE_SIZE
    assert (first, second) == (base, base + 1000)
    # Another unmanaged broker never hands out the same ids (they share no allocator).
    assert init_producer_id(other.host, other.port) == other.broker_id * UNMANAGED_RANGE_SIZE


def leader_log_end(c: Cluster, broker_id: int, topic: str) -> int:
    b = c.info.broker(broker_id)
    resp = trio.run(
        functools.partial(
            request, b.host, b.port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": [{"name": topic}]}
        )
    )
    return int(resp["partitions"][0]["log_end_offset"])


def produce_unanswered(c: Cluster, broker_id: int, records: bytes, topic: str) -> None:
    with pytest.raises(trio.TooSlowError):
        b = c.info.broker(broker_id)
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 5_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        }
        trio.run(functools.partial(request, b.host, b.port, ApiKeys.PRODUCE, body, timeout=1.5))


def test_lost_responses_to_clients_make_duplicates_only_without_idempotence(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "l", "--partitions", "1", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("l"), timeout=30, message="a full ISR")
    leader = cluster.leader("l", 0)
    out = cluster.cli("net", "loss", str(leader), "clients", "--percent", "100", "--one-way").stdout
    assert f"100% loss {leader} -> clients" in out
    assert f"{leader} -> clients" in cluster.cli("net", "status").stdout
    plain = build_simple_batch([b"p1", b"p2"])
    idem = batch(0)
    # Both requests take effect; neither answer arrives.
    produce_unanswered(cluster, leader, plain, "l")
    produce_unanswered(cluster, leader, idem, "l")
    assert leader_log_end(cluster, leader, "l") == 4
    cluster.cli("net", "heal", str(leader), "clients")
    # The retries: the plain batch is written again, the idempotent one answered with its first offset.
    assert produce(cluster, leader, plain, "l")["base_offset"] == 4
    again = produce(cluster, leader, idem, "l")
    assert (again["error_code"], again["base_offset"]) == (Errors.NONE, 2)
    assert leader_log_end(cluster, leader, "l") == 6
    recorded = [json.loads(line) for line in (cluster.root / "faults.jsonl").read_text().splitlines()]
    assert [r["nodes"] for r in recorded if r["action"] in ("loss", "heal")] == [
        [str(leader), "clients"],
        [str(leader), "clients"],
    ]


def replica_values(c: Cluster, broker_id: int, topic: str) -> list[bytes]:
    directory = Path(c.info.broker(broker_id).data_dir) / f"{topic}-0"
    data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    values: list[bytes] = []
    for pos, _ in iter_batches(data):
        _, records = decode_records(data, pos)
        values += [r.value or b"" for r in records]
    return values


def lose_answers_to_clients(c: Cluster, percent: int = 30) -> None:
    for b in c.info.brokers:
        c.cli("net", "loss", str(b.id), "clients", "--percent", str(percent), "--one-way", "--seed", "7")


@pytest.mark.clients
def test_kafka_python_idempotent_producer_under_lost_answers_failover_and_restart(cluster: Cluster) -> None:
    """30 % of the leaders' answers to clients lost, a leader killed, restarted, and the
    next leader killed: kafka-python's idempotent producer leaves one copy of every record, in order."""
    kafka = pytest.importorskip("kafka")
    cluster.cli("topic", "create", "kp", "--partitions", "1", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("kp"), timeout=30, message="a full ISR")
    total = 1500
    sent = 0
    failures: list[BaseException] = []
    started = threading.Event()

    def produce_all() -> None:
        nonlocal sent
        # Bootstrapped before the fault (a client that cannot bootstrap gives up: that is not this test).
        producer = kafka.KafkaProducer(
            bootstrap_servers=[b.address for b in cluster.info.brokers],
            enable_idempotence=True,
            acks="all",
            linger_ms=10,
            request_timeout_ms=1500,
            retry_backoff_ms=100,
            delivery_timeout_ms=180_000,
            metadata_max_age_ms=1000,
            max_in_flight_requests_per_connection=5,
        )
        try:
            producer.send("kp", value=b"first").get(timeout=30)
            started.set()
            futures = []
            for i in range(total):
                futures.append(producer.send("kp", value=f"{i:06d}".encode()))
                sent = i + 1
                time.sleep(0.01)
            producer.flush(timeout=170)
            for f in futures:
                f.get(timeout=5)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
        finally:
            producer.close(timeout=10)

    worker = threading.Thread(target=produce_all, daemon=True)
    worker.start()
    wait_until(started.is_set, timeout=60, message="the producer to start")
    lose_answers_to_clients(cluster)
    wait_until(lambda: sent >= total // 4, timeout=60, message="a quarter of the records sent")
    first = cluster.leader("kp", 0)
    cluster.cli("broker", "kill", str(first))
    wait_until(lambda: cluster.leader("kp", 0) not in (-1, first), timeout=20, message="a new leader")
    wait_until(lambda: sent >= total // 2, timeout=60, message="half of the records sent")
    cluster.cli("broker", "restart", str(first))
    wait_until(lambda: cluster.isr_full("kp"), timeout=60, message="the restarted broker back in the ISR")
    lose_answers_to_clients(cluster)  # a restarted broker starts healed
    second = cluster.leader("kp", 0)
    cluster.cli("broker", "kill", str(second))
    wait_until(lambda: cluster.leader("kp", 0) not in (-1, second), timeout=20, message="a third leader")
    worker.join(timeout=240)
    assert not worker.is_alive(), "the producer did not finish"
    assert not failures, failures
    dropped = sum(
        trio.run(functools.partial(request, b.host, b.port, ApiKeys.NET_FAULTS, {"operation": "describe"}))[
            "frames_dropped"
        ]
        for b in cluster.info.brokers
        if b.id != second
    )
    assert dropped > 0, "no answer was lost: the test tested nothing"
    cluster.cli("net", "heal")
    cluster.cli("broker", "restart", str(second))
    cluster.wait_converged("kp", 1)
    expected = [b"first"] + [f"{i:06d}".encode() for i in range(total)]
    for b in cluster.info.brokers:
        assert replica_values(cluster, b.id, "kp") == expected, f"broker {b.id}"


@pytest.mark.clients
def test_isrsim_produce_under_lost_answers_failover_and_restart(cluster: Cluster) -> None:
    """The same for `isrsim produce` (idempotent by default): one copy of every record, in order."""
    cluster.cli("topic", "create", "ip", "--partitions", "1", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("ip"), timeout=30, message="a full ISR")
    lose_answers_to_clients(cluster)
    total = 1200
    args = ["produce", "ip", "--count", str(total), "--rate", "150", "--batch-records", "20",
            "--timeout-ms", "1000", "--no-progress", "--data-dir", str(cluster.root)]  # fmt: skip
    proc = subprocess.Popen(
        python_cmd(*args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(lambda: leader_log_end(cluster, cluster.leader("ip", 0), "ip") >= total // 4, timeout=90,
                   message="a quarter of the records written")  # fmt: skip
        first = cluster.leader("ip", 0)
        cluster.cli("broker", "kill", str(first))
        wait_until(lambda: cluster.leader("ip", 0) not in (-1, first), timeout=20, message="a new leader")
        cluster.cli("broker", "restart", str(first))
        wait_until(lambda: cluster.isr_full("ip"), timeout=60, message="the restarted broker back in the ISR")
        lose_answers_to_clients(cluster)
        second = cluster.leader("ip", 0)
        cluster.cli("broker", "kill", str(second))
        wait_until(lambda: cluster.leader("ip", 0) not in (-1, second), timeout=20, message="a third leader")
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert f"{total:,} records acknowledged" in out, out
    cluster.cli("net", "heal")
    cluster.cli("broker", "restart", str(second))
    cluster.wait_converged("ip", 1)
    for b in cluster.info.brokers:
        seqs = [int(v.split(b":")[1]) for v in replica_values(cluster, b.id, "ip")]
        assert seqs == list(range(total)), f"broker {b.id}: {len(seqs)} records"
