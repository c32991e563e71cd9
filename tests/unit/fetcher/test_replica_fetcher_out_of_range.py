"""OFFSET_OUT_OF_RANGE in FETCH: the fetcher asks the leader for its log end (``fetch_latest_offset``) and,
if the follower is not ahead, its log start (``fetch_earliest_offset``), then truncates and fetches from the
new offset (Kafka's ``fetchOffsetAndTruncate``)."""

from __future__ import annotations

from trio.testing import MockClock

from fetcher.fetch_state import ReplicaState
from protocol.api_keys import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from protocol.errors import Errors, KafkaError
from tests.unit.fetcher.mock_leader_endpoint import FETCH, LIST_OFFSETS, OFLE, SeenRequest
from tests.unit.fetcher.replica_fetcher_support import (
    BACKOFF_MS,
    TP0,
    World,
    batch_ranges,
    now_ms,
    out_of_range_low_logs,
    read_all,
    write,
)


async def test_out_of_range_high_after_unclean_election_truncates_to_the_leaders_leo(
    world: World, autojump_clock: MockClock
) -> None:
    """The follower (no epochs, so no OFFSET_FOR_LEADER_EPOCH) has 8 records; the unclean leader only had 5
    and wrote 2 of its own. Kafka's testFollowerFetchOutOfRangeHigh."""
    leader_log = world.leader_log(TP0, 2)
    write(leader_log, -1, 5, tag=0)  # 0..4
    write(leader_log, 2, 2, tag=70)  # 5..6
    follower_log = world.follower_log(TP0)
    write(follower_log, -1, 5, tag=0)  # 0..4
    write(follower_log, -1, 3, tag=80)  # 5..7, lost with the old leader
    partition = world.follow(TP0, follower_log, 2, hw=8)

    await world.do_work()

    assert world.kinds() == [FETCH, LIST_OFFSETS]
    assert world.leader.requests[0].fetch_partitions() == [(TP0, 8)]
    assert world.leader.requests[1].list_offset == (TP0, 2, LATEST_TIMESTAMP)
    assert world.rm.error_codes(TP0) == []
    # To the HW (nothing), then to the leader's LEO 7. Truncation is by whole batches, so the follower's
    # batch 5..7 goes entirely and the fetcher must fetch from 5, where the log now ends, not from 7.
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(8, 8), (7, 5)]
    assert "out_of_range" in partition.truncations[1].reason
    state = world.state(TP0)
    assert (state.state, state.fetch_offset, state.lag) == (ReplicaState.FETCHING, 5, 2)

    await world.do_work()
    assert world.leader.last.fetch_partitions() == [(TP0, 5)]
    assert read_all(follower_log) == read_all(leader_log)
    assert batch_ranges(follower_log) == [(0, 4, -1), (5, 6, 2)]
    assert world.leader.follower_fetch_offsets[TP0] == 5  # the leader never heard of a LEO above 5


async def test_out_of_range_low_truncates_fully_and_starts_at_the_leaders_log_start(
    world: World, autojump_clock: MockClock
) -> None:
    """The follower is so far behind that the leader deleted what it needs. Kafka's
    testFollowerFetchOutOfRangeLow."""
    leader_log, follower_log = out_of_range_low_logs(world)
    partition = world.follow(TP0, follower_log, 2, hw=3)

    await world.do_work()

    assert world.kinds() == [OFLE, FETCH, LIST_OFFSETS, LIST_OFFSETS]
    assert world.leader.requests[1].fetch_partitions() == [(TP0, 3)]
    assert [r.list_offset for r in world.leader.requests[2:]] == [
        (TP0, 2, LATEST_TIMESTAMP),
        (TP0, 2, EARLIEST_TIMESTAMP),
    ]
    assert [(t.kind, t.offset) for t in partition.truncations] == [
        ("truncate_to", 3),  # OFFSET_FOR_LEADER_EPOCH: epoch 1 agrees up to the follower's LEO
        ("truncate_fully_and_start_at", 10),
    ]
    assert (follower_log.log_start_offset, follower_log.log_end_offset) == (10, 10)
    assert partition.high_watermark == 10
    state = world.state(TP0)
    assert (state.state, state.fetch_offset, state.lag) == (ReplicaState.FETCHING, 10, 5)

    await world.do_work()
    last = world.leader.last
    assert last.fetch_partitions() == [(TP0, 10)]
    assert last.fetch_partition(TP0).log_start_offset == 10
    assert batch_ranges(follower_log) == [(10, 14, 2)]
    assert follower_log.read(10, 1 << 20) == leader_log.read(10, 1 << 20)


async def test_list_offsets_error_while_resetting_backs_off_then_retries(
    world: World, autojump_clock: MockClock
) -> None:
    """Kafka's testRetryAfterUnknownLeaderEpochInLatestOffsetFetch."""
    _, follower_log = out_of_range_low_logs(world)
    partition = world.follow(TP0, follower_log, 2, hw=3)
    world.leader.script(LIST_OFFSETS, KafkaError(Errors.UNKNOWN_LEADER_EPOCH))
    start = now_ms()

    await world.do_work()
    assert world.kinds() == [OFLE, FETCH, LIST_OFFSETS]
    assert world.rm.error_codes(TP0) == [Errors.UNKNOWN_LEADER_EPOCH]
    assert not world.rm.failed
    state = world.state(TP0)
    assert (state.fetch_offset, state.delay_until_ms) == (3, start + BACKOFF_MS)
    assert follower_log.log_end_offset == 3

    for _ in range(5):
        if partition.truncations[-1].kind == "truncate_fully_and_start_at":
            break
        await world.do_work()
    # Retried only after the back-off (a request that just forgets TP0 in the session may go out first).
    retries = [r for r in world.leader.seen(FETCH) if r.fetch_partitions()]
    assert [r.fetch_partitions() for r in retries] == [[(TP0, 3)], [(TP0, 3)]]
    assert retries[1].at * 1000 >= start + BACKOFF_MS
    assert [r.list_offset for r in world.leader.seen(LIST_OFFSETS)] == [
        (TP0, 2, LATEST_TIMESTAMP),
        (TP0, 2, LATEST_TIMESTAMP),
        (TP0, 2, EARLIEST_TIMESTAMP),
    ]
    assert partition.truncations[-1].kind == "truncate_fully_and_start_at"
    assert world.state(TP0).fetch_offset == 10


async def test_fenced_list_offsets_while_resetting_fails_the_partition(
    world: World, autojump_clock: MockClock
) -> None:
    """Kafka's testFencedOffsetResetAfterOutOfRange."""
    _, follower_log = out_of_range_low_logs(world)
    partition = world.follow(TP0, follower_log, 2, hw=3)

    def new_epoch_then_answer(seen: SeenRequest) -> int:
        world.leader.leader_epochs[TP0] = 3
        assert seen.list_offset is not None
        return world.leader.answer_list_offset(*seen.list_offset)  # raises FENCED_LEADER_EPOCH

    world.leader.script(LIST_OFFSETS, new_epoch_then_answer)
    await world.do_work()

    assert world.kinds() == [OFLE, FETCH, LIST_OFFSETS]
    assert [tp for tp, _ in world.rm.failed] == [TP0]
    assert world.rm.error_codes(TP0) == [Errors.FENCED_LEADER_EPOCH]
    view = world.fetcher.describe(TP0)
    assert view is not None and view.state == "failed"
    assert [t.kind for t in partition.truncations] == ["truncate_to"]
    assert follower_log.log_end_offset == 3


async def test_new_leader_epoch_while_list_offsets_is_in_flight_leaves_the_fresh_state_alone(
    world: World, autojump_clock: MockClock
) -> None:
    """A LEADER_AND_ISR arrives while the reset's LIST_OFFSETS is in flight: the answer is for the old epoch,
    so the partition keeps its new (Truncating) state and is neither reset nor failed."""
    _, follower_log = out_of_range_low_logs(world)
    partition = world.follow(TP0, follower_log, 2, hw=3)

    def new_epoch_then_answer(seen: SeenRequest) -> int:
        assert seen.list_offset is not None
        offset = world.leader.answer_list_offset(*seen.list_offset)
        world.new_leader_epoch(TP0, 3)
        world.follow(TP0, follower_log, 3)
        return offset

    world.leader.script(LIST_OFFSETS, new_epoch_then_answer)
    await world.do_work()

    assert world.kinds() == [OFLE, FETCH, LIST_OFFSETS]
    assert not world.rm.failed and world.rm.fetch_errors == []
    assert [t.kind for t in partition.truncations] == ["truncate_to"]
    state = world.state(TP0)
    assert (state.state, state.current_leader_epoch, state.fetch_offset) == (ReplicaState.TRUNCATING, 3, 3)
