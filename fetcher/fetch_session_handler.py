"""The fetching side of an incremental fetch session (Kafka's ``FetchSessionHandler``, KIP-227).

One handler per destination broker. Each round the fetcher lists every partition it wants in a ``Builder``;
``build()`` turns that into either a full request (no session yet: every partition) or an incremental one
(only partitions that were added or whose fetch parameters changed, plus ``to_forget`` for the removed ones).
``handle_response`` checks the response against the session and moves the session metadata on; an error or
a malformed response makes the next request a full one.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from protocol.common import TopicPartition, error_name
from protocol.errors import Errors
from protocol.fetch_request import (
    INITIAL,
    INVALID_SESSION_ID,
    FetchMetadata,
    FetchRequestPartitionData,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """What to put in the next FETCH request.

    ``to_send``: the partitions to list in the request (all of them for a full request).
    ``to_forget``: partitions to name in ``forgotten_topics_data`` (empty for a full request).
    ``session_partitions``: every partition in the session after this request, in session order.
    """

    metadata: FetchMetadata
    to_send: dict[TopicPartition, FetchRequestPartitionData]
    to_forget: list[TopicPartition]
    session_partitions: dict[TopicPartition, FetchRequestPartitionData]

    @property
    def session_id(self) -> int:
        return self.metadata.session_id

    @property
    def epoch(self) -> int:
        return self.metadata.epoch


def _tps(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def find_missing(
    to_find: Iterable[TopicPartition], to_search: Collection[TopicPartition]
) -> list[TopicPartition]:
    """The items of ``to_find`` that are not in ``to_search``, in ``to_find``'s order."""
    return [tp for tp in to_find if tp not in to_search]


class FetchSessionHandler:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        # The metadata for the next fetch request.
        self.next_metadata: FetchMetadata = INITIAL
        # Every partition in the session, in session order, with the data last sent for it.
        self.session_partitions: dict[TopicPartition, FetchRequestPartitionData] = {}

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def new_builder(self) -> Builder:
        return Builder(self)

    # -- responses ----------------------------------------------------------------------------------------
    def verify_full_fetch_response_partitions(
        self, topic_partitions: Collection[TopicPartition]
    ) -> str | None:
        """None if a full response has exactly the session's partitions; else what is wrong with it."""
        extra = find_missing(topic_partitions, self.session_partitions)
        omitted = find_missing(self.session_partitions, topic_partitions)
        if not extra and not omitted:
            return None
        problem = ""
        if omitted:
            problem += f"omittedPartitions=({_tps(omitted)}), "
        if extra:
            problem += f"extraPartitions=({_tps(extra)}), "
        return problem + f"response=({_tps(topic_partitions)})"

    def verify_incremental_fetch_response_partitions(
        self, topic_partitions: Collection[TopicPartition]
    ) -> str | None:
        """None if every partition of an incremental response is in the session."""
        extra = find_missing(topic_partitions, self.session_partitions)
        if not extra:
            return None
        return f"extraPartitions=({_tps(extra)}), response=({_tps(topic_partitions)})"

    def handle_response(
        self,
        session_id: int,
        error_code: int,
        response_partitions: Collection[TopicPartition],
        throttle_time_ms: int = 0,
    ) -> bool:
        """Take in a FETCH response's top-level error, session id and partitions. Returns True if the response
        is well formed and its partition data can be processed; False if not (the next request will then be a
        full one)."""
        if error_code != Errors.NONE:
            log.info(
                "Node %d was unable to process the fetch request with %s: %s.",
                self.node_id,
                self.next_metadata,
                error_name(error_code),
            )
            if error_code == Errors.FETCH_SESSION_ID_NOT_FOUND:
                self.next_metadata = INITIAL
            else:
                self.next_metadata = self.next_metadata.next_close_existing_attempt_new()
            return False

        if self.next_metadata.is_full:
            if not response_partitions and throttle_time_ms > 0:
                # An empty full response with a throttle time means "throttled" (KIP-219): not an error,
                # but there is nothing to process.
                log.debug("Node %d throttled this client for %d ms.", self.node_id, throttle_time_ms)
                self.next_metadata = INITIAL
                return False
            problem = self.verify_full_fetch_response_partitions(response_partitions)
            if problem is not None:
                log.info("Node %d sent an invalid full fetch response with %s", self.node_id, problem)
                self.next_metadata = INITIAL
                return False
            if session_id == INVALID_SESSION_ID:
                log.debug("Node %d sent a full fetch response without a session.", self.node_id)
                self.next_metadata = INITIAL
                return True
            log.debug("Node %d sent a full fetch response that created session %d.", self.node_id, session_id)
            self.next_metadata = FetchMetadata.new_incremental(session_id)
            return True

        problem = self.verify_incremental_fetch_response_partitions(response_partitions)
        if problem is not None:
            log.info("Node %d sent an invalid incremental fetch response with %s", self.node_id, problem)
            self.next_metadata = self.next_metadata.next_close_existing_attempt_new()
            return False
        if session_id == INVALID_SESSION_ID:
            # The broker closed the session.
            log.debug("Node %d closed fetch session %d.", self.node_id, self.next_metadata.session_id)
            self.next_metadata = INITIAL
            return True
        self.next_metadata = self.next_metadata.next_incremental()
        return True

    def handle_error(self, error: BaseException | None = None) -> None:
        """The request could not be sent or its response was lost: close the session on the next request and
        ask for a new one. Without ``error`` the fetcher gave the request up itself (partitions were added
        while it waited on the leader): not an error, so it is logged at DEBUG."""
        if error is None:
            log.debug(
                "Fetch request %s to node %d given up; a new session follows",
                self.next_metadata,
                self.node_id,
            )
        else:
            log.info("Error sending fetch request %s to node %d: %r", self.next_metadata, self.node_id, error)
        self.next_metadata = self.next_metadata.next_close_existing_attempt_new()


class Builder:
    """Collects the partitions wanted in the next request. Use once: ``build()`` consumes it."""

    def __init__(self, handler: FetchSessionHandler) -> None:
        self._handler = handler
        # Insertion order matters: a full response fills partitions in request order up to max_bytes, and
        # the incremental diff below relies on it.
        self._next: dict[TopicPartition, FetchRequestPartitionData] | None = {}

    def add(self, tp: TopicPartition, data: FetchRequestPartitionData) -> None:
        if self._next is None:
            raise RuntimeError("add() after build()")
        self._next[tp] = data

    def build(self) -> FetchRequestData:
        handler = self._handler
        next_parts = self._next
        if next_parts is None:
            raise RuntimeError("build() may only be called once per Builder")
        self._next = None
        metadata = handler.next_metadata

        if metadata.is_full:
            handler.session_partitions = next_parts
            log.debug(
                "Built full fetch %s for node %d with %d partition(s).",
                metadata,
                handler.node_id,
                len(next_parts),
            )
            to_send = dict(next_parts)
            return FetchRequestData(metadata, to_send, [], dict(to_send))

        session = handler.session_partitions
        removed: list[TopicPartition] = []
        altered: list[TopicPartition] = []
        added: list[TopicPartition] = []
        for tp in list(session):
            prev = session[tp]
            nxt = next_parts.pop(tp, None)
            if nxt is None:
                # No longer wanted: drop it from the session and tell the broker.
                del session[tp]
                removed.append(tp)
            elif prev != nxt:
                # Changed: send it, after the new partitions.
                next_parts[tp] = nxt
                session[tp] = nxt
                altered.append(tp)
        # What is left at the front of next_parts is new to the session; the altered ones were re-added at the
        # end, so the first known partition marks the end of the new ones.
        for tp, data in next_parts.items():
            if tp in session:
                break
            session[tp] = data
            added.append(tp)
        log.debug(
            "Built incremental fetch %s for node %d. Added %d, altered %d, removed %d out of %d",
            metadata,
            handler.node_id,
            len(added),
            len(altered),
            len(removed),
            len(session),
        )
        return FetchRequestData(metadata, next_parts, removed, dict(session))
