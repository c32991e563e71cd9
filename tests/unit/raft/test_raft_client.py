"""``KafkaRaftClient`` case by case, in the manner of Kafka's ``KafkaRaftClientTest``: one voter under test
(id 1000 unless said), its peers played by the test, a fake clock."""

from __future__ import annotations

import random

import pytest

from protocol.errors import Errors
from raft import messages as rm
from raft.election_state import ElectionState, MemoryQuorumStateStore
from raft.quorum_state import QuorumConfig
from raft.raft_client import KafkaRaftClient, Outbound
from raft.raft_log import MemoryRaftLog, OffsetAndEpoch, validate_offset_and_epoch

LOCAL, PEER1, PEER2 = 1000, 1001, 1002
VOTERS = [LOCAL, PEER1, PEER2]
CONFIG = QuorumConfig()  # Kafka's defaults: election 1000 ms, fetch 2000 ms


def make(
    state: ElectionState | None = None,
    log: MemoryRaftLog | None = None,
    *,
    voters: list[int] = VOTERS,
    local: int = LOCAL,
    now: int = 0,
    seed: int = 7,
) -> tuple[KafkaRaftClient, MemoryRaftLog, MemoryQuorumStateStore]:
    log = log or MemoryRaftLog()
    store = MemoryQuorumStateStore(state)
    client = KafkaRaftClient(local, voters, log, store, CONFIG, now_ms=now, rng=random.Random(seed))
    return client, log, store


def sends(client: KafkaRaftClient) -> list[Outbound]:
    return client.drain().sends


def log_with(epochs: list[int]) -> MemoryRaftLog:
    """A log with one single-record batch per listed epoch."""
    log = MemoryRaftLog()
    for i, epoch in enumerate(epochs):
        log.append_as_leader([f"e{epoch}-{i}".encode()], epoch)
    log.flush()
    return log


def elect(client: KafkaRaftClient, now: int) -> None:
    """Drive an unattached voter through its election timeout and a vote from PEER1."""
    client.poll(now + 2 * CONFIG.election_timeout_ms)
    votes = [s for s in sends(client) if isinstance(s.request, rm.VoteRequest)]
    vote = next(s.request for s in votes if s.destination == PEER1)
    assert isinstance(vote, rm.VoteRequest)
    client.handle_response(
        PEER1, rm.VoteResponse(vote.correlation_id, 0, rm.NO_LEADER, vote.candidate_epoch, True), now + 2000
    )
    assert client.is_leader()


# ---------------------------------------------------------------------------------------------- elections


def test_the_journal_names_only_the_four_roles_an_unattached_voter_being_a_follower_without_leader() -> None:
    client, _, _ = make()
    first = client.drain().events
    assert first == [("quorum_state", {"role": "follower", "epoch": 0, "voted_for": -1, "leader_id": -1})]
    client.poll(2 * CONFIG.election_timeout_ms)
    assert [e[1]["role"] for e in client.drain().events] == ["candidate"]


def test_starts_unattached_and_stands_after_a_randomized_election_timeout() -> None:
    client, _, store = make()
    assert client.role == "unattached" and client.epoch == 0
    deadline = client.next_deadline_ms()
    assert CONFIG.election_timeout_ms <= deadline < 2 * CONFIG.election_timeout_ms
    client.poll(deadline - 1)
    assert client.role == "unattached"
    client.poll(deadline)
    assert client.role == "candidate" and client.epoch == 1
    assert store.state == ElectionState(1, LOCAL, rm.NO_LEADER, tuple(VOTERS))
    votes = sends(client)
    assert sorted(s.destination for s in votes) == [PEER1, PEER2]
    assert all(
        s.request == rm.VoteRequest(s.request.correlation_id, 1, LOCAL, 0, 0)  # type: ignore[union-attr]
        for s in votes
    )


def test_election_timeouts_differ_between_voters() -> None:
    deadlines = {make(seed=s)[0].next_deadline_ms() for s in range(20)}
    assert len(deadlines) > 10


def test_only_voter_leads_at_once_and_commits_its_leader_change() -> None:
    client, log, _ = make(voters=[LOCAL])
    assert client.is_leader() and client.epoch == 1
    assert log.end_offset == 1 and client.high_watermark == 1
    assert client.append([b"x"], 5) == (1, 1)
    assert client.high_watermark == 2


def test_candidate_becomes_leader_with_a_majority_and_sends_begin_quorum_epoch() -> None:
    client, log, store = make()
    elect(client, 0)
    assert client.epoch == 1 and store.state is not None and store.state.leader_id == LOCAL
    # The epoch starts with a LeaderChange entry of the new epoch.
    assert [(o, e) for o, e, _ in log.entries()] == [(0, 1)]
    client.poll(3000)
    begins = [s for s in sends(client) if isinstance(s.request, rm.BeginQuorumEpochRequest)]
    assert sorted(s.destination for s in begins) == [PEER1, PEER2]
    assert all(s.request.leader_epoch == 1 for s in begins)  # type: ignore[union-attr]


def test_candidate_rejected_by_a_majority_backs_off_then_tries_the_next_epoch() -> None:
    client, _, _ = make()
    client.poll(5000)
    votes = {s.destination: s.request for s in sends(client)}
    for peer in (PEER1, PEER2):
        client.handle_response(peer, rm.VoteResponse(votes[peer].correlation_id, 0, -1, 1, False), 5001)
    assert client.role == "candidate" and client.epoch == 1
    client.poll(5001 + CONFIG.election_backoff_max_ms)
    assert client.role == "candidate" and client.epoch == 2


# ---------------------------------------------------------------------------------------------- votes


def test_vote_is_written_before_it_is_granted_and_granted_once_per_epoch() -> None:
    client, _, store = make(ElectionState(3, voters=tuple(VOTERS)))
    response = client.handle_request(PEER1, rm.VoteRequest(1, 4, PEER1, 0, 0), 10)
    assert isinstance(response, rm.VoteResponse) and response.vote_granted
    assert response.error_code == 0 and response.leader_epoch == 4
    assert store.state == ElectionState(4, PEER1, rm.NO_LEADER, tuple(VOTERS))
    again = client.handle_request(PEER1, rm.VoteRequest(2, 4, PEER1, 0, 0), 11)
    assert isinstance(again, rm.VoteResponse) and again.vote_granted
    other = client.handle_request(PEER2, rm.VoteRequest(3, 4, PEER2, 0, 0), 12)
    assert isinstance(other, rm.VoteResponse) and not other.vote_granted
    assert store.state.voted_for == PEER1


@pytest.mark.parametrize(
    ("last_epoch", "last_offset", "granted"),
    [(2, 3, True), (2, 4, True), (2, 2, False), (1, 10, False), (3, 1, True)],
)
def test_vote_needs_a_log_at_least_as_up_to_date(last_epoch: int, last_offset: int, granted: bool) -> None:
    client, _, _ = make(ElectionState(2, voters=tuple(VOTERS)), log_with([1, 2, 2]))
    response = client.handle_request(PEER1, rm.VoteRequest(1, 3, PEER1, last_epoch, last_offset), 0)
    assert isinstance(response, rm.VoteResponse) and response.vote_granted is granted


def test_vote_from_an_older_epoch_is_fenced() -> None:
    client, _, store = make(ElectionState(5, voters=tuple(VOTERS)))
    response = client.handle_request(PEER1, rm.VoteRequest(1, 4, PEER1, 0, 0), 0)
    assert isinstance(response, rm.VoteResponse)
    assert response.error_code == Errors.FENCED_LEADER_EPOCH and not response.vote_granted
    assert response.leader_epoch == 5 and store.writes == 0


def test_vote_from_a_non_voter_is_refused() -> None:
    client, _, _ = make()
    response = client.handle_request(4000, rm.VoteRequest(1, 1, 4000, 0, 0), 0)
    assert response.error_code == Errors.INCONSISTENT_VOTER_SET


def test_leader_steps_down_on_a_vote_for_a_higher_epoch() -> None:
    client, _, _ = make()
    elect(client, 0)
    response = client.handle_request(PEER2, rm.VoteRequest(9, 2, PEER2, 1, 1), 3000)
    assert client.role == "unattached" and client.epoch == 2
    assert isinstance(response, rm.VoteResponse) and response.vote_granted


def test_follower_grants_no_vote_in_its_epoch() -> None:
    client, _, _ = make(ElectionState(2, leader_id=PEER1, voters=tuple(VOTERS)))
    assert client.role == "follower"
    response = client.handle_request(PEER2, rm.VoteRequest(1, 2, PEER2, 5, 50), 0)
    assert isinstance(response, rm.VoteResponse) and not response.vote_granted and response.leader_id == PEER1


# ---------------------------------------------------------------------------------------------- restart


def test_restart_after_leading_is_resigned_and_sends_end_quorum_epoch() -> None:
    client, _, _ = make(ElectionState(4, LOCAL, LOCAL, tuple(VOTERS)), log_with([4]))
    assert client.role == "resigned" and client.epoch == 4
    client.poll(1)
    ends = sends(client)
    assert sorted(s.destination for s in ends) == [PEER1, PEER2]
    assert all(isinstance(s.request, rm.EndQuorumEpochRequest) for s in ends)
    vote = client.handle_request(PEER1, rm.VoteRequest(1, 4, PEER1, 4, 1), 2)
    assert isinstance(vote, rm.VoteResponse) and not vote.vote_granted


def test_restart_keeps_the_vote_given() -> None:
    client, _, _ = make(ElectionState(4, PEER1, rm.NO_LEADER, tuple(VOTERS)))
    assert client.role == "unattached"
    vote = client.handle_request(PEER2, rm.VoteRequest(1, 4, PEER2, 0, 0), 0)
    assert isinstance(vote, rm.VoteResponse) and not vote.vote_granted


def test_restart_as_candidate_stays_candidate_in_its_epoch() -> None:
    client, _, _ = make(ElectionState(4, LOCAL, rm.NO_LEADER, tuple(VOTERS)))
    assert client.role == "candidate" and client.epoch == 4


def test_restart_with_a_log_ahead_of_the_quorum_state_starts_at_the_logs_epoch() -> None:
    client, _, _ = make(ElectionState(2, voters=tuple(VOTERS)), log_with([1, 3]))
    assert client.role == "unattached" and client.epoch == 3


# ---------------------------------------------------------------------------------------------- begin / end


def test_begin_quorum_epoch_makes_a_voter_follow() -> None:
    client, _, store = make(ElectionState(2, voters=tuple(VOTERS)))
    response = client.handle_request(PEER1, rm.BeginQuorumEpochRequest(1, PEER1, 3), 0)
    assert response.error_code == 0 and client.role == "follower" and client.leader_id == PEER1
    assert store.state is not None and store.state.leader_id == PEER1 and store.state.epoch == 3
    stale = client.handle_request(PEER2, rm.BeginQuorumEpochRequest(2, PEER2, 2), 1)
    assert stale.error_code == Errors.FENCED_LEADER_EPOCH and stale.leader_id == PEER1


def test_end_quorum_epoch_first_preferred_successor_stands_at_once() -> None:
    client, _, _ = make(ElectionState(3, leader_id=PEER1, voters=tuple(VOTERS)))
    client.handle_request(PEER1, rm.EndQuorumEpochRequest(1, PEER1, 3, (LOCAL, PEER2)), 100)
    client.poll(100)
    assert client.role == "candidate" and client.epoch == 4


def test_end_quorum_epoch_second_successor_waits_a_little() -> None:
    client, _, _ = make(ElectionState(3, leader_id=PEER1, voters=tuple(VOTERS)))
    client.handle_request(PEER1, rm.EndQuorumEpochRequest(1, PEER1, 3, (PEER2, LOCAL)), 100)
    client.poll(100)
    assert client.role == "follower"
    # Kafka's strict exponential backoff: the second of two successors waits half the max backoff.
    client.poll(100 + CONFIG.election_backoff_max_ms // 2 - 1)
    assert client.role == "follower"
    client.poll(100 + CONFIG.election_backoff_max_ms // 2)
    assert client.role == "candidate"


def test_clean_resignation_names_the_most_caught_up_voter_first() -> None:
    client, _, _ = make()
    elect(client, 0)
    client.append([b"a"], 2100)
    client.handle_request(PEER2, rm.FetchRequest(1, PEER2, 1, 2, 1), 2200)
    client.handle_request(PEER1, rm.FetchRequest(2, PEER1, 1, 1, 1), 2200)
    sends(client)
    client.resign(2300)
    assert client.role == "resigned"
    ends = [s.request for s in sends(client)]
    assert ends and all(isinstance(r, rm.EndQuorumEpochRequest) for r in ends)
    assert ends[0].preferred_successors == (PEER2, PEER1)  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------- fetch


def test_follower_fetches_with_its_last_epoch_and_times_out_into_an_election() -> None:
    client, _, _ = make(ElectionState(3, leader_id=PEER1, voters=tuple(VOTERS)), log_with([1, 3]))
    client.poll(0)
    fetch = sends(client)[0]
    assert fetch.destination == PEER1
    assert fetch.request == rm.FetchRequest(
        fetch.request.correlation_id, LOCAL, 3, 2, 3, CONFIG.fetch_max_wait_ms
    )
    client.poll(CONFIG.fetch_timeout_ms - 1)
    assert client.role == "follower"
    client.poll(CONFIG.fetch_timeout_ms)
    assert client.role == "candidate" and client.epoch == 4


def test_follower_appends_fetched_records_and_takes_the_high_watermark() -> None:
    leader_log = log_with([1, 1, 2])
    client, log, _ = make(ElectionState(2, leader_id=PEER1, voters=tuple(VOTERS)))
    client.poll(0)
    fetch = sends(client)[0].request
    client.handle_response(
        PEER1,
        rm.FetchResponse(
            fetch.correlation_id, 0, PEER1, 2, high_watermark=2, records=leader_log.read(0, 1 << 20)
        ),
        10,
    )
    assert log.entries() == leader_log.entries() and log.flushed_offset == 3
    assert client.high_watermark == 2
    # The next fetch goes out at once, from the new end.
    nxt = sends(client)[0].request
    assert isinstance(nxt, rm.FetchRequest) and nxt.fetch_offset == 3 and nxt.last_fetched_epoch == 2


def test_leader_answers_a_diverging_fetch_with_where_the_epoch_ends() -> None:
    # Leader's log: epochs 1,1,3 (offsets 0-2) then its own LeaderChange at epoch 4.
    client, _, _ = make(ElectionState(3, voters=tuple(VOTERS)), log_with([1, 1, 3]))
    elect(client, 0)
    assert client.epoch == 4
    # A follower that has 1,1,2,2: fetch offset 4, last epoch 2 -> the leader's epoch 1 ends at 2.
    response = client.handle_request(PEER1, rm.FetchRequest(5, PEER1, 4, 4, 2), 2100)
    assert isinstance(response, rm.FetchResponse) and response.error_code == 0
    assert response.diverging_epoch == rm.DivergingEpoch(1, 2) and response.records == b""
    # A follower ahead in the leader's epoch 3: it diverges at the leader's end of epoch 3.
    response = client.handle_request(PEER2, rm.FetchRequest(6, PEER2, 4, 9, 3), 2100)
    assert isinstance(response, rm.FetchResponse) and response.diverging_epoch == rm.DivergingEpoch(3, 3)


def test_follower_truncates_on_a_diverging_epoch_then_fetches_from_there() -> None:
    client, log, _ = make(ElectionState(4, leader_id=PEER1, voters=tuple(VOTERS)), log_with([1, 1, 2, 2]))
    client.poll(0)
    fetch = sends(client)[0].request
    assert isinstance(fetch, rm.FetchRequest) and fetch.fetch_offset == 4 and fetch.last_fetched_epoch == 2
    client.handle_response(
        PEER1,
        rm.FetchResponse(
            fetch.correlation_id, 0, PEER1, 4, high_watermark=0, diverging_epoch=rm.DivergingEpoch(1, 2)
        ),
        10,
    )
    assert log.end_offset == 2 and log.last_fetched_epoch() == 1
    nxt = sends(client)[0].request
    assert isinstance(nxt, rm.FetchRequest) and (nxt.fetch_offset, nxt.last_fetched_epoch) == (2, 1)


def test_follower_takes_no_high_watermark_from_a_diverging_fetch() -> None:
    """The safety test's counter-example, reduced: a truncation leaves entries the leader replaced.

    The follower has epoch 1 at offsets 0-2 and epoch 4 at 3; the leader of epoch 5 has epoch 1 at 0,
    epoch 3 at 1-2 (committed) and epoch 5 at 3, high watermark 4. The follower's epoch 4 is unknown to
    the leader: it answers with the end of its epoch 3 (offset 3); the follower has no epoch 3 and cuts
    at the end of its epoch 1 (also offset 3). Offsets 1-2 are still its old epoch-1 entries, so taking
    min(leader HW, log end) = 3 there would commit them over the leader's. Only the next fetch, at
    (3, epoch 1), finds them out; only a fetch without divergence moves the high watermark."""
    leader_log = log_with([1, 3, 3, 5])
    client, log, _ = make(ElectionState(5, leader_id=PEER1, voters=tuple(VOTERS)), log_with([1, 1, 1, 4]))
    now = 0
    client.poll(now)
    positions = []
    for _ in range(3):
        fetch = sends(client)[0].request
        assert isinstance(fetch, rm.FetchRequest)
        positions.append((fetch.fetch_offset, fetch.last_fetched_epoch))
        diverging = validate_offset_and_epoch(leader_log, fetch.fetch_offset, fetch.last_fetched_epoch)
        now += 10
        response = rm.FetchResponse(
            fetch.correlation_id,
            0,
            PEER1,
            5,
            high_watermark=4,
            diverging_epoch=None
            if diverging is None
            else rm.DivergingEpoch(diverging.epoch, diverging.offset),
            records=leader_log.read(fetch.fetch_offset, 1 << 20) if diverging is None else b"",
        )
        client.handle_response(PEER1, response, now)
        if diverging is not None:
            assert client.high_watermark == 0, (
                f"high watermark taken from a diverging fetch at {log.end_offset}"
            )
    assert positions == [(4, 4), (3, 1), (1, 1)]
    assert log.entries() == leader_log.entries()
    assert client.high_watermark == 4


@pytest.mark.parametrize(
    ("epoch", "error"),
    [(0, Errors.FENCED_LEADER_EPOCH), (2, Errors.UNKNOWN_LEADER_EPOCH)],
)
def test_fetch_epoch_is_checked_before_leadership(epoch: int, error: Errors) -> None:
    client, _, _ = make()
    elect(client, 0)
    response = client.handle_request(PEER1, rm.FetchRequest(1, PEER1, epoch, 0, 0), 2100)
    assert response.error_code == error and response.leader_id == LOCAL and response.leader_epoch == 1


def test_fetch_to_a_follower_is_not_leader_and_names_the_leader() -> None:
    client, _, _ = make(ElectionState(3, leader_id=PEER1, voters=tuple(VOTERS)))
    response = client.handle_request(PEER2, rm.FetchRequest(1, PEER2, 3, 0, 0), 0)
    assert response.error_code == Errors.NOT_LEADER_OR_FOLLOWER and response.leader_id == PEER1


def test_fetch_response_from_a_newer_leader_makes_a_candidate_follow() -> None:
    client, _, _ = make()
    client.poll(5000)
    vote = next(s.request for s in sends(client) if s.destination == PEER1)
    client.handle_response(PEER1, rm.VoteResponse(vote.correlation_id, 0, PEER2, 1, False), 5001)
    assert client.role == "follower" and client.leader_id == PEER2 and client.epoch == 1


# ------------------------------------------------------------------------------------------ high watermark


def test_high_watermark_needs_a_majority_past_the_epoch_start() -> None:
    # The leader's log holds two entries of epoch 1 that no majority was known to have.
    client, log, _ = make(ElectionState(1, voters=tuple(VOTERS)), log_with([1, 1]))
    elect(client, 0)
    assert client.epoch == 2 and log.end_offset == 3
    start = client.leader_state.epoch_start_offset  # type: ignore[union-attr]
    assert start == 2 and client.high_watermark == 0
    # PEER1 has the old entries only: a majority at 2 is not past the epoch start -> no high watermark.
    client.handle_request(PEER1, rm.FetchRequest(1, PEER1, 2, 2, 1), 2100)
    assert client.high_watermark == 0
    # PEER1 has the LeaderChange too: committed up to 3, old entries with it.
    client.handle_request(PEER1, rm.FetchRequest(2, PEER1, 2, 3, 2), 2200)
    assert client.high_watermark == 3
    client.append([b"x"], 2300)
    assert client.high_watermark == 3
    client.handle_request(PEER2, rm.FetchRequest(3, PEER2, 2, 4, 2), 2400)
    assert client.high_watermark == 4


def test_high_watermark_of_five_voters_is_the_third_highest() -> None:
    voters = [1000, 1001, 1002, 1003, 1004]
    client, _, _ = make(voters=voters)
    client.poll(5000)
    for s in sends(client):
        assert isinstance(s.request, rm.VoteRequest)
        client.handle_response(s.destination, rm.VoteResponse(s.request.correlation_id, 0, -1, 1, True), 5001)
    assert client.is_leader()
    for _ in range(4):
        client.append([b"x"], 5002)
    assert client.high_watermark == 0
    client.handle_request(1001, rm.FetchRequest(1, 1001, 1, 5, 1), 5003)
    assert client.high_watermark == 0
    client.handle_request(1002, rm.FetchRequest(2, 1002, 1, 3, 1), 5003)
    assert client.high_watermark == 3


def test_leader_without_fetches_from_a_majority_resigns() -> None:
    client, _, _ = make()
    elect(client, 0)
    now = 2000
    client.handle_request(PEER1, rm.FetchRequest(1, PEER1, 1, 1, 1), now + 2000)
    client.poll(now + 2000 + CONFIG.fetch_timeout_ms * 3 // 2 - 1)
    assert client.is_leader()
    client.poll(now + 2000 + CONFIG.fetch_timeout_ms * 3 // 2)
    assert client.role == "resigned"


def test_describe_quorum_lists_the_voters() -> None:
    client, _, _ = make()
    elect(client, 0)
    client.handle_request(PEER1, rm.FetchRequest(1, PEER1, 1, 1, 1), 2100)
    described = client.describe_quorum(2500)
    assert (described.error_code, described.leader_id, described.leader_epoch, described.high_watermark) == (
        0,
        LOCAL,
        1,
        1,
    )
    by_id = {v.replica_id: v for v in described.current_voters}
    assert by_id[PEER1].log_end_offset == 1 and by_id[PEER1].last_fetch_timestamp == 2100
    assert by_id[PEER2].log_end_offset == -1
    assert (by_id[PEER2].last_fetch_timestamp, by_id[PEER2].last_caught_up_timestamp) == (-1, -1)


def test_describe_quorum_reports_the_leader_itself_as_of_now() -> None:
    """Kafka's LeaderState.describeReplicaState: the local replica is described with the current time
    and its own log end offset, not the time its state was last updated."""
    client, _, _ = make()
    elect(client, 0)
    client.handle_request(PEER1, rm.FetchRequest(1, PEER1, 1, 1, 1), 2100)
    first = {v.replica_id: v for v in client.describe_quorum(2200).current_voters}[LOCAL]
    later = {v.replica_id: v for v in client.describe_quorum(9000).current_voters}[LOCAL]
    assert (first.last_fetch_timestamp, first.last_caught_up_timestamp) == (2200, 2200)
    assert (later.last_fetch_timestamp, later.last_caught_up_timestamp) == (9000, 9000)
    assert later.log_end_offset == client.log.end_offset


def test_responses_nobody_waits_for_are_ignored() -> None:
    client, _, _ = make()
    client.poll(5000)
    sends(client)
    client.handle_response(PEER1, rm.VoteResponse(999, 0, -1, 1, True), 5001)
    client.handle_response(PEER2, rm.VoteResponse(998, 0, -1, 1, True), 5001)
    assert client.role == "candidate"


def test_offset_and_epoch_compare_epoch_first() -> None:
    assert OffsetAndEpoch(2, 0) > OffsetAndEpoch(1, 100)
    assert OffsetAndEpoch(2, 5) > OffsetAndEpoch(2, 4)


def test_split_vote_candidate_backs_off_at_most_one_step_on_its_first_retry() -> None:
    # Two followers whose fetch timeouts fire together each vote for themselves: neither gets a majority.
    # The first whose randomized election timeout passes backs off briefly (below 2 x retry backoff on
    # the first retry), then stands in the next epoch.
    for seed in range(20):
        client, _, _ = make(seed=seed)
        client.poll(5000)
        assert client.role == "candidate" and client.epoch == 1
        deadline = client.quorum.state.election_deadline_ms  # type: ignore[union-attr]
        assert 5000 + CONFIG.election_timeout_ms <= deadline < 5000 + 2 * CONFIG.election_timeout_ms
        client.poll(deadline)
        client.poll(deadline + 2 * CONFIG.retry_backoff_ms)
        assert client.role == "candidate" and client.epoch == 2, seed
