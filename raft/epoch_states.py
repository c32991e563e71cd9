"""A voter's state within one epoch (Kafka's ``EpochState`` implementations, KIP-595).

- :class:`UnattachedState`: the epoch is known, its leader is not; ``voted_for`` is the candidate this
  voter granted its vote in the epoch, if any (Kafka's ``UnattachedState`` with a voted key). An election
  timeout makes the voter a candidate.
- :class:`CandidateState`: asking for votes in the epoch it started; a majority makes it leader; a
  majority of rejections or its election timeout makes it back off, then try the next epoch.
- :class:`LeaderState`: the voters' end offsets, the high watermark (only a majority moves it, and only
  past the epoch's start offset: the leader must commit an entry of its own epoch first), which voters
  still need BEGIN_QUORUM_EPOCH, and the check-quorum timer (no fetches from a majority within 1.5 x
  ``controller.quorum.fetch.timeout.ms``: the leader resigns).
- :class:`FollowerState`: fetching from a known leader; no successful fetch within
  ``controller.quorum.fetch.timeout.ms`` makes it a candidate.
- :class:`ResignedState`: a leader that stepped down (clean stop, lost quorum, or restart): it tells the
  voters with END_QUORUM_EPOCH and grants no vote in its epoch.

Times are absolute monotonic milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raft.messages import NO_LEADER


@dataclass(slots=True)
class UnattachedState:
    epoch: int
    election_deadline_ms: int
    voted_for: int = NO_LEADER
    name: str = "unattached"

    @property
    def leader_id(self) -> int:
        return NO_LEADER

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        if self.voted_for != NO_LEADER:
            return self.voted_for == candidate_id
        return log_up_to_date


@dataclass(slots=True)
class CandidateState:
    epoch: int
    local_id: int
    voters: frozenset[int]
    election_deadline_ms: int
    retries: int = 1
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_deadline_ms: int | None = None
    name: str = "candidate"

    def __post_init__(self) -> None:
        self.granted.add(self.local_id)

    @property
    def leader_id(self) -> int:
        return NO_LEADER

    @property
    def voted_for(self) -> int:
        return self.local_id

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def is_vote_granted(self) -> bool:
        return len(self.granted) >= self.majority

    def is_vote_rejected(self) -> bool:
        return len(self.rejected) >= self.majority

    def unrecorded_voters(self) -> list[int]:
        return sorted(self.voters - self.granted - self.rejected)

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return False


@dataclass(slots=True)
class ReplicaState:
    replica_id: int
    end_offset: int | None = None
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    acknowledged: bool = False


@dataclass(slots=True)
class LeaderState:
    epoch: int
    local_id: int
    voters: frozenset[int]
    epoch_start_offset: int
    granting_voters: frozenset[int]
    check_quorum_timeout_ms: int
    check_quorum_deadline_ms: int
    begin_quorum_epoch_timeout_ms: int
    high_watermark: int | None = None
    voter_states: dict[int, ReplicaState] = field(default_factory=dict)
    fetched_voters: set[int] = field(default_factory=set)
    begin_quorum_epoch_deadline_ms: int = 0
    name: str = "leader"

    def __post_init__(self) -> None:
        for v in self.voters:
            self.voter_states[v] = ReplicaState(v, acknowledged=v == self.local_id)

    @property
    def leader_id(self) -> int:
        return self.local_id

    @property
    def voted_for(self) -> int:
        return self.local_id

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return False

    def non_acknowledging_voters(self) -> list[int]:
        return sorted(v for v, s in self.voter_states.items() if not s.acknowledged)

    def acknowledge(self, voter_id: int) -> None:
        state = self.voter_states.get(voter_id)
        if state is not None:
            state.acknowledged = True

    def update_local_state(self, end_offset: int, now_ms: int) -> bool:
        """The leader's own log end offset (after flush); True if the high watermark moved."""
        state = self.voter_states[self.local_id]
        state.end_offset = end_offset
        state.last_fetch_ms = state.last_caught_up_ms = now_ms
        return self._maybe_update_high_watermark()

    def update_replica_state(
        self, replica_id: int, fetch_offset: int, leader_end_offset: int, now_ms: int
    ) -> bool:
        """A voter fetched at ``fetch_offset`` (its log end offset); True if the high watermark moved."""
        state = self.voter_states.get(replica_id)
        if state is None:
            return False
        state.acknowledged = True
        state.end_offset = fetch_offset
        state.last_fetch_ms = now_ms
        if fetch_offset >= leader_end_offset:
            state.last_caught_up_ms = now_ms
        return self._maybe_update_high_watermark()

    def _maybe_update_high_watermark(self) -> bool:
        """Kafka's ``LeaderState.maybeUpdateHighWatermark``: the largest end offset a majority (the leader
        counted) has reached, once it is past the epoch's start offset, and never backwards."""
        offsets = sorted(
            (s.end_offset for s in self.voter_states.values() if s.end_offset is not None), reverse=True
        )
        index = len(self.voter_states) // 2
        if index >= len(offsets):
            return False
        candidate = offsets[index]
        if candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def update_check_quorum(self, voter_id: int, now_ms: int) -> None:
        """Kafka's ``updateCheckQuorumForFollowingVoter``: a fetch from a voter; once a majority (the
        leader counted) fetched, the check-quorum timer starts again."""
        if voter_id in self.voter_states and voter_id != self.local_id:
            self.fetched_voters.add(voter_id)
        if len(self.fetched_voters) >= len(self.voters) // 2:
            self.fetched_voters.clear()
            self.check_quorum_deadline_ms = now_ms + self.check_quorum_timeout_ms

    def check_quorum_expired(self, now_ms: int) -> bool:
        return len(self.voters) > 1 and now_ms >= self.check_quorum_deadline_ms

    def voters_by_descending_end_offset(self) -> list[int]:
        """The other voters, the most caught-up first (END_QUORUM_EPOCH's preferred successors)."""
        others = [s for v, s in self.voter_states.items() if v != self.local_id]
        others.sort(key=lambda s: (-(s.end_offset if s.end_offset is not None else -1), s.replica_id))
        return [s.replica_id for s in others]


@dataclass(slots=True)
class FollowerState:
    epoch: int
    leader_id: int
    fetch_deadline_ms: int
    voted_for: int = NO_LEADER
    name: str = "follower"

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return False


@dataclass(slots=True)
class ResignedState:
    epoch: int
    local_id: int
    election_deadline_ms: int
    unacknowledged: set[int]
    preferred_successors: tuple[int, ...] = ()
    name: str = "resigned"

    @property
    def leader_id(self) -> int:
        return self.local_id

    @property
    def voted_for(self) -> int:
        return self.local_id

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool) -> bool:
        return False


EpochState = UnattachedState | CandidateState | LeaderState | FollowerState | ResignedState

__all__ = [
    "CandidateState",
    "EpochState",
    "FollowerState",
    "LeaderState",
    "ReplicaState",
    "ResignedState",
    "UnattachedState",
]
