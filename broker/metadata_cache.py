"""What this broker knows of the cluster (Kafka's ``MetadataCache``), fed by UPDATE_METADATA and by
LEADER_AND_ISR's ``live_leaders``; fetchers use it to find leaders and METADATA answers from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.common import BrokerEndpoint, TopicPartition

__all__ = ["MetadataCache", "PartitionMetadata"]


@dataclass(slots=True)
class PartitionMetadata:
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    controller_epoch: int = 0


class MetadataCache:
    def __init__(self, local: BrokerEndpoint) -> None:
        self.local = local
        self.brokers: dict[int, BrokerEndpoint] = {local.broker_id: local}
        self.partitions: dict[TopicPartition, PartitionMetadata] = {}
        self.controller_id: int = -1

    def update_brokers(self, brokers: list[BrokerEndpoint], *, replace: bool) -> None:
        if replace:
            self.brokers = {b.broker_id: b for b in brokers}
            self.brokers.setdefault(self.local.broker_id, self.local)
        else:
            for b in brokers:
                self.brokers[b.broker_id] = b

    def update_partition(self, tp: TopicPartition, meta: PartitionMetadata) -> None:
        self.partitions[tp] = meta

    def remove_partition(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def alive_broker(self, broker_id: int) -> BrokerEndpoint | None:
        return self.brokers.get(broker_id)

    def contains(self, tp: TopicPartition) -> bool:
        return tp in self.partitions

    def topics(self) -> dict[str, dict[int, PartitionMetadata]]:
        out: dict[str, dict[int, PartitionMetadata]] = {}
        for (topic, partition), meta in self.partitions.items():
            out.setdefault(topic, {})[partition] = meta
        return out
