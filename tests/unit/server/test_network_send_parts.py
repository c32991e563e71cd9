"""``SocketServer._send_frames`` over a real socket pair: the parts of several responses (small ones joined,
large ones written as they are) arrive whole and in order."""

from __future__ import annotations

from typing import cast

import trio

from server.network import SEND_WITHOUT_JOINING_BYTES, Connection, SocketServer


class _Conn:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.last_active = 0.0


async def test_parts_arrive_whole_and_in_order() -> None:
    a, b = trio.socket.socketpair()
    sender, receiver = trio.SocketStream(a), trio.SocketStream(b)
    big = SEND_WITHOUT_JOINING_BYTES
    parts = [
        b"\x00\x00\x00\x05",
        b"hello",
        b"p" * big,
        b"q" * (3 * big + 1),
        *[bytes([i % 256]) * 100 for i in range(700)],
    ]
    expected = b"".join(parts)
    received = bytearray()

    async def read() -> None:
        while len(received) < len(expected):
            received.extend(await receiver.receive_some(1 << 16))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        conn = _Conn(sender)
        await SocketServer._send_frames(cast(Connection, conn), parts)
    assert bytes(received) == expected
    assert conn.last_active > 0
    await sender.aclose()
    await receiver.aclose()
