"""A connection the server closes for bad input still gets every response it was due, whole: closing waits
until the write loop has written them, not only until it took them off the queue (a large response still
being written when the bad frame arrives was cut short before)."""

from __future__ import annotations

import socket
import struct

import trio

from kit.processes import async_wait_until
from protocol.api_keys import ApiKeys
from protocol.framing import FrameDecoder, decode_response, encode_request
from server.network import SocketServer
from server.request_channel import Request, RequestChannel, RequestHandlerPool

BIG = 4 << 20  # far more than the socket buffers hold while the client does not read


async def test_a_large_response_is_written_whole_before_a_bad_frame_closes_the_connection() -> None:
    handled: list[int] = []

    async def big(request: Request) -> None:
        handled.append(1)
        request.complete({"blob": b"x" * BIG})

    channel = RequestChannel(10)
    srv = SocketServer(
        host="127.0.0.1",
        port=0,
        channel=channel,
        max_request_bytes=1 << 20,
        supported={int(ApiKeys.METADATA): (0, 0)},
        name="test",
    )
    async with trio.open_nursery() as nursery:
        port = await nursery.start(srv.serve)
        nursery.start_soon(RequestHandlerPool(channel, big, 1, "test").run)
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect(("127.0.0.1", port))
        await sock.send(encode_request(int(ApiKeys.METADATA), 0, 7, "c", {}))
        await async_wait_until(lambda: handled, 10, "the request handled")
        # The server is writing 4 MiB nobody reads; now a frame larger than socket.request.max.bytes. With
        # that much unread the connection is muted (not read), so the bad frame is seen once the client
        # has taken the answer, and the close comes after the whole answer.
        await sock.send(struct.pack(">i", 0x7FFFFFFF))
        received = bytearray()
        while chunk := await sock.recv(1 << 20):
            received.extend(chunk)
        sock.close()
        assert srv.closed_for_bad_input == 1
        decoder = FrameDecoder(1 << 30)
        decoder.feed(bytes(received))
        frame = decoder.next_frame()
        assert frame is not None, f"no whole response in {len(received)} bytes"
        correlation_id, body = decode_response(frame)
        assert correlation_id == 7 and len(body["blob"]) == BIG
        nursery.cancel_scope.cancel()
