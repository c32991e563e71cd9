"""A broker's metrics: its registry (one per process, not prometheus_client's global one, so brokers run
inside one test process keep theirs apart), what is updated as things happen (``RequestMetrics``,
``ReplicaManagerMetrics``) and what is read from the broker's state when ``/metrics`` is scraped
(``BrokerStateCollector``): logs, fetchers, fetch sessions and purgatories. Reading at scrape time costs
the data path nothing; it is safe because the scrape runs on the broker's trio thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from broker.delayed import DelayedOperationPurgatory
from broker.fetch_session_cache import FetchSessionCache
from broker.metrics.replica_metrics import ReplicaManagerMetrics
from fetcher.fetcher_manager import ReplicaFetcherManager
from server.metrics.network_metrics import SocketServerCollector
from server.metrics.request_metrics import RequestMetrics
from server.network import SocketServer
from server.request_channel import RequestChannel
from storage.log_manager import LogManager

# Kafka's ReplicaFetcherManager metrics carry clientId=Replica.
REPLICA_CLIENT_ID = "Replica"


def fetcher_client_id(leader_id: int, fetcher_id: int) -> str:
    """Kafka's name of a replica fetcher thread (its FetcherStats' clientId)."""
    return f"ReplicaFetcherThread-{fetcher_id}-{leader_id}"


class BrokerStateCollector(Collector):
    def __init__(
        self,
        log_manager: LogManager,
        fetch_session_cache: FetchSessionCache,
        purgatories: Iterable[DelayedOperationPurgatory],
    ) -> None:
        self.log_manager = log_manager
        self.fetch_session_cache = fetch_session_cache
        self.purgatories = list(purgatories)
        # Set by the server once its fetcher manager runs.
        self.fetcher_manager: ReplicaFetcherManager | None = None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._logs()
        yield from self._fetchers()
        yield from self._fetch_sessions()
        yield from self._purgatories()

    def _logs(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Size: bytes of the partition's log.", labels=labels)
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "LogEndOffset: the log's end offset.", labels=labels
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "LogStartOffset: the log's start offset.", labels=labels
        )
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "NumLogSegments: segments of the log.", labels=labels
        )
        for (topic, partition), log in sorted(self.log_manager.logs.items()):
            values = [topic, str(partition)]
            size.add_metric(values, log.size_in_bytes)
            end.add_metric(values, log.log_end_offset)
            start.add_metric(values, log.log_start_offset)
            segments.add_metric(values, len(log.segments))
        yield from (size, end, start, segments)

    def _fetchers(self) -> Iterator[Metric]:
        fm = self.fetcher_manager
        lags = list(fm.lags()) if fm is not None else []
        max_lag = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "MaxLag: the largest lag, in messages, of a partition this broker follows.",
            labels=["clientid"],
        )
        max_lag.add_metric([REPLICA_CLIENT_ID], max((lag for _, lag in lags), default=0))
        yield max_lag
        count = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_partitioncount",
            "PartitionCount: partitions the replica fetchers fetch.",
            labels=["clientid"],
        )
        count.add_metric(
            [REPLICA_CLIENT_ID], 0 if fm is None else sum(f.partition_count for f, _ in fm.fetchers.values())
        )
        yield count
        consumer_lag = GaugeMetricFamily(
            "kafka_server_fetcherlagmetrics_consumerlag",
            "ConsumerLag: a followed partition's lag in messages (leader HW minus next fetch offset).",
            labels=["clientid", "topic", "partition"],
        )
        for (topic, partition), lag in sorted(lags):
            consumer_lag.add_metric([REPLICA_CLIENT_ID, topic, str(partition)], lag)
        yield consumer_lag
        requests = CounterMetricFamily(
            "kafka_server_fetcherstats_requestspersec",
            "RequestsPerSec: FETCH requests a replica fetcher sent.",
            labels=["clientid"],
        )
        fetched = CounterMetricFamily(
            "kafka_server_fetcherstats_bytespersec",
            "BytesPerSec: record bytes a replica fetcher fetched.",
            labels=["clientid"],
        )
        stats = {} if fm is None else fm.fetcher_stats
        for (leader, fid), s in sorted(stats.items()):
            requests.add_metric([fetcher_client_id(leader, fid)], s.requests)
            fetched.add_metric([fetcher_client_id(leader, fid)], s.bytes)
        yield requests
        yield fetched

    def _fetch_sessions(self) -> Iterator[Metric]:
        cache = self.fetch_session_cache
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "NumIncrementalFetchSessions: incremental fetch sessions cached.",
            value=cache.size,
        )
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "NumIncrementalFetchPartitionsCached: partitions cached over all fetch sessions.",
            value=cache.total_partitions,
        )
        yield CounterMetricFamily(
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictionspersec",
            "IncrementalFetchSessionEvictionsPerSec: fetch sessions evicted to make room for new ones.",
            value=cache.num_evictions,
        )

    def _purgatories(self) -> Iterator[Metric]:
        size = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "PurgatorySize: watches of delayed operations not yet completed (an operation watches each of "
            "its partitions).",
            labels=["delayedoperation"],
        )
        delayed = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_numdelayedoperations",
            "NumDelayedOperations: delayed operations waiting to complete or expire.",
            labels=["delayedoperation"],
        )
        for purgatory in self.purgatories:
            size.add_metric([purgatory.name], purgatory.watched)
            delayed.add_metric([purgatory.name], purgatory.delayed)
        yield size
        yield delayed


class BrokerMetrics:
    """Everything a broker publishes on ``/metrics``, in its own registry."""

    def __init__(
        self,
        api_keys: Iterable[int],
        log_manager: LogManager,
        fetch_session_cache: FetchSessionCache,
        purgatories: Iterable[DelayedOperationPurgatory],
        *,
        process: bool = True,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = RequestMetrics(api_keys, self.registry)
        self.replica_manager = ReplicaManagerMetrics(self.registry)
        self.state = BrokerStateCollector(log_manager, fetch_session_cache, purgatories)
        self.registry.register(self.state)
        if process:
            ProcessCollector(registry=self.registry)

    def watch_socket_server(self, socket_server: SocketServer, channel: RequestChannel) -> None:
        """Publishes the socket server's gauges (queue size, memory pool, connections)."""
        self.registry.register(SocketServerCollector(socket_server, channel))
