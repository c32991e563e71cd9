"""An async client connection (trio) with correlation ids and pipelining.

::

    async with open_connection("127.0.0.1", 9092, client_id="replica-fetcher-1") as conn:
        body = await conn.request(ApiKeys.METADATA, MetadataRequest())

Any number of tasks may call :meth:`KafkaConnection.request` at once: frames go out one at a time under a
send lock, a reader task matches responses to requests by correlation id. :meth:`request_many` writes
several requests with one ``send_all``. When the connection is lost, every pending and later request
raises :class:`ConnectionClosed`. A request that times out raises ``trio.TooSlowError`` and leaves the
connection usable; its late response is dropped. (If the timeout hits while the request's frame is half
written the stream cannot be reused: the connection is closed, and later requests raise ConnectionClosed.)

The reader task lives in a nursery owned by the ``open_connection`` context: nothing outlives it.

Security (``protocol.security``): a connection is opened with the ``ClientSecurity`` it is given, else the
process's ``current_client_security``, else PLAINTEXT. With SSL or SASL_SSL the stream is wrapped in trio's
``SSLStream`` and the TLS handshake done before the first request; with SASL the connection authenticates
(SASL_HANDSHAKE, SASL_AUTHENTICATE) before it is handed over. A failed TLS handshake raises
``ConnectionClosed``; refused credentials raise ``AuthenticationFailed`` (a ``ConnectionClosed`` carrying
Kafka's error code, since the server closes the connection), so callers that retry on a lost connection
retry, and log why.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from protocol import environment
from protocol.fault_injector import current_faults
from protocol.framing import FrameDecoder, decode_response, encode_request
from protocol.schema import to_body
from protocol.security import AuthenticationError, ClientSecurity, authenticate, effective_security

log = logging.getLogger(__name__)

T = TypeVar("T")

RECEIVE_BYTES = 256 * 1024
# Responses (FETCH) may be larger than the broker's request limit.
DEFAULT_MAX_RESPONSE_BYTES = 2**31 - 1
_INT32_MAX = 2**31 - 1


class ConnectionClosed(Exception):
    """The connection is gone (closed by either side, broken, or sent an invalid frame)."""


class ResponseLost(ConnectionClosed):
    """A later request on the connection was answered first, so this one's response was lost on the way:
    a server answers a connection's requests in order (docs/protocol.md, as Kafka's). The connection itself is
    still usable; whether the request took effect is unknown."""


class RequestNotSent(ConnectionClosed):
    """The connection was already gone, or its peer had closed it, when the request was to be written: the
    server cannot have acted on the request, so it may be sent elsewhere."""


class AuthenticationFailed(ConnectionClosed):
    """The server refused this client's SASL authentication and closed the connection; ``error`` is the code
    it answered (SASL_AUTHENTICATION_FAILED 58, UNSUPPORTED_SASL_MECHANISM 33, ILLEGAL_SASL_STATE 34)."""

    def __init__(self, error: AuthenticationError) -> None:
        super().__init__(str(error))
        self.error = error.error
        self.message = error.message


class _Pending:
    __slots__ = ("body", "error", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.body: dict[str, Any] | None = None
        self.error: BaseException | None = None


class KafkaConnection:
    """One client connection. Create it with :func:`open_connection` (or :func:`connect_stream`)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        client_id: str = "isrsim",
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.client_id = client_id
        self._stream = stream
        self._decoder = FrameDecoder(max_response_bytes)
        self._send_lock = trio.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, _Pending] = {}
        # Set by a client that relies on the server answering in request order (an isrsim or Kafka broker,
        # docs/protocol.md): an answer tells the requests sent before it, still unanswered, that theirs were
        # lost (:class:`ResponseLost`) instead of leaving them to time out. Off by default: the connection
        # also serves peers that complete requests out of order.
        self.responses_in_order = False
        self._closed: ConnectionClosed | None = None
        self._reader_scope = trio.CancelScope()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not arrived (timed-out ones excluded)."""
        return len(self._pending)

    # -------------------------------------------------------------------------------------- public

    async def request(
        self,
        api_key: int,
        body: Any,
        *,
        api_version: int = 0,
        timeout: float | None = 30.0,
    ) -> dict[str, Any]:
        """Send one request (``body``: a dict or a message dataclass) and return the response body."""
        with trio.fail_after(math.inf if timeout is None else timeout):
            cid, pending = self._register()
            try:
                frame = encode_request(api_key, api_version, cid, self.client_id, to_body(body))
                await self._send(frame)
                return await self._wait(pending)
            finally:
                self._forget(cid, pending)

    async def send_no_response(self, api_key: int, body: Any, api_version: int = 0) -> None:
        """Send a request the broker does not answer (PRODUCE with acks=0)."""
        self._check_open()
        cid = self._next_id()
        await self._send(encode_request(api_key, api_version, cid, self.client_id, to_body(body)))

    async def request_many(
        self,
        items: Sequence[tuple[int, Any]],
        *,
        api_version: int = 0,
        timeout: float | None = 30.0,
    ) -> list[dict[str, Any]]:
        """Send ``(api_key, body)`` requests with a single ``send_all`` and return their response bodies
        in the same order."""
        with trio.fail_after(math.inf if timeout is None else timeout):
            registered: list[tuple[int, _Pending]] = []
            try:
                frames = []
                for api_key, body in items:
                    cid, pending = self._register()
                    registered.append((cid, pending))
                    frames.append(encode_request(api_key, api_version, cid, self.client_id, to_body(body)))
                await self._send(b"".join(frames))
                return [await self._wait(pending) for _, pending in registered]
            finally:
                for cid, pending in registered:
                    self._forget(cid, pending)

    def abort(self, reason: str = "connection abandoned by the client") -> None:
        """Give the connection up at once, from synchronous code: pending and later requests raise
        ConnectionClosed (whoever owns the stream still closes it)."""
        self._fail(ConnectionClosed(reason))

    async def aclose(self) -> None:
        """Close the connection; pending requests raise ConnectionClosed."""
        self._fail(ConnectionClosed("connection closed by the client"))
        await trio.aclose_forcefully(self._stream)

    # ------------------------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed is not None:
            raise RequestNotSent(str(self._closed)) from self._closed

    def _next_id(self) -> int:
        # Correlation ids are int32; wrap around long before any id could still be in flight.
        return next(self._ids) & _INT32_MAX

    def _register(self) -> tuple[int, _Pending]:
        self._check_open()
        cid = self._next_id()
        pending = _Pending()
        self._pending[cid] = pending
        return cid, pending

    def _forget(self, cid: int, pending: _Pending) -> None:
        """After a request ends for any reason; a response still due is dropped when it arrives."""
        if self._pending.get(cid) is pending:
            del self._pending[cid]

    async def _send(self, data: bytes) -> None:
        async with self._send_lock:
            self._check_open()
            try:
                await self._stream.send_all(data)
            except BaseException as exc:
                # Partially written frames leave the stream unusable (trio's rule for send_all).
                self._fail(ConnectionClosed(f"send failed: {exc!r}"))
                if isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError | OSError):
                    raise RequestNotSent(f"send failed: {exc!r}") from exc
                raise

    async def _wait(self, pending: _Pending) -> dict[str, Any]:
        await pending.event.wait()
        if pending.error is not None:
            if isinstance(pending.error, ResponseLost):
                raise ResponseLost(str(pending.error))
            raise ConnectionClosed(str(pending.error)) from pending.error
        assert pending.body is not None
        return pending.body

    def _fail(self, error: ConnectionClosed) -> None:
        if self._closed is not None:
            return
        self._closed = error
        for pending in self._pending.values():
            pending.error = error
            pending.event.set()
        self._pending.clear()
        self._reader_scope.cancel()

    def _deliver(self, frame: bytes | bytearray) -> None:
        cid, body = decode_response(frame)
        if cid not in self._pending:
            # The request timed out or was cancelled (or the server answered a no-response request).
            log.debug("Dropping a response to correlation id %d: nobody is waiting for it", cid)
            return
        # ``_pending`` is in sending order: requests sent before this one and still unanswered will never
        # be answered (responses come in request order), so their waiters learn it now, not at a timeout.
        for earlier in list(self._pending) if self.responses_in_order else ():
            if earlier == cid:
                break
            lost = self._pending.pop(earlier)
            lost.error = ResponseLost(
                f"no response to correlation id {earlier}: a later request ({cid}) was answered first"
            )
            lost.event.set()
        pending = self._pending.pop(cid)
        pending.body = body
        pending.event.set()

    async def _reader(self) -> None:
        with self._reader_scope:
            await self._read_loop()

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._stream.receive_some(RECEIVE_BYTES)
                if not data:
                    raise ConnectionClosed("connection closed by the peer")
                self._decoder.feed(data)
                while (frame := self._decoder.next_frame()) is not None:
                    self._deliver(frame)
        except ConnectionClosed as exc:
            self._fail(exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(ConnectionClosed(f"connection lost: {exc!r}"))
        except Exception as exc:  # an invalid frame: the stream cannot be trusted any more
            log.warning("Closing connection after an invalid response: %r", exc)
            self._fail(ConnectionClosed(f"invalid response: {exc!r}"))


@asynccontextmanager
async def connect_stream(
    stream: trio.abc.Stream,
    *,
    client_id: str = "isrsim",
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    security: ClientSecurity | None = None,
    server_hostname: str | None = None,
    handshake_timeout: float = 30.0,
) -> AsyncIterator[KafkaConnection]:
    """A :class:`KafkaConnection` over an already open stream (any ``trio.abc.Stream``); the stream is
    closed on exit. With TLS (``security``, or the process's) the stream is wrapped and the handshake done
    first, checking the server's certificate against ``server_hostname``; with SASL the connection
    authenticates before it is yielded."""
    sec = effective_security(security)
    if sec.tls:
        stream = await _start_tls(stream, sec, server_hostname, handshake_timeout)
    conn = KafkaConnection(stream, client_id=client_id, max_response_bytes=max_response_bytes)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn._reader)
            try:
                if sec.sasl:
                    try:
                        with trio.fail_after(handshake_timeout):
                            await authenticate(conn, sec, timeout=handshake_timeout)
                    except AuthenticationError as refused:
                        raise AuthenticationFailed(refused) from None
                yield conn
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The reader task never raises, so a group holds what the caller's block raised: give the caller
        # back its own exception rather than a group wrapping it.
        if len(group.exceptions) != 1 or isinstance(group.exceptions[0], BaseExceptionGroup):
            raise
        exc = group.exceptions[0]
        context = exc.__context__
        try:
            raise exc
        finally:
            exc.__context__ = context
            del exc, group
    finally:
        conn._fail(ConnectionClosed("connection closed by the client"))
        await trio.aclose_forcefully(stream)


async def _start_tls(
    stream: trio.abc.Stream, security: ClientSecurity, server_hostname: str | None, timeout: float
) -> trio.SSLStream[trio.abc.Stream]:
    ssl_stream = trio.SSLStream(stream, security.ssl_context(), server_hostname=server_hostname or None)
    try:
        with trio.fail_after(timeout):
            await ssl_stream.do_handshake()
    except trio.BrokenResourceError as exc:
        await trio.aclose_forcefully(stream)
        cause = exc.__cause__ or exc
        raise ConnectionClosed(
            f"TLS handshake with {server_hostname or 'the server'} failed: {cause}"
        ) from exc
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return ssl_stream


async def open_tcp_stream(host: str, port: int) -> trio.abc.Stream:
    """``trio.open_tcp_stream``; inside a node process with network faults in force
    (``protocol.fault_injector.current_faults``), a connect to a node partitioned from this one hangs until
    the partition heals (the caller's timeout bounds it, as SYN retransmissions that get no answer)."""
    faults = current_faults.get()
    if faults is not None:
        await faults.wait_connectable(host, port)
    return await environment.open_tcp_stream(host, port)


@asynccontextmanager
async def open_connection(
    host: str,
    port: int,
    *,
    client_id: str = "isrsim",
    connect_timeout: float = 5.0,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    security: ClientSecurity | None = None,
) -> AsyncIterator[KafkaConnection]:
    """Connect to ``host:port``; raises ``OSError`` if the connection is refused and ``trio.TooSlowError``
    after ``connect_timeout`` seconds (network faults: see :func:`open_tcp_stream`). TLS and SASL as
    :func:`connect_stream` (the handshakes have ``connect_timeout`` too)."""
    with trio.fail_after(connect_timeout):
        stream = await open_tcp_stream(host, port)
    async with connect_stream(
        stream,
        client_id=client_id,
        max_response_bytes=max_response_bytes,
        security=security,
        server_hostname=host,
        handshake_timeout=connect_timeout,
    ) as conn:
        yield conn


__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "AuthenticationFailed",
    "ConnectionClosed",
    "KafkaConnection",
    "RequestNotSent",
    "ResponseLost",
    "connect_stream",
    "open_connection",
    "open_tcp_stream",
]
