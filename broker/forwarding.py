"""Kafka's ``ForwardingManager`` (KIP-590): requests a broker does not decide itself (CreateTopics,
DeleteTopics, DescribeConfigs, and the CreateTopics of auto-creation) go to the active controller over the
broker's controller channel; the controller's answer is the client's answer.

Each forwarded request runs as its own task in the manager's nursery, so a handler never waits on the
controller. The broker authorizes the client before it forwards (the controller sees the broker's own
principal): ``KafkaApis`` removes what the client may not do and adds those refusals to the answer.
A controller that cannot be reached in time is answered REQUEST_TIMED_OUT, as Kafka's forwarding does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from broker.lifecycle import CONTROLLER_UNREACHABLE, ControllerChannel
from protocol.api_keys import ApiKeys

log = logging.getLogger(__name__)

# The controller's answer (a docs/protocol.md body), or None when it could not be reached (and why).
ForwardCallback = Callable[[dict[str, Any] | None, str], None]


class ForwardingManager:
    def __init__(self, broker_id: int, channel: ControllerChannel) -> None:
        self.broker_id = broker_id
        self.channel = channel
        self._nursery: trio.Nursery | None = None
        self.forwarded = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def forward(self, api_key: ApiKeys, body: Any, callback: ForwardCallback, *, timeout_s: float) -> None:
        """Sends ``body`` to the controller; ``callback`` gets the answer (or None) in a later task."""
        nursery = self._nursery
        if nursery is None:
            callback(None, "the broker is not connected to the controller yet")
            return
        self.forwarded += 1
        nursery.start_soon(self._send, api_key, body, callback, timeout_s)

    async def _send(self, api_key: ApiKeys, body: Any, callback: ForwardCallback, timeout_s: float) -> None:
        try:
            response = await self.channel.request(api_key, body, timeout_s=timeout_s)
        except CONTROLLER_UNREACHABLE as exc:
            log.info("broker %d: %s not forwarded to the controller: %r", self.broker_id, api_key.name, exc)
            response = None
            why = f"the controller did not answer {api_key.name} in time"
        else:
            why = ""
        try:
            callback(response, why)
        except Exception:  # a bad answer fails this request, never the broker
            log.exception("broker %d: answering a forwarded %s failed", self.broker_id, api_key.name)
