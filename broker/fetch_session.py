"""Incremental fetch sessions on the broker (KIP-227): the ``FetchContext`` kinds and ``FetchManager``, which
turn a FETCH request's session metadata into what to read and what to answer. The sessions and their store
(Kafka's ``CachedPartition``, ``FetchSession``, ``FetchSessionCache``) are ``broker.fetch_session_cache``;
this module re-exports the session types, as the public face of fetch sessions.

A FETCH request carries ``(session_id, session_epoch)``:

* ``(0, -1)``: sessionless. The request lists every partition; the response lists every partition; nothing is
  cached. A non-zero id with epoch -1 additionally closes that session.
* ``(any, 0)``: full. Any session named by a non-zero id is closed, and the response creates a new session
  (its id is in the response, or 0 when the cache refused it).
* ``(id, n >= 1)``: incremental. ``n`` must be the session's next epoch (INVALID_FETCH_SESSION_EPOCH
  otherwise; FETCH_SESSION_ID_NOT_FOUND for an unknown id). The request lists only partitions that were
  added or whose fetch parameters changed and names removed ones in ``to_forget``; the response lists only
  partitions with records, a changed high watermark or log start offset, or an error. A session emptied by
  ``to_forget`` is closed and the request is served sessionless.

Everything here is synchronous and sans-I/O: the clock is injected and ``now`` is passed explicitly.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from broker.fetch_session_cache import (
    CachedPartition,
    FetchSession,
    FetchSessionCache,
    PartitionResponseData,
)
from protocol import messages as m
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.fetch_request import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchMetadata,
    FetchRequestPartitionData,
    next_epoch,
)

__all__ = [
    "CachedPartition",
    "FetchContext",
    "FetchManager",
    "FetchRequestPartitionData",
    "FetchResponseData",
    "FetchSession",
    "FullFetchContext",
    "IncrementalFetchContext",
    "PartitionResponseData",
    "SessionErrorContext",
    "SessionlessFetchContext",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FetchResponseData:
    """The session-level part of a FETCH response: top-level error, session id and the partitions to send,
    in the order to send them."""

    error_code: int
    session_id: int
    responses: dict[TopicPartition, PartitionResponseData]
    throttle_time_ms: int = 0

    def to_response(self) -> m.FetchResponse:
        """The FETCH response message: partitions grouped by topic, in the order to send them."""
        topics: dict[str, m.FetchResponseTopic] = {}
        for (topic, partition), pr in self.responses.items():
            entry = topics.get(topic)
            if entry is None:
                entry = topics[topic] = m.FetchResponseTopic(topic=topic)
            entry.partitions.append(
                m.FetchResponsePartition(
                    partition_index=partition,
                    error_code=pr.error_code,
                    high_watermark=pr.high_watermark,
                    last_stable_offset=pr.last_stable_offset,
                    log_start_offset=pr.log_start_offset,
                    records=pr.records,
                    aborted_transactions=None
                    if pr.aborted_transactions is None
                    else [
                        m.FetchResponseAbortedTransaction(producer_id=p, first_offset=f)
                        for p, f in pr.aborted_transactions
                    ],
                    diverging_epoch=None
                    if pr.diverging_epoch is None
                    else m.FetchResponseEpochEndOffset(
                        epoch=pr.diverging_epoch[0], end_offset=pr.diverging_epoch[1]
                    ),
                )
            )
        return m.FetchResponse(
            throttle_time_ms=self.throttle_time_ms,
            error_code=self.error_code,
            session_id=self.session_id,
            responses=list(topics.values()),
        )


PartitionFn = Callable[[TopicPartition, FetchRequestPartitionData], None]


class FetchContext(ABC):
    """What one FETCH request reads and how its response is shaped."""

    @abstractmethod
    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        """The fetch offset of ``tp`` in this request (or its session), None if it is not part of it."""

    @abstractmethod
    def foreach_partition(self, fn: PartitionFn) -> None:
        """Call ``fn`` for every partition to read, in the order to read them."""

    def partitions(self) -> list[tuple[TopicPartition, FetchRequestPartitionData]]:
        out: list[tuple[TopicPartition, FetchRequestPartitionData]] = []
        self.foreach_partition(lambda tp, data: out.append((tp, data)))
        return out

    @abstractmethod
    def update_and_generate_response_data(
        self, updates: Mapping[TopicPartition, PartitionResponseData]
    ) -> FetchResponseData:
        """Update the session (if any) with what was read and build the response."""

    def get_throttled_response(self, throttle_time_ms: int) -> FetchResponseData:
        """An empty response for a throttled request; the session is left as it was."""
        return FetchResponseData(Errors.NONE, INVALID_SESSION_ID, {}, throttle_time_ms)


class SessionErrorContext(FetchContext):
    """A request whose session metadata was wrong: nothing is read; the response is the error alone."""

    def __init__(self, error: Errors, req_metadata: FetchMetadata) -> None:
        self.error = error
        self.req_metadata = req_metadata

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        return None

    def foreach_partition(self, fn: PartitionFn) -> None:
        return None

    def update_and_generate_response_data(
        self, updates: Mapping[TopicPartition, PartitionResponseData]
    ) -> FetchResponseData:
        # Because of the session error we do not know which partitions the request meant.
        return FetchResponseData(self.error, INVALID_SESSION_ID, {})


class SessionlessFetchContext(FetchContext):
    """A request that uses no session: read what it lists, return all of it, cache nothing."""

    def __init__(self, fetch_data: Mapping[TopicPartition, FetchRequestPartitionData]) -> None:
        self.fetch_data = fetch_data

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        data = self.fetch_data.get(tp)
        return None if data is None else data.fetch_offset

    def foreach_partition(self, fn: PartitionFn) -> None:
        for tp, data in self.fetch_data.items():
            fn(tp, data)

    def update_and_generate_response_data(
        self, updates: Mapping[TopicPartition, PartitionResponseData]
    ) -> FetchResponseData:
        return FetchResponseData(Errors.NONE, INVALID_SESSION_ID, dict(updates))


class FullFetchContext(FetchContext):
    """A full request (epoch 0): read what it lists, return all of it, and try to cache a new session made of
    the partitions in the response."""

    def __init__(
        self,
        clock: Callable[[], int],
        cache: FetchSessionCache,
        req_metadata: FetchMetadata,
        fetch_data: Mapping[TopicPartition, FetchRequestPartitionData],
        is_from_follower: bool,
    ) -> None:
        self._clock = clock
        self._cache = cache
        self.req_metadata = req_metadata
        self.fetch_data = fetch_data
        self.is_from_follower = is_from_follower

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        data = self.fetch_data.get(tp)
        return None if data is None else data.fetch_offset

    def foreach_partition(self, fn: PartitionFn) -> None:
        for tp, data in self.fetch_data.items():
            fn(tp, data)

    def update_and_generate_response_data(
        self, updates: Mapping[TopicPartition, PartitionResponseData]
    ) -> FetchResponseData:
        def create_partitions() -> dict[TopicPartition, CachedPartition]:
            req = self.fetch_data
            return {tp: CachedPartition.from_request(tp, req[tp], resp) for tp, resp in updates.items()}

        session_id = self._cache.maybe_create_session(
            self._clock(), self.is_from_follower, len(updates), create_partitions
        )
        return FetchResponseData(Errors.NONE, session_id, dict(updates))


class IncrementalFetchContext(FetchContext):
    """An incremental request on an existing session: read every partition of the session (in the session's
    order) and return only the ones that changed."""

    def __init__(self, req_metadata: FetchMetadata, session: FetchSession) -> None:
        self.req_metadata = req_metadata
        self.session = session

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        return self.session.get_fetch_offset(tp)

    def foreach_partition(self, fn: PartitionFn) -> None:
        for tp, cached in list(self.session.partition_map.items()):
            fn(tp, cached.req_data)

    def _epoch_moved_on(self) -> bool:
        # Another request on the same session was accepted between creating this context and answering it
        # (e.g. a duplicate request).
        return self.session.epoch != next_epoch(self.req_metadata.epoch)

    def update_and_generate_response_data(
        self, updates: Mapping[TopicPartition, PartitionResponseData]
    ) -> FetchResponseData:
        session = self.session
        if self._epoch_moved_on():
            log.info(
                "Incremental fetch session %d expected epoch %d, but got %d. Possible duplicate request.",
                session.id,
                next_epoch(self.req_metadata.epoch),
                session.epoch,
            )
            return FetchResponseData(Errors.INVALID_FETCH_SESSION_EPOCH, session.id, {})
        selected: dict[TopicPartition, PartitionResponseData] = {}
        for tp, resp in updates.items():
            cached = session.partition_map.get(tp)
            if cached is None:
                raise KeyError(f"partition {tp} is not in fetch session {session.id}")
            if cached.maybe_update_response_data(resp, True):
                selected[tp] = resp
                if len(resp.records) > 0:
                    # Partitions that returned data go to the back of the session, so that the next
                    # response (limited by max_bytes) starts with the others.
                    del session.partition_map[tp]
                    session.partition_map[tp] = cached
        return FetchResponseData(Errors.NONE, session.id, selected)

    def get_throttled_response(self, throttle_time_ms: int) -> FetchResponseData:
        error = Errors.INVALID_FETCH_SESSION_EPOCH if self._epoch_moved_on() else Errors.NONE
        return FetchResponseData(error, self.session.id, {}, throttle_time_ms)


class FetchManager:
    """Turns a FETCH request's session metadata into a ``FetchContext`` (Kafka's ``FetchManager``)."""

    def __init__(self, cache: FetchSessionCache, clock: Callable[[], int]) -> None:
        self.cache = cache
        self._clock = clock

    def new_context(
        self,
        session_id: int,
        session_epoch: int,
        fetch_data: Mapping[TopicPartition, FetchRequestPartitionData],
        to_forget: Sequence[TopicPartition],
        is_follower: bool,
    ) -> FetchContext:
        req_metadata = FetchMetadata(session_id, session_epoch)
        if req_metadata.is_full:
            removed = ""
            # Any session named in a full request is closed.
            if session_id != INVALID_SESSION_ID and self.cache.remove(session_id) is not None:
                removed = f" Removed fetch session {session_id}."
            context: FetchContext
            if session_epoch == FINAL_EPOCH:
                # FINAL_EPOCH: do not try to create a new session.
                context = SessionlessFetchContext(fetch_data)
            else:
                context = FullFetchContext(self._clock, self.cache, req_metadata, fetch_data, is_follower)
            log.debug("Created a new full fetch context with %d partition(s).%s", len(fetch_data), removed)
            return context

        session = self.cache.get(session_id)
        if session is None:
            log.debug("Session error for %d: no such session id found.", session_id)
            return SessionErrorContext(Errors.FETCH_SESSION_ID_NOT_FOUND, req_metadata)
        if session.epoch != session_epoch:
            log.debug(
                "Session error for %d: expected epoch %d, but got %d instead.",
                session_id,
                session.epoch,
                session_epoch,
            )
            return SessionErrorContext(Errors.INVALID_FETCH_SESSION_EPOCH, req_metadata)
        added, updated, removed_tps = session.update(fetch_data, to_forget)
        if session.is_empty():
            log.debug(
                "Closing fetch session %d (epoch %d): no partitions left after removing %d; "
                "serving the request sessionless.",
                session.id,
                session.epoch,
                len(removed_tps),
            )
            self.cache.remove_session(session)
            return SessionlessFetchContext(fetch_data)
        self.cache.touch(session, self._clock())
        session.epoch = next_epoch(session.epoch)
        log.debug(
            "New incremental fetch context for session %d, epoch %d: added %d, updated %d, removed %d",
            session.id,
            session.epoch,
            len(added),
            len(updated),
            len(removed_tps),
        )
        return IncrementalFetchContext(req_metadata, session)
