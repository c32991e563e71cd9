"""The group coordinator's decisions (Kafka's ``GroupCoordinator`` of the classic protocol), pure: no
sockets, no tasks, an injected clock. Each request method takes an opaque ``token`` standing for the
request and returns effects: answers (:class:`Respond`, now or later, when a rebalance completes) and
writes for the shell to make to ``__consumer_offsets`` (:class:`StoreGroup`, :class:`StoreOffsets`),
whose outcome it reports back (:meth:`GroupCoordinatorCore.on_group_stored`,
:meth:`~GroupCoordinatorCore.on_offsets_stored`). Timers are deadlines; the shell calls
:meth:`~GroupCoordinatorCore.poll` at :meth:`~GroupCoordinatorCore.next_deadline_ms`.

Kafka's behaviour carried over: KIP-394 member ids (a JoinGroup v4+ without a member id gets
MEMBER_ID_REQUIRED with one, and the member has a session timeout to come back), the initial rebalance delay
of an Empty group (``group.initial.rebalance.delay.ms``), the join phase ending when every member rejoined or
at the rebalance timeout (members that did not rejoin are removed), the sync phase's timeout (members that
did not sync are removed), session timeouts, and the errors of every decision; DeleteGroups and the expiry
of committed offsets (``offsets.retention.minutes``), whose decisions are in ``group_cleanup``; static
membership (``group.instance.id``, KIP-345: a static member joins without MEMBER_ID_REQUIRED, a restarted
instance takes its old place without a rebalance, and the old incarnation is fenced, FENCED_INSTANCE_ID),
with its helpers in ``static_membership`` (docs/groups.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from coordinator.group.core_base import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    UNKNOWN_MEMBER_ID,
    GroupConfig,
    convert_group_store_error,
    convert_store_error,
    default_member_id,
)
from coordinator.group.effects import (
    CommitResult,
    DeleteResult,
    Effect,
    GroupOverview,
    GroupRebalanced,
    GroupSummary,
    JoinMember,
    JoinResult,
    LeaveMemberResult,
    LeaveResult,
    LoadedGroup,
    MemberSummary,
    RebalanceStarted,
    Respond,
    StoreGroup,
    StoreOffsets,
    StoreTombstones,
    StoreTxnOffsets,
    SyncResult,
    TxnOffsetsCommitted,
)
from coordinator.group.group_metadata import GroupMetadata, GroupState, MemberMetadata
from coordinator.group.offsets_core import OffsetsCore
from coordinator.group.static_membership import is_fenced, replace_static_member, static_member_id
from protocol.common import Clock
from protocol.errors import Errors
from protocol.group_records import GroupMetadataValue, MemberMetadataValue

__all__ = [
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "UNKNOWN_MEMBER_ID",
    "CommitResult",
    "DeleteResult",
    "Effect",
    "GroupConfig",
    "GroupCoordinatorCore",
    "GroupOverview",
    "GroupRebalanced",
    "GroupSummary",
    "JoinMember",
    "JoinResult",
    "LeaveMemberResult",
    "LeaveResult",
    "LoadedGroup",
    "MemberSummary",
    "RebalanceStarted",
    "Respond",
    "StoreGroup",
    "StoreOffsets",
    "StoreTombstones",
    "StoreTxnOffsets",
    "SyncResult",
    "TxnOffsetsCommitted",
    "convert_store_error",
    "default_member_id",
]


class GroupCoordinatorCore(OffsetsCore):
    """The groups of the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(
        self,
        config: GroupConfig,
        clock: Clock,
        *,
        new_member_id: Callable[[str], str] = default_member_id,
    ) -> None:
        super().__init__(config, clock)
        self.new_member_id = new_member_id
        # The leader's assignment of each group, until its StoreGroup is committed.
        self._pending_assignment: dict[str, tuple[int, dict[str, bytes]]] = {}

    # ------------------------------------------------------------------ ownership

    def on_election(self, partition: int) -> None:
        """This broker leads ``partition`` now: its groups are loading until :meth:`on_loaded`."""
        self.loading_partitions.add(partition)
        self.owned_partitions.discard(partition)

    def on_loaded(self, partition: int, loaded: dict[str, LoadedGroup]) -> list[Effect]:
        """The partition's records were replayed: its groups are served from now on (Kafka's
        ``onGroupLoaded``: members of a loaded Stable group must heartbeat within their session)."""
        if partition not in self.loading_partitions:
            return []  # resigned while loading
        self.loading_partitions.discard(partition)
        self.owned_partitions.add(partition)
        now = self.clock()
        for group_id, data in loaded.items():
            if self.partition_for(group_id) != partition:
                continue
            group = GroupMetadata(group_id, state_timestamp_ms=now)
            group.offsets.update(data.offsets)
            value = data.metadata
            if value is not None:
                group.generation_id = value.generation
                group.protocol_type = value.protocol_type or None
                group.protocol_name = value.protocol
                group.state_timestamp_ms = value.current_state_timestamp
                for mv in value.members:
                    member = MemberMetadata(
                        member_id=mv.member_id,
                        group_instance_id=mv.group_instance_id,
                        client_id=mv.client_id,
                        client_host=mv.client_host,
                        rebalance_timeout_ms=mv.rebalance_timeout,
                        session_timeout_ms=mv.session_timeout,
                        protocol_type=value.protocol_type,
                        supported_protocols=[(value.protocol or "", mv.subscription)],
                        assignment=mv.assignment,
                    )
                    group.add(member)
                    member.heartbeat_deadline_ms = now + member.session_timeout_ms
                group.leader_id = value.leader if value.leader in group.members else group.leader_id
                if group.members:
                    group.state = GroupState.STABLE
            self.groups[group_id] = group
            if data.pending_txn_offsets:
                self.restore_txn_offsets(group_id, data.pending_txn_offsets)
        return []

    def on_resignation(self, partition: int) -> list[Effect]:
        """This broker no longer leads ``partition``: its groups are unloaded (Kafka's ``onGroupUnloaded``:
        waiting joins and syncs are answered NOT_COORDINATOR)."""
        self.loading_partitions.discard(partition)
        self.owned_partitions.discard(partition)
        effects: list[Effect] = []
        now = self.clock()
        for held in self._txn_offsets.values():
            for group_id in [g for g in held if self.partition_for(g) == partition]:
                del held[group_id]  # the next coordinator reads them back from the log
        for producer_id in [p for p, held in self._txn_offsets.items() if not held]:
            del self._txn_offsets[producer_id]
            self._txn_writes.pop(producer_id, None)
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            group = self.groups.pop(group_id)
            previous = group.state
            group.transition_to(GroupState.DEAD, now)
            for member in group.members.values():
                if previous is GroupState.PREPARING_REBALANCE:
                    token = group.take_join_token(member)
                    if token is not None:
                        effects.append(Respond(token, JoinResult(member.member_id, Errors.NOT_COORDINATOR)))
                token = group.take_sync_token(member)
                if token is not None:
                    effects.append(Respond(token, SyncResult(Errors.NOT_COORDINATOR)))
        return effects

    def shutdown(self) -> list[Effect]:
        effects: list[Effect] = []
        for partition in sorted(self.owned_partitions | self.loading_partitions):
            effects += self.on_resignation(partition)
        self.active = False
        return effects

    # ------------------------------------------------------------------ JoinGroup

    def join_group(
        self,
        token: object,
        group_id: str,
        member_id: str,
        *,
        group_instance_id: str | None = None,
        require_known_member_id: bool = True,
        client_id: str = "",
        client_host: str = "",
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> list[Effect]:
        error = self.validate_group_status(group_id)
        if error is not None:
            return [Respond(token, JoinResult(member_id, error))]
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return [Respond(token, JoinResult(member_id, Errors.INVALID_SESSION_TIMEOUT))]
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return [Respond(token, JoinResult(member_id, Errors.UNKNOWN_MEMBER_ID))]
            group = GroupMetadata(group_id, state_timestamp_ms=self.clock())
            self.groups[group_id] = group
        effects: list[Effect] = []
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            effects.append(Respond(token, JoinResult(UNKNOWN_MEMBER_ID, Errors.GROUP_MAX_SIZE_REACHED)))
        elif is_unknown:
            effects += self._new_member_join(
                token,
                group,
                group_instance_id,
                require_known_member_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )
        else:
            effects += self._current_member_join(
                token,
                group,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )
        if group.is_state(GroupState.PREPARING_REBALANCE):
            effects += self._try_complete_join(group)
        return effects

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return (
                group.has(member_id) and group.get(member_id).is_awaiting_join
            ) or group.num_members_awaiting_join < self.config.max_size
        return group.has(member_id) or group.size < self.config.max_size

    def _new_member_join(
        self,
        token: object,
        group: GroupMetadata,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> list[Effect]:
        if group.is_state(GroupState.DEAD):
            return [Respond(token, JoinResult(UNKNOWN_MEMBER_ID, Errors.COORDINATOR_NOT_AVAILABLE))]
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            return [Respond(token, JoinResult(UNKNOWN_MEMBER_ID, Errors.INCONSISTENT_GROUP_PROTOCOL))]
        new_id = self.new_member_id(group_instance_id if group_instance_id is not None else client_id)
        if group_instance_id is not None:
            # KIP-345: a static member joins at once; a known instance takes its old member's place.
            known = static_member_id(group, group_instance_id)
            if known is not None:
                return self._update_static_member_and_rebalance(
                    token, group, known, new_id, protocols, rebalance_timeout_ms, session_timeout_ms
                )
        elif require_known_member_id:
            # KIP-394: the member must come back with this id within its session timeout.
            group.pending_members[new_id] = self.clock() + session_timeout_ms
            return [Respond(token, JoinResult(new_id, Errors.MEMBER_ID_REQUIRED))]
        return self._add_member_and_rebalance(
            token,
            group,
            new_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
        )

    def _current_member_join(
        self,
        token: object,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> list[Effect]:
        if group.is_state(GroupState.DEAD):
            return [Respond(token, JoinResult(member_id, Errors.COORDINATOR_NOT_AVAILABLE))]
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            return [Respond(token, JoinResult(member_id, Errors.INCONSISTENT_GROUP_PROTOCOL))]
        if group.is_pending_member(member_id):
            return self._add_member_and_rebalance(
                token,
                group,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )
        if is_fenced(group, group_instance_id, member_id):
            return [Respond(token, JoinResult(member_id, Errors.FENCED_INSTANCE_ID))]
        if not group.has(member_id) or (
            group_instance_id is not None and static_member_id(group, group_instance_id) is None
        ):
            return [Respond(token, JoinResult(member_id, Errors.UNKNOWN_MEMBER_ID))]
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, token
            )
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member's join answer was lost: answer it again.
                return [Respond(token, self._join_result(group, member_id))]
            return self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, token
            )
        if state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                return self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, token
                )
            return [Respond(token, self._join_result(group, member_id, include_members=False))]
        return [Respond(token, JoinResult(member_id, Errors.UNKNOWN_MEMBER_ID))]

    def _join_result(
        self, group: GroupMetadata, member_id: str, *, include_members: bool = True
    ) -> JoinResult:
        members: list[JoinMember] = []
        if include_members and group.is_leader(member_id):
            protocol = group.protocol_name or ""
            members = [
                JoinMember(m.member_id, m.group_instance_id, m.metadata(protocol))
                for m in group.members.values()
            ]
        return JoinResult(
            member_id=member_id,
            error=Errors.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=members,
        )

    def _add_member_and_rebalance(
        self,
        token: object,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> list[Effect]:
        member = MemberMetadata(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            supported_protocols=list(protocols),
            is_new=True,
        )
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, token)
        member.heartbeat_deadline_ms = self.clock() + NEW_MEMBER_JOIN_TIMEOUT_MS
        return self._maybe_prepare_rebalance(group, "member_joined", f"adding new member {member_id}")

    def _update_static_member_and_rebalance(
        self,
        token: object,
        group: GroupMetadata,
        old_id: str,
        new_id: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
    ) -> list[Effect]:
        """Kafka's ``updateStaticMemberAndRebalance``: the instance's member continues under ``new_id`` (the
        old id's waiting requests are fenced). In a Stable group whose protocol stays the same the member
        gets the current generation back, with no rebalance, and the group's metadata is written with the
        new id; in CompletingRebalance the group rebalances, so that the leader learns the new id; in
        PreparingRebalance the member joins the rebalance under way."""
        effects: list[Effect] = []
        leader = group.leader_id
        member, join_token, sync_token = replace_static_member(group, old_id, new_id)
        if join_token is not None:
            effects.append(Respond(join_token, JoinResult(old_id, Errors.FENCED_INSTANCE_ID)))
        if sync_token is not None:
            effects.append(Respond(sync_token, SyncResult(Errors.FENCED_INSTANCE_ID)))
        self._heartbeat(member)
        group.update_member(member, list(protocols), rebalance_timeout_ms, session_timeout_ms, token)
        if group.is_state(GroupState.STABLE):
            if group.select_protocol() != group.protocol_name:
                return effects + self._maybe_prepare_rebalance(
                    group, "member_updated", f"updating metadata for static member {new_id}"
                )
            group.take_join_token(member)
            current = {m.member_id: m.assignment for m in group.members.values()}
            value = self._group_value(group, current)
            effects.append(
                StoreGroup(group.group_id, self.partition_for(group.group_id), group.generation_id, value)
            )
            # No member list, and the leader id from before the replacement, so that a restarted leader
            # does not assign again (a Stable group would not pass a new assignment on): JoinGroup up to
            # v8, before KIP-814's skip_assignment.
            result = self._join_result(group, new_id, include_members=False)
            return [*effects, Respond(token, dataclasses.replace(result, leader_id=leader or ""))]
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            return effects + self._prepare_rebalance(
                group, "member_joined", f"static member {old_id} rejoined as {new_id}"
            )
        return effects

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        token: object,
    ) -> list[Effect]:
        state = group.state.value
        group.update_member(member, list(protocols), rebalance_timeout_ms, session_timeout_ms, token)
        return self._maybe_prepare_rebalance(
            group, "member_updated", f"updating metadata for member {member.member_id} during {state}"
        )

    def _maybe_prepare_rebalance(self, group: GroupMetadata, cause: str, reason: str) -> list[Effect]:
        if group.can_rebalance():
            return self._prepare_rebalance(group, cause, reason)
        return []

    def _prepare_rebalance(self, group: GroupMetadata, cause: str, reason: str) -> list[Effect]:
        """Kafka's ``prepareRebalance``: the group goes to PreparingRebalance (journaled as
        ``rebalance_started`` with ``cause`` and Kafka's ``reason``)."""
        effects: list[Effect] = [
            RebalanceStarted(
                group.group_id,
                self.partition_for(group.group_id),
                group.generation_id,
                group.state.value,
                cause,
                reason,
            )
        ]
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            effects += self._reset_and_propagate_assignment_error(group, Errors.REBALANCE_IN_PROGRESS)
        group.pending_sync_members.clear()
        group.sync_deadline_ms = None
        now = self.clock()
        if group.is_state(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            group.join_deadline_ms = now + delay
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
        else:
            group.join_deadline_ms = now + group.rebalance_timeout_ms()
            group.initial_delay_remaining_ms = None
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        self.rebalances += 1
        # Kafka's tryCompleteElseWatch: the join phase may be over at once (nobody left to wait for).
        return effects + self._try_complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> list[Effect]:
        """The join phase ends early once every member rejoined (not during the initial delay)."""
        if (
            group.is_state(GroupState.PREPARING_REBALANCE)
            and group.initial_delay_remaining_ms is None
            and group.has_all_members_joined()
        ):
            return self._complete_join(group)
        return []

    def _on_join_deadline(self, group: GroupMetadata) -> list[Effect]:
        remaining = group.initial_delay_remaining_ms
        if remaining is not None and group.new_member_added and remaining != 0:
            # Kafka's InitialDelayedJoin: new members arrived; wait another delay, within the budget.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            group.join_deadline_ms = self.clock() + delay
            group.initial_delay_remaining_ms = max(remaining - delay, 0)
            return []
        return self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> list[Effect]:
        """Kafka's ``onCompleteJoin``."""
        group.join_deadline_ms = None
        group.initial_delay_remaining_ms = None
        effects: list[Effect] = []
        for failed in [m for m in group.not_yet_rejoined_members() if m.group_instance_id is None]:
            group.remove(failed.member_id)
        if group.is_state(GroupState.DEAD):
            return effects
        if not group.maybe_elect_new_joined_leader() and group.members:
            # No member rejoined: wait another rebalance timeout.
            group.join_deadline_ms = self.clock() + group.rebalance_timeout_ms()
            return effects
        now = self.clock()
        group.init_next_generation(now)
        partition = self.partition_for(group.group_id)
        effects.append(
            GroupRebalanced(
                group.group_id,
                partition,
                group.generation_id,
                group.state.value,
                group.protocol_type,
                group.protocol_name,
                group.leader_id,
                list(group.members),
            )
        )
        if group.is_state(GroupState.EMPTY):
            effects.append(
                StoreGroup(group.group_id, partition, group.generation_id, self._group_value(group, {}))
            )
            return effects
        for member in group.members.values():
            token = group.take_join_token(member)
            if token is not None:
                effects.append(Respond(token, self._join_result(group, member.member_id)))
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_deadline_ms = now + group.rebalance_timeout_ms()
        group.sync_generation = group.generation_id
        return effects

    # ------------------------------------------------------------------ SyncGroup

    def sync_group(
        self,
        token: object,
        group_id: str,
        generation_id: int,
        member_id: str,
        *,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        group_instance_id: str | None = None,
        assignments: dict[str, bytes],
    ) -> list[Effect]:
        error = self.validate_group_status(group_id)
        if error is Errors.COORDINATOR_LOAD_IN_PROGRESS:
            # The group will be found Stable after loading; the member must rejoin (as Kafka answers).
            return [Respond(token, SyncResult(Errors.REBALANCE_IN_PROGRESS))]
        if error is not None:
            return [Respond(token, SyncResult(error))]
        group = self.groups.get(group_id)
        if group is None:
            return [Respond(token, SyncResult(Errors.UNKNOWN_MEMBER_ID))]
        if group.is_state(GroupState.DEAD):
            return [Respond(token, SyncResult(Errors.COORDINATOR_NOT_AVAILABLE))]
        if is_fenced(group, group_instance_id, member_id):
            return [Respond(token, SyncResult(Errors.FENCED_INSTANCE_ID))]
        if not group.has(member_id):
            return [Respond(token, SyncResult(Errors.UNKNOWN_MEMBER_ID))]
        if generation_id != group.generation_id:
            return [Respond(token, SyncResult(Errors.ILLEGAL_GENERATION))]
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return [Respond(token, SyncResult(Errors.INCONSISTENT_GROUP_PROTOCOL))]
        member = group.get(member_id)
        if group.is_state(GroupState.EMPTY):
            return [Respond(token, SyncResult(Errors.UNKNOWN_MEMBER_ID))]
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return [Respond(token, SyncResult(Errors.REBALANCE_IN_PROGRESS))]
        if group.is_state(GroupState.STABLE):
            group.pending_sync_members.discard(member_id)
            self._heartbeat(member)
            return [
                Respond(
                    token,
                    SyncResult(Errors.NONE, group.protocol_type, group.protocol_name, member.assignment),
                )
            ]
        # CompletingRebalance: wait for the leader's assignment to be stored.
        member.awaiting_sync = token
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            group.sync_deadline_ms = None  # every member synced (Kafka's DelayedSync completes)
        if not group.is_leader(member_id):
            return []
        full = {m: assignments.get(m, b"") for m in group.members}
        self._pending_assignment[group_id] = (group.generation_id, full)
        self.completed_rebalances += 1
        return [
            StoreGroup(
                group_id, self.partition_for(group_id), group.generation_id, self._group_value(group, full)
            )
        ]

    def on_group_stored(self, store: StoreGroup, error: Errors) -> list[Effect]:
        """The outcome of a :class:`StoreGroup`; the leader's assignment takes effect only once stored."""
        group_id, generation_id = store.group_id, store.generation_id
        pending = self._pending_assignment.get(group_id)
        group = self.groups.get(group_id)
        if pending is None or group is None or pending[0] != generation_id:
            return []  # not the leader's assignment (a static member's new id written), or a stale one
        del self._pending_assignment[group_id]
        if not (group.is_state(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation_id):
            return []
        if error != Errors.NONE:
            effects = self._reset_and_propagate_assignment_error(group, convert_group_store_error(error))
            return effects + self._maybe_prepare_rebalance(
                group, "store_failed", f"error {error.name} when storing group assignment during SyncGroup"
            )
        assignment = pending[1]
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        effects = self._propagate_assignment(group, Errors.NONE)
        group.transition_to(GroupState.STABLE, self.clock())
        return effects

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: Errors) -> list[Effect]:
        for member in group.members.values():
            member.assignment = b""
        return self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: Errors) -> list[Effect]:
        effects: list[Effect] = []
        ok = error == Errors.NONE
        for member in group.members.values():
            token = group.take_sync_token(member)
            if token is not None:
                effects.append(
                    Respond(
                        token,
                        SyncResult(
                            error,
                            group.protocol_type if ok else None,
                            group.protocol_name if ok else None,
                            member.assignment,
                        ),
                    )
                )
                self._heartbeat(member)
        return effects

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(
        self,
        token: object,
        group_id: str,
        member_id: str,
        generation_id: int,
        *,
        group_instance_id: str | None = None,
    ) -> list[Effect]:
        error = self.validate_group_status(group_id)
        if error is Errors.COORDINATOR_LOAD_IN_PROGRESS:
            return [Respond(token, Errors.NONE)]  # the member keeps going until the group is loaded
        if error is not None:
            return [Respond(token, error)]
        group = self.groups.get(group_id)
        if group is None:
            return [Respond(token, Errors.UNKNOWN_MEMBER_ID)]
        if group.is_state(GroupState.DEAD):
            return [Respond(token, Errors.COORDINATOR_NOT_AVAILABLE)]
        if is_fenced(group, group_instance_id, member_id):
            return [Respond(token, Errors.FENCED_INSTANCE_ID)]
        if not group.has(member_id):
            return [Respond(token, Errors.UNKNOWN_MEMBER_ID)]
        if generation_id != group.generation_id:
            return [Respond(token, Errors.ILLEGAL_GENERATION)]
        if group.is_state(GroupState.EMPTY):
            return [Respond(token, Errors.UNKNOWN_MEMBER_ID)]
        self._heartbeat(group.get(member_id))
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return [Respond(token, Errors.REBALANCE_IN_PROGRESS)]
        return [Respond(token, Errors.NONE)]

    # ------------------------------------------------------------------ LeaveGroup

    def leave_group(
        self, token: object, group_id: str, leaving: Iterable[tuple[str, str | None]]
    ) -> list[Effect]:
        """``leaving``: (member_id, group_instance_id) of each member that leaves."""
        leaving = list(leaving)
        error = self.validate_group_status(group_id)
        if error is not None:
            return [Respond(token, LeaveResult(error))]
        group = self.groups.get(group_id)
        if group is None:
            return [
                Respond(
                    token,
                    LeaveResult(
                        Errors.NONE, [LeaveMemberResult(m, i, Errors.UNKNOWN_MEMBER_ID) for m, i in leaving]
                    ),
                )
            ]
        if group.is_state(GroupState.DEAD):
            return [Respond(token, LeaveResult(Errors.COORDINATOR_NOT_AVAILABLE))]
        effects: list[Effect] = []
        results: list[LeaveMemberResult] = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                # KIP-345: a static member leaves by its instance id (kafka-consumer-groups and the admin
                # client send no member id); a member id of another incarnation is fenced.
                if is_fenced(group, instance_id, member_id) and member_id != UNKNOWN_MEMBER_ID:
                    results.append(LeaveMemberResult(member_id, instance_id, Errors.FENCED_INSTANCE_ID))
                    continue
                known = static_member_id(group, instance_id)
                if known is None:
                    results.append(LeaveMemberResult(member_id, instance_id, Errors.UNKNOWN_MEMBER_ID))
                    continue
                effects += self._remove_member_and_update_group(group, group.get(known), "member_left")
                results.append(LeaveMemberResult(member_id, instance_id, Errors.NONE))
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                if group.is_state(GroupState.PREPARING_REBALANCE):
                    effects += self._try_complete_join(group)
                results.append(LeaveMemberResult(member_id, instance_id, Errors.NONE))
            elif member_id == UNKNOWN_MEMBER_ID or not group.has(member_id):
                results.append(LeaveMemberResult(member_id, instance_id, Errors.UNKNOWN_MEMBER_ID))
            else:
                effects += self._remove_member_and_update_group(group, group.get(member_id), "member_left")
                results.append(LeaveMemberResult(member_id, instance_id, Errors.NONE))
        return [Respond(token, LeaveResult(Errors.NONE, results)), *effects]

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, cause: str
    ) -> list[Effect]:
        """``cause``: ``member_left`` (LeaveGroup) or ``member_expired`` (no heartbeat in time)."""
        effects: list[Effect] = []
        token = group.take_join_token(member)
        if token is not None:
            effects.append(Respond(token, JoinResult(UNKNOWN_MEMBER_ID, Errors.UNKNOWN_MEMBER_ID)))
        group.remove(member.member_id)
        member.heartbeat_deadline_ms = None
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            why = "on LeaveGroup" if cause == "member_left" else "on heartbeat expiration"
            effects += self._maybe_prepare_rebalance(
                group, cause, f"removing member {member.member_id} {why}"
            )
        elif group.is_state(GroupState.PREPARING_REBALANCE):
            effects += self._try_complete_join(group)
        return effects

    # ------------------------------------------------------------------ ListGroups / DescribeGroups

    def list_groups(self, states: set[str] | None = None) -> tuple[Errors, list[GroupOverview]]:
        if not self.active:
            return Errors.COORDINATOR_NOT_AVAILABLE, []
        error = Errors.COORDINATOR_LOAD_IN_PROGRESS if self.loading_partitions else Errors.NONE
        wanted = None if not states else {s.lower() for s in states}
        out = [
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if wanted is None or g.state.value.lower() in wanted
        ]
        return error, out

    def describe_group(self, group_id: str) -> tuple[Errors, GroupSummary]:
        error = self.validate_group_status(group_id, empty_allowed=True)
        if error is not None:
            return error, GroupSummary("", "", "", [])
        group = self.groups.get(group_id)
        if group is None:
            return Errors.NONE, GroupSummary(GroupState.DEAD.value, "", "", [])
        stable = group.is_state(GroupState.STABLE)
        protocol = group.protocol_name or "" if stable else ""
        members = [
            MemberSummary(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(protocol) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return Errors.NONE, GroupSummary(group.state.value, group.protocol_type or "", protocol, members)

    # ------------------------------------------------------------------ timers

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for group in self.groups.values():
            deadlines += group.pending_members.values()
            deadlines += (m.heartbeat_deadline_ms for m in group.members.values() if m.heartbeat_deadline_ms)
            if group.join_deadline_ms is not None:
                deadlines.append(group.join_deadline_ms)
            if group.sync_deadline_ms is not None:
                deadlines.append(group.sync_deadline_ms)
        cleanup = self.next_cleanup_ms()
        if cleanup is not None:
            deadlines.append(cleanup)
        return min(deadlines, default=None)

    def poll(self) -> list[Effect]:
        """Expire everything whose deadline has passed."""
        now = self.clock()
        effects: list[Effect] = []
        effects += self.maybe_expire_offsets(now)
        for group in list(self.groups.values()):
            if group.is_state(GroupState.DEAD):
                continue
            for member_id, deadline in list(group.pending_members.items()):
                if deadline <= now:
                    group.remove(member_id)
                    if group.is_state(GroupState.PREPARING_REBALANCE):
                        effects += self._try_complete_join(group)
            for member in list(group.members.values()):
                expiry = member.heartbeat_deadline_ms
                if expiry is None or expiry > now or not group.has(member.member_id):
                    continue
                if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
                    member.heartbeat_deadline_ms = None  # a member in a rebalance needs no heartbeat
                    continue
                effects += self._remove_member_and_update_group(group, member, "member_expired")
            if group.join_deadline_ms is not None and group.join_deadline_ms <= now:
                effects += self._on_join_deadline(group)
            if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now:
                effects += self._on_sync_deadline(group)
        return effects

    def _on_sync_deadline(self, group: GroupMetadata) -> list[Effect]:
        """Kafka's ``onExpirePendingSync``: members that did not send SyncGroup in time are removed."""
        group.sync_deadline_ms = None
        if group.sync_generation != group.generation_id:
            return []
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return []
        if not group.pending_sync_members:
            return []
        late = sorted(group.pending_sync_members)
        for member_id in late:
            group.remove(member_id)
        return self._prepare_rebalance(
            group, "member_expired", f"removing {', '.join(late)} on pending sync request expiration"
        )

    # ------------------------------------------------------------------ records

    def _group_value(self, group: GroupMetadata, assignment: dict[str, bytes]) -> GroupMetadataValue:
        protocol = group.protocol_name
        return GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp_ms,
            members=[
                MemberMetadataValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(protocol) if protocol is not None else b"",
                    assignment=assignment.get(m.member_id, b""),
                )
                for m in group.members.values()
            ],
        )
