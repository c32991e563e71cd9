"""``build_fetch`` and ``process_partition_data``: what the fetcher asks for, in which order, what it takes
from the leader's answer (records, high watermark, log start offset, lag), and answers it drops because the
partition moved while the request was in flight."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from trio.testing import MockClock

from fetcher.fetch_state import ReplicaState
from protocol.common import TopicPartition
from protocol.messages import FetchResponse
from tests.unit.fetcher.mock_leader_endpoint import FETCH, SeenRequest
from tests.unit.fetcher.replica_fetcher_support import (
    TP0,
    TP1,
    World,
    batch,
    kip101_logs,
    make_world,
    write,
)


async def test_fetch_request_carries_the_fetcher_settings_and_each_partitions_state(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    world = make_world(tmp_path, wait_max_ms=250, min_bytes=7, max_bytes=4096, response_max_bytes=65536)
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, -1, 2, tag=0)
    write(leader_log, 1, 1, tag=1)
    follower_log = world.follower_log(TP0)
    write(follower_log, -1, 2, tag=0)
    follower_log.maybe_increment_log_start_offset(1)
    world.follow(TP0, follower_log, 1, hw=2)  # no epochs: truncate to the HW, then fetch

    await world.do_work()

    assert world.kinds() == [FETCH]
    request = world.leader.last.fetch_request
    assert (request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes) == (
        2,
        250,
        7,
        65536,
    )
    assert request.isolation_level == 0
    partition = world.leader.last.fetch_partition(TP0)
    assert (
        partition.fetch_offset,
        partition.log_start_offset,
        partition.partition_max_bytes,
        partition.current_leader_epoch,
    ) == (2, 1, 4096, 1)
    assert world.fetcher.fetch_requests == 1


async def test_nothing_to_fetch_sends_nothing(world: World, autojump_clock: MockClock) -> None:
    assert world.fetcher.build_fetch() is None
    await world.fetcher.maybe_fetch()
    assert world.leader.requests == []


async def test_fetch_answer_for_a_partition_whose_state_changed_in_flight_is_dropped(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    world.follow(TP0, follower_log, 3, hw=3)
    await world.do_work()
    write(leader_log, 3, 3, tag=32)  # 5..7

    def answer_then_re_add(seen: SeenRequest) -> FetchResponse:
        response = world.leader.answer_fetch(seen.fetch_request)
        # STOP_REPLICA + LEADER_AND_ISR: the same epoch, but a new fetch state (Truncating from 0).
        world.fetcher.remove_partitions([TP0])
        world.add(TP0, 3, 0)
        return response

    world.leader.script(FETCH, answer_then_re_add)
    await world.do_work()

    assert world.leader.last.fetch_partitions() == [(TP0, 5)]
    assert follower_log.log_end_offset == 5  # the records of 5..7 were not appended
    state = world.state(TP0)
    assert (state.state, state.fetch_offset) == (ReplicaState.TRUNCATING, 0)


async def test_fetch_answer_for_a_partition_removed_in_flight_is_dropped(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    partition = world.follow(TP0, follower_log, 3, hw=3)
    await world.do_work()
    write(leader_log, 3, 3, tag=32)
    world.leader.high_watermarks[TP0] = 8

    def answer_then_remove(seen: SeenRequest) -> FetchResponse:
        response = world.leader.answer_fetch(seen.fetch_request)
        world.fetcher.remove_partitions([TP0])
        return response

    world.leader.script(FETCH, answer_then_remove)
    await world.do_work()

    assert follower_log.log_end_offset == 5
    assert partition.high_watermark == 5
    assert world.fetcher.partition_count == 0


async def test_partitions_that_returned_data_go_to_the_end_of_the_next_request(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """With a response too small for both partitions, they take turns. The leader keeps no sessions here, so
    every request is full and shows the fetcher's order."""
    one_batch = len(batch(5, 0))
    world = make_world(tmp_path, session_slots=0, response_max_bytes=one_batch)
    followers = {}
    for tp in (TP0, TP1):
        leader_log = world.leader_log(tp, 1)
        for tag in range(3):
            write(leader_log, 1, 5, tag=tag)
        followers[tp] = world.follower_log(tp)
        world.follow(tp, followers[tp], 1)

    orders = []
    for _ in range(4):
        await world.do_work()
        orders.append(world.leader.last.fetch_partitions())
        assert world.leader.last.session == (0, 0)

    assert orders == [
        [(TP0, 0), (TP1, 0)],
        [(TP1, 0), (TP0, 5)],
        [(TP0, 5), (TP1, 5)],
        [(TP1, 5), (TP0, 10)],
    ]
    assert (followers[TP0].log_end_offset, followers[TP1].log_end_offset) == (10, 10)
    assert world.fetcher.partitions.partition_states.partition_set() == [TP0, TP1]


async def test_high_watermark_comes_from_the_leader_clamped_to_the_log_end_and_lag_is_reported(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    one_batch = len(batch(5, 0))
    world = make_world(tmp_path, max_bytes=one_batch)  # one batch per partition per fetch
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, 1, 5, tag=0)
    write(leader_log, 1, 5, tag=1)
    follower_log = world.follower_log(TP0)
    partition = world.follow(TP0, follower_log, 1)

    await world.do_work()
    # The leader's HW is 10, but the follower only has 5 records.
    assert (follower_log.log_end_offset, partition.high_watermark) == (5, 5)
    view = world.fetcher.describe(TP0)
    assert view is not None and (view.state, view.fetch_offset, view.lag) == ("fetching", 5, 5)
    assert not world.state(TP0).is_replica_in_sync

    await world.do_work()
    assert (follower_log.log_end_offset, partition.high_watermark, world.state(TP0).lag) == (10, 10, 0)
    assert world.state(TP0).is_replica_in_sync

    # The leader's HW lags its LEO (a follower is behind): the follower takes it as it is.
    write(leader_log, 1, 5, tag=2)
    world.leader.high_watermarks[TP0] = 10
    leader_log.maybe_increment_log_start_offset(5)
    await world.do_work()
    assert (follower_log.log_end_offset, partition.high_watermark, world.state(TP0).lag) == (15, 10, 0)
    # ... and follows the leader's log start offset (up to its HW).
    assert follower_log.log_start_offset == 5


async def test_the_appends_of_an_answer_are_prepared_before_they_are_made_and_rechecked_after(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """The replica manager prepares one answer's appends together (the broker makes their new leader
    epochs durable off the event loop) before any is made; a partition removed while that was awaited is
    not appended."""
    world = make_world(tmp_path)
    followers = {}
    for tp in (TP0, TP1):
        leader_log = world.leader_log(tp, 1)
        write(leader_log, 1, 4, tag=0)
        followers[tp] = world.follower_log(tp)
        world.follow(tp, followers[tp], 1)
    prepared: list[tuple[dict[TopicPartition, bytes], dict[TopicPartition, int]]] = []

    @asynccontextmanager
    async def follower_appends(appends: Mapping[TopicPartition, bytes]) -> AsyncIterator[None]:
        prepared.append((dict(appends), {tp: log.log_end_offset for tp, log in followers.items()}))
        await trio.sleep(0.01)  # e.g. a worker thread's fsyncs
        world.fetcher.remove_partitions([TP1])  # a LEADER_AND_ISR meanwhile
        yield

    world.rm.follower_appends = follower_appends  # type: ignore[method-assign]
    await world.do_work()

    [(appends, leos)] = prepared
    assert sorted(appends) == [TP0, TP1] and all(appends.values())
    assert leos == {TP0: 0, TP1: 0}  # nothing appended before
    assert (followers[TP0].log_end_offset, followers[TP1].log_end_offset) == (4, 0)
