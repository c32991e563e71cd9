"""The socket server's gauges (Kafka's ``kafka.network:type=SocketServer``, ``RequestChannel`` and the
``socket-server-metrics`` connection count), read from the socket server when scraped. Brokers and the
controller both publish them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.network import SocketServer
from server.request_channel import RequestChannel

LISTENER = "PLAINTEXT"


class SocketServerCollector(Collector):
    def __init__(self, socket_server: SocketServer, channel: RequestChannel) -> None:
        self.socket_server = socket_server
        self.channel = channel

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        server = self.socket_server
        pool = server.memory_pool
        yield GaugeMetricFamily(
            "kafka_network_requestchannel_requestqueuesize",
            "RequestQueueSize: requests waiting for a request handler (queued.max.requests at most).",
            value=self.channel.queue_size,
        )
        yield GaugeMetricFamily(
            "kafka_network_socketserver_memorypoolavailable",
            "MemoryPoolAvailable: bytes of queued.max.request.bytes not held by requests (+Inf: no limit).",
            value=pool.available if pool.bounded else float("inf"),
        )
        yield GaugeMetricFamily(
            "kafka_network_socketserver_memorypoolused",
            "MemoryPoolUsed: bytes held by requests read and not yet handled.",
            value=pool.allocated,
        )
        connections = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "connection-count: open client connections.",
            labels=["listener"],
        )
        connections.add_metric([LISTENER], len(server.connections))
        yield connections
