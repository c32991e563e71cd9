"""Kafka's ``TransactionMarkerChannelManager``: the markers of one ended transaction sent to the leader of
each of its partitions (WRITE_TXN_MARKERS), retried until every partition has its marker.

The broker gives the channel two things (the arrow goes ``broker`` -> ``coordinator``): where a partition's
leader is (``leader_of``: a broker id, None while it has none, ``UNKNOWN`` when the topic is gone) and how
to send one request to one broker (``send``: the errors by partition, or an exception if the broker did not
answer). A partition answered NONE is done; one whose topic is gone is dropped (as Kafka drops the markers
of a deleted topic); INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED mean this coordinator is
stale, and the sending stops (Kafka's ``abortSending``): a newer coordinator finishes the transaction. Any
other error, or no answer, is retried after a backoff, with the leader looked up again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from protocol.common import TopicPartition
from protocol.errors import Errors

log = logging.getLogger(__name__)

UNKNOWN = -2  # leader_of's answer for a partition whose topic no longer exists


@dataclass(frozen=True, slots=True)
class TxnMarkerEntry:
    """One marker request entry (Kafka's ``WritableTxnMarker``)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


LeaderOf = Callable[[TopicPartition], int | None]
SendMarkers = Callable[[int, TxnMarkerEntry], Awaitable[dict[TopicPartition, Errors]]]


class TransactionMarkerChannelManager:
    def __init__(
        self,
        broker_id: int,
        leader_of: LeaderOf,
        send: SendMarkers,
        *,
        retry_backoff_s: float = 0.1,
        request_timeout_s: float = 10.0,
    ) -> None:
        self.broker_id = broker_id
        self.leader_of = leader_of
        self.send = send
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_s = request_timeout_s
        self.markers_sent = 0
        self.retries = 0

    async def write_markers(
        self,
        transactional_id: str,
        entry: TxnMarkerEntry,
        still_current: Callable[[], bool],
    ) -> bool:
        """Sends the markers until each partition has one; False if the sending stopped (this broker no
        longer coordinates the id with this coordinator epoch, or a leader fenced it)."""
        pending = set(entry.partitions)
        while pending:
            if not still_current():
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                leader = self.leader_of(tp)
                if leader == UNKNOWN:
                    log.info("broker %d: %s: %s-%d is gone, no marker", self.broker_id, transactional_id, *tp)
                    pending.discard(tp)
                elif leader is not None and leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            fenced = False

            async def one(leader: int, tps: list[TopicPartition]) -> None:
                nonlocal fenced
                part = TxnMarkerEntry(
                    entry.producer_id, entry.producer_epoch, entry.commit, entry.coordinator_epoch, tuple(tps)
                )
                try:
                    with trio.fail_after(self.request_timeout_s):
                        errors = await self.send(leader, part)
                except (
                    OSError,
                    trio.TooSlowError,
                    trio.BrokenResourceError,
                    trio.ClosedResourceError,
                ) as exc:
                    log.debug("broker %d: markers to broker %d: %r", self.broker_id, leader, exc)
                    return
                except Exception as exc:  # a connection error of the client (ConnectionClosed ...)
                    log.debug("broker %d: markers to broker %d: %r", self.broker_id, leader, exc)
                    return
                for tp in tps:
                    error = errors.get(tp, Errors.UNKNOWN_SERVER_ERROR)
                    if error == Errors.NONE:
                        pending.discard(tp)
                        self.markers_sent += 1
                    elif error in (Errors.INVALID_PRODUCER_EPOCH, Errors.TRANSACTION_COORDINATOR_FENCED):
                        log.warning(
                            "broker %d: %s: the leader of %s-%d refused the marker (%s): stopping",
                            self.broker_id,
                            transactional_id,
                            tp[0],
                            tp[1],
                            error.name,
                        )
                        fenced = True
                    else:
                        log.debug("broker %d: marker for %s-%d: %s", self.broker_id, tp[0], tp[1], error.name)

            async with trio.open_nursery() as nursery:
                for leader, tps in by_leader.items():
                    nursery.start_soon(one, leader, tps)
            if fenced:
                return False
            if pending:
                self.retries += 1
                await trio.sleep(self.retry_backoff_s)
        return still_current()
