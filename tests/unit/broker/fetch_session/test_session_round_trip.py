"""The fetcher's FetchSessionHandler against the broker's FetchManager, round after round, with partitions
coming and going, fetch parameters changing, lost responses and evicted sessions. Whatever happens, the two
ends agree on what the session holds, and the broker reads exactly what the fetcher wants."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.fetch_session import FetchManager, PartitionResponseData
from broker.fetch_session_cache import FetchSessionCache
from fetcher.fetch_session_handler import FetchSessionHandler
from protocol.common import MockTime, TopicPartition
from protocol.errors import Errors
from protocol.fetch_request import INVALID_SESSION_ID, FetchRequestPartitionData

ALL: list[TopicPartition] = [(t, p) for t in ("a", "b") for p in range(3)]

step = st.tuples(
    st.sets(st.sampled_from(ALL)),  # partitions wanted this round
    st.integers(min_value=0, max_value=3),  # fetch offset bump for the first wanted partition
    st.sampled_from(["ok", "ok", "ok", "lost", "evict", "error"]),
    st.dictionaries(st.sampled_from(ALL), st.integers(min_value=0, max_value=2)),  # hw moves
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=25), st.booleans())
def test_handler_and_manager_agree(
    steps: list[tuple[set[TopicPartition], int, str, dict[TopicPartition, int]]], follower: bool
) -> None:
    clock = MockTime()
    cache = FetchSessionCache(4, 1000, random.Random(1))
    manager = FetchManager(cache, clock)
    handler = FetchSessionHandler(0)
    offsets: dict[TopicPartition, int] = dict.fromkeys(ALL, 0)
    hw: dict[TopicPartition, int] = dict.fromkeys(ALL, 0)
    # What the fetcher last heard about each partition's high watermark.
    seen_hw: dict[TopicPartition, int] = {}

    for wanted, bump, fate, hw_moves in steps:
        clock.sleep(10)
        for tp, d in hw_moves.items():
            hw[tp] += d
        ordered_wanted = [tp for tp in ALL if tp in wanted]
        if ordered_wanted:
            offsets[ordered_wanted[0]] += bump
        builder = handler.new_builder()
        for tp in ordered_wanted:
            builder.add(tp, FetchRequestPartitionData(offsets[tp], 0, 1000, 5))
        request = builder.build()
        assert dict(request.session_partitions) == {
            tp: FetchRequestPartitionData(offsets[tp], 0, 1000, 5) for tp in ordered_wanted
        }

        if fate == "evict" and request.session_id != INVALID_SESSION_ID:
            cache.remove(request.session_id)

        context = manager.new_context(
            request.session_id, request.epoch, request.to_send, request.to_forget, follower
        )
        read = dict(context.partitions())
        updates = {tp: PartitionResponseData(0, hw[tp], hw[tp], 0, b"") for tp in read}
        if fate == "error":
            updates = {tp: PartitionResponseData(Errors.NOT_LEADER_OR_FOLLOWER) for tp in read}
        response = context.update_and_generate_response_data(updates)

        if response.error_code == Errors.NONE:
            # The broker read exactly what the fetcher wants, with the fetcher's parameters.
            assert read == request.session_partitions
            if not request.metadata.is_full:
                # Only changed partitions come back.
                for tp in read:
                    changed = fate == "error" or seen_hw.get(tp) != hw[tp]
                    assert (tp in response.responses) == changed, (tp, seen_hw.get(tp), hw[tp])
            else:
                assert set(response.responses) == set(read)

        if fate == "lost":
            handler.handle_error(ConnectionError("response lost"))
            seen_hw.clear()
            continue
        ok = handler.handle_response(response.session_id, response.error_code, list(response.responses))
        if ok:
            for tp, r in response.responses.items():
                seen_hw[tp] = r.high_watermark
            session = cache.get(handler.session_id)
            if handler.session_id != INVALID_SESSION_ID:
                # Both ends hold the same partitions with the same parameters.
                assert session is not None
                assert {
                    tp: c.req_data for tp, c in session.partition_map.items()
                } == handler.session_partitions
        else:
            seen_hw.clear()
        for tp in list(seen_hw):
            if tp not in handler.session_partitions:
                del seen_hw[tp]
        assert cache.total_partitions == sum(s.cached_size for s in map(cache.get, cache.session_ids()) if s)
