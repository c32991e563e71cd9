"""``QuorumState``: a voter's current epoch state and every transition between states (Kafka's
``QuorumState``).

Each transition first writes the new election state (epoch, voted_for, leader) to the
``QuorumStateStore`` and only then takes effect, so a vote is on disk before it is granted and a voter that
restarts resumes where it was: as the candidate it was, with the vote it gave, following the leader it
knew, or resigned if it was the leader (Kafka's ``QuorumState.initialize``). Each transition is journaled as
a ``quorum_state`` event (``role``, ``epoch``, ``voted_for``, ``leader_id``).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

from raft.election_state import ElectionState, QuorumStateStore
from raft.epoch_states import (
    CandidateState,
    EpochState,
    FollowerState,
    LeaderState,
    ResignedState,
    UnattachedState,
)
from raft.messages import NO_LEADER
from raft.raft_log import RaftLog

log = logging.getLogger(__name__)

JournalEvent = tuple[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """Kafka's ``QuorumConfig`` (``controller.quorum.*``)."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 8 * 1024 * 1024


class QuorumState:
    def __init__(
        self,
        local_id: int,
        voters: frozenset[int],
        store: QuorumStateStore,
        log: RaftLog,
        config: QuorumConfig,
        rng: random.Random,
    ) -> None:
        if local_id not in voters:
            raise ValueError(f"node {local_id} is not one of the voters {sorted(voters)}")
        self.local_id = local_id
        self.voters = voters
        self.store = store
        self.log = log
        self.config = config
        self.rng = rng
        self.state: EpochState = UnattachedState(0, 0)
        self.events: list[JournalEvent] = []

    # ------------------------------------------------------------------------------------ views

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int:
        return self.state.leader_id

    def has_leader(self) -> bool:
        return self.state.leader_id != NO_LEADER

    def is_only_voter(self) -> bool:
        return self.voters == frozenset({self.local_id})

    def random_election_timeout_ms(self) -> int:
        """``controller.quorum.election.timeout.ms`` plus a random share of it (Kafka's rule)."""
        timeout = self.config.election_timeout_ms
        return timeout + self.rng.randrange(max(timeout, 1))

    # ------------------------------------------------------------------------------------ start

    def initialize(self, now_ms: int) -> None:
        stored = self.store.read()
        log_epoch = self.log.last_fetched_epoch()
        election_deadline = now_ms + self.random_election_timeout_ms()
        if stored is None:
            self.state = UnattachedState(0, election_deadline)
        elif stored.epoch < log_epoch:
            # The log holds a later epoch than the file: the file is behind (restored, or lost); start at the
            # log's epoch, knowing nothing of it.
            log.warning(
                "node %d: quorum-state epoch %d is below the log's latest epoch %d; unattached at %d",
                self.local_id,
                stored.epoch,
                log_epoch,
                log_epoch,
            )
            self.state = UnattachedState(log_epoch, election_deadline)
        elif stored.leader_id == self.local_id:
            self.state = ResignedState(
                stored.epoch, self.local_id, election_deadline, set(self.voters - {self.local_id})
            )
        elif stored.voted_for == self.local_id and stored.leader_id == NO_LEADER:
            self.state = CandidateState(stored.epoch, self.local_id, self.voters, election_deadline)
        elif stored.leader_id != NO_LEADER:
            self.state = FollowerState(
                stored.epoch,
                stored.leader_id,
                now_ms + self.config.fetch_timeout_ms,
                voted_for=stored.voted_for,
            )
        else:
            self.state = UnattachedState(stored.epoch, election_deadline, voted_for=stored.voted_for)
        self._journal()

    # ------------------------------------------------------------------------------------ transitions

    def _write(self, epoch: int, voted_for: int, leader_id: int) -> None:
        self.store.write(ElectionState(epoch, voted_for, leader_id, tuple(sorted(self.voters))))

    def _journal(self) -> None:
        s = self.state
        # The journal's roles are SPEC's four (candidate, leader, follower, resigned): an unattached voter
        # (KRaft's name for one that knows the epoch but no leader yet, having voted or not) is a follower
        # that knows no leader, as Raft calls it: leader_id -1.
        role = "follower" if s.name == "unattached" else s.name
        self.events.append(
            (
                "quorum_state",
                {"role": role, "epoch": s.epoch, "voted_for": s.voted_for, "leader_id": s.leader_id},
            )
        )
        log.info(
            "node %d: %s in epoch %d (voted for %d, leader %d)",
            self.local_id,
            s.name,
            s.epoch,
            s.voted_for,
            s.leader_id,
        )

    def transition_to_unattached(self, epoch: int, now_ms: int) -> None:
        if epoch <= self.epoch:
            raise ValueError(
                f"cannot become unattached in epoch {epoch} from {self.state.name} in {self.epoch}"
            )
        self._write(epoch, NO_LEADER, NO_LEADER)
        self.state = UnattachedState(epoch, now_ms + self.random_election_timeout_ms())
        self._journal()

    def transition_to_unattached_voted(self, epoch: int, candidate_id: int, now_ms: int) -> None:
        state = self.state
        if not isinstance(state, UnattachedState) or state.epoch != epoch or state.voted_for != NO_LEADER:
            raise ValueError(
                f"cannot vote for {candidate_id} in epoch {epoch} as {state.name} in {self.epoch}"
            )
        self._write(epoch, candidate_id, NO_LEADER)
        self.state = UnattachedState(
            epoch, now_ms + self.random_election_timeout_ms(), voted_for=candidate_id
        )
        self._journal()

    def transition_to_candidate(self, now_ms: int) -> None:
        retries = self.state.retries + 1 if isinstance(self.state, CandidateState) else 1
        epoch = self.epoch + 1
        self._write(epoch, self.local_id, NO_LEADER)
        self.state = CandidateState(
            epoch, self.local_id, self.voters, now_ms + self.random_election_timeout_ms(), retries=retries
        )
        self._journal()

    def transition_to_leader(self, now_ms: int) -> LeaderState:
        state = self.state
        if not isinstance(state, CandidateState) or not state.is_vote_granted():
            raise ValueError(f"cannot become leader as {state.name} without a majority of votes")
        self._write(state.epoch, self.local_id, self.local_id)
        check_quorum_ms = self.config.fetch_timeout_ms * 3 // 2
        leader = LeaderState(
            epoch=state.epoch,
            local_id=self.local_id,
            voters=self.voters,
            epoch_start_offset=self.log.end_offset,
            granting_voters=frozenset(state.granted),
            check_quorum_timeout_ms=check_quorum_ms,
            check_quorum_deadline_ms=now_ms + check_quorum_ms,
            begin_quorum_epoch_timeout_ms=self.config.fetch_timeout_ms // 2,
        )
        self.state = leader
        self._journal()
        return leader

    def transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        state = self.state
        if epoch < self.epoch or (epoch == self.epoch and state.leader_id not in (NO_LEADER, leader_id)):
            raise ValueError(
                f"cannot follow {leader_id} in epoch {epoch} as {state.name} in {self.epoch} "
                f"(leader {state.leader_id})"
            )
        voted_for = state.voted_for if epoch == self.epoch else NO_LEADER
        self._write(epoch, voted_for, leader_id)
        self.state = FollowerState(
            epoch, leader_id, now_ms + self.config.fetch_timeout_ms, voted_for=voted_for
        )
        self._journal()

    def transition_to_resigned(self, preferred_successors: list[int], now_ms: int) -> None:
        state = self.state
        if not isinstance(state, LeaderState):
            raise ValueError(f"only a leader resigns, not a {state.name}")
        # The election state is unchanged (the leader of this epoch is still this voter).
        self.state = ResignedState(
            state.epoch,
            self.local_id,
            now_ms + self.random_election_timeout_ms(),
            set(self.voters - {self.local_id}),
            tuple(preferred_successors),
        )
        self._journal()


__all__ = ["JournalEvent", "QuorumConfig", "QuorumState"]
