"""``ReplicaFetcherManager``: one fetcher per (leader, fetcher id), each with its own leader endpoint; idle
fetchers stop; DESCRIBE_REPLICA_STATE's view of a follower partition."""

from __future__ import annotations

from pathlib import Path

import trio
from trio.testing import MockClock

from fetcher.fetcher_manager import ReplicaFetcherManager
from fetcher.leader_endpoint import LeaderEndPoint, RemoteLeaderEndPoint
from fetcher.replica_fetcher import FetcherSettings
from protocol.common import BrokerEndpoint
from protocol.replication import InitialFetchState
from tests.unit.fetcher.mock_leader_endpoint import FETCH, MockLeaderEndPoint
from tests.unit.fetcher.replica_fetcher_support import (
    BACKOFF_MS,
    FOLLOWER_ID,
    TP0,
    TP1,
    FakeFollowerPartition,
    FakeReplicaManager,
    now_ms,
    open_log,
    read_all,
    write,
)
from tests.unit.waiting import wait_for


async def test_fetcher_manager_runs_one_fetcher_per_leader_and_stops_idle_ones(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    rm = FakeReplicaManager(FOLLOWER_ID)
    leaders = {
        1: MockLeaderEndPoint(1, long_poll=True),
        3: MockLeaderEndPoint(3, host="leader3.invalid", port=9093, long_poll=True),
    }
    logs = {}
    for tp, leader_id in ((TP0, 1), (TP1, 3)):
        leader_log = open_log(tmp_path / f"leader-{leader_id}", tp)
        write(leader_log, 1, 3, tag=tp[1])
        leaders[leader_id].add_partition(tp, leader_log, 1)
        logs[tp] = open_log(tmp_path / "follower", tp)
        rm.partitions[tp] = FakeFollowerPartition(logs[tp])
    made: list[tuple[BrokerEndpoint, int]] = []

    def endpoint_for(leader: BrokerEndpoint, fid: int) -> LeaderEndPoint:
        made.append((leader, fid))
        return leaders[leader.broker_id]

    async with trio.open_nursery() as nursery:
        manager = ReplicaFetcherManager(
            nursery,
            rm,
            FetcherSettings(backoff_ms=BACKOFF_MS),
            1,
            clock_ms=now_ms,
            leader_endpoint_factory=endpoint_for,
        )
        manager.add_fetcher_for_partitions(
            {
                TP0: InitialFetchState(leaders[1].broker_endpoint, 1, 0),
                TP1: InitialFetchState(leaders[3].broker_endpoint, 1, 0),
            }
        )
        assert sorted(manager.fetchers) == [(1, 0), (3, 0)]
        assert sorted(made, key=lambda m: m[0].broker_id) == [
            (leaders[1].broker_endpoint, 0),
            (leaders[3].broker_endpoint, 0),
        ]
        await wait_for(
            lambda: logs[TP0].log_end_offset >= 3 and logs[TP1].log_end_offset >= 3, "both partitions fetched"
        )
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

        assert dict(manager.lags()) == {TP0: 0, TP1: 0}
        fetched_from_3 = manager.fetcher_stats[(3, 0)]
        assert fetched_from_3.bytes == len(read_all(leaders[3].logs[TP1]))
        assert fetched_from_3.requests == len(leaders[3].seen(FETCH))

        manager.remove_fetcher_for_partitions([TP1])
        assert sorted(manager.fetchers) == [(1, 0)]
        assert manager.fetch_state(TP1) is None
        assert manager.stats["partitions"] == 1
        assert dict(manager.lags()) == {TP0: 0}
        assert manager.fetcher_stats[(3, 0)] is fetched_from_3  # counters outlive their fetcher
        manager.shutdown()
    assert read_all(logs[TP0]) == read_all(leaders[1].logs[TP0])


async def test_a_leader_at_a_new_address_gets_a_new_fetcher_that_keeps_the_partitions(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    rm = FakeReplicaManager(FOLLOWER_ID)
    old = MockLeaderEndPoint(1, long_poll=True)
    moved = MockLeaderEndPoint(1, host="leader-moved.invalid", long_poll=True)
    for leader in (old, moved):
        leader_log = open_log(tmp_path / f"leader-{leader.broker_endpoint.host}", TP0)
        write(leader_log, 1, 3, tag=0)
        leader.add_partition(TP0, leader_log, 1)
    follower_log = open_log(tmp_path / "follower", TP0)
    rm.partitions[TP0] = FakeFollowerPartition(follower_log)
    by_host = {old.broker_endpoint.host: old, moved.broker_endpoint.host: moved}

    async with trio.open_nursery() as nursery:
        manager = ReplicaFetcherManager(
            nursery,
            rm,
            FetcherSettings(backoff_ms=BACKOFF_MS),
            1,
            clock_ms=now_ms,
            leader_endpoint_factory=lambda leader, _: by_host[leader.host],
        )
        manager.add_fetcher_for_partitions({TP0: InitialFetchState(old.broker_endpoint, 1, 0)})
        first = manager.fetchers[(1, 0)][0]
        await wait_for(lambda: follower_log.log_end_offset >= 3, "the follower to fetch from the old leader")

        manager.add_fetcher_for_partitions({TP0: InitialFetchState(moved.broker_endpoint, 1, 0)})
        second = manager.fetchers[(1, 0)][0]
        assert second is not first and second.leader is moved
        # Same epoch: the partition keeps its fetch state and goes on from where it was.
        write(moved.logs[TP0], 1, 2, tag=1)
        await wait_for(lambda: moved.seen(FETCH), "a FETCH to the moved leader")
        assert moved.seen(FETCH)[0].fetch_partitions() == [(TP0, 3)]
        manager.shutdown()


async def test_fetch_state_of_a_failed_partition(tmp_path: Path, autojump_clock: MockClock) -> None:
    rm = FakeReplicaManager(FOLLOWER_ID)
    leader = MockLeaderEndPoint(1, long_poll=True)
    leader_log = open_log(tmp_path / "leader", TP0)
    write(leader_log, 1, 3, tag=0)
    leader.add_partition(TP0, leader_log, 2)  # the leader is a whole epoch ahead of the follower
    follower_log = open_log(tmp_path / "follower", TP0)
    write(follower_log, 1, 2, tag=0)
    rm.partitions[TP0] = FakeFollowerPartition(follower_log)

    async with trio.open_nursery() as nursery:
        manager = ReplicaFetcherManager(
            nursery, rm, FetcherSettings(), 1, clock_ms=now_ms, leader_endpoint_factory=lambda *_: leader
        )
        manager.add_fetcher_for_partitions({TP0: InitialFetchState(leader.broker_endpoint, 1, 2)})
        await wait_for(lambda: rm.failed, "the partition to fail")
        view = manager.fetch_state(TP0)
        assert view is not None
        # No fetch state is left: the offset is the log end, the epoch unknown.
        assert (view.state, view.fetch_offset, view.lag, view.leader_id, view.current_leader_epoch) == (
            "failed",
            2,
            None,
            1,
            -1,
        )
        # A failed partition keeps its fetcher until it is removed.
        manager.shutdown_idle_fetchers()
        assert list(manager.fetchers) == [(1, 0)]
        manager.shutdown()


async def test_fetchers_talk_to_their_leader_over_the_wire_by_default(autojump_clock: MockClock) -> None:
    rm = FakeReplicaManager(FOLLOWER_ID)
    leader = BrokerEndpoint(1, "127.0.0.1", 1)
    async with trio.open_nursery() as nursery:
        manager = ReplicaFetcherManager(nursery, rm, FetcherSettings(socket_timeout_ms=1234), 2)
        manager.add_fetcher_for_partitions({TP0: InitialFetchState(leader, 1, 0)})
        ((fetcher, _),) = manager.fetchers.values()
        endpoint = fetcher.leader
        assert isinstance(endpoint, RemoteLeaderEndPoint)
        assert endpoint.broker_endpoint == leader
        assert (endpoint.replica_id, endpoint.socket_timeout_ms) == (FOLLOWER_ID, 1234)
        assert endpoint.client_id == f"replica-fetcher-{FOLLOWER_ID}-{fetcher.fetcher_id}"
        manager.shutdown()
