"""What the group coordinator's core answers (results) and asks its shell to do (effects), and what a
replayed ``__consumer_offsets`` partition yields for a group (``LoadedGroup``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.group.group_metadata import OffsetAndMetadata
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.group_records import GroupMetadataValue

NO_GENERATION = -1


# ---------------------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    member_id: str
    error: Errors
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[JoinMember] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: Errors
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: Errors


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: Errors
    members: list[LeaveMemberResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CommitResult:
    errors: dict[TopicPartition, Errors]


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberSummary]


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str


# ---------------------------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the request ``token`` stands for."""

    token: object
    result: JoinResult | SyncResult | LeaveResult | CommitResult | DeleteResult | Errors


@dataclass(frozen=True, slots=True)
class StoreGroup:
    """Write the group's metadata (``value`` None: a tombstone) to its ``__consumer_offsets`` partition
    with acks=all, then call ``on_group_stored(this, error)``."""

    group_id: str
    partition: int
    generation_id: int
    value: GroupMetadataValue | None


@dataclass(frozen=True, slots=True)
class StoreOffsets:
    """Write ``offsets`` with acks=all, then call ``on_offsets_stored(this, error)``, which answers
    (``refused``: partitions answered without a write, OFFSET_METADATA_TOO_LARGE)."""

    token: object
    group_id: str
    partition: int
    offsets: dict[TopicPartition, OffsetAndMetadata]
    refused: dict[TopicPartition, Errors] = field(default_factory=dict)
    # Who committed (journaled in the `offset_commit` events): -1 and "" for a standalone consumer.
    generation_id: int = -1
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class GroupRebalanced:
    """A new generation began (for the journal): its members, leader and protocol."""

    group_id: str
    partition: int
    generation_id: int
    state: str
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: list[str]


@dataclass(frozen=True, slots=True)
class RebalanceStarted:
    """The group went to PreparingRebalance (for the journal's ``rebalance_started``): the generation and
    state it left, ``cause`` (``member_joined``, ``member_left``, ``member_expired``, ``member_updated``,
    ``store_failed``) and Kafka's reason in words."""

    group_id: str
    partition: int
    generation_id: int
    state: str
    cause: str
    reason: str


@dataclass(frozen=True, slots=True)
class StoreTombstones:
    """Write tombstones to the group's ``__consumer_offsets`` partition with acks=all: one per offset in
    ``offsets`` and, with ``group_tombstone``, the group's metadata (the group is deleted). Nothing waits
    for the outcome (as Kafka's ``cleanupGroupMetadata``); a failed write is logged."""

    group_id: str
    partition: int
    offsets: list[TopicPartition]
    group_tombstone: bool


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """DeleteGroups' answer: an error per group id (NONE: deleted)."""

    errors: dict[str, Errors]


@dataclass(frozen=True, slots=True)
class StoreTxnOffsets:
    """TxnOffsetCommit: write ``offsets`` as a transactional batch of the producer (``producer_id``,
    ``producer_epoch``) with acks=all, then call ``on_txn_offsets_stored(this, error, written)``, which
    answers; the offsets become committed when the transaction's commit marker reaches the partition."""

    token: object
    group_id: str
    partition: int
    offsets: dict[TopicPartition, OffsetAndMetadata]
    producer_id: int
    producer_epoch: int
    refused: dict[TopicPartition, Errors] = field(default_factory=dict)
    generation_id: int = -1
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class TxnOffsetsCommitted:
    """A transaction's offsets, written earlier (``written``: what the shell said of the write, for its
    journal), are committed by the transaction's commit marker."""

    store: StoreTxnOffsets
    written: object


Effect = (
    Respond
    | StoreGroup
    | StoreOffsets
    | StoreTombstones
    | GroupRebalanced
    | StoreTxnOffsets
    | TxnOffsetsCommitted
    | RebalanceStarted
)


@dataclass(slots=True)
class LoadedGroup:
    """What replaying a partition yields for one group: its last metadata (None: no metadata, only offsets)
    and its committed offsets."""

    metadata: GroupMetadataValue | None = None
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # TxnOffsetCommit's offsets whose transaction has no marker in the partition yet, by producer id.
    pending_txn_offsets: dict[int, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
