"""The replication APIs' conformance rules (docs/protocol.md, Kafka's semantics), checked on real brokers:
leader-epoch validation order, LEADER_AND_ISR / STOP_REPLICA fencing, OFFSET_FOR_LEADER_EPOCH answers from
the epoch cache, and acks=-1 outcomes."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.records import build_simple_batch
from tests.integration.harness import (
    BrokerLauncher,
    BrokerProcess,
    async_wait_until,
    events,
    request,
    wait_until,
)
from tests.integration.replication_support import (
    describe,
    leader_and_isr_body,
    send_leader_and_isr,
    start_producer,
    wait_converged,
)

pytestmark = pytest.mark.integration


def _epoch_request(
    topic: str, partition: int, current: int, epoch: int, replica_id: int = -1
) -> dict[str, Any]:
    return {
        "replica_id": replica_id,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
                ],
            }
        ],
    }


def _epoch_answer(broker: BrokerProcess, body: dict[str, Any]) -> tuple[int, int, int]:
    resp = trio.run(request, broker.host, broker.port, ApiKeys.OFFSET_FOR_LEADER_EPOCH, body)
    p = resp["topics"][0]["partitions"][0]
    return p["error_code"], p["leader_epoch"], p["end_offset"]


def _produce(
    broker: BrokerProcess, topic: str, partition: int, n: int, acks: int, timeout_ms: int = 5000
) -> dict[str, Any]:
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": partition, "records": build_simple_batch([b"v"] * n)}],
            }
        ],
    }
    resp = trio.run(request, broker.host, broker.port, ApiKeys.PRODUCE, body)
    part: dict[str, Any] = resp["responses"][0]["partition_responses"][0]
    return part


@pytest.fixture
def pair(broker_launcher: BrokerLauncher) -> list[BrokerProcess]:
    return broker_launcher.start_many([1, 2], {"min.insync.replicas": "2", "replica.lag.time.max.ms": "1500"})


def test_offset_for_leader_epoch_validation_order_and_answers(pair: list[BrokerProcess]) -> None:
    b1, b2 = pair
    send_leader_and_isr(pair, leader_and_isr_body(pair, "e", [0], leader=1, leader_epoch=3, isr=[1, 2]))
    assert _produce(b1, "e", 0, 10, acks=-1)["error_code"] == 0
    send_leader_and_isr(pair, leader_and_isr_body(pair, "e", [0], leader=1, leader_epoch=5, isr=[1, 2]))
    assert _produce(b1, "e", 0, 5, acks=-1)["error_code"] == 0
    wait_converged(pair, "e", [0])
    # Epoch cache of the leader: epoch 3 from 0, epoch 5 from 10 (assigned at the LEO on becoming leader).
    assert _epoch_answer(b1, _epoch_request("e", 0, 5, 5)) == (0, 5, 15)  # latest epoch -> LEO
    assert _epoch_answer(b1, _epoch_request("e", 0, 5, 4)) == (0, 3, 10)  # KIP-279: largest epoch <= 4
    assert _epoch_answer(b1, _epoch_request("e", 0, 5, 3)) == (0, 3, 10)
    # No current epoch (-1): no fencing check. An epoch above every known one is undefined (Kafka's rule).
    assert _epoch_answer(b1, _epoch_request("e", 0, -1, 7)) == (0, -1, -1)
    assert _epoch_answer(b1, _epoch_request("e", 0, -1, 2)) == (0, 2, 0)  # below the first: its start
    # The current leader epoch is checked before leadership.
    fenced = _epoch_answer(b1, _epoch_request("e", 0, 4, 3))[0]
    unknown = _epoch_answer(b1, _epoch_request("e", 0, 6, 3))[0]
    assert (fenced, unknown) == (Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH)
    assert _epoch_answer(b2, _epoch_request("e", 0, 4, 3))[0] == Errors.FENCED_LEADER_EPOCH
    assert _epoch_answer(b2, _epoch_request("e", 0, 5, 3))[0] == Errors.NOT_LEADER_OR_FOLLOWER
    # Only the leader answers, whatever the replica id (Kafka's fetchOnlyFromLeader = true): a debugging
    # replica id (-2) asking a follower gets NOT_LEADER_OR_FOLLOWER too.
    assert _epoch_answer(b2, _epoch_request("e", 0, 5, 5, replica_id=-2)) == (
        Errors.NOT_LEADER_OR_FOLLOWER,
        -1,
        -1,
    )
    assert _epoch_answer(b2, _epoch_request("e", 0, -1, 5, replica_id=-1))[0] == Errors.NOT_LEADER_OR_FOLLOWER
    assert _epoch_answer(b1, _epoch_request("nope", 0, -1, 1))[0] == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_leader_and_isr_and_stop_replica_fencing(pair: list[BrokerProcess]) -> None:
    b1, b2 = pair
    body = leader_and_isr_body(pair, "f", [0, 1], leader=1, leader_epoch=2, isr=[1, 2], controller_epoch=5)
    send_leader_and_isr(pair, body)

    def lai(broker: BrokerProcess, **kw: Any) -> dict[str, Any]:
        return trio.run(
            request,
            broker.host,
            broker.port,
            ApiKeys.LEADER_AND_ISR,
            leader_and_isr_body(pair, "f", [0], **kw),
        )

    # An older controller epoch is fenced for every partition.
    stale = lai(b1, leader=1, leader_epoch=9, isr=[1, 2], controller_epoch=4)
    assert stale["error_code"] == Errors.STALE_CONTROLLER_EPOCH
    # A leader epoch that is not newer is STALE_CONTROLLER_EPOCH per partition (Kafka's rule).
    same = lai(b1, leader=1, leader_epoch=2, isr=[1, 2], controller_epoch=5)
    assert (
        same["error_code"] == 0 and same["partition_errors"][0]["error_code"] == Errors.STALE_CONTROLLER_EPOCH
    )
    # A broker not among the replicas answers UNKNOWN_TOPIC_OR_PARTITION.
    foreign = lai(b1, leader=2, leader_epoch=3, isr=[2], replicas=[2], controller_epoch=5)
    assert foreign["partition_errors"][0]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION

    def stop(
        broker: BrokerProcess, partition: int, epoch: int, delete: bool, controller_epoch: int = 5
    ) -> dict[str, Any]:
        body = {
            "controller_id": 100,
            "controller_epoch": controller_epoch,
            "broker_epoch": -1,
            "topic_states": [
                {
                    "topic_name": "f",
                    "partition_states": [
                        {"partition_index": partition, "leader_epoch": epoch, "delete_partition": delete}
                    ],
                }
            ],
        }
        return trio.run(request, broker.host, broker.port, ApiKeys.STOP_REPLICA, body)

    assert stop(b2, 0, 1, True)["partition_errors"][0]["error_code"] == Errors.FENCED_LEADER_EPOCH
    assert stop(b2, 0, 2, True, controller_epoch=4)["error_code"] == Errors.STALE_CONTROLLER_EPOCH
    assert (b2.log_dir / "f-0").exists()
    assert stop(b2, 0, 2, True)["partition_errors"][0]["error_code"] == 0
    assert not (b2.log_dir / "f-0").exists()
    assert ("f", 0) not in describe(b2)
    assert stop(b2, 1, -2, False)["partition_errors"][0]["error_code"] == 0  # -2: the deletion sentinel
    assert (b2.log_dir / "f-1").exists() and ("f", 1) not in describe(b2)
    assert [e["partition"] for e in events(b2.events_path, "partition_stopped")] == [0, 1]


def test_acks_all_outcomes(pair: list[BrokerProcess], tmp_path: Path) -> None:
    b1, b2 = pair
    send_leader_and_isr(pair, leader_and_isr_body(pair, "a", [0], leader=1, leader_epoch=1, isr=[1, 2]))
    ok = _produce(b1, "a", 0, 3, acks=-1)
    assert ok["error_code"] == 0 and ok["base_offset"] == 0

    # A paused follower keeps the HW still: acks=-1 times out with REQUEST_TIMED_OUT, acks=1 succeeds.
    b2.pause()
    timed_out = _produce(b1, "a", 0, 1, acks=-1, timeout_ms=300)
    assert timed_out["error_code"] in (Errors.REQUEST_TIMED_OUT, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert _produce(b1, "a", 0, 1, acks=1)["error_code"] == 0
    # Once the leader drops it from the ISR, the ISR is below min.insync.replicas=2: NOT_ENOUGH_REPLICAS.
    wait_until(lambda: describe(b1)[("a", 0)]["isr"] == [1], timeout=15, message="ISR shrink to [1]")
    refused = _produce(b1, "a", 0, 1, acks=-1)
    assert refused["error_code"] == Errors.NOT_ENOUGH_REPLICAS
    assert "min.insync.replicas" in refused["error_message"]
    leo = describe(b1)[("a", 0)]["log_end_offset"]
    b2.resume()
    wait_until(
        lambda: sorted(describe(b1)[("a", 0)]["isr"]) == [1, 2], timeout=15, message="ISR back to [1, 2]"
    )
    assert describe(b1)[("a", 0)]["log_end_offset"] == leo  # the refused batch was not appended
    assert _produce(b1, "a", 0, 1, acks=-1)["error_code"] == 0


def test_waiting_acks_all_produce_gets_not_leader_when_leadership_moves(pair: list[BrokerProcess]) -> None:
    b1, b2 = pair
    send_leader_and_isr(pair, leader_and_isr_body(pair, "m", [0], leader=1, leader_epoch=1, isr=[1, 2]))
    b2.pause()
    result: dict[str, Any] = {}

    async def main() -> None:
        async def produce() -> None:
            body = {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 20000,
                "topic_data": [
                    {"name": "m", "partition_data": [{"index": 0, "records": build_simple_batch([b"x"])}]}
                ],
            }
            resp = await request(b1.host, b1.port, ApiKeys.PRODUCE, body, timeout=30)
            result.update(resp["responses"][0]["partition_responses"][0])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)

            # Wait until the produce is parked in the leader's purgatory (LEO moved); then move leadership.
            async def appended() -> bool:
                state = await request(b1.host, b1.port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None})
                return bool(state["partitions"][0]["log_end_offset"] >= 1)

            await async_wait_until(appended, timeout=20, message="the produce to be appended on the leader")
            body = leader_and_isr_body(pair, "m", [0], leader=2, leader_epoch=2, isr=[1, 2])
            resp = await request(b1.host, b1.port, ApiKeys.LEADER_AND_ISR, body)
            assert resp["error_code"] == 0

    trio.run(main)
    b2.resume()
    assert result["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER


def test_follower_restarted_after_sigkill_catches_up(broker_launcher: BrokerLauncher, tmp_path: Path) -> None:
    # A lag time shorter than the produce timeout: acks=-1 waits for the ISR to drop the dead follower
    # instead of timing out (a timeout would make the producer retry and duplicate, as Kafka's does).
    brokers = broker_launcher.start_many(
        [1, 2, 3], {"min.insync.replicas": "2", "replica.lag.time.max.ms": "2000"}
    )
    b1, _, b3 = brokers
    send_leader_and_isr(
        brokers, leader_and_isr_body(brokers, "k", [0, 1, 2], leader=1, leader_epoch=1, isr=[1, 2, 3])
    )
    prod = start_producer("k", 30_000, [b1], tmp_path / "wl", extra=["--rate", "30000"])
    wait_until(
        lambda: describe(b3)[("k", 0)]["log_end_offset"] > 1000, timeout=30, message="broker 3 fetching"
    )
    b3.kill(signal.SIGKILL)
    assert prod.wait(60) == 0
    b3.restart()
    send_leader_and_isr(
        [b3], leader_and_isr_body(brokers, "k", [0, 1, 2], leader=1, leader_epoch=1, isr=[1, 2])
    )
    final = wait_converged(brokers, "k", [0, 1, 2])
    assert sum(leo for leo, _ in final.values()) == 30_000
