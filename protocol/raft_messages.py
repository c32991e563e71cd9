"""Bodies of the controller quorum's APIs (KIP-595), version 0, Kafka's JSON field names in snake_case.

Voters send them to each other on the controllers' listeners; the partition is always
``__cluster_metadata`` 0.

VOTE (52)
    ``{cluster_id, topics[{topic_name, partitions[{partition_index, candidate_epoch, candidate_id,
    last_offset_epoch, last_offset}]}]}`` -> ``{error_code, topics[{topic_name, partitions[{partition_index,
    error_code, leader_id, leader_epoch, vote_granted}]}]}``.
BEGIN_QUORUM_EPOCH (53)
    ``{cluster_id, topics[{topic_name, partitions[{partition_index, leader_id, leader_epoch}]}]}`` ->
    ``{error_code, topics[{topic_name, partitions[{partition_index, error_code, leader_id,
    leader_epoch}]}]}``.
END_QUORUM_EPOCH (54)
    as BEGIN_QUORUM_EPOCH, each partition with ``preferred_successors[]`` too; the same response.
FETCH (1), between voters
    ``{cluster_id, replica_id, max_wait_ms, min_bytes, max_bytes, topics[{topic, partitions[{partition,
    current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes}]}]}`` ->
    ``{throttle_time_ms, error_code, responses[{topic, partitions[{partition_index, error_code,
    high_watermark, log_start_offset, diverging_epoch{epoch, end_offset}, current_leader{leader_id,
    leader_epoch}, records}]}]}`` (FETCH v13's fields that KIP-595 added; the brokers' FETCH is unchanged).
DESCRIBE_QUORUM (55)
    ``{topics[{topic_name, partitions[{partition_index}]}]}`` -> ``{error_code, topics[{topic_name,
    partitions[{partition_index, error_code, leader_id, leader_epoch, high_watermark,
    current_voters[{replica_id, log_end_offset, last_fetch_timestamp, last_caught_up_timestamp}],
    observers[...]}]}], nodes[{node_id, listeners[{name, host, port}]}]}`` (``nodes``: every voter's
    address, as version 2 answers). Only the leader answers; another voter says NOT_LEADER_OR_FOLLOWER (6),
    names the leader it knows and lists ``nodes`` too, so a client can go to the leader. Timestamps are
    wall-clock ms (-1: never); the leader describes itself as of now.

Error codes: FENCED_LEADER_EPOCH (74) for an older epoch, UNKNOWN_LEADER_EPOCH (75) for a newer one,
NOT_LEADER_OR_FOLLOWER (6), INCONSISTENT_VOTER_SET (94) from a non-voter, INCONSISTENT_CLUSTER_ID (104).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.api_keys import ApiKeys
from protocol.schema import Int16, Int32, Int64

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0

# ----------------------------------------------------------------------------------------------- VOTE (52)


@dataclass(slots=True, kw_only=True)
class VoteRequestPartition:
    partition_index: Int32 = 0
    candidate_epoch: Int32
    candidate_id: Int32
    last_offset_epoch: Int32
    last_offset: Int64


@dataclass(slots=True, kw_only=True)
class VoteRequestTopic:
    topic_name: str = METADATA_TOPIC
    partitions: list[VoteRequestPartition]


@dataclass(slots=True, kw_only=True)
class VoteRequest:
    cluster_id: str | None = None
    topics: list[VoteRequestTopic]


@dataclass(slots=True, kw_only=True)
class VoteResponsePartition:
    partition_index: Int32 = 0
    error_code: Int16 = 0
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1
    vote_granted: bool = False


@dataclass(slots=True, kw_only=True)
class VoteResponseTopic:
    topic_name: str = METADATA_TOPIC
    partitions: list[VoteResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class VoteResponse:
    error_code: Int16 = 0
    topics: list[VoteResponseTopic] = field(default_factory=list)


# ------------------------------------------------------------------------- BEGIN / END_QUORUM_EPOCH (53, 54)


@dataclass(slots=True, kw_only=True)
class BeginQuorumEpochRequestPartition:
    partition_index: Int32 = 0
    leader_id: Int32
    leader_epoch: Int32


@dataclass(slots=True, kw_only=True)
class BeginQuorumEpochRequestTopic:
    topic_name: str = METADATA_TOPIC
    partitions: list[BeginQuorumEpochRequestPartition]


@dataclass(slots=True, kw_only=True)
class BeginQuorumEpochRequest:
    cluster_id: str | None = None
    topics: list[BeginQuorumEpochRequestTopic]


@dataclass(slots=True, kw_only=True)
class EndQuorumEpochRequestPartition:
    partition_index: Int32 = 0
    leader_id: Int32
    leader_epoch: Int32
    preferred_successors: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class EndQuorumEpochRequestTopic:
    topic_name: str = METADATA_TOPIC
    partitions: list[EndQuorumEpochRequestPartition]


@dataclass(slots=True, kw_only=True)
class EndQuorumEpochRequest:
    cluster_id: str | None = None
    topics: list[EndQuorumEpochRequestTopic]


@dataclass(slots=True, kw_only=True)
class QuorumEpochResponsePartition:
    partition_index: Int32 = 0
    error_code: Int16 = 0
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1


@dataclass(slots=True, kw_only=True)
class QuorumEpochResponseTopic:
    topic_name: str = METADATA_TOPIC
    partitions: list[QuorumEpochResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class BeginQuorumEpochResponse:
    error_code: Int16 = 0
    topics: list[QuorumEpochResponseTopic] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class EndQuorumEpochResponse(BeginQuorumEpochResponse):
    """The same fields as BEGIN_QUORUM_EPOCH's."""


# ------------------------------------------------------------------------------------ FETCH (1), voters


@dataclass(slots=True, kw_only=True)
class RaftFetchRequestPartition:
    partition: Int32 = 0
    current_leader_epoch: Int32
    fetch_offset: Int64
    last_fetched_epoch: Int32
    log_start_offset: Int64 = -1
    partition_max_bytes: Int32 = 8 * 1024 * 1024


@dataclass(slots=True, kw_only=True)
class RaftFetchRequestTopic:
    topic: str = METADATA_TOPIC
    partitions: list[RaftFetchRequestPartition]


@dataclass(slots=True, kw_only=True)
class RaftFetchRequest:
    cluster_id: str | None = None
    replica_id: Int32
    max_wait_ms: Int32 = 0
    min_bytes: Int32 = 0
    max_bytes: Int32 = 0x7FFFFFFF
    topics: list[RaftFetchRequestTopic]


@dataclass(slots=True, kw_only=True)
class DivergingEpoch:
    epoch: Int32 = -1
    end_offset: Int64 = -1


@dataclass(slots=True, kw_only=True)
class CurrentLeader:
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1


@dataclass(slots=True, kw_only=True)
class RaftFetchResponsePartition:
    partition_index: Int32 = 0
    error_code: Int16 = 0
    high_watermark: Int64 = -1
    log_start_offset: Int64 = -1
    diverging_epoch: DivergingEpoch | None = None
    current_leader: CurrentLeader = field(default_factory=CurrentLeader)
    records: bytes = b""


@dataclass(slots=True, kw_only=True)
class RaftFetchResponseTopic:
    topic: str = METADATA_TOPIC
    partitions: list[RaftFetchResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class RaftFetchResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    responses: list[RaftFetchResponseTopic] = field(default_factory=list)


# -------------------------------------------------------------------------------------- DESCRIBE_QUORUM (55)


@dataclass(slots=True, kw_only=True)
class DescribeQuorumRequestPartition:
    partition_index: Int32 = 0


@dataclass(slots=True, kw_only=True)
class DescribeQuorumRequestTopic:
    topic_name: str = METADATA_TOPIC
    partitions: list[DescribeQuorumRequestPartition] = field(
        default_factory=lambda: [DescribeQuorumRequestPartition()]
    )


@dataclass(slots=True, kw_only=True)
class DescribeQuorumRequest:
    topics: list[DescribeQuorumRequestTopic] = field(default_factory=lambda: [DescribeQuorumRequestTopic()])


@dataclass(slots=True, kw_only=True)
class ReplicaStateDescription:
    replica_id: Int32
    log_end_offset: Int64 = -1
    last_fetch_timestamp: Int64 = -1
    last_caught_up_timestamp: Int64 = -1


@dataclass(slots=True, kw_only=True)
class DescribeQuorumResponsePartition:
    partition_index: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1
    high_watermark: Int64 = -1
    current_voters: list[ReplicaStateDescription] = field(default_factory=list)
    observers: list[ReplicaStateDescription] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeQuorumResponseTopic:
    topic_name: str = METADATA_TOPIC
    partitions: list[DescribeQuorumResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeQuorumResponseListener:
    name: str
    host: str
    port: Int32


@dataclass(slots=True, kw_only=True)
class DescribeQuorumResponseNode:
    node_id: Int32
    listeners: list[DescribeQuorumResponseListener] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeQuorumResponse:
    error_code: Int16 = 0
    error_message: str | None = None
    topics: list[DescribeQuorumResponseTopic] = field(default_factory=list)
    nodes: list[DescribeQuorumResponseNode] = field(default_factory=list)


RAFT_REQUEST_TYPES: dict[ApiKeys, type] = {
    ApiKeys.VOTE: VoteRequest,
    ApiKeys.BEGIN_QUORUM_EPOCH: BeginQuorumEpochRequest,
    ApiKeys.END_QUORUM_EPOCH: EndQuorumEpochRequest,
    ApiKeys.DESCRIBE_QUORUM: DescribeQuorumRequest,
    ApiKeys.FETCH: RaftFetchRequest,
}
RAFT_RESPONSE_TYPES: dict[ApiKeys, type] = {
    ApiKeys.VOTE: VoteResponse,
    ApiKeys.BEGIN_QUORUM_EPOCH: BeginQuorumEpochResponse,
    ApiKeys.END_QUORUM_EPOCH: EndQuorumEpochResponse,
    ApiKeys.DESCRIBE_QUORUM: DescribeQuorumResponse,
    ApiKeys.FETCH: RaftFetchResponse,
}
