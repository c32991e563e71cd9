"""Bodies of the consumer-group APIs (docs/clients.md, Kafka's classic group protocol): FindCoordinator (10),
JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16),
OffsetCommit (8), OffsetFetch (9) and DeleteGroups (42).

Each dataclass holds the fields of every version this broker supports (``protocol.api_specs``), named as
Kafka's JSON schemas name them, in snake_case; a field a version lacks keeps its default. Where Kafka
changed a request's shape (FindCoordinator v4's ``coordinator_keys``, LeaveGroup v3's ``members``,
OffsetFetch v8's ``groups``) both shapes are here, and the handler reads the one the version has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int8, Int16, Int32, Int64

NON_NEGATIVE = {"min": 0}

# Kafka's FindCoordinatorRequest.CoordinatorType.
COORDINATOR_TYPE_GROUP = 0
COORDINATOR_TYPE_TRANSACTION = 1

# ------------------------------------------------------------------------------------ FIND_COORDINATOR (10)


@dataclass(slots=True, kw_only=True)
class FindCoordinatorRequest:
    """v0-3: ``key``; v4+: ``coordinator_keys`` (a batch). ``key_type`` 0 group, 1 transaction."""

    key: str = ""
    key_type: Int8 = 0
    coordinator_keys: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class FindCoordinatorResponseCoordinator:
    key: str
    node_id: Int32 = -1
    host: str = ""
    port: Int32 = -1
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class FindCoordinatorResponse:
    """v0-3: the top-level fields; v4+: ``coordinators``."""

    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    node_id: Int32 = -1
    host: str = ""
    port: Int32 = -1
    coordinators: list[FindCoordinatorResponseCoordinator] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ JOIN_GROUP (11)


@dataclass(slots=True, kw_only=True)
class JoinGroupRequestProtocol:
    name: str
    metadata: bytes


@dataclass(slots=True, kw_only=True)
class JoinGroupRequest:
    """``rebalance_timeout_ms`` -1 (v0): the session timeout. A v4+ join without ``member_id`` is answered
    MEMBER_ID_REQUIRED with an id to join with (KIP-394)."""

    group_id: str
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32 = -1
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str
    protocols: list[JoinGroupRequestProtocol]


@dataclass(slots=True, kw_only=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None = None
    metadata: bytes = b""


@dataclass(slots=True, kw_only=True)
class JoinGroupResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    generation_id: Int32 = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupResponseMember] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ SYNC_GROUP (14)


@dataclass(slots=True, kw_only=True)
class SyncGroupRequestAssignment:
    member_id: str
    assignment: bytes


@dataclass(slots=True, kw_only=True)
class SyncGroupRequest:
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: list[SyncGroupRequestAssignment] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class SyncGroupResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# ------------------------------------------------------------------------------------------- HEARTBEAT (12)


@dataclass(slots=True, kw_only=True)
class HeartbeatRequest:
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None


@dataclass(slots=True, kw_only=True)
class HeartbeatResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0


# ----------------------------------------------------------------------------------------- LEAVE_GROUP (13)


@dataclass(slots=True, kw_only=True)
class LeaveGroupRequestMember:
    member_id: str
    group_instance_id: str | None = None


@dataclass(slots=True, kw_only=True)
class LeaveGroupRequest:
    """v0-2: one ``member_id``; v3+: ``members``."""

    group_id: str
    member_id: str = ""
    members: list[LeaveGroupRequestMember] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class LeaveGroupResponseMember:
    member_id: str
    group_instance_id: str | None = None
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class LeaveGroupResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    members: list[LeaveGroupResponseMember] = field(default_factory=list)


# ---------------------------------------------------------------------------------------- OFFSET_COMMIT (8)


@dataclass(slots=True, kw_only=True)
class OffsetCommitRequestPartition:
    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


@dataclass(slots=True, kw_only=True)
class OffsetCommitRequestTopic:
    name: str
    partitions: list[OffsetCommitRequestPartition]


@dataclass(slots=True, kw_only=True)
class OffsetCommitRequest:
    """``generation_id_or_member_epoch`` -1 with an empty ``member_id``: a consumer outside any group (a
    simple consumer) commits. ``retention_time_ms`` (v2-4) is accepted and ignored: offsets do not expire
    here (docs/groups.md)."""

    group_id: str
    generation_id_or_member_epoch: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: Int64 = -1
    topics: list[OffsetCommitRequestTopic]


@dataclass(slots=True, kw_only=True)
class OffsetCommitResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class OffsetCommitResponseTopic:
    name: str
    partitions: list[OffsetCommitResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class OffsetCommitResponse:
    throttle_time_ms: Int32 = 0
    topics: list[OffsetCommitResponseTopic] = field(default_factory=list)


# ----------------------------------------------------------------------------------------- OFFSET_FETCH (9)


@dataclass(slots=True, kw_only=True)
class OffsetFetchRequestTopic:
    name: str
    partition_indexes: list[Int32]


@dataclass(slots=True, kw_only=True)
class OffsetFetchRequestGroup:
    group_id: str
    topics: list[OffsetFetchRequestTopic] | None = None


@dataclass(slots=True, kw_only=True)
class OffsetFetchRequest:
    """v1-7: ``group_id`` and ``topics`` (nil, v2+: every partition the group committed); v8+: ``groups``."""

    group_id: str = ""
    topics: list[OffsetFetchRequestTopic] | None = None
    groups: list[OffsetFetchRequestGroup] = field(default_factory=list)
    require_stable: bool = False


@dataclass(slots=True, kw_only=True)
class OffsetFetchResponsePartition:
    partition_index: Int32
    committed_offset: Int64 = -1
    committed_leader_epoch: Int32 = -1
    metadata: str | None = ""
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class OffsetFetchResponseTopic:
    name: str
    partitions: list[OffsetFetchResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class OffsetFetchResponseGroup:
    group_id: str
    topics: list[OffsetFetchResponseTopic] = field(default_factory=list)
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class OffsetFetchResponse:
    throttle_time_ms: Int32 = 0
    topics: list[OffsetFetchResponseTopic] = field(default_factory=list)
    error_code: Int16 = 0
    groups: list[OffsetFetchResponseGroup] = field(default_factory=list)


# ----------------------------------------------------------------------------------------- LIST_GROUPS (16)


@dataclass(slots=True, kw_only=True)
class ListGroupsRequest:
    """``states_filter`` (v4+): only groups in these states (case-insensitive); empty: all."""

    states_filter: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ListGroupsResponseGroup:
    group_id: str
    protocol_type: str = ""
    group_state: str = ""


@dataclass(slots=True, kw_only=True)
class ListGroupsResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    groups: list[ListGroupsResponseGroup] = field(default_factory=list)


# ------------------------------------------------------------------------------------- DESCRIBE_GROUPS (15)


@dataclass(slots=True, kw_only=True)
class DescribeGroupsRequest:
    groups: list[str]
    include_authorized_operations: bool = False


@dataclass(slots=True, kw_only=True)
class DescribeGroupsResponseMember:
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


@dataclass(slots=True, kw_only=True)
class DescribeGroupsResponseGroup:
    error_code: Int16 = 0
    group_id: str
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribeGroupsResponseMember] = field(default_factory=list)
    # authorized_operations (v3+): added to a Kafka-encoded answer when the request asks for it.


@dataclass(slots=True, kw_only=True)
class DescribeGroupsResponse:
    throttle_time_ms: Int32 = 0
    groups: list[DescribeGroupsResponseGroup] = field(default_factory=list)


# ---------------------------------------------------------------------------------------- DELETE_GROUPS (42)


@dataclass(slots=True, kw_only=True)
class DeleteGroupsRequest:
    groups_names: list[str]


@dataclass(slots=True, kw_only=True)
class DeleteGroupsResponseResult:
    group_id: str
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class DeleteGroupsResponse:
    throttle_time_ms: Int32 = 0
    results: list[DeleteGroupsResponseResult] = field(default_factory=list)
