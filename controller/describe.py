"""The controller's answers to METADATA and DESCRIBE_CLUSTER, read from the cluster state."""

from __future__ import annotations

from controller.state import BrokerRegistration, ClusterState
from protocol import controller_messages as cm
from protocol import messages as m
from protocol.errors import Errors


def address_on(reg: BrokerRegistration, listener: str | None) -> tuple[str, int] | None:
    """A broker's address on ``listener`` (None: its inter-broker one); None if it registered listeners
    but not that one (Kafka leaves such a broker out of the answer)."""
    if listener is None or not reg.listeners:
        return reg.host, reg.port
    return next(((h, p) for name, h, p in reg.listeners if name == listener), None)


def metadata_response(
    state: ClusterState, controller_id: int, req: m.MetadataRequest, listener: str | None = None
) -> m.MetadataResponse:
    """Live (unfenced) brokers and the requested topics (all when ``topics`` is nil); a partition whose
    leader is not live is LEADER_NOT_AVAILABLE, and its replicas on fenced brokers are offline. With
    ``listener``, each broker's address is the one on that listener."""
    live = {b for b, reg in state.brokers.items() if not reg.fenced}
    brokers = [
        m.MetadataResponseBroker(node_id=b, host=addr[0], port=addr[1])
        for b, reg in sorted(state.brokers.items())
        if b in live and (addr := address_on(reg, listener)) is not None
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


def describe_cluster_response(
    state: ClusterState, controller_id: int, listener: str | None = None
) -> cm.DescribeClusterResponse:
    """Every registered broker, fenced or not (on ``listener``, as :func:`metadata_response`)."""
    return cm.DescribeClusterResponse(
        cluster_id=state.cluster_id,
        controller_id=controller_id,
        brokers=[
            cm.DescribeClusterResponseBroker(broker_id=b, host=addr[0], port=addr[1], fenced=reg.fenced)
            for b, reg in sorted(state.brokers.items())
            if (addr := address_on(reg, listener)) is not None
        ],
    )


__all__ = ["address_on", "describe_cluster_response", "metadata_response"]
