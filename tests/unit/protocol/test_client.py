from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing

from protocol.api_keys import ApiKeys
from protocol.client import ConnectionClosed, KafkaConnection, ResponseLost, connect_stream, open_connection
from protocol.framing import FrameDecoder, RequestHeader, decode_request, encode_frame, encode_response
from protocol.messages import MetadataRequest, MetadataRequestTopic

Request = tuple[RequestHeader, dict[str, Any]]
# A server-side session: gets the stream and an async iterator of decoded requests.
Session = Callable[[trio.abc.Stream, AsyncIterator[Request]], Awaitable[None]]


async def requests_of(stream: trio.abc.Stream) -> AsyncIterator[Request]:
    decoder = FrameDecoder()
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            yield decode_request(frame)


def echo(header: RequestHeader, body: dict[str, Any]) -> bytes:
    return encode_response(
        header.correlation_id, {"api_key": header.api_key, "client_id": header.client_id, "echo": body}
    )


async def echo_session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
    async for header, body in requests:
        await stream.send_all(echo(header, body))


@asynccontextmanager
async def tcp_server(session: Session) -> AsyncIterator[int]:
    async def handler(stream: trio.SocketStream) -> None:
        async with stream:
            with suppress(trio.BrokenResourceError):
                await session(stream, requests_of(stream))

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def memory_server(session: Session) -> AsyncIterator[KafkaConnection]:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session, server_stream, requests_of(server_stream))
        async with connect_stream(client_stream, client_id="mem") as conn:
            yield conn
        nursery.cancel_scope.cancel()


async def test_request_round_trip_over_tcp() -> None:
    async with tcp_server(echo_session) as port, open_connection("127.0.0.1", port, client_id="t1") as conn:
        resp = await conn.request(ApiKeys.FETCH, {"x": [1, b"\x00"]})
        assert resp == {"api_key": 1, "client_id": "t1", "echo": {"x": [1, b"\x00"]}}
        resp = await conn.request(ApiKeys.METADATA, MetadataRequest(topics=[MetadataRequestTopic(name="a")]))
        assert resp["echo"] == {
            "topics": [{"name": "a"}],
            "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        assert conn.in_flight == 0
    assert conn.closed
    with pytest.raises(ConnectionClosed):
        await conn.request(ApiKeys.METADATA, {})


async def test_pipelined_requests_with_out_of_order_completion() -> None:
    """The server completes a batch of requests in reverse order; every task gets its own answer."""
    n = 40

    async def session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
        held: list[Request] = []
        async for header, body in requests:
            held.append((header, body))
            if len(held) == n:
                await stream.send_all(b"".join(echo(h, b) for h, b in reversed(held)))
                held.clear()

    results: dict[int, dict[str, Any]] = {}
    async with tcp_server(session) as port, open_connection("127.0.0.1", port) as conn:

        async def one(i: int) -> None:
            results[i] = await conn.request(ApiKeys.PRODUCE, {"i": i})

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
    assert {i: r["echo"]["i"] for i, r in results.items()} == {i: i for i in range(n)}


async def test_a_skipped_answer_is_a_lost_response_when_answers_come_in_order() -> None:
    """A broker answers in request order: the answer to request 3 tells requests 1 and 2, still
    unanswered, that theirs were lost (not at their timeout), and the connection stays usable."""

    async def session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
        async for header, body in requests:
            if body.get("i") not in (1, 2):  # the answers to 1 and 2 are lost on the way
                await stream.send_all(echo(header, body))

    async with tcp_server(session) as port, open_connection("127.0.0.1", port) as conn:
        conn.responses_in_order = True
        outcome: dict[int, str] = {}

        async def one(i: int) -> None:
            try:
                await conn.request(ApiKeys.PRODUCE, {"i": i}, timeout=30)
                outcome[i] = "answered"
            except ResponseLost:
                outcome[i] = "lost"

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for i in range(4):
                    nursery.start_soon(one, i)
                    await trio.sleep(0.01)
        assert outcome == {0: "answered", 1: "lost", 2: "lost", 3: "answered"}
        assert not conn.closed
        assert (await conn.request(ApiKeys.PRODUCE, {"i": 9}))["echo"] == {"i": 9}


class CountingStream(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.sends = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sends += 1
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_request_many_uses_one_send_and_keeps_order() -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    counting = CountingStream(client_stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo_session, server_stream, requests_of(server_stream))
        async with connect_stream(counting) as conn:
            items = [(ApiKeys.FETCH, {"i": i}) for i in range(25)]
            responses = await conn.request_many(items)
            assert [r["echo"]["i"] for r in responses] == list(range(25))
            assert counting.sends == 1
            assert await conn.request_many([]) == []
        nursery.cancel_scope.cancel()


async def test_server_closing_mid_request_fails_pending_and_later_requests() -> None:
    seen = trio.Event()

    async def session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
        count = 0
        async for _ in requests:
            count += 1
            if count == 3:
                seen.set()
                return  # the handler closes the connection without answering

    async with tcp_server(session) as port, open_connection("127.0.0.1", port) as conn:
        errors: list[BaseException] = []

        async def one(i: int) -> None:
            try:
                await conn.request(ApiKeys.FETCH, {"i": i})
            except ConnectionClosed as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(one, i)
        assert seen.is_set()
        assert len(errors) == 3
        assert conn.closed
        with pytest.raises(ConnectionClosed):
            await conn.request(ApiKeys.FETCH, {})
        with pytest.raises(ConnectionClosed):
            await conn.send_no_response(ApiKeys.PRODUCE, {})
        # The loss of the connection does not cancel the code using it.
        await trio.lowlevel.checkpoint()
        still_running = True
    assert still_running


async def test_timeout_leaves_connection_usable(autojump_clock: trio.testing.MockClock) -> None:
    """A hung request times out; its late response is dropped and the next request gets its own answer."""

    async def session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
        hung: list[Request] = []
        async for header, body in requests:
            if body.get("hang"):
                hung.append((header, body))
                continue
            await stream.send_all(b"".join(echo(h, b) for h, b in [*hung, (header, body)]))
            hung.clear()

    async with memory_server(session) as conn:
        start = trio.current_time()
        with pytest.raises(trio.TooSlowError):
            await conn.request(ApiKeys.FETCH, {"hang": True}, timeout=2.0)
        assert trio.current_time() - start == pytest.approx(2.0)
        assert not conn.closed and conn.in_flight == 0
        resp = await conn.request(ApiKeys.FETCH, {"n": 2})
        assert resp["echo"] == {"n": 2}
        with pytest.raises(trio.TooSlowError):
            await conn.request_many(
                [(ApiKeys.FETCH, {"hang": True}), (ApiKeys.FETCH, {"hang": True})], timeout=1
            )
        assert (await conn.request(ApiKeys.FETCH, {"n": 3}))["echo"] == {"n": 3}


async def test_send_no_response() -> None:
    received: list[Request] = []

    async def session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
        async for header, body in requests:
            received.append((header, body))
            if header.api_key != ApiKeys.PRODUCE:
                await stream.send_all(echo(header, body))

    async with memory_server(session) as conn:
        await conn.send_no_response(ApiKeys.PRODUCE, {"acks": 0})
        resp = await conn.request(ApiKeys.METADATA, {})
        assert resp["api_key"] == ApiKeys.METADATA
    assert [h.api_key for h, _ in received] == [ApiKeys.PRODUCE, ApiKeys.METADATA]
    assert received[0][0].correlation_id < received[1][0].correlation_id
    assert received[0][1] == {"acks": 0}


async def test_stray_response_is_dropped() -> None:
    async def session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
        async for header, body in requests:
            await stream.send_all(encode_response(12345, {"stray": True}) + echo(header, body))

    async with memory_server(session) as conn:
        assert (await conn.request(ApiKeys.FETCH, {"a": 1}))["echo"] == {"a": 1}


@pytest.mark.parametrize(
    "reply",
    [b"\x00\x00\x00\x01\xc1", encode_frame([1, 2]), encode_frame({"correlation_id": 0, "body": 5})],
)
async def test_invalid_response_closes_connection(reply: bytes) -> None:
    async def session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
        async for _ in requests:
            await stream.send_all(reply)
        await trio.sleep_forever()

    async with memory_server(session) as conn:
        with pytest.raises(ConnectionClosed, match="invalid response"):
            await conn.request(ApiKeys.FETCH, {})
        assert conn.closed


async def test_oversized_response_closes_connection() -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo_session, server_stream, requests_of(server_stream))
        async with connect_stream(client_stream, max_response_bytes=10) as conn:
            with pytest.raises(ConnectionClosed, match="FrameTooLarge"):
                await conn.request(ApiKeys.FETCH, {"big": b"x" * 100})
        nursery.cancel_scope.cancel()


async def test_user_errors_propagate_and_close() -> None:
    async with tcp_server(echo_session) as port:
        with pytest.raises(ValueError, match="boom"):
            async with open_connection("127.0.0.1", port) as conn:
                await conn.request(ApiKeys.FETCH, {})
                raise ValueError("boom")
        assert conn.closed


async def test_aclose_fails_pending_requests() -> None:
    async def session(stream: trio.abc.Stream, requests: AsyncIterator[Request]) -> None:
        async for _ in requests:
            pass

    async with memory_server(session) as conn:
        result: list[BaseException] = []

        async def waiter(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            try:
                await conn.request(ApiKeys.FETCH, {})
            except ConnectionClosed as exc:
                result.append(exc)

        async with trio.open_nursery() as nursery:
            await nursery.start(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert conn.in_flight == 1
            await conn.aclose()
        assert len(result) == 1 and conn.closed


async def test_connection_refused() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens on the port now
    with pytest.raises(OSError):
        async with open_connection("127.0.0.1", port):
            pass
