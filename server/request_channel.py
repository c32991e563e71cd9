"""What the socket server and the request handlers share (Kafka's ``RequestChannel`` and
``KafkaRequestHandlerPool``): a ``Request`` with its response, the bounded ``RequestChannel`` between the two,
and the ``RequestHandlerPool`` of ``num.io.threads`` tasks that hand each request to a handler
(``KafkaApis.handle``, or the controller's).

The core (``KafkaApis``, the authorizer's helper, the request metrics) imports this module and never the
socket server (``server.network``), which reads frames into ``Request`` objects, queues them here and writes
the responses back. A request knows its connection only as a ``RequestConnection``: where it arrived, who
sent it, whether it is still open, and how to say that a response is ready.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from protocol.errors import Errors
from protocol.framing import RequestHeader, encode_response_parts
from server.memory_pool import MemoryPool
from server.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)


class RequestConnection(Protocol):
    """What a request needs of the connection it arrived on (``server.network.Connection``)."""

    @property
    def closed(self) -> bool: ...

    @property
    def listener_name(self) -> str:
        """The listener it was accepted on."""
        ...

    @property
    def principal(self) -> KafkaPrincipal:
        """Who the peer is: ``User:ANONYMOUS`` until it authenticated."""
        ...

    @property
    def address(self) -> str:
        """The peer's host (an ACL's host)."""
        ...

    def response_ready(self) -> None:
        """A request of this connection has its response (or none): the writer may send."""
        ...


@dataclass(eq=False, slots=True)
class Request:
    """One request, from the socket to the handler and back. ``complete`` sends the response (once)."""

    header: RequestHeader
    body: dict[str, Any]
    connection: RequestConnection
    received_at: float
    size: int
    # The response frame as (length prefix, payload), written without joining them (see _send_frames).
    response_parts: tuple[bytes, bytes] | None = None
    done: bool = False
    completed_at: float = 0.0
    pool: MemoryPool | None = None  # holds ``size`` bytes of it until handled (queued.max.request.bytes)
    # Called once when the response is ready (request metrics, ``server.metrics.request_metrics``).
    on_complete: Callable[[Request], None] | None = None
    # No response: the connection is closed once the responses before this one are written (Kafka's
    # RequestChannel.closeConnection, e.g. an acks=0 PRODUCE that failed).
    close_connection: bool = False
    # Writes the response body in the connection's encoding when it is not msgpack (Kafka's binary
    # protocol, docs/clients.md: ``protocol.kafka_codec``); None: msgpack (docs/protocol.md).
    response_encoder: Callable[[Request, dict[str, Any]], tuple[bytes, bytes]] | None = None
    # A large request's response is encoded by the socket server's writer, off the event loop, rather than
    # here: ``complete`` keeps the body in ``response_body`` (``broker.network``, OFF_LOOP_BYTES).
    encode_later: bool = False
    response_body: dict[str, Any] | None = None

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def kafka_encoding(self) -> bool:
        """True when the request came in Kafka's binary encoding (Kafka's versions; docs/clients.md)."""
        return self.response_encoder is not None

    @property
    def response_frame(self) -> bytes | None:
        """The whole response frame (None: no response)."""
        parts = self.response_parts
        return None if parts is None else parts[0] + parts[1]

    @property
    def listener_name(self) -> str:
        """The listener the request arrived on (METADATA answers with addresses on it, as Kafka)."""
        return self.connection.listener_name

    @property
    def principal(self) -> KafkaPrincipal:
        """Who sent it (``User:ANONYMOUS`` unless the connection authenticated)."""
        return self.connection.principal

    def complete(self, body: dict[str, Any] | None) -> None:
        """Queues ``body`` as the response; ``None`` means no response is sent (PRODUCE with acks=0)."""
        if self.done:
            return
        self.done = True
        self.release_memory()
        try:
            self.completed_at = trio.current_time()  # a delayed response's delay counts from here
        except RuntimeError:  # completed outside trio (a test driving KafkaApis directly)
            self.completed_at = self.received_at
        if self.on_complete is not None:
            self.on_complete(self)
        if body is not None:
            encoder = self.response_encoder
            if encoder is not None and self.encode_later:
                self.response_body = body
            elif encoder is None:
                self.response_parts = encode_response_parts(self.header.correlation_id, body)
            else:
                self.response_parts = encoder(self, body)
        self.connection.response_ready()

    def close_connection_instead(self) -> None:
        """Sends no response and closes the connection after the responses queued before this request: how
        Kafka tells a client that expects no answer (PRODUCE with acks=0) that its request failed."""
        self.close_connection = True
        self.complete(None)

    def release_memory(self) -> None:
        """Gives the request's bytes back to the memory pool (once)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.release(self.size)


class RequestChannel:
    """A bounded queue of requests between connections and handlers (``queued.max.requests``)."""

    def __init__(self, queued_max_requests: int) -> None:
        self._send, self._receive = trio.open_memory_channel[Request](queued_max_requests)

    async def send_request(self, request: Request) -> None:
        await self._send.send(request)

    async def receive_request(self) -> Request:
        return await self._receive.receive()

    @property
    def queue_size(self) -> int:
        """Requests waiting for a handler (Kafka's ``RequestQueueSize``)."""
        return self._send.statistics().current_buffer_used

    def close(self) -> None:
        self._send.close()


Handler = Callable[[Request], Awaitable[None]]


def error_body(error: Errors, message: str) -> dict[str, Any]:
    return {"error_code": int(error), "error_message": message}


class RequestHandlerPool:
    """``num.io.threads`` tasks that take requests off the channel and hand them to ``handler``."""

    def __init__(self, channel: RequestChannel, handler: Handler, num_threads: int, name: str) -> None:
        self.channel = channel
        self.handler = handler
        self.num_threads = num_threads
        self.name = name

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for i in range(self.num_threads):
                nursery.start_soon(self._handler_loop, i)

    async def _handler_loop(self, index: int) -> None:
        while True:
            try:
                request = await self.channel.receive_request()
            except trio.EndOfChannel:
                return
            if request.connection.closed:
                request.release_memory()
                continue
            try:
                await self.handler(request)
            except Exception:  # a broker never crashes on what a client sends
                log.exception("%s handler %d: unexpected error on %s", self.name, index, request.header)
                request.complete(
                    error_body(Errors.UNKNOWN_SERVER_ERROR, "unexpected server error; see broker log")
                )
            finally:
                # As Kafka's handler: the request's bytes go back to the pool once it has been handled, not
                # when a delayed response (acks=-1, a long-poll FETCH) is sent, so requests parked in a
                # purgatory never keep the reads they wait for (follower fetches) out of the pool.
                request.release_memory()
