"""A driver for the pure group coordinator: a fake clock, tokens named by the test, and the answers and
writes the core asks for, with writes committed (or failed) when the test says."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from coordinator.group.coordinator_core import (
    CommitResult,
    Effect,
    GroupConfig,
    GroupCoordinatorCore,
    GroupRebalanced,
    JoinResult,
    LeaveResult,
    RebalanceStarted,
    Respond,
    StoreGroup,
    StoreOffsets,
    StoreTombstones,
    SyncResult,
)
from coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from protocol.common import MockTime
from protocol.errors import Errors

GROUP = "group"
PROTOCOLS = [("range", b"range-meta")]
SESSION = 10_000
REBALANCE = 30_000
DELAY = 3000


@dataclass
class Harness:
    config: GroupConfig = field(default_factory=lambda: GroupConfig(initial_rebalance_delay_ms=DELAY))
    clock: MockTime = field(default_factory=lambda: MockTime(1_000_000))
    answers: dict[str, Any] = field(default_factory=dict)
    group_writes: list[StoreGroup] = field(default_factory=list)
    offset_writes: list[StoreOffsets] = field(default_factory=list)
    rebalanced: list[GroupRebalanced] = field(default_factory=list)
    started: list[RebalanceStarted] = field(default_factory=list)
    tombstones: list[StoreTombstones] = field(default_factory=list)
    auto_store: bool = True

    def __post_init__(self) -> None:
        ids = itertools.count(1)
        self.core = GroupCoordinatorCore(self.config, self.clock, new_member_id=lambda p: f"{p}-{next(ids)}")
        partition = self.core.partition_for(GROUP)
        self.core.on_election(partition)
        self.core.on_loaded(partition, {})

    # ------------------------------------------------------------------ effects

    def apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                assert isinstance(effect.token, str)
                assert effect.token not in self.answers, f"{effect.token} answered twice"
                self.answers[effect.token] = effect.result
            elif isinstance(effect, StoreGroup):
                self.group_writes.append(effect)
                if self.auto_store:
                    self.apply(self.core.on_group_stored(effect, Errors.NONE))
            elif isinstance(effect, StoreOffsets):
                self.offset_writes.append(effect)
                if self.auto_store:
                    self.apply(self.core.on_offsets_stored(effect, Errors.NONE))
            elif isinstance(effect, StoreTombstones):
                self.tombstones.append(effect)
            elif isinstance(effect, RebalanceStarted):
                self.started.append(effect)
            else:
                self.rebalanced.append(effect)

    def answer(self, token: str) -> Any:
        return self.answers.pop(token, None)

    def advance(self, ms: int) -> None:
        """Move the clock, firing every deadline on the way in order."""
        target = self.clock.now_ms + ms
        while True:
            deadline = self.core.next_deadline_ms()
            if deadline is None or deadline > target:
                break
            self.clock.now_ms = max(self.clock.now_ms, deadline)
            self.apply(self.core.poll())
        self.clock.now_ms = target
        self.apply(self.core.poll())

    # ------------------------------------------------------------------ requests

    def join(
        self,
        token: str,
        member_id: str = "",
        *,
        group: str = GROUP,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session: int = SESSION,
        rebalance: int = REBALANCE,
        require_known: bool = True,
        client_id: str = "client",
        instance: str | None = None,
    ) -> JoinResult | None:
        self.apply(
            self.core.join_group(
                token,
                group,
                member_id,
                group_instance_id=instance,
                require_known_member_id=require_known,
                client_id=client_id,
                client_host="/127.0.0.1",
                rebalance_timeout_ms=rebalance,
                session_timeout_ms=session,
                protocol_type=protocol_type,
                protocols=PROTOCOLS if protocols is None else protocols,
            )
        )
        result = self.answer(token)
        assert result is None or isinstance(result, JoinResult)
        return result

    def new_member_id(self, token: str, **kwargs: Any) -> str:
        """KIP-394's first round trip: the id the coordinator hands out."""
        result = self.join(token, **kwargs)
        assert result is not None and result.error == Errors.MEMBER_ID_REQUIRED
        return result.member_id

    def sync(
        self,
        token: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = GROUP,
        instance: str | None = None,
    ) -> SyncResult | None:
        self.apply(
            self.core.sync_group(
                token, group, generation, member_id, group_instance_id=instance, assignments=assignments or {}
            )
        )
        result = self.answer(token)
        assert result is None or isinstance(result, SyncResult)
        return result

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = GROUP, instance: str | None = None
    ) -> Errors:
        self.apply(self.core.heartbeat("hb", group, member_id, generation, group_instance_id=instance))
        result = self.answer("hb")
        assert isinstance(result, Errors)
        return result

    def leave(self, *member_ids: str, group: str = GROUP) -> LeaveResult:
        self.apply(self.core.leave_group("leave", group, [(m, None) for m in member_ids]))
        result = self.answer("leave")
        assert isinstance(result, LeaveResult)
        return result

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        *,
        member_id: str = "",
        generation: int = -1,
        group: str = GROUP,
        metadata: str = "",
    ) -> CommitResult | None:
        self.apply(
            self.core.commit_offsets(
                "commit",
                group,
                member_id,
                generation,
                {tp: OffsetAndMetadata(o, metadata=metadata) for tp, o in offsets.items()},
            )
        )
        result = self.answer("commit")
        assert result is None or isinstance(result, CommitResult)
        return result

    def state(self, group: str = GROUP) -> GroupState:
        return self.core.groups[group].state

    def stable_group(self, *tokens: str) -> tuple[list[str], int]:
        """Members named by ``tokens`` join and sync (the first is the leader); their ids and generation."""
        ids = [self.new_member_id(f"{t}-id") for t in tokens]
        for token, member_id in zip(tokens, ids, strict=True):
            self.join(token, member_id)
        # The first delay ends with members added during it, so a second one follows (InitialDelayedJoin).
        self.advance(DELAY if len(tokens) == 1 else 2 * DELAY)
        results = [self.answer(t) for t in tokens]
        assert all(r is not None and r.error == Errors.NONE for r in results), results
        generation = results[0].generation_id
        leader = results[0].leader_id
        for token, member_id in zip(tokens, ids, strict=True):
            if member_id != leader:
                assert self.sync(f"{token}-sync", member_id, generation) is None
        assignments = {m: f"assignment-{m}".encode() for m in ids}
        leader_sync = self.sync("leader-sync", leader, generation, assignments)
        assert leader_sync is not None and leader_sync.error == Errors.NONE
        for token, member_id in zip(tokens, ids, strict=True):
            if member_id != leader:
                assert self.answers.pop(f"{token}-sync").error == Errors.NONE
        assert self.state() is GroupState.STABLE
        return ids, generation
