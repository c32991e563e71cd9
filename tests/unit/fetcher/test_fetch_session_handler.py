"""FetchSessionHandler (ports of Kafka's FetchSessionHandlerTest cases that do not involve topic ids)."""

from __future__ import annotations

import pytest

from fetcher.fetch_session_handler import FetchRequestData, FetchSessionHandler, find_missing
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.fetch_request import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchRequestPartitionData,
    next_epoch,
)

FOO0: TopicPartition = ("foo", 0)
FOO1: TopicPartition = ("foo", 1)
BAR0: TopicPartition = ("bar", 0)
BAR1: TopicPartition = ("bar", 1)
BAZ0: TopicPartition = ("baz", 0)
BAZ1: TopicPartition = ("baz", 1)


def pd(fetch_offset: int, log_start_offset: int, max_bytes: int) -> FetchRequestPartitionData:
    return FetchRequestPartitionData(fetch_offset, log_start_offset, max_bytes)


def build(
    handler: FetchSessionHandler, *parts: tuple[TopicPartition, FetchRequestPartitionData]
) -> FetchRequestData:
    builder = handler.new_builder()
    for tp, data in parts:
        builder.add(tp, data)
    return builder.build()


def ordered(
    d: dict[TopicPartition, FetchRequestPartitionData],
) -> list[tuple[TopicPartition, FetchRequestPartitionData]]:
    return list(d.items())


def test_find_missing() -> None:
    assert find_missing([FOO0], {FOO0}) == []
    assert find_missing([FOO0], {FOO1}) == [FOO0]
    assert find_missing([FOO0, FOO1], {BAZ0}) == [FOO0, FOO1]
    assert set(find_missing([FOO0, FOO1, BAR0, BAR1], {BAR0, BAZ0, BAZ1})) == {BAR1, FOO0, FOO1}
    assert find_missing([FOO0, FOO1, BAR0, BAR1, BAZ1], {FOO0, FOO1, BAR0, BAR1, BAZ0, BAZ1}) == []


def test_sessionless() -> None:
    """A broker that never creates a session (session id 0 in every full response)."""
    handler = FetchSessionHandler(1)
    data = build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210)))
    expected = [(FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210))]
    assert ordered(data.to_send) == expected
    assert ordered(data.session_partitions) == expected
    assert data.session_id == INVALID_SESSION_ID
    assert data.epoch == INITIAL_EPOCH

    assert handler.handle_response(INVALID_SESSION_ID, Errors.NONE, {FOO0, FOO1})

    data2 = build(handler, (FOO0, pd(0, 100, 200)))
    assert data2.session_id == INVALID_SESSION_ID
    assert data2.epoch == INITIAL_EPOCH
    assert ordered(data2.to_send) == [(FOO0, pd(0, 100, 200))]
    assert ordered(data2.session_partitions) == [(FOO0, pd(0, 100, 200))]


def test_incrementals() -> None:
    handler = FetchSessionHandler(1)
    data = build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210)))
    assert ordered(data.to_send) == [(FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210))]
    assert data.session_id == INVALID_SESSION_ID
    assert data.epoch == INITIAL_EPOCH
    assert handler.handle_response(123, Errors.NONE, {FOO0, FOO1})

    # An incremental request that adds one partition and modifies another.
    data2 = build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 120, 210)), (BAR0, pd(20, 200, 200)))
    assert not data2.metadata.is_full
    assert (data2.session_id, data2.epoch) == (123, 1)
    assert ordered(data2.session_partitions) == [
        (FOO0, pd(0, 100, 200)),
        (FOO1, pd(10, 120, 210)),
        (BAR0, pd(20, 200, 200)),
    ]
    # New partitions first, then the altered ones.
    assert ordered(data2.to_send) == [(BAR0, pd(20, 200, 200)), (FOO1, pd(10, 120, 210))]
    assert data2.to_forget == []

    assert handler.handle_response(123, Errors.NONE, {FOO1})

    # An INVALID_FETCH_SESSION_EPOCH response: the next request is full and closes the session.
    assert not handler.handle_response(INVALID_SESSION_ID, Errors.INVALID_FETCH_SESSION_EPOCH, set())
    data4 = build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 120, 210)), (BAR0, pd(20, 200, 200)))
    assert data4.metadata.is_full
    assert data4.session_id == data2.session_id
    assert data4.epoch == INITIAL_EPOCH
    expected = [(FOO0, pd(0, 100, 200)), (FOO1, pd(10, 120, 210)), (BAR0, pd(20, 200, 200))]
    assert ordered(data4.session_partitions) == expected
    assert ordered(data4.to_send) == expected


def test_double_build() -> None:
    handler = FetchSessionHandler(1)
    builder = handler.new_builder()
    builder.add(FOO0, pd(0, 100, 200))
    builder.build()
    with pytest.raises(RuntimeError):
        builder.build()
    with pytest.raises(RuntimeError):
        builder.add(FOO1, pd(0, 0, 0))


def test_incremental_partition_removal() -> None:
    handler = FetchSessionHandler(1)
    data = build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210)), (BAR0, pd(20, 120, 220)))
    assert data.metadata.is_full
    assert handler.handle_response(123, Errors.NONE, {FOO0, FOO1, BAR0})

    # An incremental request that removes two partitions.
    data2 = build(handler, (FOO1, pd(10, 110, 210)))
    assert not data2.metadata.is_full
    assert (data2.session_id, data2.epoch) == (123, 1)
    assert ordered(data2.session_partitions) == [(FOO1, pd(10, 110, 210))]
    assert data2.to_send == {}
    assert sorted(data2.to_forget) == sorted([FOO0, BAR0])

    # FETCH_SESSION_ID_NOT_FOUND: the next request is a full one that asks for a brand new session.
    assert not handler.handle_response(INVALID_SESSION_ID, Errors.FETCH_SESSION_ID_NOT_FOUND, set())
    data3 = build(handler, (FOO0, pd(0, 100, 200)))
    assert data3.metadata.is_full
    assert (data3.session_id, data3.epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)
    assert ordered(data3.session_partitions) == [(FOO0, pd(0, 100, 200))]
    assert ordered(data3.to_send) == [(FOO0, pd(0, 100, 200))]


def test_all_forgotten_partitions_keep_the_session() -> None:
    handler = FetchSessionHandler(1)
    data = build(handler, (FOO0, pd(0, 100, 200)))
    assert data.metadata.is_full
    assert handler.handle_response(123, Errors.NONE, {FOO0})
    data2 = build(handler)
    assert data2.to_forget == [FOO0]
    assert (data2.session_id, data2.epoch) == (123, 1)


def test_ok_to_re_add_partition_after_removing_it() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, pd(0, 100, 200)))
    assert handler.handle_response(123, Errors.NONE, {FOO0})
    data2 = build(handler)
    assert data2.to_send == {} and data2.session_partitions == {}
    assert handler.handle_response(123, Errors.NONE, set())
    data3 = build(handler, (FOO0, pd(0, 100, 200)))
    assert (data3.session_id, data3.epoch) == (123, 2)
    assert ordered(data3.to_send) == [(FOO0, pd(0, 100, 200))]


def test_verify_full_fetch_response_partitions() -> None:
    handler = FetchSessionHandler(1)
    issue = handler.verify_full_fetch_response_partitions([FOO0, FOO1, BAR0])
    assert issue is not None
    assert "extraPartitions=" in issue and "omittedPartitions=" not in issue
    build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210)), (BAR0, pd(20, 120, 220)))
    assert handler.verify_full_fetch_response_partitions([FOO0, FOO1, BAR0]) is None
    issue3 = handler.verify_full_fetch_response_partitions([FOO0, FOO1])
    assert issue3 is not None
    assert "extraPartitions=" not in issue3 and "omittedPartitions=" in issue3


def test_verify_incremental_fetch_response_partitions() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210)))
    assert handler.verify_incremental_fetch_response_partitions([]) is None
    assert handler.verify_incremental_fetch_response_partitions([FOO1]) is None
    issue = handler.verify_incremental_fetch_response_partitions([FOO1, BAR0])
    assert issue is not None and "extraPartitions=(bar-0)" in issue


def test_top_level_error_resets_metadata() -> None:
    handler = FetchSessionHandler(1)
    data = build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210)))
    assert (data.session_id, data.epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)
    assert handler.handle_response(123, Errors.NONE, {FOO0, FOO1})

    data2 = build(handler, (FOO0, pd(0, 100, 200)), (FOO1, pd(10, 110, 210)), (BAR0, pd(0, 100, 200)))
    assert not data2.metadata.is_full
    assert (data2.session_id, data2.epoch) == (123, next_epoch(INITIAL_EPOCH))

    # Any top-level error other than FETCH_SESSION_ID_NOT_FOUND: close this session, ask for a new one.
    assert not handler.handle_response(123, Errors.NOT_LEADER_OR_FOLLOWER, {BAR0})
    data3 = build(handler)
    assert (data3.session_id, data3.epoch) == (123, INITIAL_EPOCH)


# -- beyond Kafka's test file ------------------------------------------------------------------------------


def test_invalid_full_response_resets_to_initial() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, pd(0, 0, 1)), (FOO1, pd(0, 0, 1)))
    assert not handler.handle_response(55, Errors.NONE, {FOO0})
    data = build(handler, (FOO0, pd(0, 0, 1)))
    assert (data.session_id, data.epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)


def test_throttled_empty_full_response_is_not_processed() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, pd(0, 0, 1)))
    assert not handler.handle_response(INVALID_SESSION_ID, Errors.NONE, set(), throttle_time_ms=100)
    assert handler.next_metadata.is_full and handler.session_id == INVALID_SESSION_ID


def test_invalid_incremental_response_closes_session_and_attempts_new() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, pd(0, 0, 1)))
    assert handler.handle_response(77, Errors.NONE, {FOO0})
    build(handler, (FOO0, pd(0, 0, 1)))
    assert not handler.handle_response(77, Errors.NONE, {BAR1})
    data = build(handler, (FOO0, pd(0, 0, 1)))
    assert (data.session_id, data.epoch) == (77, INITIAL_EPOCH)
    assert data.metadata.is_full


def test_incremental_response_without_session_id_means_session_closed() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, pd(0, 0, 1)))
    assert handler.handle_response(77, Errors.NONE, {FOO0})
    build(handler, (FOO0, pd(0, 0, 1)))
    assert handler.handle_response(INVALID_SESSION_ID, Errors.NONE, {FOO0})
    data = build(handler, (FOO0, pd(0, 0, 1)))
    assert (data.session_id, data.epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)


def test_epochs_increase_with_each_incremental_response() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, pd(0, 0, 1)))
    assert handler.handle_response(9, Errors.NONE, {FOO0})
    for epoch in range(1, 5):
        data = build(handler, (FOO0, pd(0, 0, 1)))
        assert (data.session_id, data.epoch) == (9, epoch)
        assert data.to_send == {}
        assert handler.handle_response(9, Errors.NONE, set())


def test_handle_error_closes_the_session_and_asks_for_a_new_one() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, pd(0, 0, 1)))
    assert handler.handle_response(9, Errors.NONE, {FOO0})
    handler.handle_error(ConnectionResetError())
    data = build(handler, (FOO0, pd(0, 0, 1)))
    assert (data.session_id, data.epoch) == (9, INITIAL_EPOCH)
    assert data.metadata.is_full
    assert handler.handle_response(10, Errors.NONE, {FOO0})
    data2 = build(handler, (FOO0, pd(0, 0, 1)))
    assert (data2.session_id, data2.epoch) == (10, 1)
