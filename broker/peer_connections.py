"""Connections of this broker to its peers for the transaction requests it sends itself (KIP-890's
AddPartitionsToTxn ``verify_only`` to coordinators, WRITE_TXN_MARKERS to partition leaders): one connection
per peer, opened on first use over the inter-broker listener (with this broker's TLS and SASL,
``protocol.security.current_client_security``), kept while requests use it, and closed after
``idle_s`` without one. A request that fails drops its connection; the next one connects again."""

from __future__ import annotations

import logging
from typing import Any

import trio

from broker.metadata_cache import MetadataCache
from protocol.client import ConnectionClosed, KafkaConnection, open_connection

log = logging.getLogger(__name__)

IDLE_S = 30.0


class PeerConnections:
    def __init__(
        self,
        broker_id: int,
        metadata_cache: MetadataCache,
        client_id: str,
        *,
        connect_timeout_s: float = 10.0,
        idle_s: float = IDLE_S,
    ) -> None:
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.idle_s = idle_s
        self._connections: dict[int, KafkaConnection] = {}
        self._last_used: dict[int, float] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    async def request(
        self, node: int, api_key: int, body: Any, *, api_version: int, timeout: float
    ) -> dict[str, Any]:
        """One request to broker ``node``; raises what the connection raises (OSError, TooSlowError,
        ConnectionClosed ...)."""
        conn = self._connections.get(node)
        if conn is None or conn.closed:
            if self._nursery is None:
                raise ConnectionClosed(f"broker {self.broker_id}'s peer connections are not running")
            conn = await self._nursery.start(self._hold, node)
        self._last_used[node] = trio.current_time()
        try:
            return await conn.request(api_key, body, api_version=api_version, timeout=timeout)
        except BaseException:
            conn.abort("a request to the peer failed")  # the next request connects again
            raise

    async def _hold(
        self, node: int, *, task_status: trio.TaskStatus[KafkaConnection] = trio.TASK_STATUS_IGNORED
    ) -> None:
        endpoint = self.metadata_cache.alive_broker(node)
        if endpoint is None:
            raise ConnectionClosed(f"broker {node} is not alive")
        started = False
        try:
            async with open_connection(
                endpoint.host,
                endpoint.port,
                client_id=self.client_id,
                connect_timeout=self.connect_timeout_s,
            ) as conn:
                self._connections[node] = conn
                self._last_used[node] = trio.current_time()
                task_status.started(conn)
                started = True
                try:
                    while not conn.closed:
                        idle_until = self._last_used[node] + self.idle_s
                        if trio.current_time() >= idle_until and conn.in_flight == 0:
                            break
                        await trio.sleep(max(0.05, idle_until - trio.current_time()))
                finally:
                    if self._connections.get(node) is conn:
                        del self._connections[node]
        except Exception as exc:
            if not started:
                raise  # the caller's: connecting failed
            log.debug("broker %d: connection to broker %d ended: %r", self.broker_id, node, exc)
