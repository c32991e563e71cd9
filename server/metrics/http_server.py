"""``MetricsHttpServer``: ``GET /metrics`` in Prometheus's text format, served by a trio task in the
process's own nursery (the broker's or the controller's).

Why a trio task rather than prometheus_client's own thread server: the collectors read the broker's state
(logs, fetchers, fetch sessions, the controller's cluster state) when scraped, and on the trio thread they
can do so without locks, as every other reader does; the server also starts and stops with its owner like
any other task. The cost is that a scrape runs on the event loop, and prometheus_client's text rendering
is the bulk of it: about 10 ms per thousand samples (a hosted partition has four log samples, a followed
one a lag sample besides), measured at 15 ms for a broker hosting 300 partitions. Requests in flight wait
that long once per scrape interval (15 s by default in Prometheus, 5 s in the compose profile).

HTTP/1.0-style: one request per connection, answered and closed; requests are limited in size and time so
a stuck client cannot hold a task.
"""

from __future__ import annotations

import logging

import trio
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 16 * 1024
REQUEST_TIMEOUT_S = 10.0


def _response(status: str, content_type: str, body: bytes, *, head: bool = False) -> bytes:
    header = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("ascii")
    return header if head else header + body


class MetricsHttpServer:
    def __init__(self, registry: CollectorRegistry, host: str, port: int, name: str) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.name = name
        self.bound_port: int | None = None
        self.scrapes = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            listeners = await trio.open_tcp_listeners(self.port, host=self.host or None)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"{self.name}: cannot serve metrics on {self.host}:{self.port}: {exc.strerror}; "
                "choose another metrics.port (0 turns metrics off)",
            ) from exc
        self.bound_port = int(listeners[0].socket.getsockname()[1])
        log.info("%s serving metrics on http://%s:%d/metrics", self.name, self.host, self.bound_port)
        task_status.started(self.bound_port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                head = await self._read_head(stream)
                if head is not None:
                    await stream.send_all(self.respond(head))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception:  # a scrape must never take the process down
            log.exception("%s: metrics request failed", self.name)
        finally:
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()

    @staticmethod
    async def _read_head(stream: trio.SocketStream) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data and b"\n\n" not in data:
            if len(data) > MAX_REQUEST_BYTES:
                return None
            chunk = await stream.receive_some(4096)
            if not chunk:
                return data or None
            data += chunk
        return data

    def respond(self, head: bytes) -> bytes:
        """The whole response to a request whose head (request line and headers) is ``head``."""
        parts = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
        if len(parts) < 2:
            return _response("400 Bad Request", "text/plain", b"bad request\n")
        method, target = parts[0], parts[1]
        if method not in (b"GET", b"HEAD"):
            return _response("405 Method Not Allowed", "text/plain", b"GET /metrics\n")
        path = target.split(b"?", 1)[0]
        head_only = method == b"HEAD"
        if path == b"/metrics":
            self.scrapes += 1
            return _response("200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry), head=head_only)
        if path == b"/":
            body = f"{self.name}: metrics at /metrics\n".encode()
            return _response("200 OK", "text/plain; charset=utf-8", body, head=head_only)
        return _response("404 Not Found", "text/plain", b"not found; metrics are at /metrics\n")
