"""Bodies of the controller's APIs: controller -> broker (LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA,
docs/protocol.md) and the project's designs for the rest, after Kafka's KRaft-era schemas where Kafka has
them.

All are version 0. Error codes are Kafka's (``protocol.errors.Errors``).

CONTROLLED_SHUTDOWN (7), broker -> controller
    ``{broker_id, broker_epoch}`` -> ``{error_code, remaining_partitions[{topic_name, partition_index}]}``.
    The controller moves leadership away; ``remaining_partitions`` lists what is still led by the broker
    (empty once it may stop). STALE_BROKER_EPOCH (77) for another epoch (-1: not checked),
    BROKER_ID_NOT_REGISTERED (102).
CREATE_TOPICS (19), client -> controller
    ``{topics[{name, num_partitions, replication_factor, configs: {str: str}}], timeout_ms}`` ->
    ``{topics[{name, error_code, error_message}]}``. INVALID_TOPIC_EXCEPTION (17), TOPIC_ALREADY_EXISTS
    (36), INVALID_PARTITIONS (37), INVALID_REPLICATION_FACTOR (38), INVALID_CONFIG (40), INVALID_REQUEST
    (42) for a name given twice. Answered once the replicas acknowledged their LEADER_AND_ISR, or at
    ``timeout_ms``.
DELETE_TOPICS (20), client -> controller
    ``{topic_names[], timeout_ms}`` -> ``{responses[{name, error_code, error_message}]}``.
    UNKNOWN_TOPIC_OR_PARTITION (3).
CREATE_PARTITIONS (37), client -> controller (Kafka's)
    ``{topics[{name, count, assignments: nil | [{broker_ids[]}]}], timeout_ms, validate_only}`` ->
    ``{throttle_time_ms, results[{name, error_code, error_message}]}``. UNKNOWN_TOPIC_OR_PARTITION (3),
    INVALID_PARTITIONS (37) for a count that is not an increase, INVALID_REPLICATION_FACTOR (38),
    INVALID_REPLICA_ASSIGNMENT (39), INVALID_REQUEST (42) for a name given twice.
DELETE_RECORDS (21), client -> partition leader (Kafka's)
    ``{topics[{name, partitions[{partition_index, offset}]}], timeout_ms}`` ->
    ``{throttle_time_ms, topics[{name, partitions[{partition_index, low_watermark, error_code}]}]}``;
    ``offset`` -1 means the high watermark.
ALTER_PARTITION (56), partition leader -> controller
    ``{broker_id, broker_epoch, topics[{topic_name, partitions[{partition_index, leader_epoch, new_isr[],
    partition_epoch}]}]}`` -> ``{error_code, topics[{topic_name, partitions[{partition_index, error_code,
    leader_id, leader_epoch, isr[], partition_epoch}]}]}``. The response carries the partition state the
    controller committed (or holds, on error: FENCED_LEADER_EPOCH for an older leader epoch,
    NOT_CONTROLLER for a newer leader or partition epoch, INVALID_REQUEST when the sender is not the leader
    or the ISR is not a set of replicas including the leader, INVALID_UPDATE_VERSION (95) for a stale
    partition_epoch, INELIGIBLE_REPLICA (107) when a member is fenced, shutting down or unknown,
    UNKNOWN_TOPIC_OR_PARTITION). A wrong broker epoch fails the whole request with STALE_BROKER_EPOCH.
DESCRIBE_CLUSTER (60), anyone -> controller
    ``{}`` -> ``{error_code, error_message, cluster_id, controller_id, brokers[{broker_id, host, port,
    fenced}]}``.
BROKER_REGISTRATION (62), broker -> controller
    ``{broker_id, cluster_id, incarnation_id, listeners[{name, host, port}]}`` -> ``{error_code,
    broker_epoch}``. Every registration gets a new broker epoch and starts fenced (the first heartbeat
    unfences it). A registration for a broker id that is live is taken as a restart (Kafka's "bounced
    broker"): the old registration is fenced first. INCONSISTENT_CLUSTER_ID (104).
BROKER_HEARTBEAT (63), broker -> controller
    ``{broker_id, broker_epoch, current_metadata_offset, want_fence, want_shut_down}`` -> ``{error_code,
    is_caught_up, is_fenced, should_shut_down}``. A heartbeat unfences a fenced broker; ``want_fence`` fences
    it; ``want_shut_down`` runs a controlled shutdown and, once no replicated leadership remains, answers
    ``should_shut_down`` and fences the broker. BROKER_ID_NOT_REGISTERED (102), STALE_BROKER_EPOCH (77).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int8, Int16, Int32, Int64
from protocol.security_messages import UpdateMetadataSecurity

NON_NEGATIVE = {"min": 0}

# ------------------------------------------------------------------------------------ LEADER_AND_ISR (4)


@dataclass(slots=True, kw_only=True)
class LeaderAndIsrRequestPartitionState:
    partition_index: Int32 = field(metadata=NON_NEGATIVE)
    controller_epoch: Int32
    leader: Int32
    leader_epoch: Int32
    isr: list[Int32]
    partition_epoch: Int32 = 0
    replicas: list[Int32]
    is_new: bool = False


@dataclass(slots=True, kw_only=True)
class LeaderAndIsrRequestTopicState:
    topic_name: str
    partition_states: list[LeaderAndIsrRequestPartitionState]


@dataclass(slots=True, kw_only=True)
class LeaderAndIsrRequestLiveLeader:
    broker_id: Int32
    host_name: str
    port: Int32


@dataclass(slots=True, kw_only=True)
class LeaderAndIsrRequest:
    controller_id: Int32
    controller_epoch: Int32
    broker_epoch: Int64 = -1
    topic_states: list[LeaderAndIsrRequestTopicState]
    live_leaders: list[LeaderAndIsrRequestLiveLeader] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class LeaderAndIsrResponsePartitionError:
    topic_name: str
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class LeaderAndIsrResponse:
    error_code: Int16 = 0
    partition_errors: list[LeaderAndIsrResponsePartitionError] = field(default_factory=list)


# -------------------------------------------------------------------------------------- STOP_REPLICA (5)


@dataclass(slots=True, kw_only=True)
class StopReplicaRequestPartitionState:
    partition_index: Int32 = field(metadata=NON_NEGATIVE)
    leader_epoch: Int32 = -1
    delete_partition: bool = False


@dataclass(slots=True, kw_only=True)
class StopReplicaRequestTopicState:
    topic_name: str
    partition_states: list[StopReplicaRequestPartitionState]


@dataclass(slots=True, kw_only=True)
class StopReplicaRequest:
    controller_id: Int32
    controller_epoch: Int32
    broker_epoch: Int64 = -1
    topic_states: list[StopReplicaRequestTopicState]


@dataclass(slots=True, kw_only=True)
class StopReplicaResponsePartitionError:
    topic_name: str
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class StopReplicaResponse:
    error_code: Int16 = 0
    partition_errors: list[StopReplicaResponsePartitionError] = field(default_factory=list)


# ---------------------------------------------------------------------------------- UPDATE_METADATA (6)


@dataclass(slots=True, kw_only=True)
class UpdateMetadataRequestPartitionState:
    partition_index: Int32 = field(metadata=NON_NEGATIVE)
    controller_epoch: Int32
    leader: Int32
    leader_epoch: Int32
    isr: list[Int32]
    replicas: list[Int32]
    offline_replicas: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class UpdateMetadataRequestTopicState:
    topic_name: str
    partition_states: list[UpdateMetadataRequestPartitionState]
    # isrsim: the topic's own configs (its overrides of the brokers' defaults), so that a change made with
    # AlterConfigs / IncrementalAlterConfigs reaches the brokers hosting it (None: not carried).
    configs: dict[str, str] | None = None


@dataclass(slots=True, kw_only=True)
class UpdateMetadataRequestEndpoint:
    """One of a live broker's listeners (Kafka's UpdateMetadataEndpoint, without security_protocol)."""

    listener: str
    host: str
    port: Int32 = field(metadata={"min": 0, "max": 65535})


@dataclass(slots=True, kw_only=True)
class UpdateMetadataRequestBroker:
    """``host``/``port``: the inter-broker address; ``endpoints`` (optional): every advertised listener."""

    id: Int32
    host: str
    port: Int32
    endpoints: list[UpdateMetadataRequestEndpoint] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class UpdateMetadataRequestBrokerConfigs:
    """Dynamic broker configs of a BROKER resource: ``resource_name`` "" for every broker, or one's id."""

    resource_name: str
    configs: dict[str, str]


@dataclass(slots=True, kw_only=True)
class UpdateMetadataRequest:
    controller_id: Int32
    controller_epoch: Int32
    broker_epoch: Int64 = -1
    topic_states: list[UpdateMetadataRequestTopicState]
    live_brokers: list[UpdateMetadataRequestBroker]
    # isrsim: the cluster's ACLs and SCRAM credentials, once the controller has any (docs/protocol.md).
    security: UpdateMetadataSecurity | None = None
    # isrsim: every dynamic broker config the controller holds (None: not carried, an unmanaged broker's).
    broker_configs: list[UpdateMetadataRequestBrokerConfigs] | None = None


@dataclass(slots=True, kw_only=True)
class UpdateMetadataResponse:
    error_code: Int16 = 0


# ------------------------------------------------------------------------------ CONTROLLED_SHUTDOWN (7)


@dataclass(slots=True, kw_only=True)
class ControlledShutdownRequest:
    broker_id: Int32 = field(metadata=NON_NEGATIVE)
    broker_epoch: Int64 = -1


@dataclass(slots=True, kw_only=True)
class ControlledShutdownResponsePartition:
    topic_name: str
    partition_index: Int32


@dataclass(slots=True, kw_only=True)
class ControlledShutdownResponse:
    error_code: Int16 = 0
    remaining_partitions: list[ControlledShutdownResponsePartition] = field(default_factory=list)


# ----------------------------------------------------------------------------------- CREATE_TOPICS (19)


@dataclass(slots=True, kw_only=True)
class CreateTopicsRequestAssignment:
    """A manual assignment (Kafka's CreatableReplicaAssignment): partition ``partition_index`` on
    ``broker_ids``, the first its leader."""

    partition_index: Int32
    broker_ids: list[Int32]


@dataclass(slots=True, kw_only=True)
class CreateTopicsRequestTopic:
    """num_partitions / replication_factor -1 mean the controller's defaults, as in Kafka. ``assignments``
    (Kafka's): the replicas of every partition, given instead of the two counts (which are then -1)."""

    name: str
    num_partitions: Int32
    replication_factor: Int16
    assignments: list[CreateTopicsRequestAssignment] = field(default_factory=list)
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class CreateTopicsRequest:
    """validate_only (Kafka's): the controller checks and answers as for a creation, and creates nothing."""

    topics: list[CreateTopicsRequestTopic]
    timeout_ms: Int32 = field(default=60000, metadata=NON_NEGATIVE)
    validate_only: bool = False


@dataclass(slots=True, kw_only=True)
class CreateTopicsResponseConfig:
    """One effective config of a created topic (Kafka's CreatableTopicConfigs, CreateTopics v5+)."""

    name: str
    value: str | None = None
    read_only: bool = False
    config_source: Int8 = -1
    is_sensitive: bool = False


@dataclass(slots=True, kw_only=True)
class CreateTopicsResponseTopic:
    """A success carries the topic's partitions, replication factor and effective configs, as Kafka's
    (KIP-525); -1 and no configs otherwise."""

    name: str
    error_code: Int16 = 0
    error_message: str | None = None
    num_partitions: Int32 = -1
    replication_factor: Int16 = -1
    configs: list[CreateTopicsResponseConfig] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class CreateTopicsResponse:
    topics: list[CreateTopicsResponseTopic] = field(default_factory=list)


# ------------------------------------------------------------------------------ CREATE_PARTITIONS (37)


@dataclass(slots=True, kw_only=True)
class CreatePartitionsAssignment:
    broker_ids: list[Int32]


@dataclass(slots=True, kw_only=True)
class CreatePartitionsTopic:
    """``count``: the topic's new number of partitions; ``assignments``: the replicas of each new
    partition (nil: the controller assigns them, as for a new topic)."""

    name: str
    count: Int32
    assignments: list[CreatePartitionsAssignment] | None = None


@dataclass(slots=True, kw_only=True)
class CreatePartitionsRequest:
    topics: list[CreatePartitionsTopic]
    timeout_ms: Int32 = field(default=60000, metadata=NON_NEGATIVE)
    validate_only: bool = False


@dataclass(slots=True, kw_only=True)
class CreatePartitionsTopicResult:
    name: str
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class CreatePartitionsResponse:
    throttle_time_ms: Int32 = 0
    results: list[CreatePartitionsTopicResult] = field(default_factory=list)


# ----------------------------------------------------------------------------------- DELETE_TOPICS (20)


@dataclass(slots=True, kw_only=True)
class DeleteTopicsRequest:
    topic_names: list[str]
    timeout_ms: Int32 = field(default=60000, metadata=NON_NEGATIVE)


@dataclass(slots=True, kw_only=True)
class DeleteTopicsResponseTopic:
    name: str
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class DeleteTopicsResponse:
    responses: list[DeleteTopicsResponseTopic] = field(default_factory=list)


# ---------------------------------------------------------------------------------- DELETE_RECORDS (21)


@dataclass(slots=True, kw_only=True)
class DeleteRecordsRequestPartition:
    partition_index: Int32 = field(metadata=NON_NEGATIVE)
    offset: Int64


@dataclass(slots=True, kw_only=True)
class DeleteRecordsRequestTopic:
    name: str
    partitions: list[DeleteRecordsRequestPartition]


@dataclass(slots=True, kw_only=True)
class DeleteRecordsRequest:
    topics: list[DeleteRecordsRequestTopic]
    timeout_ms: Int32 = field(default=30000, metadata=NON_NEGATIVE)


@dataclass(slots=True, kw_only=True)
class DeleteRecordsResponsePartition:
    partition_index: Int32
    low_watermark: Int64 = -1
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class DeleteRecordsResponseTopic:
    name: str
    partitions: list[DeleteRecordsResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DeleteRecordsResponse:
    throttle_time_ms: Int32 = 0
    topics: list[DeleteRecordsResponseTopic] = field(default_factory=list)


# --------------------------------------------------------------------------------- ALTER_PARTITION (56)


@dataclass(slots=True, kw_only=True)
class AlterPartitionRequestPartition:
    partition_index: Int32 = field(metadata=NON_NEGATIVE)
    leader_epoch: Int32
    new_isr: list[Int32] = field(metadata=NON_NEGATIVE)
    partition_epoch: Int32


@dataclass(slots=True, kw_only=True)
class AlterPartitionRequestTopic:
    topic_name: str
    partitions: list[AlterPartitionRequestPartition]


@dataclass(slots=True, kw_only=True)
class AlterPartitionRequest:
    broker_id: Int32 = field(metadata=NON_NEGATIVE)
    broker_epoch: Int64
    topics: list[AlterPartitionRequestTopic]


@dataclass(slots=True, kw_only=True)
class AlterPartitionResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1
    isr: list[Int32] = field(default_factory=list)
    partition_epoch: Int32 = -1


@dataclass(slots=True, kw_only=True)
class AlterPartitionResponseTopic:
    topic_name: str
    partitions: list[AlterPartitionResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AlterPartitionResponse:
    error_code: Int16 = 0
    topics: list[AlterPartitionResponseTopic] = field(default_factory=list)


# -------------------------------------------------------------------------------- DESCRIBE_CLUSTER (60)


@dataclass(slots=True, kw_only=True)
class DescribeClusterRequest:
    """include_cluster_authorized_operations (Kafka's): a broker's answer then carries the principal's
    authorized operations on the cluster."""

    include_cluster_authorized_operations: bool = False


@dataclass(slots=True, kw_only=True)
class DescribeClusterResponseBroker:
    broker_id: Int32
    host: str
    port: Int32
    fenced: bool = False


@dataclass(slots=True, kw_only=True)
class DescribeClusterResponse:
    error_code: Int16 = 0
    error_message: str | None = None
    cluster_id: str = ""
    controller_id: Int32 = -1
    brokers: list[DescribeClusterResponseBroker] = field(default_factory=list)


# -------------------------------------------------------------------------------- DESCRIBE_CONFIGS (32)

# Kafka's ConfigResource types; the controller answers for topics.
CONFIG_RESOURCE_TOPIC = 2
# Kafka's DescribeConfigs config sources (ConfigEntry.ConfigSource): a topic's own value, a broker's static
# setting (server.properties), Kafka's default.
CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5


@dataclass(slots=True, kw_only=True)
class DescribeConfigsRequestResource:
    resource_type: Int8
    resource_name: str
    configuration_keys: list[str] | None = None


@dataclass(slots=True, kw_only=True)
class DescribeConfigsRequest:
    """Topic configs as the controller holds them; brokers ask for the topics they host (Kafka's brokers
    learn them from ZooKeeper or the metadata log)."""

    resources: list[DescribeConfigsRequestResource]
    include_synonyms: bool = False
    include_documentation: bool = False


@dataclass(slots=True, kw_only=True)
class DescribeConfigsResponseConfig:
    """``config_source``: CONFIG_SOURCE_TOPIC (the topic's own value), CONFIG_SOURCE_STATIC_BROKER or
    CONFIG_SOURCE_DEFAULT; ``is_default`` is true for the last only, as Kafka's."""

    name: str
    value: str | None = None
    read_only: bool = False
    is_default: bool = False
    config_source: Int8 = CONFIG_SOURCE_TOPIC
    is_sensitive: bool = False
    # Kafka's ConfigType (v3+: BOOLEAN 1, STRING 2, INT 3, SHORT 4, LONG 5, DOUBLE 6, LIST 7, CLASS 8,
    # PASSWORD 9; 0 UNKNOWN) and the key's documentation (when the request asks for it).
    config_type: Int8 = 0
    documentation: str | None = None


@dataclass(slots=True, kw_only=True)
class DescribeConfigsResponseResult:
    error_code: Int16 = 0
    error_message: str | None = None
    resource_type: Int8
    resource_name: str
    configs: list[DescribeConfigsResponseConfig] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeConfigsResponse:
    throttle_time_ms: Int32 = 0
    results: list[DescribeConfigsResponseResult] = field(default_factory=list)


# ----------------------------------------------------------------------------- BROKER_REGISTRATION (62)


@dataclass(slots=True, kw_only=True)
class BrokerRegistrationRequestListener:
    name: str
    host: str
    port: Int32 = field(metadata={"min": 0, "max": 65535})


@dataclass(slots=True, kw_only=True)
class BrokerRegistrationRequest:
    """incarnation_id: a random id (uuid4 text) chosen at each broker start, so the controller can tell a
    restarted broker from a duplicate."""

    broker_id: Int32 = field(metadata=NON_NEGATIVE)
    cluster_id: str
    incarnation_id: str
    listeners: list[BrokerRegistrationRequestListener]


@dataclass(slots=True, kw_only=True)
class BrokerRegistrationResponse:
    error_code: Int16 = 0
    broker_epoch: Int64 = -1


# -------------------------------------------------------------------------------- BROKER_HEARTBEAT (63)


@dataclass(slots=True, kw_only=True)
class BrokerHeartbeatRequest:
    broker_id: Int32 = field(metadata=NON_NEGATIVE)
    broker_epoch: Int64
    current_metadata_offset: Int64 = -1
    want_fence: bool = False
    want_shut_down: bool = False
    # The broker's log directories that failed (KRaft's OfflineLogDirs, by path here). A broker reporting
    # any is fenced: all of its replicas live in its one log directory, so all of them are offline.
    offline_log_dirs: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class BrokerHeartbeatResponse:
    error_code: Int16 = 0
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


__all__ = [
    "CONFIG_RESOURCE_TOPIC",
    "CONFIG_SOURCE_DEFAULT",
    "CONFIG_SOURCE_STATIC_BROKER",
    "CONFIG_SOURCE_TOPIC",
    "AlterPartitionRequest",
    "AlterPartitionRequestPartition",
    "AlterPartitionRequestTopic",
    "AlterPartitionResponse",
    "AlterPartitionResponsePartition",
    "AlterPartitionResponseTopic",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "BrokerRegistrationRequest",
    "BrokerRegistrationRequestListener",
    "BrokerRegistrationResponse",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "ControlledShutdownResponsePartition",
    "CreatePartitionsAssignment",
    "CreatePartitionsRequest",
    "CreatePartitionsResponse",
    "CreatePartitionsTopic",
    "CreatePartitionsTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsRequestAssignment",
    "CreateTopicsRequestTopic",
    "CreateTopicsResponse",
    "CreateTopicsResponseConfig",
    "CreateTopicsResponseTopic",
    "DeleteRecordsRequest",
    "DeleteRecordsRequestPartition",
    "DeleteRecordsRequestTopic",
    "DeleteRecordsResponse",
    "DeleteRecordsResponsePartition",
    "DeleteRecordsResponseTopic",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DeleteTopicsResponseTopic",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeClusterResponseBroker",
    "DescribeConfigsRequest",
    "DescribeConfigsRequestResource",
    "DescribeConfigsResponse",
    "DescribeConfigsResponseConfig",
    "DescribeConfigsResponseResult",
    "LeaderAndIsrRequest",
    "LeaderAndIsrRequestLiveLeader",
    "LeaderAndIsrRequestPartitionState",
    "LeaderAndIsrRequestTopicState",
    "LeaderAndIsrResponse",
    "LeaderAndIsrResponsePartitionError",
    "StopReplicaRequest",
    "StopReplicaRequestPartitionState",
    "StopReplicaRequestTopicState",
    "StopReplicaResponse",
    "StopReplicaResponsePartitionError",
    "UpdateMetadataRequest",
    "UpdateMetadataRequestBroker",
    "UpdateMetadataRequestBrokerConfigs",
    "UpdateMetadataRequestEndpoint",
    "UpdateMetadataRequestPartitionState",
    "UpdateMetadataRequestTopicState",
    "UpdateMetadataResponse",
]
