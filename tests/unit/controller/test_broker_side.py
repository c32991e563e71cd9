"""``AlterPartitionManager`` and ``BrokerLifecycleManager`` against a scripted controller channel, on
trio's autojumping mock clock (no real waiting)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from broker.alter_partition import AlterPartitionManager
from broker.lifecycle import BrokerLifecycleManager
from protocol.api_keys import ApiKeys
from protocol.client import ConnectionClosed
from protocol.errors import Errors
from protocol.schema import to_body
from tests.unit.waiting import wait_for

Responder = Callable[[ApiKeys, dict[str, Any]], dict[str, Any] | Exception]


class ScriptedChannel:
    """Stands in for ``ControllerChannel``: records requests, answers with ``responder``."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.sent: list[tuple[ApiKeys, dict[str, Any]]] = []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def request(self, api_key: ApiKeys, body: Any, *, timeout_s: float | None = None) -> dict[str, Any]:
        plain = to_body(body)
        self.sent.append((api_key, plain))
        await trio.sleep(0.001)
        answer = self.responder(api_key, plain)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def echo(api_key: ApiKeys, body: dict[str, Any], error: int = 0) -> dict[str, Any]:
    return {
        "error_code": 0,
        "topics": [
            {
                "topic_name": t["topic_name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": error,
                        "leader_id": 1,
                        "leader_epoch": p["leader_epoch"],
                        "isr": p["new_isr"],
                        "partition_epoch": p["partition_epoch"] + (error == 0),
                    }
                    for p in t["partitions"]
                ],
            }
            for t in body["topics"]
        ],
    }


async def test_alter_partition_batches_retries_and_delivers(autojump_clock: trio.testing.MockClock) -> None:
    failures = [ConnectionClosed("gone"), {"error_code": int(Errors.STALE_BROKER_EPOCH), "topics": []}]

    def responder(api_key: ApiKeys, body: dict[str, Any]) -> dict[str, Any] | Exception:
        if failures:
            return failures.pop(0)
        return echo(api_key, body)

    channel = ScriptedChannel(responder)
    epoch = [-1]
    apm = AlterPartitionManager(1, channel, lambda: epoch[0])  # type: ignore[arg-type]
    answers: list[tuple[Any, ...]] = []
    assert apm.submit(("t", 0), 3, [1, 2], 7, lambda *a: answers.append(a))
    assert apm.submit(("t", 1), 3, [1], 2, lambda *a: answers.append(a))
    assert apm.submit(("u", 0), 1, [1], 0, lambda *a: answers.append(a))
    assert not apm.submit(("t", 0), 3, [1], 7, lambda *a: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(apm.run)
        await trio.sleep(1)
        assert channel.sent == [] and answers == []  # no broker epoch yet: nothing sent
        epoch[0] = 42
        await wait_for(lambda: len(answers) >= 3, "three answers", timeout=60, interval=0.1)
        nursery.cancel_scope.cancel()
    assert len(channel.sent) == 3  # connection lost, stale broker epoch, then answered: same batch each time
    assert all(body["broker_epoch"] == 42 for _, body in channel.sent)
    assert {
        (t["topic_name"], p["partition_index"])
        for t in channel.sent[-1][1]["topics"]
        for p in t["partitions"]
    } == {
        ("t", 0),
        ("t", 1),
        ("u", 0),
    }
    assert sorted(answers) == [
        (("t", 0), Errors.NONE, 3, [1, 2], 8),
        (("t", 1), Errors.NONE, 3, [1], 3),
        (("u", 0), Errors.NONE, 1, [1], 1),
    ]
    assert not apm.pending(("t", 0))


async def test_alter_partition_errors_go_to_the_callback_not_controller_is_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    codes = [int(Errors.NOT_CONTROLLER), int(Errors.INVALID_UPDATE_VERSION)]
    channel = ScriptedChannel(lambda k, b: echo(k, b, codes.pop(0)))
    apm = AlterPartitionManager(1, channel, lambda: 5)  # type: ignore[arg-type]
    answers: list[tuple[Any, ...]] = []
    apm.submit(("t", 0), 3, [1, 2], 7, lambda *a: answers.append(a))
    async with trio.open_nursery() as nursery:
        await nursery.start(apm.run)
        await wait_for(lambda: answers, "an answer", timeout=60, interval=0.1)
        nursery.cancel_scope.cancel()
    assert len(channel.sent) == 2
    assert answers == [(("t", 0), Errors.INVALID_UPDATE_VERSION, 3, [1, 2], 7)]


class FakeController:
    """Just enough of a controller for the lifecycle manager."""

    def __init__(self) -> None:
        self.epoch = 0
        self.remaining = 2  # controlled shutdown answers with leaderships this many times
        self.fenced = True
        self.forget_next_heartbeat = False

    def __call__(self, api_key: ApiKeys, body: dict[str, Any]) -> dict[str, Any] | Exception:
        if api_key == ApiKeys.BROKER_REGISTRATION:
            self.epoch += 1
            self.fenced = True
            return {"error_code": 0, "broker_epoch": self.epoch}
        if api_key == ApiKeys.BROKER_HEARTBEAT:
            if body["broker_epoch"] != self.epoch or self.forget_next_heartbeat:
                self.forget_next_heartbeat = False
                return {"error_code": int(Errors.STALE_BROKER_EPOCH)}
            if body["want_shut_down"]:
                self.fenced = True
                return {"error_code": 0, "is_fenced": True, "should_shut_down": True, "is_caught_up": True}
            self.fenced = False
            return {"error_code": 0, "is_fenced": False, "is_caught_up": True}
        if api_key == ApiKeys.CONTROLLED_SHUTDOWN:
            if self.remaining:
                self.remaining -= 1
                return {"error_code": 0, "remaining_partitions": [{"topic_name": "t", "partition_index": 0}]}
            return {"error_code": 0, "remaining_partitions": []}
        raise AssertionError(api_key)


async def test_lifecycle_registers_heartbeats_re_registers_and_shuts_down(
    autojump_clock: trio.testing.MockClock,
) -> None:
    controller = FakeController()
    channel = ScriptedChannel(controller)
    changes: list[bool] = []
    life = BrokerLifecycleManager(
        3,
        "c",
        channel,  # type: ignore[arg-type]
        lambda: ("127.0.0.1", 9093),
        heartbeat_interval_ms=2000,
        incarnation_id="inc",
        on_fenced_change=changes.append,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(life.run)
        await life.unfenced.wait()
        assert life.broker_epoch == 1 and changes == [False]
        registration = channel.sent[0][1]
        assert registration == {
            "broker_id": 3,
            "cluster_id": "c",
            "incarnation_id": "inc",
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9093}],
        }
        start = trio.current_time()
        await trio.sleep(10)
        beats = [b for k, b in channel.sent if k == ApiKeys.BROKER_HEARTBEAT]
        assert 5 <= len(beats) <= 7, (len(beats), trio.current_time() - start)  # every 2 s
        controller.forget_next_heartbeat = True
        await wait_for(lambda: life.registrations >= 2, "a second registration", timeout=60, interval=0.5)
        assert life.broker_epoch == 2
        await life.unfenced.wait()
        assert await life.controlled_shutdown(timeout_s=30, retry_backoff_s=1)
        assert life.is_fenced and life.want_shut_down
        shutdowns = [b for k, b in channel.sent if k == ApiKeys.CONTROLLED_SHUTDOWN]
        assert shutdowns == [{"broker_id": 3, "broker_epoch": 2}] * 3
        await trio.sleep(5)
        later = [b for k, b in channel.sent if k == ApiKeys.BROKER_HEARTBEAT][-1]
        assert later["want_shut_down"] is True  # never unfenced again
        assert life.is_fenced
        nursery.cancel_scope.cancel()


async def test_controlled_shutdown_gives_up_at_the_timeout(autojump_clock: trio.testing.MockClock) -> None:
    controller = FakeController()
    controller.remaining = 10**6
    channel = ScriptedChannel(controller)
    life = BrokerLifecycleManager(3, "c", channel, lambda: ("h", 1), heartbeat_interval_ms=500)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(life.run)
        await life.unfenced.wait()
        before = trio.current_time()
        assert not await life.controlled_shutdown(timeout_s=5, retry_backoff_s=0.5)
        assert 5 <= trio.current_time() - before < 6
        nursery.cancel_scope.cancel()


class IsolatedChannel(ScriptedChannel):
    """A channel whose requests are lost while ``isolated`` (a network fault that drops frames: no answer,
    no reset) and time out as the real channel's do, after ``timeout_s`` (its own 30 s by default)."""

    def __init__(self, responder: Responder) -> None:
        super().__init__(responder)
        self.isolated = False
        self.delivered: list[tuple[ApiKeys, float]] = []

    async def request(self, api_key: ApiKeys, body: Any, *, timeout_s: float | None = None) -> dict[str, Any]:
        with trio.fail_after(30.0 if timeout_s is None else timeout_s):
            if self.isolated:
                await trio.sleep_forever()
            self.delivered.append((api_key, trio.current_time()))
            return await super().request(api_key, body, timeout_s=timeout_s)


async def test_a_healed_broker_heartbeats_within_half_a_session(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Kafka's broker waits for a heartbeat's answer half a session at most (KAFKA-14392), then retries
    # with a back-off from 100 ms: once a network fault heals, the controller hears from the broker within
    # that, and unfences it. Waiting the channel's 30 s request timeout kept a healed broker fenced ~25 s.
    controller = FakeController()
    channel = IsolatedChannel(controller)
    life = BrokerLifecycleManager(
        3,
        "c",
        channel,
        lambda: ("h", 1),
        heartbeat_interval_ms=2000,
        session_timeout_ms=9000,  # type: ignore[arg-type]
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(life.run)
        await life.unfenced.wait()
        for isolation_s in (1.0, 4.4, 20.0):
            channel.isolated = True
            await trio.sleep(isolation_s)
            channel.isolated = False
            healed = trio.current_time()
            await wait_for(
                lambda healed=healed: any(
                    k == ApiKeys.BROKER_HEARTBEAT and t >= healed for k, t in channel.delivered
                ),
                "a heartbeat after the heal",
                timeout=60,
                interval=0.05,
            )
            first = min(t for k, t in channel.delivered if k == ApiKeys.BROKER_HEARTBEAT and t >= healed)
            # At worst the heartbeat lost at the heal times out (4.5 s) and the retry waits its back-off.
            assert first - healed <= 4.5 + 1.0, (isolation_s, first - healed)
        nursery.cancel_scope.cancel()
