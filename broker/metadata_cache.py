"""What this broker knows of the cluster (Kafka's ``MetadataCache``), fed by UPDATE_METADATA and by
LEADER_AND_ISR's ``live_leaders``; fetchers use it to find leaders and METADATA answers from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol import messages as m
from protocol.common import BrokerEndpoint, TopicPartition
from protocol.errors import Errors

__all__ = ["MetadataCache", "PartitionMetadata"]


@dataclass(slots=True)
class PartitionMetadata:
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    controller_epoch: int = 0


# A broker's advertised listeners: listener name -> (host, port).
Endpoints = dict[str, tuple[str, int]]


class MetadataCache:
    """``brokers`` holds each live broker's inter-broker address (what fetchers connect to);
    ``endpoints`` each one's advertised listeners by name, when known (UPDATE_METADATA's ``endpoints``).
    A broker whose listeners are not known is reached at its one address on every listener."""

    def __init__(self, local: BrokerEndpoint, local_endpoints: Endpoints | None = None) -> None:
        self.local = local
        self.local_endpoints: Endpoints = dict(local_endpoints or {})
        self.brokers: dict[int, BrokerEndpoint] = {local.broker_id: local}
        self.endpoints: dict[int, Endpoints] = {}
        self.partitions: dict[TopicPartition, PartitionMetadata] = {}
        self.controller_id: int = -1

    def update_brokers(
        self,
        brokers: list[BrokerEndpoint],
        *,
        replace: bool,
        endpoints: dict[int, Endpoints] | None = None,
    ) -> None:
        endpoints = endpoints or {}
        if replace:
            self.brokers = {b.broker_id: b for b in brokers}
            self.brokers.setdefault(self.local.broker_id, self.local)
            self.endpoints = {}
        for b in brokers:
            self.brokers[b.broker_id] = b
            if endpoints.get(b.broker_id):
                self.endpoints[b.broker_id] = dict(endpoints[b.broker_id])
            # LEADER_AND_ISR's live_leaders carry no listeners: what UPDATE_METADATA said stays.

    def brokers_on(self, listener: str) -> list[BrokerEndpoint]:
        """The live brokers' addresses on ``listener`` (Kafka's ``getAliveBrokerNodes(listenerName)``): a
        broker whose listeners are known but lack this one is left out."""
        out: list[BrokerEndpoint] = []
        for b in self.brokers.values():
            if b.broker_id == self.local.broker_id:
                known = self.local_endpoints
            else:
                known = self.endpoints.get(b.broker_id, {})
            if not known:
                out.append(b)
            elif listener in known:
                host, port = known[listener]
                out.append(BrokerEndpoint(b.broker_id, host, port))
        return out

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

    def topic_metadata(self, names: list[str] | None) -> list[m.MetadataResponseTopic]:
        """METADATA's topics (Kafka's ``getTopicMetadata``), for ``names`` (None: every known topic, sorted):
        an unknown topic is UNKNOWN_TOPIC_OR_PARTITION; a partition whose leader is not a live broker is
        LEADER_NOT_AVAILABLE; replicas not alive are listed offline."""
        known = self.topics()
        live = set(self.brokers)
        out: list[m.MetadataResponseTopic] = []
        for name in sorted(known) if names is None else names:
            parts = known.get(name)
            if parts is None:
                unknown = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
                out.append(m.MetadataResponseTopic(name=name, error_code=unknown))
                continue
            out.append(
                m.MetadataResponseTopic(
                    name=name,
                    partitions=[_partition_metadata(idx, meta, live) for idx, meta in sorted(parts.items())],
                )
            )
        return out


def _partition_metadata(index: int, meta: PartitionMetadata, live: set[int]) -> m.MetadataResponsePartition:
    offline = sorted(set(meta.offline_replicas) | {r for r in meta.replicas if r not in live})
    error = Errors.NONE if meta.leader >= 0 and meta.leader in live else Errors.LEADER_NOT_AVAILABLE
    return m.MetadataResponsePartition(
        error_code=int(error),
        partition_index=index,
        leader_id=meta.leader,
        leader_epoch=meta.leader_epoch,
        replica_nodes=list(meta.replicas),
        isr_nodes=list(meta.isr),
        offline_replicas=offline,
    )
