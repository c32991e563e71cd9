"""The controller's metrics (Kafka's ``kafka.controller:type=KafkaController`` and ``ControllerStats``), in
the controller process's own registry. Elections are counted from the journal events the controller
writes (``KafkaController.apply_effects`` hands them over); the gauges are read from the cluster state when
``/metrics`` is scraped, on the controller's trio thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import Counter, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from controller.state import NO_LEADER, ClusterState
from server.metrics.network_metrics import SocketServerCollector
from server.metrics.request_metrics import RequestMetrics
from server.network import SocketServer
from server.request_channel import RequestChannel


class ControllerStateCollector(Collector):
    def __init__(self, state: Callable[[], ClusterState | None]) -> None:
        self._state = state

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        state = self._state()

        def gauge(name: str, doc: str, value: int) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"kafka_controller_kafkacontroller_{name}", doc, value=value)

        yield gauge(
            "activecontrollercount",
            "ActiveControllerCount: 1 on the active controller (isrsim runs one).",
            0 if state is None else 1,
        )
        partitions = [] if state is None else [p for _, p in state.all_partitions()]
        brokers = [] if state is None else list(state.brokers.values())
        yield gauge(
            "offlinepartitionscount",
            "OfflinePartitionsCount: partitions with no leader.",
            sum(1 for p in partitions if p.leader == NO_LEADER),
        )
        yield gauge(
            "preferredreplicaimbalancecount",
            "PreferredReplicaImbalanceCount: partitions not led by their first (preferred) replica.",
            sum(1 for p in partitions if p.replicas and p.leader >= 0 and p.leader != p.replicas[0]),
        )
        yield gauge(
            "globalpartitioncount", "GlobalPartitionCount: partitions in the cluster.", len(partitions)
        )
        yield gauge(
            "globaltopiccount",
            "GlobalTopicCount: topics in the cluster.",
            0 if state is None else len(state.topics),
        )
        yield gauge(
            "activebrokercount",
            "ActiveBrokerCount: registered brokers that are not fenced.",
            sum(1 for b in brokers if not b.fenced),
        )
        yield gauge(
            "fencedbrokercount",
            "FencedBrokerCount: registered brokers that are fenced.",
            sum(1 for b in brokers if b.fenced),
        )


class ControllerMetrics:
    """Everything the controller publishes on ``/metrics``."""

    def __init__(
        self,
        api_keys: Iterable[int],
        state: Callable[[], ClusterState | None],
        *,
        process: bool = True,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = RequestMetrics(api_keys, self.registry)
        self.registry.register(ControllerStateCollector(state))
        self.leader_elections = Counter(
            "kafka_controller_controllerstats_leaderelectionrateandtimems",
            "LeaderElectionRateAndTimeMs (its count): leaders elected for existing partitions, clean or not.",
            registry=self.registry,
        )
        self.unclean_leader_elections = Counter(
            "kafka_controller_controllerstats_uncleanleaderelectionspersec",
            "UncleanLeaderElectionsPerSec: leaders elected from outside the ISR.",
            registry=self.registry,
        )
        if process:
            ProcessCollector(registry=self.registry)

    def watch_socket_server(self, socket_server: SocketServer, channel: RequestChannel) -> None:
        """Publishes the socket server's gauges (queue size, memory pool, connections)."""
        self.registry.register(SocketServerCollector(socket_server, channel))

    def on_events(self, events: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """The controller's journal events of one round of effects."""
        for name, fields in events:
            # A partition left with no leader is no election; a new partition's first leader is none either.
            if (
                name == "leader_elected"
                and fields.get("leader_id", NO_LEADER) >= 0
                and fields.get("reason") != "new_partition"
            ):
                self.leader_elections.inc()
                if fields.get("unclean"):
                    self.unclean_leader_elections.inc()
