"""``ReplicaFetcherManager``: ``num.replica.fetchers`` fetcher tasks per source broker; a partition goes to
fetcher ``hash(topic, partition) % num.replica.fetchers`` of its leader; fetchers with no partitions left are
shut down (Kafka's ``AbstractFetcherManager``). Each fetcher gets its own ``RemoteLeaderEndPoint`` (Kafka's
``ReplicaFetcherManager.createFetcherThread``)."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping

import trio

from fetcher.fetcher_stats import FetcherStats
from fetcher.interface import FollowerReplicaManager
from fetcher.leader_endpoint import LeaderEndPoint, RemoteLeaderEndPoint
from fetcher.replica_fetcher import FetcherSettings, ReplicaFetcher
from protocol.common import BrokerEndpoint, TopicPartition, wall_clock_ms
from protocol.replication import FetchStateView, InitialFetchState

log = logging.getLogger(__name__)

FetcherKey = tuple[int, int]  # (leader broker id, fetcher id)
# Makes the leader endpoint of a new fetcher: (leader, fetcher id) -> endpoint.
LeaderEndPointFactory = Callable[[BrokerEndpoint, int], LeaderEndPoint]


class ReplicaFetcherManager:
    def __init__(
        self,
        nursery: trio.Nursery,
        replica_manager: FollowerReplicaManager,
        settings: FetcherSettings,
        num_fetchers: int,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        leader_endpoint_factory: LeaderEndPointFactory | None = None,
    ) -> None:
        self._nursery = nursery
        self.rm = replica_manager
        self.settings = settings
        self.num_fetchers = num_fetchers
        self.clock_ms = clock_ms
        self._leader_endpoint = leader_endpoint_factory or self._remote_leader_endpoint
        self.fetchers: dict[FetcherKey, tuple[ReplicaFetcher, trio.CancelScope]] = {}
        # Per (leader, fetcher id), kept when the fetcher stops: cumulative, for the broker's metrics.
        self.fetcher_stats: dict[FetcherKey, FetcherStats] = {}

    def fetcher_id(self, tp: TopicPartition) -> int:
        # A stable hash (Python's str hash changes per process).
        return (31 * zlib.crc32(tp[0].encode()) + tp[1]) % self.num_fetchers

    def add_fetcher_for_partitions(self, states: Mapping[TopicPartition, InitialFetchState]) -> None:
        grouped: dict[tuple[BrokerEndpoint, int], dict[TopicPartition, InitialFetchState]] = {}
        for tp, st in states.items():
            grouped.setdefault((st.leader, self.fetcher_id(tp)), {})[tp] = st
        for (leader, fid), initial in grouped.items():
            fetcher = self._fetcher_for(leader, fid)
            fetcher.add_partitions(initial)
            log.info(
                "broker %d: fetching %s from leader %d (fetcher %d)",
                self.rm.broker_id,
                ", ".join(f"{t}-{p}@{s.init_offset}" for (t, p), s in sorted(initial.items())),
                leader.broker_id,
                fid,
            )

    def _fetcher_for(self, leader: BrokerEndpoint, fid: int) -> ReplicaFetcher:
        key = (leader.broker_id, fid)
        held = self.fetchers.get(key)
        if held is not None:
            if held[0].leader.broker_endpoint == leader:
                return held[0]
            # The leader moved to another address: restart the fetcher, keeping its partitions.
            old, scope = held
            scope.cancel()
            del self.fetchers[key]
            fetcher = self._start(leader, fid)
            fetcher.partitions = old.partitions
            return fetcher
        return self._start(leader, fid)

    def _start(self, leader: BrokerEndpoint, fid: int) -> ReplicaFetcher:
        name = f"ReplicaFetcher[broker={self.rm.broker_id}, leader={leader.broker_id}, fetcher={fid}]"
        endpoint = self._leader_endpoint(leader, fid)
        stats = self.fetcher_stats.setdefault((leader.broker_id, fid), FetcherStats())
        fetcher = ReplicaFetcher(
            name, fid, endpoint, self.rm, self.settings, clock_ms=self.clock_ms, stats=stats
        )
        scope = trio.CancelScope()
        self.fetchers[(leader.broker_id, fid)] = (fetcher, scope)

        async def run() -> None:
            with scope:
                await fetcher.run()

        self._nursery.start_soon(run)
        return fetcher

    def remove_fetcher_for_partitions(
        self, tps: Iterable[TopicPartition], *, shutdown_idle: bool = True
    ) -> None:
        """Stops fetching ``tps``. With ``shutdown_idle=False`` a fetcher left without partitions keeps
        running (and its connection and fetch session) until :meth:`shutdown_idle_fetchers`: a
        LEADER_AND_ISR that moves partitions away and back to the same leader in one go (a new leader epoch
        for every partition, as a controlled shutdown gives) reuses it, as Kafka's
        ``becomeLeaderOrFollower`` shuts idle fetchers down only once it is done."""
        wanted = list(tps)
        if not wanted:
            return
        for fetcher, _ in self.fetchers.values():
            fetcher.remove_partitions(wanted)
        if shutdown_idle:
            self.shutdown_idle_fetchers()

    def shutdown_idle_fetchers(self) -> None:
        for key, (fetcher, scope) in list(self.fetchers.items()):
            if fetcher.partition_count == 0 and not fetcher.partitions.failed_partitions:
                scope.cancel()
                del self.fetchers[key]

    def shutdown(self) -> None:
        for _, scope in self.fetchers.values():
            scope.cancel()
        self.fetchers.clear()

    def _remote_leader_endpoint(self, leader: BrokerEndpoint, fid: int) -> RemoteLeaderEndPoint:
        return RemoteLeaderEndPoint(
            leader,
            replica_id=self.rm.broker_id,
            client_id=f"replica-fetcher-{self.rm.broker_id}-{fid}",
            socket_timeout_ms=self.settings.socket_timeout_ms,
        )

    def fetch_state(self, tp: TopicPartition) -> FetchStateView | None:
        for fetcher, _ in self.fetchers.values():
            if fetcher.owns(tp):
                view = fetcher.describe(tp)
                if view is not None:
                    return view
        return None

    def lags(self) -> Iterator[tuple[TopicPartition, int]]:
        """Each fetched partition's lag (the leader's HW minus the next offset to fetch) as of its last
        fetch; partitions not fetched yet are left out (Kafka's ``FetcherLagMetrics``)."""
        for fetcher, _ in self.fetchers.values():
            for tp, state in fetcher.partitions.partition_states.partition_state_map().items():
                if state.lag is not None:
                    yield tp, state.lag

    @property
    def stats(self) -> dict[str, int]:
        return {
            "fetchers": len(self.fetchers),
            "partitions": sum(f.partition_count for f, _ in self.fetchers.values()),
            "fetch_requests": sum(f.fetch_requests for f, _ in self.fetchers.values()),
        }
