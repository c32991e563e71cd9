"""What every part of the group coordinator's core shares (``offsets_core``, ``coordinator_core``): its
settings (``GroupConfig``), the groups of the ``__consumer_offsets`` partitions this broker leads, which
partitions those are, the check every request starts with (Kafka's ``validateGroupStatus``) and the counts
the metrics read."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.group.group_cleanup import DEFAULT_OFFSETS_RETENTION_MS, DEFAULT_RETENTION_CHECK_INTERVAL_MS
from coordinator.group.group_metadata import GroupMetadata, GroupState, MemberMetadata
from protocol import environment
from protocol.common import Clock
from protocol.errors import Errors
from protocol.group_records import partition_for_group

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: how long a new member may wait for its first join.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
UNKNOWN_MEMBER_ID = ""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's group coordinator settings (config keys in brackets)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    num_partitions: int = 50  # offsets.topic.num.partitions
    max_metadata_size: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = (
        DEFAULT_RETENTION_CHECK_INTERVAL_MS  # offsets.retention.check.interval.ms
    )


def default_member_id(prefix: str) -> str:
    """Kafka's ``generateMemberId``: the client id (or instance id), a dash and a random UUID."""
    return f"{prefix}-{environment.uuid4()}"


def convert_store_error(error: Errors) -> Errors:
    """The error a group or offset write's failure is answered with (Kafka's
    ``maybeConvertOffsetCommitError`` and ``storeGroup``'s mapping)."""
    if error in (
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.REQUEST_TIMED_OUT,
    ):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if error in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR, Errors.FENCED_LEADER_EPOCH):
        return Errors.NOT_COORDINATOR
    if error in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE, Errors.INVALID_FETCH_SIZE):
        return Errors.INVALID_COMMIT_OFFSET_SIZE
    return error


def convert_group_store_error(error: Errors) -> Errors:
    """The error a SyncGroup is answered with when the leader's assignment could not be written (Kafka's
    ``GroupMetadataManager.storeGroup``): a group record too large for the offsets topic (members' metadata
    and assignments past ``max.message.bytes``) is UNKNOWN_SERVER_ERROR, a timeout REBALANCE_IN_PROGRESS."""
    if error == Errors.REQUEST_TIMED_OUT:
        return Errors.REBALANCE_IN_PROGRESS
    if error in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE, Errors.INVALID_FETCH_SIZE):
        return Errors.UNKNOWN_SERVER_ERROR
    return convert_store_error(error)


class CoreBase:
    """The groups this broker coordinates and the partitions they live in."""

    def __init__(self, config: GroupConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.active = True
        self.groups: dict[str, GroupMetadata] = {}
        self.owned_partitions: set[int] = set()
        self.loading_partitions: set[int] = set()
        # Counters for the metrics (Kafka's group-coordinator-metrics).
        self.rebalances = 0
        self.completed_rebalances = 0
        self.offset_commits = 0
        self.offset_expirations = 0

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.config.num_partitions)

    def validate_group_status(self, group_id: str, *, empty_allowed: bool = False) -> Errors | None:
        """Kafka's ``validateGroupStatus``: INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE,
        COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR, else None. OffsetCommit, OffsetFetch and
        DescribeGroups accept an empty group id."""
        if not group_id and not empty_allowed:
            return Errors.INVALID_GROUP_ID
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if partition in self.loading_partitions:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned_partitions:
            return Errors.NOT_COORDINATOR
        return None

    def _heartbeat(self, member: MemberMetadata) -> None:
        member.heartbeat_deadline_ms = self.clock() + member.session_timeout_ms

    # ------------------------------------------------------------------ metrics

    def state_counts(self) -> dict[GroupState, int]:
        counts = dict.fromkeys(GroupState, 0)
        for group in self.groups.values():
            counts[group.state] += 1
        return counts

    def num_offsets(self) -> int:
        return sum(len(g.offsets) for g in self.groups.values())
