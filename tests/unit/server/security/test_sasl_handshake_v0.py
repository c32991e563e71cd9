"""SaslHandshake v0 on Kafka's encoding (KIP-43, before KIP-152's SaslAuthenticate): after the handshake the
client's SASL tokens come raw, a 4-byte length and the bytes, and the server's go back the same way, with no
Kafka header; then the connection serves Kafka requests as the authenticated user. A failed token closes
the connection with no answer, as Kafka's SaslServerAuthenticator does in that flow. The socket server over
real loopback TCP in one process."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import scramp
import trio

from protocol import kafka_codec
from protocol.api_keys import ApiKeys
from server.network import SocketServer
from server.request_channel import Request, RequestChannel, RequestHandlerPool
from server.security.credentials import CredentialStore, ScramCredential
from server.security.listener_security import ListenerSecurity

KAFKA = {int(ApiKeys.METADATA): (12, 12), int(ApiKeys.API_VERSIONS): (0, 3)}


async def whoami(request: Request) -> None:
    # Metadata v12's answer, with the principal as the cluster id: who the request came from.
    request.complete({"cluster_id": str(request.principal), "controller_id": -1, "brokers": [], "topics": []})


@asynccontextmanager
async def sasl_plaintext() -> AsyncIterator[int]:
    credentials = CredentialStore()
    credentials.put("alice", ScramCredential.from_password("alice-secret"))
    channel = RequestChannel(100)
    srv = SocketServer(
        host="127.0.0.1",
        port=0,
        channel=channel,
        max_request_bytes=1 << 20,
        supported={},
        kafka_supported=KAFKA,
        name="test",
        listeners=[("SASL_PLAINTEXT", "127.0.0.1", 0)],
        security={"SASL_PLAINTEXT": ListenerSecurity("SASL_PLAINTEXT", None, ("SCRAM-SHA-256", "PLAIN"))},
        credential_store=credentials,
    )
    async with trio.open_nursery() as nursery:
        port = await nursery.start(srv.serve)
        nursery.start_soon(RequestHandlerPool(channel, whoami, 2, "test").run)
        yield port
        nursery.cancel_scope.cancel()


async def read_frame(stream: trio.SocketStream) -> bytes | None:
    buf = b""
    with trio.fail_after(10):
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return None
            buf += chunk
    return buf[4:]


async def handshake_v0(stream: trio.SocketStream, mechanism: str) -> None:
    await stream.send_all(
        kafka_codec.encode_request(ApiKeys.SASL_HANDSHAKE, 0, 1, "c", {"mechanism": mechanism})
    )
    payload = await read_frame(stream)
    assert payload is not None
    _, body = kafka_codec.decode_response(ApiKeys.SASL_HANDSHAKE, 0, payload)
    assert body["error_code"] == 0 and "SCRAM-SHA-256" in body["mechanisms"]


async def raw(stream: trio.SocketStream, token: bytes) -> bytes | None:
    await stream.send_all(struct.pack(">I", len(token)) + token)
    return await read_frame(stream)


async def principal(stream: trio.SocketStream) -> str:
    await stream.send_all(kafka_codec.encode_request(ApiKeys.METADATA, 12, 7, "c", {"topics": None}))
    payload = await read_frame(stream)
    assert payload is not None
    cid, body = kafka_codec.decode_response(ApiKeys.METADATA, 12, payload)
    assert cid == 7
    return str(body["cluster_id"])


def test_scram_tokens_raw_after_a_v0_handshake() -> None:
    async def main() -> None:
        async with sasl_plaintext() as port:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await handshake_v0(stream, "SCRAM-SHA-256")
                client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
                server_first = await raw(stream, client.get_client_first().encode())
                assert server_first is not None
                client.set_server_first(server_first.decode())
                server_final = await raw(stream, client.get_client_final().encode())
                assert server_final is not None
                client.set_server_final(server_final.decode())  # the server proved it knows the password
                assert await principal(stream) == "User:alice"

    trio.run(main)


def test_plain_token_raw_gets_an_empty_token_then_requests_are_served() -> None:
    async def main() -> None:
        async with sasl_plaintext() as port:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await handshake_v0(stream, "PLAIN")
                assert await raw(stream, b"\0alice\0alice-secret") == b""
                assert await principal(stream) == "User:alice"

    trio.run(main)


def test_a_wrong_password_closes_the_connection_unanswered() -> None:
    async def main() -> None:
        async with sasl_plaintext() as port:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await handshake_v0(stream, "PLAIN")
                assert await raw(stream, b"\0alice\0wrong") is None

    trio.run(main)
