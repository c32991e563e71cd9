"""Request and response bodies of every API (docs/protocol.md), one dataclass each, checked by
``protocol.schema``.

Field names are Kafka's JSON-schema names in snake_case. Nested arrays are nested dataclasses named
``<Api>Request<Thing>`` / ``<Api>Response<Thing>``. Fields that Kafka added after version 0 of its own
schemas (or that have an obvious "unset" value) have Kafka's default and may be omitted by a sender.

Only values that can never be valid are constrained here (negative sizes, timeouts and partition indexes,
unknown isolation levels). Values Kafka answers with a specific error code reach the broker unchanged:
``acks`` (INVALID_REQUIRED_ACKS), ``fetch_offset`` (OFFSET_OUT_OF_RANGE), leader epochs (FENCED / UNKNOWN
LEADER_EPOCH), session ids and epochs (FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH).

This module holds the client-facing and replication APIs; the controller's APIs are in
``protocol.controller_messages`` and re-exported here. Which body belongs to which API, and the versions
served, are in ``protocol.api_specs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.controller_messages import *  # noqa: F403  (re-exported: one module to import from)
from protocol.schema import Int8, Int16, Int32, Int64

NON_NEGATIVE = {"min": 0}
ISOLATION_LEVELS = {"choices": (0, 1)}  # READ_UNCOMMITTED, READ_COMMITTED

# ------------------------------------------------------------------------------------------- PRODUCE (0)


@dataclass(slots=True, kw_only=True)
class ProduceRequestPartition:
    index: Int32 = field(metadata=NON_NEGATIVE)
    records: bytes


@dataclass(slots=True, kw_only=True)
class ProduceRequestTopic:
    name: str
    partition_data: list[ProduceRequestPartition]


@dataclass(slots=True, kw_only=True)
class ProduceRequest:
    """acks is -1, 0 or 1; anything else is answered with INVALID_REQUIRED_ACKS, so it is not checked here.
    With acks=0 no response is sent."""

    transactional_id: str | None = None
    acks: Int16
    timeout_ms: Int32 = field(metadata=NON_NEGATIVE)
    topic_data: list[ProduceRequestTopic]


@dataclass(slots=True, kw_only=True)
class ProduceResponseRecordError:
    """Kafka's ``BatchIndexAndErrorMessage``: a record that made the leader refuse its batch."""

    batch_index: Int32
    batch_index_error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class ProduceResponsePartition:
    index: Int32
    error_code: Int16 = 0
    base_offset: Int64 = -1
    log_append_time_ms: Int64 = -1
    log_start_offset: Int64 = -1
    record_errors: list[ProduceResponseRecordError] = field(default_factory=list)
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class ProduceResponseTopic:
    name: str
    partition_responses: list[ProduceResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ProduceResponse:
    responses: list[ProduceResponseTopic] = field(default_factory=list)
    throttle_time_ms: Int32 = 0


# --------------------------------------------------------------------------------------------- FETCH (1)


@dataclass(slots=True, kw_only=True)
class FetchRequestPartition:
    partition: Int32 = field(metadata=NON_NEGATIVE)
    current_leader_epoch: Int32 = -1
    fetch_offset: Int64
    log_start_offset: Int64 = -1
    partition_max_bytes: Int32 = field(metadata=NON_NEGATIVE)
    # Kafka's lastFetchedEpoch (Fetch v12+, KIP-595/KIP-320 style): the epoch of the last record the fetcher
    # has, checked against this log's epochs before reading (-1: none, no check).
    last_fetched_epoch: Int32 = -1


@dataclass(slots=True, kw_only=True)
class FetchRequestTopic:
    topic: str
    partitions: list[FetchRequestPartition]


@dataclass(slots=True, kw_only=True)
class FetchRequestForgottenTopic:
    topic: str
    partitions: list[Int32] = field(metadata=NON_NEGATIVE)


@dataclass(slots=True, kw_only=True)
class FetchRequest:
    """replica_id -1 for consumers, the follower's broker id for replication. session_id 0 with
    session_epoch -1 is a sessionless fetch; epoch 0 opens a session; later epochs are incremental."""

    replica_id: Int32
    max_wait_ms: Int32 = field(metadata=NON_NEGATIVE)
    min_bytes: Int32 = field(metadata=NON_NEGATIVE)
    max_bytes: Int32 = field(default=0x7FFFFFFF, metadata=NON_NEGATIVE)
    isolation_level: Int8 = field(default=0, metadata=ISOLATION_LEVELS)
    session_id: Int32 = 0
    session_epoch: Int32 = -1
    topics: list[FetchRequestTopic]
    forgotten_topics_data: list[FetchRequestForgottenTopic] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class FetchResponseEpochEndOffset:
    """Where the fetcher's log diverges from the leader's (Kafka's ``EpochEndOffset`` of a FETCH answer):
    the largest epoch of the leader's log not above the fetcher's ``last_fetched_epoch``, and its end."""

    epoch: Int32 = -1
    end_offset: Int64 = -1


@dataclass(slots=True, kw_only=True)
class FetchResponseAbortedTransaction:
    """An aborted transaction whose records a read_committed consumer drops (Kafka's Fetch v4+)."""

    producer_id: Int64
    first_offset: Int64


@dataclass(slots=True, kw_only=True)
class FetchResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0
    high_watermark: Int64 = -1
    last_stable_offset: Int64 = -1
    log_start_offset: Int64 = -1
    # read_committed: the aborted transactions overlapping ``records``; None (null) for read_uncommitted.
    aborted_transactions: list[FetchResponseAbortedTransaction] | None = None
    records: bytes = b""
    # Set only when the fetch named a last_fetched_epoch that diverges from this log (no records then).
    diverging_epoch: FetchResponseEpochEndOffset | None = None


@dataclass(slots=True, kw_only=True)
class FetchResponseTopic:
    topic: str
    partitions: list[FetchResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class FetchResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    session_id: Int32 = 0
    responses: list[FetchResponseTopic] = field(default_factory=list)


# -------------------------------------------------------------------------------------- LIST_OFFSETS (2)


@dataclass(slots=True, kw_only=True)
class ListOffsetsRequestPartition:
    partition_index: Int32 = field(metadata=NON_NEGATIVE)
    current_leader_epoch: Int32 = -1
    timestamp: Int64  # -1 latest, -2 earliest


@dataclass(slots=True, kw_only=True)
class ListOffsetsRequestTopic:
    name: str
    partitions: list[ListOffsetsRequestPartition]


@dataclass(slots=True, kw_only=True)
class ListOffsetsRequest:
    """replica_id -1 consumer (latest = HW), -2 debug (latest = LEO, any replica answers), >=0 broker."""

    replica_id: Int32
    isolation_level: Int8 = field(default=0, metadata=ISOLATION_LEVELS)
    topics: list[ListOffsetsRequestTopic]


@dataclass(slots=True, kw_only=True)
class ListOffsetsResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0
    timestamp: Int64 = -1
    offset: Int64 = -1
    leader_epoch: Int32 = -1


@dataclass(slots=True, kw_only=True)
class ListOffsetsResponseTopic:
    name: str
    partitions: list[ListOffsetsResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ListOffsetsResponse:
    topics: list[ListOffsetsResponseTopic] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ METADATA (3)


@dataclass(slots=True, kw_only=True)
class MetadataRequestTopic:
    name: str


@dataclass(slots=True, kw_only=True)
class MetadataRequest:
    """topics nil means all topics; an empty list means none. allow_auto_topic_creation (Kafka's, from
    version 4 of its encoding): an unknown topic named here may be created (``auto.create.topics.enable``)."""

    topics: list[MetadataRequestTopic] | None = None
    allow_auto_topic_creation: bool = True
    # Kafka's (v8+; the cluster's v8-10): the answer then carries the principal's authorized operations
    include_cluster_authorized_operations: bool = False
    include_topic_authorized_operations: bool = False


@dataclass(slots=True, kw_only=True)
class MetadataResponseBroker:
    node_id: Int32
    host: str
    port: Int32


@dataclass(slots=True, kw_only=True)
class MetadataResponsePartition:
    error_code: Int16 = 0
    partition_index: Int32
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1
    replica_nodes: list[Int32] = field(default_factory=list)
    isr_nodes: list[Int32] = field(default_factory=list)
    offline_replicas: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class MetadataResponseTopic:
    error_code: Int16 = 0
    name: str
    partitions: list[MetadataResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class MetadataResponse:
    brokers: list[MetadataResponseBroker] = field(default_factory=list)
    controller_id: Int32 = -1
    topics: list[MetadataResponseTopic] = field(default_factory=list)


# -------------------------------------------------------------------------------------- API_VERSIONS (18)


@dataclass(slots=True, kw_only=True)
class ApiVersionsRequest:
    pass


@dataclass(slots=True, kw_only=True)
class ApiVersionsResponseApiKey:
    api_key: Int16
    min_version: Int16
    max_version: Int16


@dataclass(slots=True, kw_only=True)
class ApiVersionsResponse:
    error_code: Int16 = 0
    api_keys: list[ApiVersionsResponseApiKey] = field(default_factory=list)


# --------------------------------------------------------------------------- OFFSET_FOR_LEADER_EPOCH (23)


@dataclass(slots=True, kw_only=True)
class OffsetForLeaderEpochRequestPartition:
    partition: Int32 = field(metadata=NON_NEGATIVE)
    current_leader_epoch: Int32 = -1
    leader_epoch: Int32


@dataclass(slots=True, kw_only=True)
class OffsetForLeaderEpochRequestTopic:
    topic: str
    partitions: list[OffsetForLeaderEpochRequestPartition]


@dataclass(slots=True, kw_only=True)
class OffsetForLeaderEpochRequest:
    """replica_id: the follower's broker id, -1 for a consumer, -2 (Kafka's default) for debugging."""

    replica_id: Int32 = -2
    topics: list[OffsetForLeaderEpochRequestTopic]


@dataclass(slots=True, kw_only=True)
class OffsetForLeaderEpochResponsePartition:
    error_code: Int16 = 0
    partition: Int32
    leader_epoch: Int32 = -1
    end_offset: Int64 = -1


@dataclass(slots=True, kw_only=True)
class OffsetForLeaderEpochResponseTopic:
    topic: str
    partitions: list[OffsetForLeaderEpochResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class OffsetForLeaderEpochResponse:
    throttle_time_ms: Int32 = 0
    topics: list[OffsetForLeaderEpochResponseTopic] = field(default_factory=list)


# ---------------------------------------------------------------- DESCRIBE_REPLICA_STATE (1000, isrsim)

REPLICA_ROLES = ("leader", "follower", "none")
FETCH_STATES = ("truncating", "fetching", "delayed", "failed")


@dataclass(slots=True, kw_only=True)
class DescribeReplicaStateRequestTopic:
    name: str


@dataclass(slots=True, kw_only=True)
class DescribeReplicaStateRequest:
    """topics nil means every partition this broker hosts."""

    topics: list[DescribeReplicaStateRequestTopic] | None = None


@dataclass(slots=True, kw_only=True)
class DescribeReplicaStateResponseFollower:
    broker_id: Int32
    log_end_offset: Int64 = -1
    last_caught_up_ms: Int64 = -1


@dataclass(slots=True, kw_only=True)
class DescribeReplicaStateResponseFetchState:
    state: str = field(metadata={"choices": FETCH_STATES})
    fetch_offset: Int64 = -1
    lag: Int64 = -1


@dataclass(slots=True, kw_only=True)
class DescribeReplicaStateResponsePartition:
    """followers is filled on a leader; fetch_state on a follower (nil elsewhere)."""

    topic: str
    partition: Int32
    role: str = field(metadata={"choices": REPLICA_ROLES})
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1
    log_start_offset: Int64 = -1
    log_end_offset: Int64 = -1
    high_watermark: Int64 = -1
    isr: list[Int32] = field(default_factory=list)
    followers: list[DescribeReplicaStateResponseFollower] = field(default_factory=list)
    fetch_state: DescribeReplicaStateResponseFetchState | None = None


@dataclass(slots=True, kw_only=True)
class DescribeReplicaStateResponseFetchSessions:
    count: Int32 = 0
    partitions_cached: Int32 = 0
    evictions: Int64 = 0


@dataclass(slots=True, kw_only=True)
class DescribeReplicaStateResponse:
    error_code: Int16 = 0
    broker_id: Int32 = -1
    partitions: list[DescribeReplicaStateResponsePartition] = field(default_factory=list)
    fetch_sessions: DescribeReplicaStateResponseFetchSessions = field(
        default_factory=DescribeReplicaStateResponseFetchSessions
    )
    # The broker's replication.truncation.mode (docs/truncation-modes.md).
    truncation_mode: str = "leader-epoch"
    # Kafka's BrokerState (the KafkaServer BrokerState metric) by name: STARTING until the controller has
    # registered the broker, RECOVERY while it keeps it fenced, RUNNING once unfenced,
    # PENDING_CONTROLLED_SHUTDOWN / SHUTTING_DOWN while it stops.
    broker_state: str = "RUNNING"
