"""The broker's store of incremental fetch sessions (Kafka's ``FetchSessionCache``, one shard of it).

Eviction follows Kafka's ``tryEvict``. When the cache is full, a new session may take the place of:

1. the least recently used session, if it has not been used for more than ``eviction_ms`` (stale); else
2. for a privileged (follower) newcomer: the least valuable entry of ``evictable_by_privileged`` (every
   non-privileged session, plus privileged ones created more than ``eviction_ms`` ago);
   for a consumer newcomer: the least valuable entry of ``evictable_by_all`` (sessions created more than
   ``eviction_ms`` ago) - and only if the newcomer is worth more.

"Value" is the key ``(privileged, size, id)`` compared as a tuple (non-privileged < privileged, then smaller
< bigger); the newcomer's key is ``(privileged, size, 0)``, so a consumer session only evicts a strictly
smaller non-privileged one. Membership of the two evictable sets is decided when a session is touched.

The evictable sets are kept as plain dicts and searched with ``min`` when the cache is full; with Kafka's
default of 1000 slots that costs microseconds and only happens on a full cache.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from broker.fetch_session import CachedPartition, FetchSession
from protocol.common import TopicPartition
from protocol.fetch_request import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1

EvictableKey = tuple[bool, int, int]


class FetchSessionCache:
    def __init__(self, max_entries: int, eviction_ms: int, rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.Random()
        self._num_partitions = 0
        self.num_evictions = 0
        self._sessions: dict[int, FetchSession] = {}
        # session id -> its key in each ordering, as of the last touch.
        self._last_used: dict[int, tuple[int, int]] = {}
        self._evictable_by_all: dict[int, EvictableKey] = {}
        self._evictable_by_privileged: dict[int, EvictableKey] = {}

    # -- reading ------------------------------------------------------------------------------------------
    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def size(self) -> int:
        """The number of cached sessions."""
        return len(self._sessions)

    @property
    def total_partitions(self) -> int:
        """The number of partitions cached over all sessions (as of each session's last touch)."""
        return self._num_partitions

    def session_ids(self) -> list[int]:
        return list(self._sessions)

    # -- creating -----------------------------------------------------------------------------------------
    def new_session_id(self) -> int:
        """A random positive int32, not 0 and not in use."""
        while True:
            session_id = self._rng.randrange(1, _INT32_MAX)
            if session_id != INVALID_SESSION_ID and session_id not in self._sessions:
                return session_id

    def maybe_create_session(
        self,
        now: int,
        privileged: bool,
        size: int,
        create_partitions: Callable[[], dict[TopicPartition, CachedPartition]],
    ) -> int:
        """Cache a new session if there is room or something can be evicted for it. Returns the new session's
        id, or INVALID_SESSION_ID (0) when it was not cached. ``create_partitions`` is only called when the
        session is created."""
        if len(self._sessions) < self.max_entries or self._try_evict(privileged, (privileged, size, 0), now):
            session = FetchSession(
                id=self.new_session_id(),
                privileged=privileged,
                partition_map=create_partitions(),
                creation_ms=now,
                last_used_ms=now,
                epoch=next_epoch(INITIAL_EPOCH),
            )
            log.debug("Created fetch session %s", session)
            self._sessions[session.id] = session
            self.touch(session, now)
            return session.id
        log.debug("No fetch session created for privileged=%s, size=%d.", privileged, size)
        return INVALID_SESSION_ID

    def _try_evict(self, privileged: bool, key: EvictableKey, now: int) -> bool:
        if not self._last_used:
            return False
        lru_id = min(self._last_used, key=self._last_used.__getitem__)
        if now - self._last_used[lru_id][0] > self.eviction_ms:
            log.debug("Evicting stale fetch session %d.", lru_id)
            self.remove(lru_id)
            self.num_evictions += 1
            return True
        candidates = self._evictable_by_privileged if privileged else self._evictable_by_all
        if not candidates:
            return False
        victim = min(candidates, key=candidates.__getitem__)
        if key < candidates[victim]:
            log.debug("Cannot evict fetch session %s with %s.", candidates[victim], key)
            return False
        log.debug("Evicting fetch session %s with %s.", candidates[victim], key)
        self.remove(victim)
        self.num_evictions += 1
        return True

    # -- updating -----------------------------------------------------------------------------------------
    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        return None if session is None else self.remove_session(session)

    def remove_session(self, session: FetchSession) -> FetchSession | None:
        self._last_used.pop(session.id, None)
        self._evictable_by_all.pop(session.id, None)
        self._evictable_by_privileged.pop(session.id, None)
        removed = self._sessions.pop(session.id, None)
        if removed is not None:
            self._num_partitions -= session.cached_size
        return removed

    def touch(self, session: FetchSession, now: int) -> None:
        """Mark ``session`` used at ``now`` and re-account its size and evictability."""
        session.last_used_ms = now
        self._last_used[session.id] = session.last_used_key
        if session.cached_size != -1:
            self._evictable_by_privileged.pop(session.id, None)
            self._evictable_by_all.pop(session.id, None)
            self._num_partitions -= session.cached_size
        session.cached_size = session.size
        key = session.evictable_key
        old_enough = now - session.creation_ms > self.eviction_ms
        if not session.privileged or old_enough:
            self._evictable_by_privileged[session.id] = key
        if old_enough:
            self._evictable_by_all[session.id] = key
        self._num_partitions += session.cached_size
