"""The socket server and client connects applying a fault table, over real loopback TCP (in one process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from protocol.api_keys import ApiKeys
from protocol.client import open_connection
from protocol.fault_injector import FaultInjector, current_faults
from protocol.faults import CLIENT, FaultSet
from protocol.framing import FrameDecoder, decode_response, encode_request
from server.network import SocketServer
from server.request_channel import Request, RequestChannel, RequestHandlerPool

SERVER_NODE = "2"


class Echo:
    """A handler that answers every request with its body and counts what it handled."""

    def __init__(self) -> None:
        self.handled: list[int] = []

    async def __call__(self, request: Request) -> None:
        self.handled.append(request.body.get("n", -1))
        request.complete({"n": request.body.get("n", -1)})


@asynccontextmanager
async def server(faults: FaultInjector) -> AsyncIterator[tuple[int, Echo]]:
    channel = RequestChannel(100)
    echo = Echo()
    supported = {int(ApiKeys.METADATA): (0, 0), int(ApiKeys.DESCRIBE_REPLICA_STATE): (0, 0)}
    srv = SocketServer(
        host="127.0.0.1",
        port=0,
        channel=channel,
        max_request_bytes=1 << 20,
        supported=supported,
        name="test",
        faults=faults,
    )
    async with trio.open_nursery() as nursery:
        port = await nursery.start(srv.serve)
        nursery.start_soon(RequestHandlerPool(channel, echo, 2, "test").run)
        yield port, echo
        nursery.cancel_scope.cancel()


def set_rules(inj: FaultInjector, faults: FaultSet) -> None:
    inj.table.set_rules(faults.for_node(inj.node))


async def test_partitioned_peer_requests_time_out_without_closing_and_work_after_heal() -> None:
    inj = FaultInjector(SERVER_NODE)
    async with server(inj) as (port, echo), open_connection("127.0.0.1", port, client_id="broker-1") as conn:
        assert (await conn.request(ApiKeys.METADATA, {"n": 1}, timeout=2))["n"] == 1
        set_rules(inj, FaultSet().partition("1", SERVER_NODE))
        with pytest.raises(trio.TooSlowError):
            await conn.request(ApiKeys.METADATA, {"n": 2}, timeout=0.3)
        assert not conn.closed  # no RST, no clean close
        assert echo.handled == [1]  # the dropped request was never handled
        # Another peer (a client) is not affected.
        async with open_connection("127.0.0.1", port, client_id="producer-1") as other:
            assert (await other.request(ApiKeys.METADATA, {"n": 3}, timeout=2))["n"] == 3
        # The admin APIs are exempt: the node can still be observed and healed.
        assert "error_code" in await conn.request(ApiKeys.NET_FAULTS, {"operation": "describe"}, timeout=2)
        await conn.request(ApiKeys.NET_FAULTS, {"operation": "set", "rules": []}, timeout=2)
        assert (await conn.request(ApiKeys.METADATA, {"n": 4}, timeout=2))["n"] == 4
        assert inj.frames_dropped == 1


async def test_one_way_partition_from_server_drops_responses_but_requests_are_handled() -> None:
    inj = FaultInjector(SERVER_NODE)
    set_rules(inj, FaultSet().partition(SERVER_NODE, "1", one_way=True))
    async with server(inj) as (port, echo), open_connection("127.0.0.1", port, client_id="broker-1") as conn:
        with pytest.raises(trio.TooSlowError):
            await conn.request(ApiKeys.METADATA, {"n": 7}, timeout=0.3)
        assert echo.handled == [7]  # 1 -> 2 is delivered; the answer 2 -> 1 is not


async def test_delay_holds_frames_in_order() -> None:
    inj = FaultInjector(SERVER_NODE)
    set_rules(inj, FaultSet().delay("1", SERVER_NODE, 150, 100, one_way=True))
    async with server(inj) as (port, _), open_connection("127.0.0.1", port, client_id="broker-1") as conn:
        t0 = trio.current_time()
        bodies = await conn.request_many([(ApiKeys.METADATA, {"n": i}) for i in range(20)], timeout=5)
        elapsed = trio.current_time() - t0
        assert [b["n"] for b in bodies] == list(range(20))
        assert elapsed >= 0.05  # at least delay - jitter
        assert elapsed < 2.0  # frames are delayed together, not one after another
        assert inj.frames_delayed == 20


async def test_delayed_responses_keep_order_on_the_wire() -> None:
    """Jitter larger than the gaps between responses never reorders them (a TCP stream is FIFO)."""
    inj = FaultInjector(SERVER_NODE)
    set_rules(inj, FaultSet().delay(SERVER_NODE, CLIENT, 100, 90, one_way=True))
    async with server(inj) as (port, _):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            for i in range(30):
                await stream.send_all(encode_request(int(ApiKeys.METADATA), 0, i, "cli", {"n": i}))
                await trio.sleep(0.003)
            decoder = FrameDecoder()
            ids: list[int] = []
            with trio.fail_after(5):
                while len(ids) < 30:
                    decoder.feed(await stream.receive_some(65536))
                    while (frame := decoder.next_frame()) is not None:
                        ids.append(decode_response(frame)[0])
        assert ids == list(range(30))


async def test_connect_to_a_partitioned_node_hangs_until_healed() -> None:
    target = FaultInjector(SERVER_NODE)
    async with server(target) as (port, _):
        me = FaultInjector("1", resolve=lambda h, p: SERVER_NODE if p == port else None)
        # A one-way partition the other way still stops the handshake (the SYN-ACK is dropped).
        set_rules(me, FaultSet().partition(SERVER_NODE, "1", one_way=True))
        current_faults.set(me)
        try:
            with pytest.raises(trio.TooSlowError):
                async with open_connection("127.0.0.1", port, client_id="broker-1", connect_timeout=0.3):
                    pass

            async def heal_later() -> None:
                await trio.sleep(0.2)
                me.table.set_rules([])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(heal_later)
                t0 = trio.current_time()
                async with open_connection(
                    "127.0.0.1", port, client_id="broker-1", connect_timeout=3
                ) as conn:
                    assert trio.current_time() - t0 >= 0.15
                    assert "n" in await conn.request(ApiKeys.METADATA, {"n": 1}, timeout=2)
        finally:
            current_faults.set(None)


async def test_net_faults_bad_body_gets_invalid_request_and_the_server_lives() -> None:
    inj = FaultInjector(SERVER_NODE)
    async with server(inj) as (port, _), open_connection("127.0.0.1", port, client_id="x") as conn:
        for body in (
            {},
            {"operation": 3},
            {"operation": "set", "rules": [{"src": "1", "dst": "2", "delay_ms": -1}]},
        ):
            resp = await conn.request(ApiKeys.NET_FAULTS, body, timeout=2)
            assert resp["error_code"] == 42 and resp["error_message"]
        assert (await conn.request(ApiKeys.METADATA, {"n": 5}, timeout=2))["n"] == 5


async def test_a_clients_lost_answer_silences_its_connection_but_requests_take_effect() -> None:
    """`net loss 2 clients --one-way`: the request is handled, its answer dropped; the connection then
    writes no later answer (a TCP stream cannot deliver past a lost segment), so the client times out and
    reconnects. A new connection is answered; a broker's connection keeps per-message loss."""
    inj = FaultInjector(SERVER_NODE)
    async with (
        server(inj) as (port, echo),
        open_connection("127.0.0.1", port, client_id="producer-1") as conn,
    ):
        set_rules(inj, FaultSet().loss(SERVER_NODE, CLIENT, 100.0, one_way=True))
        with pytest.raises(trio.TooSlowError):
            await conn.request(ApiKeys.METADATA, {"n": 1}, timeout=0.3)
        set_rules(inj, FaultSet())  # healed: this connection stays silent all the same
        with pytest.raises(trio.TooSlowError):
            await conn.request(ApiKeys.METADATA, {"n": 2}, timeout=0.3)
        assert echo.handled == [1, 2]  # both took effect
        assert "error_code" in await conn.request(ApiKeys.NET_FAULTS, {"operation": "describe"}, timeout=2)
        async with open_connection("127.0.0.1", port, client_id="producer-1") as fresh:
            assert (await fresh.request(ApiKeys.METADATA, {"n": 3}, timeout=2))["n"] == 3
        set_rules(inj, FaultSet().loss(SERVER_NODE, "1", 100.0, one_way=True))
        async with open_connection("127.0.0.1", port, client_id="broker-1") as peer:
            with pytest.raises(trio.TooSlowError):
                await peer.request(ApiKeys.METADATA, {"n": 4}, timeout=0.3)
            set_rules(inj, FaultSet())
            assert (await peer.request(ApiKeys.METADATA, {"n": 5}, timeout=2))["n"] == 5
