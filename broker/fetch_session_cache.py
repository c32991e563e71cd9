"""The broker's store of incremental fetch sessions (KIP-227): the sessions themselves (Kafka's
``CachedPartition`` and ``FetchSession``) and the cache that holds them (Kafka's ``FetchSessionCache``, one
shard of it). The ``FetchContext`` kinds and ``FetchManager``, which use the cache, are in
``broker.fetch_session``.

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.fetch_request import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchMetadata,
    FetchRequestPartitionData,
    next_epoch,
)

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1

EvictableKey = tuple[bool, int, int]


# Kafka's FetchResponse.INVALID_HIGH_WATERMARK etc.: what a partition with an error reports.
INVALID_HIGH_WATERMARK = -1
INVALID_LAST_STABLE_OFFSET = -1
INVALID_LOG_START_OFFSET = -1


@dataclass(frozen=True, slots=True)
class PartitionResponseData:
    """One partition of a FETCH response. Only ``len(records)`` matters to the session logic."""

    error_code: int = Errors.NONE
    high_watermark: int = INVALID_HIGH_WATERMARK
    last_stable_offset: int = INVALID_LAST_STABLE_OFFSET
    log_start_offset: int = INVALID_LOG_START_OFFSET
    records: bytes = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) when the fetcher's log diverges
    # read_committed: (producer_id, first_offset) of the aborted transactions in ``records``; else None.
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass(slots=True)
class CachedPartition:
    """A partition cached in a fetch session: the last request parameters the fetcher sent for it and the last
    high watermark / log start offset the broker told it, so that unchanged partitions can be left out of both
    the next request and the next response.

    ``fetcher_log_start_offset`` is the fetching replica's log start offset (from the request);
    ``local_log_start_offset`` is this broker's (from the last response).
    """

    topic: str
    partition: int
    max_bytes: int = -1
    fetch_offset: int = -1
    high_watermark: int = -1
    leader_epoch: int = -1
    fetcher_log_start_offset: int = -1
    local_log_start_offset: int = -1
    last_fetched_epoch: int = -1

    @classmethod
    def from_request(
        cls,
        tp: TopicPartition,
        req: FetchRequestPartitionData,
        resp: PartitionResponseData | None = None,
    ) -> CachedPartition:
        """A partition of a new session. An error answer leaves its high watermark unknown (-1), as
        ``maybe_update_response_data`` does: the follower took no HW from it (Kafka answers an error with HW
        -1), so the first round after the error clears must send the HW again."""
        failed = resp is not None and resp.error_code != Errors.NONE
        return cls(
            topic=tp[0],
            partition=tp[1],
            max_bytes=req.max_bytes,
            fetch_offset=req.fetch_offset,
            high_watermark=-1 if resp is None or failed else resp.high_watermark,
            leader_epoch=req.current_leader_epoch,
            fetcher_log_start_offset=req.log_start_offset,
            local_log_start_offset=-1 if resp is None else resp.log_start_offset,
            last_fetched_epoch=req.last_fetched_epoch,
        )

    @property
    def req_data(self) -> FetchRequestPartitionData:
        return FetchRequestPartitionData(
            fetch_offset=self.fetch_offset,
            log_start_offset=self.fetcher_log_start_offset,
            max_bytes=self.max_bytes,
            current_leader_epoch=self.leader_epoch,
            last_fetched_epoch=self.last_fetched_epoch,
        )

    def update_request_params(self, req: FetchRequestPartitionData) -> None:
        self.max_bytes = req.max_bytes
        self.fetch_offset = req.fetch_offset
        self.fetcher_log_start_offset = req.log_start_offset
        self.leader_epoch = req.current_leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch

    def maybe_update_response_data(self, resp: PartitionResponseData, update_response_data: bool) -> bool:
        """Whether this partition must be in an incremental response (Kafka's ``maybeUpdateResponseData``):
        it has records, its high watermark or log start offset changed, or it has an error. With
        ``update_response_data`` the cached high watermark / log start offset take the response's values; an
        error resets the cached high watermark to -1 so the partition is re-sent once the error clears."""
        must_respond = False
        if len(resp.records) > 0:
            must_respond = True
        if self.high_watermark != resp.high_watermark:
            must_respond = True
            if update_response_data:
                self.high_watermark = resp.high_watermark
        if self.local_log_start_offset != resp.log_start_offset:
            must_respond = True
            if update_response_data:
                self.local_log_start_offset = resp.log_start_offset
        if resp.error_code != Errors.NONE:
            if update_response_data:
                self.high_watermark = -1
            must_respond = True
        if resp.diverging_epoch is not None:
            must_respond = True  # Kafka's FetchResponse.isDivergingEpoch
        return must_respond


@dataclass(slots=True, eq=False)
class FetchSession:
    """One incremental fetch session.

    ``epoch`` is the epoch the *next* request must carry. ``partition_map`` keeps insertion order (the order
    partitions are read in for an incremental request); partitions that returned records are moved to its end.
    ``cached_size`` is the size the cache last accounted for (-1 while not in a cache); only the cache's
    ``touch`` updates it and ``last_used_ms``.
    """

    id: int
    privileged: bool
    partition_map: dict[TopicPartition, CachedPartition]
    creation_ms: int
    last_used_ms: int
    epoch: int
    cached_size: int = field(default=-1)

    @property
    def size(self) -> int:
        return len(self.partition_map)

    def is_empty(self) -> bool:
        return not self.partition_map

    @property
    def last_used_key(self) -> tuple[int, int]:
        return (self.last_used_ms, self.id)

    @property
    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    @property
    def metadata(self) -> FetchMetadata:
        return FetchMetadata(self.id, self.epoch)

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        cached = self.partition_map.get(tp)
        return None if cached is None else cached.fetch_offset

    def update(
        self,
        fetch_data: Mapping[TopicPartition, FetchRequestPartitionData],
        to_forget: Iterable[TopicPartition],
    ) -> tuple[list[TopicPartition], list[TopicPartition], list[TopicPartition]]:
        """Apply an incremental request: new partitions are appended, known ones take the new parameters (and
        keep their place), forgotten ones are dropped. Returns (added, updated, removed)."""
        added: list[TopicPartition] = []
        updated: list[TopicPartition] = []
        removed: list[TopicPartition] = []
        for tp, req in fetch_data.items():
            cached = self.partition_map.get(tp)
            if cached is None:
                self.partition_map[tp] = CachedPartition.from_request(tp, req)
                added.append(tp)
            else:
                cached.update_request_params(req)
                updated.append(tp)
        for tp in to_forget:
            if self.partition_map.pop(tp, None) is not None:
                removed.append(tp)
        return added, updated, removed

    def __str__(self) -> str:
        return (
            f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={self.size}, "
            f"creation_ms={self.creation_ms}, last_used_ms={self.last_used_ms}, epoch={self.epoch})"
        )


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
