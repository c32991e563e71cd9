"""The bounds of one controller operation (Kafka's ``QuorumController.MAX_RECORDS_PER_USER_OP`` and
``ReplicationControlManager.MAX_PARTITIONS_PER_BATCH``), checked before anything is allocated or assigned.

Kafka's controller writes one operation's metadata records as one batch of at most 10,000 records; an
operation that would need more is refused as a whole and changes nothing:

- CreateTopics asking for more than 10,000 partitions in all (a topic's ``num_partitions``, its default for
  -1, or the number of its manual assignments): POLICY_VIOLATION "Excessively large number of partitions per
  request." for every topic of the request, ``validate_only`` included (Kafka 4.0, KAFKA-17870). The same
  bound and answer for CreatePartitions, counting the partitions it would add (KAFKA-19673's rule).
- Any other operation whose records would pass 10,000 (a CreateTopics' topic, config and partition records;
  one record per topic deleted, per ACL created, per SCRAM credential changed): POLICY_VIOLATION "Unable to
  perform excessively large batch operation." (what Kafka answers for a ``BoundedListTooLongException``).
- In a quorum, where the controller's whole state is one metadata record per decision, CreateTopics and
  CreatePartitions whose new partitions would make that record larger than METADATA_STATE_MAX_BYTES
  (Kafka's 8 MiB metadata batch less room for other growth): POLICY_VIOLATION, the same message with the
  sizes.
- DeleteAcls removes at most 10,000 ACLs: the filter whose matches would pass that is answered
  UNKNOWN_SERVER_ERROR "Cannot remove more than 10000 acls in a single delete operation." and removes none.

Pure functions over the request bodies; the counts add up in Python ints (no overflow) and stop as soon as
the bound is passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgpack

from protocol import controller_messages as cm
from protocol.errors import Errors

# The most one batch of the metadata log (``__cluster_metadata``) may hold: Kafka's 8 MiB.
METADATA_MAX_BATCH_BYTES = 8 * 1024 * 1024

# Kafka's QuorumController.MAX_RECORDS_PER_BATCH, and MAX_RECORDS_PER_USER_OP which equals it.
MAX_RECORDS_PER_BATCH = 10_000
MAX_RECORDS_PER_USER_OP = MAX_RECORDS_PER_BATCH
# Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH.
MAX_PARTITIONS_PER_BATCH = 10_000
# A quorum's controller writes its whole state as one record per decision (controller/quorum.py), so
# the state must fit one metadata batch: topics and partitions are not added past this, which leaves room
# for the state's other growth (registrations, pending deletions) below the batch limit.
METADATA_STATE_MAX_BYTES = METADATA_MAX_BATCH_BYTES - 512 * 1024

EXCESSIVE_PARTITIONS_ERROR = Errors.POLICY_VIOLATION
EXCESSIVE_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."
EXCESSIVE_BATCH_ERROR = Errors.POLICY_VIOLATION
EXCESSIVE_BATCH_MESSAGE = "Unable to perform excessively large batch operation."
EXCESSIVE_ACL_DELETE_ERROR = Errors.UNKNOWN_SERVER_ERROR
EXCESSIVE_ACL_DELETE_MESSAGE = (
    f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single delete operation."
)


def _requested_partitions(t: cm.CreateTopicsRequestTopic, default_num_partitions: int) -> int:
    """The partitions one CreateTopics topic asks for, as Kafka counts them: its manual assignments, else
    the default for -1, else a positive count (a non-positive one is refused later, counting nothing)."""
    if t.assignments:
        return len(t.assignments)
    if t.num_partitions == -1:
        return max(0, default_num_partitions)
    return max(0, t.num_partitions)


def create_topics_too_many_partitions(
    topics: Iterable[cm.CreateTopicsRequestTopic], default_num_partitions: int
) -> bool:
    """True if the topics ask for more than MAX_PARTITIONS_PER_BATCH partitions in all (Kafka's
    ``validateTotalNumberOfPartitions``)."""
    total = 0
    for t in topics:
        total += _requested_partitions(t, default_num_partitions)
        if total > MAX_PARTITIONS_PER_BATCH:
            return True
    return False


def create_partitions_too_many(
    topics: Iterable[cm.CreatePartitionsTopic], current_counts: Mapping[str, int]
) -> bool:
    """True if growing the topics would add more than MAX_PARTITIONS_PER_BATCH partitions in all. A topic
    not in ``current_counts`` (unknown) or not growing adds none (it is refused on its own)."""
    total = 0
    for t in topics:
        current = current_counts.get(t.name)
        if current is None or t.count <= current:
            continue
        total += t.count - current
        if total > MAX_PARTITIONS_PER_BATCH:
            return True
    return False


# The largest value of an epoch or partition index in a state record: estimates use it, so that they stay
# above what the partitions take however their epochs grow.
_INT32_MAX = 2**31 - 1


def new_partitions_bytes(count: int, replication_factor: int, broker_id_max: int) -> int:
    """An upper estimate of what ``count`` new partitions add to a state record (ClusterState.to_json)."""
    replicas = [broker_id_max] * max(1, replication_factor)
    sample = {
        "partition": _INT32_MAX,
        "replicas": replicas,
        "leader": broker_id_max,
        "leader_epoch": _INT32_MAX,
        "isr": replicas,
        "partition_epoch": _INT32_MAX,
        "controller_epoch": _INT32_MAX,
    }
    return count * len(msgpack.packb(sample))


def new_topic_bytes(name: str, configs: Mapping[str, str]) -> int:
    """What a new topic adds to a state record besides its partitions (an upper estimate)."""
    return len(msgpack.packb({"name": name, "configs": dict(configs), "partitions": []})) + 8


def state_too_large_message(projected_bytes: int) -> str:
    """The answer to a creation that would make a quorum's state record pass METADATA_STATE_MAX_BYTES."""
    return (
        f"{EXCESSIVE_BATCH_MESSAGE} The cluster's metadata would take {projected_bytes} bytes, more than the "
        f"{METADATA_STATE_MAX_BYTES} a metadata record may hold."
    )


def too_many_records(count: int) -> bool:
    """One user operation's records would not fit Kafka's bound."""
    return count > MAX_RECORDS_PER_USER_OP


__all__ = [
    "EXCESSIVE_ACL_DELETE_ERROR",
    "EXCESSIVE_ACL_DELETE_MESSAGE",
    "EXCESSIVE_BATCH_ERROR",
    "EXCESSIVE_BATCH_MESSAGE",
    "EXCESSIVE_PARTITIONS_ERROR",
    "EXCESSIVE_PARTITIONS_MESSAGE",
    "MAX_PARTITIONS_PER_BATCH",
    "MAX_RECORDS_PER_BATCH",
    "MAX_RECORDS_PER_USER_OP",
    "METADATA_MAX_BATCH_BYTES",
    "METADATA_STATE_MAX_BYTES",
    "create_partitions_too_many",
    "create_topics_too_many_partitions",
    "new_partitions_bytes",
    "new_topic_bytes",
    "state_too_large_message",
    "too_many_records",
]
