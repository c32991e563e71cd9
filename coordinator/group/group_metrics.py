"""The group coordinator's metrics (docs/metrics.md), read from its core when scraped, named as the JMX
exporter names Kafka's: ``kafka.coordinator.group:type=GroupMetadataManager`` (groups by state, offsets)
and ``kafka.coordinator.group:type=group-coordinator-metrics`` (rebalances, offset commits)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from coordinator.group.coordinator_core import GroupCoordinatorCore
from coordinator.group.group_metadata import GroupState

PREFIX = "kafka_coordinator_group_groupmetadatamanager_"
RATES = "kafka_coordinator_group_group_coordinator_metrics_"

_STATE_GAUGES = {
    GroupState.PREPARING_REBALANCE: "numgroupspreparingrebalance",
    GroupState.COMPLETING_REBALANCE: "numgroupscompletingrebalance",
    GroupState.STABLE: "numgroupsstable",
    GroupState.DEAD: "numgroupsdead",
    GroupState.EMPTY: "numgroupsempty",
}


class GroupCoordinatorCollector(Collector):
    def __init__(self, core: GroupCoordinatorCore) -> None:
        self.core = core

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        core = self.core
        yield GaugeMetricFamily(PREFIX + "numgroups", "Groups held here.", value=len(core.groups))
        yield GaugeMetricFamily(PREFIX + "numoffsets", "Committed offsets held.", value=core.num_offsets())
        counts = core.state_counts()
        for state, name in _STATE_GAUGES.items():
            yield GaugeMetricFamily(PREFIX + name, f"Groups in state {state.value}.", value=counts[state])
        yield GaugeMetricFamily(
            PREFIX + "numpartitionsloading",
            "__consumer_offsets partitions being loaded.",
            value=len(core.loading_partitions),
        )
        yield GaugeMetricFamily(
            PREFIX + "numpartitionsowned",
            "__consumer_offsets partitions whose groups this broker coordinates.",
            value=len(core.owned_partitions),
        )
        # Kafka's Meter "-count" attributes, as the JMX exporter shows them (growing gauges).
        yield GaugeMetricFamily(
            RATES + "group_rebalance_count", "Rebalances begun (PreparingRebalance).", value=core.rebalances
        )
        yield GaugeMetricFamily(
            RATES + "group_completed_rebalance_count",
            "Rebalances completed (the leader's assignment received).",
            value=core.completed_rebalances,
        )
        yield GaugeMetricFamily(
            RATES + "offset_commit_count", "Offsets committed (per partition).", value=core.offset_commits
        )
        yield GaugeMetricFamily(
            RATES + "offset_expiration_count",
            "Committed offsets removed by offsets.retention.minutes.",
            value=core.offset_expirations,
        )
