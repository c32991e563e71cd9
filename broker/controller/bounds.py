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
- DeleteAcls removes at most 10,000 ACLs: the filter whose matches would pass that is answered
  UNKNOWN_SERVER_ERROR "Cannot remove more than 10000 acls in a single delete operation." and removes none.

Pure functions over the request bodies; the counts add up in Python ints (no overflow) and stop as soon as
the bound is passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from protocol import controller_messages as cm
from protocol.errors import Errors

# Kafka's QuorumController.MAX_RECORDS_PER_BATCH, and MAX_RECORDS_PER_USER_OP which equals it.
MAX_RECORDS_PER_BATCH = 10_000
MAX_RECORDS_PER_USER_OP = MAX_RECORDS_PER_BATCH
# Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH.
MAX_PARTITIONS_PER_BATCH = 10_000

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
    "create_partitions_too_many",
    "create_topics_too_many_partitions",
    "too_many_records",
]
