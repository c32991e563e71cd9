"""Where a coordinator lives, for FindCoordinator (Kafka's ``KafkaApis.getCoordinator``).

A group's and a transactional id's coordinator are found the same way: the leader of the internal topic's
partition the key hashes to, as seen on the listener the request came in on. The internal topic is created
on first use (``__consumer_offsets`` / ``__transaction_state``), and until it has a live leader the answer is
COORDINATOR_NOT_AVAILABLE, which every client retries.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.metadata_cache import MetadataCache
from protocol import group_messages as g
from protocol.common import TopicPartition
from protocol.errors import Errors


def coordinator_error(key: str, code: Errors, message: str) -> g.FindCoordinatorResponseCoordinator:
    return g.FindCoordinatorResponseCoordinator(key=key, error_code=int(code), error_message=message)


def find_coordinator_node(
    metadata_cache: MetadataCache,
    listener_name: str,
    key: str,
    tp: TopicPartition,
    create_topic: Callable[[], None],
) -> g.FindCoordinatorResponseCoordinator:
    """The broker leading ``tp`` (the key's internal-topic partition) on ``listener_name``."""
    meta = metadata_cache.partitions.get(tp)
    if meta is None:
        create_topic()
        return coordinator_error(key, Errors.COORDINATOR_NOT_AVAILABLE, f"{tp[0]} is being created")
    node = next((b for b in metadata_cache.brokers_on(listener_name) if b.broker_id == meta.leader), None)
    if node is None:
        return coordinator_error(key, Errors.COORDINATOR_NOT_AVAILABLE, f"{tp[0]}-{tp[1]} has no live leader")
    return g.FindCoordinatorResponseCoordinator(
        key=key, node_id=node.broker_id, host=node.host, port=node.port
    )
