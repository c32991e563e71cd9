"""The replica manager's metrics (Kafka's ``kafka.server:type=ReplicaManager``), updated by the broker's
``ReplicaStateListener`` on the same calls that write the journal: a partition's flags (hosted, leader,
under-replicated, under / at min ISR) are recomputed when its leadership, ISR or configuration changes,
and the gauges are the counts of those flags. ISR shrinks and expands are counted as the leader applies
them (a change that removes replicas is one shrink, one that adds replicas one expand). An ISR the
controller changes (a broker failed) reaches the leader as LEADER_AND_ISR and, as in Kafka, is no shrink.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge
from prometheus_client.registry import CollectorRegistry

from broker.partition import IsrChange, Partition
from protocol.common import TopicPartition

LEADER = 1
UNDER_REPLICATED = 2
UNDER_MIN_ISR = 4
AT_MIN_ISR = 8


def partition_flags(partition: Partition) -> int:
    """Kafka's ``Partition.isUnderReplicated``, ``isUnderMinIsr``, ``isAtMinIsr``: counted by leaders only."""
    if not partition.is_leader:
        return 0
    flags = LEADER
    isr = len(partition.isr)
    if isr < len(partition.assigned_replicas):
        flags |= UNDER_REPLICATED
    if isr < partition.min_insync_replicas:
        flags |= UNDER_MIN_ISR
    elif isr == partition.min_insync_replicas:
        flags |= AT_MIN_ISR
    return flags


class ReplicaManagerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"kafka_server_replicamanager_{name}", doc, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(f"kafka_server_replicamanager_{name}", doc, registry=registry)

        self.partition_count = gauge("partitioncount", "PartitionCount: partitions hosted by this broker.")
        self.leader_count = gauge("leadercount", "LeaderCount: partitions this broker leads.")
        self.under_replicated = gauge(
            "underreplicatedpartitions",
            "UnderReplicatedPartitions: led partitions whose ISR is smaller than their replica set.",
        )
        self.under_min_isr = gauge(
            "underminisrpartitioncount",
            "UnderMinIsrPartitionCount: led partitions whose ISR is below min.insync.replicas.",
        )
        self.at_min_isr = gauge(
            "atminisrpartitioncount",
            "AtMinIsrPartitionCount: led partitions whose ISR is exactly min.insync.replicas.",
        )
        self.isr_shrinks = counter("isrshrinkspersec", "IsrShrinksPerSec: replicas removed from an ISR.")
        self.isr_expands = counter("isrexpandspersec", "IsrExpandsPerSec: replicas added to an ISR.")
        self._flags: dict[TopicPartition, int] = {}
        self._counts = {LEADER: 0, UNDER_REPLICATED: 0, UNDER_MIN_ISR: 0, AT_MIN_ISR: 0}

    def update(self, partition: Partition) -> None:
        """The partition's leadership, ISR, replicas or min.insync.replicas may have changed."""
        self._set(partition.tp, partition_flags(partition))

    def remove(self, tp: TopicPartition) -> None:
        """The partition is no longer hosted here."""
        old = self._flags.pop(tp, None)
        if old is not None:
            self._adjust(old, 0)
            self.partition_count.set(len(self._flags))

    def on_isr_change(self, change: IsrChange) -> None:
        """One shrink and / or one expand per change, as Kafka marks its meters."""
        old, new = set(change.old_isr), set(change.new_isr)
        if old - new:
            self.isr_shrinks.inc()
        if new - old:
            self.isr_expands.inc()

    def _set(self, tp: TopicPartition, flags: int) -> None:
        old = self._flags.get(tp)
        self._flags[tp] = flags
        if old is None:
            self.partition_count.set(len(self._flags))
            old = 0
        if old != flags:
            self._adjust(old, flags)

    def _adjust(self, old: int, new: int) -> None:
        counts = self._counts
        for flag in counts:
            if old & flag and not new & flag:
                counts[flag] -= 1
            elif new & flag and not old & flag:
                counts[flag] += 1
        self.leader_count.set(counts[LEADER])
        self.under_replicated.set(counts[UNDER_REPLICATED])
        self.under_min_isr.set(counts[UNDER_MIN_ISR])
        self.at_min_isr.set(counts[AT_MIN_ISR])
