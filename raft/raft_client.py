"""``KafkaRaftClient``: one voter of the controller quorum as a synchronous state machine (KIP-595).

Sans-I/O: the shell calls :meth:`poll` when :meth:`next_deadline_ms` comes (or after anything happened),
hands every request to :meth:`handle_request` (which answers at once) and every response to
:meth:`handle_response`, and after each call takes :meth:`drain`'s effects: the requests to send and the
journal events. The quorum state is written to its store inside the transition, before the effects of
the call exist, so the shell cannot send a vote before it is durable. The log is written and flushed
inside the call too (a voter acknowledges only what it has flushed).

The rules are Kafka's ``KafkaRaftClient``:

- An unattached voter, or a follower that has not fetched successfully for
  ``controller.quorum.fetch.timeout.ms``, or a resigned leader after its election timeout, becomes a
  candidate: epoch + 1, a vote for itself (on disk), VOTE to every voter with its last epoch and log end
  offset. A voter grants one vote per epoch, to a candidate whose log is at least as up to date as its own
  (last epoch, then end offset). A majority elects; a majority of rejections, or the randomized election
  timeout, makes the candidate back off (randomly, at most ``election_backoff_max_ms``) and try again.
- A new leader writes a LeaderChange entry at the start of its epoch and sends BEGIN_QUORUM_EPOCH to
  every voter until each answers or fetches. Followers pull with FETCH (``fetch_offset``,
  ``last_fetched_epoch``); the leader answers a fetch whose last epoch disagrees with its log with
  ``diverging_epoch`` and the follower truncates (``truncate_to_end_offset``) before fetching again.
- The high watermark is the largest offset a majority has flushed, once it is past the leader's epoch
  start (``LeaderState``). Only entries below it are committed.
- A higher epoch in any request or response moves a voter on to that epoch (following its leader when
  named). A leader that has not heard a fetch from a majority for 1.5 x the fetch timeout resigns; a
  leader stopping cleanly resigns and sends END_QUORUM_EPOCH naming its preferred successors (the most
  caught-up first), which shortens their fetch timeouts.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

from protocol.errors import Errors
from raft import messages as rm
from raft.election_state import QuorumStateStore
from raft.epoch_states import CandidateState, FollowerState, LeaderState, ResignedState, UnattachedState
from raft.messages import NO_LEADER
from raft.quorum_state import JournalEvent, QuorumConfig, QuorumState
from raft.raft_log import OffsetAndEpoch, RaftLog, truncate_to_end_offset, validate_offset_and_epoch
from raft.records import leader_change_value

log = logging.getLogger(__name__)

NEVER = 2**62


class RaftSafetyError(Exception):
    """Something Raft's guarantees say cannot happen did (a bug, or a voter's disk lost acknowledged
    data): the voter stops rather than act on it."""


@dataclass(frozen=True, slots=True)
class Outbound:
    destination: int
    request: rm.RaftRequest


@dataclass(slots=True)
class RaftEffects:
    sends: list[Outbound] = field(default_factory=list)
    events: list[JournalEvent] = field(default_factory=list)


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    deadline_ms: int


class KafkaRaftClient:
    def __init__(
        self,
        local_id: int,
        voters: frozenset[int] | set[int] | list[int],
        raft_log: RaftLog,
        store: QuorumStateStore,
        config: QuorumConfig | None = None,
        *,
        now_ms: int,
        rng: random.Random,
    ) -> None:
        self.local_id = local_id
        self.voters = frozenset(voters)
        self.log = raft_log
        self.config = config or QuorumConfig()
        self.quorum = QuorumState(local_id, self.voters, store, raft_log, self.config, rng)
        self.rng = rng
        self.high_watermark = 0
        self._sends: list[Outbound] = []
        self._inflight: dict[int, _InFlight] = {}
        self._backoff_until: dict[int, int] = {}
        self._next_correlation_id = 1
        # The high watermark each voter was last sent (a leader's long-poll test, ``would_wait``).
        self._hw_known: dict[int, int] = {}
        self.quorum.initialize(now_ms)
        if self.quorum.is_only_voter() and not isinstance(self.quorum.state, LeaderState):
            self._become_candidate(now_ms)

    # ------------------------------------------------------------------------------------ views

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int:
        """The leader of the current epoch if known (a resigned leader names itself, as Kafka's does)."""
        return self.quorum.leader_id

    @property
    def role(self) -> str:
        return self.quorum.state.name

    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, LeaderState)

    @property
    def leader_state(self) -> LeaderState | None:
        state = self.quorum.state
        return state if isinstance(state, LeaderState) else None

    def drain(self) -> RaftEffects:
        effects = RaftEffects(self._sends, self.quorum.events)
        self._sends = []
        self.quorum.events = []
        return effects

    def next_deadline_ms(self) -> int:
        """When :meth:`poll` must run next at the latest."""
        state = self.quorum.state
        deadlines = [d.deadline_ms for d in self._inflight.values()]
        deadlines.extend(self._backoff_until.values())
        if isinstance(state, (UnattachedState, ResignedState)):
            deadlines.append(state.election_deadline_ms)
        elif isinstance(state, CandidateState):
            deadlines.append(
                state.backoff_deadline_ms
                if state.backoff_deadline_ms is not None
                else state.election_deadline_ms
            )
        elif isinstance(state, FollowerState):
            deadlines.append(state.fetch_deadline_ms)
        elif isinstance(state, LeaderState):
            if len(self.voters) > 1:
                deadlines.append(state.check_quorum_deadline_ms)
            if state.non_acknowledging_voters():
                deadlines.append(state.begin_quorum_epoch_deadline_ms)
        return min(deadlines) if deadlines else NEVER

    # ------------------------------------------------------------------------------------ sending

    def _can_send(self, destination: int, now_ms: int) -> bool:
        inflight = self._inflight.get(destination)
        if inflight is not None and now_ms < inflight.deadline_ms:
            return False
        return now_ms >= self._backoff_until.get(destination, 0)

    def _send(self, destination: int, make: type, now_ms: int, **fields: object) -> None:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        timeout = self.config.request_timeout_ms
        if make is rm.FetchRequest:
            timeout += int(fields.get("max_wait_ms", 0))  # type: ignore[call-overload]
        self._inflight[destination] = _InFlight(correlation_id, now_ms + timeout)
        self._backoff_until.pop(destination, None)
        self._sends.append(Outbound(destination, make(correlation_id=correlation_id, **fields)))

    def _expect(self, source: int, correlation_id: int, now_ms: int, *, failed: bool = False) -> bool:
        """True if the response is the one awaited from ``source`` (then no longer awaited)."""
        inflight = self._inflight.get(source)
        if inflight is None or inflight.correlation_id != correlation_id:
            return False
        del self._inflight[source]
        if failed:
            self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
        return True

    def _reset_requests(self) -> None:
        self._inflight.clear()
        self._backoff_until.clear()

    # ------------------------------------------------------------------------------------ transitions

    def _become_candidate(self, now_ms: int) -> None:
        self._reset_requests()
        self.quorum.transition_to_candidate(now_ms)
        state = self.quorum.state
        assert isinstance(state, CandidateState)
        if state.is_vote_granted():
            self._become_leader(now_ms)
        else:
            self._poll_candidate(state, now_ms)

    def _become_leader(self, now_ms: int) -> None:
        self._reset_requests()
        self._hw_known.clear()
        leader = self.quorum.transition_to_leader(now_ms)
        value = leader_change_value(self.local_id, sorted(self.voters), sorted(leader.granting_voters))
        self.log.append_as_leader([value], leader.epoch)
        self.log.flush()
        self._update_leader_end_offset(leader, now_ms)

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        self._reset_requests()
        self.quorum.transition_to_follower(epoch, leader_id, now_ms)

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        self._reset_requests()
        self.quorum.transition_to_unattached(epoch, now_ms)

    def _maybe_transition(self, leader_id: int, epoch: int, now_ms: int) -> None:
        """Kafka's ``maybeTransition``: a request or response named ``epoch`` (and maybe its leader)."""
        if epoch < self.epoch:
            return
        if leader_id == self.local_id:
            if epoch > self.epoch:
                self._become_unattached(epoch, now_ms)
            return
        if epoch > self.epoch:
            if leader_id != NO_LEADER:
                self._become_follower(epoch, leader_id, now_ms)
            else:
                self._become_unattached(epoch, now_ms)
        elif leader_id != NO_LEADER and not self.quorum.has_leader():
            self._become_follower(epoch, leader_id, now_ms)

    def _handle_common_response(self, error: int, leader_id: int, epoch: int, now_ms: int) -> bool:
        """Kafka's ``maybeHandleCommonResponse``: True if the response needs no further handling."""
        if epoch < self.epoch or error == Errors.UNKNOWN_LEADER_EPOCH:
            return True
        if epoch > self.epoch or error in (Errors.FENCED_LEADER_EPOCH, Errors.NOT_LEADER_OR_FOLLOWER):
            self._maybe_transition(leader_id, epoch, now_ms)
            return True
        if leader_id != NO_LEADER and leader_id != self.local_id and not self.quorum.has_leader():
            self._become_follower(epoch, leader_id, now_ms)
            return error != Errors.NONE
        return error != Errors.NONE

    # ------------------------------------------------------------------------------------ appends

    def append(self, values: list[bytes], now_ms: int) -> tuple[int, int] | None:
        """As leader: ``values`` become one batch of this epoch, flushed. Returns (base, last offset), or
        None if this voter does not lead."""
        leader = self.leader_state
        if leader is None or not values:
            return None
        offsets = self.log.append_as_leader(values, leader.epoch)
        self.log.flush()
        self._update_leader_end_offset(leader, now_ms)
        return offsets

    def _update_leader_end_offset(self, leader: LeaderState, now_ms: int) -> None:
        if leader.update_local_state(self.log.end_offset, now_ms):
            self._advance_high_watermark(leader)

    def _advance_high_watermark(self, leader: LeaderState) -> None:
        if leader.high_watermark is not None and leader.high_watermark > self.high_watermark:
            self.high_watermark = leader.high_watermark

    # ------------------------------------------------------------------------------------ poll

    def poll(self, now_ms: int) -> None:
        """Timers: elections, fetch timeouts, check quorum; and the requests due (also those of a state
        just entered)."""
        for _ in range(3):
            before = self.quorum.state
            self._poll_once(now_ms)
            if self.quorum.state is before:
                return

    def _poll_once(self, now_ms: int) -> None:
        for destination in [d for d, f in self._inflight.items() if now_ms >= f.deadline_ms]:
            del self._inflight[destination]
        state = self.quorum.state
        if isinstance(state, UnattachedState):
            if now_ms >= state.election_deadline_ms:
                self._become_candidate(now_ms)
        elif isinstance(state, CandidateState):
            self._poll_candidate(state, now_ms)
        elif isinstance(state, FollowerState):
            if now_ms >= state.fetch_deadline_ms:
                log.info(
                    "node %d: no fetch from leader %d answered in %d ms (epoch %d): starting an election",
                    self.local_id,
                    state.leader_id,
                    self.config.fetch_timeout_ms,
                    state.epoch,
                )
                self._become_candidate(now_ms)
            elif self._can_send(state.leader_id, now_ms):
                self._send(
                    state.leader_id,
                    rm.FetchRequest,
                    now_ms,
                    replica_id=self.local_id,
                    current_leader_epoch=state.epoch,
                    fetch_offset=self.log.end_offset,
                    last_fetched_epoch=self.log.last_fetched_epoch(),
                    max_wait_ms=self.config.fetch_max_wait_ms,
                )
        elif isinstance(state, LeaderState):
            self._poll_leader(state, now_ms)
        elif isinstance(state, ResignedState):
            if now_ms >= state.election_deadline_ms:
                self._become_candidate(now_ms)
            else:
                for voter in sorted(state.unacknowledged):
                    if self._can_send(voter, now_ms):
                        self._send(
                            voter,
                            rm.EndQuorumEpochRequest,
                            now_ms,
                            leader_id=self.local_id,
                            leader_epoch=state.epoch,
                            preferred_successors=state.preferred_successors,
                        )

    def _poll_candidate(self, state: CandidateState, now_ms: int) -> None:
        if state.backoff_deadline_ms is not None:
            if now_ms >= state.backoff_deadline_ms:
                self._become_candidate(now_ms)
            return
        if now_ms >= state.election_deadline_ms:
            self._start_backoff(state, now_ms)
            return
        for voter in state.unrecorded_voters():
            if self._can_send(voter, now_ms):
                self._send(
                    voter,
                    rm.VoteRequest,
                    now_ms,
                    candidate_epoch=state.epoch,
                    candidate_id=self.local_id,
                    last_offset_epoch=self.log.last_fetched_epoch(),
                    last_offset=self.log.end_offset,
                )

    def _start_backoff(self, state: CandidateState, now_ms: int) -> None:
        """Kafka's binary exponential election backoff: a random wait below retry backoff x 2^retries, at
        most ``election_backoff_max_ms``. (Kafka draws whole 100 ms steps; a continuous draw from the
        finer ``retry_backoff_ms`` keeps two candidates that lost together from standing together again,
        and puts the first retry within 40 ms instead of 0 or 100.)"""
        limit = min(
            self.config.election_backoff_max_ms, self.config.retry_backoff_ms * (2 ** min(state.retries, 20))
        )
        state.backoff_deadline_ms = now_ms + self.rng.randrange(max(limit, 1))
        self._reset_requests()

    def _poll_leader(self, state: LeaderState, now_ms: int) -> None:
        if state.check_quorum_expired(now_ms):
            log.warning(
                "node %d: leader of epoch %d heard no fetch from a majority of voters in %d ms: resigning",
                self.local_id,
                state.epoch,
                state.check_quorum_timeout_ms,
            )
            self.resign(now_ms)
            return
        if now_ms >= state.begin_quorum_epoch_deadline_ms:
            pending = state.non_acknowledging_voters()
            for voter in pending:
                if self._can_send(voter, now_ms):
                    self._send(
                        voter,
                        rm.BeginQuorumEpochRequest,
                        now_ms,
                        leader_id=self.local_id,
                        leader_epoch=state.epoch,
                    )
            state.begin_quorum_epoch_deadline_ms = now_ms + state.begin_quorum_epoch_timeout_ms

    def resign(self, now_ms: int) -> None:
        """A leader steps down (clean stop, or lost quorum): END_QUORUM_EPOCH to the other voters."""
        state = self.leader_state
        if state is None:
            return
        self._reset_requests()
        self.quorum.transition_to_resigned(state.voters_by_descending_end_offset(), now_ms)
        self._poll_once(now_ms)

    # ------------------------------------------------------------------------------------ requests

    def handle_request(self, source: int, request: rm.RaftRequest, now_ms: int) -> rm.RaftResponse:
        """The answer to a voter's request (then anything the request made due is sent)."""
        response: rm.RaftResponse
        if isinstance(request, rm.VoteRequest):
            response = self._handle_vote(request, now_ms)
        elif isinstance(request, rm.BeginQuorumEpochRequest):
            response = self._handle_begin_quorum_epoch(request, now_ms)
        elif isinstance(request, rm.EndQuorumEpochRequest):
            response = self._handle_end_quorum_epoch(request, now_ms)
        else:
            response = self._handle_fetch(request, now_ms)
        self.poll(now_ms)
        return response

    def _election_deadline(self) -> int | None:
        """When this voter would stand next, if it is waiting to."""
        state = self.quorum.state
        if isinstance(state, (UnattachedState, ResignedState)):
            return state.election_deadline_ms
        if isinstance(state, CandidateState):
            return (
                state.backoff_deadline_ms
                if state.backoff_deadline_ms is not None
                else state.election_deadline_ms
            )
        if isinstance(state, FollowerState):
            return state.fetch_deadline_ms
        return None

    def _voter_error(self, remote_id: int, epoch: int) -> Errors | None:
        """Kafka's ``validateVoterOnlyRequest``."""
        if epoch < self.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if remote_id not in self.voters:
            return Errors.INCONSISTENT_VOTER_SET
        return None

    def _handle_vote(self, req: rm.VoteRequest, now_ms: int) -> rm.VoteResponse:
        error = self._voter_error(req.candidate_id, req.candidate_epoch)
        if error is not None:
            return rm.VoteResponse(req.correlation_id, int(error), self.leader_id, self.epoch, False)
        # Raft's timer rule: only a granted vote (or a live leader) puts an election off. A voter that
        # moves to a candidate's higher epoch and refuses it keeps the deadline it had, so a candidate
        # whose log is behind cannot hold the others off by standing again and again.
        deadline = self._election_deadline()
        if req.candidate_epoch > self.epoch:
            self._become_unattached(req.candidate_epoch, now_ms)
        theirs = OffsetAndEpoch(req.last_offset_epoch, req.last_offset)
        ours = OffsetAndEpoch(self.log.last_fetched_epoch(), self.log.end_offset)
        state = self.quorum.state
        granted = req.candidate_id != self.local_id and state.can_grant_vote(req.candidate_id, theirs >= ours)
        if granted and isinstance(state, UnattachedState) and state.voted_for == NO_LEADER:
            self.quorum.transition_to_unattached_voted(req.candidate_epoch, req.candidate_id, now_ms)
        elif not granted and isinstance(state, UnattachedState) and deadline is not None:
            state.election_deadline_ms = min(state.election_deadline_ms, deadline)
        if not granted:
            log.info(
                "node %d: vote for %d in epoch %d refused as %s (their log %s, ours %s)",
                self.local_id,
                req.candidate_id,
                req.candidate_epoch,
                state.name,
                theirs,
                ours,
            )
        return rm.VoteResponse(req.correlation_id, int(Errors.NONE), self.leader_id, self.epoch, granted)

    def _handle_begin_quorum_epoch(
        self, req: rm.BeginQuorumEpochRequest, now_ms: int
    ) -> rm.QuorumEpochResponse:
        error = self._voter_error(req.leader_id, req.leader_epoch)
        if error is None:
            if (
                req.leader_epoch == self.epoch
                and self.quorum.has_leader()
                and self.leader_id != req.leader_id
            ):
                raise RaftSafetyError(
                    f"node {self.local_id}: BEGIN_QUORUM_EPOCH from {req.leader_id} for epoch "
                    f"{req.leader_epoch}, whose leader is {self.leader_id}"
                )
            self._maybe_transition(req.leader_id, req.leader_epoch, now_ms)
        return rm.QuorumEpochResponse(
            req.correlation_id, int(error or Errors.NONE), self.leader_id, self.epoch
        )

    def _handle_end_quorum_epoch(self, req: rm.EndQuorumEpochRequest, now_ms: int) -> rm.QuorumEpochResponse:
        error = self._voter_error(req.leader_id, req.leader_epoch)
        if error is None:
            self._maybe_transition(req.leader_id, req.leader_epoch, now_ms)
            state = self.quorum.state
            if isinstance(state, FollowerState) and state.leader_id == req.leader_id:
                backoff = self._end_epoch_election_backoff(req.preferred_successors)
                state.fetch_deadline_ms = min(state.fetch_deadline_ms, now_ms + backoff)
        return rm.QuorumEpochResponse(
            req.correlation_id, int(error or Errors.NONE), self.leader_id, self.epoch
        )

    def _end_epoch_election_backoff(self, successors: tuple[int, ...]) -> int:
        """Kafka's ``strictExponentialElectionBackoffMs``: the first preferred successor stands at once;
        the n-th (counting from 0) of k waits (max backoff >> (k - 1)) << (n - 1); a voter not named waits
        the max backoff, so the most caught-up voter is almost always elected first."""
        if self.local_id not in successors:
            return self.config.election_backoff_max_ms
        position = successors.index(self.local_id)
        if position == 0:
            return 0
        base = self.config.election_backoff_max_ms >> (len(successors) - 1)
        return min(self.config.election_backoff_max_ms, base << (position - 1))

    def _fetch_error(self, epoch: int) -> Errors | None:
        """Kafka's ``validateLeaderOnlyRequest``."""
        if epoch < self.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        if not self.is_leader():
            return Errors.NOT_LEADER_OR_FOLLOWER
        return None

    def _handle_fetch(self, req: rm.FetchRequest, now_ms: int) -> rm.FetchResponse:
        error = self._fetch_error(req.current_leader_epoch)
        leader = self.leader_state
        if error is None and req.replica_id not in self.voters:
            error = Errors.INCONSISTENT_VOTER_SET
        if error is not None or leader is None:
            return rm.FetchResponse(
                req.correlation_id,
                int(error or Errors.NOT_LEADER_OR_FOLLOWER),
                self.leader_id,
                self.epoch,
                high_watermark=self.high_watermark,
            )
        if req.fetch_offset < 0 or req.last_fetched_epoch < 0:
            return rm.FetchResponse(
                req.correlation_id,
                int(Errors.INVALID_REQUEST),
                self.leader_id,
                self.epoch,
                self.high_watermark,
            )
        leader.update_check_quorum(req.replica_id, now_ms)
        diverging = validate_offset_and_epoch(self.log, req.fetch_offset, req.last_fetched_epoch)
        if diverging is not None:
            leader.acknowledge(req.replica_id)
            return rm.FetchResponse(
                req.correlation_id,
                int(Errors.NONE),
                self.local_id,
                leader.epoch,
                high_watermark=self.high_watermark,
                diverging_epoch=rm.DivergingEpoch(diverging.epoch, diverging.offset),
            )
        records = self.log.read(req.fetch_offset, self.config.fetch_max_bytes)
        if leader.update_replica_state(req.replica_id, req.fetch_offset, self.log.end_offset, now_ms):
            self._advance_high_watermark(leader)
        self._hw_known[req.replica_id] = self.high_watermark
        return rm.FetchResponse(
            req.correlation_id,
            int(Errors.NONE),
            self.local_id,
            leader.epoch,
            high_watermark=self.high_watermark,
            records=records,
        )

    def would_wait(self, req: rm.FetchRequest) -> bool:
        """For a long-polling shell: True if a fetch from a voter that is caught up with both the log
        and the high watermark would get nothing new now (the shell may hold it up to ``max_wait_ms``)."""
        leader = self.leader_state
        if leader is None or req.current_leader_epoch != leader.epoch:
            return False
        if req.fetch_offset != self.log.end_offset or req.last_fetched_epoch != self.log.last_fetched_epoch():
            return False
        state = leader.voter_states.get(req.replica_id)
        return state is not None and state.end_offset == req.fetch_offset and self._hw_sent_to(req.replica_id)

    def _hw_sent_to(self, replica_id: int) -> bool:
        return self._hw_known.get(replica_id) == self.high_watermark

    # ------------------------------------------------------------------------------------ responses

    def handle_response(self, source: int, response: rm.RaftResponse, now_ms: int) -> None:
        failed = response.error_code != Errors.NONE
        if not self._expect(source, response.correlation_id, now_ms, failed=failed):
            return
        if isinstance(response, rm.VoteResponse):
            self._handle_vote_response(source, response, now_ms)
        elif isinstance(response, rm.QuorumEpochResponse):
            self._handle_quorum_epoch_response(source, response, now_ms)
        else:
            self._handle_fetch_response(source, response, now_ms)
        self.poll(now_ms)

    def request_failed(self, destination: int, correlation_id: int, now_ms: int) -> None:
        """The shell could not deliver the request or got no answer: retry after the backoff."""
        self._expect(destination, correlation_id, now_ms, failed=True)

    def _handle_vote_response(self, source: int, resp: rm.VoteResponse, now_ms: int) -> None:
        if self._handle_common_response(resp.error_code, resp.leader_id, resp.leader_epoch, now_ms):
            return
        state = self.quorum.state
        if not isinstance(state, CandidateState) or resp.leader_epoch != state.epoch:
            return
        if state.backoff_deadline_ms is not None:
            return
        if resp.vote_granted:
            state.granted.add(source)
            if state.is_vote_granted():
                self._become_leader(now_ms)
        else:
            state.rejected.add(source)
            if state.is_vote_rejected():
                self._start_backoff(state, now_ms)

    def _handle_quorum_epoch_response(self, source: int, resp: rm.QuorumEpochResponse, now_ms: int) -> None:
        if self._handle_common_response(resp.error_code, resp.leader_id, resp.leader_epoch, now_ms):
            return
        state = self.quorum.state
        if isinstance(state, LeaderState) and resp.leader_epoch == state.epoch:
            state.acknowledge(source)
        elif isinstance(state, ResignedState) and resp.leader_epoch == state.epoch:
            state.unacknowledged.discard(source)

    def _handle_fetch_response(self, source: int, resp: rm.FetchResponse, now_ms: int) -> None:
        if self._handle_common_response(resp.error_code, resp.leader_id, resp.leader_epoch, now_ms):
            return
        state = self.quorum.state
        if (
            not isinstance(state, FollowerState)
            or state.leader_id != source
            or resp.leader_epoch != state.epoch
        ):
            return
        if resp.diverging_epoch is not None:
            target = OffsetAndEpoch(resp.diverging_epoch.epoch, resp.diverging_epoch.end_offset)
            if target.offset < self.high_watermark:
                raise RaftSafetyError(
                    f"node {self.local_id}: leader {source} of epoch {state.epoch} asked for truncation to "
                    f"{target.offset}, below the high watermark {self.high_watermark}"
                )
            before = self.log.end_offset
            after = truncate_to_end_offset(self.log, target)
            log.info(
                "node %d: metadata log truncated from %d to %d (leader %d diverges at epoch %d offset %d)",
                self.local_id,
                before,
                after,
                source,
                target.epoch,
                target.offset,
            )
        else:
            # Only a fetch the leader accepted (no divergence) proves this log matches the leader's up to
            # its end. A truncation cuts at the end of the last epoch both logs know locally, but the
            # entries left there may still differ from the leader's (the follower's epoch may run past
            # where the leader's ended), so the high watermark waits for the next, validated fetch, as
            # Kafka's follower does.
            if resp.records:
                self.log.append_as_follower(resp.records)
                self.log.flush()
            new_hw = min(resp.high_watermark, self.log.end_offset)
            if new_hw > self.high_watermark:
                self.high_watermark = new_hw
        state.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms

    # ------------------------------------------------------------------------------------ describe

    def describe_quorum(self, now_ms: int) -> rm.DescribeQuorumResponse:
        """Kafka's ``LeaderState.describeQuorum``: each voter as the leader last saw it, except the leader
        itself, which is described as it is now (its log end offset, and ``now_ms`` as both its last fetch
        and last caught-up time, as Kafka's ``describeReplicaState`` reports the local replica)."""
        leader = self.leader_state
        if leader is None:
            return rm.DescribeQuorumResponse(
                int(Errors.NOT_LEADER_OR_FOLLOWER), self.leader_id, self.epoch, self.high_watermark
            )
        voters: list[rm.ReplicaDescription] = []
        for replica_id, s in sorted(leader.voter_states.items()):
            if replica_id == self.local_id:
                voters.append(rm.ReplicaDescription(replica_id, self.log.end_offset, now_ms, now_ms))
                continue
            end_offset = s.end_offset if s.end_offset is not None else -1
            voters.append(rm.ReplicaDescription(replica_id, end_offset, s.last_fetch_ms, s.last_caught_up_ms))
        return rm.DescribeQuorumResponse(
            int(Errors.NONE), self.local_id, leader.epoch, self.high_watermark, voters
        )


__all__ = ["NEVER", "KafkaRaftClient", "Outbound", "RaftEffects", "RaftSafetyError"]
