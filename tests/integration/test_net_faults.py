"""Network faults on a real cluster (`isrsim cluster up`: controller + 3 brokers as processes), applied with
`isrsim net ...` as a user would: ISR shrink and expand around a partitioned follower, an isolated leader
replaced and truncated, delay and loss that slow the workload and lose nothing, faults.jsonl, bad input."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from kit.fault_journal import read_faults
from kit.processes import process_state
from protocol.api_keys import ApiKeys
from protocol.records import build_simple_batch
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import REPO_ROOT, python_cmd, request, wait_until

pytestmark = pytest.mark.integration

LAG_MS = 2000  # replica.lag.time.max.ms in FAST
# Requests that a fault swallowed time out after this (followers, broker -> controller, controller -> broker).
FAULTS_FAST = (
    *FAST,
    "replica.socket.timeout.ms=2000",
    "request.timeout.ms=2000",
    "controller.socket.timeout.ms=2000",
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", settings=FAULTS_FAST)


def producer(c: Cluster, topic: str, count: int, *, rate: int, acks: str = "all") -> subprocess.Popen[str]:
    args = ["produce", topic, "--count", str(count), "--acks", acks, "--rate", str(rate)]
    args += ["--timeout-ms", "3000", "--data-dir", str(c.root), "--no-progress"]
    return subprocess.Popen(
        python_cmd(*args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"producer failed ({proc.returncode}):\n{out}\n{err}"
    return out


def p50(output: str) -> float:
    m = re.search(r"p50 ([\d.]+)", output)
    assert m, output
    return float(m.group(1))


def last_fault(c: Cluster, action: str) -> dict[str, Any]:
    return [f for f in read_faults(c.root) if f["action"] == action][-1]


def isr_events(c: Cluster, broker_id: int, topic: str) -> list[dict[str, Any]]:
    return [e for e in c.broker_events(broker_id, "isr_changed") if e["topic"] == topic]


def replica_state(c: Cluster, broker_id: int, topic: str) -> dict[str, Any]:
    b = c.info.broker(broker_id)
    body = {"topics": [{"name": topic}]}
    resp = trio.run(
        functools.partial(request, b.host, b.port, ApiKeys.DESCRIBE_REPLICA_STATE, body, timeout=5)
    )
    return resp["partitions"][0]  # type: ignore[no-any-return]


def produce_direct(c: Cluster, broker_id: int, topic: str, acks: int, timeout_s: float) -> dict[str, Any]:
    b = c.info.broker(broker_id)
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": build_simple_batch([b"direct"] * 10)}]}
        ],
    }
    resp = trio.run(functools.partial(request, b.host, b.port, ApiKeys.PRODUCE, body, timeout=timeout_s))
    return resp["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def test_partitioned_follower_leaves_the_isr_and_rejoins_after_heal(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "p", "--partitions", "1", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("p"), timeout=30, message="a full ISR")
    leader = cluster.leader("p", 0)
    follower = next(b.id for b in cluster.info.brokers if b.id != leader)
    cluster.cli("net", "partition", str(follower), str(leader))
    partitioned_ms = last_fault(cluster, "partition")["ts_ms"]
    status = cluster.cli("net", "status").stdout
    assert f"{follower} -> {leader}" in status and f"{leader} -> {follower}" in status
    assert "partitioned" in cluster.cli("cluster", "status").stdout

    prod = producer(cluster, "p", 4000, rate=400)
    shrink = wait_until(
        lambda: [e for e in isr_events(cluster, leader, "p") if follower not in e["isr"]],
        timeout=30,
        message=lambda: f"the leader dropping {follower} from the ISR: {isr_events(cluster, leader, 'p')}",
    )[0]
    shrink_after_ms = shrink["ts_ms"] - partitioned_ms
    # The follower stops being caught up when the partition starts: out within the lag time, plus the
    # ISR check period (lag / 2) and a margin for the first write and the ALTER_PARTITION round trip.
    assert shrink_after_ms <= LAG_MS + LAG_MS / 2 + 2000, shrink_after_ms
    assert shrink["reason"] == "follower_lagging"
    # acks=all writes continue with min.insync.replicas=2: acknowledged after the shrink, before the heal.
    wait_until(
        lambda: any(a["acked_ms"] > shrink["ts_ms"] + 500 for a in cluster.acked()),
        timeout=20,
        message="acks=all acknowledgements while the follower is partitioned",
    )
    cluster.cli("net", "heal", str(leader), str(follower))
    healed_ms = last_fault(cluster, "heal")["ts_ms"]
    expand = wait_until(
        lambda: [
            e for e in isr_events(cluster, leader, "p") if follower in e["isr"] and e["ts_ms"] > healed_ms
        ],
        timeout=30,
        message=lambda: f"{follower} back in the ISR: {isr_events(cluster, leader, 'p')}",
    )[0]
    rejoin_after_ms = expand["ts_ms"] - healed_ms
    finish(prod)
    assert sum(cluster.wait_converged("p", 1).values()) >= 4000
    assert cluster.assert_no_acked_batch_lost("p", 1) > 0
    print(f"ISR shrink {shrink_after_ms} ms after the partition; rejoined {rejoin_after_ms} ms after heal")
    assert [f["action"] for f in read_faults(cluster.root)] == ["partition", "heal"]
    assert "none" in cluster.cli("net", "status").stdout


def test_isolated_leader_is_replaced_cannot_ack_and_truncates_after_heal(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "i", "--partitions", "1", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("i"), timeout=30, message="a full ISR")
    old = cluster.metadata("i")[0]
    leader, epoch = old["leader_id"], old["leader_epoch"]
    followers = [b.id for b in cluster.info.brokers if b.id != leader]
    prod = producer(cluster, "i", 6000, rate=400)
    wait_until(lambda: len(cluster.acked()) >= 10, timeout=30, message="the workload to start")
    # Cut the followers off first so that the leader holds writes no follower has: acks=1 is answered
    # by the leader alone, acks=all is not.
    for f in followers:
        cluster.cli("net", "partition", str(leader), str(f))
    assert produce_direct(cluster, leader, "i", acks=1, timeout_s=5)["error_code"] == 0
    cluster.cli("net", "isolate", str(leader))
    isolated_ms = last_fault(cluster, "isolate")["ts_ms"]
    leo_isolated = replica_state(cluster, leader, "i")["log_end_offset"]
    # While isolated it cannot acknowledge an acks=all write: the request is never answered.
    with pytest.raises(trio.TooSlowError):
        produce_direct(cluster, leader, "i", acks=-1, timeout_s=3)
    new = wait_until(
        lambda: (m := cluster.metadata("i")[0])["leader_id"] not in (-1, leader) and m,
        timeout=30,
        message=lambda: f"a new leader: {cluster.metadata('i')}",
    )
    assert new["leader_epoch"] > epoch
    elected_after_ms = int(time.time() * 1000) - isolated_ms
    # The isolated leader's high watermark never moved past what the followers had (no ack from it).
    state = replica_state(cluster, leader, "i")
    assert state["high_watermark"] < state["log_end_offset"] == leo_isolated
    finish(prod)  # the workload went on through the new leader
    cluster.cli("net", "heal")
    healed_ms = last_fault(cluster, "heal")["ts_ms"]
    truncated = wait_until(
        lambda: [
            e
            for e in cluster.broker_events(leader, "truncated")
            if e["ts_ms"] >= healed_ms and e["leader_epoch"] > epoch
        ],
        timeout=40,
        message=lambda: f"the old leader truncating: {cluster.broker_events(leader, 'truncated')}",
    )[0]
    assert truncated["truncate_to"] < truncated["log_end_offset_before"]  # its acks=1 tail is gone
    wait_until(lambda: cluster.isr_full("i"), timeout=40, message="the old leader back in the ISR")
    cluster.wait_converged("i", 1)
    assert cluster.assert_no_acked_batch_lost("i", 1) > 0
    truncated_after_ms = truncated["ts_ms"] - healed_ms
    print(f"new leader {elected_after_ms} ms after isolation; truncated {truncated_after_ms} ms after heal")
    actions = [f["action"] for f in read_faults(cluster.root)]
    assert actions == ["partition", "partition", "isolate", "heal"]


def test_delay_and_loss_slow_the_workload_but_lose_nothing(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "d", "--partitions", "3", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("d"), timeout=30, message="a full ISR")
    baseline = p50(finish(producer(cluster, "d", 1500, rate=1000)))
    pairs = [("1", "2"), ("1", "3"), ("2", "3")]
    for a, b in pairs:
        cluster.cli("net", "delay", a, b, "--ms", "150", "--jitter-ms", "30", "--seed", "7")
    delayed = p50(finish(producer(cluster, "d", 1500, rate=1000)))
    assert delayed >= baseline + 100, (baseline, delayed)
    cluster.cli("net", "heal")
    for a, b in pairs:
        cluster.cli("net", "loss", a, b, "--percent", "5", "--seed", "11")
    assert "loss 5%" in cluster.cli("net", "status").stdout
    finish(producer(cluster, "d", 1500, rate=1000))
    dropped = sum(_frames_dropped(cluster, n) for n in ("1", "2", "3"))
    assert dropped > 0
    cluster.cli("net", "heal")
    cluster.wait_converged("d", 3)
    assert len({(a["partition"], a["base_offset"]) for a in cluster.acked()}) == len(cluster.acked())
    assert cluster.assert_no_acked_batch_lost("d", 3) == len(cluster.acked())
    print(f"p50 acks=all latency: {baseline} ms, {delayed} ms with 150±30 ms delays; {dropped} frames lost")
    journal = read_faults(cluster.root)
    assert [f["action"] for f in journal] == ["delay"] * 3 + ["heal"] + ["loss"] * 3 + ["heal"]
    assert journal[0]["params"] == {"ms": 150, "jitter_ms": 30, "one_way": False, "seed": 7}
    assert journal[4]["nodes"] == ["1", "2"] and journal[4]["params"]["percent"] == 5


def _frames_dropped(c: Cluster, node: str) -> int:
    b = c.info.broker(int(node))
    resp = trio.run(functools.partial(request, b.host, b.port, ApiKeys.NET_FAULTS, {"operation": "describe"}))
    return int(resp["frames_dropped"])


def test_bad_input_process_faults_and_bootstrap(cluster: Cluster) -> None:
    def fails(*args: str) -> str:
        res = cluster.cli(*args, check=False)
        assert res.returncode != 0, (args, res.stdout)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, res.stderr
        return lines[0]

    assert "unknown node '7'" in fails("net", "partition", "1", "7")
    assert "same node" in fails("net", "partition", "2", "2")
    assert ">= 0" in fails("net", "delay", "1", "2", "--ms", "-5")
    assert "0..100" in fails("net", "loss", "1", "2", "--percent", "101")
    # heal with nothing in force is a no-op, not a failure (a cleanup step): one line, exit 0, not recorded
    recorded = len(read_faults(cluster.root))
    for args in (("net", "heal"), ("net", "heal", "1", "2")):
        healed = cluster.cli(*args)
        assert healed.stdout.strip().splitlines() == [healed.stdout.strip()]
        assert "nothing to heal" in healed.stdout
    assert len(read_faults(cluster.root)) == recorded
    cluster.cli("broker", "kill", "3")
    wait_until(lambda: process_state(cluster.info.broker(3).pid) == "stopped", timeout=10)
    assert "down" in fails("net", "partition", "1", "3")
    assert "down" in fails("net", "isolate", "3")
    assert "none" in cluster.cli("net", "status").stdout  # nothing half-applied
    assert read_faults(cluster.root)[-1]["action"] == "kill"
    cluster.cli("net", "partition", "1", "2", "--one-way")
    # A restarted node starts healed, and its links are healed on its peers too.
    cluster.cli("broker", "restart", "3")
    cluster.cli("net", "partition", "3", "controller")
    assert "3 -> controller" in cluster.cli("net", "status").stdout
    cluster.cli("broker", "restart", "3")
    status = cluster.cli("net", "status").stdout
    assert "3 -> controller" not in status and "1 -> 2" in status and "2 -> 1" not in status
    cluster.cli("broker", "pause", "2")
    assert "paused" in fails("net", "partition", "2", "1")
    # Broker 2 holds the rule 1 -> 2 and cannot be told while paused: the heal changes nothing.
    assert "paused" in fails("net", "heal", "1", "2")
    cluster.cli("broker", "resume", "2")
    # --bootstrap-server: one broker names every node.
    b1 = cluster.info.broker(1)
    boot = run_net("status", "--bootstrap-server", b1.address)
    assert "controller: 0 rule(s)" in boot and "1: 1 rule(s)" in boot and "3: 0 rule(s)" in boot
    cluster.cli("net", "heal", "1")
    actions = [(f["action"], f["nodes"]) for f in read_faults(cluster.root)]
    assert actions == [
        ("kill", ["3"]),
        ("partition", ["1", "2"]),
        ("restart", ["3"]),
        ("partition", ["3", "controller"]),
        ("restart", ["3"]),
        ("pause", ["2"]),
        ("resume", ["2"]),
        ("heal", ["1"]),
    ]
    restart = [f for f in read_faults(cluster.root) if f["action"] == "restart"][-1]
    assert restart["params"]["healed_links"] == 2  # 3 -> controller and back, held by the controller
    assert all(isinstance(f["ts_ms"], int) for f in read_faults(cluster.root))
    raw = (cluster.root / "faults.jsonl").read_text().splitlines()
    assert all(set(json.loads(line)) == {"ts_ms", "action", "nodes", "params"} for line in raw)


def run_net(*args: str) -> str:
    res = subprocess.run(python_cmd("net", *args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_one_way_partition_to_the_controller_fences_the_broker_until_healed(cluster: Cluster) -> None:
    """Broker 2's requests to the controller are lost (heartbeats), the controller's to broker 2 are not:
    the controller fences it after broker.session.timeout.ms and moves its leaderships; after the heal its
    heartbeats get through again and it is unfenced."""
    cluster.cli("topic", "create", "c", "--partitions", "3", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("c"), timeout=30, message="a full ISR")
    cluster.cli("net", "partition", "2", "controller", "--one-way")
    cut_ms = last_fault(cluster, "partition")["ts_ms"]
    status = cluster.cli("net", "status").stdout
    assert "2 -> controller" in status and "controller -> 2" not in status
    fenced = wait_until(
        lambda: [e for e in cluster.controller_events("broker_fenced") if e["ts_ms"] > cut_ms],
        timeout=20,
        message="the controller fencing broker 2",
    )[0]
    assert fenced["broker_id"] == 2
    wait_until(
        lambda: all(p["leader_id"] != 2 for p in cluster.metadata("c").values()),
        timeout=20,
        message=lambda: f"leaderships moved off broker 2: {cluster.metadata('c')}",
    )
    cluster.cli("net", "heal", "2", "controller")
    healed_ms = last_fault(cluster, "heal")["ts_ms"]
    wait_until(
        lambda: [
            e
            for e in cluster.controller_events("broker_unfenced")
            if e["ts_ms"] > healed_ms and e["broker_id"] == 2
        ],
        timeout=30,
        message=lambda: f"broker 2 unfenced: {cluster.controller_events()[-5:]}",
    )
    wait_until(lambda: cluster.isr_full("c"), timeout=30, message="broker 2 back in every ISR")
    print(f"broker 2 fenced {fenced['ts_ms'] - cut_ms} ms after its link to the controller was cut")


def test_an_isr_change_whose_answer_was_lost_is_answered_when_the_leader_retries(cluster: Cluster) -> None:
    """The leader's ALTER_PARTITION reaches the controller, which takes the partitioned follower out of the
    ISR, but the answer is lost (the controller -> leader direction is cut): the leader keeps its old ISR and
    retries with its old partition epoch. That retry of a change already made is answered with the
    controller's current ISR and partition epoch (Kafka's ``equalsAllowStalePartitionEpoch``), not refused
    with INVALID_UPDATE_VERSION: refused, the leader kept an ISR with the follower, never proposed adding it
    back, and the controller's ISR stayed short of it until the partition's next leader epoch (a chaos run
    with network faults on the controller's links never got its ISRs full again)."""
    cluster.cli("topic", "create", "lost", "--partitions", "1", "--replication-factor", "3")
    wait_until(lambda: cluster.isr_full("lost"), timeout=30, message="a full ISR")
    leader = cluster.leader("lost", 0)
    follower = next(b.id for b in cluster.info.brokers if b.id != leader)
    prod = producer(cluster, "lost", 1_000_000, rate=200, acks="1")
    try:
        cluster.cli("net", "partition", "controller", str(leader), "--one-way")
        cluster.cli("net", "partition", str(follower), str(leader))
        # The controller applied the shrink (its ISR lacks the follower); the leader never heard so.
        wait_until(
            lambda: follower not in cluster.metadata("lost")[0]["isr_nodes"],
            timeout=30,
            message=lambda: f"the controller dropping {follower}: {cluster.metadata('lost')}",
        )
        assert [e for e in isr_events(cluster, leader, "lost") if follower not in e["isr"]] == []
        cluster.cli("net", "heal", str(follower), str(leader))
        cluster.cli("net", "heal", "controller", str(leader))
        healed_ms = last_fault(cluster, "heal")["ts_ms"]
        # The leader's retry gets the shrink it missed; the caught-up follower is then proposed and added.
        wait_until(
            lambda: cluster.isr_full("lost"),
            timeout=30,
            message=lambda: f"{follower} back in the controller's ISR: {cluster.metadata('lost')}",
        )

        # The leader journals each ISR it applies once the controller's answer arrives, which may be a
        # moment after the controller's metadata shows it.
        def since_heal() -> list[dict[str, Any]]:
            return [e for e in isr_events(cluster, leader, "lost") if e["ts_ms"] > healed_ms]

        events = wait_until(
            lambda: (found := since_heal()) and follower in found[-1]["isr"] and found,
            timeout=30,
            message=lambda: f"leader {leader} applying the ISR with {follower} again: {since_heal()}",
        )
        assert [follower not in e["isr"] for e in events][:1] == [True], events
    finally:
        prod.kill()
        prod.communicate()
