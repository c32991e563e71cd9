"""Kafka's ``RequestMetrics``: per request name, the request rate and the time a request spends queued for a
handler, being handled, waiting in a purgatory, and in all.

``RequestMetrics.instrument`` wraps the handler the ``RequestHandlerPool`` calls: it notes when a request
leaves the ``RequestChannel`` and asks the request to call back when its response is ready
(``Request.on_complete``). The times (milliseconds, as Kafka's):

* ``RequestQueueTimeMs``: from the socket server accepting the request to a handler taking it;
* ``LocalTimeMs``: the handler's own work (to the response, or to parking the request in a purgatory);
* ``RemoteTimeMs``: the wait in a purgatory (acks=all produce, long-poll fetch); 0 when answered at once;
* ``TotalTimeMs``: from accepting the request to its response being ready. Unlike Kafka's it leaves out
  the response's wait behind earlier responses on the connection and its send.

FETCH is recorded under ``Fetch`` and also, as Kafka does, under ``FetchFollower`` (replica_id >= 0) or
``FetchConsumer``. Everything is plain attribute arithmetic on the broker's one trio thread; the
Prometheus families are built only when ``/metrics`` is scraped (from the same thread, see
``http_server``), so nothing here needs a lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import trio
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from protocol.api_keys import ApiKeys
from server.metrics.window import LatencyWindow
from server.request_channel import Handler, Request

FETCH_FOLLOWER = "FetchFollower"
FETCH_CONSUMER = "FetchConsumer"

# (attribute of ApiRequestMetrics, metric name, help)
TIMERS: tuple[tuple[str, str, str], ...] = (
    (
        "queue",
        "kafka_network_requestmetrics_requestqueuetimems",
        "RequestQueueTimeMs: ms a request waited in the request channel for a handler.",
    ),
    (
        "local",
        "kafka_network_requestmetrics_localtimems",
        "LocalTimeMs: ms a handler spent on a request.",
    ),
    (
        "remote",
        "kafka_network_requestmetrics_remotetimems",
        "RemoteTimeMs: ms a request waited in a purgatory (acks=all produce, long-poll fetch).",
    ),
    (
        "total",
        "kafka_network_requestmetrics_totaltimems",
        "TotalTimeMs: ms from a request being read to its response being ready.",
    ),
)


def request_name(api_key: int) -> str:
    """Kafka's request name for an API key: ``OFFSET_FOR_LEADER_EPOCH`` -> ``OffsetForLeaderEpoch``."""
    try:
        name = ApiKeys(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(part.capitalize() for part in name.split("_"))


class ApiRequestMetrics:
    """The metrics of one request name."""

    __slots__ = ("local", "name", "queue", "remote", "requests", "total")

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests = 0
        self.queue = LatencyWindow()
        self.local = LatencyWindow()
        self.remote = LatencyWindow()
        self.total = LatencyWindow()

    def record_ms(self, queue: float, local: float, remote: float, total: float) -> None:
        """One answered request's times, in ms."""
        self.requests += 1
        self.queue.observe(queue)
        self.local.observe(local)
        self.remote.observe(remote)
        self.total.observe(total)


class RequestMetrics(Collector):
    def __init__(self, api_keys: Iterable[int], registry: CollectorRegistry | None = None) -> None:
        self.by_key: dict[int, ApiRequestMetrics] = {
            int(k): ApiRequestMetrics(request_name(k)) for k in api_keys
        }
        self.fetch_follower = ApiRequestMetrics(FETCH_FOLLOWER)
        self.fetch_consumer = ApiRequestMetrics(FETCH_CONSUMER)
        if registry is not None:
            registry.register(self)

    def get(self, name: str) -> ApiRequestMetrics | None:
        return next((m for m in self.all() if m.name == name), None)

    def all(self) -> list[ApiRequestMetrics]:
        out = sorted(self.by_key.values(), key=lambda m: m.name)
        if int(ApiKeys.FETCH) in self.by_key:
            out += [self.fetch_consumer, self.fetch_follower]
        return out

    def instrument(self, handler: Handler) -> Handler:
        """``handler`` with every request it handles recorded."""
        by_key = self.by_key
        fetch_api = by_key.get(int(ApiKeys.FETCH))
        current_time = trio.current_time

        async def metered(request: Request) -> None:
            api = by_key.get(request.api_key)
            if api is None:
                await handler(request)
                return
            dequeued = current_time()
            local_done: float | None = None

            def completed(req: Request) -> None:
                end = req.completed_at
                local = end if local_done is None else local_done
                received = req.received_at
                times = (
                    (dequeued - received) * 1000.0,
                    (local - dequeued) * 1000.0,
                    (end - local) * 1000.0,
                    (end - received) * 1000.0,
                )
                api.record_ms(*times)
                if api is fetch_api:
                    replica_id = req.body.get("replica_id")
                    if isinstance(replica_id, int) and replica_id >= 0:
                        self.fetch_follower.record_ms(*times)
                    else:
                        self.fetch_consumer.record_ms(*times)

            request.on_complete = completed
            await handler(request)
            if not request.done:
                local_done = current_time()

        return metered

    # ------------------------------------------------------------------ the collector

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        apis = self.all()
        rate = CounterMetricFamily(
            "kafka_network_requestmetrics_requestspersec",
            "RequestsPerSec: requests handled, by request name.",
            labels=["request"],
        )
        for api in apis:
            rate.add_metric([api.name], api.requests)
        yield rate
        for attr, name, doc in TIMERS:
            family = Metric(name, doc, "summary")
            for api in apis:
                window: LatencyWindow = getattr(api, attr)
                for q, value in window.quantiles():
                    family.add_sample(name, {"request": api.name, "quantile": str(q)}, value)
                family.add_sample(name + "_count", {"request": api.name}, window.count)
                family.add_sample(name + "_sum", {"request": api.name}, window.total)
            yield family
