"""``ReplicaFetcher.maybe_truncate`` against an in-memory leader: OFFSET_FOR_LEADER_EPOCH rounds, truncation
to the high watermark without epochs, and answers dropped because the partition moved while they were in
flight. Ports of the truncation cases of Kafka's ``AbstractFetcherThreadTest`` (no KIP-320 diverging epochs).

Both logs are real ``Log``s, so each test checks log contents and epochs, the requests the leader saw, and
the fetcher's partition states.
"""

from __future__ import annotations

from trio.testing import MockClock

from fetcher.fetch_state import ReplicaState
from fetcher.replica_fetcher import EPOCH_RETRY_FIRST_MS
from fetcher.truncation import EpochEndOffset
from protocol.api_keys import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from protocol.errors import Errors
from tests.unit.fetcher.mock_leader_endpoint import FETCH, OFLE, SeenRequest
from tests.unit.fetcher.replica_fetcher_support import (
    BACKOFF_MS,
    FOLLOWER_ID,
    TP0,
    TP1,
    World,
    epochs,
    kip101_logs,
    now_ms,
    read_all,
    write,
)


async def test_kip101_follower_truncates_to_the_end_of_the_common_epoch_then_fetches(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    partition = world.follow(TP0, follower_log, 3, hw=3)
    assert world.state(TP0).state is ReplicaState.TRUNCATING
    assert world.state(TP0).fetch_offset == 6  # the LEO: the log has epochs

    await world.do_work()

    assert world.kinds() == [OFLE, FETCH]
    # The follower asks for the end of its latest epoch (2), naming the leader epoch it believes in (3).
    assert world.leader.requests[0].epoch_requests() == [(TP0, 3, 2)]
    # The leader never had epoch 2: it answers (1, 3); the follower's own epoch 1 also ends at 3.
    assert [(t.kind, t.offset, t.leo_before, t.leo_after) for t in partition.truncations] == [
        ("truncate_to", 3, 6, 3)
    ]
    assert "leader epoch 1 ends at 3" in partition.truncations[0].reason
    fetch = world.leader.requests[1]
    assert fetch.fetch_partitions() == [(TP0, 3)]
    assert fetch.fetch_partition(TP0).current_leader_epoch == 3
    assert fetch.fetch_request.replica_id == FOLLOWER_ID
    # The follower's log is now the leader's, byte for byte, epochs included.
    assert read_all(follower_log) == read_all(leader_log)
    assert epochs(follower_log) == [(1, 0), (3, 3)]
    assert partition.high_watermark == 5
    state = world.state(TP0)
    assert (state.state, state.fetch_offset, state.lag, state.last_fetched_epoch) == (
        ReplicaState.FETCHING,
        5,
        0,
        3,
    )


async def test_truncation_takes_several_rounds_when_the_follower_does_not_know_the_leaders_epoch(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log = world.leader_log(TP0, 5)
    write(leader_log, 1, 3, tag=0)  # 0..2
    write(leader_log, 3, 2, tag=30)  # 3..4
    write(leader_log, 5, 3, tag=50)  # 5..7
    follower_log = world.follower_log(TP0)
    write(follower_log, 1, 3, tag=0)  # 0..2
    write(follower_log, 2, 3, tag=20)  # 3..5
    write(follower_log, 4, 3, tag=40)  # 6..8
    partition = world.follow(TP0, follower_log, 5)

    # Round 1: the follower asks for epoch 4; the leader's largest epoch <= 4 is 3, ending at 5. The follower
    # never had epoch 3, so it cuts back to the end of its own epoch 2 (6) and asks again.
    await world.do_work()
    assert world.kinds() == [OFLE]
    assert world.leader.requests[0].epoch_requests() == [(TP0, 5, 4)]
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(6, 6)]
    assert "another round follows" in partition.truncations[0].reason
    assert epochs(follower_log) == [(1, 0), (2, 3)]
    assert world.state(TP0).state is ReplicaState.TRUNCATING
    assert world.state(TP0).fetch_offset == 6
    view = world.fetcher.describe(TP0)
    assert view is not None and view.state == "truncating"

    # Round 2: epoch 2 -> the leader's epoch 1 ends at 3, and so does the follower's: done.
    await world.do_work()
    assert world.kinds() == [OFLE, OFLE, FETCH]
    assert world.leader.requests[1].epoch_requests() == [(TP0, 5, 2)]
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(6, 6), (3, 3)]
    assert world.leader.requests[2].fetch_partitions() == [(TP0, 3)]
    assert read_all(follower_log) == read_all(leader_log)
    assert epochs(follower_log) == [(1, 0), (3, 3), (5, 5)]
    assert world.state(TP0).fetch_offset == 8


async def test_follower_without_epochs_truncates_to_its_high_watermark(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log = world.leader_log(TP0, 4)
    write(leader_log, -1, 3, tag=0)
    write(leader_log, 4, 2, tag=40)
    follower_log = world.follower_log(TP0)
    write(follower_log, -1, 3, tag=0)
    write(follower_log, -1, 3, tag=9)  # 3..5, never committed
    partition = world.follow(TP0, follower_log, 4, hw=3)
    assert world.state(TP0).fetch_offset == 3  # no epochs: start from the HW

    await world.do_work()

    assert world.kinds() == [FETCH]  # no OFFSET_FOR_LEADER_EPOCH without an epoch to ask about
    assert [(t.offset, t.leo_before, t.leo_after) for t in partition.truncations] == [(3, 6, 3)]
    assert partition.truncations[0].reason == "high_watermark"
    assert world.leader.requests[0].fetch_partitions() == [(TP0, 3)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_leader_with_no_epoch_for_the_request_makes_the_follower_truncate_to_its_initial_offset(
    world: World, autojump_clock: MockClock
) -> None:
    """The leader's log predates epochs, so it answers UNDEFINED_EPOCH_OFFSET: the follower falls back to the
    offset it was handed (its HW here)."""
    leader_log = world.leader_log(TP0, 3)
    write(leader_log, -1, 3, tag=0)
    write(leader_log, -1, 2, tag=30)
    follower_log = world.follower_log(TP0)
    write(follower_log, -1, 3, tag=0)
    write(follower_log, 2, 3, tag=20)  # 3..5, the follower's own epoch 2 the leader never had
    partition = world.follow(TP0, follower_log, 3, hw=3, init_offset=3)

    await world.do_work()

    assert world.kinds() == [OFLE, FETCH]
    assert world.leader.requests[0].epoch_requests() == [(TP0, 3, 2)]
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(3, 3)]
    assert world.leader.requests[1].fetch_partitions() == [(TP0, 3)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_same_leader_epoch_again_does_not_truncate_again_but_a_new_epoch_does(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    partition = world.follow(TP0, follower_log, 3, hw=3)
    await world.do_work()
    write(leader_log, 3, 4, tag=31)  # 5..8
    await world.do_work()
    assert world.state(TP0).fetch_offset == 9
    assert world.kinds() == [OFLE, FETCH, FETCH]

    # A repeated LEADER_AND_ISR with the same epoch: nothing changes, even with another initial offset.
    world.add(TP0, 3, 0)
    assert world.state(TP0).state is ReplicaState.FETCHING
    assert world.state(TP0).fetch_offset == 9
    await world.do_work()
    assert world.kinds() == [OFLE, FETCH, FETCH, FETCH]
    assert world.leader.last.fetch_partitions() == [(TP0, 9)]
    assert len(partition.truncations) == 1

    # A new epoch (the same leader re-elected): truncate again before fetching.
    world.new_leader_epoch(TP0, 4)
    world.follow(TP0, follower_log, 4)
    assert world.state(TP0).state is ReplicaState.TRUNCATING
    await world.do_work()
    assert world.kinds()[-2:] == [OFLE, FETCH]
    assert world.leader.requests[-2].epoch_requests() == [(TP0, 4, 3)]
    # Epoch 3 ends at the LEO on both sides: a truncation to the LEO, which removes nothing.
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(3, 3), (9, 9)]
    assert world.state(TP0).state is ReplicaState.FETCHING


async def test_unknown_leader_epoch_in_offset_for_leader_epoch_backs_off_and_retries(
    world: World, autojump_clock: MockClock
) -> None:
    """The follower heard of epoch 4 before the leader did: it asks again after EPOCH_RETRY_FIRST_MS (the
    leader is about to apply its LEADER_AND_ISR), not after the whole back-off."""
    leader_log, follower_log = kip101_logs(world)
    partition = world.follow(TP0, follower_log, 4, hw=3)
    start = now_ms()

    await world.fetcher.maybe_truncate()

    assert world.rm.error_codes(TP0) == [Errors.UNKNOWN_LEADER_EPOCH]
    assert not world.rm.failed
    assert partition.truncations == []
    state = world.state(TP0)
    assert (state.state, state.delay_until_ms) == (ReplicaState.TRUNCATING, start + EPOCH_RETRY_FIRST_MS)
    view = world.fetcher.describe(TP0)
    assert view is not None and view.state == "delayed"
    # Nothing to do until the back-off is over: maybe_fetch sends nothing and waits it out.
    await world.fetcher.maybe_fetch()
    assert world.kinds() == [OFLE]
    assert now_ms() == start + EPOCH_RETRY_FIRST_MS

    world.new_leader_epoch(TP0, 4)
    await world.do_work()
    assert world.kinds() == [OFLE, OFLE, FETCH]
    assert world.leader.requests[1].at * 1000 >= start + EPOCH_RETRY_FIRST_MS
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(3, 3)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_an_offset_for_leader_epoch_error_for_the_partition_backs_off(
    world: World, autojump_clock: MockClock
) -> None:
    """An error the leader gives for the partition (here the INVALID_REQUEST of a request it refused as a
    whole, which the endpoint hands out to every partition asked about): back off, do not ask again at
    once."""
    leader_log, follower_log = kip101_logs(world)
    partition = world.follow(TP0, follower_log, 3, hw=3)
    world.leader.script(
        OFLE, {TP0: EpochEndOffset(int(Errors.INVALID_REQUEST), UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)}
    )
    start = now_ms()

    await world.do_work()
    await world.do_work()

    assert world.kinds() == [OFLE, OFLE, FETCH]
    assert world.leader.requests[1].at * 1000 >= start + BACKOFF_MS
    assert world.rm.error_codes(TP0) == [Errors.INVALID_REQUEST]
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(3, 3)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_leader_epoch_change_while_offset_for_leader_epoch_is_in_flight_drops_the_answer(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    partition = world.follow(TP0, follower_log, 3, hw=3)

    def answer_then_new_epoch(seen: SeenRequest) -> dict[tuple[str, int], EpochEndOffset]:
        answer = world.leader.answer_epoch_end_offsets(seen.epochs)  # a good answer for epoch 3 ...
        world.new_leader_epoch(TP0, 4)  # ... but epoch 4 starts before it arrives
        world.follow(TP0, follower_log, 4)
        return answer

    world.leader.script(OFLE, answer_then_new_epoch)
    await world.do_work()

    assert world.kinds() == [OFLE]
    assert partition.truncations == []
    assert follower_log.log_end_offset == 6
    state = world.state(TP0)
    assert (state.state, state.current_leader_epoch, state.fetch_offset) == (ReplicaState.TRUNCATING, 4, 6)

    await world.do_work()
    assert world.kinds() == [OFLE, OFLE, FETCH]
    assert world.leader.requests[1].epoch_requests() == [(TP0, 4, 2)]
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(3, 3)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_partition_removed_while_offset_for_leader_epoch_is_in_flight_is_not_truncated(
    world: World, autojump_clock: MockClock
) -> None:
    """Kafka's shouldFilterPartitionsMadeLeaderDuringLeaderEpochRequest."""
    _, follower_log = kip101_logs(world)
    t1_leader = world.leader_log(TP1, 3)
    write(t1_leader, 1, 3, tag=0)
    write(t1_leader, 3, 2, tag=31)
    t1_follower = world.follower_log(TP1)
    write(t1_follower, 1, 3, tag=0)
    write(t1_follower, 2, 1, tag=21)  # 3, never committed
    p0 = world.follow(TP0, follower_log, 3, hw=3)
    p1 = world.follow(TP1, t1_follower, 3, hw=3)

    def answer_then_become_leader(seen: SeenRequest) -> dict[tuple[str, int], EpochEndOffset]:
        answer = world.leader.answer_epoch_end_offsets(seen.epochs)
        world.fetcher.remove_partitions([TP0])  # this broker became TP0's leader
        del world.rm.partitions[TP0]
        return answer

    world.leader.script(OFLE, answer_then_become_leader)
    await world.do_work()

    assert world.leader.requests[0].epoch_requests() == [(TP0, 3, 2), (TP1, 3, 2)]
    assert p0.truncations == [] and follower_log.log_end_offset == 6
    assert [(t.offset, t.leo_after) for t in p1.truncations] == [(3, 3)]
    assert world.leader.requests[1].fetch_partitions() == [(TP1, 3)]
    assert read_all(t1_follower) == read_all(t1_leader)
    assert not world.fetcher.owns(TP0)
