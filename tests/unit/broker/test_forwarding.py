"""``ForwardingManager``: what is sent to the next controller and what is not. A request the controller did
not take (NOT_CONTROLLER, or a connection that was gone before it could be written) goes to the next voter;
a request written to a controller that gave no answer (timed out, or the connection lost while waiting) is
answered at once and never walked across the voters."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from broker.forwarding import ForwardingManager
from protocol.api_keys import ApiKeys
from protocol.client import ConnectionClosed, RequestNotSent
from server.controller_channel import NotControllerError

ANSWER = {"topics": [{"name": "a", "error_code": 0}]}


class ScriptedChannel:
    """A controller channel whose voters answer in turn as ``script`` says: an exception to raise, or an
    answer; ``calls`` counts the requests made."""

    def __init__(self, script: list[BaseException | dict[str, Any]]) -> None:
        self.script = list(script)
        self.calls = 0
        self.host, self.port = "127.0.0.1", 9093

    async def request(self, api_key: ApiKeys, body: Any, *, timeout_s: float | None = None) -> dict[str, Any]:
        self.calls += 1
        step = self.script.pop(0)
        if isinstance(step, trio.TooSlowError):
            await trio.sleep(timeout_s or 0)  # the controller holds it until the request's time runs out
            raise step
        if isinstance(step, BaseException):
            raise step
        return step

    def follow(self, address: tuple[str, int]) -> None:
        self.host, self.port = address


async def forward(channel: ScriptedChannel, timeout_s: float = 5.0) -> tuple[dict[str, Any] | None, str]:
    manager = ForwardingManager(1, channel)  # type: ignore[arg-type]
    got: list[tuple[dict[str, Any] | None, str]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        manager.forward(ApiKeys.CREATE_TOPICS, {}, lambda a, why: got.append((a, why)), timeout_s=timeout_s)
        with trio.fail_after(timeout_s + 5):
            while not got:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    return got[0]


@pytest.mark.parametrize(
    "refusal",
    [NotControllerError("controller 2 is not the active controller"), RequestNotSent("connection refused")],
)
async def test_a_request_the_controller_did_not_take_goes_to_the_next(refusal: BaseException) -> None:
    channel = ScriptedChannel([refusal, ANSWER])
    assert await forward(channel) == (ANSWER, "")
    assert channel.calls == 2


async def test_a_request_that_timed_out_is_not_sent_to_another_controller() -> None:
    channel = ScriptedChannel([trio.TooSlowError(), ANSWER])
    answer, why = await forward(channel, timeout_s=0.3)
    assert answer is None and channel.calls == 1
    assert why == "the controller at 127.0.0.1:9093 did not answer CREATE_TOPICS within 0.3 s"


async def test_a_request_whose_connection_was_lost_is_not_sent_to_another_controller() -> None:
    channel = ScriptedChannel([ConnectionClosed("connection closed by the peer"), ANSWER])
    answer, why = await forward(channel)
    assert answer is None and channel.calls == 1
    assert "was lost while it handled CREATE_TOPICS" in why
