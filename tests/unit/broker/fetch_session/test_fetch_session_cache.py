"""FetchSessionCache: ids, eviction and accounting (ports of Kafka's FetchSessionTest cache cases)."""

from __future__ import annotations

import functools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.fetch_session import CachedPartition
from broker.fetch_session_cache import FetchSessionCache
from protocol.common import TopicPartition
from protocol.fetch_request import INVALID_SESSION_ID

from .conftest import dummy_create


def assert_cache_contains(cache: FetchSessionCache, *session_ids: int) -> None:
    for i, session_id in enumerate(session_ids, start=1):
        assert cache.get(session_id) is not None, (
            f"Missing session {i} out of {len(session_ids)} ({session_id})"
        )
    assert cache.size == len(session_ids)


def test_new_session_id() -> None:
    cache = FetchSessionCache(3, 100, random.Random(1))
    for _ in range(10001):
        assert 0 < cache.new_session_id() < 2**31


def test_new_session_id_never_collides() -> None:
    class Repeating(random.Random):
        """Returns 5 three times, then 6."""

        def __init__(self) -> None:
            super().__init__(0)
            self.values = [5, 5, 5, 6]

        def randrange(self, *args: object, **kwargs: object) -> int:
            return self.values.pop(0)

    cache = FetchSessionCache(3, 100, Repeating())
    first = cache.maybe_create_session(0, False, 1, lambda: dummy_create(1))
    second = cache.maybe_create_session(0, False, 1, lambda: dummy_create(1))
    assert (first, second) == (5, 6)


def test_session_cache() -> None:
    cache = FetchSessionCache(3, 100, random.Random(2))
    assert cache.size == 0
    id1 = cache.maybe_create_session(0, False, 10, lambda: dummy_create(10))
    id2 = cache.maybe_create_session(10, False, 20, lambda: dummy_create(20))
    id3 = cache.maybe_create_session(20, False, 30, lambda: dummy_create(30))
    assert cache.maybe_create_session(30, False, 40, lambda: dummy_create(40)) == INVALID_SESSION_ID
    assert cache.maybe_create_session(40, False, 5, lambda: dummy_create(5)) == INVALID_SESSION_ID
    assert_cache_contains(cache, id1, id2, id3)
    session1 = cache.get(id1)
    assert session1 is not None
    cache.touch(session1, 200)
    # id2 is the least recently used and stale (210 - 10 > 100).
    id4 = cache.maybe_create_session(210, False, 11, lambda: dummy_create(11))
    assert_cache_contains(cache, id1, id3, id4)
    for session_id, now in ((id1, 400), (id3, 390), (id4, 400)):
        session = cache.get(session_id)
        assert session is not None
        cache.touch(session, now)
    # Nothing is stale; id1 (10 partitions) is the smallest old-enough session and 50 > 10.
    id5 = cache.maybe_create_session(410, False, 50, lambda: dummy_create(50))
    assert_cache_contains(cache, id3, id4, id5)
    # A consumer session of 5 partitions is worth less than any of them.
    assert cache.maybe_create_session(410, False, 5, lambda: dummy_create(5)) == INVALID_SESSION_ID
    # A follower session evicts the least valuable non-privileged one (id4, 11 partitions).
    id6 = cache.maybe_create_session(410, True, 5, lambda: dummy_create(5))
    assert_cache_contains(cache, id3, id5, id6)


def test_create_partitions_only_called_when_created() -> None:
    cache = FetchSessionCache(1, 100, random.Random(3))
    calls: list[int] = []

    def create() -> dict[TopicPartition, CachedPartition]:
        calls.append(1)
        return dummy_create(1)

    assert cache.maybe_create_session(0, False, 1, create) != INVALID_SESSION_ID
    assert cache.maybe_create_session(0, False, 1, create) == INVALID_SESSION_ID
    assert len(calls) == 1


def test_resize_cached_sessions() -> None:
    cache = FetchSessionCache(2, 100, random.Random(4))
    assert cache.total_partitions == 0
    assert cache.size == 0
    assert cache.num_evictions == 0
    id1 = cache.maybe_create_session(0, False, 2, lambda: dummy_create(2))
    assert id1 > 0
    assert_cache_contains(cache, id1)
    session1 = cache.get(id1)
    assert session1 is not None
    assert session1.size == 2
    assert cache.total_partitions == 2
    assert cache.size == 1
    assert cache.num_evictions == 0
    id2 = cache.maybe_create_session(0, False, 4, lambda: dummy_create(4))
    session2 = cache.get(id2)
    assert session2 is not None
    assert id2 > 0
    assert_cache_contains(cache, id1, id2)
    assert cache.total_partitions == 6
    assert cache.size == 2
    assert cache.num_evictions == 0
    cache.touch(session1, 200)
    cache.touch(session2, 200)
    id3 = cache.maybe_create_session(200, False, 5, lambda: dummy_create(5))
    assert id3 > 0
    assert_cache_contains(cache, id2, id3)
    assert cache.total_partitions == 9
    assert cache.size == 2
    assert cache.num_evictions == 1
    cache.remove(id3)
    assert_cache_contains(cache, id2)
    assert cache.size == 1
    assert cache.num_evictions == 1
    assert cache.total_partitions == 4
    del session2.partition_map[next(iter(session2.partition_map))]
    assert session2.size == 3
    assert session2.cached_size == 4
    cache.touch(session2, session2.last_used_ms)
    assert cache.total_partitions == 3


def test_remove_unknown_session_is_a_no_op() -> None:
    cache = FetchSessionCache(2, 100, random.Random(5))
    assert cache.remove(1234) is None
    assert cache.size == 0 and cache.total_partitions == 0


def test_privileged_newcomer_cannot_evict_young_privileged_session() -> None:
    cache = FetchSessionCache(1, 100, random.Random(6))
    assert cache.maybe_create_session(0, True, 1, lambda: dummy_create(1)) != INVALID_SESSION_ID
    # Neither stale nor old enough to be evictable by a privileged newcomer.
    assert cache.maybe_create_session(50, True, 100, lambda: dummy_create(100)) == INVALID_SESSION_ID
    # Stale now (last used at 0).
    assert cache.maybe_create_session(101, True, 1, lambda: dummy_create(1)) != INVALID_SESSION_ID
    assert cache.num_evictions == 1


def test_consumer_newcomer_needs_strictly_more_partitions() -> None:
    cache = FetchSessionCache(1, 100, random.Random(8))
    sid = cache.maybe_create_session(0, False, 3, lambda: dummy_create(3))
    session = cache.get(sid)
    assert session is not None
    cache.touch(session, 120)  # created more than 100 ms ago, so evictable; not stale at 150
    assert cache.maybe_create_session(150, False, 3, lambda: dummy_create(3)) == INVALID_SESSION_ID
    assert cache.maybe_create_session(150, False, 4, lambda: dummy_create(4)) != INVALID_SESSION_ID
    assert cache.get(sid) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["create", "touch", "remove", "shrink"]),
            st.booleans(),
            st.integers(min_value=0, max_value=20),
            st.integers(min_value=0, max_value=300),
        ),
        max_size=60,
    )
)
def test_cache_accounting_invariants(ops: list[tuple[str, bool, int, int]]) -> None:
    """Whatever happens, the cache never exceeds max_entries, ids are unique and positive, and
    total_partitions is the sum of the sizes the cache last accounted for."""
    cache = FetchSessionCache(4, 100, random.Random(9))
    now = 0
    for op, privileged, size, dt in ops:
        now += dt
        ids = cache.session_ids()
        if op == "create":
            cache.maybe_create_session(now, privileged, size, functools.partial(dummy_create, size))
        elif ids and op == "touch":
            session = cache.get(ids[size % len(ids)])
            assert session is not None
            cache.touch(session, now)
        elif ids and op == "remove":
            cache.remove(ids[size % len(ids)])
        elif ids and op == "shrink":
            session = cache.get(ids[size % len(ids)])
            assert session is not None
            if session.partition_map:
                del session.partition_map[next(iter(session.partition_map))]
            cache.touch(session, now)
        assert cache.size <= 4
        sessions = [cache.get(i) for i in cache.session_ids()]
        assert all(s is not None and s.id > 0 for s in sessions)
        assert cache.total_partitions == sum(s.cached_size for s in sessions if s is not None)
