"""The socket server applying protocol-level fault rules, over real loopback TCP (in one process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from protocol.api_keys import ApiKeys
from protocol.client import ConnectionClosed, open_connection
from protocol.errors import Errors
from protocol.fault_injector import FaultInjector
from protocol.fault_rules import ProtocolFaultRule, rule_to_wire
from protocol.schema import to_body
from server.network import SocketServer
from server.request_channel import Request, RequestChannel, RequestHandlerPool

NLOF = int(Errors.NOT_LEADER_OR_FOLLOWER)


class Echo:
    """Answers every request with its ``n`` and counts what it handled (acted on)."""

    def __init__(self) -> None:
        self.handled: list[int] = []

    async def __call__(self, request: Request) -> None:
        self.handled.append(request.body.get("n", -1))
        request.complete({"n": request.body.get("n", -1)})


@asynccontextmanager
async def server(faults: FaultInjector, denied: str | None = None) -> AsyncIterator[tuple[int, Echo]]:
    channel = RequestChannel(100)
    echo = Echo()
    supported = {int(ApiKeys.PRODUCE): (0, 0), int(ApiKeys.METADATA): (0, 0)}
    srv = SocketServer(
        host="127.0.0.1",
        port=0,
        channel=channel,
        max_request_bytes=1 << 20,
        supported=supported,
        name="test",
        faults=faults,
    )
    if denied is not None:
        srv.net_faults_check = lambda request: denied
    async with trio.open_nursery() as nursery:
        port = await nursery.start(srv.serve)
        nursery.start_soon(RequestHandlerPool(channel, echo, 2, "test").run)
        yield port, echo
        nursery.cancel_scope.cancel()


def produce(n: int, topic: str = "t", partition: int = 0) -> dict[str, Any]:
    return {
        "n": n,
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": b""}]}],
    }


def add(inj: FaultInjector, **kw: Any) -> None:
    kw.setdefault("api", int(ApiKeys.PRODUCE))
    resp = inj.handle_protocol_faults(
        {"operation": "add", "rules": [to_body(rule_to_wire(ProtocolFaultRule(**kw)))]}
    )
    assert resp.get("error_code", 0) == 0, resp


async def test_before_error_is_kafkas_error_response_and_the_request_is_not_acted_on() -> None:
    inj = FaultInjector("1")
    hits: list[dict[str, Any]] = []
    inj.on_rule_hit = hits.append
    add(inj, id=1, topic="t", error=NLOF, count=2)
    async with server(inj) as (port, echo), open_connection("127.0.0.1", port, client_id="p") as conn:
        for n in (1, 2):
            resp = await conn.request(ApiKeys.PRODUCE, produce(n), timeout=2)
            part = resp["responses"][0]["partition_responses"][0]
            assert (resp["responses"][0]["name"], part["index"], part["error_code"]) == ("t", 0, NLOF)
        assert (await conn.request(ApiKeys.PRODUCE, produce(3), timeout=2))["n"] == 3
        other = await conn.request(ApiKeys.PRODUCE, produce(4, topic="u"), timeout=2)
        assert other["n"] == 4
        assert echo.handled == [3, 4]
    assert [(h["rule_id"], h["hit"], h["api"], h["topic"], h["client_id"]) for h in hits] == [
        (1, 1, "Produce", "t", "p"),
        (1, 2, "Produce", "t", "p"),
    ]
    assert inj.describe_rules().rules[0].hits == 2


async def test_after_drop_response_acts_and_loses_the_answers_on_that_connection() -> None:
    inj = FaultInjector("1")
    add(inj, id=1, drop_response=True, when="after", count=1)
    async with server(inj) as (port, echo):
        async with open_connection("127.0.0.1", port, client_id="p") as conn:
            with pytest.raises(trio.TooSlowError):
                await conn.request(ApiKeys.PRODUCE, produce(1), timeout=0.5)
            with pytest.raises(trio.TooSlowError):  # what follows a lost answer is lost too
                await conn.request(ApiKeys.PRODUCE, produce(2), timeout=0.5)
        async with open_connection("127.0.0.1", port, client_id="p") as conn:
            assert (await conn.request(ApiKeys.PRODUCE, produce(3), timeout=2))["n"] == 3
        assert echo.handled == [1, 2, 3]  # all acted on


async def test_before_drop_response_is_not_acted_on() -> None:
    inj = FaultInjector("1")
    add(inj, id=1, drop_response=True, count=1)
    async with server(inj) as (port, echo), open_connection("127.0.0.1", port, client_id="p") as conn:
        with pytest.raises(trio.TooSlowError):
            await conn.request(ApiKeys.PRODUCE, produce(1), timeout=0.5)
        assert echo.handled == []


async def test_after_error_replaces_the_answer_of_a_request_that_took_effect() -> None:
    inj = FaultInjector("1")
    add(inj, id=1, error=int(Errors.REQUEST_TIMED_OUT), when="after", count=1)
    async with server(inj) as (port, echo), open_connection("127.0.0.1", port, client_id="p") as conn:
        resp = await conn.request(ApiKeys.PRODUCE, produce(1), timeout=2)
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == Errors.REQUEST_TIMED_OUT
        assert echo.handled == [1]


@pytest.mark.parametrize("when", ["before", "after"])
async def test_disconnect(when: str) -> None:
    inj = FaultInjector("1")
    add(inj, id=1, disconnect=True, when=when, count=1)
    async with server(inj) as (port, echo):
        async with open_connection("127.0.0.1", port, client_id="p") as conn:
            with pytest.raises((ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError)):
                await conn.request(ApiKeys.PRODUCE, produce(1), timeout=2)
        assert echo.handled == ([] if when == "before" else [1])


@pytest.mark.parametrize("when", ["before", "after"])
async def test_delay(when: str) -> None:
    inj = FaultInjector("1")
    add(inj, id=1, api=int(ApiKeys.METADATA), delay_ms=300, when=when)
    async with server(inj) as (port, _), open_connection("127.0.0.1", port, client_id="p") as conn:
        start = trio.current_time()
        assert (await conn.request(ApiKeys.METADATA, {"n": 1, "topics": None}, timeout=3))["n"] == 1
        assert trio.current_time() - start >= 0.29
        start = trio.current_time()
        assert (await conn.request(ApiKeys.PRODUCE, produce(2), timeout=3))["n"] == 2
        assert trio.current_time() - start < 0.29


async def test_admin_api_over_the_wire_adds_describes_and_removes() -> None:
    inj = FaultInjector("1")
    async with server(inj) as (port, _), open_connection("127.0.0.1", port, client_id="cli") as conn:
        wire = to_body(rule_to_wire(ProtocolFaultRule(id=7, api=0, error=NLOF)))
        resp = await conn.request(ApiKeys.PROTOCOL_FAULTS, {"operation": "add", "rules": [wire]}, timeout=2)
        assert [r["id"] for r in resp["rules"]] == [7]
        resp = await conn.request(ApiKeys.PROTOCOL_FAULTS, {"operation": "add", "rules": [wire]}, timeout=2)
        assert resp["error_code"] == Errors.INVALID_REQUEST and "already in force" in resp["error_message"]
        bad = {**wire, "id": 8, "error_code": 0}
        resp = await conn.request(ApiKeys.PROTOCOL_FAULTS, {"operation": "add", "rules": [bad]}, timeout=2)
        assert resp["error_code"] == Errors.INVALID_REQUEST and resp["error_message"].startswith("rules[0]")
        resp = await conn.request(
            ApiKeys.PROTOCOL_FAULTS, {"operation": "remove", "rule_ids": [7]}, timeout=2
        )
        assert resp["rules"] == []
        assert not inj.rules


async def test_the_admin_api_is_a_cluster_action() -> None:
    """On a secure cluster the server asks the same check as NET_FAULTS (Alter on the cluster)."""
    inj = FaultInjector("1")
    why = "Principal User:alice is not authorized to Alter on the cluster"
    async with (
        server(inj, denied=why) as (port, _),
        open_connection("127.0.0.1", port, client_id="c") as conn,
    ):
        wire = to_body(rule_to_wire(ProtocolFaultRule(id=1, api=0, error=NLOF)))
        resp = await conn.request(ApiKeys.PROTOCOL_FAULTS, {"operation": "add", "rules": [wire]}, timeout=2)
        assert (resp["error_code"], resp["error_message"]) == (Errors.CLUSTER_AUTHORIZATION_FAILED, why)
        assert not inj.rules
