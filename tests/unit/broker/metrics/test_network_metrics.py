"""The socket server's gauges: request queue, memory pool, connections."""

from __future__ import annotations

import math

from prometheus_client.registry import CollectorRegistry

from protocol.api_keys import ApiKeys
from server.memory_pool import MemoryPool
from server.metrics.network_metrics import SocketServerCollector
from server.network import SocketServer
from server.request_channel import RequestChannel
from tests.unit.broker.broker_support import make_request


def server(pool: MemoryPool) -> tuple[SocketServer, RequestChannel, CollectorRegistry]:
    channel = RequestChannel(10)
    socket_server = SocketServer(
        host="127.0.0.1",
        port=0,
        channel=channel,
        max_request_bytes=1 << 20,
        supported={},
        name="broker 1",
        memory_pool=pool,
    )
    registry = CollectorRegistry()
    registry.register(SocketServerCollector(socket_server, channel))
    return socket_server, channel, registry


async def test_queue_size_and_memory_pool_follow_the_requests() -> None:
    pool = MemoryPool(1000)
    _, channel, registry = server(pool)
    assert registry.get_sample_value("kafka_network_requestchannel_requestqueuesize") == 0
    assert registry.get_sample_value("kafka_network_socketserver_memorypoolavailable") == 1000
    assert pool.try_allocate(300)
    await channel.send_request(make_request(ApiKeys.PRODUCE, {}))
    assert registry.get_sample_value("kafka_network_requestchannel_requestqueuesize") == 1
    assert registry.get_sample_value("kafka_network_socketserver_memorypoolavailable") == 700
    assert registry.get_sample_value("kafka_network_socketserver_memorypoolused") == 300
    await channel.receive_request()
    pool.release(300)
    assert registry.get_sample_value("kafka_network_requestchannel_requestqueuesize") == 0
    assert registry.get_sample_value("kafka_network_socketserver_memorypoolused") == 0
    connections = "kafka_server_socket_server_metrics_connection_count"
    assert registry.get_sample_value(connections, {"listener": "PLAINTEXT"}) == 0


def test_an_unbounded_pool_has_infinite_memory_available() -> None:
    _, _, registry = server(MemoryPool(-1))
    available = registry.get_sample_value("kafka_network_socketserver_memorypoolavailable")
    assert available is not None and math.isinf(available)
