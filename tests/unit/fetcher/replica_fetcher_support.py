"""The follower side and the test world for driving ``fetcher.replica_fetcher.ReplicaFetcher`` without
sockets (the leader side is ``mock_leader_endpoint.MockLeaderEndPoint``).

* ``FakeFollowerPartition`` implements ``fetcher.interface.FollowerPartition`` over a real ``Log`` and a
  high watermark field, with the broker's rules (HW clamped to [log start, LEO], log start offset follows
  the leader only up to the HW), and records every truncation.
* ``FakeReplicaManager`` implements ``fetcher.interface.FollowerReplicaManager`` and records fetch errors
  and failed partitions.
* ``World``: one fetcher, its mock leader and its replica manager; ``world.do_work()`` runs one round of the
  fetcher's loop. Time is trio's autojump clock (the tests take the ``autojump_clock`` fixture): back-offs
  and long polls take no real time, and the fetcher's ``clock_ms`` reads the same virtual clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from fetcher.fetch_state import PartitionFetchState
from fetcher.replica_fetcher import FetcherSettings, ReplicaFetcher
from fetcher.truncation import initial_fetch_offset
from protocol.api_keys import ApiKeys
from protocol.common import TopicPartition
from protocol.records import build_simple_batch, iter_batches
from protocol.replication import AppendResult, InitialFetchState, TruncationMode
from storage.log import Log, LogConfig
from tests.unit.fetcher.mock_leader_endpoint import MockLeaderEndPoint

TP0: TopicPartition = ("topic", 0)
TP1: TopicPartition = ("topic", 1)
LEADER_ID = 1
FOLLOWER_ID = 2
BACKOFF_MS = 1000

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=256)


# ---------------------------------------------------------------------------------------------- logs


def open_log(directory: Path, tp: TopicPartition) -> Log:
    return Log.open(directory / f"{tp[0]}-{tp[1]}", tp[0], tp[1], CONFIG)


def batch(count: int, tag: int) -> bytes:
    """``count`` records whose values are derived from ``tag`` (same tag, same bytes)."""
    return build_simple_batch(
        [f"{tag}:{i}".encode() for i in range(count)], partition_leader_epoch=-1, base_timestamp=1_000
    )


def write(log: Log, epoch: int, count: int, tag: int) -> None:
    """Append one batch of ``count`` records as a leader in ``epoch`` (-1: no epoch, nothing cached)."""
    log.append_as_leader(batch(count, tag), epoch)


def read_all(log: Log) -> bytes:
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 30)
        out += chunk
        offset = [h for _, h in iter_batches(chunk)][-1].next_offset
    return bytes(out)


def batch_ranges(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, last offset, partition leader epoch) of every batch."""
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in log.batch_headers()]


def epochs(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()]


# ---------------------------------------------------------------------------------------------- follower


@dataclass
class Truncation:
    kind: str  # "truncate_to" or "truncate_fully_and_start_at"
    offset: int
    reason: str
    leo_before: int
    leo_after: int


class FakeFollowerPartition:
    def __init__(self, log: Log, *, high_watermark: int = 0, leader_epoch: int = 0) -> None:
        self.log = log
        self.hw = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        self.epoch = leader_epoch
        self.truncations: list[Truncation] = []
        self.appends: list[AppendResult] = []

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.hw

    @property
    def leader_epoch(self) -> int:
        return self.epoch

    def latest_epoch(self) -> int | None:
        return self.log.leader_epoch_cache.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.leader_epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    def truncate_to(self, offset: int, reason: str) -> None:
        before = self.log.log_end_offset
        self.log.truncate_to(offset)
        self.hw = min(self.hw, self.log.log_end_offset)
        self.truncations.append(Truncation("truncate_to", offset, reason, before, self.log.log_end_offset))

    def truncate_fully_and_start_at(self, offset: int, reason: str) -> None:
        before = self.log.log_end_offset
        self.log.truncate_fully_and_start_at(offset)
        self.hw = offset
        self.truncations.append(
            Truncation("truncate_fully_and_start_at", offset, reason, before, self.log.log_end_offset)
        )

    def append_as_follower(self, records: bytes) -> AppendResult | None:
        info = self.log.append_as_follower(records)
        result = AppendResult(info.first_offset, info.last_offset, info.num_records, info.valid_bytes)
        self.appends.append(result)
        return result

    def update_high_watermark(self, leader_hw: int) -> int:
        self.hw = max(self.log.log_start_offset, min(leader_hw, self.log.log_end_offset))
        return self.hw

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int) -> None:
        if self.log.log_start_offset < leader_log_start_offset <= self.hw:
            self.log.maybe_increment_log_start_offset(leader_log_start_offset)


@dataclass
class FakeReplicaManager:
    broker_id: int = 2
    partitions: dict[TopicPartition, FakeFollowerPartition] = field(default_factory=dict)
    fetch_errors: list[tuple[TopicPartition, int, str]] = field(default_factory=list)
    failed: list[tuple[TopicPartition, str]] = field(default_factory=list)
    fatal: list[tuple[TopicPartition, str]] = field(default_factory=list)
    prepared_appends: list[dict[TopicPartition, bytes]] = field(default_factory=list)

    def follower_partition(self, tp: TopicPartition) -> FakeFollowerPartition | None:
        return self.partitions.get(tp)

    def follower_appends(self, appends: Mapping[TopicPartition, bytes]) -> AbstractAsyncContextManager[None]:
        self.prepared_appends.append(dict(appends))
        return nullcontext()

    def on_fetch_error(self, tp: TopicPartition, error_code: int, message: str) -> None:
        self.fetch_errors.append((tp, error_code, message))

    def on_partition_failed(self, tp: TopicPartition, error_code: int, message: str) -> None:
        # As the broker does: a failed partition journals one fetch_error with the error that caused it.
        self.failed.append((tp, message))
        self.fetch_errors.append((tp, error_code, message))

    def on_fatal_error(self, tp: TopicPartition, message: str) -> None:
        self.fatal.append((tp, message))

    def error_codes(self, tp: TopicPartition) -> list[int]:
        return [code for t, code, _ in self.fetch_errors if t == tp]


# ---------------------------------------------------------------------------------------------- world


def now_ms() -> int:
    return int(trio.current_time() * 1000)


@dataclass
class World:
    tmp: Path
    leader: MockLeaderEndPoint
    rm: FakeReplicaManager
    fetcher: ReplicaFetcher

    def leader_log(self, tp: TopicPartition, leader_epoch: int) -> Log:
        log = open_log(self.tmp / "leader", tp)
        self.leader.add_partition(tp, log, leader_epoch)
        return log

    def follower_log(self, tp: TopicPartition) -> Log:
        return open_log(self.tmp / "follower", tp)

    def add(self, tp: TopicPartition, leader_epoch: int, init_offset: int) -> None:
        """A LEADER_AND_ISR handing ``tp`` to the fetcher as it is."""
        self.fetcher.add_partitions(
            {tp: InitialFetchState(self.leader.broker_endpoint, leader_epoch, init_offset)}
        )

    def follow(
        self, tp: TopicPartition, log: Log, leader_epoch: int, *, hw: int = 0, init_offset: int | None = None
    ) -> FakeFollowerPartition:
        """Make this broker a follower of ``tp`` and hand it to the fetcher the way the replica manager does
        (``ReplicaManager._make_followers``): start at the LEO if the log has epochs, else at the HW."""
        partition = self.rm.partitions.get(tp)
        if partition is None:
            partition = FakeFollowerPartition(log, high_watermark=hw, leader_epoch=leader_epoch)
            self.rm.partitions[tp] = partition
        partition.epoch = leader_epoch
        if init_offset is None:
            init_offset = initial_fetch_offset(
                TruncationMode.LEADER_EPOCH,
                log_end_offset=log.log_end_offset,
                high_watermark=partition.high_watermark,
                has_epochs=log.leader_epoch_cache.latest_epoch() is not None,
            )
        self.add(tp, leader_epoch, init_offset)
        return partition

    def new_leader_epoch(self, tp: TopicPartition, epoch: int) -> None:
        """The leader (re-elected) starts ``epoch`` at its log end."""
        self.leader.leader_epochs[tp] = epoch
        log = self.leader.logs[tp]
        log.leader_epoch_cache.assign(epoch, log.log_end_offset)

    def state(self, tp: TopicPartition) -> PartitionFetchState:
        state = self.fetcher.partitions.fetch_state(tp)
        assert state is not None, f"{tp} has no fetch state"
        return state

    def kinds(self) -> list[ApiKeys]:
        return self.leader.kinds()

    async def do_work(self) -> None:
        await self.fetcher.do_work()


def make_world(tmp_path: Path, **settings: Any) -> World:
    leader = MockLeaderEndPoint(LEADER_ID, session_slots=settings.pop("session_slots", 10))
    rm = FakeReplicaManager(FOLLOWER_ID)
    values: dict[str, Any] = {"wait_max_ms": 500, "backoff_ms": BACKOFF_MS}
    values.update(settings)
    fetcher = ReplicaFetcher("test-fetcher", 0, leader, rm, FetcherSettings(**values), clock_ms=now_ms)
    return World(tmp_path, leader, rm, fetcher)


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


def out_of_range_low_logs(world: World) -> tuple[Log, Log]:
    """The leader deleted everything below 10 (epoch 2 starts there); the follower has 0..2 of epoch 1."""
    leader = world.leader_log(TP0, 2)
    write(leader, 1, 3, tag=0)  # 0..2
    write(leader, 1, 7, tag=1)  # 3..9
    leader.maybe_increment_log_start_offset(10)
    write(leader, 2, 5, tag=2)  # 10..14
    follower = world.follower_log(TP0)
    write(follower, 1, 3, tag=0)
    return leader, follower
