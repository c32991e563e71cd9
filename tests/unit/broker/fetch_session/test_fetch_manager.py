"""FetchManager and the fetch contexts (ports of Kafka's FetchSessionTest context cases, plus the edges the
conformance suite checks)."""

from __future__ import annotations

from broker.fetch_session import (
    FetchContext,
    FullFetchContext,
    IncrementalFetchContext,
    PartitionResponseData,
    SessionErrorContext,
    SessionlessFetchContext,
)
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.fetch_request import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchRequestPartitionData,
)

from .conftest import Env, error_resp, make_env, req, resp

FOO0: TopicPartition = ("foo", 0)
FOO1: TopicPartition = ("foo", 1)
BAR0: TopicPartition = ("bar", 0)
BAR1: TopicPartition = ("bar", 1)
ZAR3: TopicPartition = ("zar", 3)


def new_context(
    env: Env,
    session_id: int,
    epoch: int,
    data: dict[TopicPartition, FetchRequestPartitionData] | None = None,
    to_forget: list[TopicPartition] | None = None,
    is_follower: bool = False,
) -> FetchContext:
    return env.manager.new_context(session_id, epoch, data or {}, to_forget or [], is_follower)


def partitions_order(context: FetchContext) -> list[TopicPartition]:
    return [tp for tp, _ in context.partitions()]


def create_session(
    env: Env,
    data: dict[TopicPartition, FetchRequestPartitionData],
    responses: dict[TopicPartition, PartitionResponseData],
    is_follower: bool = False,
) -> int:
    context = new_context(env, INVALID_SESSION_ID, INITIAL_EPOCH, data, is_follower=is_follower)
    assert isinstance(context, FullFetchContext)
    response = context.update_and_generate_response_data(responses)
    assert response.error_code == Errors.NONE
    assert response.session_id != INVALID_SESSION_ID
    assert len(response.responses) == len(responses)
    return response.session_id


def test_cached_leader_epoch() -> None:
    env = make_env()
    data1 = {FOO0: req(0, epoch=-1), FOO1: req(10, epoch=1), BAR1: req(10, epoch=2)}
    context1 = new_context(env, INVALID_SESSION_ID, INITIAL_EPOCH, data1)
    epochs1 = {tp: d.current_leader_epoch for tp, d in context1.partitions()}
    assert epochs1 == {FOO0: -1, FOO1: 1, BAR1: 2}
    response = {FOO0: resp(100), FOO1: resp(10), BAR1: resp(5)}
    session_id = context1.update_and_generate_response_data(response).session_id

    # With no changes, the cached epochs stay the same.
    context2 = new_context(env, session_id, 1)
    assert {tp: d.current_leader_epoch for tp, d in context2.partitions()} == {FOO0: -1, FOO1: 1, BAR1: 2}
    context2.update_and_generate_response_data(response)

    # Changing the leader epoch updates the context.
    data3 = {FOO0: req(0, epoch=6), FOO1: req(10, epoch=-1), BAR1: req(10, epoch=3)}
    context3 = new_context(env, session_id, 2, data3)
    assert {tp: d.current_leader_epoch for tp, d in context3.partitions()} == {FOO0: 6, FOO1: -1, BAR1: 3}


def test_fetch_requests() -> None:
    env = make_env()
    # A sessionless request gets a SessionlessFetchContext.
    assert isinstance(
        new_context(env, INVALID_SESSION_ID, FINAL_EPOCH, is_follower=True), SessionlessFetchContext
    )

    # A full request creates a session.
    data2 = {FOO0: req(0), FOO1: req(10)}
    context2 = new_context(env, INVALID_SESSION_ID, INITIAL_EPOCH, data2)
    assert isinstance(context2, FullFetchContext)
    assert context2.partitions() == list(data2.items())
    assert context2.get_fetch_offset(FOO0) == 0
    assert context2.get_fetch_offset(FOO1) == 10
    resp_data2 = {FOO0: resp(100), FOO1: resp(10)}
    resp2 = context2.update_and_generate_response_data(resp_data2)
    assert resp2.error_code == Errors.NONE
    assert resp2.session_id != INVALID_SESSION_ID
    assert resp2.responses == resp_data2

    # An incremental request with the wrong epoch.
    context3 = new_context(env, resp2.session_id, 5, data2)
    assert isinstance(context3, SessionErrorContext)
    resp3 = context3.update_and_generate_response_data(resp_data2)
    assert resp3.error_code == Errors.INVALID_FETCH_SESSION_EPOCH
    assert resp3.responses == {} and resp3.session_id == INVALID_SESSION_ID

    # An incremental request with a session id that does not exist.
    context4 = new_context(env, resp2.session_id + 1, 1, data2)
    assert (
        context4.update_and_generate_response_data(resp_data2).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    )

    # Continue the session: the context reads every partition of the session, in order.
    context5 = new_context(env, resp2.session_id, 1)
    assert isinstance(context5, IncrementalFetchContext)
    assert context5.partitions() == list(data2.items())
    assert context5.get_fetch_offset(FOO1) == 10
    resp5 = context5.update_and_generate_response_data(resp_data2)
    assert resp5.error_code == Errors.NONE
    assert resp5.session_id == resp2.session_id
    assert resp5.responses == {}

    # An invalid epoch again.
    context6 = new_context(env, resp2.session_id, 5, data2)
    assert isinstance(context6, SessionErrorContext)
    assert (
        context6.update_and_generate_response_data(resp_data2).error_code
        == Errors.INVALID_FETCH_SESSION_EPOCH
    )

    # A throttled response for the incremental session.
    context7 = new_context(env, resp2.session_id, 2)
    resp7 = context7.get_throttled_response(100)
    assert resp7.error_code == Errors.NONE
    assert resp7.session_id == resp2.session_id
    assert resp7.throttle_time_ms == 100

    # Close the session: FINAL_EPOCH with its id removes it and the request is served sessionless.
    data8 = {BAR0: req(0), BAR1: req(10)}
    context8 = new_context(env, resp5.session_id, FINAL_EPOCH, data8)
    assert isinstance(context8, SessionlessFetchContext)
    assert env.cache.size == 0
    resp_data8 = {BAR0: resp(100), BAR1: resp(100)}
    resp8 = context8.update_and_generate_response_data(resp_data8)
    assert resp8.error_code == Errors.NONE
    assert resp8.session_id == INVALID_SESSION_ID
    assert resp8.responses == resp_data8


def test_incremental_fetch_session() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0), FOO1: req(10)}, {FOO0: resp(100), FOO1: resp(10)})

    # An incremental request that removes foo-0 and adds bar-0.
    context2 = new_context(env, session_id, 1, {BAR0: req(15, max_bytes=0)}, [FOO0])
    assert isinstance(context2, IncrementalFetchContext)
    assert partitions_order(context2) == [FOO1, BAR0]
    assert context2.get_fetch_offset(FOO0) is None
    assert context2.get_fetch_offset(FOO1) == 10
    assert context2.get_fetch_offset(BAR0) == 15
    assert context2.get_fetch_offset(("bar", 2)) is None
    resp2 = context2.update_and_generate_response_data({FOO1: resp(10), BAR0: resp(10)})
    assert resp2.error_code == Errors.NONE
    # foo-1 did not change; bar-0 is new to the session (its cached high watermark was -1).
    assert list(resp2.responses) == [BAR0]
    assert resp2.session_id == session_id


def test_update_and_generate_response_data() -> None:
    """Partitions with errors are always in the response, in every kind of context."""
    env = make_env()

    def respond(context: FetchContext) -> dict[TopicPartition, int]:
        data = {
            tp: error_resp(Errors.UNKNOWN_TOPIC_OR_PARTITION if tp == FOO0 else Errors.NOT_LEADER_OR_FOLLOWER)
            for tp, _ in context.partitions()
        }
        response = context.update_and_generate_response_data(data)
        return {tp: r.error_code for tp, r in response.responses.items()}

    expected = {FOO0: Errors.UNKNOWN_TOPIC_OR_PARTITION, BAR0: Errors.NOT_LEADER_OR_FOLLOWER}
    data = {FOO0: req(0), BAR0: req(0)}
    context1 = new_context(env, INVALID_SESSION_ID, FINAL_EPOCH, data)
    assert isinstance(context1, SessionlessFetchContext)
    assert respond(context1) == expected

    context2 = new_context(env, INVALID_SESSION_ID, INITIAL_EPOCH, data)
    assert isinstance(context2, FullFetchContext)
    session_id = context2.update_and_generate_response_data(
        {FOO0: error_resp(Errors.UNKNOWN_TOPIC_OR_PARTITION), BAR0: error_resp(Errors.NOT_LEADER_OR_FOLLOWER)}
    ).session_id

    context3 = new_context(env, session_id, 1)
    assert isinstance(context3, IncrementalFetchContext)
    assert respond(context3) == expected

    # Reusing the epoch is an error and the response is empty.
    context4 = new_context(env, session_id, 1)
    assert isinstance(context4, SessionErrorContext)
    response4 = context4.update_and_generate_response_data({})
    assert response4.responses == {}
    assert response4.error_code == Errors.INVALID_FETCH_SESSION_EPOCH


def test_fetch_session_expiration() -> None:
    env = make_env(max_entries=2, eviction_ms=1000)
    data = {FOO0: req(0), FOO1: req(10)}
    responses = {FOO0: resp(100), FOO1: resp(10)}
    session1 = create_session(env, data, responses)
    assert env.cache.get(session1) is not None
    env.time.sleep(500)

    session2 = create_session(env, data, responses)
    assert env.cache.get(session1) is not None
    assert env.cache.get(session2) is not None
    env.time.sleep(500)

    # An incremental request touches session 1.
    assert isinstance(new_context(env, session1, 1), IncrementalFetchContext)
    # Now session 2 is the least recently used and stale (1001 ms); session 1 was used 501 ms ago.
    env.time.sleep(501)
    session3 = create_session(env, {FOO0: req(0), FOO1: req(0)}, responses)
    assert env.cache.get(session1) is not None
    assert env.cache.get(session2) is None, (
        "session 2 should have been evicted: session 1 was used more recently"
    )
    assert env.cache.get(session3) is not None


def test_privileged_session_handling() -> None:
    env = make_env(max_entries=2, eviction_ms=1000)
    data = {FOO0: req(0), FOO1: req(10)}
    responses = {FOO0: resp(100), FOO1: resp(10)}
    session1 = create_session(env, data, responses, is_follower=True)
    assert env.cache.size == 1
    env.time.sleep(500)

    session2 = create_session(env, data, responses, is_follower=False)
    assert env.cache.get(session1) is not None
    assert env.cache.get(session2) is not None
    assert env.cache.size == 2
    env.time.sleep(500)

    # A follower session evicts the (younger, not stale) consumer session 2 rather than follower session 1.
    session3 = create_session(env, {FOO0: req(0), FOO1: req(0)}, responses, is_follower=True)
    assert env.cache.get(session1) is not None
    assert env.cache.get(session2) is None, "session 2 should have been evicted by session 3"
    assert env.cache.get(session3) is not None
    assert env.cache.size == 2
    env.time.sleep(501)

    # Session 1 is stale now (unused for 1501 ms), so even a privileged session goes.
    session4 = create_session(env, {FOO0: req(0), FOO1: req(0)}, responses, is_follower=True)
    assert env.cache.get(session1) is None, "session 1 should have been evicted: it hit the eviction time"
    assert env.cache.get(session3) is not None
    assert env.cache.get(session4) is not None
    assert env.cache.size == 2
    assert env.cache.num_evictions == 2


def test_zero_size_fetch_session() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0), FOO1: req(10)}, {FOO0: resp(100), FOO1: resp(10)})
    # An incremental request that removes every partition closes the session and is served sessionless.
    context2 = new_context(env, session_id, 1, {}, [FOO0, FOO1])
    assert isinstance(context2, SessionlessFetchContext)
    resp2 = context2.update_and_generate_response_data({})
    assert resp2.session_id == INVALID_SESSION_ID
    assert resp2.responses == {}
    assert env.cache.size == 0


def test_to_forget_partitions() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0), BAR0: req(0)}, {FOO0: resp(0), BAR0: resp(0)})
    context2 = new_context(env, session_id, 1, {}, [FOO0])
    assert isinstance(context2, IncrementalFetchContext)
    assert partitions_order(context2) == [BAR0]
    context2.update_and_generate_response_data({BAR0: resp(0)})
    context3 = new_context(env, session_id, 2, {}, [BAR0])
    assert isinstance(context3, SessionlessFetchContext)
    assert partitions_order(context3) == []


def test_deprioritizes_partitions_with_records_only() -> None:
    env = make_env()
    data = {
        FOO1: req(100, max_bytes=1000, epoch=5),
        BAR1: req(100, max_bytes=1000, epoch=5),
        ZAR3: req(100, 0, 1000, 5),
    }
    responses1 = {FOO1: resp(50, log_start=0), BAR1: resp(50, log_start=0), ZAR3: resp(50, log_start=0)}
    session_id = create_session(env, data, responses1)

    context2 = env.manager.new_context(session_id, 1, data, [], False)
    assert isinstance(context2, IncrementalFetchContext)
    assert partitions_order(context2) == [FOO1, BAR1, ZAR3]
    resp2 = context2.update_and_generate_response_data({})
    assert resp2.error_code == Errors.NONE
    assert resp2.session_id == session_id
    assert resp2.responses == {}

    responses3 = {
        FOO1: resp(60, lso=50, log_start=0),
        BAR1: resp(60, lso=50, log_start=0, records=b"\x00" * 70),
        ZAR3: resp(50, log_start=0),
    }
    resp3 = context2.update_and_generate_response_data(responses3)
    assert resp3.error_code == Errors.NONE
    assert resp3.session_id == session_id
    assert list(resp3.responses) == [FOO1, BAR1]
    # Only the partition that returned records moved to the back.
    assert partitions_order(context2) == [FOO1, ZAR3, BAR1]


# -- beyond Kafka's test file: the edges the conformance suite checks ---------------------------------------


def test_full_request_with_session_id_closes_old_session_and_creates_new() -> None:
    env = make_env()
    old = create_session(env, {FOO0: req(0)}, {FOO0: resp(1)})
    context = new_context(env, old, INITIAL_EPOCH, {FOO1: req(0)})
    assert isinstance(context, FullFetchContext)
    assert env.cache.get(old) is None
    new = context.update_and_generate_response_data({FOO1: resp(3)}).session_id
    assert new not in (INVALID_SESSION_ID, old)
    session = env.cache.get(new)
    assert session is not None and list(session.partition_map) == [FOO1]
    assert session.epoch == 1


def test_full_request_ignores_to_forget() -> None:
    env = make_env()
    context = new_context(env, INVALID_SESSION_ID, INITIAL_EPOCH, {FOO0: req(0)}, [FOO1])
    assert isinstance(context, FullFetchContext)
    assert partitions_order(context) == [FOO0]


def test_unknown_session_id_with_final_epoch_is_sessionless() -> None:
    env = make_env()
    context = new_context(env, 12345, FINAL_EPOCH, {FOO0: req(0)})
    assert isinstance(context, SessionlessFetchContext)


def test_zero_session_id_with_incremental_epoch_is_not_found() -> None:
    env = make_env()
    context = new_context(env, INVALID_SESSION_ID, 3, {FOO0: req(0)})
    assert isinstance(context, SessionErrorContext)
    assert context.error == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert context.partitions() == []


def test_negative_epoch_other_than_final_is_an_epoch_error() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0)}, {FOO0: resp(1)})
    context = new_context(env, session_id, -2)
    assert isinstance(context, SessionErrorContext)
    assert context.error == Errors.INVALID_FETCH_SESSION_EPOCH


def test_epochs_count_up_from_one() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0)}, {FOO0: resp(1)})
    for epoch in range(1, 6):
        context = new_context(env, session_id, epoch)
        assert isinstance(context, IncrementalFetchContext), epoch
        assert context.update_and_generate_response_data({FOO0: resp(1)}).error_code == Errors.NONE
    session = env.cache.get(session_id)
    assert session is not None and session.epoch == 6


def test_epoch_error_does_not_advance_or_close_session() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0)}, {FOO0: resp(1)})
    assert isinstance(new_context(env, session_id, 2), SessionErrorContext)
    assert isinstance(new_context(env, session_id, 1), IncrementalFetchContext)


def test_full_context_not_cached_returns_session_id_zero() -> None:
    env = make_env(max_entries=0)
    context = new_context(env, INVALID_SESSION_ID, INITIAL_EPOCH, {FOO0: req(0)})
    response = context.update_and_generate_response_data({FOO0: resp(0)})
    assert response.session_id == INVALID_SESSION_ID
    assert response.responses == {FOO0: resp(0)}


def test_duplicate_incremental_request_gets_epoch_error_at_response_time() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0)}, {FOO0: resp(1)})
    context1 = new_context(env, session_id, 1)
    # A second request with the next epoch is accepted before the first one is answered.
    context2 = new_context(env, session_id, 2)
    stale = context1.update_and_generate_response_data({FOO0: resp(5)})
    assert stale.error_code == Errors.INVALID_FETCH_SESSION_EPOCH
    assert stale.session_id == session_id and stale.responses == {}
    assert context1.get_throttled_response(7).error_code == Errors.INVALID_FETCH_SESSION_EPOCH
    assert context2.update_and_generate_response_data({FOO0: resp(5)}).responses == {FOO0: resp(5)}


def test_incremental_response_change_detection() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0)}, {FOO0: resp(10, log_start=0)})
    epoch = 1

    def incremental(r: PartitionResponseData) -> bool:
        nonlocal epoch
        context = new_context(env, session_id, epoch)
        epoch += 1
        return FOO0 in context.update_and_generate_response_data({FOO0: r}).responses

    assert not incremental(resp(10, log_start=0))  # nothing changed
    assert incremental(resp(11, log_start=0))  # high watermark moved
    assert not incremental(resp(11, lso=3, log_start=0))  # last stable offset is not tracked
    assert incremental(resp(11, log_start=4))  # log start offset moved
    assert incremental(resp(11, log_start=4, records=b"x"))  # records
    assert incremental(error_resp(Errors.NOT_LEADER_OR_FOLLOWER))  # error
    # After an error the cached high watermark is -1, so the recovered partition is re-sent once.
    assert incremental(resp(11, log_start=-1))
    assert not incremental(resp(11, log_start=-1))


def test_incremental_request_updates_fetch_params_in_place() -> None:
    env = make_env()
    session_id = create_session(env, {FOO0: req(0), FOO1: req(0)}, {FOO0: resp(0), FOO1: resp(0)})
    context = new_context(env, session_id, 1, {FOO0: req(7, 1, 55, 3)})
    assert context.partitions() == [(FOO0, req(7, 1, 55, 3)), (FOO1, req(0))]
    session = env.cache.get(session_id)
    assert session is not None
    assert session.update({}, [("nope", 9)]) == ([], [], [])


def test_cache_counters_follow_sessions() -> None:
    env = make_env()
    create_session(env, {FOO0: req(0), FOO1: req(0)}, {FOO0: resp(0), FOO1: resp(0)})
    sid = create_session(env, {BAR0: req(0)}, {BAR0: resp(0)}, is_follower=True)
    assert (env.cache.size, env.cache.total_partitions) == (2, 3)
    new_context(env, sid, 1, {BAR1: req(0)})
    assert env.cache.total_partitions == 4
    new_context(env, sid, FINAL_EPOCH)
    assert (env.cache.size, env.cache.total_partitions) == (1, 2)
