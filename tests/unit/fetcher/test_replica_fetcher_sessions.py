"""The fetcher's incremental fetch session (KIP-227) against the broker's real ``FetchManager``: incremental
requests list only what changed and forget what left; session errors make the next request a full one,
without backing off."""

from __future__ import annotations

from trio.testing import MockClock

from protocol.errors import Errors
from protocol.messages import FetchResponse
from tests.unit.fetcher.mock_leader_endpoint import FETCH
from tests.unit.fetcher.replica_fetcher_support import TP0, TP1, World, read_all, write


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
    assert first.session == (0, 0)
    assert first.fetch_partitions() == [(TP0, 0), (TP1, 0)]
    session_id = world.fetcher.session.session_id
    assert session_id != 0 and world.leader.session_cache.session_ids() == [session_id]

    # Both fetch offsets moved: both are sent.
    await world.do_work()
    assert world.leader.last.session == (session_id, 1)
    assert sorted(world.leader.last.fetch_partitions()) == [(TP0, 5), (TP1, 3)]
    # Nothing changed: an empty incremental request.
    await world.do_work()
    assert world.leader.last.session == (session_id, 2)
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
    assert last.session == (session_id, 5)
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
    assert failed.session == (session_id, 2)
    await world.do_work()
    full = world.leader.last
    assert full.session == (0, 0)
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
        FETCH, FetchResponse(error_code=int(Errors.INVALID_FETCH_SESSION_EPOCH), session_id=session_id)
    )
    await world.do_work()
    await world.do_work()
    last = world.leader.last
    # Close the old session and ask for a new one, listing every partition.
    assert last.session == (session_id, 0)
    assert last.fetch_partitions() == [(TP0, 3)]
    assert world.rm.fetch_errors == []


async def test_other_fetch_errors_back_off_every_partition_of_the_request(
    world: World, autojump_clock: MockClock
) -> None:
    """A top-level error that is not about the session (here the INVALID_REQUEST of a request the leader
    refused as a whole): nothing is processed, the partitions of the request back off, and the next request
    is a full one that asks for a new session."""
    for tp in (TP0, TP1):
        leader_log = world.leader_log(tp, 1)
        write(leader_log, 1, 3, tag=tp[1])
        world.follow(tp, world.follower_log(tp), 1)
    await world.do_work()
    session_id = world.fetcher.session.session_id
    world.leader.script(FETCH, FetchResponse(error_code=int(Errors.INVALID_REQUEST)))
    await world.do_work()
    refused = world.leader.last
    for tp in (TP0, TP1):
        assert world.state(tp).delay_until_ms == int(refused.at * 1000) + 1000
    for _ in range(3):
        if len(world.leader.seen(FETCH)) == 3:
            break
        await world.do_work()  # nothing to fetch until the back-off is over
    retry = world.leader.last
    assert retry.at * 1000 >= refused.at * 1000 + 1000
    assert retry.session == (session_id, 0)
    assert retry.fetch_partitions() == [(TP0, 3), (TP1, 3)]
