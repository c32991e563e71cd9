"""A managed cluster (real controller + 3 brokers, `isrsim cluster up`) through failures, driven by the CLI
as a user would."""

from __future__ import annotations

import functools
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from kit.processes import send_signal
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.records import build_simple_batch
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import REPO_ROOT, python_cmd, request, wait_until

pytestmark = pytest.mark.integration


# Each test also runs on a `cluster up --secure` cluster (SASL_SSL everywhere) under `make secure`.
@pytest.fixture(params=[False, pytest.param(True, marks=pytest.mark.secure)], ids=["plaintext", "secure"])
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", secure=request.param)


def _produce_one(c: Cluster, broker_id: int, topic: str, partition: int, acks: int, timeout_ms: int) -> dict:  # type: ignore[type-arg]
    b = c.info.broker(broker_id)
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": partition, "records": build_simple_batch([b"zombie"])}],
            }
        ],
    }
    resp = trio.run(
        functools.partial(
            request,
            b.host,
            b.port,
            ApiKeys.PRODUCE,
            body,
            timeout=timeout_ms / 1000 + 10,
            security=c.security,
        )
    )
    return resp["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def test_readme_session_and_status(cluster: Cluster) -> None:
    # A producer to a topic that does not exist waits 10 s for it to appear before it gives up: it is
    # started first and its error read at the end, so that the wait overlaps with the session.
    missing_proc = subprocess.Popen(
        python_cmd("produce", "nope", "--count", "1", "--data-dir", str(cluster.root)),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    cluster.cli("topic", "create", "t", "--partitions", "6", "--replication-factor", "3")
    out = cluster.cli("produce", "t", "--count", "20000", "--acks", "all", "--no-progress").stdout
    assert "20,000 records acknowledged" in out
    status = cluster.cli("cluster", "status").stdout
    assert "running" in status and "t" in status
    described = cluster.cli("topic", "describe", "t").stdout
    assert "6 partition(s)" in described
    # Nothing under-replicated: nothing printed, as kafka-topics.
    assert cluster.cli("topic", "describe", "--under-replicated-partitions").stdout == ""
    assert sum(cluster.wait_converged("t", 6).values()) == 20_000
    consumed = cluster.cli("consume", "t", "--from-beginning", "--max-records", "20000", "--count-only")
    assert "Processed a total of 20,000 messages" in consumed.stderr
    # Errors name the problem and what to do.
    bad = cluster.cli("broker", "kill", "9", check=False)
    assert bad.returncode != 0 and "no broker 9" in bad.stderr
    try:
        _, missing_err = missing_proc.communicate(timeout=120)
    finally:
        if missing_proc.poll() is None:
            missing_proc.kill()
    assert missing_proc.returncode != 0 and "topic create" in missing_err


def test_sigkill_of_a_leader_under_acks_all(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "k", "--partitions", "3", "--replication-factor", "3")
    prod = cluster.producer("k", 60_000, rate=10_000)
    wait_until(lambda: len(cluster.acked()) >= 30, timeout=30, message="the workload to start")
    victim = cluster.leader("k", 0)
    killed_at = time.time()
    cluster.cli("broker", "kill", str(victim))
    elected = wait_until(
        lambda: [
            e
            for e in cluster.controller_events("leader_elected")
            if e["topic"] == "k" and e.get("previous_leader_id") == victim and e["ts_ms"] >= killed_at * 1000
        ],
        timeout=15,
        message="a new leader for the victim's partitions",
    )
    took_ms = elected[0]["ts_ms"] - killed_at * 1000
    assert took_ms <= 3000 + 1500, f"failover took {took_ms:.0f} ms with broker.session.timeout.ms=3000"
    assert not elected[0]["unclean"]
    acked_before = len(cluster.acked())
    wait_until(lambda: len(cluster.acked()) > acked_before + 20, timeout=30, message="producers to resume")
    assert prod.wait(120) == 0, prod.stderr.read() if prod.stderr else ""
    cluster.cli("broker", "restart", str(victim))
    wait_until(lambda: cluster.isr_full("k"), timeout=30, message="the restarted broker back in every ISR")
    cluster.wait_converged("k", 3)
    assert cluster.assert_no_acked_batch_lost("k", 3) == 60_000 // 200


def test_clean_bounce_of_every_broker_surfaces_no_errors(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "b", "--partitions", "6", "--replication-factor", "3")
    prod = cluster.producer("b", 120_000, rate=8_000)
    wait_until(lambda: len(cluster.acked()) >= 20, timeout=30, message="the workload to start")
    for broker_id in (1, 2, 3):
        cluster.cli("broker", "restart", str(broker_id))
        wait_until(lambda: cluster.isr_full("b"), timeout=30, message=f"broker {broker_id} back in every ISR")
    _out, err = prod.communicate(timeout=120)
    assert prod.returncode == 0, err
    assert "batches were not acknowledged" not in err
    shutdowns = [e for e in cluster.controller_events() if "controlled" in str(e.get("reason", ""))]
    assert shutdowns, "no controlled shutdown was journaled by the controller"
    cluster.wait_converged("b", 6)
    assert cluster.assert_no_acked_batch_lost("b", 6) == 120_000 // 200


def test_controller_restart_fences_the_old_controller_epoch(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "c", "--partitions", "2", "--replication-factor", "3")
    prod = cluster.producer("c", 40_000, rate=10_000)
    old_epoch = cluster.controller_events("controller_started")[-1]["controller_epoch"]
    cluster.cli("controller", "kill")
    cluster.cli("controller", "restart")
    new_epoch = cluster.controller_events("controller_started")[-1]["controller_epoch"]
    assert new_epoch == old_epoch + 1
    # The new controller still runs the cluster: a broker killed now is fenced and replaced.
    victim = cluster.leader("c", 0)
    cluster.cli("broker", "kill", str(victim))
    wait_until(lambda: cluster.leader("c", 0) not in (victim, -1), timeout=15, message="a new leader for c-0")
    # Brokers now reject a request carrying the old controller's epoch.
    survivor = next(b.id for b in cluster.info.brokers if b.id != victim)
    stale = {
        "controller_id": 1000,
        "controller_epoch": old_epoch,
        "broker_epoch": -1,
        "topic_states": [
            {
                "topic_name": "c",
                "partition_states": [
                    {
                        "partition_index": 0,
                        "controller_epoch": old_epoch,
                        "leader": survivor,
                        "leader_epoch": 99,
                        "isr": [survivor],
                        "partition_epoch": 99,
                        "replicas": [1, 2, 3],
                        "is_new": False,
                    }
                ],
            }
        ],
        "live_leaders": [],
    }
    resp = cluster.ask(survivor, ApiKeys.LEADER_AND_ISR, stale)
    assert resp["error_code"] == Errors.STALE_CONTROLLER_EPOCH
    # ... and one meant for an earlier registration of the broker (Kafka's stale broker epoch).
    registered = [e for e in cluster.controller_events("broker_registered") if e["broker_id"] == survivor][-1]
    stale_broker = {**stale, "controller_epoch": new_epoch, "broker_epoch": registered["broker_epoch"] - 1}
    resp = cluster.ask(survivor, ApiKeys.LEADER_AND_ISR, stale_broker)
    assert resp["error_code"] == Errors.STALE_BROKER_EPOCH
    assert prod.wait(120) == 0
    cluster.cli("broker", "restart", str(victim))
    wait_until(lambda: cluster.isr_full("c"), timeout=30, message="ISR full again")
    cluster.wait_converged("c", 2)
    assert cluster.assert_no_acked_batch_lost("c", 2) == 40_000 // 200


def test_broker_that_missed_50000_records_rejoins_the_isr(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "m", "--partitions", "1", "--replication-factor", "3")
    follower = next(r for r in cluster.metadata("m")[0]["replica_nodes"] if r != cluster.leader("m", 0))
    cluster.cli("broker", "kill", str(follower), "--signal", "TERM")
    wait_until(
        lambda: follower not in cluster.metadata("m")[0]["isr_nodes"], timeout=15, message="ISR shrink"
    )
    out = cluster.cli("produce", "m", "--count", "50000", "--acks", "all", "--no-progress").stdout
    assert "50,000 records acknowledged" in out
    cluster.cli("broker", "restart", str(follower))
    wait_until(lambda: cluster.isr_full("m"), timeout=30, message=f"broker {follower} to rejoin the ISR")
    assert cluster.wait_converged("m", 1) == {0: 50_000}
    joined = [
        e for e in cluster.controller_events("isr_changed") if e["topic"] == "m" and follower in e["isr"]
    ]
    assert joined and joined[-1]["reason"] == "alter_partition"


def test_zombie_leader_cannot_acknowledge_acks_all(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "z", "--partitions", "1", "--replication-factor", "3")
    cluster.cli("produce", "z", "--count", "1000", "--acks", "all", "--no-progress")
    zombie = cluster.leader("z", 0)
    pid = cluster.info.broker(zombie).pid
    cluster.cli("broker", "pause", str(zombie))
    try:
        wait_until(
            lambda: cluster.leader("z", 0) not in (zombie, -1), timeout=15, message="a replacement leader"
        )
    finally:
        send_signal(pid, signal.SIGCONT)
    # Straight after resuming, the zombie may still believe it leads: acks=1 can succeed there (Kafka's
    # documented loss case), but an acks=-1 write can never be acknowledged by it.
    resp = _produce_one(cluster, zombie, "z", 0, acks=-1, timeout_ms=1500)
    assert resp["error_code"] != Errors.NONE, resp
    assert resp["error_code"] in (
        Errors.NOT_LEADER_OR_FOLLOWER,
        Errors.REQUEST_TIMED_OUT,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
    )
    wait_until(
        lambda: cluster.isr_full("z"), timeout=30, message="the old leader back as a follower in the ISR"
    )
    cluster.wait_converged("z", 1)
    assert cluster.assert_no_acked_batch_lost("z", 1) == 5


def test_topic_min_insync_replicas_overrides_the_brokers(cluster: Cluster) -> None:
    """The brokers say min.insync.replicas=2; topic `strict` says 3 (CREATE_TOPICS config), which its leader
    learns from the controller (DESCRIBE_CONFIGS) and enforces, as Kafka's topic-level override."""
    cluster.cli("topic", "create", "strict", "--partitions", "1", "--replication-factor", "3",
                "--config", "min.insync.replicas=3")  # fmt: skip
    cluster.cli("topic", "create", "lax", "--partitions", "1", "--replication-factor", "3")
    strict_leader, lax_leader = cluster.leader("strict", 0), cluster.leader("lax", 0)
    leader_log = Path(cluster.info.broker(strict_leader).log)
    wait_until(
        lambda: (
            "strict-0" in leader_log.read_text()
            and "min.insync.replicas=3 (topic config)" in leader_log.read_text()
        ),
        timeout=15,
        message="the leader of strict-0 to apply the topic's min.insync.replicas",
    )
    assert (
        _produce_one(cluster, strict_leader, "strict", 0, acks=-1, timeout_ms=5000)["error_code"]
        == Errors.NONE
    )
    follower = next(b.id for b in cluster.info.brokers if b.id not in (strict_leader, lax_leader))
    cluster.cli("broker", "kill", str(follower), "--signal", "TERM")
    wait_until(
        lambda: follower not in cluster.metadata("strict")[0]["isr_nodes"], timeout=20, message="ISR shrink"
    )
    wait_until(
        lambda: follower not in describe_isr(cluster, strict_leader, "strict"),
        timeout=20,
        message="leader's ISR",
    )
    refused = _produce_one(cluster, strict_leader, "strict", 0, acks=-1, timeout_ms=2000)
    assert refused["error_code"] == Errors.NOT_ENOUGH_REPLICAS, refused
    assert _produce_one(cluster, lax_leader, "lax", 0, acks=-1, timeout_ms=5000)["error_code"] == Errors.NONE


def describe_isr(cluster: Cluster, broker_id: int, topic: str) -> list[int]:
    resp = cluster.ask(broker_id, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": [{"name": topic}]})
    return list(resp["partitions"][0]["isr"])
