"""``replication.truncation.mode`` on real broker processes (unmanaged, leadership from the test): the mode
is journaled and reported, and a follower restarted after a hard kill truncates to its checkpointed high
watermark in ``high-watermark`` mode only (Kafka 0.10's makeFollowers); in the leader-epoch modes the
leader's OFFSET_FOR_LEADER_EPOCH answer keeps its whole log."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from protocol.api_keys import ApiKeys
from protocol.records import build_simple_batch
from tests.integration.harness import BrokerLauncher, BrokerProcess, request
from tests.integration.replication_support import (
    describe_full,
    leader_and_isr_body,
    send_leader_and_isr,
    wait_converged,
)

pytestmark = pytest.mark.integration

TOPIC = "modes"


def _produce(broker: BrokerProcess, n: int) -> int:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 10_000,
        "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": build_simple_batch([b"v"] * n)}]}
        ],
    }
    resp = trio.run(request, broker.host, broker.port, ApiKeys.PRODUCE, body)
    code: int = resp["responses"][0]["partition_responses"][0]["error_code"]
    return code


def _lead(pair: list[BrokerProcess], epoch: int) -> None:
    send_leader_and_isr(pair, leader_and_isr_body(pair, TOPIC, [0], leader=1, leader_epoch=epoch, isr=[1, 2]))


def _since_last_start(broker: BrokerProcess, event: str) -> list[dict[str, Any]]:
    lines = broker.events()
    start = max(i for i, e in enumerate(lines) if e["event"] == "broker_started")
    return [e for e in lines[start:] if e["event"] == event]


def _epoch_answer(broker: BrokerProcess, current: int, epoch: int) -> tuple[int, int, int]:
    body = {
        "replica_id": 2,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [{"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}],
            }
        ],
    }
    resp = trio.run(request, broker.host, broker.port, ApiKeys.OFFSET_FOR_LEADER_EPOCH, body)
    p = resp["topics"][0]["partitions"][0]
    return p["error_code"], p["leader_epoch"], p["end_offset"]


@pytest.mark.parametrize("mode", ["leader-epoch", "leader-epoch-pre-kip-279", "high-watermark"])
def test_follower_restarted_after_a_kill_truncates_to_its_checkpointed_hw_only_in_high_watermark_mode(
    broker_launcher: BrokerLauncher, mode: str
) -> None:
    overrides = {
        "replication.truncation.mode": mode,
        "min.insync.replicas": "2",
        # HWs are checkpointed only at a clean stop, so the follower's checkpoint stays behind its log.
        "replica.high.watermark.checkpoint.interval.ms": "3600000",
    }
    pair = broker_launcher.start_many([1, 2], overrides)
    leader, follower = pair
    for b in pair:
        assert b.events("broker_started")[-1]["truncation_mode"] == mode
        assert describe_full(b)["truncation_mode"] == mode

    _lead(pair, 1)
    assert _produce(leader, 5) == 0
    wait_converged(pair, TOPIC, [0])
    follower.restart()  # a clean stop checkpoints HW 5
    _lead(pair, 2)
    assert _produce(leader, 5) == 0
    assert wait_converged(pair, TOPIC, [0]) == {(TOPIC, 0): (10, 10)}
    if mode == "leader-epoch-pre-kip-279":
        # The leader answers as Kafka 1.1 did: an offset, no epoch.
        assert _epoch_answer(leader, 2, 1) == (0, -1, 5)
    else:
        assert _epoch_answer(leader, 2, 1) == (0, 1, 5)

    follower.kill()  # SIGKILL: the checkpoint still says 5, the log ends at 10
    follower.restart()
    _lead(pair, 3)
    assert wait_converged(pair, TOPIC, [0]) == {(TOPIC, 0): (10, 10)}

    truncations = _since_last_start(follower, "truncated")
    cut = [(e["truncate_to"], e["log_end_offset_before"], e["log_end_offset"]) for e in truncations]
    if mode == "high-watermark":
        assert [e["reason"] for e in truncations] == ["high_watermark"]
        assert cut == [(5, 10, 5)]  # then it fetched 5..9 again
    else:
        # The leader's answer for the follower's latest epoch (2) is its LEO: nothing is cut.
        assert all(before == after == 10 for _, before, after in cut), cut
        assert all(e["reason"].startswith(mode.replace("-", "_") + ": ") for e in truncations)


@pytest.mark.parametrize("mode", ["leader-epoch", "high-watermark"])
def test_follower_ahead_of_its_new_leader_exits_in_high_watermark_mode(
    broker_launcher: BrokerLauncher, mode: str
) -> None:
    """Broker 2 led alone and has 5 records; broker 3, with an empty log, becomes the leader (as after an
    unclean election, which is disabled here). Kafka 0.10, truncating to its HW (5), fetches out of range
    and exits rather than truncate below its log end; by default the leader's epochs say where to truncate
    (its epoch 2 starts at 0, so the follower's epoch 1 ends there) and it goes on."""
    b2, b3 = broker_launcher.start_many([2, 3], {"replication.truncation.mode": mode})
    send_leader_and_isr(
        [b2], leader_and_isr_body([b2, b3], TOPIC, [0], leader=2, leader_epoch=1, isr=[2], replicas=[2])
    )
    assert _produce(b2, 5) == 0
    body = leader_and_isr_body([b2, b3], TOPIC, [0], leader=3, leader_epoch=2, isr=[3], replicas=[3, 2])
    send_leader_and_isr([b3, b2], body)

    if mode == "high-watermark":
        assert b2.wait_exit() == 1
        stopped = b2.events("broker_stopped")[-1]
        assert stopped["exit_code"] == 1
        assert "log truncation is not allowed" in stopped["reason"]
        assert "latest offset 0 is less than replica 2's latest offset 5" in stopped["reason"]
        assert _since_last_start(b2, "truncated") == []
    else:
        assert wait_converged([b2, b3], TOPIC, [0]) == {(TOPIC, 0): (0, 0)}
        assert b2.is_running()
        [truncated] = _since_last_start(b2, "truncated")
        assert truncated["reason"] == "leader_epoch: leader epoch 1 ends at 0"
        assert (truncated["truncate_to"], truncated["log_end_offset_before"]) == (0, 5)
