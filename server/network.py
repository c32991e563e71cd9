"""The socket server (Kafka's SocketServer), on trio: the shell between the network and the request
channel (``server.request_channel``: ``Request``, ``RequestChannel``, the handler pool).

Each connection has a reader task and a writer task. The reader decodes frames and headers (the one place
that decodes) and queues requests on the ``RequestChannel``, which holds at most ``queued.max.requests``:
when it is full, readers stop reading, so TCP pushes back on clients. ``num.io.threads`` handler tasks
(``RequestHandlerPool``) take requests off the channel and call ``KafkaApis.handle``. A request's response
may be produced at once or later (delayed operations); the writer sends responses strictly in request
order, all the ready ones with a single ``send_all``.

Memory and connections (docs/protocol.md, "Limits"): a connection that has read a request's length prefix
takes that many bytes from the ``MemoryPool`` (``queued.max.request.bytes``) before it reads the rest, and
stops reading while the pool has none left; the request gives them back once handled (or answered).
Accepting waits while ``max.connections`` are open; a connection beyond ``max.connections.per.ip`` is closed
at once; a connection with nothing in flight and no traffic for ``connections.max.idle.ms`` is closed. When
accepting fails for lack of file descriptors (or memory), the acceptor backs off (0.1 s doubling to 2 s)
and logs one line when it starts failing and one when it recovers.

Network faults (docs/faults.md): with a :class:`~protocol.fault_injector.FaultInjector`, every request frame
read is first shown to it (dropped: never handled; delayed: held, in order, on the connection) and so is
every response frame before it is written (dropped: never written; delayed: the writer waits). The server
also answers NET_FAULTS itself, so every node serves it with no help from its ``KafkaApis``. A client's
connection whose answer was dropped writes no answer after it either (``Connection.answers_lost``): a TCP
stream delivers in order, so data after a lost segment cannot arrive; the client's requests still take
effect, and it times out and reconnects, as a Kafka client would.

Protocol-level fault rules (SPEC §16, ``protocol.fault_rules``): a request about to be acted on (past
authentication and the version checks) is shown to the node's rule table when it holds any rule (one falsy
check otherwise). A rule that fires ``before`` answers the request with its error (Kafka's error response for
the API, the error on each of the request's partitions), delays it, leaves it unanswered, or closes the
connection, without acting on it; ``after``, the request is acted on and its answer is replaced by the
error, delayed, dropped or replaced by a closed connection. A dropped answer loses the answers after it on
that connection too, as a dropped response frame does. The server answers PROTOCOL_FAULTS itself.

Security (docs/security.md): a listener may ask for TLS and SASL (``ListenerSecurity``). On a TLS listener
the accepted stream is wrapped in trio's ``SSLStream`` (the handshake happens on the first read; a peer that
does not speak TLS is disconnected). On a SASL listener every request read before the connection
authenticated goes to its ``SaslServerAuthenticator`` first, which lets API_VERSIONS through, answers
SASL_HANDSHAKE and SASL_AUTHENTICATE itself, and closes the connection on anything else or on a failure
(after the answer, if there is one). Once authenticated, ``Connection.principal`` is ``User:<name>``.
"""

from __future__ import annotations

import errno
import importlib
import itertools
import logging
import struct
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol import environment
from protocol.api_keys import ApiKeys
from protocol.api_specs import REQUEST_TYPES, SPECS, error_response
from protocol.errors import Errors
from protocol.fault_injector import EXEMPT_APIS, FaultInjector
from protocol.fault_rules import ProtocolFaultRule, ProtocolFaultTable, request_facts
from protocol.faults import CLIENT, DelayLine, node_of_client_id
from protocol.framing import (
    FrameDecoder,
    FrameTooLarge,
    InvalidFrame,
    RequestHeader,
    decode_request,
    encode_response_parts,
    is_kafka_frame,
)
from server.memory_pool import ConnectionQuotas, MemoryPool
from server.request_channel import Request, RequestChannel, error_body
from server.security.credentials import CredentialStore
from server.security.listener_security import ListenerSecurity
from server.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from server.security.sasl_server import SaslServerAuthenticator, SaslState, illegal_sasl_state

log = logging.getLogger(__name__)

RECEIVE_BYTES = 256 * 1024
# A response part at least this large is written on its own instead of being joined with its neighbours.
SEND_WITHOUT_JOINING_BYTES = 64 * 1024
MAX_IN_FLIGHT_PER_CONNECTION = 1000
# A connection stops reading while more than this many bytes of its responses wait to be written (its
# client does not read them), as Kafka mutes a channel while its response is being sent: one client that
# pipelines requests and never reads the answers holds this much, not 1000 responses.
RESPONSE_BACKLOG_BYTES = 1024 * 1024
# A Kafka-encoded request frame at least this large is decoded, and its response encoded, in a worker thread
# (docs/protocol.md, "Limits"): a frame of a few MB holding 100,000s of topics, partitions or keys takes
# seconds to read and to answer, and the event loop serves every other connection, fetch and heartbeat
# meanwhile; one of 200 KB took 100-300 ms on two busy cores. Smaller frames are read in the loop, where a
# thread would cost more than it saves.
OFF_LOOP_BYTES = 32 * 1024
# How long a connection that stopped reading waits for the responses to requests it already accepted.
CLOSE_DRAIN_TIMEOUT_S = 10.0
# accept() failures that mean "no resources right now" (trio's ACCEPT_CAPACITY_ERRNOS): back off and retry.
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_BACKOFF_MIN_S = 0.1
ACCEPT_BACKOFF_MAX_S = 2.0
TLS_HANDSHAKE_TIMEOUT_S = 30.0
# What a SASL listener serves before the connection authenticated.
_PRE_AUTH_APIS = frozenset(
    {int(ApiKeys.API_VERSIONS), int(ApiKeys.SASL_HANDSHAKE), int(ApiKeys.SASL_AUTHENTICATE)}
)
_KAFKA_CODEC = "protocol.kafka_codec"
# The bodies a Kafka-encoded request is read into (the same dataclasses' names as msgpack's, docs/clients.md).
_KAFKA_BODY_TYPES: dict[int, type] = {int(k): v for k, v in REQUEST_TYPES.items()}


def _api_name(api_key: int) -> str:
    try:
        return ApiKeys(api_key).name
    except ValueError:
        return f"api_key {api_key}"


@dataclass(eq=False)
class Connection:
    id: int
    peer: str
    stream: trio.abc.Stream
    pending: deque[Request] = field(default_factory=deque)
    _ready: trio.Event = field(default_factory=trio.Event)
    _drained: trio.Event = field(default_factory=trio.Event)
    closed: bool = False
    # Network faults: request frames held back by a delay (release time, header, body, size), in order.
    held: deque[tuple[float, RequestHeader, dict[str, Any], int]] = field(default_factory=deque)
    _held_ready: trio.Event = field(default_factory=trio.Event)
    inbound_line: DelayLine = field(default_factory=DelayLine)
    outbound_line: DelayLine = field(default_factory=DelayLine)
    address: str = "?"
    listener_name: str = "PLAINTEXT"  # the listener it was accepted on
    # Who the peer is: ANONYMOUS until SASL authenticates it (Kafka's RequestContext.principal).
    principal: KafkaPrincipal = ANONYMOUS
    last_active: float = 0.0  # trio time of the last bytes read or written (connections.max.idle.ms)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    # SASL listeners: the connection's authenticator until it authenticated (None: no SASL here).
    authenticator: SaslServerAuthenticator | None = None
    sasl_listener: bool = False
    # The encoding, chosen by the first request (docs/clients.md): None until then, True for Kafka's binary
    # protocol, False for msgpack.
    kafka: bool | None = None
    # Network faults: a client's answer was dropped, so none after it reaches the client (docstring).
    answers_lost: bool = False
    # After a SaslHandshake v0 (before KIP-152's SaslAuthenticate): the next frames are raw SASL tokens,
    # a 4-byte length and the token, both ways, until the mechanism completes.
    raw_sasl_tokens: bool = False
    # Responses taken off ``pending`` by the write loop and not yet written to the socket, and their bytes.
    writing: bool = False
    writing_bytes: int = 0
    _written: trio.Event = field(default_factory=trio.Event)
    # Protocol-level fault rules that fired on requests of this connection and act on their answers (an
    # ``after`` rule, or a ``before`` drop-response), with the error body a rule answers with.
    rule_faults: dict[Request, tuple[ProtocolFaultRule, dict[str, Any] | None]] = field(default_factory=dict)

    def hold(self, release_at: float, header: RequestHeader, body: dict[str, Any], size: int) -> None:
        self.held.append((release_at, header, body, size))
        self._held_ready.set()

    async def wait_held(self) -> None:
        await self._held_ready.wait()
        self._held_ready = trio.Event()

    def response_ready(self) -> None:
        self._ready.set()

    async def wait_ready(self) -> None:
        await self._ready.wait()
        self._ready = trio.Event()

    def responses_sent(self) -> None:
        self._drained.set()
        self._written.set()

    def response_backlog(self) -> int:
        """Bytes of responses ready and not yet written: being written, or waiting in ``pending``."""
        waiting = 0
        for request in self.pending:
            parts = request.response_parts
            if parts is not None:
                waiting += len(parts[1])
            elif request.response_body is not None:
                waiting += request.size  # a large request's answer, encoded when written: about as large
        return self.writing_bytes + waiting

    async def wait_backlog_below(self, limit: int) -> None:
        """Until the responses waiting to be written are at most ``limit`` bytes (RESPONSE_BACKLOG_BYTES)."""
        while self.response_backlog() > limit:
            self._written = trio.Event()
            await self._written.wait()

    async def wait_below(self, limit: int) -> None:
        while len(self.pending) >= limit:
            self._drained = trio.Event()
            await self._drained.wait()

    async def wait_flushed(self) -> None:
        """Until every accepted request's response is written (or dropped): not only taken off ``pending``
        but through the socket, so closing now cuts no response short."""
        while self.pending or self.writing:
            self._drained = trio.Event()
            await self._drained.wait()


def distinguished_name(cert: Mapping[str, Any]) -> str:
    """An X.509 subject as RFC 2253 writes it (Java's ``X500Principal.getName()``): most significant last,
    ``CN=broker-1,O=isrsim``."""
    short = {
        "commonName": "CN",
        "organizationName": "O",
        "organizationalUnitName": "OU",
        "countryName": "C",
        "localityName": "L",
        "stateOrProvinceName": "ST",
        "streetAddress": "STREET",
        "domainComponent": "DC",
        "userId": "UID",
    }

    def escape(value: str) -> str:
        out = "".join("\\" + ch if ch in ',+"\\<>;' else ch for ch in value)
        if out.startswith((" ", "#")):
            out = "\\" + out
        return out[:-1] + "\\ " if out.endswith(" ") else out

    rdns = [
        "+".join(f"{short.get(str(k), str(k))}={escape(str(v))}" for k, v in rdn)
        for rdn in cert.get("subject", ())
    ]
    return ",".join(reversed(rdns))


class _CloseConnection(Exception):
    """Stop reading this connection: answer what was accepted, then close it (a SASL refusal)."""


class SocketServer:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        channel: RequestChannel,
        max_request_bytes: int,
        supported: Mapping[int, tuple[int, int]],
        name: str,
        faults: FaultInjector | None = None,
        memory_pool: MemoryPool | None = None,
        quotas: ConnectionQuotas | None = None,
        connections_max_idle_ms: int = 600_000,
        listeners: Sequence[tuple[str, str, int]] = (),
        security: Mapping[str, ListenerSecurity] | None = None,
        credential_store: CredentialStore | None = None,
        kafka_supported: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        # (name, host, port) per listener, bound in order; without them, one PLAINTEXT on host:port.
        self.listeners = list(listeners) or [("PLAINTEXT", host, port)]
        self.bound_ports: dict[str, int] = {}
        self.channel = channel
        self.max_request_bytes = max_request_bytes
        self.supported = dict(supported)
        self.name = name
        self.faults = faults
        # Asked before NET_FAULTS is served: None to serve it, else why not (CLUSTER_AUTHORIZATION_FAILED).
        self.net_faults_check: Callable[[Request], str | None] | None = None
        if faults is not None:
            self.supported[int(ApiKeys.NET_FAULTS)] = SPECS[ApiKeys.NET_FAULTS].versions
            self.supported[int(ApiKeys.PROTOCOL_FAULTS)] = SPECS[ApiKeys.PROTOCOL_FAULTS].versions
        # The node's protocol-level fault rules (an empty table when the node has no fault injector).
        self.rules: ProtocolFaultTable = faults.rules if faults is not None else ProtocolFaultTable(name)
        self.bound_port: int | None = None
        self._ids = itertools.count(1)
        self.connections: dict[int, Connection] = {}
        self.closed_for_bad_input = 0
        self.muted_for_backlog = 0  # times a connection stopped reading for its unread responses
        self.memory_pool = memory_pool or MemoryPool(-1)
        self.quotas = quotas or ConnectionQuotas(2**31 - 1, 2**31 - 1)
        self.connections_max_idle_s = connections_max_idle_ms / 1000.0
        self.closed_idle = 0
        self._memory_freed = trio.Event()
        self._slot_freed = trio.Event()
        self.memory_pool.add_release_listener(self._on_memory_released)
        # Listener name -> its TLS / SASL (absent: PLAINTEXT), and the credentials SASL checks against.
        self.security = dict(security or {})
        self.credential_store = credential_store if credential_store is not None else CredentialStore()
        # The versions served to connections in Kafka's encoding (docs/clients.md). SASL is answered here.
        self.kafka_supported = dict(kafka_supported or {})
        for key in (ApiKeys.SASL_HANDSHAKE, ApiKeys.SASL_AUTHENTICATE):
            sasl = SPECS[key]
            self.supported.setdefault(int(key), sasl.versions)
            if sasl.kafka_versions is not None:
                self.kafka_supported.setdefault(int(key), sasl.kafka_versions)
        self.authentication_failures = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Binds every listener (Kafka's one Acceptor per listener), then accepts on all of them;
        ``task_status`` gets the first listener's port (``bound_ports`` has each one's)."""
        bound: list[tuple[str, list[environment.StreamListener]]] = []
        try:
            for name, host, port in self.listeners:
                sockets = await environment.open_tcp_listeners(port, host)
                bound.append((name, sockets))
                self.bound_ports[name] = environment.listener_port(sockets[0])
                log.info("%s listening on %s:%d (%s)", self.name, host, self.bound_ports[name], name)
        except BaseException:
            for _, sockets in bound:
                for sock in sockets:
                    environment.close_listener(sock)
            raise
        self.bound_port = self.bound_ports[self.listeners[0][0]]
        task_status.started(self.bound_port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._expire_idle_connections)
            for name, sockets in bound:
                for listener in sockets:
                    nursery.start_soon(self._accept_loop, listener, nursery, name)

    # ------------------------------------------------------------------ accepting, quotas, idle connections

    async def _accept_loop(
        self, listener: environment.StreamListener, nursery: trio.Nursery, listener_name: str = "PLAINTEXT"
    ) -> None:
        """Kafka's Acceptor: waits while ``max.connections`` are open; backs off when accept() has no file
        descriptors (or memory) left, logging once when that starts and once when it ends."""
        backoff = ACCEPT_BACKOFF_MIN_S
        failing_since: float | None = None
        failures = 0
        while True:
            while not self.quotas.can_accept():
                self._slot_freed = trio.Event()
                await self._slot_freed.wait()
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                failures += 1
                if failing_since is None:
                    failing_since = trio.current_time()
                    log.error(
                        "%s cannot accept connections: %s; retrying with back-off up to %.0f s until "
                        "connections close (raise the open-files limit, ulimit -n, or lower max.connections)",
                        self.name,
                        exc.strerror or exc,
                        ACCEPT_BACKOFF_MAX_S,
                    )
                await trio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_MAX_S)
                continue
            if failing_since is not None:
                log.warning(
                    "%s accepting connections again after %d failed attempts over %.1f s",
                    self.name,
                    failures,
                    trio.current_time() - failing_since,
                )
                failing_since, failures = None, 0
            backoff = ACCEPT_BACKOFF_MIN_S
            try:
                address, port = environment.peer_address(stream)
            except OSError:
                address, port = "?", 0
            # Counted here, before the next accept, so max.connections holds however fast clients connect.
            if self.quotas.inc(address):
                nursery.start_soon(
                    self._handle_connection, stream, address, f"{address}:{port}", listener_name
                )
                continue
            log.info(
                "%s rejected connection from %s:%s: it already has %d connections (max.connections.per.ip)",
                self.name,
                address,
                port,
                self.quotas.count(address),
            )
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()

    async def _expire_idle_connections(self) -> None:
        """Closes connections with nothing in flight and no traffic for ``connections.max.idle.ms``."""
        idle = self.connections_max_idle_s
        while True:
            await trio.sleep(min(max(idle / 10, 0.01), 10.0))
            now = trio.current_time()
            for conn in list(self.connections.values()):
                if not conn.pending and not conn.held and now - conn.last_active > idle:
                    log.info(
                        "%s closing connection %s: idle for more than %d ms (connections.max.idle.ms)",
                        self.name,
                        conn.peer,
                        int(idle * 1000),
                    )
                    self.closed_idle += 1
                    conn.scope.cancel()

    def _on_memory_released(self) -> None:
        self._memory_freed.set()

    async def _allocate(self, conn: Connection, nbytes: int) -> None:
        """Takes ``nbytes`` from the memory pool, not reading ``conn`` until the pool can give them."""
        pool = self.memory_pool
        if pool.try_allocate(nbytes):
            return
        log.info(
            "%s: memory pool used up (queued.max.request.bytes=%d); connection %s stops reading until "
            "requests are answered",
            self.name,
            pool.size,
            conn.peer,
        )
        while not pool.try_allocate(nbytes):
            self._memory_freed = trio.Event()
            await self._memory_freed.wait()

    def _release(self, nbytes: int) -> None:
        self.memory_pool.release(nbytes)

    # ------------------------------------------------------------------ one connection

    async def _handle_connection(
        self, stream: trio.abc.Stream, address: str, peer: str, listener_name: str = "PLAINTEXT"
    ) -> None:
        """Serves one connection, already counted in the quotas under ``address``."""
        security = self.security.get(listener_name)
        served: trio.abc.Stream = stream
        if security is not None and security.ssl_context is not None:
            served = trio.SSLStream(stream, security.ssl_context, server_side=True)
        conn = Connection(
            next(self._ids),
            peer,
            served,
            address=address,
            listener_name=listener_name,
            last_active=trio.current_time(),
        )
        if security is not None and security.sasl:
            conn.sasl_listener = True
            conn.authenticator = SaslServerAuthenticator(security.sasl_mechanisms, self.credential_store)
        self.connections[conn.id] = conn
        try:
            with conn.scope:
                await self._serve_connection(conn)
        finally:
            conn.closed = True
            self.connections.pop(conn.id, None)
            self.quotas.dec(address)
            self._slot_freed.set()
            for request in conn.pending:
                request.release_memory()
            for _, _, _, size in conn.held:
                self._release(size)
            conn.held.clear()
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()

    async def _serve_connection(self, conn: Connection) -> None:
        if isinstance(conn.stream, trio.SSLStream) and not await self._tls_handshake(conn, conn.stream):
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, conn)
                if self.faults is not None:
                    nursery.start_soon(self._release_loop, conn)
                await self._read_loop(conn)
                # Nothing more is read (end of stream or bad input). The requests already accepted are
                # still answered, in order, before the connection closes: a client that pipelined valid
                # requests ahead of a bad frame gets their responses, as it would from Kafka, which
                # answers one request before it reads the next.
                with trio.move_on_after(CLOSE_DRAIN_TIMEOUT_S):
                    await conn.wait_flushed()
                nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            # The peer went away while a response was being written (the write loop's error reaches us
            # wrapped in the nursery's exception group): the connection is over, the broker is not.
            pass
        except* Exception as group:
            # Nothing that happens on one connection may take the broker down: log it, drop the connection.
            log.error(
                "%s: closing connection %s after an unexpected error", self.name, conn.peer, exc_info=group
            )

    async def _tls_handshake(self, conn: Connection, stream: trio.SSLStream[trio.abc.Stream]) -> bool:
        """The TLS handshake, before anything is read. On an SSL listener that asks for client certificates
        (``ssl.client.auth``) the peer's certificate names the principal, as Kafka's default principal
        builder names it: ``User:`` and the subject's distinguished name (``User:CN=broker-1,O=isrsim``)."""
        try:
            with trio.fail_after(min(self.connections_max_idle_s, TLS_HANDSHAKE_TIMEOUT_S)):
                await stream.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, OSError) as exc:
            cause = exc.__cause__ or exc
            log.info("%s closing connection %s: TLS handshake failed: %s", self.name, conn.peer, cause)
            return False
        if conn.authenticator is None and not conn.sasl_listener:
            cert = stream.getpeercert()
            if cert:
                conn.principal = KafkaPrincipal(USER_TYPE, distinguished_name(cert))
        return True

    async def _read_loop(self, conn: Connection) -> None:
        decoder = FrameDecoder(self.max_request_bytes)
        reserved = 0  # pool bytes taken for the frame being received (0: none yet)
        try:
            while True:
                if conn.response_backlog() > RESPONSE_BACKLOG_BYTES:
                    # The client does not read its answers: stop reading its requests (Kafka's mute).
                    self.muted_for_backlog += 1
                    await conn.wait_backlog_below(RESPONSE_BACKLOG_BYTES)
                try:
                    data = await conn.stream.receive_some(RECEIVE_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return
                if not data:
                    return
                conn.last_active = trio.current_time()
                try:
                    decoder.feed(data)
                    while True:
                        payload = decoder.next_frame()
                        if payload is None:
                            need = decoder.pending_frame_bytes
                            if need > 0 and not reserved:
                                # Kafka reads the size, then allocates from the pool before the payload.
                                await self._allocate(conn, need)
                                reserved = need
                            break
                        if not reserved:
                            await self._allocate(conn, len(payload))
                        reserved = 0  # handed on with the payload
                        await self._dispatch(conn, payload)
                except FrameTooLarge as exc:
                    self.closed_for_bad_input += 1
                    log.warning(
                        "%s closing connection %s: %s (socket.request.max.bytes)", self.name, conn.peer, exc
                    )
                    return
                except InvalidFrame as exc:
                    self.closed_for_bad_input += 1
                    log.warning(
                        "%s closing connection %s: invalid request frame: %s", self.name, conn.peer, exc
                    )
                    return
                except _CloseConnection:
                    return
        finally:
            if reserved:
                self._release(reserved)

    async def _dispatch(self, conn: Connection, payload: bytes | bytearray) -> None:
        """Hands on a frame read whole, whose ``len(payload)`` bytes were taken from the memory pool."""
        if conn.raw_sasl_tokens:
            self._raw_sasl_token(conn, payload)
            return
        try:
            if conn.kafka is None:
                conn.kafka = is_kafka_frame(payload)
                if conn.kafka:
                    log.debug("%s: connection %s speaks Kafka's binary protocol", self.name, conn.peer)
                    if _KAFKA_CODEC not in sys.modules:
                        # The codec's first import (a quarter of a second) is not made on the loop.
                        await environment.run_sync(importlib.import_module, _KAFKA_CODEC)
            if not conn.kafka:
                header, body = decode_request(payload)
            elif len(payload) >= OFF_LOOP_BYTES:
                header, body = await environment.run_sync(self._decode_kafka, payload)
            else:
                header, body = self._decode_kafka(payload)
        except BaseException:
            self._release(len(payload))
            raise
        faults = self.faults
        if faults is not None:
            decision = faults.inbound(header.client_id, header.api_key)
            if decision.drop:
                log.debug(
                    "%s: %s request from %r %s (network fault)",
                    self.name,
                    header.api_key,
                    header.client_id,
                    decision.reason,
                )
                self._release(len(payload))
                return
            if decision.delay_ms > 0 or conn.held:
                now = trio.current_time()
                conn.hold(
                    conn.inbound_line.release_at(now, decision.delay_ms / 1000.0), header, body, len(payload)
                )
                return
        await self._accept(conn, header, body, len(payload))

    def _decode_kafka(self, payload: bytes | bytearray) -> tuple[RequestHeader, dict[str, Any]]:
        """A Kafka request: a header that cannot be read, or a body of a served version that does not
        parse, raises ``InvalidFrame`` (Kafka closes the connection on both). An API or version this broker
        does not serve passes with what could be read of it, to be answered UNSUPPORTED_VERSION."""
        # Kafka's codec (kafka-python's generated classes) loads with the first Kafka client: a broker only
        # ever spoken to in msgpack, as most are, starts without it (a fifth of its start-up).
        from protocol import kafka_codec

        decoded = kafka_codec.decode_request(payload, _KAFKA_BODY_TYPES)
        header = decoded.header
        versions = self.kafka_supported.get(header.api_key)
        if decoded.error is not None and versions is not None:
            low, high = versions
            if low <= header.api_version <= high:
                raise InvalidFrame(
                    f"{_api_name(header.api_key)} v{header.api_version} request body does not parse: "
                    f"{decoded.error}"
                )
        return header, decoded.body or {}

    def _encode_kafka(self, request: Request, body: dict[str, Any]) -> tuple[bytes, bytes]:
        from protocol import kafka_codec

        return kafka_codec.encode_response_parts(
            request.header, request.body, body, api_versions=self.kafka_supported
        )

    async def _release_loop(self, conn: Connection) -> None:
        """Hands delayed request frames on at their release times, in the order they arrived."""
        while True:
            while not conn.held:
                await conn.wait_held()
            release_at, header, body, size = conn.held[0]
            await trio.sleep_until(release_at)
            conn.held.popleft()
            try:
                await self._accept(conn, header, body, size)
            except _CloseConnection:
                with trio.move_on_after(CLOSE_DRAIN_TIMEOUT_S):
                    await conn.wait_flushed()  # what it was due is written first, as on the read path
                conn.scope.cancel()
                return

    async def _accept(self, conn: Connection, header: RequestHeader, body: dict[str, Any], size: int) -> None:
        try:
            await conn.wait_below(MAX_IN_FLIGHT_PER_CONNECTION)
        except BaseException:
            self._release(size)
            raise
        request = Request(header, body, conn, trio.current_time(), size, pool=self.memory_pool)
        if conn.kafka:
            request.response_encoder = self._encode_kafka
            request.encode_later = size >= OFF_LOOP_BYTES
        conn.pending.append(request)
        # Before authentication only API_VERSIONS and SASL get past here (NET_FAULTS and unknown APIs
        # included: as Kafka's SaslServerAuthenticator, anything else closes the connection unanswered).
        if conn.authenticator is not None and header.api_key not in _PRE_AUTH_APIS:
            self._authenticate(conn, request)
        versions = (self.kafka_supported if conn.kafka else self.supported).get(header.api_key)
        if versions is None:
            request.complete(error_body(Errors.UNSUPPORTED_VERSION, f"unknown api_key {header.api_key}"))
            self._close_after_unsupported(conn, f"unknown api_key {header.api_key}")
            return
        low, high = versions
        if not low <= header.api_version <= high:
            why = (
                f"{_api_name(header.api_key)} version {header.api_version} is not supported "
                f"(supported: {low}..{high})"
            )
            request.complete(error_body(Errors.UNSUPPORTED_VERSION, why))
            if header.api_key != ApiKeys.API_VERSIONS:  # KIP-511: answered with the ranges, and served on
                self._close_after_unsupported(conn, why)
            return
        spec = SPECS.get(header.api_key)
        refused = spec.kafka_refused if conn.kafka and spec is not None else None
        if refused is not None and refused[0] <= header.api_version <= refused[1]:
            # Advertised and refused, as Kafka 4 does with PRODUCE v0-2 (KIP-896).
            request.complete(
                error_body(
                    Errors.UNSUPPORTED_VERSION,
                    f"{_api_name(header.api_key)} version {header.api_version} is no longer supported; "
                    f"use {refused[1] + 1} or later",
                )
            )
            return
        if conn.authenticator is not None:
            self._authenticate(conn, request)
            if (
                conn.kafka
                and header.api_key == ApiKeys.SASL_HANDSHAKE
                and header.api_version == 0
                and conn.authenticator is not None
                and conn.authenticator.state is SaslState.AUTHENTICATE
            ):
                # Kafka's SaslHandshake v0 (KIP-43): the tokens follow raw, without Kafka's request framing
                # (isrsim's own msgpack SASL numbers its flow v0 and goes on with SASL_AUTHENTICATE).
                conn.raw_sasl_tokens = True
            if request.done:
                return
        elif header.api_key in (ApiKeys.SASL_HANDSHAKE, ApiKeys.SASL_AUTHENTICATE):
            why = (
                "after successful authentication"
                if conn.sasl_listener
                else f"on {conn.listener_name}, which has no SASL"
            )
            request.complete(illegal_sasl_state(header.api_key, why))
            return
        if header.api_key == ApiKeys.NET_FAULTS and self.faults is not None:
            denied = None if self.net_faults_check is None else self.net_faults_check(request)
            if denied is not None:
                request.complete(error_body(Errors.CLUSTER_AUTHORIZATION_FAILED, denied))
                return
            request.complete(self.faults.handle_net_faults(body))
            return
        if header.api_key == ApiKeys.PROTOCOL_FAULTS and self.faults is not None:
            denied = None if self.net_faults_check is None else self.net_faults_check(request)
            if denied is not None:
                request.complete(error_body(Errors.CLUSTER_AUTHORIZATION_FAILED, denied))
                return
            request.complete(self.faults.handle_protocol_faults(body))
            return
        if self.rules and await self._apply_rule(conn, request):
            return
        await self.channel.send_request(request)

    async def _apply_rule(self, conn: Connection, request: Request) -> bool:
        """Asks the rule table about a request about to be acted on. True when a ``before`` rule answered
        it (or closed the connection) so it is not acted on; False to hand it on, after a ``before`` delay,
        and with an ``after`` rule noted for its answer (see the module's doc)."""
        faults = self.faults
        assert faults is not None
        header = request.header
        facts = request_facts(header.api_key, header.client_id, request.body)
        if self.rules.observing:
            for seen in self.rules.observe(facts):
                faults.rule_hit(seen, facts)
        hit = self.rules.match(facts)
        if hit is None:
            return False
        faults.rule_hit(hit, facts)
        rule = hit.rule
        error = None
        if rule.error is not None:
            error = self._rule_error_body(request, rule)
        if rule.when == "after":
            conn.rule_faults[request] = (rule, error)
            return False
        if error is not None:
            request.complete(error)
            return True
        if rule.delay_ms > 0:
            await trio.sleep(rule.delay_ms / 1000.0)
            return False
        if rule.drop_response:
            conn.rule_faults[request] = (rule, None)
            request.complete(None)
            return True
        request.close_connection_instead()  # disconnect
        return True

    @staticmethod
    def _rule_error_body(request: Request, rule: ProtocolFaultRule) -> dict[str, Any]:
        """Kafka's error answer to ``request`` with the rule's error, spread over the request's topics and
        partitions as Kafka's ``getErrorResponse`` does (the same body in both encodings)."""

        assert rule.error is not None
        message = f"{Errors(rule.error).name} (isrsim fault rule {rule.id})"
        # The error at the top level too, whatever the response's shape (a client reads what it knows).
        return {
            "error_code": rule.error,
            "error_message": message,
            **error_response(request.api_key, request.body, rule.error, message),
        }

    def _raw_sasl_token(self, conn: Connection, payload: bytes | bytearray) -> None:
        """One raw SASL token after a SaslHandshake v0, answered with the mechanism's raw token (a 4-byte
        length and the bytes, no response header; an empty token too, as Kafka's legacy flow sends what
        the mechanism returns). A failure closes the connection with no answer: the legacy flow has no
        error response (Kafka's SaslServerAuthenticator)."""
        authenticator = conn.authenticator
        assert authenticator is not None
        header = RequestHeader(ApiKeys.SASL_AUTHENTICATE, 0, 0, "")
        request = Request(header, {}, conn, trio.current_time(), len(payload), pool=self.memory_pool)
        step = authenticator.receive(ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": bytes(payload)})
        answer = step.response or {}
        if step.close or answer.get("error_code", 0) != 0:
            request.release_memory()
            self.authentication_failures += 1
            log.warning(
                "%s closing connection %s on %s: %s", self.name, conn.peer, conn.listener_name, step.reason
            )
            raise _CloseConnection(step.reason or "SASL authentication failed")
        if authenticator.complete:
            if authenticator.principal is not None:
                conn.principal = authenticator.principal
            conn.authenticator = None
            conn.raw_sasl_tokens = False
        token = bytes(answer.get("auth_bytes") or b"")
        request.response_encoder = lambda _request, _body: (struct.pack(">I", len(token)), token)
        conn.pending.append(request)
        request.complete({})

    def _close_after_unsupported(self, conn: Connection, why: str) -> None:
        """On Kafka's encoding an unknown API key or an unsupported version ends the connection, as in
        Kafka's SocketServer (the header's parse fails: InvalidRequestException / UnsupportedVersionException,
        and the channel is closed); here after the UNSUPPORTED_VERSION answer SPEC §10 gives it, so a
        client learns why (docs/clients.md). A msgpack connection goes on (docs/protocol.md)."""
        if conn.kafka:
            self.closed_for_bad_input += 1
            log.warning("%s closing connection %s after UNSUPPORTED_VERSION: %s", self.name, conn.peer, why)
            raise _CloseConnection(why)

    def _authenticate(self, conn: Connection, request: Request) -> None:
        """A request on a SASL listener before it authenticated: the authenticator says what to do (answer,
        close, or let it through). Raises ``_CloseConnection`` to stop reading after a refusal."""
        authenticator = conn.authenticator
        assert authenticator is not None
        step = authenticator.receive(request.api_key, request.body)
        if authenticator.complete:
            if authenticator.principal is not None:
                conn.principal = authenticator.principal
                log.debug(
                    "%s: connection %s on %s authenticated as %s (%s)",
                    self.name,
                    conn.peer,
                    conn.listener_name,
                    conn.principal,
                    authenticator.mechanism,
                )
            conn.authenticator = None
        if step.passthrough:
            return
        if step.close:
            self.authentication_failures += 1
            log.warning(
                "%s closing connection %s on %s: %s", self.name, conn.peer, conn.listener_name, step.reason
            )
            if step.response is not None:
                request.complete(step.response)
            else:
                conn.pending.remove(request)
                request.done = True
                request.release_memory()
            raise _CloseConnection(step.reason)
        request.complete(step.response)

    async def _write_loop(self, conn: Connection) -> None:
        pending = conn.pending
        while True:
            while not (pending and pending[0].done):
                await conn.wait_ready()
            frames: list[bytes] = []
            conn.writing = True
            while pending and pending[0].done:
                request = pending.popleft()
                if request.response_body is not None and request.response_encoder is not None:
                    # A large request's response: encoded here, in a worker thread (OFF_LOOP_BYTES).
                    late, request.response_body = request.response_body, None
                    request.response_parts = await environment.run_sync(
                        request.response_encoder, request, late
                    )
                parts = request.response_parts
                # Sent (or never to be): the request keeps neither its body nor its response, since a
                # completed delayed operation may still hold it until its purgatory is purged.
                request.response_parts = None
                request.body = {}
                if request.close_connection:
                    await self._send_frames(conn, frames)
                    log.info(
                        "%s closing connection %s: a request that gets no response failed (api key %d)",
                        self.name,
                        conn.peer,
                        request.api_key,
                    )
                    conn.scope.cancel()
                    return
                if conn.rule_faults:
                    fault = conn.rule_faults.pop(request, None)
                    if fault is not None:
                        rule, error = fault
                        if rule.disconnect or (error is not None and parts is None):
                            # Disconnected; an error for a request that gets no answer (acks=0) is told as
                            # Kafka tells it, by closing the connection.
                            await self._send_frames(conn, frames)
                            log.info("%s closing connection %s: fault rule %d", self.name, conn.peer, rule.id)
                            conn.scope.cancel()
                            return
                        if rule.drop_response:
                            conn.answers_lost = True
                            continue
                        if error is not None and not conn.answers_lost:
                            parts = (
                                self._encode_kafka(request, error)
                                if conn.kafka
                                else encode_response_parts(request.header.correlation_id, error)
                            )
                        if rule.delay_ms > 0 and parts is not None:
                            release_at = request.completed_at + rule.delay_ms / 1000.0
                            if release_at > trio.current_time():
                                await self._send_frames(conn, frames)
                                frames = []
                                await trio.sleep_until(release_at)
                if parts is None or (conn.answers_lost and request.api_key not in EXEMPT_APIS):
                    continue
                if self.faults is not None and self.faults.active:
                    decision = self.faults.outbound(request.header.client_id, request.api_key)
                    if decision.drop:
                        conn.answers_lost = node_of_client_id(request.header.client_id) == CLIENT
                        continue
                    release_at = conn.outbound_line.release_at(
                        request.completed_at, decision.delay_ms / 1000.0
                    )
                    if release_at > trio.current_time():
                        # A delayed response: what is ready before it goes now, what follows waits.
                        await self._send_frames(conn, frames)
                        frames = []
                        await trio.sleep_until(release_at)
                frames += parts
                conn.writing_bytes += len(parts[1])
            await self._send_frames(conn, frames)
            conn.writing = False
            conn.writing_bytes = 0
            conn.responses_sent()

    @staticmethod
    async def _send_frames(conn: Connection, frames: list[bytes]) -> None:
        """Writes the frames' parts in order: small ones joined into one write, a large one (a FETCH
        response's payload) written as it is rather than copied into a joined buffer."""
        if not frames:
            return
        small: list[bytes] = []
        small_bytes = 0
        for part in frames:
            if len(part) >= SEND_WITHOUT_JOINING_BYTES:
                if small:
                    await conn.stream.send_all(b"".join(small))
                    small, small_bytes = [], 0
                await conn.stream.send_all(part)
            else:
                small.append(part)
                small_bytes += len(part)
                if small_bytes >= SEND_WITHOUT_JOINING_BYTES:
                    await conn.stream.send_all(b"".join(small))
                    small, small_bytes = [], 0
        if small:
            await conn.stream.send_all(small[0] if len(small) == 1 else b"".join(small))
        conn.last_active = trio.current_time()
