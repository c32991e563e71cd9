"""Sending the controller's requests to brokers (Kafka's ``ControllerChannelManager``, with one
``RequestSendThread`` per broker as a trio task).

Each broker has a queue; its task keeps one connection and sends the queue's head until it is answered,
reconnecting and re-sending with back-off when the broker is unreachable or slow, so requests reach a
broker in order and none is lost while it lives. ``reset`` drops a broker's queue (the broker has just
come (back) to life and the caller queues its full state next) and moves to its current address.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from controller.request_batch import OutboundRequest
from protocol.client import ConnectionClosed, open_connection
from protocol.common import error_name
from protocol.errors import Errors
from server.backoff import ExponentialBackoff

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Queued:
    request: OutboundRequest
    done: trio.Event = field(default_factory=trio.Event)


@dataclass(eq=False)
class BrokerChannel:
    broker_id: int
    host: str
    port: int
    queue: deque[_Queued] = field(default_factory=deque)
    scope: trio.CancelScope | None = None
    _changed: trio.Event = field(default_factory=trio.Event)
    sent: int = 0
    failures: int = 0

    def notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()


ResponseHook = Callable[[OutboundRequest, dict[str, Any]], None]


class ControllerChannelManager:
    def __init__(
        self,
        controller_id: int,
        *,
        request_timeout_s: float,
        retry_backoff_s: float,
        on_response: ResponseHook | None = None,
    ) -> None:
        self.controller_id = controller_id
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.on_response = on_response
        self.channels: dict[int, BrokerChannel] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Owns the per-broker send tasks; they end when this is cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for channel in self.channels.values():
                nursery.start_soon(self._send_loop, channel)
            task_status.started()
            await trio.sleep_forever()

    def _channel(self, broker_id: int, host: str, port: int) -> BrokerChannel:
        channel = self.channels.get(broker_id)
        if channel is None:
            channel = self.channels[broker_id] = BrokerChannel(broker_id, host, port)
            if self._nursery is not None:
                self._nursery.start_soon(self._send_loop, channel)
        return channel

    def enqueue(self, request: OutboundRequest, host: str, port: int) -> trio.Event:
        """Queues a request; the returned event is set once the broker answered it (or it was dropped
        by a reset, its content superseded)."""
        channel = self._channel(request.broker_id, host, port)
        item = _Queued(request)
        channel.queue.append(item)
        channel.notify()
        return item.done

    def reset(self, broker_id: int, host: str, port: int) -> None:
        channel = self._channel(broker_id, host, port)
        for item in channel.queue:
            item.done.set()
        channel.queue.clear()
        if (channel.host, channel.port) != (host, port) and channel.scope is not None:
            channel.scope.cancel()  # drop the connection to the old address
        channel.host, channel.port = host, port
        channel.notify()

    def pending(self, broker_id: int) -> int:
        channel = self.channels.get(broker_id)
        return 0 if channel is None else len(channel.queue)

    async def _send_loop(self, channel: BrokerChannel) -> None:
        backoff = ExponentialBackoff(self.retry_backoff_s)
        while True:
            while not channel.queue:
                await channel.wait_changed()
            channel.scope = trio.CancelScope()
            try:
                with channel.scope:
                    await self._send_on_connection(channel)
            except (OSError, ConnectionClosed, trio.TooSlowError) as exc:
                channel.failures += 1
                level = (
                    logging.WARNING
                    if channel.failures in (1, 10) or channel.failures % 100 == 0
                    else logging.DEBUG
                )
                log.log(
                    level,
                    "controller %d cannot reach broker %d at %s:%d (%r); %d request(s) queued, retrying "
                    "(failure %d)",
                    self.controller_id,
                    channel.broker_id,
                    channel.host,
                    channel.port,
                    exc,
                    len(channel.queue),
                    channel.failures,
                )
                await trio.sleep(backoff.next_s())
                continue
            finally:
                channel.scope = None
            backoff.reset()

    async def _send_on_connection(self, channel: BrokerChannel) -> None:
        host, port = channel.host, channel.port
        async with open_connection(
            host, port, client_id=f"controller-{self.controller_id}", connect_timeout=self.request_timeout_s
        ) as conn:
            while (channel.host, channel.port) == (host, port):
                if not channel.queue:
                    await channel.wait_changed()
                    continue
                item = channel.queue[0]
                body = await conn.request(
                    item.request.api_key, item.request.body, timeout=self.request_timeout_s
                )
                if channel.queue and channel.queue[0] is item:
                    channel.queue.popleft()
                item.done.set()
                channel.sent += 1
                channel.failures = 0
                self._log_response(item.request, body)
                if self.on_response is not None:
                    self.on_response(item.request, body)

    def _log_response(self, request: OutboundRequest, body: dict[str, Any]) -> None:
        error = body.get("error_code", 0)
        if error:
            name = error_name(error) if error in Errors._value2member_map_ else str(error)
            log.warning(
                "broker %d answered %s with %s: %s",
                request.broker_id,
                request.api_key.name,
                name,
                body.get("error_message", ""),
            )
            return
        for entry in body.get("partition_errors", []) or []:
            code = entry.get("error_code", 0)
            if code:
                name = error_name(code) if code in Errors._value2member_map_ else str(code)
                log.info(
                    "broker %d: %s for %s-%s: %s",
                    request.broker_id,
                    request.api_key.name,
                    entry.get("topic_name"),
                    entry.get("partition_index"),
                    name,
                )


__all__ = ["BrokerChannel", "ControllerChannelManager"]
