"""``FetcherStats``: the FETCH requests a fetcher sends and the record bytes it appends (Kafka's
FetcherStats RequestsPerSec and BytesPerSec, published by the broker's metrics)."""

from __future__ import annotations

from pathlib import Path

from trio.testing import MockClock

from fetcher.fetcher_stats import FetcherStats
from tests.unit.fetcher.replica_fetcher_support import TP0, make_world, read_all, write


async def test_requests_and_record_bytes_are_counted(tmp_path: Path, autojump_clock: MockClock) -> None:
    world = make_world(tmp_path)
    leader_log = world.leader_log(TP0, 1)
    write(leader_log, 1, 5, tag=0)
    write(leader_log, 1, 3, tag=1)
    follower_log = world.follower_log(TP0)
    world.follow(TP0, follower_log, 1)
    stats = FetcherStats()
    world.fetcher.stats = stats

    while follower_log.log_end_offset < 8:
        await world.do_work()

    assert stats.requests == world.fetcher.fetch_requests >= 1
    assert stats.bytes == len(read_all(leader_log))
    await world.do_work()  # nothing new: a request, no bytes
    assert stats.bytes == len(read_all(leader_log))
