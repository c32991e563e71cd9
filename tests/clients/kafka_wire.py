"""Kafka-encoded requests over a raw TCP connection, for tests of the broker's Kafka protocol handling."""

from __future__ import annotations

import struct
from typing import Any

import trio

from protocol import kafka_codec


class KafkaWire:
    """Sends Kafka request frames (or any bytes) and reads Kafka response frames back."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.stream: trio.SocketStream | None = None
        self._buf = bytearray()

    async def __aenter__(self) -> KafkaWire:
        self.stream = await trio.open_tcp_stream(self.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.stream is not None:
            await trio.aclose_forcefully(self.stream)

    async def send(self, data: bytes) -> None:
        assert self.stream is not None
        await self.stream.send_all(data)

    async def send_request(
        self, api_key: int, version: int, body: dict[str, Any], *, correlation_id: int = 1
    ) -> None:
        await self.send(kafka_codec.encode_request(api_key, version, correlation_id, "wire-test", body))

    async def receive_frame(self, timeout: float = 10.0) -> bytes | None:
        """The next response payload; None when the broker closed the connection first."""
        assert self.stream is not None
        with trio.fail_after(timeout):
            while True:
                if len(self._buf) >= 4:
                    (n,) = struct.unpack_from(">I", self._buf, 0)
                    if len(self._buf) >= 4 + n:
                        payload = bytes(self._buf[4 : 4 + n])
                        del self._buf[: 4 + n]
                        return payload
                try:
                    chunk = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    chunk = b""
                if not chunk:
                    return None
                self._buf += chunk

    async def call(
        self, api_key: int, version: int, body: dict[str, Any], correlation_id: int = 1
    ) -> dict[str, Any]:
        await self.send_request(api_key, version, body, correlation_id=correlation_id)
        payload = await self.receive_frame()
        assert payload is not None, "the broker closed the connection"
        cid, decoded = kafka_codec.decode_response(api_key, version, payload)
        assert cid == correlation_id
        return decoded

    async def closed(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection within ``timeout`` (without answering)."""
        with trio.move_on_after(timeout):
            return await self.receive_frame(timeout + 1) is None
        return False
