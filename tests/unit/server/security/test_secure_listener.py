"""The socket server's TLS and SASL over real loopback TCP in one process, against protocol.client: who a
request comes from, a wrong password (58, then the connection is closed), a plaintext client on a TLS
listener, a request before authentication. (Certificates from the CA `cluster up --secure` uses.)"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from kit.security_files import CertificateAuthority
from protocol.api_keys import ApiKeys
from protocol.client import AuthenticationFailed, ConnectionClosed, open_connection
from protocol.errors import Errors
from protocol.framing import FrameDecoder, decode_response, encode_request
from protocol.security import ClientSecurity
from server.network import SocketServer
from server.request_channel import Request, RequestChannel, RequestHandlerPool
from server.security.credentials import CredentialStore, ScramCredential
from server.security.listener_security import ListenerSecurity

SUPPORTED = {int(ApiKeys.METADATA): (0, 0), int(ApiKeys.API_VERSIONS): (0, 0)}


async def whoami(request: Request) -> None:
    request.complete({"error_code": 0, "principal": str(request.principal)})


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority.create()
    ca_path = ca.save(directory)
    keystore = directory / "keystore.pem"
    keystore.write_bytes(ca.issue("node", ["localhost", "127.0.0.1"]))
    return ca_path, keystore


@asynccontextmanager
async def listener(
    keystore: Path, protocol: str, client_ca: Path | None = None
) -> AsyncIterator[tuple[int, SocketServer]]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(keystore))
    if client_ca is not None:  # ssl.client.auth=required
        ctx.load_verify_locations(cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    tls = protocol in ("SSL", "SASL_SSL")
    sasl = ("SCRAM-SHA-256", "PLAIN") if protocol.startswith("SASL") else ()
    credentials = CredentialStore()
    credentials.put("alice", ScramCredential.from_password("alice-secret"))
    channel = RequestChannel(100)
    srv = SocketServer(
        host="127.0.0.1",
        port=0,
        channel=channel,
        max_request_bytes=1 << 20,
        supported=SUPPORTED,
        name="test",
        listeners=[(protocol, "127.0.0.1", 0)],
        security={protocol: ListenerSecurity(protocol, ctx if tls else None, sasl)},
        credential_store=credentials,
    )
    async with trio.open_nursery() as nursery:
        port = await nursery.start(srv.serve)
        nursery.start_soon(RequestHandlerPool(channel, whoami, 2, "test").run)
        yield port, srv
        nursery.cancel_scope.cancel()


def client(
    ca: Path, protocol: str, user: str = "alice", password: str = "alice-secret", **kw: str
) -> ClientSecurity:
    return ClientSecurity(protocol, kw.get("mechanism", "SCRAM-SHA-256"), user, password, str(ca))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_sasl_ssl_request_carries_the_authenticated_principal(pki: tuple[Path, Path], mechanism: str) -> None:
    ca, keystore = pki

    async def main() -> None:
        async with listener(keystore, "SASL_SSL") as (port, _):
            sec = client(ca, "SASL_SSL", mechanism=mechanism)
            async with open_connection("127.0.0.1", port, security=sec) as conn:
                body = await conn.request(ApiKeys.METADATA, {"topics": None})
            assert body["principal"] == "User:alice"

    trio.run(main)


def test_ssl_without_sasl_is_anonymous(pki: tuple[Path, Path]) -> None:
    ca, keystore = pki

    async def main() -> None:
        async with listener(keystore, "SSL") as (port, _):
            async with open_connection(
                "127.0.0.1", port, security=ClientSecurity("SSL", ca_location=str(ca))
            ) as conn:
                body = await conn.request(ApiKeys.METADATA, {"topics": None})
            assert body["principal"] == "User:ANONYMOUS"

    trio.run(main)


def test_ssl_client_auth_names_the_principal_by_the_certificate(
    pki: tuple[Path, Path], tmp_path: Path
) -> None:
    ca, keystore = pki
    # A client certificate from the same CA (cluster up --secure's, for a user "alice").
    pem = CertificateAuthority.create()  # another CA: its certificate must be refused
    stranger = tmp_path / "stranger.pem"
    stranger.write_bytes(pem.issue("mallory", ["localhost"]))

    async def main() -> None:
        async with listener(keystore, "SSL", client_ca=ca) as (port, _):
            mine = ClientSecurity("SSL", ca_location=str(ca), certificate_location=str(keystore))
            async with open_connection("127.0.0.1", port, security=mine) as conn:
                body = await conn.request(ApiKeys.METADATA, {"topics": None})
            assert body["principal"] == "User:CN=node,O=isrsim"
            for who in (
                ClientSecurity("SSL", ca_location=str(ca)),
                ClientSecurity("SSL", ca_location=str(ca), certificate_location=str(stranger)),
            ):
                with pytest.raises(ConnectionClosed):
                    async with open_connection("127.0.0.1", port, security=who) as conn:
                        await conn.request(ApiKeys.METADATA, {"topics": None}, timeout=10)

    trio.run(main)


def test_wrong_password_gets_58_and_a_closed_connection(pki: tuple[Path, Path]) -> None:
    ca, keystore = pki

    async def main() -> None:
        async with listener(keystore, "SASL_SSL") as (port, srv):
            with pytest.raises(AuthenticationFailed) as failed:
                async with open_connection(
                    "127.0.0.1", port, security=client(ca, "SASL_SSL", password="nope")
                ):
                    pass
            assert failed.value.error == Errors.SASL_AUTHENTICATION_FAILED
            # The same exchange by hand: the 58 answer arrives, then the server closes the connection.
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            tls = trio.SSLStream(
                stream, ssl.create_default_context(cafile=str(ca)), server_hostname="127.0.0.1"
            )
            await tls.send_all(
                encode_request(ApiKeys.SASL_HANDSHAKE, 0, 1, "t", {"mechanism": "PLAIN"})
                + encode_request(ApiKeys.SASL_AUTHENTICATE, 0, 2, "t", {"auth_bytes": b"\0alice\0nope"})
                + encode_request(ApiKeys.METADATA, 0, 3, "t", {"topics": None})
            )
            frames = await read_until_closed(tls)
            bodies = [decode_response(f) for f in frames]
            assert [cid for cid, _ in bodies] == [1, 2], "METADATA after the failure must not be answered"
            assert bodies[1][1]["error_code"] == Errors.SASL_AUTHENTICATION_FAILED
            assert srv.authentication_failures == 2

    trio.run(main)


def test_a_request_before_authentication_closes_the_connection_unanswered(pki: tuple[Path, Path]) -> None:
    _, keystore = pki

    async def main() -> None:
        async with listener(keystore, "SASL_PLAINTEXT") as (port, _):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(
                encode_request(ApiKeys.API_VERSIONS, 0, 1, "t", {})
                + encode_request(ApiKeys.METADATA, 0, 2, "t", {"topics": None})
            )
            frames = await read_until_closed(stream)
            assert [decode_response(f)[0] for f in frames] == [1]  # API_VERSIONS only
            # An API the listener does not know closes it too, rather than getting UNSUPPORTED_VERSION.
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(encode_request(999, 0, 1, "t", {}))
            assert await read_until_closed(stream) == []

    trio.run(main)


def test_a_plaintext_client_on_a_tls_listener_gets_nothing_that_parses(pki: tuple[Path, Path]) -> None:
    _, keystore = pki

    async def main() -> None:
        async with listener(keystore, "SASL_SSL") as (port, _):
            with pytest.raises(ConnectionClosed):
                async with open_connection("127.0.0.1", port, security=ClientSecurity()) as conn:
                    await conn.request(ApiKeys.METADATA, {"topics": None}, timeout=10)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(encode_request(ApiKeys.METADATA, 0, 1, "t", {"topics": None}))
            raw = b""
            with trio.fail_after(10):
                while data := await receive(stream):
                    raw += data
            decoder = FrameDecoder(1 << 20)
            try:
                decoder.feed(raw)
                frame = decoder.next_frame()
            except Exception:
                frame = None
            assert frame is None or not _is_response(frame)

    trio.run(main)


def test_a_client_that_does_not_trust_the_ca_refuses_the_server(
    pki: tuple[Path, Path], tmp_path: Path
) -> None:
    _, keystore = pki
    other_ca = CertificateAuthority.create("another CA").save(tmp_path)

    async def main() -> None:
        async with listener(keystore, "SSL") as (port, _):
            with pytest.raises(ConnectionClosed, match="TLS handshake"):
                async with open_connection(
                    "127.0.0.1", port, security=ClientSecurity("SSL", ca_location=str(other_ca))
                ):
                    pass

    trio.run(main)


def _is_response(frame: bytes) -> bool:
    try:
        decode_response(frame)
    except Exception:
        return False
    return True


async def receive(stream: trio.abc.Stream) -> bytes:
    try:
        return await stream.receive_some(65536)
    except trio.BrokenResourceError:
        return b""


async def read_until_closed(stream: trio.abc.Stream) -> list[bytes]:
    decoder = FrameDecoder(1 << 20)
    frames: list[bytes] = []
    with trio.fail_after(10):
        while data := await receive(stream):
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                frames.append(frame)
    return frames


def test_distinguished_name_as_rfc_2253() -> None:
    from server.network import distinguished_name

    subject = ((("countryName", "DE"),), (("organizationName", "isrsim"),), (("commonName", "a,b+c"),))
    assert distinguished_name({"subject": subject}) == "CN=a\\,b\\+c,O=isrsim,C=DE"
    assert distinguished_name({}) == ""
