"""Bodies of Kafka's partition admin APIs (docs/protocol.md), Kafka's field names in snake_case:

ELECT_LEADERS (43)
    ``{election_type (0 preferred, 1 unclean), topic_partitions[{topic, partitions[int]}] | null (every
    partition), timeout_ms}`` -> ``{throttle_time_ms, error_code, replica_election_results[{topic,
    partition_result[{partition_id, error_code, error_message}]}]}``. Forwarded to the controller.
DESCRIBE_LOG_DIRS (35)
    ``{topics[{topic, partitions[int]}] | null (every partition)}`` -> ``{throttle_time_ms, error_code,
    results[{error_code, log_dir, topics[{name, partitions[{partition_index, partition_size, offset_lag,
    is_future_key}]}], total_bytes, usable_bytes}]}``. Answered by the broker asked, of its own log dir.
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


__all__ = [
    "ELECTION_PREFERRED",
    "ELECTION_UNCLEAN",
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
]
