"""A decision of the active controller is acted on once the quorum commits it, however long that takes while
the controller still leads its epoch, and never if it loses the leadership first (SPEC section 11).

Two real voters (``KafkaController`` with ``controller.quorum.voters``) in-process on loopback and a fake
broker that records what it is sent. The link between the voters is cut with each voter's own network fault
table (the follower's FETCH is dropped, so nothing new is committed) and healed again. The controllers'
``commit_timeout_s`` (how often a waiting decision logs a warning) is short, so that a commit slower than
it takes well under a second of the test; every wait is on a condition with a deadline."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from controller.config import ControllerConfig
from controller.controller import KafkaController
from kit.ports import free_ports
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.faults import LinkFault
from tests.unit.controller.test_shell import FakeBroker, call, fake_broker, journal
from tests.unit.waiting import wait_for

IDS = (1, 2)
COMMIT_TIMEOUT_S = 0.2


@asynccontextmanager
async def quorum(root: Path, fetch_timeout_ms: int) -> AsyncIterator[list[KafkaController]]:
    ports = free_ports(len(IDS))
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in zip(IDS, ports, strict=True))
    controllers = [
        KafkaController(
            ControllerConfig.from_dict(
                {
                    "node.id": i,
                    "listeners": f"127.0.0.1:{p}",
                    "metadata.log.dir": str(root / f"controller-{i}"),
                    "controller.quorum.voters": voters,
                    "controller.quorum.election.timeout.ms": 300,
                    "controller.quorum.fetch.timeout.ms": fetch_timeout_ms,
                    "controller.quorum.request.timeout.ms": 300,
                    "controller.retry.backoff.ms": 20,
                    # No session runs out during a test: only the decisions made on purpose happen.
                    "broker.session.timeout.ms": 60000,
                    "cluster.id": "commit-wait",
                }
            ),
            commit_timeout_s=COMMIT_TIMEOUT_S,
        )
        for i, p in zip(IDS, ports, strict=True)
    ]
    async with trio.open_nursery() as nursery:
        for c in controllers:
            await nursery.start(c.run)
        yield controllers
        for c in controllers:
            c.stop()


async def active(controllers: list[KafkaController], timeout: float = 10.0) -> KafkaController:
    return await wait_for(
        lambda: next((c for c in controllers if c.core is not None), None), "an active controller", timeout
    )


def partition(controllers: list[KafkaController], cut: bool) -> None:
    """Cuts (or heals) the link between the two voters, both ways, at both of them."""
    rules = [LinkFault("1", "2", partitioned=True), LinkFault("2", "1", partitioned=True)] if cut else []
    for c in controllers:
        c.faults.table.set_rules(rules)


async def register(port: int, broker: FakeBroker) -> None:
    """The broker registers and is unfenced by its first heartbeat."""
    reg = await call(
        port,
        ApiKeys.BROKER_REGISTRATION,
        {
            "broker_id": broker.broker_id,
            "cluster_id": "commit-wait",
            "incarnation_id": f"incarnation-{broker.broker_id}",
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": broker.port}],
        },
    )
    assert reg["error_code"] == 0, reg
    beat = await call(
        port, ApiKeys.BROKER_HEARTBEAT, {"broker_id": broker.broker_id, "broker_epoch": reg["broker_epoch"]}
    )
    assert beat["error_code"] == 0 and not beat["is_fenced"], beat


def create_topic(name: str) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000}


def topics_led(broker: FakeBroker) -> list[str]:
    """The topics of the LEADER_AND_ISR partition states the broker got, in the order they came."""
    return [s["topic"] for s in broker.leader_and_isr()]


async def test_a_decision_committed_late_is_still_acted_on_in_log_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="controller.controller")
    # A follower stands for election (and the leader resigns) only after 4 s without a fetch answered: a
    # cut of about 1 s leaves the leader leading, with its commits held up for 5 x commit_timeout_s.
    async with fake_broker(1) as broker, quorum(tmp_path, fetch_timeout_ms=4000) as controllers:
        leader = await active(controllers)
        assert leader.bound_port is not None
        port = leader.bound_port
        epoch = leader.active_epoch
        await register(port, broker)

        answers: dict[str, dict[str, Any]] = {}

        async def ask(label: str, api_key: ApiKeys, body: dict[str, Any]) -> None:
            answers[label] = await call(port, api_key, body)

        partition(controllers, True)
        cut_at = trio.current_time()
        async with trio.open_nursery() as nursery:
            # Two decisions, one after the other, while nothing commits.
            assert leader.raft is not None
            log = leader.raft.log
            for name in "ab":
                appended = log.end_offset
                nursery.start_soon(ask, name, ApiKeys.CREATE_TOPICS, create_topic(name))
                await wait_for(lambda a=appended: log.end_offset > a, f"the record of topic {name}")
            # Three times commit_timeout_s and still nothing: not answered, not sent, not journaled; the
            # leader warns that they wait.
            await trio.sleep(3 * COMMIT_TIMEOUT_S)
            assert answers == {}
            assert topics_led(broker) == []
            assert not journal(leader.directory, "topic_created")
            assert sum("not committed after" in r.getMessage() for r in caplog.records) >= 2
            assert leader.core is not None and leader.active_epoch == epoch
            # A read of the state they made waits for them too.
            taken = leader._next_ticket
            nursery.start_soon(ask, "metadata", ApiKeys.METADATA, {})
            await wait_for(lambda: leader._next_ticket > taken, "the controller to take the METADATA request")
            await trio.sleep(COMMIT_TIMEOUT_S)
            assert answers == {}
            await trio.sleep(max(0.0, cut_at + 1.0 - trio.current_time()))
            partition(controllers, False)
        assert trio.current_time() - cut_at > 4 * COMMIT_TIMEOUT_S
        # Once committed, the same leader acts on both decisions, in the order they were made.
        assert leader.core is not None and leader.active_epoch == epoch
        assert [t["error_code"] for label in "ab" for t in answers[label]["topics"]] == [0, 0]
        assert sorted(t["name"] for t in answers["metadata"]["topics"]) == ["a", "b"]
        await wait_for(lambda: topics_led(broker) == ["a", "b"], "LEADER_AND_ISR for a, then b")
        created = [e["topic"] for e in journal(leader.directory, "topic_created")]
        assert created == ["a", "b"]
        assert all(body["controller_epoch"] == epoch for body in broker.got(ApiKeys.LEADER_AND_ISR))
        assert not any("they are not acted on" in r.getMessage() for r in caplog.records)


async def test_a_decision_not_committed_before_the_leadership_is_lost_is_never_acted_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="controller.controller")
    # A leader that hears from no follower for 1.5 x 800 ms resigns.
    async with fake_broker(1) as broker, quorum(tmp_path, fetch_timeout_ms=800) as controllers:
        leader = await active(controllers)
        assert leader.bound_port is not None
        epoch = leader.active_epoch
        await register(leader.bound_port, broker)
        partition(controllers, True)
        with trio.fail_after(10):
            answer = await call(leader.bound_port, ApiKeys.CREATE_TOPICS, create_topic("lost"))
        # Answered NOT_CONTROLLER only once it no longer led the epoch (it resigned), after waiting past
        # commit_timeout_s while it led.
        assert answer["error_code"] == Errors.NOT_CONTROLLER, answer
        assert leader.raft is not None
        assert leader.raft.client.epoch > epoch or not leader.raft.client.is_leader()
        messages = [r.getMessage() for r in caplog.records]
        assert any("not committed after" in msg for msg in messages)
        assert any("were not committed while this controller led" in msg for msg in messages)
        await wait_for(lambda: leader.core is None, "the old leader to stop being active")
        assert "lost" not in topics_led(broker)
        assert not journal(leader.directory, "topic_created")
        # Healed, a new active controller (either voter, in a newer epoch) rebuilds from the committed log
        # and resends it: whatever the broker learns of the topic comes in the newer epoch.
        partition(controllers, False)
        successor = await wait_for(
            lambda: next((c for c in controllers if c.core is not None and c.active_epoch > epoch), None),
            "a new active controller",
            timeout=15,
        )
        await wait_for(
            lambda: any(
                um["controller_epoch"] == successor.active_epoch for um in broker.got(ApiKeys.UPDATE_METADATA)
            ),
            "the new active controller's full resend",
        )
        assert all(
            body["controller_epoch"] > epoch
            for body in broker.got(ApiKeys.LEADER_AND_ISR)
            if any(t["topic_name"] == "lost" for t in body["topic_states"])
        )
