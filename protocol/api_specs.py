"""One ``ApiSpec`` per API: everything the nodes know about an API besides its handler, in one table.

A spec names the API's request and response bodies, the versions served in msgpack and in Kafka's encoding
(docs/clients.md), which node kinds serve it and how (``Serving``: in Kafka's encoding too, the cluster
operation the principal needs first, only on a voter of a quorum, answered by the socket server), and how
an error code is spread over what the request named (``ErrorSpread``, Kafka's ``getErrorResponse``).
``API_VERSIONS`` answers, the broker's ``KafkaApis`` and the controller's ``ControllerApis``, the socket
server and Kafka's codec all read ``API_SPECS``; each node binds a handler to every key it serves, checked
against this table when it starts (docs/layout.md, "Adding a Kafka API").
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from protocol import admin_messages as am
from protocol import config_messages as cfm
from protocol import controller_messages as cm
from protocol import group_messages as g
from protocol import messages as m
from protocol import producer_id_messages as pim
from protocol import raft_messages as rm
from protocol import sasl_messages as sasl
from protocol import security_messages as sm
from protocol import txn_coordinator_messages as tcm
from protocol import txn_marker_messages as tm
from protocol.api_keys import ApiKeys
from protocol.fault_messages import (
    NetFaultsRequest,
    NetFaultsResponse,
    ProtocolFaultsRequest,
    ProtocolFaultsResponse,
)

# The names of Kafka's ``AclOperation``s a spec may ask of the principal on the cluster (the authorizer's
# enum lives with the authorizer, in ``server``; a unit test checks these are its names).
ClusterOperation = Literal["CLUSTER_ACTION", "DESCRIBE", "ALTER"]


class Node(enum.Enum):
    """The node kinds (Kafka's ``ApiMessageType.ListenerType``: BROKER and CONTROLLER)."""

    BROKER = "broker"
    CONTROLLER = "controller"


@dataclass(frozen=True, slots=True)
class Serving:
    """How one node kind serves an API."""

    # Served in Kafka's encoding too (when the API has ``kafka_versions``), not only in msgpack.
    kafka: bool = True
    # What the principal needs on the cluster before the request is handled at all (docs/security.md);
    # None: the handler decides (per topic or group, or open).
    cluster_operation: ClusterOperation | None = None
    # A controller serves it only as a voter of a quorum (its raft manager answers).
    quorum: bool = False
    # Answered by the socket server itself (SASL, NET_FAULTS, PROTOCOL_FAULTS): the node binds no handler.
    socket_server: bool = False


@dataclass(frozen=True, slots=True)
class ErrorSpread:
    """How an error code is spread over one list a request names, into one list of the response.

    Each element of the request's ``source`` list becomes a response element ``{as_name: name, ...}``: its
    ``name`` field (elements that are not mappings are left out), or, when ``name`` is None, the element
    itself (a list of names); the names in the request's ``names_first`` list, if any, come first. Then,
    with ``partitions``, the element's nested list spread the same way; otherwise the leaf ``error_code``
    (and ``error_message`` with ``message``), the fields named in ``copy`` taken from the request's element,
    and the ``fixed`` values."""

    into: str
    source: str
    name: str | None
    as_name: str
    message: bool = False
    copy: tuple[str, ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)
    names_first: str | None = None
    partitions: ErrorSpread | None = None


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: ApiKeys
    request: type
    response: type
    # The versions served in msgpack (isrsim's encoding) and in Kafka's (None: msgpack only).
    versions: tuple[int, int] = (0, 0)
    kafka_versions: tuple[int, int] | None = None
    # Kafka versions advertised but refused with UNSUPPORTED_VERSION when used (Produce 0-2, as Kafka 4).
    kafka_refused: tuple[int, int] | None = None
    broker: Serving | None = None
    controller: Serving | None = None
    # Listed in API_VERSIONS answers (NET_FAULTS is served only when a node has network faults).
    advertised: bool = True
    # Answered SECURITY_DISABLED when no authorizer is configured (the ACL APIs, as Kafka).
    requires_authorizer: bool = False
    # An error-only answer (a refused request) in Kafka's encoding: the error code and message at the top
    # level (when the response has them there) and spread over what the request named.
    error_top_level: bool = True
    error_spread: ErrorSpread | None = None

    @property
    def name(self) -> str:
        return self.key.name

    def on(self, node: Node) -> Serving | None:
        return self.broker if node is Node.BROKER else self.controller


_SERVED = Serving()
_SOCKET_SERVER = Serving(socket_server=True)
_CLUSTER_ACTION = Serving(cluster_operation="CLUSTER_ACTION")
_QUORUM_CLUSTER_ACTION = Serving(kafka=False, cluster_operation="CLUSTER_ACTION", quorum=True)


def _topics(into: str, name: str, as_name: str, *, message: bool) -> ErrorSpread:
    return ErrorSpread(into, "topics", name, as_name, message=message)


def _partitions(into: str, source: str, name: str, as_name: str) -> ErrorSpread:
    return ErrorSpread(into, source, name, as_name)


# Kafka's OffsetCommit / ListOffsets shape: topics[name] -> partitions[partition_index].
_TOPIC_PARTITION_INDEXES = ErrorSpread(
    "topics",
    "topics",
    "name",
    "name",
    partitions=_partitions("partitions", "partitions", "partition_index", "partition_index"),
)

API_SPECS: tuple[ApiSpec, ...] = (
    ApiSpec(
        ApiKeys.PRODUCE,
        m.ProduceRequest,
        m.ProduceResponse,
        kafka_versions=(0, 9),
        kafka_refused=(0, 2),
        broker=_SERVED,
        error_top_level=False,
        error_spread=ErrorSpread(
            "responses",
            "topic_data",
            "name",
            "name",
            partitions=ErrorSpread(
                "partition_responses",
                "partition_data",
                "index",
                "index",
                message=True,
                fixed={"base_offset": -1, "log_start_offset": -1},
            ),
        ),
    ),
    ApiSpec(
        ApiKeys.FETCH,
        m.FetchRequest,
        m.FetchResponse,
        kafka_versions=(4, 12),
        broker=_SERVED,  # a follower's FETCH needs ClusterAction: the handler asks (replica_id >= 0)
        controller=_QUORUM_CLUSTER_ACTION,  # a voter's FETCH (protocol.raft_messages' bodies)
        error_spread=ErrorSpread(
            "responses",
            "topics",
            "topic",
            "topic",
            partitions=_partitions("partitions", "partitions", "partition", "partition_index"),
        ),
    ),
    ApiSpec(
        ApiKeys.LIST_OFFSETS,
        m.ListOffsetsRequest,
        m.ListOffsetsResponse,
        kafka_versions=(1, 7),
        broker=_SERVED,
        error_top_level=False,
        error_spread=_TOPIC_PARTITION_INDEXES,
    ),
    ApiSpec(
        ApiKeys.METADATA,
        m.MetadataRequest,
        m.MetadataResponse,
        kafka_versions=(1, 12),
        broker=_SERVED,
        controller=_SERVED,
        error_top_level=False,
        error_spread=_topics("topics", "name", "name", message=False),
    ),
    ApiSpec(ApiKeys.LEADER_AND_ISR, cm.LeaderAndIsrRequest, cm.LeaderAndIsrResponse, broker=_CLUSTER_ACTION),
    ApiSpec(ApiKeys.STOP_REPLICA, cm.StopReplicaRequest, cm.StopReplicaResponse, broker=_CLUSTER_ACTION),
    ApiSpec(
        ApiKeys.UPDATE_METADATA, cm.UpdateMetadataRequest, cm.UpdateMetadataResponse, broker=_CLUSTER_ACTION
    ),
    ApiSpec(
        ApiKeys.CONTROLLED_SHUTDOWN,
        cm.ControlledShutdownRequest,
        cm.ControlledShutdownResponse,
        controller=_CLUSTER_ACTION,
    ),
    # The consumer-group APIs (docs/groups.md): msgpack serves Kafka's versions of them too, since they
    # behave differently by version (KIP-394 member ids from JoinGroup v4, batched FindCoordinator v4,
    # LeaveGroup v3, OffsetFetch v8).
    ApiSpec(
        ApiKeys.OFFSET_COMMIT,
        g.OffsetCommitRequest,
        g.OffsetCommitResponse,
        versions=(2, 8),
        kafka_versions=(2, 8),
        broker=_SERVED,
        error_top_level=False,
        error_spread=_TOPIC_PARTITION_INDEXES,
    ),
    ApiSpec(
        ApiKeys.OFFSET_FETCH,
        g.OffsetFetchRequest,
        g.OffsetFetchResponse,
        versions=(1, 8),
        kafka_versions=(1, 8),
        broker=_SERVED,
        error_spread=ErrorSpread("groups", "groups", "group_id", "group_id"),
    ),
    ApiSpec(
        ApiKeys.FIND_COORDINATOR,
        g.FindCoordinatorRequest,
        g.FindCoordinatorResponse,
        versions=(0, 4),
        kafka_versions=(0, 4),
        broker=_SERVED,
        error_spread=ErrorSpread("coordinators", "coordinator_keys", None, "key", message=True),
    ),
    ApiSpec(
        ApiKeys.JOIN_GROUP,
        g.JoinGroupRequest,
        g.JoinGroupResponse,
        versions=(0, 7),
        kafka_versions=(0, 7),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.HEARTBEAT,
        g.HeartbeatRequest,
        g.HeartbeatResponse,
        versions=(0, 4),
        kafka_versions=(0, 4),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.LEAVE_GROUP,
        g.LeaveGroupRequest,
        g.LeaveGroupResponse,
        versions=(0, 4),
        kafka_versions=(0, 4),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.SYNC_GROUP,
        g.SyncGroupRequest,
        g.SyncGroupResponse,
        versions=(0, 5),
        kafka_versions=(0, 5),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_GROUPS,
        g.DescribeGroupsRequest,
        g.DescribeGroupsResponse,
        versions=(0, 5),
        kafka_versions=(0, 5),
        broker=_SERVED,
        error_top_level=False,
        error_spread=ErrorSpread("groups", "groups", None, "group_id"),
    ),
    ApiSpec(
        ApiKeys.LIST_GROUPS,
        g.ListGroupsRequest,
        g.ListGroupsResponse,
        versions=(0, 4),
        kafka_versions=(0, 4),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.SASL_HANDSHAKE,
        sasl.SaslHandshakeRequest,
        sasl.SaslHandshakeResponse,
        kafka_versions=(0, 1),
        broker=_SOCKET_SERVER,
        controller=_SOCKET_SERVER,
    ),
    ApiSpec(
        ApiKeys.API_VERSIONS,
        m.ApiVersionsRequest,
        m.ApiVersionsResponse,
        kafka_versions=(0, 3),
        broker=_SERVED,
        controller=_SERVED,
    ),
    ApiSpec(
        ApiKeys.CREATE_TOPICS,
        cm.CreateTopicsRequest,
        cm.CreateTopicsResponse,
        kafka_versions=(2, 7),
        broker=_SERVED,
        controller=_SERVED,
        error_top_level=False,
        error_spread=_topics("topics", "name", "name", message=True),
    ),
    ApiSpec(
        ApiKeys.DELETE_TOPICS,
        cm.DeleteTopicsRequest,
        cm.DeleteTopicsResponse,
        kafka_versions=(1, 6),
        broker=_SERVED,
        controller=_SERVED,
        error_top_level=False,
        # v6 names topics as structs ({name, topic_id}); earlier versions as strings
        error_spread=ErrorSpread(
            "responses", "topics", "name", "name", message=True, names_first="topic_names"
        ),
    ),
    ApiSpec(
        ApiKeys.DELETE_RECORDS,
        cm.DeleteRecordsRequest,
        cm.DeleteRecordsResponse,
        kafka_versions=(0, 2),
        broker=_SERVED,  # Delete on each topic: the handler decides
        error_top_level=False,
        error_spread=ErrorSpread(
            "topics",
            "topics",
            "name",
            "name",
            partitions=ErrorSpread(
                "partitions", "partitions", "partition_index", "partition_index", fixed={"low_watermark": -1}
            ),
        ),
    ),
    ApiSpec(
        ApiKeys.INIT_PRODUCER_ID,
        pim.InitProducerIdRequest,
        pim.InitProducerIdResponse,
        kafka_versions=(0, 4),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.OFFSET_FOR_LEADER_EPOCH,
        m.OffsetForLeaderEpochRequest,
        m.OffsetForLeaderEpochResponse,
        kafka_versions=(2, 4),
        broker=_SERVED,  # ClusterAction or Describe per topic: the handler decides
        error_top_level=False,
        error_spread=ErrorSpread(
            "topics",
            "topics",
            "topic",
            "topic",
            partitions=_partitions("partitions", "partitions", "partition", "partition"),
        ),
    ),
    # The transaction coordinator's APIs (docs/transactions.md); served in msgpack at Kafka's versions.
    ApiSpec(
        ApiKeys.ADD_PARTITIONS_TO_TXN,
        tcm.AddPartitionsToTxnRequest,
        tcm.AddPartitionsToTxnResponse,
        versions=(0, 4),
        kafka_versions=(0, 4),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.ADD_OFFSETS_TO_TXN,
        tcm.AddOffsetsToTxnRequest,
        tcm.AddOffsetsToTxnResponse,
        versions=(0, 3),
        kafka_versions=(0, 3),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.END_TXN,
        tcm.EndTxnRequest,
        tcm.EndTxnResponse,
        versions=(0, 3),
        kafka_versions=(0, 3),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.WRITE_TXN_MARKERS,
        tm.WriteTxnMarkersRequest,
        tm.WriteTxnMarkersResponse,
        kafka_versions=(1, 1),  # Kafka 4 keeps version 1 (0 is gone); msgpack: version 0, the same body
        broker=_CLUSTER_ACTION,  # sent by transaction coordinators (brokers) only
        error_top_level=False,
        error_spread=ErrorSpread(
            "markers",
            "markers",
            "producer_id",
            "producer_id",
            partitions=ErrorSpread(
                "topics",
                "topics",
                "name",
                "name",
                partitions=ErrorSpread("partitions", "partition_indexes", None, "partition_index"),
            ),
        ),
    ),
    ApiSpec(
        ApiKeys.TXN_OFFSET_COMMIT,
        tcm.TxnOffsetCommitRequest,
        tcm.TxnOffsetCommitResponse,
        versions=(0, 3),
        kafka_versions=(0, 3),
        broker=_SERVED,
        error_top_level=False,
        error_spread=_TOPIC_PARTITION_INDEXES,
    ),
    # The ACL APIs: the controller owns the ACLs; a broker forwards them to it (broker/acl_apis.py).
    ApiSpec(
        ApiKeys.DESCRIBE_ACLS,
        sm.DescribeAclsRequest,
        sm.DescribeAclsResponse,
        kafka_versions=(1, 3),
        broker=Serving(cluster_operation="DESCRIBE"),
        controller=Serving(cluster_operation="DESCRIBE"),
        requires_authorizer=True,
    ),
    ApiSpec(
        ApiKeys.CREATE_ACLS,
        sm.CreateAclsRequest,
        sm.CreateAclsResponse,
        kafka_versions=(1, 3),
        broker=Serving(cluster_operation="ALTER"),
        controller=Serving(cluster_operation="ALTER"),
        requires_authorizer=True,
        error_top_level=False,
        # one result per creation (a result names nothing: the creation is kept where no field takes it)
        error_spread=ErrorSpread("results", "creations", None, "creation", message=True),
    ),
    ApiSpec(
        ApiKeys.DELETE_ACLS,
        sm.DeleteAclsRequest,
        sm.DeleteAclsResponse,
        kafka_versions=(1, 3),
        broker=Serving(cluster_operation="ALTER"),
        controller=Serving(cluster_operation="ALTER"),
        requires_authorizer=True,
        error_top_level=False,
        error_spread=ErrorSpread("filter_results", "filters", None, "filter", message=True),
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_CONFIGS,
        cm.DescribeConfigsRequest,
        cm.DescribeConfigsResponse,
        kafka_versions=(1, 4),
        broker=_SERVED,
        controller=_SERVED,
        error_top_level=False,
        error_spread=ErrorSpread(
            "results",
            "resources",
            "resource_name",
            "resource_name",
            message=True,
            copy=("resource_type",),
        ),
    ),
    ApiSpec(
        ApiKeys.ALTER_CONFIGS,
        cfm.AlterConfigsRequest,
        cfm.AlterConfigsResponse,
        kafka_versions=(0, 2),
        broker=_SERVED,
        controller=_SERVED,
        error_top_level=False,
        error_spread=ErrorSpread(
            "responses", "resources", "resource_name", "resource_name", message=True, copy=("resource_type",)
        ),
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_LOG_DIRS,
        am.DescribeLogDirsRequest,
        am.DescribeLogDirsResponse,
        kafka_versions=(1, 4),
        broker=Serving(cluster_operation="DESCRIBE"),
    ),
    ApiSpec(
        ApiKeys.SASL_AUTHENTICATE,
        sasl.SaslAuthenticateRequest,
        sasl.SaslAuthenticateResponse,
        kafka_versions=(0, 2),
        broker=_SOCKET_SERVER,
        controller=_SOCKET_SERVER,
    ),
    ApiSpec(
        ApiKeys.CREATE_PARTITIONS,
        cm.CreatePartitionsRequest,
        cm.CreatePartitionsResponse,
        kafka_versions=(0, 3),
        broker=_SERVED,
        controller=_SERVED,
        error_top_level=False,
        error_spread=_topics("results", "name", "name", message=True),
    ),
    ApiSpec(
        ApiKeys.DELETE_GROUPS,
        g.DeleteGroupsRequest,
        g.DeleteGroupsResponse,
        versions=(0, 2),
        kafka_versions=(0, 2),
        broker=_SERVED,
        error_top_level=False,
        error_spread=ErrorSpread("results", "groups_names", None, "group_id"),
    ),
    ApiSpec(
        ApiKeys.ELECT_LEADERS,
        am.ElectLeadersRequest,
        am.ElectLeadersResponse,
        kafka_versions=(0, 2),
        broker=Serving(cluster_operation="ALTER"),  # forwarded to the controller
        controller=Serving(cluster_operation="ALTER"),
        error_spread=ErrorSpread(
            "replica_election_results",
            "topic_partitions",
            "topic",
            "topic",
            partitions=ErrorSpread("partition_result", "partitions", None, "partition_id", message=True),
        ),
    ),
    ApiSpec(
        ApiKeys.INCREMENTAL_ALTER_CONFIGS,
        cfm.IncrementalAlterConfigsRequest,
        cfm.IncrementalAlterConfigsResponse,
        kafka_versions=(0, 1),
        broker=_SERVED,
        controller=_SERVED,
        error_top_level=False,
        error_spread=ErrorSpread(
            "responses", "resources", "resource_name", "resource_name", message=True, copy=("resource_type",)
        ),
    ),
    ApiSpec(
        ApiKeys.ALTER_PARTITION_REASSIGNMENTS,
        am.AlterPartitionReassignmentsRequest,
        am.AlterPartitionReassignmentsResponse,
        kafka_versions=(0, 1),
        broker=Serving(cluster_operation="ALTER"),  # forwarded to the controller
        controller=Serving(cluster_operation="ALTER"),
        error_spread=ErrorSpread(
            "responses",
            "topics",
            "name",
            "name",
            partitions=ErrorSpread(
                "partitions", "partitions", "partition_index", "partition_index", message=True
            ),
        ),
    ),
    ApiSpec(
        ApiKeys.LIST_PARTITION_REASSIGNMENTS,
        am.ListPartitionReassignmentsRequest,
        am.ListPartitionReassignmentsResponse,
        kafka_versions=(0, 0),
        broker=Serving(cluster_operation="DESCRIBE"),  # forwarded to the controller
        controller=Serving(cluster_operation="DESCRIBE"),
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS,
        sm.DescribeUserScramCredentialsRequest,
        sm.DescribeUserScramCredentialsResponse,
        controller=Serving(cluster_operation="DESCRIBE"),
    ),
    ApiSpec(
        ApiKeys.ALTER_USER_SCRAM_CREDENTIALS,
        sm.AlterUserScramCredentialsRequest,
        sm.AlterUserScramCredentialsResponse,
        controller=Serving(cluster_operation="ALTER"),
    ),
    ApiSpec(ApiKeys.VOTE, rm.VoteRequest, rm.VoteResponse, controller=_QUORUM_CLUSTER_ACTION),
    ApiSpec(
        ApiKeys.BEGIN_QUORUM_EPOCH,
        rm.BeginQuorumEpochRequest,
        rm.BeginQuorumEpochResponse,
        controller=_QUORUM_CLUSTER_ACTION,
    ),
    ApiSpec(
        ApiKeys.END_QUORUM_EPOCH,
        rm.EndQuorumEpochRequest,
        rm.EndQuorumEpochResponse,
        controller=_QUORUM_CLUSTER_ACTION,
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_QUORUM,
        rm.DescribeQuorumRequest,
        rm.DescribeQuorumResponse,
        kafka_versions=(0, 2),
        broker=_SERVED,  # forwarded to the quorum (KIP-590)
        controller=Serving(cluster_operation="DESCRIBE", quorum=True),
    ),
    ApiSpec(
        ApiKeys.ALTER_PARTITION,
        cm.AlterPartitionRequest,
        cm.AlterPartitionResponse,
        controller=_CLUSTER_ACTION,
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_CLUSTER,
        cm.DescribeClusterRequest,
        cm.DescribeClusterResponse,
        kafka_versions=(0, 1),
        broker=_SERVED,
        controller=_SERVED,
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_PRODUCERS,
        tm.DescribeProducersRequest,
        tm.DescribeProducersResponse,
        kafka_versions=(0, 0),
        broker=_SERVED,  # Read on each topic: the handler decides
        error_top_level=False,
        error_spread=ErrorSpread(
            "topics",
            "topics",
            "name",
            "name",
            partitions=ErrorSpread("partitions", "partition_indexes", None, "partition_index", message=True),
        ),
    ),
    ApiSpec(
        ApiKeys.BROKER_REGISTRATION,
        cm.BrokerRegistrationRequest,
        cm.BrokerRegistrationResponse,
        controller=_CLUSTER_ACTION,
    ),
    ApiSpec(
        ApiKeys.BROKER_HEARTBEAT,
        cm.BrokerHeartbeatRequest,
        cm.BrokerHeartbeatResponse,
        controller=_CLUSTER_ACTION,
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_TRANSACTIONS,
        tcm.DescribeTransactionsRequest,
        tcm.DescribeTransactionsResponse,
        kafka_versions=(0, 0),
        broker=_SERVED,
        error_top_level=False,
        error_spread=ErrorSpread("transaction_states", "transactional_ids", None, "transactional_id"),
    ),
    ApiSpec(
        ApiKeys.LIST_TRANSACTIONS,
        tcm.ListTransactionsRequest,
        tcm.ListTransactionsResponse,
        versions=(0, 1),
        kafka_versions=(0, 1),
        broker=_SERVED,
    ),
    ApiSpec(
        ApiKeys.ALLOCATE_PRODUCER_IDS,
        pim.AllocateProducerIdsRequest,
        pim.AllocateProducerIdsResponse,
        controller=_CLUSTER_ACTION,
    ),
    ApiSpec(
        ApiKeys.DESCRIBE_REPLICA_STATE,
        m.DescribeReplicaStateRequest,
        m.DescribeReplicaStateResponse,
        broker=Serving(cluster_operation="DESCRIBE"),
    ),
    ApiSpec(
        ApiKeys.NET_FAULTS,
        NetFaultsRequest,
        NetFaultsResponse,
        broker=_SOCKET_SERVER,
        controller=_SOCKET_SERVER,
        advertised=False,
    ),
    ApiSpec(
        ApiKeys.PROTOCOL_FAULTS,
        ProtocolFaultsRequest,
        ProtocolFaultsResponse,
        broker=_SOCKET_SERVER,
        controller=_SOCKET_SERVER,
        advertised=False,
    ),
)

SPECS: dict[int, ApiSpec] = {int(s.key): s for s in API_SPECS}

# Views of the table by API key (the schema check reads the body types; the codec the Kafka ranges).
REQUEST_TYPES: dict[ApiKeys, type] = {s.key: s.request for s in API_SPECS}
RESPONSE_TYPES: dict[ApiKeys, type] = {s.key: s.response for s in API_SPECS}


def spec(api_key: int) -> ApiSpec | None:
    return SPECS.get(api_key)


def served_by(node: Node, *, quorum: bool = False) -> tuple[ApiSpec, ...]:
    """The specs ``node`` serves; a controller's quorum APIs only when it is a voter of a quorum."""
    out = []
    for s in API_SPECS:
        serving = s.on(node)
        if serving is not None and (quorum or not serving.quorum):
            out.append(s)
    return tuple(out)


def handled_by(node: Node, *, quorum: bool = False) -> frozenset[ApiKeys]:
    """The keys ``node`` answers with a handler of its own (not the socket server's)."""
    return frozenset(s.key for s in served_by(node, quorum=quorum) if not _on(s, node).socket_server)


def _on(s: ApiSpec, node: Node) -> Serving:
    serving = s.on(node)
    assert serving is not None
    return serving


def api_versions(specs: Iterable[ApiSpec], *, kafka: bool) -> dict[int, tuple[int, int]]:
    """What API_VERSIONS lists for ``specs`` in msgpack or in Kafka's encoding (sorted by key)."""
    out: dict[int, tuple[int, int]] = {}
    for s in sorted(specs, key=lambda s: s.key):
        if kafka:
            if s.kafka_versions is not None:
                out[int(s.key)] = s.kafka_versions
        else:
            out[int(s.key)] = s.versions
    return out


def node_api_versions(
    node: Node, *, kafka: bool, quorum: bool = False, bound: Iterable[int] | None = None
) -> dict[int, tuple[int, int]]:
    """What ``node``'s API_VERSIONS lists: the advertised specs it serves (in Kafka's encoding those it serves
    there too); with ``bound``, of the APIs with a handler only those keys (the socket server's always)."""
    keys = None if bound is None else {int(k) for k in bound}
    specs = [
        s
        for s in served_by(node, quorum=quorum)
        if s.advertised
        and (not kafka or _on(s, node).kafka)
        and (keys is None or _on(s, node).socket_server or int(s.key) in keys)
    ]
    return api_versions(specs, kafka=kafka)


def check_handlers(node: Node, handlers: Iterable[int], *, quorum: bool = False) -> None:
    """Raises ``ValueError`` unless ``handlers`` are exactly the keys ``node`` answers itself: a spec
    without a handler, or a handler without a spec, is a programming error found at start-up."""
    bound = {int(k) for k in handlers}
    expected = {int(k) for k in handled_by(node, quorum=quorum)}
    missing, extra = expected - bound, bound - expected
    if missing or extra:
        raise ValueError(
            f"{node.value} handlers do not match protocol.api_specs: "
            f"no handler for {sorted(ApiKeys(k).name for k in missing)}, "
            f"no spec for {sorted(ApiKeys(k).name if k in SPECS else str(k) for k in extra)}"
        )


# --------------------------------------------------------------------------------- error responses


def error_response(
    api_key: int, request: Mapping[str, Any], code: int, message: str | None
) -> dict[str, Any]:
    """Kafka's ``AbstractRequest.getErrorResponse``: ``code`` on every topic, partition or group the request
    named, as the API's spec spreads it, and at the top level where the response has an error code there."""
    s = SPECS.get(api_key)
    out: dict[str, Any] = {}
    if s is None or s.error_top_level:
        out = {"error_code": code, "error_message": message}
    if s is not None and s.error_spread is not None:
        out[s.error_spread.into] = _spread(s.error_spread, request, code, message)
    return out


def _spread(spread: ErrorSpread, request: Mapping[str, Any], code: int, message: str | None) -> list[Any]:
    named: list[tuple[Any, Mapping[str, Any]]] = []
    if spread.names_first is not None:
        named.extend((n, {}) for n in request.get(spread.names_first) or ())
    for element in request.get(spread.source) or ():
        if spread.name is None:
            named.append((element, {}))
        elif isinstance(element, Mapping):
            named.append((element.get(spread.name), element))
    out: list[Any] = []
    for name, element in named:
        entry: dict[str, Any] = {spread.as_name: name}
        if spread.partitions is not None:
            entry[spread.partitions.into] = _spread(spread.partitions, element, code, message)
        else:
            entry["error_code"] = code
            if spread.message:
                entry["error_message"] = message
            entry.update({f: element.get(f) for f in spread.copy})
            entry.update(spread.fixed)
        out.append(entry)
    return out


__all__ = [
    "API_SPECS",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "SPECS",
    "ApiSpec",
    "ClusterOperation",
    "ErrorSpread",
    "Node",
    "Serving",
    "api_versions",
    "check_handlers",
    "error_response",
    "handled_by",
    "node_api_versions",
    "served_by",
    "spec",
]
