"""Bodies of Kafka's partition admin APIs (docs/protocol.md), Kafka's field names in snake_case:

ELECT_LEADERS (43)
    ``{election_type (0 preferred, 1 unclean), topic_partitions[{topic, partitions[int]}] | null (every
    partition), timeout_ms}`` -> ``{throttle_time_ms, error_code, replica_election_results[{topic,
    partition_result[{partition_id, error_code, error_message}]}]}``. Forwarded to the controller.
DESCRIBE_LOG_DIRS (35)
    ``{topics[{topic, partitions[int]}] | null (every partition)}`` -> ``{throttle_time_ms, error_code,
    results[{error_code, log_dir, topics[{name, partitions[{partition_index, partition_size, offset_lag,
    is_future_key}]}], total_bytes, usable_bytes}]}``. Answered by the broker asked, of its own log dir.
ALTER_PARTITION_REASSIGNMENTS (45)
    ``{timeout_ms, allow_replication_factor_change, topics[{name, partitions[{partition_index, replicas |
    null (cancel)}]}]}`` -> ``{throttle_time_ms, error_code, error_message, responses[{name,
    partitions[{partition_index, error_code, error_message}]}]}``. Forwarded to the controller.
LIST_PARTITION_REASSIGNMENTS (46)
    ``{timeout_ms, topics[{name, partition_indexes}] | null (all)}`` -> ``{throttle_time_ms, error_code,
    error_message, topics[{name, partitions[{partition_index, replicas, adding_replicas,
    removing_replicas}]}]}``. Forwarded to the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int8, Int16, Int32, Int64

NON_NEGATIVE = {"min": 0}

# Kafka's ElectionType.
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1

# --------------------------------------------------------------------------------- ELECT_LEADERS (43)


@dataclass(slots=True, kw_only=True)
class ElectLeadersTopicPartitions:
    topic: str
    partitions: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ElectLeadersRequest:
    election_type: Int8 = field(default=ELECTION_PREFERRED, metadata={"min": 0, "max": 1})
    topic_partitions: list[ElectLeadersTopicPartitions] | None = None
    timeout_ms: Int32 = field(default=60000, metadata=NON_NEGATIVE)


@dataclass(slots=True, kw_only=True)
class ElectLeadersPartitionResult:
    partition_id: Int32
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class ElectLeadersReplicaElectionResult:
    topic: str
    partition_result: list[ElectLeadersPartitionResult] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ElectLeadersResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    replica_election_results: list[ElectLeadersReplicaElectionResult] = field(default_factory=list)


# --------------------------------------------------------------------------------- DESCRIBE_LOG_DIRS (35)


@dataclass(slots=True, kw_only=True)
class DescribableLogDirTopic:
    topic: str
    partitions: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeLogDirsRequest:
    topics: list[DescribableLogDirTopic] | None = None


@dataclass(slots=True, kw_only=True)
class DescribeLogDirsPartition:
    partition_index: Int32
    partition_size: Int64 = 0
    offset_lag: Int64 = 0
    is_future_key: bool = False


@dataclass(slots=True, kw_only=True)
class DescribeLogDirsTopic:
    name: str
    partitions: list[DescribeLogDirsPartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeLogDirsResult:
    error_code: Int16 = 0
    log_dir: str
    topics: list[DescribeLogDirsTopic] = field(default_factory=list)
    total_bytes: Int64 = -1
    usable_bytes: Int64 = -1


@dataclass(slots=True, kw_only=True)
class DescribeLogDirsResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    results: list[DescribeLogDirsResult] = field(default_factory=list)


# ------------------------------------------------------------------- ALTER_PARTITION_REASSIGNMENTS (45)


@dataclass(slots=True, kw_only=True)
class ReassignablePartition:
    partition_index: Int32
    # None: cancel the partition's ongoing reassignment
    replicas: list[Int32] | None = None


@dataclass(slots=True, kw_only=True)
class ReassignableTopic:
    name: str
    partitions: list[ReassignablePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AlterPartitionReassignmentsRequest:
    timeout_ms: Int32 = field(default=60000, metadata=NON_NEGATIVE)
    allow_replication_factor_change: bool = True
    topics: list[ReassignableTopic] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ReassignablePartitionResponse:
    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class ReassignableTopicResponse:
    name: str
    partitions: list[ReassignablePartitionResponse] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AlterPartitionReassignmentsResponse:
    throttle_time_ms: Int32 = 0
    allow_replication_factor_change: bool = True
    error_code: Int16 = 0
    error_message: str | None = None
    responses: list[ReassignableTopicResponse] = field(default_factory=list)


# -------------------------------------------------------------------- LIST_PARTITION_REASSIGNMENTS (46)


@dataclass(slots=True, kw_only=True)
class ListPartitionReassignmentsTopics:
    name: str
    partition_indexes: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ListPartitionReassignmentsRequest:
    timeout_ms: Int32 = field(default=60000, metadata=NON_NEGATIVE)
    topics: list[ListPartitionReassignmentsTopics] | None = None


@dataclass(slots=True, kw_only=True)
class OngoingPartitionReassignment:
    partition_index: Int32
    replicas: list[Int32] = field(default_factory=list)
    adding_replicas: list[Int32] = field(default_factory=list)
    removing_replicas: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class OngoingTopicReassignment:
    name: str
    partitions: list[OngoingPartitionReassignment] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ListPartitionReassignmentsResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    topics: list[OngoingTopicReassignment] = field(default_factory=list)


__all__ = [
    "ELECTION_PREFERRED",
    "ELECTION_UNCLEAN",
    "AlterPartitionReassignmentsRequest",
    "AlterPartitionReassignmentsResponse",
    "DescribableLogDirTopic",
    "DescribeLogDirsPartition",
    "DescribeLogDirsRequest",
    "DescribeLogDirsResponse",
    "DescribeLogDirsResult",
    "DescribeLogDirsTopic",
    "ElectLeadersPartitionResult",
    "ElectLeadersReplicaElectionResult",
    "ElectLeadersRequest",
    "ElectLeadersResponse",
    "ElectLeadersTopicPartitions",
    "ListPartitionReassignmentsRequest",
    "ListPartitionReassignmentsResponse",
    "ListPartitionReassignmentsTopics",
    "OngoingPartitionReassignment",
    "OngoingTopicReassignment",
    "ReassignablePartition",
    "ReassignablePartitionResponse",
    "ReassignableTopic",
    "ReassignableTopicResponse",
]
