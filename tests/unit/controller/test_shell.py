"""The controller process's shell in-process on loopback: fake brokers (a ``SocketServer`` that records
what it is sent) with the real ``BrokerLifecycleManager`` and ``AlterPartitionManager`` talk to a real
``KafkaController``. Short timeouts; every wait is on a condition with a deadline."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from broker.alter_partition import AlterPartitionManager
from broker.lifecycle import BrokerLifecycleManager
from controller.config import ControllerConfig
from controller.controller import KafkaController
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.client import open_connection
from protocol.errors import Errors
from protocol.schema import from_body
from server.controller_channel import ControllerChannel
from server.network import SocketServer
from server.request_channel import Request, RequestChannel, RequestHandlerPool
from tests.unit.waiting import wait_for

SESSION_MS = 800
HEARTBEAT_MS = 100


def journal(directory: Path, event: str | None = None) -> list[dict[str, Any]]:
    path = directory / "events.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in lines if event is None or e["event"] == event]


@dataclass
class FakeBroker:
    """Answers controller requests with success and keeps their bodies."""

    broker_id: int
    received: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    port: int = 0

    async def handle(self, request: Request) -> None:
        self.received.append((request.api_key, request.body))
        request.complete({"error_code": 0, "partition_errors": []})

    def leader_and_isr(self) -> list[dict[str, Any]]:
        return [
            {"topic": t["topic_name"], **p}
            for key, body in self.received
            if key == ApiKeys.LEADER_AND_ISR
            for t in body["topic_states"]
            for p in t["partition_states"]
        ]

    def got(self, api_key: ApiKeys) -> list[dict[str, Any]]:
        return [body for key, body in self.received if key == api_key]


@asynccontextmanager
async def fake_broker(broker_id: int) -> AsyncIterator[FakeBroker]:
    fake = FakeBroker(broker_id)
    channel = RequestChannel(100)
    supported = {
        int(k): (0, 0) for k in (ApiKeys.LEADER_AND_ISR, ApiKeys.UPDATE_METADATA, ApiKeys.STOP_REPLICA)
    }
    server = SocketServer(
        host="127.0.0.1", port=0, channel=channel, max_request_bytes=1 << 20, supported=supported, name="fake"
    )
    async with trio.open_nursery() as nursery:
        fake.port = await nursery.start(server.serve)
        nursery.start_soon(RequestHandlerPool(channel, fake.handle, 2, "fake").run)
        yield fake
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def controller(directory: Path, port: int = 0) -> AsyncIterator[KafkaController]:
    config = ControllerConfig.from_dict(
        {
            "listeners": f"127.0.0.1:{port}",
            "metadata.log.dir": str(directory),
            "broker.session.timeout.ms": SESSION_MS,
            "controller.retry.backoff.ms": 20,
        }
    )
    c = KafkaController(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        yield c
        c.stop()


@asynccontextmanager
async def managed(
    fake: FakeBroker, port: int
) -> AsyncIterator[tuple[BrokerLifecycleManager, AlterPartitionManager]]:
    channel = ControllerChannel("127.0.0.1", port, client_id=f"broker-{fake.broker_id}", retry_backoff_s=0.02)
    lifecycle = BrokerLifecycleManager(
        fake.broker_id,
        "isrsim",
        channel,
        lambda: ("127.0.0.1", fake.port),
        heartbeat_interval_ms=HEARTBEAT_MS,
    )
    ap_channel = ControllerChannel(
        "127.0.0.1", port, client_id=f"broker-{fake.broker_id}-ap", retry_backoff_s=0.02
    )
    apm = AlterPartitionManager(
        fake.broker_id, ap_channel, lambda: lifecycle.broker_epoch, retry_backoff_s=0.02
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.run)
        await nursery.start(ap_channel.run)
        await nursery.start(apm.run)
        yield lifecycle, apm
        nursery.cancel_scope.cancel()


async def call(port: int, api_key: ApiKeys, body: Any) -> dict[str, Any]:
    async with open_connection("127.0.0.1", port) as conn:
        return await conn.request(api_key, body, timeout=5)


async def test_brokers_register_get_topics_alter_isr_and_shut_down(tmp_path: Path) -> None:
    async with controller(tmp_path) as c, fake_broker(1) as b1, fake_broker(2) as b2:
        assert c.bound_port is not None
        port = c.bound_port
        async with managed(b1, port) as (life1, apm1), managed(b2, port) as (life2, _):
            with trio.fail_after(5):
                await life1.unfenced.wait()
                await life2.unfenced.wait()
            resp = await call(
                port,
                ApiKeys.CREATE_TOPICS,
                {"topics": [{"name": "t", "num_partitions": 2, "replication_factor": 2}], "timeout_ms": 5000},
            )
            assert resp["topics"][0]["error_code"] == 0
            # Answered after the brokers acknowledged their LEADER_AND_ISR.
            states = {(s["topic"], s["partition_index"]): s for s in b1.leader_and_isr()}
            assert set(states) == {("t", 0), ("t", 1)} and all(s["is_new"] for s in states.values())
            md = from_body(m.MetadataResponse, await call(port, ApiKeys.METADATA, {}))
            assert {b.node_id for b in md.brokers} == {1, 2}

            # The leader of one partition shrinks its ISR through the controller, then expands it again.
            led = next(s for s in states.values() if s["leader"] == 1)
            tp = ("t", led["partition_index"])
            answers: list[tuple[Any, ...]] = []
            assert apm1.submit(
                tp, led["leader_epoch"], [1], led["partition_epoch"], lambda *a: answers.append(a)
            )
            assert not apm1.submit(tp, led["leader_epoch"], [1], led["partition_epoch"], lambda *a: None)
            await wait_for(lambda: answers, "ALTER_PARTITION answer")
            assert answers == [(tp, Errors.NONE, led["leader_epoch"], [1], led["partition_epoch"] + 1)]
            stale = led["partition_epoch"]
            assert apm1.submit(tp, led["leader_epoch"], [1, 2], stale, lambda *a: answers.append(a))
            await wait_for(lambda: len(answers) == 2, "the stale proposal's answer")
            assert answers[1] == (tp, Errors.INVALID_UPDATE_VERSION, led["leader_epoch"], [1], stale + 1)
            assert apm1.submit(tp, led["leader_epoch"], [1, 2], stale + 1, lambda *a: answers.append(a))
            await wait_for(lambda: len(answers) == 3, "the expansion's answer")
            assert answers[2] == (tp, Errors.NONE, led["leader_epoch"], [1, 2], stale + 2)

            # Controlled shutdown of broker 1: its leaderships go to broker 2, then it is fenced.
            with trio.fail_after(5):
                assert await life1.controlled_shutdown(timeout_s=3, retry_backoff_s=0.05)
            assert life1.is_fenced
            fenced = journal(tmp_path, "broker_fenced")
            assert [(e["broker_id"], e["reason"]) for e in fenced] == [(1, "controlled_shutdown")]
            await wait_for(
                lambda: any(
                    s["partition_index"] == tp[1] and s["leader"] == 2 and s["isr"] == [2]
                    for s in b2.leader_and_isr()
                ),
                "broker 2 to lead the partition broker 1 handed over",
            )
            await wait_for(
                lambda: b1.got(ApiKeys.STOP_REPLICA), "broker 1 told to stop the replica it follows"
            )
        # Both lifecycles stopped: broker 2 is fenced when its session expires.
        await wait_for(
            lambda: any(
                e["broker_id"] == 2 and e["reason"] == "session_timeout"
                for e in journal(tmp_path, "broker_fenced")
            ),
            "broker 2 fenced",
        )
    events = [e["event"] for e in journal(tmp_path)]
    assert events[0] == "controller_started" and events[-1] == "controller_stopped"
    for name in ("broker_registered", "broker_unfenced", "topic_created", "leader_elected", "isr_changed"):
        assert name in events


async def test_broker_keeps_its_epoch_across_a_controller_restart(tmp_path: Path) -> None:
    async with fake_broker(1) as b1:
        async with controller(tmp_path) as c:
            assert c.bound_port is not None
            port = c.bound_port
        channel = ControllerChannel("127.0.0.1", port, client_id="broker-1", retry_backoff_s=0.02)
        life = BrokerLifecycleManager(
            1, "isrsim", channel, lambda: ("127.0.0.1", b1.port), heartbeat_interval_ms=50
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(life.run)
            async with controller(tmp_path, port=port):
                with trio.fail_after(5):
                    await life.unfenced.wait()
                epoch = life.broker_epoch
            await wait_for(lambda: channel._conn is None, "the broker to notice the controller is gone")
            async with controller(tmp_path, port=port):
                await wait_for(
                    lambda: any(um["controller_epoch"] == 3 for um in b1.got(ApiKeys.UPDATE_METADATA)),
                    "UPDATE_METADATA from the restarted controller",
                )
                assert life.broker_epoch == epoch and life.registrations == 1 and not life.is_fenced
            nursery.cancel_scope.cancel()
    started = journal(tmp_path, "controller_started")
    assert [e["controller_epoch"] for e in started] == [1, 2, 3]
