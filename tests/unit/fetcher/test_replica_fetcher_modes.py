"""``ReplicaFetcher`` in each ``replication.truncation.mode`` against an in-memory leader: the requests it
sends, what it truncates (and journals as the reason), and Kafka <= 2.0's fatal out-of-range case."""

from __future__ import annotations

from pathlib import Path

from trio.testing import MockClock

from fetcher.fetch_state import ReplicaState
from protocol.replication import TruncationMode
from tests.unit.fetcher.mock_leader_endpoint import FETCH, LIST_OFFSETS, OFLE
from tests.unit.fetcher.replica_fetcher_support import TP0, World, batch_ranges, make_world, read_all, write

PRE_279 = TruncationMode.LEADER_EPOCH_PRE_KIP_279
HW = TruncationMode.HIGH_WATERMARK


def three_epoch_logs(world: World) -> None:
    """Leader epochs 1, 3, 5 at 0, 3, 5; follower epochs 1, 2, 4 at 0, 3, 5 (LEO 9). The follower's latest
    epoch (4) is one the leader never had, and the next one the leader has starts where the follower's
    epoch 4 starts, although the logs differ from offset 3 (KIP-279's case)."""
    leader_log = world.leader_log(TP0, 5)
    write(leader_log, 1, 3, tag=0)
    write(leader_log, 3, 2, tag=30)
    write(leader_log, 5, 3, tag=50)
    follower_log = world.follower_log(TP0)
    write(follower_log, 1, 3, tag=0)
    write(follower_log, 2, 2, tag=20)
    write(follower_log, 4, 4, tag=40)


async def test_pre_kip_279_takes_one_answer_and_keeps_a_diverged_prefix(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    world = make_world(tmp_path, truncation_mode=PRE_279)
    three_epoch_logs(world)
    follower_log = world.follower_log(TP0)
    partition = world.follow(TP0, follower_log, 5, hw=3, init_offset=3)

    await world.do_work()

    # One OFFSET_FOR_LEADER_EPOCH for epoch 4: the leader's (3, 5) is taken as "truncate to 5" and final.
    assert world.kinds() == [OFLE, FETCH]
    assert [(t.offset, t.leo_after) for t in partition.truncations] == [(5, 5)]
    assert partition.truncations[0].reason.startswith("leader_epoch_pre_kip_279: ")
    assert world.state(TP0).state is ReplicaState.FETCHING
    # Offsets 3..4 are the follower's epoch-2 records, not the leader's epoch-3 ones: the logs diverged.
    assert batch_ranges(follower_log) == [(0, 2, 1), (3, 4, 2), (5, 7, 5)]
    assert batch_ranges(world.leader.logs[TP0]) == [(0, 2, 1), (3, 4, 3), (5, 7, 5)]


async def test_default_mode_on_the_same_logs_takes_two_rounds_and_converges(
    world: World, autojump_clock: MockClock
) -> None:
    three_epoch_logs(world)
    follower_log = world.follower_log(TP0)
    partition = world.follow(TP0, follower_log, 5, hw=3)
    while world.state(TP0).state is ReplicaState.TRUNCATING:
        await world.fetcher.maybe_truncate()
    assert world.kinds() == [OFLE, OFLE]
    assert [t.offset for t in partition.truncations] == [5, 3]
    assert all(t.reason.startswith("leader_epoch: ") for t in partition.truncations)
    await world.fetcher.maybe_fetch()
    assert read_all(follower_log) == read_all(world.leader.logs[TP0])


async def test_high_watermark_mode_never_asks_the_leader_and_fetches_from_where_the_broker_cut(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    world = make_world(tmp_path, truncation_mode=HW)
    three_epoch_logs(world)
    follower_log = world.follower_log(TP0)
    # The replica manager cut the log to the HW (3) on becoming a follower and handed 3 to the fetcher.
    follower_log.truncate_to(3)
    partition = world.follow(TP0, follower_log, 5, hw=3, init_offset=3)

    await world.do_work()

    assert world.kinds() == [FETCH]
    assert world.leader.requests[0].fetch_partitions() == [(TP0, 3)]
    assert partition.truncations == []  # nothing more from the fetcher
    assert read_all(follower_log) == read_all(world.leader.logs[TP0])


def ahead_of_the_leader(world: World) -> None:
    """Kafka's testFollowerFetchOutOfRangeHigh: the follower (no epochs) has 8 records, the leader 7."""
    leader_log = world.leader_log(TP0, 2)
    write(leader_log, -1, 5, tag=0)
    write(leader_log, 2, 2, tag=70)
    follower_log = world.follower_log(TP0)
    write(follower_log, -1, 5, tag=0)
    write(follower_log, -1, 3, tag=80)


async def test_old_modes_exit_rather_than_truncate_below_the_follower_log_end(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    for mode in (HW, PRE_279):
        world = make_world(tmp_path / mode.value, truncation_mode=mode)
        ahead_of_the_leader(world)
        partition = world.follow(TP0, world.follower_log(TP0), 2, hw=8, init_offset=8)

        await world.do_work()

        assert world.kinds() == [FETCH, LIST_OFFSETS]
        [(tp, message)] = world.rm.fatal
        assert tp == TP0 and "latest offset 7 is less than replica 2's latest offset 8" in message
        # The fetcher cut nothing (pre-279: its log has no epochs, so it "truncated" to its HW, 8).
        assert [t.offset for t in partition.truncations] == ([] if mode is HW else [8])
        assert world.follower_log(TP0).log_end_offset == 8
        view = world.fetcher.describe(TP0)
        assert view is not None and view.state == "failed"


async def test_old_modes_truncate_to_the_leader_when_unclean_election_is_enabled(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    world = make_world(tmp_path, truncation_mode=HW, unclean_leader_election_enable=True)
    ahead_of_the_leader(world)
    partition = world.follow(TP0, world.follower_log(TP0), 2, hw=8, init_offset=8)

    await world.do_work()

    assert world.rm.fatal == []
    assert [t.offset for t in partition.truncations] == [7]
    assert "out_of_range" in partition.truncations[0].reason
