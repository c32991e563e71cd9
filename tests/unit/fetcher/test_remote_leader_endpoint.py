"""``RemoteLeaderEndPoint`` against a scripted server over real TCP (localhost): the request bodies it sends,
the typed answers it builds, and how failures come back (``FetchFailed``, per-partition errors,
``KafkaError``, ``InvalidLeaderResponse``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any

import pytest
import trio

from fetcher.leader_endpoint import FetchFailed, InvalidLeaderResponse, RemoteLeaderEndPoint
from fetcher.truncation import EpochData, EpochEndOffset
from protocol.api_keys import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKeys
from protocol.common import BrokerEndpoint
from protocol.errors import Errors, KafkaError
from protocol.framing import FrameDecoder, RequestHeader, decode_request, encode_response
from protocol.messages import (
    FetchRequest,
    FetchRequestForgottenTopic,
    FetchRequestPartition,
    FetchRequestTopic,
    FetchResponse,
    FetchResponsePartition,
    FetchResponseTopic,
)
from protocol.schema import to_body

REPLICA_ID = 2
TP0 = ("topic", 0)
TP1 = ("topic", 1)
OTHER = ("other", 4)

# Answers one request: a response body, or None to close the connection without answering, or HANG.
Handler = Callable[[RequestHeader, dict[str, Any]], dict[str, Any] | None]
HANG: dict[str, Any] = {"hang": True}


@asynccontextmanager
async def leader(handler: Handler, seen: list[tuple[RequestHeader, dict[str, Any]]]) -> AsyncIterator[int]:
    """A server on 127.0.0.1 answering with ``handler``; yields its port."""

    async def serve(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        async with stream:
            with suppress(trio.BrokenResourceError):
                while data := await stream.receive_some(65536):
                    decoder.feed(data)
                    while (frame := decoder.next_frame()) is not None:
                        header, body = decode_request(frame)
                        seen.append((header, body))
                        answer = handler(header, body)
                        if answer is None:
                            return
                        if answer is not HANG:
                            await stream.send_all(encode_response(header.correlation_id, answer))

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


def endpoint(port: int, *, socket_timeout_ms: int = 5000) -> RemoteLeaderEndPoint:
    return RemoteLeaderEndPoint(
        BrokerEndpoint(1, "127.0.0.1", port),
        replica_id=REPLICA_ID,
        client_id="replica-fetcher-2-0",
        socket_timeout_ms=socket_timeout_ms,
    )


def fetch_request() -> FetchRequest:
    return FetchRequest(
        replica_id=REPLICA_ID,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=7,
        session_epoch=3,
        topics=[
            FetchRequestTopic(
                topic="topic",
                partitions=[
                    FetchRequestPartition(
                        partition=0,
                        current_leader_epoch=5,
                        fetch_offset=10,
                        log_start_offset=0,
                        partition_max_bytes=4096,
                    )
                ],
            )
        ],
        forgotten_topics_data=[FetchRequestForgottenTopic(topic="topic", partitions=[1])],
    )


async def test_fetch_sends_the_typed_request_and_returns_a_typed_response() -> None:
    seen: list[tuple[RequestHeader, dict[str, Any]]] = []
    answer = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 7,
        "responses": [
            {
                "topic": "topic",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 12,
                        "last_stable_offset": 12,
                        "log_start_offset": 0,
                        "records": b"abc",
                    }
                ],
            }
        ],
    }
    async with leader(lambda h, b: answer, seen) as port:
        ep = endpoint(port)
        async with ep.connect():
            response = await ep.fetch(fetch_request())
    assert response == FetchResponse(
        session_id=7,
        responses=[
            FetchResponseTopic(
                topic="topic",
                partitions=[
                    FetchResponsePartition(
                        partition_index=0,
                        high_watermark=12,
                        last_stable_offset=12,
                        log_start_offset=0,
                        records=b"abc",
                    )
                ],
            )
        ],
    )
    ((header, body),) = seen
    assert (header.api_key, header.client_id) == (ApiKeys.FETCH, "replica-fetcher-2-0")
    assert body == to_body(fetch_request())


async def test_fetch_epoch_end_offsets_answers_every_partition_asked_about() -> None:
    seen: list[tuple[RequestHeader, dict[str, Any]]] = []
    answer = {
        "throttle_time_ms": 0,
        "topics": [
            {
                "topic": "topic",
                "partitions": [
                    {"error_code": 0, "partition": 0, "leader_epoch": 3, "end_offset": 42},
                    {"error_code": 0, "partition": 9, "leader_epoch": 3, "end_offset": 1},  # not asked
                ],
            },
            {
                "topic": "other",
                "partitions": [{"error_code": int(Errors.NOT_LEADER_OR_FOLLOWER), "partition": 4}],
            },
        ],
    }
    async with leader(lambda h, b: answer, seen) as port:
        ep = endpoint(port)
        async with ep.connect():
            end_offsets = await ep.fetch_epoch_end_offsets(
                {TP0: EpochData(5, 3), TP1: EpochData(5, 2), OTHER: EpochData(1, 1)}
            )
    assert end_offsets == {
        TP0: EpochEndOffset(0, 3, 42),
        OTHER: EpochEndOffset(int(Errors.NOT_LEADER_OR_FOLLOWER), -1, -1),
        TP1: EpochEndOffset(int(Errors.UNKNOWN_SERVER_ERROR), -1, -1),  # left out of the answer
    }
    ((header, body),) = seen
    assert header.api_key == ApiKeys.OFFSET_FOR_LEADER_EPOCH
    assert body == {
        "replica_id": REPLICA_ID,
        "topics": [
            {
                "topic": "topic",
                "partitions": [
                    {"partition": 0, "current_leader_epoch": 5, "leader_epoch": 3},
                    {"partition": 1, "current_leader_epoch": 5, "leader_epoch": 2},
                ],
            },
            {
                "topic": "other",
                "partitions": [{"partition": 4, "current_leader_epoch": 1, "leader_epoch": 1}],
            },
        ],
    }


async def test_a_request_refused_as_a_whole_is_an_error_for_every_partition() -> None:
    refused = {"error_code": int(Errors.INVALID_REQUEST), "error_message": "topics[0]: bad"}
    async with leader(lambda h, b: refused, []) as port:
        ep = endpoint(port)
        async with ep.connect():
            end_offsets = await ep.fetch_epoch_end_offsets({TP0: EpochData(5, 3), TP1: EpochData(5, 3)})
            assert end_offsets == dict.fromkeys(
                (TP0, TP1), EpochEndOffset(int(Errors.INVALID_REQUEST), -1, -1)
            )
            with pytest.raises(KafkaError) as refused_list_offsets:
                await ep.fetch_latest_offset(TP0, 5)
            assert refused_list_offsets.value.error == Errors.INVALID_REQUEST
            # FETCH has a top-level error_code of its own: the fetcher's session handling takes it.
            response = await ep.fetch(fetch_request())
            assert (response.error_code, response.session_id, response.responses) == (
                Errors.INVALID_REQUEST,
                0,
                [],
            )


def list_offsets_answer(offset: int, error: Errors = Errors.NONE) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": "topic",
                "partitions": [
                    {"partition_index": 0, "error_code": int(error), "offset": offset, "timestamp": -1}
                ],
            }
        ]
    }


async def test_latest_and_earliest_offsets() -> None:
    seen: list[tuple[RequestHeader, dict[str, Any]]] = []
    answers = iter([list_offsets_answer(42), list_offsets_answer(7)])
    async with leader(lambda h, b: next(answers), seen) as port:
        ep = endpoint(port)
        async with ep.connect():
            assert await ep.fetch_latest_offset(TP0, 5) == 42
            assert await ep.fetch_earliest_offset(TP0, 5) == 7
    assert [h.api_key for h, _ in seen] == [ApiKeys.LIST_OFFSETS] * 2
    assert [b for _, b in seen] == [
        {
            "replica_id": REPLICA_ID,
            "isolation_level": 0,
            "topics": [
                {
                    "name": "topic",
                    "partitions": [{"partition_index": 0, "current_leader_epoch": 5, "timestamp": ts}],
                }
            ],
        }
        for ts in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP)
    ]


async def test_a_list_offsets_error_for_the_partition_raises_its_kafka_error() -> None:
    answers = iter([list_offsets_answer(-1, Errors.FENCED_LEADER_EPOCH), {"topics": []}])
    async with leader(lambda h, b: next(answers), []) as port:
        ep = endpoint(port)
        async with ep.connect():
            with pytest.raises(KafkaError) as fenced:
                await ep.fetch_latest_offset(TP0, 5)
            assert fenced.value.error == Errors.FENCED_LEADER_EPOCH
            with pytest.raises(KafkaError) as unanswered:
                await ep.fetch_earliest_offset(TP0, 5)
            assert unanswered.value.error == Errors.UNKNOWN_SERVER_ERROR


async def test_an_answer_that_does_not_match_the_schema_is_an_invalid_leader_response() -> None:
    malformed = {"responses": [{"topic": "topic", "partitions": [{"error_code": 0, "records": b""}]}]}
    async with leader(lambda h, b: malformed, []) as port:
        ep = endpoint(port)
        async with ep.connect():
            with pytest.raises(InvalidLeaderResponse, match="partition_index"):
                await ep.fetch(fetch_request())


async def test_no_answer_is_fetch_failed() -> None:
    # Connection refused: a port nobody listens on any more.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    closed_port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()
    with pytest.raises(FetchFailed, match="cannot connect"):
        async with endpoint(closed_port).connect():
            pass

    # Not connected.
    with pytest.raises(FetchFailed, match="not connected"):
        await endpoint(closed_port).fetch_latest_offset(TP0, 5)

    # The leader closes the connection instead of answering.
    async with leader(lambda h, b: None, []) as port:
        ep = endpoint(port)
        async with ep.connect():
            with pytest.raises(FetchFailed, match="OFFSET_FOR_LEADER_EPOCH failed"):
                await ep.fetch_epoch_end_offsets({TP0: EpochData(5, 3)})

    # The leader never answers: the request times out after the socket timeout (plus max_wait_ms for FETCH).
    async with leader(lambda h, b: HANG, []) as port:
        ep = endpoint(port, socket_timeout_ms=50)
        async with ep.connect():
            start = trio.current_time()
            with pytest.raises(FetchFailed, match="FETCH failed"):
                await ep.fetch(fetch_request())
            assert trio.current_time() - start >= 0.15
            with pytest.raises(FetchFailed, match="LIST_OFFSETS failed"):
                await ep.fetch_latest_offset(TP0, 5)
