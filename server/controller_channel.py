"""The one connection to the controller quorum that a node's component uses (Kafka's
``NodeToControllerChannelManager``): ``ControllerChannel`` is opened on demand, re-opened after a failure,
shared by concurrent requests (pipelined), and finds the active controller among the voters.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from protocol.api_keys import ApiKeys
from protocol.client import ConnectionClosed, KafkaConnection, open_connection
from protocol.errors import Errors
from server.backoff import MAX_BACKOFF_S, ExponentialBackoff

log = logging.getLogger(__name__)


class NotControllerError(Exception):
    """The voter asked is not the active controller (NOT_CONTROLLER, 41): ask another one."""


# What a request to the controller may fail with; callers retry.
CONTROLLER_UNREACHABLE = (ConnectionClosed, OSError, trio.TooSlowError, NotControllerError)


class ControllerChannel:
    """One connection to the controller. ``run`` keeps it open (reconnecting with back-off);
    ``request`` waits for it up to its timeout and raises one of ``CONTROLLER_UNREACHABLE`` on failure.

    With a controller quorum, ``voters`` lists every voter's address: the channel talks to one of them,
    and moves on to the next when it cannot reach it or it answers NOT_CONTROLLER (41), so brokers find the
    active controller through any voter (the request is then retried by its caller)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str,
        request_timeout_s: float = 30.0,
        retry_backoff_s: float = 0.1,
        retry_backoff_max_s: float = MAX_BACKOFF_S,
        voters: list[tuple[str, int]] | None = None,
    ) -> None:
        self.addresses = list(voters) if voters else [(host, port)]
        self._index = self.addresses.index((host, port)) if (host, port) in self.addresses else 0
        self.host, self.port = self.addresses[self._index]
        self._switch = False
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.retry_backoff_max_s = retry_backoff_max_s
        self.connects = 0
        self._conn: KafkaConnection | None = None
        self._changed = trio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def follow(self, address: tuple[str, int]) -> None:
        """A new active controller made itself known (a controller request of a higher controller epoch came
        from it): talk to it from now on. A request waiting on the old voter (a paused one answers nothing)
        fails at once and is retried by its caller, so heartbeats reach the new controller within its
        session rather than after this channel's request timeout."""
        if address not in self.addresses or address == (self.host, self.port):
            return
        self._index = self.addresses.index(address)
        self.host, self.port = address
        self._switch = True
        conn = self._conn
        if conn is not None:
            conn.abort(f"{self.client_id}: the active controller is now at {address[0]}:{address[1]}")
        self._notify()

    def _next_voter(self) -> None:
        if len(self.addresses) > 1:
            self._index = (self._index + 1) % len(self.addresses)
            self.host, self.port = self.addresses[self._index]
            self._switch = True
            self._notify()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        backoff = ExponentialBackoff(self.retry_backoff_s, self.retry_backoff_max_s)
        failures = 0
        while True:
            self._switch = False
            try:
                async with open_connection(
                    self.host, self.port, client_id=self.client_id, connect_timeout=self.request_timeout_s
                ) as conn:
                    self.connects += 1
                    if failures:
                        log.info(
                            "%s: connected to the controller at %s:%d", self.client_id, self.host, self.port
                        )
                    failures = 0
                    backoff.reset()
                    self._conn = conn
                    self._notify()
                    while not conn.closed and not self._switch:
                        with trio.move_on_after(0.5):
                            await self._changed.wait()
                    if self._switch:
                        continue
            except CONTROLLER_UNREACHABLE as exc:
                failures += 1
                if len(self.addresses) > 1:
                    self._index = (self._index + 1) % len(self.addresses)
                    self.host, self.port = self.addresses[self._index]
                level = logging.WARNING if failures == 1 or failures % 50 == 0 else logging.DEBUG
                log.log(
                    level,
                    "%s: cannot reach the controller at %s:%d (%r); retrying",
                    self.client_id,
                    self.host,
                    self.port,
                    exc,
                )
            finally:
                self._conn = None
            await trio.sleep(backoff.next_s())

    async def request(self, api_key: ApiKeys, body: Any, *, timeout_s: float | None = None) -> dict[str, Any]:
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        with trio.fail_after(timeout):
            while self._conn is None or self._conn.closed:
                await self._changed.wait()
        conn = self._conn
        try:
            response = await conn.request(api_key, body, timeout=timeout)
        except ConnectionClosed:
            self._notify()  # wake run() to reconnect
            raise
        if len(self.addresses) > 1 and response.get("error_code") == Errors.NOT_CONTROLLER:
            if conn is self._conn:
                self._next_voter()
            raise NotControllerError(str(response.get("error_message") or "not the active controller"))
        return response


__all__ = ["CONTROLLER_UNREACHABLE", "ControllerChannel", "NotControllerError"]
