"""After the active controller of a three-voter quorum fails, the cluster still handles broker failures,
and a deposed controller cannot move a partition (real processes).

- The active controller is killed (-9), then a broker: the new active controller fences the broker when
  its session (counted from the takeover) ends, elects new leaders for its partitions and shrinks their
  ISRs, and an acks=all producer is acknowledged on every partition.
- The active controller is paused (SIGSTOP) while one of its LEADER_AND_ISR requests is still on its way to
  a broker (held there by a network delay). A new controller takes over and the broker accepts its epoch;
  when the old controller's request arrives, the broker refuses it with STALE_CONTROLLER_EPOCH (11). The
  woken controller journals the refusal, stops acting, and follows the new leader."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from tests.integration.harness import (
    REPO_ROOT,
    BrokerProcess,
    async_wait_until,
    python_cmd,
    request,
    wait_until,
)
from tests.integration.test_controller_quorum import IDS, Voter, active, free_ports

pytestmark = pytest.mark.integration

SESSION_MS = 4000  # the voters' broker.session.timeout.ms (test_controller_quorum.Voter)


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[list[Voter]]:
    ports = free_ports(len(IDS))
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in zip(IDS, ports, strict=True))
    nodes = [Voter(i, p, tmp_path, voters) for i, p in zip(IDS, ports, strict=True)]
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.kill()


@pytest.fixture
def brokers(quorum: list[Voter], tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    started: dict[int, BrokerProcess] = {}
    try:
        for broker_id in (1, 2, 3):
            b = BrokerProcess(
                broker_id,
                tmp_path / f"broker-{broker_id}",
                {
                    "controller.quorum.voters": quorum[0].voters,
                    "broker.heartbeat.interval.ms": "200",
                    "replica.lag.time.max.ms": "2000",
                    "cluster.id": "it",
                },
            )
            b.launch()
            started[broker_id] = b
        for b in started.values():
            b.wait_started()
        yield started
    finally:
        for b in started.values():
            b.kill()
            b.close()


async def _create(leader: Voter, name: str, partitions: int, rf: int, configs: dict[str, str]) -> None:
    body = await request(
        "127.0.0.1",
        leader.port,
        ApiKeys.CREATE_TOPICS,
        {
            "topics": [
                {"name": name, "num_partitions": partitions, "replication_factor": rf, "configs": configs}
            ],
            "timeout_ms": 5000,
        },
    )
    assert body["topics"][0]["error_code"] == 0, body


async def _metadata(voter: Voter, topic: str) -> dict[int, dict[str, Any]]:
    body = await request("127.0.0.1", voter.port, ApiKeys.METADATA, {"topics": [{"name": topic}]})
    return {p["partition_index"]: p for p in body["topics"][0]["partitions"]}


def _unfenced(leader: Voter, n: int) -> bool:
    return len({e["broker_id"] for e in leader.events("broker_unfenced")}) >= n


async def test_broker_failure_after_a_controller_failover_is_handled(
    quorum: list[Voter], brokers: dict[int, BrokerProcess]
) -> None:
    leader, epoch = wait_until(lambda: active(quorum), 30, message="an active controller")
    wait_until(lambda: _unfenced(leader, 3), 30, message="three brokers unfenced")
    await _create(leader, "f", 6, 3, {"min.insync.replicas": "2"})

    async def all_led() -> bool:
        meta = await _metadata(leader, "f")
        return len(meta) == 6 and all(p["leader_id"] > 0 and len(p["isr_nodes"]) == 3 for p in meta.values())

    await async_wait_until(all_led, 20, message="every partition led, ISR full")
    led_by_1 = [i for i, p in (await _metadata(leader, "f")).items() if p["leader_id"] == 1]
    assert led_by_1

    # The active controller dies, then broker 1 (a leader) right after it.
    leader.kill()
    killed_at = time.monotonic()
    brokers[1].kill()
    new_leader, new_epoch = wait_until(lambda: active(quorum, epoch), 30, message="a new active controller")
    takeover_s = time.monotonic() - killed_at
    assert new_epoch > epoch

    # The new active controller started broker 1's session afresh at its takeover; when it ends, broker 1
    # is fenced and its partitions get new leaders from their ISRs, which lose broker 1.
    def fenced() -> dict[str, Any] | None:
        found = [e for e in new_leader.events("broker_fenced") if e["broker_id"] == 1]
        return found[-1] if found else None

    fence = wait_until(fenced, 30, message="broker 1 fenced by the new active controller")
    handled_s = time.monotonic() - killed_at
    assert fence["reason"] == "session_timeout"
    print(f"takeover {takeover_s:.2f}s, broker 1 fenced {handled_s:.2f}s after the kills")
    # Takeover (at most fetch timeout + two election timeouts + backoff) then the session: generous here, as
    # the machine may be loaded.
    assert handled_s < 2.0 + 2 * 2.0 + SESSION_MS / 1000 + 10

    async def moved() -> dict[int, dict[str, Any]] | None:
        meta = await _metadata(new_leader, "f")
        ok = all(p["leader_id"] in (2, 3) and 1 not in p["isr_nodes"] for p in meta.values())
        return meta if ok else None

    meta = await async_wait_until(moved, 20, message="new leaders without broker 1")
    elected = {
        int(e["partition"])
        for e in new_leader.events("leader_elected")
        if e["topic"] == "f" and e["reason"] == "broker_session_timeout"
    }
    assert set(led_by_1) <= elected
    assert all(meta[p]["leader_id"] in (2, 3) for p in led_by_1)

    # acks=all (min.insync.replicas=2, two live replicas) is acknowledged on every partition.
    survivor = brokers[2]
    done = subprocess.run(
        python_cmd(
            "produce",
            "f",
            "--count",
            "1200",
            "--batch-records",
            "50",
            "--acks",
            "all",
            "--bootstrap-server",
            f"{survivor.host}:{survivor.port}",
            "--no-acked-journal",
            "--no-progress",
            "--delivery-timeout-ms",
            "30000",
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


async def test_a_paused_old_controller_that_wakes_is_refused_with_stale_controller_epoch(
    quorum: list[Voter], brokers: dict[int, BrokerProcess]
) -> None:
    old, epoch = wait_until(lambda: active(quorum), 30, message="an active controller")
    wait_until(lambda: _unfenced(old, 3), 30, message="three brokers unfenced")
    await _create(old, "a", 3, 3, {})
    b2 = brokers[2]

    # Requests from the controllers to broker 2 are held there for a while: the next LEADER_AND_ISR the
    # active controller sends broker 2 is still on its way when the controller is paused.
    hold_ms = 12000
    rule = {"src": "controller", "dst": "2", "delay_ms": hold_ms}
    set_rules = await request(b2.host, b2.port, ApiKeys.NET_FAULTS, {"operation": "set", "rules": [rule]})
    assert set_rules["error_code"] == 0, set_rules
    body = await request(
        "127.0.0.1",
        old.port,
        ApiKeys.CREATE_TOPICS,
        {
            "topics": [{"name": "b", "num_partitions": 3, "replication_factor": 3, "configs": {}}],
            "timeout_ms": 300,
        },
    )
    assert body["topics"][0]["error_code"] in (0, Errors.REQUEST_TIMED_OUT), body
    sent_at = time.monotonic()
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)
    try:
        # From now on broker 2 gets the controllers' requests at once (those already held stay held).
        healed = await request(b2.host, b2.port, ApiKeys.NET_FAULTS, {"operation": "set", "rules": []})
        assert healed["error_code"] == 0
        others = [n for n in quorum if n is not old]
        _, new_epoch = wait_until(lambda: active(others, epoch), 30, message="a new active controller")
        assert new_epoch > epoch

        # Broker 2 has accepted the new controller's epoch (its full LEADER_AND_ISR after the takeover):
        # a request in the old epoch is refused now.
        probe = {
            "controller_id": old.node_id,
            "controller_epoch": epoch,
            "broker_epoch": -1,
            "topic_states": [],
            "live_leaders": [],
        }

        async def stale() -> bool:
            answer = await request(b2.host, b2.port, ApiKeys.LEADER_AND_ISR, probe)
            return answer["error_code"] == Errors.STALE_CONTROLLER_EPOCH

        await async_wait_until(stale, 20, message="broker 2 on the new controller epoch")
        assert time.monotonic() - sent_at < hold_ms / 1000, "the old request was released too early"
    finally:
        old.proc.send_signal(signal.SIGCONT)

    # The old controller's held LEADER_AND_ISR reaches broker 2 and is refused; the old controller learns
    # it was deposed, stops acting and follows the new leader.
    def refused() -> list[dict[str, Any]]:
        return [e for e in old.events("stale_controller_epoch") if e["broker_id"] == 2]

    found = wait_until(refused, hold_ms / 1000 + 20, message="the old controller refused with error 11")
    assert found[0]["controller_epoch"] == epoch
    assert found[0]["error_code"] == Errors.STALE_CONTROLLER_EPOCH == 11
    assert found[0]["api"] in ("LEADER_AND_ISR", "UPDATE_METADATA", "STOP_REPLICA")

    def follows() -> bool:
        states = old.events("quorum_state")
        return (
            bool(states)
            and states[-1]["role"] == "follower"
            and states[-1]["leader_id"] >= 0
            and states[-1]["epoch"] >= new_epoch
        )

    wait_until(follows, 20, message="the old controller following the new leader")
    deactivated = old.events("controller_deactivated")
    assert deactivated and deactivated[-1]["controller_epoch"] == epoch
    body = await request("127.0.0.1", old.port, ApiKeys.CREATE_TOPICS, {"topics": [], "timeout_ms": 1000})
    assert body["error_code"] == Errors.NOT_CONTROLLER

    # Broker 2 never applied anything in the old epoch after it had accepted the new one.
    accepted = -1
    for e in b2.events():
        ce = e.get("controller_epoch")
        if ce is None:
            continue
        assert int(ce) >= accepted, e
        accepted = int(ce)
