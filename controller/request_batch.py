"""Requests from the controller to brokers, collected while the controller changes its state and built
at the end, one request per API per broker (Kafka's ``ControllerBrokerRequestBatch``).

Partition states are read from the cluster state when the batch is built, so several changes to a
partition within one operation send only its final state. Per broker, the order is Kafka's:
LEADER_AND_ISR, then UPDATE_METADATA, then STOP_REPLICA.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.state import ClusterState, PartitionState
from protocol import controller_messages as cm
from protocol import security_messages as sm
from protocol.api_keys import ApiKeys
from protocol.common import LEADER_DURING_DELETE, TopicPartition

ControllerRequestBody = cm.LeaderAndIsrRequest | cm.UpdateMetadataRequest | cm.StopReplicaRequest


@dataclass(frozen=True, slots=True)
class OutboundRequest:
    """One request for the shell to send to ``broker_id`` (with retries, in order)."""

    broker_id: int
    api_key: ApiKeys
    body: ControllerRequestBody


@dataclass(slots=True)
class RequestBatch:
    # broker -> tp -> is_new
    leader_and_isr: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)
    # broker -> set of partitions (an empty set still sends the live broker list)
    update_metadata: dict[int, set[TopicPartition]] = field(default_factory=dict)
    # broker -> tp -> (leader_epoch, delete_partition)
    stop_replica: dict[int, dict[TopicPartition, tuple[int, bool]]] = field(default_factory=dict)
    # partitions of deleted topics (UPDATE_METADATA says leader -2 for them): tp -> replicas
    deleted: dict[TopicPartition, list[int]] = field(default_factory=dict)

    def add_leader_and_isr(
        self, brokers: list[int] | set[int], tp: TopicPartition, is_new: bool = False
    ) -> None:
        for b in brokers:
            entries = self.leader_and_isr.setdefault(b, {})
            entries[tp] = entries.get(tp, False) or is_new

    def add_update_metadata(
        self, brokers: list[int] | set[int], tps: list[TopicPartition] | set[TopicPartition]
    ) -> None:
        for b in brokers:
            self.update_metadata.setdefault(b, set()).update(tps)

    def add_stop_replica(self, broker: int, tp: TopicPartition, leader_epoch: int, delete: bool) -> None:
        self.stop_replica.setdefault(broker, {})[tp] = (leader_epoch, delete)

    def is_empty(self) -> bool:
        return not (self.leader_and_isr or self.update_metadata or self.stop_replica)

    def build(
        self, state: ClusterState, controller_id: int, security: sm.UpdateMetadataSecurity | None = None
    ) -> list[OutboundRequest]:
        """``security``: the ACLs and credentials every UPDATE_METADATA carries (None: none yet)."""
        live = [b for _, b in sorted(state.brokers.items()) if not b.fenced]
        live_leaders = [
            cm.LeaderAndIsrRequestLiveLeader(broker_id=b.broker_id, host_name=b.host, port=b.port)
            for b in live
        ]
        live_brokers = [
            cm.UpdateMetadataRequestBroker(
                id=b.broker_id,
                host=b.host,
                port=b.port,
                endpoints=[
                    cm.UpdateMetadataRequestEndpoint(listener=name, host=host, port=port)
                    for name, host, port in b.listeners
                ],
            )
            # A broker in controlled shutdown is left out, as KRaft's brokers treat it as not eligible for
            # ISRs (KIP-841): leaders then stop waiting for it in their HW (broker/partition.py).
            for b in live
            if not b.in_controlled_shutdown
        ]
        epoch = state.controller_epoch
        live_ids = {b.broker_id for b in live}
        # A partition's UPDATE_METADATA state is the same for every broker: built once, shared.
        um_states: dict[TopicPartition, cm.UpdateMetadataRequestPartitionState | None] = {}
        out: list[OutboundRequest] = []
        targets = sorted(set(self.leader_and_isr) | set(self.update_metadata) | set(self.stop_replica))
        for broker_id in targets:
            reg = state.brokers.get(broker_id)
            broker_epoch = -1 if reg is None else reg.epoch
            lair = self._leader_and_isr_states(state, broker_id)
            if lair:
                body_lair = cm.LeaderAndIsrRequest(
                    controller_id=controller_id,
                    controller_epoch=epoch,
                    broker_epoch=broker_epoch,
                    topic_states=lair,
                    live_leaders=list(live_leaders),
                )
                out.append(OutboundRequest(broker_id, ApiKeys.LEADER_AND_ISR, body_lair))
            if broker_id in self.update_metadata:
                body_um = cm.UpdateMetadataRequest(
                    controller_id=controller_id,
                    controller_epoch=epoch,
                    broker_epoch=broker_epoch,
                    topic_states=self._update_metadata_states(
                        state, self.update_metadata[broker_id], live_ids, um_states
                    ),
                    live_brokers=list(live_brokers),
                    security=security,
                    broker_configs=[
                        cm.UpdateMetadataRequestBrokerConfigs(resource_name=name, configs=dict(configs))
                        for name, configs in sorted(state.broker_configs.items())
                    ],
                )
                out.append(OutboundRequest(broker_id, ApiKeys.UPDATE_METADATA, body_um))
            stops = self.stop_replica.get(broker_id)
            if stops:
                by_topic: dict[str, list[cm.StopReplicaRequestPartitionState]] = {}
                for (topic, idx), (leader_epoch, delete) in sorted(stops.items()):
                    by_topic.setdefault(topic, []).append(
                        cm.StopReplicaRequestPartitionState(
                            partition_index=idx, leader_epoch=leader_epoch, delete_partition=delete
                        )
                    )
                body_sr = cm.StopReplicaRequest(
                    controller_id=controller_id,
                    controller_epoch=epoch,
                    broker_epoch=broker_epoch,
                    topic_states=[
                        cm.StopReplicaRequestTopicState(topic_name=t, partition_states=ps)
                        for t, ps in by_topic.items()
                    ],
                )
                out.append(OutboundRequest(broker_id, ApiKeys.STOP_REPLICA, body_sr))
        return out

    def _leader_and_isr_states(
        self, state: ClusterState, broker_id: int
    ) -> list[cm.LeaderAndIsrRequestTopicState]:
        by_topic: dict[str, list[cm.LeaderAndIsrRequestPartitionState]] = {}
        for tp, is_new in sorted(self.leader_and_isr.get(broker_id, {}).items()):
            p = state.partition(tp)
            if p is None:  # deleted later in the same operation
                continue
            by_topic.setdefault(tp[0], []).append(
                cm.LeaderAndIsrRequestPartitionState(
                    partition_index=tp[1],
                    controller_epoch=p.controller_epoch,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    isr=list(p.isr),
                    partition_epoch=p.partition_epoch,
                    replicas=list(p.replicas),
                    is_new=is_new,
                )
            )
        return [
            cm.LeaderAndIsrRequestTopicState(topic_name=t, partition_states=ps) for t, ps in by_topic.items()
        ]

    def _update_metadata_states(
        self,
        state: ClusterState,
        tps: set[TopicPartition],
        live: set[int],
        built: dict[TopicPartition, cm.UpdateMetadataRequestPartitionState | None],
    ) -> list[cm.UpdateMetadataRequestTopicState]:
        by_topic: dict[str, list[cm.UpdateMetadataRequestPartitionState]] = {}
        for tp in sorted(tps):
            if tp in built:
                entry = built[tp]
            else:
                entry = built[tp] = self._update_metadata_state(state, tp, live)
            if entry is not None:
                by_topic.setdefault(tp[0], []).append(entry)
        return [
            cm.UpdateMetadataRequestTopicState(
                topic_name=t, partition_states=ps, configs=_topic_configs(state, t)
            )
            for t, ps in by_topic.items()
        ]

    def _update_metadata_state(
        self, state: ClusterState, tp: TopicPartition, live: set[int]
    ) -> cm.UpdateMetadataRequestPartitionState | None:
        p = state.partition(tp)
        if p is None:
            replicas = self.deleted.get(tp)
            if replicas is None:
                return None
            p = PartitionState(replicas, LEADER_DURING_DELETE, 0, [], 0, state.controller_epoch)
        return cm.UpdateMetadataRequestPartitionState(
            partition_index=tp[1],
            controller_epoch=p.controller_epoch,
            leader=p.leader,
            leader_epoch=p.leader_epoch,
            isr=list(p.isr),
            replicas=list(p.replicas),
            offline_replicas=[r for r in p.replicas if r not in live],
        )


def _topic_configs(state: ClusterState, topic: str) -> dict[str, str] | None:
    """The topic's own configs, which every UPDATE_METADATA about it carries (None once it is deleted), so a
    change reaches the brokers hosting it at once (Kafka's brokers see ConfigRecords in the metadata log)."""
    t = state.topics.get(topic)
    return None if t is None else dict(t.configs)


__all__ = ["ControllerRequestBody", "OutboundRequest", "RequestBatch"]
