"""One consumer group of Kafka's classic protocol (Kafka's ``GroupMetadata`` and ``MemberMetadata``): its
state, members, protocol votes, generation, leader and committed offsets. Plain data with Kafka's methods;
the decisions that move it are in ``coordinator.group.coordinator_core``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from protocol.common import TopicPartition


class GroupState(Enum):
    """Kafka's ``GroupState`` of a classic group; the value is the name DescribeGroups / ListGroups give."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's validPreviousStates: the states a group may move to each state from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}

# The protocol type of Kafka's consumers (``ConsumerProtocol.PROTOCOL_TYPE``).
CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's ``OffsetAndMetadata``)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


@dataclass(slots=True)
class MemberMetadata:
    """One member (Kafka's ``MemberMetadata``). ``awaiting_join`` / ``awaiting_sync`` hold the token of the
    member's JoinGroup / SyncGroup request that waits for its answer (None when none waits)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: object | None = None
    awaiting_sync: object | None = None
    is_new: bool = False
    # When the member is removed unless it heartbeats (None: no heartbeat is expected now).
    heartbeat_deadline_ms: int | None = None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocols(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """The same protocols with the same metadata in the same order (Kafka's ``matches``)."""
        return self.supported_protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(slots=True)
class GroupMetadata:
    """A group (Kafka's ``GroupMetadata``). Members keep their joining order (the leader's replacement and
    ties in the protocol vote are decided by it, so the behaviour is deterministic)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry (KIP-394)
    pending_sync_members: set[str] = field(default_factory=set)
    num_members_awaiting_join: int = 0
    supported_protocols: dict[str, int] = field(default_factory=dict)
    new_member_added: bool = False
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # The rebalance timers: the join phase's deadline (and whether it is the initial delay of an Empty
    # group, with the rebalance time it leaves), and the sync phase's deadline for a generation.
    join_deadline_ms: int | None = None
    initial_delay_remaining_ms: int | None = None
    sync_deadline_ms: int | None = None
    sync_generation: int = -1

    # ------------------------------------------------------------------ queries

    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    @property
    def size(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def has_all_members_joined(self) -> bool:
        return self.size == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        return {name for name, count in self.supported_protocols.items() if count == self.size}

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        """Kafka's ``supportsProtocols``: an Empty group takes any non-empty type and set; otherwise the
        type must match and one of the protocols must be supported by every member."""
        if self.is_state(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and any(
            self.supported_protocols.get(p, 0) == self.size for p in protocols
        )

    def select_protocol(self) -> str:
        """The protocol most members vote for among those all support (ties: the earliest vote)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda p: votes[p])  # max keeps the first of equal counts

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members of a consumer group subscribe to (from their subscription metadata), or
        None when they cannot be read (another protocol type, no protocol chosen yet)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    # ------------------------------------------------------------------ changes

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise ValueError(
                f"group {self.group_id} should be in one of "
                f"{sorted(s.value for s in VALID_PREVIOUS_STATES[state])} before moving to "
                f"{state.value}, not {self.state.value}"
            )
        self.state = state
        self.state_timestamp_ms = now_ms

    def add(self, member: MemberMetadata, join_token: object | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        member.awaiting_join = join_token
        if member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.is_awaiting_join:
                self.num_members_awaiting_join -= 1
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_token: object | None,
    ) -> None:
        self._count_protocols(member, -1)
        member.supported_protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if join_token is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif join_token is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = join_token

    def take_join_token(self, member: MemberMetadata) -> object | None:
        """The token of the member's waiting JoinGroup, which is answered now (Kafka's
        ``maybeInvokeJoinCallback``), or None if none waits."""
        token = member.awaiting_join
        if token is not None:
            member.awaiting_join = None
            self.num_members_awaiting_join -= 1
        return token

    def take_sync_token(self, member: MemberMetadata) -> object | None:
        token = member.awaiting_sync
        member.awaiting_sync = None
        return token

    def maybe_elect_new_joined_leader(self) -> bool:
        """Kafka's ``maybeElectNewJoinedLeader``: keep a leader that rejoined, else pick any member that
        did; False when none did."""
        if self.leader_id is None:
            return False
        if self.get(self.leader_id).is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def _count_protocols(self, member: MemberMetadata, delta: int) -> None:
        # Each name once per member, as Kafka's ``MemberMetadata.protocols`` (a set): a JoinGroup naming a
        # protocol twice must not count as two members supporting it.
        for name in member.protocols():
            count = self.supported_protocols.get(name, 0) + delta
            if count:
                self.supported_protocols[name] = count
            else:
                self.supported_protocols.pop(name, None)


def parse_subscription_topics(data: bytes) -> list[str] | None:
    """The topics of a consumer's subscription (Kafka's ``ConsumerProtocolSubscription``: int16 version,
    then an array of strings, the same in every version), or None if the bytes are not one."""
    try:
        pos = 2
        if len(data) < 6:
            return None
        count = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        pos += 4
        if count < 0:
            return [] if count == -1 else None
        topics: list[str] = []
        for _ in range(count):
            length = int.from_bytes(data[pos : pos + 2], "big", signed=True)
            pos += 2
            if length < 0 or pos + length > len(data):
                return None
            topics.append(data[pos : pos + length].decode())
            pos += length
        return topics
    except (UnicodeDecodeError, IndexError):
        return None
