"""The ``ReplicaFetcher`` shell, driven one ``do_work`` at a time against a fake leader (no sockets).

Ports of the cases of Kafka's ``AbstractFetcherThreadTest`` and ``ReplicaFetcherThreadTest`` that apply to
isrsim (no KIP-320 diverging epochs, no tiered storage, no topic ids). The leader answers from real
``Log``s with their real leader epoch caches and the broker's real ``FetchManager``; the follower's
partitions are real ``Log``s too, so every test checks log contents and offsets, the requests the leader
saw, and the fetcher's partition states. Time is trio's autojump clock: back-offs and long polls take no
real time, and the fetcher's ``clock_ms`` reads the same virtual clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from broker.log.log import Log
from fetcher import replica_fetcher
from fetcher.fetch_state import InitialFetchState, PartitionFetchState, ReplicaState
from fetcher.fetcher_manager import ReplicaFetcherManager
from fetcher.replica_fetcher import FetcherSettings, FetchFailed, ReplicaFetcher
from protocol.api_keys import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKeys
from protocol.client import ConnectionClosed
from protocol.common import BrokerEndpoint
from protocol.errors import Errors
from protocol.records import build_simple_batch
from protocol.replication import InitialFetchState as InterfaceInitialFetchState
from tests.unit.fetcher.replica_fetcher_support import (
    FakeFollowerPartition,
    FakeLeader,
    FakeReplicaManager,
    SeenRequest,
    batch,
    batch_ranges,
    epochs,
    open_log,
    read_all,
    write,
)

TP0 = ("topic", 0)
TP1 = ("topic", 1)
LEADER_ID = 1
FOLLOWER_ID = 2
BACKOFF_MS = 1000

OFLE = ApiKeys.OFFSET_FOR_LEADER_EPOCH
FETCH = ApiKeys.FETCH
LIST_OFFSETS = ApiKeys.LIST_OFFSETS


def now_ms() -> int:
    return int(trio.current_time() * 1000)


@dataclass
class World:
    tmp: Path
    leader: FakeLeader
    rm: FakeReplicaManager
    fetcher: ReplicaFetcher

    def leader_log(self, tp: tuple[str, int], leader_epoch: int) -> Log:
        log = open_log(self.tmp / "leader", tp)
        self.leader.add_partition(tp, log, leader_epoch)
        return log

    def follower_log(self, tp: tuple[str, int]) -> Log:
        return open_log(self.tmp / "follower", tp)

    def follow(
        self, tp: tuple[str, int], log: Log, leader_epoch: int, *, hw: int = 0, init_offset: int | None = None
    ) -> FakeFollowerPartition:
        """Make this broker a follower of ``tp`` and hand it to the fetcher the way
        ``ReplicaManager.make_followers`` does: start at the LEO if the log has epochs, else at the HW."""
        partition = self.rm.partitions.get(tp)
        if partition is None:
            partition = FakeFollowerPartition(log, high_watermark=hw, leader_epoch=leader_epoch)
            self.rm.partitions[tp] = partition
        partition.epoch = leader_epoch
        if init_offset is None:
            has_epochs = log.leader_epoch_cache.latest_epoch() is not None
            init_offset = log.log_end_offset if has_epochs else partition.high_watermark
        self.fetcher.add_partitions({tp: InitialFetchState(LEADER_ID, leader_epoch, init_offset)})
        return partition

    def state(self, tp: tuple[str, int]) -> PartitionFetchState:
        state = self.fetcher.partitions.fetch_state(tp)
        assert state is not None, f"{tp} has no fetch state"
        return state

    def kinds(self) -> list[ApiKeys]:
        return [r.api_key for r in self.leader.requests]

    async def do_work(self) -> None:
        await self.fetcher.do_work(self.leader)  # type: ignore[arg-type]


def make_world(tmp_path: Path, **settings: Any) -> World:
    leader = FakeLeader(LEADER_ID, session_slots=settings.pop("session_slots", 10))
    rm = FakeReplicaManager(FOLLOWER_ID)
    values: dict[str, Any] = {"wait_max_ms": 500, "backoff_ms": BACKOFF_MS}
    values.update(settings)
    fetcher = ReplicaFetcher(
        "test-fetcher", 0, leader.endpoint, rm, FetcherSettings(**values), clock_ms=now_ms
    )
    return World(tmp_path, leader, rm, fetcher)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def patch_partition(
    leader: FakeLeader, tp: tuple[str, int], **fields: Any
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A scripted FETCH answer: the leader's real answer with ``tp``'s fields replaced."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        resp = leader.answer(FETCH, body)
        for t in resp["responses"]:
            for p in t["partitions"]:
                if (t["topic"], p["partition_index"]) == tp:
                    p.update(fields)
                    return resp
        raise AssertionError(f"{tp} is not in the leader's answer")

    return answer


def kip101_logs(world: World) -> tuple[Log, Log]:
    """The KIP-101 case. The old leader (now the follower) wrote 3..5 in epoch 2 that no other replica got;
    the new leader wrote 3..4 in epoch 3. Both have 0..2 from epoch 1."""
    leader = world.leader_log(TP0, 3)
    write(leader, 1, 3, tag=0)
    write(leader, 3, 2, tag=30)
    follower = world.follower_log(TP0)
    write(follower, 1, 3, tag=0)
    write(follower, 2, 3, tag=20)
    return leader, follower


# ------------------------------------------------------------------------------------------- truncation


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
    assert world.leader.requests[0].body["replica_id"] == FOLLOWER_ID
    # The leader never had epoch 2: it answers (1, 3); the follower's own epoch 1 also ends at 3.
    assert [(t.kind, t.offset, t.leo_before, t.leo_after) for t in partition.truncations] == [
        ("truncate_to", 3, 6, 3)
    ]
    assert "leader epoch 1 ends at 3" in partition.truncations[0].reason
    assert world.leader.requests[1].fetch_partitions() == [(TP0, 3)]
    assert world.leader.requests[1].body["topics"][0]["partitions"][0]["current_leader_epoch"] == 3
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
    assert world.fetcher.describe(TP0) is not None
    assert world.fetcher.describe(TP0).state == "truncating"  # type: ignore[union-attr]

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
    world.fetcher.add_partitions({TP0: InitialFetchState(LEADER_ID, 3, 0)})
    assert world.state(TP0).state is ReplicaState.FETCHING
    assert world.state(TP0).fetch_offset == 9
    await world.do_work()
    assert world.kinds() == [OFLE, FETCH, FETCH, FETCH]
    assert world.leader.last.fetch_partitions() == [(TP0, 9)]
    assert len(partition.truncations) == 1

    # A new epoch (the same leader re-elected): truncate again before fetching.
    world.leader.leader_epochs[TP0] = 4
    leader_log.leader_epoch_cache.assign(4, leader_log.log_end_offset)
    world.follow(TP0, follower_log, 4)
    assert world.state(TP0).state is ReplicaState.TRUNCATING
    await world.do_work()
    assert world.kinds()[-2:] == [OFLE, FETCH]
    assert world.leader.requests[-2].epoch_requests() == [(TP0, 4, 3)]
    # Epoch 3 ends at the LEO on both sides: a truncation to the LEO, which removes nothing.
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(3, 3), (9, 9)]
    assert world.state(TP0).state is ReplicaState.FETCHING


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
    assert world.fetcher.describe(TP0).state == "failed"  # type: ignore[union-attr]


async def test_unknown_leader_epoch_in_offset_for_leader_epoch_backs_off_and_retries(
    world: World, autojump_clock: MockClock
) -> None:
    """The follower heard of epoch 4 before the leader did."""
    leader_log, follower_log = kip101_logs(world)
    partition = world.follow(TP0, follower_log, 4, hw=3)
    start = now_ms()

    await world.fetcher.maybe_truncate(world.leader)  # type: ignore[arg-type]

    assert world.rm.error_codes(TP0) == [Errors.UNKNOWN_LEADER_EPOCH]
    assert not world.rm.failed
    assert partition.truncations == []
    state = world.state(TP0)
    assert (state.state, state.delay_until_ms) == (ReplicaState.TRUNCATING, start + BACKOFF_MS)
    assert world.fetcher.describe(TP0).state == "delayed"  # type: ignore[union-attr]
    # Nothing to do until the back-off is over: maybe_fetch sends nothing and waits it out.
    await world.fetcher.maybe_fetch(world.leader)  # type: ignore[arg-type]
    assert world.kinds() == [OFLE]
    assert now_ms() == start + BACKOFF_MS

    world.leader.leader_epochs[TP0] = 4
    leader_log.leader_epoch_cache.assign(4, leader_log.log_end_offset)
    await world.do_work()
    assert world.kinds() == [OFLE, OFLE, FETCH]
    assert world.leader.requests[1].at * 1000 >= start + BACKOFF_MS
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(3, 3)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_an_offset_for_leader_epoch_answer_without_the_partition_backs_off(
    world: World, autojump_clock: MockClock
) -> None:
    """A top-level error (here INVALID_REQUEST) answers no partition: back off, do not ask again at once."""
    leader_log, follower_log = kip101_logs(world)
    partition = world.follow(TP0, follower_log, 3, hw=3)
    world.leader.script(OFLE, {"error_code": int(Errors.INVALID_REQUEST), "error_message": "bad request"})
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

    def answer_then_new_epoch(body: dict[str, Any]) -> dict[str, Any]:
        resp = world.leader.answer(OFLE, body)  # a good answer for epoch 3 ...
        world.leader.leader_epochs[TP0] = 4  # ... but epoch 4 starts before it arrives
        leader_log.leader_epoch_cache.assign(4, leader_log.log_end_offset)
        world.follow(TP0, follower_log, 4)
        return resp

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


async def test_fenced_answer_for_an_epoch_replaced_while_in_flight_does_not_fail_the_partition(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    world.follow(TP0, follower_log, 3, hw=3)

    def new_epoch_then_answer(body: dict[str, Any]) -> dict[str, Any]:
        world.leader.leader_epochs[TP0] = 4
        leader_log.leader_epoch_cache.assign(4, leader_log.log_end_offset)
        world.follow(TP0, follower_log, 4)
        return world.leader.answer(OFLE, body)  # FENCED_LEADER_EPOCH for the request's epoch 3

    world.leader.script(OFLE, new_epoch_then_answer)
    await world.do_work()

    assert not world.rm.failed
    assert world.state(TP0).current_leader_epoch == 4
    await world.do_work()
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

    def answer_then_become_leader(body: dict[str, Any]) -> dict[str, Any]:
        resp = world.leader.answer(OFLE, body)
        world.fetcher.remove_partitions([TP0])  # this broker became TP0's leader
        del world.rm.partitions[TP0]
        return resp

    world.leader.script(OFLE, answer_then_become_leader)
    await world.do_work()

    assert world.leader.requests[0].epoch_requests() == [(TP0, 3, 2), (TP1, 3, 2)]
    assert p0.truncations == [] and follower_log.log_end_offset == 6
    assert [(t.offset, t.leo_after) for t in p1.truncations] == [(3, 3)]
    assert world.leader.requests[1].fetch_partitions() == [(TP1, 3)]
    assert read_all(t1_follower) == read_all(t1_leader)
    assert not world.fetcher.owns(TP0)


# ------------------------------------------------------------------------------------------- out of range


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
    assert world.leader.requests[1].list_offsets() == [(TP0, 2, LATEST_TIMESTAMP)]
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
    leader_log = world.leader_log(TP0, 2)
    write(leader_log, 1, 3, tag=0)  # 0..2
    write(leader_log, 1, 7, tag=1)  # 3..9
    leader_log.maybe_increment_log_start_offset(10)
    write(leader_log, 2, 5, tag=2)  # 10..14
    follower_log = world.follower_log(TP0)
    write(follower_log, 1, 3, tag=0)
    partition = world.follow(TP0, follower_log, 2, hw=3)

    await world.do_work()

    assert world.kinds() == [OFLE, FETCH, LIST_OFFSETS, LIST_OFFSETS]
    assert world.leader.requests[1].fetch_partitions() == [(TP0, 3)]
    assert [r.list_offsets() for r in world.leader.requests[2:]] == [
        [(TP0, 2, LATEST_TIMESTAMP)],
        [(TP0, 2, EARLIEST_TIMESTAMP)],
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
    assert last.body["topics"][0]["partitions"][0]["log_start_offset"] == 10
    assert batch_ranges(follower_log) == [(10, 14, 2)]
    assert follower_log.read(10, 1 << 20) == leader_log.read(10, 1 << 20)


async def test_list_offsets_error_while_resetting_backs_off_then_retries(
    world: World, autojump_clock: MockClock
) -> None:
    """Kafka's testRetryAfterUnknownLeaderEpochInLatestOffsetFetch."""
    leader_log = world.leader_log(TP0, 2)
    write(leader_log, 1, 3, tag=0)
    write(leader_log, 1, 7, tag=1)
    leader_log.maybe_increment_log_start_offset(10)
    write(leader_log, 2, 5, tag=2)
    follower_log = world.follower_log(TP0)
    write(follower_log, 1, 3, tag=0)
    partition = world.follow(TP0, follower_log, 2, hw=3)
    world.leader.script(
        LIST_OFFSETS,
        {
            "topics": [
                {
                    "name": TP0[0],
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": int(Errors.UNKNOWN_LEADER_EPOCH),
                            "timestamp": -1,
                            "offset": -1,
                            "leader_epoch": -1,
                        }
                    ],
                }
            ]
        },
    )
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
    assert [r.list_offsets()[0][2] for r in world.leader.seen(LIST_OFFSETS)] == [
        LATEST_TIMESTAMP,
        LATEST_TIMESTAMP,
        EARLIEST_TIMESTAMP,
    ]
    assert partition.truncations[-1].kind == "truncate_fully_and_start_at"
    assert world.state(TP0).fetch_offset == 10


async def test_fenced_list_offsets_while_resetting_fails_the_partition(
    world: World, autojump_clock: MockClock
) -> None:
    """Kafka's testFencedOffsetResetAfterOutOfRange."""
    leader_log = world.leader_log(TP0, 2)
    write(leader_log, 1, 3, tag=0)
    write(leader_log, 1, 7, tag=1)
    leader_log.maybe_increment_log_start_offset(10)
    write(leader_log, 2, 5, tag=2)
    follower_log = world.follower_log(TP0)
    write(follower_log, 1, 3, tag=0)
    partition = world.follow(TP0, follower_log, 2, hw=3)

    def new_epoch_then_answer(body: dict[str, Any]) -> dict[str, Any]:
        world.leader.leader_epochs[TP0] = 3
        return world.leader.answer(LIST_OFFSETS, body)

    world.leader.script(LIST_OFFSETS, new_epoch_then_answer)
    await world.do_work()

    assert world.kinds() == [OFLE, FETCH, LIST_OFFSETS]
    assert [tp for tp, _ in world.rm.failed] == [TP0]
    assert world.fetcher.describe(TP0).state == "failed"  # type: ignore[union-attr]
    assert [t.kind for t in partition.truncations] == ["truncate_to"]
    assert follower_log.log_end_offset == 3


# ------------------------------------------------------------------------------------------- fetch


async def test_fetch_answer_for_a_partition_whose_state_changed_in_flight_is_dropped(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log, follower_log = kip101_logs(world)
    world.follow(TP0, follower_log, 3, hw=3)
    await world.do_work()
    write(leader_log, 3, 3, tag=32)  # 5..7

    def answer_then_re_add(body: dict[str, Any]) -> dict[str, Any]:
        resp = world.leader.answer(FETCH, body)
        # STOP_REPLICA + LEADER_AND_ISR: the same epoch, but a new fetch state (Truncating from 0).
        world.fetcher.remove_partitions([TP0])
        world.fetcher.add_partitions({TP0: InitialFetchState(LEADER_ID, 3, 0)})
        return resp

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

    def answer_then_remove(body: dict[str, Any]) -> dict[str, Any]:
        resp = world.leader.answer(FETCH, body)
        world.fetcher.remove_partitions([TP0])
        return resp

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
        assert world.leader.last.body["session_epoch"] == 0
        assert world.leader.last.body["session_id"] == 0

    assert orders == [
        [(TP0, 0), (TP1, 0)],
        [(TP1, 0), (TP0, 5)],
        [(TP0, 5), (TP1, 5)],
        [(TP1, 5), (TP0, 10)],
    ]
    assert (followers[TP0].log_end_offset, followers[TP1].log_end_offset) == (10, 10)
    assert world.fetcher.partitions.partition_states.partition_set() == [TP0, TP1]


async def test_incremental_fetch_session_sends_only_changed_partitions_and_forgets_removed_ones(
    world: World, autojump_clock: MockClock
) -> None:
    logs = {}
    for tp, count in ((TP0, 5), (TP1, 3)):
        leader_log = world.leader_log(tp, 1)
        write(leader_log, 1, count, tag=tp[1])
        logs[tp] = (leader_log, world.follower_log(tp))
        world.follow(tp, logs[tp][1], 1)

    await world.do_work()
    first = world.leader.last
    assert (first.body["session_id"], first.body["session_epoch"]) == (0, 0)
    assert first.fetch_partitions() == [(TP0, 0), (TP1, 0)]
    session_id = world.fetcher.session.session_id
    assert session_id != 0 and world.leader.session_cache.session_ids() == [session_id]

    # Both fetch offsets moved: both are sent.
    await world.do_work()
    assert (world.leader.last.body["session_id"], world.leader.last.body["session_epoch"]) == (session_id, 1)
    assert sorted(world.leader.last.fetch_partitions()) == [(TP0, 5), (TP1, 3)]
    # Nothing changed: an empty incremental request.
    await world.do_work()
    assert world.leader.last.body["session_epoch"] == 2
    assert world.leader.last.fetch_partitions() == []
    assert world.leader.last.forgotten() == []

    # New data for TP1 only: the leader's incremental answer carries TP1, the next request only TP1.
    write(logs[TP1][0], 1, 2, tag=11)
    await world.do_work()
    assert world.leader.last.fetch_partitions() == []
    assert logs[TP1][1].log_end_offset == 5
    await world.do_work()
    assert world.leader.last.fetch_partitions() == [(TP1, 5)]

    # TP0 leaves this fetcher: it is forgotten in the session, not re-sent.
    world.fetcher.remove_partitions([TP0])
    await world.do_work()
    last = world.leader.last
    assert (last.body["session_id"], last.body["session_epoch"]) == (session_id, 5)
    assert last.fetch_partitions() == []
    assert last.forgotten() == [TP0]
    for tp in (TP0, TP1):
        assert read_all(logs[tp][1]) == read_all(logs[tp][0])


async def test_fetch_session_id_not_found_makes_the_next_request_full_without_backing_off(
    world: World, autojump_clock: MockClock
) -> None:
    for tp in (TP0, TP1):
        leader_log = world.leader_log(tp, 1)
        write(leader_log, 1, 3, tag=tp[1])
        world.follow(tp, world.follower_log(tp), 1)
    await world.do_work()
    await world.do_work()
    session_id = world.fetcher.session.session_id
    world.leader.session_cache.remove(session_id)  # evicted by other fetchers

    await world.do_work()
    failed = world.leader.last
    assert (failed.body["session_id"], failed.body["session_epoch"]) == (session_id, 2)
    await world.do_work()
    full = world.leader.last
    assert (full.body["session_id"], full.body["session_epoch"]) == (0, 0)
    assert full.fetch_partitions() == [(TP0, 3), (TP1, 3)]
    assert full.at == failed.at  # no back-off
    assert world.rm.fetch_errors == []
    new_id = world.fetcher.session.session_id
    assert new_id not in (0, session_id)
    assert world.leader.session_cache.session_ids() == [new_id]


async def test_invalid_fetch_session_epoch_makes_the_next_request_full(
    world: World, autojump_clock: MockClock
) -> None:
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, 1, 3, tag=0)
    world.follow(TP0, world.follower_log(TP0), 1)
    await world.do_work()
    session_id = world.fetcher.session.session_id
    world.leader.script(
        FETCH,
        {
            "throttle_time_ms": 0,
            "error_code": int(Errors.INVALID_FETCH_SESSION_EPOCH),
            "session_id": session_id,
            "responses": [],
        },
    )
    await world.do_work()
    await world.do_work()
    last = world.leader.last
    # Close the old session and ask for a new one, listing every partition.
    assert (last.body["session_id"], last.body["session_epoch"]) == (session_id, 0)
    assert last.fetch_partitions() == [(TP0, 3)]
    assert world.rm.fetch_errors == []


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
    assert world.fetcher.describe(TP0).state == "failed"  # type: ignore[union-attr]
    write(world.leader.logs[TP1], 1, 2, tag=5)
    await world.do_work()
    assert world.leader.last.forgotten() == [TP0]
    assert logs[TP1].log_end_offset == 5


async def test_request_failures_raise_fetch_failed(world: World, autojump_clock: MockClock) -> None:
    _, follower_log = kip101_logs(world)
    world.follow(TP0, follower_log, 3, hw=3)
    world.leader.script(OFLE, trio.TooSlowError())
    with pytest.raises(FetchFailed):
        await world.do_work()
    assert world.state(TP0).state is ReplicaState.TRUNCATING
    world.leader.script(FETCH, ConnectionClosed("connection reset"))
    with pytest.raises(FetchFailed):
        await world.do_work()
    assert follower_log.log_end_offset == 3


async def test_partitions_no_longer_followed_are_dropped(world: World, autojump_clock: MockClock) -> None:
    for tp in (TP0, TP1):
        leader_log = world.leader_log(tp, 1)
        write(leader_log, 1, 3, tag=tp[1])
        world.follow(tp, world.follower_log(tp), 1)
    del world.rm.partitions[TP0]  # this broker leads TP0 now
    await world.do_work()
    assert world.leader.last.fetch_partitions() == [(TP1, 0)]
    assert world.fetcher.partition_count == 1 and not world.fetcher.owns(TP0)


# ------------------------------------------------------------------------------------------- the loop


async def test_run_backs_off_after_connection_errors_and_reconnects(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_world(tmp_path)
    world.leader.long_poll = True
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, 1, 3, tag=0)
    follower_log = world.follower_log(TP0)
    world.follow(TP0, follower_log, 1)
    connects: list[float] = []
    refuse = [True]

    @asynccontextmanager
    async def fake_open_connection(host: str, port: int, **kwargs: Any) -> AsyncIterator[FakeLeader]:
        assert (host, port) == (world.leader.endpoint.host, world.leader.endpoint.port)
        connects.append(trio.current_time())
        if refuse[0]:
            refuse[0] = False
            raise OSError("connection refused")
        yield world.leader

    monkeypatch.setattr(replica_fetcher, "open_connection", fake_open_connection)
    created: list[int] = []

    def first_fetch(body: dict[str, Any]) -> dict[str, Any]:
        resp = world.leader.answer(FETCH, body)
        created.append(resp["session_id"])
        return resp

    world.leader.script(FETCH, first_fetch, ConnectionClosed("reset"))

    def fetches() -> list[SeenRequest]:
        return world.leader.seen(FETCH)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(world.fetcher.run)
        while len(fetches()) < 4:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()

    start = connects[0]
    # Refused -> back off -> connect; the second FETCH is lost -> back off -> reconnect.
    assert len(connects) == 3
    assert connects[1] - start >= BACKOFF_MS / 1000
    assert connects[2] - fetches()[1].at >= BACKOFF_MS / 1000
    assert world.rm.error_codes(TP0) == [Errors.NETWORK_EXCEPTION, Errors.NETWORK_EXCEPTION]
    # After the lost request the fetcher closes its session and opens a new one with a full request.
    third = fetches()[2]
    assert created[0] != 0
    assert (third.body["session_id"], third.body["session_epoch"]) == (created[0], 0)
    assert third.fetch_partitions() == [(TP0, 3)]
    assert read_all(follower_log) == read_all(leader_log)


async def test_run_survives_a_response_it_cannot_read(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A malformed FETCH response (a partition without error_code) must not take the broker down: the fetcher
    drops the connection, backs off and starts again."""
    world = make_world(tmp_path)
    world.leader.long_poll = True
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, 1, 3, tag=0)
    follower_log = world.follower_log(TP0)
    world.follow(TP0, follower_log, 1)
    connects: list[float] = []

    @asynccontextmanager
    async def fake_open_connection(host: str, port: int, **kwargs: Any) -> AsyncIterator[FakeLeader]:
        connects.append(trio.current_time())
        yield world.leader

    monkeypatch.setattr(replica_fetcher, "open_connection", fake_open_connection)
    world.leader.script(
        FETCH,
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [{"topic": TP0[0], "partitions": [{"partition_index": TP0[1]}]}],
        },
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(world.fetcher.run)
        while follower_log.log_end_offset == 0:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()

    assert len(connects) == 2
    assert connects[1] - connects[0] >= BACKOFF_MS / 1000
    assert world.rm.error_codes(TP0) == [Errors.UNKNOWN_SERVER_ERROR]
    assert read_all(follower_log) == read_all(leader_log)


async def test_fetcher_manager_runs_one_fetcher_per_leader_and_stops_idle_ones(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rm = FakeReplicaManager(FOLLOWER_ID)
    leaders = {1: FakeLeader(1, long_poll=True), 3: FakeLeader(3, long_poll=True)}
    leaders[3].endpoint = BrokerEndpoint(3, "leader3.invalid", 9093)
    logs = {}
    for tp, leader_id in ((TP0, 1), (TP1, 3)):
        leader_log = open_log(tmp_path / f"leader-{leader_id}", tp)
        write(leader_log, 1, 3, tag=tp[1])
        leaders[leader_id].add_partition(tp, leader_log, 1)
        logs[tp] = open_log(tmp_path / "follower", tp)
        rm.partitions[tp] = FakeFollowerPartition(logs[tp])

    @asynccontextmanager
    async def fake_open_connection(host: str, port: int, **kwargs: Any) -> AsyncIterator[FakeLeader]:
        yield next(leader for leader in leaders.values() if leader.endpoint.port == port)

    monkeypatch.setattr(replica_fetcher, "open_connection", fake_open_connection)
    async with trio.open_nursery() as nursery:
        manager = ReplicaFetcherManager(
            nursery, rm, FetcherSettings(backoff_ms=BACKOFF_MS), 1, clock_ms=now_ms
        )
        manager.add_fetcher_for_partitions(
            {
                TP0: InterfaceInitialFetchState(leaders[1].endpoint, 1, 0),
                TP1: InterfaceInitialFetchState(leaders[3].endpoint, 1, 0),
            }
        )
        assert sorted(manager.fetchers) == [(1, 0), (3, 0)]
        while logs[TP0].log_end_offset < 3 or logs[TP1].log_end_offset < 3:
            await trio.sleep(0.01)
        view = manager.fetch_state(TP1)
        assert view is not None
        assert (view.state, view.fetch_offset, view.lag, view.leader_id, view.current_leader_epoch) == (
            "fetching",
            3,
            0,
            3,
            1,
        )
        assert leaders[3].seen(FETCH)[0].fetch_partitions() == [(TP1, 0)]
        assert all(tp == TP0 for r in leaders[1].seen(FETCH) for tp, _ in r.fetch_partitions())

        manager.remove_fetcher_for_partitions([TP1])
        assert sorted(manager.fetchers) == [(1, 0)]
        assert manager.fetch_state(TP1) is None
        assert manager.stats["partitions"] == 1
        manager.shutdown()
    assert read_all(logs[TP0]) == read_all(leaders[1].logs[TP0])
