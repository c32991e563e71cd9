"""How ``ReplicaFetcher`` takes errors: fencing (the partition fails until the next LEADER_AND_ISR),
per-partition errors and corrupt records (that partition backs off), append failures (that partition fails),
and lost connections or unreadable answers (every partition backs off and the fetcher connects again).
Ports of Kafka's ``AbstractFetcherThreadTest`` error cases."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from fetcher.fetch_state import ReplicaState
from fetcher.leader_endpoint import FetchFailed, InvalidLeaderResponse
from fetcher.truncation import EpochEndOffset
from protocol.errors import Errors
from protocol.messages import FetchResponse
from protocol.records import build_simple_batch
from tests.unit.fetcher.mock_leader_endpoint import FETCH, OFLE, SeenRequest, patch_partition
from tests.unit.fetcher.replica_fetcher_support import (
    BACKOFF_MS,
    TP0,
    TP1,
    World,
    kip101_logs,
    make_world,
    now_ms,
    read_all,
    write,
)
from tests.unit.waiting import wait_for

# ------------------------------------------------------------------------------------------- fencing


async def test_fenced_epoch_in_offset_for_leader_epoch_fails_the_partition_until_added_again(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    world.leader.leader_epochs[TP0] = 4  # the leader already has a newer epoch than the follower
    partition = world.follow(TP0, follower_log, 3, hw=3)

    await world.do_work()

    assert world.kinds() == [OFLE]
    assert partition.truncations == []
    assert [tp for tp, _ in world.rm.failed] == [TP0]
    assert world.rm.error_codes(TP0) == [Errors.FENCED_LEADER_EPOCH]
    assert world.fetcher.partition_count == 0
    assert world.fetcher.owns(TP0)
    view = world.fetcher.describe(TP0)
    assert view is not None and (view.state, view.fetch_offset) == ("failed", 6)
    # A failed partition is not fetched.
    await world.do_work()
    assert world.kinds() == [OFLE]

    # The LEADER_AND_ISR with the new epoch brings it back.
    leader_log.leader_epoch_cache.assign(4, leader_log.log_end_offset)
    world.follow(TP0, follower_log, 4)
    assert not world.fetcher.partitions.failed_partitions
    await world.do_work()
    assert world.kinds() == [OFLE, OFLE, FETCH]
    assert world.leader.requests[1].epoch_requests() == [(TP0, 4, 2)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_fenced_answer_for_an_epoch_replaced_while_in_flight_does_not_fail_the_partition(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    world.follow(TP0, follower_log, 3, hw=3)

    def new_epoch_then_answer(seen: SeenRequest) -> dict[tuple[str, int], EpochEndOffset]:
        world.new_leader_epoch(TP0, 4)
        world.follow(TP0, follower_log, 4)
        return world.leader.answer_epoch_end_offsets(seen.epochs)  # FENCED_LEADER_EPOCH for epoch 3

    world.leader.script(OFLE, new_epoch_then_answer)
    await world.do_work()

    assert not world.rm.failed
    assert world.state(TP0).current_leader_epoch == 4
    await world.do_work()
    assert read_all(follower_log) == read_all(leader_log)


async def test_fenced_epoch_in_fetch_fails_the_partition(world: World, autojump_clock: MockClock) -> None:
    leader_log, follower_log = kip101_logs(world)
    world.follow(TP0, follower_log, 3, hw=3)
    await world.do_work()
    world.leader.leader_epochs[TP0] = 4
    write(leader_log, 4, 2, tag=40)

    await world.do_work()

    assert world.kinds() == [OFLE, FETCH, FETCH]
    assert world.rm.error_codes(TP0) == [Errors.FENCED_LEADER_EPOCH]
    assert [tp for tp, _ in world.rm.failed] == [TP0]
    assert follower_log.log_end_offset == 5  # nothing of epoch 4 was appended
    view = world.fetcher.describe(TP0)
    assert view is not None and view.state == "failed"


# ------------------------------------------------------------------------------------------- one partition


async def test_partition_error_delays_only_that_partition_and_drops_it_from_the_session(
    world: World, autojump_clock: MockClock
) -> None:
    """UNKNOWN_LEADER_EPOCH in FETCH (Kafka's testUnknownLeaderEpochWhileFetching): TP0 backs off, TP1 goes
    on; a delayed partition is left out of the request (forgotten in the session) until its back-off ends."""
    logs = {}
    for tp in (TP0, TP1):
        leader_log = world.leader_log(tp, 1)
        write(leader_log, 1, 3, tag=tp[1])
        logs[tp] = world.follower_log(tp)
        world.follow(tp, logs[tp], 1)
    world.leader.script(
        FETCH, patch_partition(world.leader, TP0, error_code=int(Errors.UNKNOWN_LEADER_EPOCH), records=b"")
    )
    start = now_ms()
    await world.do_work()
    assert world.rm.error_codes(TP0) == [Errors.UNKNOWN_LEADER_EPOCH]
    assert (logs[TP0].log_end_offset, logs[TP1].log_end_offset) == (0, 3)
    assert world.state(TP0).delay_until_ms == start + BACKOFF_MS
    assert world.state(TP0).state is ReplicaState.FETCHING
    assert not world.rm.failed

    await world.do_work()
    during = world.leader.last
    assert during.at * 1000 < start + BACKOFF_MS
    assert during.fetch_partitions() == [(TP1, 3)]
    assert during.forgotten() == [TP0]

    await trio.sleep(BACKOFF_MS / 1000)
    await world.do_work()
    assert world.leader.last.fetch_partitions() == [(TP0, 0)]
    assert logs[TP0].log_end_offset == 3


async def test_a_leader_behind_the_followers_epoch_is_asked_again_soon_then_later(
    world: World, autojump_clock: MockClock
) -> None:
    """UNKNOWN_LEADER_EPOCH in OFFSET_FOR_LEADER_EPOCH: the new leader has not applied its LEADER_AND_ISR yet
    (the follower's was quicker). The partition waits 10 ms, then twice as long each time (up to the
    back-off), instead of the whole back-off at once; once the leader has the epoch, truncation goes on."""
    leader_log, follower_log = kip101_logs(world)
    world.leader.leader_epochs[TP0] = 3  # still the old epoch
    world.follow(TP0, follower_log, 4)
    start = now_ms()
    await world.do_work()
    assert world.rm.error_codes(TP0) == [Errors.UNKNOWN_LEADER_EPOCH]
    assert world.state(TP0).delay_until_ms == start + 10
    await trio.sleep(0.01)
    start = now_ms()
    await world.do_work()
    assert world.state(TP0).delay_until_ms == start + 20
    # The leader applies its LEADER_AND_ISR: the next round truncates and fetches.
    leader_log.leader_epoch_cache.assign(4, leader_log.log_end_offset)
    world.leader.leader_epochs[TP0] = 4
    await trio.sleep(0.02)
    await world.do_work()
    assert world.kinds() == [OFLE, OFLE, OFLE, FETCH]
    assert world.rm.error_codes(TP0) == [Errors.UNKNOWN_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH]


async def test_corrupt_records_back_off_and_are_fetched_again(
    world: World, autojump_clock: MockClock
) -> None:
    """Kafka's testCorruptMessage: a bad batch is not appended; the partition retries after the back-off."""
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, 1, 5, tag=0)
    follower_log = world.follower_log(TP0)
    world.follow(TP0, follower_log, 1)
    good = leader_log.read(0, 1 << 20)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    world.leader.script(FETCH, patch_partition(world.leader, TP0, records=bytes(corrupt)))
    start = now_ms()

    await world.do_work()
    assert follower_log.log_end_offset == 0
    assert world.rm.error_codes(TP0) == [Errors.CORRUPT_MESSAGE]
    assert not world.rm.failed
    assert world.state(TP0).delay_until_ms == start + BACKOFF_MS

    for _ in range(5):
        if follower_log.log_end_offset:
            break
        await world.do_work()
    retries = [r for r in world.leader.seen(FETCH) if r.fetch_partitions()]
    assert [r.fetch_partitions() for r in retries] == [[(TP0, 0)], [(TP0, 0)]]
    assert retries[1].at * 1000 >= start + BACKOFF_MS
    assert read_all(follower_log) == good


async def test_append_failure_fails_that_partition_and_the_others_go_on(
    world: World, autojump_clock: MockClock
) -> None:
    """Kafka's testFetcherThreadHandlingPartitionFailureDuringAppending: records that do not continue the
    follower's log fail the partition; the fetcher and the other partitions carry on."""
    logs = {}
    for tp in (TP0, TP1):
        leader_log = world.leader_log(tp, 1)
        write(leader_log, 1, 3, tag=tp[1])
        logs[tp] = world.follower_log(tp)
        world.follow(tp, logs[tp], 1)
    misplaced = build_simple_batch([b"x"], base_offset=100, partition_leader_epoch=1, base_timestamp=1_000)
    world.leader.script(FETCH, patch_partition(world.leader, TP0, records=misplaced))

    await world.do_work()

    assert [tp for tp, _ in world.rm.failed] == [TP0]
    assert (logs[TP0].log_end_offset, logs[TP1].log_end_offset) == (0, 3)
    view = world.fetcher.describe(TP0)
    assert view is not None and view.state == "failed"
    write(world.leader.logs[TP1], 1, 2, tag=5)
    await world.do_work()
    assert world.leader.last.forgotten() == [TP0]
    assert logs[TP1].log_end_offset == 5


async def test_partitions_no_longer_followed_are_dropped(world: World, autojump_clock: MockClock) -> None:
    for tp in (TP0, TP1):
        leader_log = world.leader_log(tp, 1)
        write(leader_log, 1, 3, tag=tp[1])
        world.follow(tp, world.follower_log(tp), 1)
    del world.rm.partitions[TP0]  # this broker leads TP0 now
    await world.do_work()
    assert world.leader.last.fetch_partitions() == [(TP1, 0)]
    assert world.fetcher.partition_count == 1 and not world.fetcher.owns(TP0)


# ------------------------------------------------------------------------------------------- every partition


async def test_failed_requests_raise_fetch_failed_and_change_nothing(
    world: World, autojump_clock: MockClock
) -> None:
    _, follower_log = kip101_logs(world)
    world.follow(TP0, follower_log, 3, hw=3)
    world.leader.script(OFLE, FetchFailed("OFFSET_FOR_LEADER_EPOCH failed: timed out"))
    with pytest.raises(FetchFailed):
        await world.do_work()
    assert world.state(TP0).state is ReplicaState.TRUNCATING
    assert follower_log.log_end_offset == 6
    world.leader.script(FETCH, FetchFailed("FETCH failed: connection reset"))
    with pytest.raises(FetchFailed):
        await world.do_work()
    assert follower_log.log_end_offset == 3
    assert world.state(TP0).fetch_offset == 3


async def test_run_backs_off_after_connection_errors_and_reconnects(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    world = make_world(tmp_path)
    world.leader.long_poll = True
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, 1, 3, tag=0)
    follower_log = world.follower_log(TP0)
    world.follow(TP0, follower_log, 1)
    world.leader.refuse_connect(FetchFailed("cannot connect: connection refused"))
    created: list[int] = []

    def first_fetch(seen: SeenRequest) -> FetchResponse:
        response = world.leader.answer_fetch(seen.fetch_request)
        created.append(response.session_id)
        return response

    world.leader.script(FETCH, first_fetch, FetchFailed("FETCH failed: connection reset"))

    def fetches() -> list[SeenRequest]:
        return world.leader.seen(FETCH)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(world.fetcher.run)
        await wait_for(lambda: len(fetches()) >= 4, "four FETCH requests")
        nursery.cancel_scope.cancel()

    connects = world.leader.connects
    start = connects[0]
    # Refused -> back off -> connect; the second FETCH is lost -> back off -> reconnect.
    assert len(connects) == 3
    assert connects[1] - start >= BACKOFF_MS / 1000
    assert connects[2] - fetches()[1].at >= BACKOFF_MS / 1000
    assert world.rm.error_codes(TP0) == [Errors.NETWORK_EXCEPTION, Errors.NETWORK_EXCEPTION]
    # After the lost request the fetcher closes its session and opens a new one with a full request.
    third = fetches()[2]
    assert created[0] != 0
    assert third.session == (created[0], 0)
    assert third.fetch_partitions() == [(TP0, 3)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_run_survives_an_answer_it_cannot_read(tmp_path: Path, autojump_clock: MockClock) -> None:
    """A malformed FETCH response must not take the broker down: the fetcher drops the connection, backs off
    every partition and starts again."""
    world = make_world(tmp_path)
    world.leader.long_poll = True
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, 1, 3, tag=0)
    follower_log = world.follower_log(TP0)
    world.follow(TP0, follower_log, 1)
    world.leader.script(
        FETCH,
        InvalidLeaderResponse("FETCH response: missing field 'responses[0].partitions[0].partition_index'"),
    )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(world.fetcher.run)
        await wait_for(lambda: follower_log.log_end_offset > 0, "the follower to fetch after the bad answer")
        nursery.cancel_scope.cancel()

    connects = world.leader.connects
    assert len(connects) == 2
    assert connects[1] - connects[0] >= BACKOFF_MS / 1000
    assert world.rm.error_codes(TP0) == [Errors.UNKNOWN_SERVER_ERROR]
    assert read_all(follower_log) == read_all(leader_log)
