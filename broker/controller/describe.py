"""The controller's answers to METADATA and DESCRIBE_CLUSTER, read from the cluster state."""

from __future__ import annotations

from broker.controller.state import ClusterState
from protocol import controller_messages as cm
from protocol import messages as m
from protocol.errors import Errors


def metadata_response(state: ClusterState, controller_id: int, req: m.MetadataRequest) -> m.MetadataResponse:
    """Live (unfenced) brokers and the requested topics (all when ``topics`` is nil); a partition whose
    leader is not live is LEADER_NOT_AVAILABLE, and its replicas on fenced brokers are offline."""
    live = {b for b, reg in state.brokers.items() if not reg.fenced}
    brokers = [
        m.MetadataResponseBroker(node_id=b, host=reg.host, port=reg.port)
        for b, reg in sorted(state.brokers.items())
        if b in live
    ]
    # Each topic once however often it is named (Kafka takes the request's topics as a set).
    names = sorted(state.topics) if req.topics is None else list(dict.fromkeys(t.name for t in req.topics))
    topics: list[m.MetadataResponseTopic] = []
    for name in names:
        topic = state.topics.get(name)
        if topic is None:
            topics.append(
                m.MetadataResponseTopic(name=name, error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION))
            )
            continue
        parts = [
            m.MetadataResponsePartition(
                error_code=int(Errors.NONE if p.leader in live else Errors.LEADER_NOT_AVAILABLE),
                partition_index=i,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr),
                offline_replicas=[r for r in p.replicas if r not in live],
            )
            for i, p in sorted(topic.partitions.items())
        ]
        topics.append(m.MetadataResponseTopic(name=name, partitions=parts))
    return m.MetadataResponse(brokers=brokers, controller_id=controller_id, topics=topics)


def describe_cluster_response(state: ClusterState, controller_id: int) -> cm.DescribeClusterResponse:
    """Every registered broker, fenced or not."""
    return cm.DescribeClusterResponse(
        cluster_id=state.cluster_id,
        controller_id=controller_id,
        brokers=[
            cm.DescribeClusterResponseBroker(broker_id=b, host=reg.host, port=reg.port, fenced=reg.fenced)
            for b, reg in sorted(state.brokers.items())
        ],
    )


__all__ = ["describe_cluster_response", "metadata_response"]
