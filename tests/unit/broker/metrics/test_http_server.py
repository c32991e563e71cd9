"""``MetricsHttpServer``: GET /metrics in Prometheus's text format over a loopback socket."""

from __future__ import annotations

import pytest
import trio
from prometheus_client import Gauge
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import CollectorRegistry

from server.metrics.http_server import MetricsHttpServer


async def http(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return lines[0], headers, body


async def test_metrics_404_head_and_bad_method() -> None:
    registry = CollectorRegistry()
    Gauge("kafka_server_replicamanager_leadercount", "LeaderCount", registry=registry).set(4)
    server = MetricsHttpServer(registry, "127.0.0.1", 0, "broker 1")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)

        status, headers, body = await http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == "HTTP/1.1 200 OK"
        assert headers["Content-Type"] == CONTENT_TYPE_LATEST
        assert int(headers["Content-Length"]) == len(body)
        assert b"kafka_server_replicamanager_leadercount 4.0\n" in body

        status, headers, body = await http(port, b"HEAD /metrics?x=1 HTTP/1.1\r\n\r\n")
        assert status == "HTTP/1.1 200 OK" and body == b"" and int(headers["Content-Length"]) > 0

        status, _, _ = await http(port, b"GET /other HTTP/1.1\r\n\r\n")
        assert status == "HTTP/1.1 404 Not Found"
        status, _, _ = await http(port, b"POST /metrics HTTP/1.1\r\n\r\n")
        assert status == "HTTP/1.1 405 Method Not Allowed"
        status, _, _ = await http(port, b"nonsense\r\n\r\n")
        assert status == "HTTP/1.1 400 Bad Request"
        assert server.scrapes == 2
        nursery.cancel_scope.cancel()


async def test_a_port_in_use_names_the_setting() -> None:
    registry = CollectorRegistry()
    first = MetricsHttpServer(registry, "127.0.0.1", 0, "broker 1")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(first.serve)
        second = MetricsHttpServer(registry, "127.0.0.1", port, "broker 2")
        with pytest.raises(
            OSError, match=r"broker 2: cannot serve metrics on 127\.0\.0\.1:\d+: .*metrics\.port"
        ):
            await second.serve()
        nursery.cancel_scope.cancel()
