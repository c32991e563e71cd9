"""``ask``: a node that does not answer (refused, silent, hanging up) is None; any other failure is a bug,
logged and raised as one clean ``QueryError``, also out of ``cluster status``'s concurrent queries."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio

from cli import status_view
from kit.cluster_files import ClusterInfo, ProcessEntry
from kit.node_query import QueryError, ask
from protocol import ApiKeys

Handler = Callable[[trio.SocketStream], Awaitable[None]]


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def silent(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def hang_up(stream: trio.SocketStream) -> None:
    await stream.receive_some(1024)
    await stream.aclose()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_refused_connection_is_no_answer() -> None:
    assert await ask("127.0.0.1", closed_port(), ApiKeys.API_VERSIONS, {}, timeout=2) is None


@pytest.mark.parametrize("handler", [silent, hang_up])
async def test_a_silent_or_hanging_up_node_is_no_answer(handler: Handler) -> None:
    async with server(handler) as port:
        assert await ask("127.0.0.1", port, ApiKeys.API_VERSIONS, {}, timeout=0.3) is None


async def test_any_other_failure_is_a_query_error_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="kit.node_query")
    unencodable = {"topics": object()}  # a request the CLI built wrongly: msgpack cannot encode it
    async with server(silent) as port:
        with pytest.raises(QueryError) as raised:
            await ask("127.0.0.1", port, ApiKeys.METADATA, unencodable, timeout=2)
    message = str(raised.value)
    assert "\n" not in message
    assert f"METADATA to 127.0.0.1:{port} failed: TypeError" in message
    assert isinstance(raised.value.__cause__, TypeError)
    assert [r.getMessage() for r in caplog.records] == [message.split(" (a bug")[0]]


def _cluster() -> ClusterInfo:
    # Our own pid: process_state() sees a running process, so status asks every node.
    def entry(node_id: int) -> ProcessEntry:
        return ProcessEntry(node_id, "127.0.0.1", 1, os.getpid(), "", "", "", "")

    return ClusterInfo(root="", cluster_id="isrsim", controller=entry(1000), brokers=[entry(1), entry(2)])


async def test_status_raises_the_query_error_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    async def fake_ask(host: str, port: int, api_key: int, body: dict[str, Any], timeout: float) -> Any:
        if api_key == ApiKeys.DESCRIBE_REPLICA_STATE:
            raise QueryError("DESCRIBE_REPLICA_STATE to a broker failed: KeyError: 'x'")
        return None

    monkeypatch.setattr(status_view, "ask", fake_ask)
    with pytest.raises(QueryError, match="KeyError"):
        await status_view.gather(_cluster())


async def test_status_shows_nodes_that_do_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_answer(host: str, port: int, api_key: int, body: dict[str, Any], timeout: float) -> Any:
        return None

    monkeypatch.setattr(status_view, "ask", no_answer)
    data = await status_view.gather(_cluster())
    assert data.controller["state"] == "not answering"
    assert [b["state"] for b in data.brokers] == ["not answering", "not answering"]


async def test_status_shows_each_brokers_truncation_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    async def answer(host: str, port: int, api_key: int, body: dict[str, Any], timeout: float) -> Any:
        if api_key == ApiKeys.DESCRIBE_REPLICA_STATE:
            return {"broker_id": 1, "partitions": [], "truncation_mode": "high-watermark"}
        return None

    monkeypatch.setattr(status_view, "ask", answer)
    data = await status_view.gather(_cluster())
    assert [b["truncation_mode"] for b in data.brokers] == ["high-watermark", "high-watermark"]
    console = Console(width=200, record=True)
    console.print(status_view.render(data))
    text = console.export_text()
    assert "truncation mode" in text and "high-watermark" in text
