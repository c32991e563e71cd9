"""A replica fetcher task (Kafka's ``ReplicaFetcherThread`` / ``AbstractFetcherThread``): one per leader
broker and fetcher index, talking to that leader through a ``LeaderEndPoint``, and the loop
``do_work = maybe_truncate + maybe_fetch``.

The decisions are the pure functions of ``fetcher.truncation``, ``fetcher.fetch_state`` and
``fetcher.fetch_session_handler``; the requests and answers are the leader endpoint's
(``fetcher.leader_endpoint``); this module sequences them and applies the results to the follower's
partitions. Everything runs on the broker's trio thread:
between two awaits nothing else touches the partition states, and every response is checked against the
current state (leader epoch, fetch offset) before it is applied, because a LEADER_AND_ISR may have moved the
partition while the request was in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import trio

from fetcher.fetch_session_handler import FetchRequestData, FetchSessionHandler
from fetcher.fetch_state import FetcherPartitions, PartitionFetchState, ReplicaState
from fetcher.fetcher_stats import FetcherStats
from fetcher.interface import FollowerPartition, FollowerReplicaManager
from fetcher.leader_endpoint import FetchFailed, LeaderEndPoint
from fetcher.truncation import (
    EpochData,
    EpochEndOffset,
    OffsetTruncationState,
    fetch_truncating_partitions,
    maybe_truncate_to_epoch_end_offsets,
    truncate_to_high_watermark,
    truncation_reason,
    update_fetch_offset_and_maybe_mark_truncation_complete,
)
from protocol.api_keys import UNDEFINED_EPOCH
from protocol.common import TopicPartition, error_name, wall_clock_ms
from protocol.errors import CorruptRecordError, Errors, KafkaError, KafkaStorageError
from protocol.fetch_request import FetchRequestPartitionData
from protocol.messages import (
    FetchRequest,
    FetchRequestForgottenTopic,
    FetchRequestPartition,
    FetchRequestTopic,
    FetchResponse,
    FetchResponsePartition,
)
from protocol.replication import FetchStateView, InitialFetchState, TruncationMode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """Kafka's ``replica.fetch.*`` settings, and ``replication.truncation.mode``."""

    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1048576
    response_max_bytes: int = 10485760
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    truncation_mode: TruncationMode = TruncationMode.LEADER_EPOCH
    # unclean.leader.election.enable: in the older truncation modes a follower ahead of its leader may be
    # truncated only if it is true (else the broker exits, as Kafka <= 2.0 did).
    unclean_leader_election_enable: bool = False


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """What ``build_fetch`` returns (Kafka's ``ReplicaFetch``): the fetch session's view of the request (to
    check the answer against) and the FETCH request to send."""

    data: FetchRequestData
    request: FetchRequest


# The first wait before asking again a leader that does not know the follower's leader epoch yet.
EPOCH_RETRY_FIRST_MS = 10


class FetchAbandoned(Exception):
    """The fetch in flight was given up because partitions were added while it was parked on the leader."""


class ReplicaFetcher:
    def __init__(
        self,
        name: str,
        fetcher_id: int,
        leader: LeaderEndPoint,
        replica_manager: FollowerReplicaManager,
        settings: FetcherSettings,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        stats: FetcherStats | None = None,
    ) -> None:
        self.name = name
        self.fetcher_id = fetcher_id
        self.leader = leader
        self.rm = replica_manager
        self.settings = settings
        self.clock_ms = clock_ms
        self.partitions = FetcherPartitions()
        self.session = FetchSessionHandler(leader.broker_endpoint.broker_id)
        self._changed = trio.Event()
        # The FETCH in flight, while it waits for the leader's answer (a long poll of up to
        # ``replica.fetch.wait.max.ms``); cancelled when partitions are added (``add_partitions``).
        self._in_flight: trio.CancelScope | None = None
        self.abandoned_fetches = 0
        # The next wait of a partition whose leader answered UNKNOWN_LEADER_EPOCH (it is behind this
        # follower's LEADER_AND_ISR), doubling from EPOCH_RETRY_FIRST_MS.
        self._epoch_retry_ms: dict[TopicPartition, int] = {}
        self.fetch_requests = 0
        self.stats = stats if stats is not None else FetcherStats()

    @property
    def leader_id(self) -> int:
        return self.leader.broker_endpoint.broker_id

    # ------------------------------------------------------------------ partitions (called synchronously)

    def add_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]) -> None:
        """New partitions (or new leader epochs) to fetch. A FETCH parked on the leader does not carry
        them, and the leader answers a connection's requests in order, so waiting for it would delay
        their first truncation and fetch by up to ``replica.fetch.wait.max.ms`` (a leadership that just
        moved here, with nothing written to the partitions in flight, is the usual case): the fetch is
        given up, and the connection with it, and the next round starts at once with a new fetch session
        (Kafka's fetcher likewise never waits for a fetch in flight to change its partitions)."""
        self.partitions.add_partitions(initial)
        for tp in initial:
            self._epoch_retry_ms.pop(tp, None)
        self._changed.set()
        if self._in_flight is not None:
            self._in_flight.cancel()

    def remove_partitions(self, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        removed = self.partitions.remove_partitions(tps)
        self.partitions.failed_partitions.difference_update(tps)
        if removed:
            self._changed.set()
        return removed

    @property
    def partition_count(self) -> int:
        return self.partitions.partition_count

    def owns(self, tp: TopicPartition) -> bool:
        return self.partitions.partition_states.contains(tp) or tp in self.partitions.failed_partitions

    def describe(self, tp: TopicPartition) -> FetchStateView | None:
        partition = self.rm.follower_partition(tp)
        failed_offset = partition.log_end_offset if partition is not None else -1
        return self.partitions.describe(tp, self.clock_ms(), self.leader_id, failed_offset)

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        """Runs until cancelled by the fetcher manager."""
        while True:
            try:
                async with self.leader.connect():
                    log.info("%s: connected to leader %d", self.name, self.leader_id)
                    while True:
                        await self.do_work()
            except FetchAbandoned:
                log.debug("%s: fetch abandoned for new partitions; reconnecting", self.name)
            except FetchFailed as exc:
                log.info(
                    "%s: error talking to leader %s: %s; backing off %d ms",
                    self.name,
                    self.leader,
                    exc or type(exc).__name__,
                    self.settings.backoff_ms,
                )
                await self._back_off_all(exc, Errors.NETWORK_EXCEPTION)
            except Exception as exc:
                # A response this fetcher cannot make sense of (Kafka's processFetchRequest catch-all) must
                # not take the broker down: drop the connection, back off every partition and start again.
                log.exception(
                    "%s: unexpected error with leader %d; backing off %d ms",
                    self.name,
                    self.leader_id,
                    self.settings.backoff_ms,
                )
                await self._back_off_all(exc, Errors.UNKNOWN_SERVER_ERROR)

    async def _back_off_all(self, exc: Exception, error: Errors) -> None:
        self.session.handle_error(exc)
        states = self.partitions.partition_states.partition_set()
        for tp in states:
            self.rm.on_fetch_error(tp, int(error), str(exc) or type(exc).__name__)
        self.partitions.delay_partitions(states, self.settings.backoff_ms, self.clock_ms())
        await self._wait_for_change(self.settings.backoff_ms)

    async def _wait_for_change(self, timeout_ms: int) -> None:
        self._changed = trio.Event()
        with trio.move_on_after(timeout_ms / 1000):
            await self._changed.wait()

    async def do_work(self) -> None:
        self._drop_unfollowed()
        await self.maybe_truncate()
        await self.maybe_fetch()

    def _drop_unfollowed(self) -> None:
        gone = [
            tp
            for tp in self.partitions.partition_states.partition_set()
            if self.rm.follower_partition(tp) is None
        ]
        if gone:
            self.partitions.remove_partitions(gone)

    def _partition(self, tp: TopicPartition) -> FollowerPartition | None:
        return self.rm.follower_partition(tp)

    def _latest_epoch(self, tp: TopicPartition) -> int | None:
        p = self._partition(tp)
        return None if p is None else p.latest_epoch()

    # ------------------------------------------------------------------ truncation

    async def maybe_truncate(self) -> None:
        states = self.partitions.partition_states
        mode = self.settings.truncation_mode
        with_epochs, without_epochs = fetch_truncating_partitions(
            states, self._latest_epoch, self.clock_ms(), mode=mode
        )
        if with_epochs:
            await self._truncate_to_epoch_end_offsets(with_epochs)
        if without_epochs:
            truncations = truncate_to_high_watermark(states, without_epochs)
            if mode is TruncationMode.HIGH_WATERMARK:
                # The replica manager truncated the log to its high watermark when the partition became a
                # follower (Kafka 0.10's makeFollowers); the fetcher just starts where the log ends.
                done = {
                    tp: replace(t, offset=min(t.offset, self._log_end_offset(tp)))
                    for tp, t in truncations.items()
                    if self._partition(tp) is not None
                }
            else:
                done = self._apply_truncations(truncations, "high_watermark")
            update_fetch_offset_and_maybe_mark_truncation_complete(states, done, self._latest_epoch)

    async def _truncate_to_epoch_end_offsets(self, requested: dict[TopicPartition, EpochData]) -> None:
        end_offsets = await self.leader.fetch_epoch_end_offsets(requested)
        states = self.partitions.partition_states
        result = maybe_truncate_to_epoch_end_offsets(
            states,
            end_offsets,
            requested,
            log_end_offset=self._log_end_offset,
            follower_end_offset_for=self._follower_end_offset_for,
            mode=self.settings.truncation_mode,
        )
        reason = truncation_reason(self.settings.truncation_mode)
        done = self._apply_truncations(result.fetch_offsets, reason, end_offsets)
        update_fetch_offset_and_maybe_mark_truncation_complete(states, done, self._latest_epoch)
        now = self.clock_ms()
        for tp in done:
            self._epoch_retry_ms.pop(tp, None)
        behind: list[TopicPartition] = []
        for tp in result.partitions_with_error:
            self.rm.on_fetch_error(tp, end_offsets[tp].error_code, "OFFSET_FOR_LEADER_EPOCH error")
            if end_offsets[tp].error_code == Errors.UNKNOWN_LEADER_EPOCH:
                behind.append(tp)
        # UNKNOWN_LEADER_EPOCH: the new leader has not applied the LEADER_AND_ISR that made it leader in this
        # epoch yet (it writes its epoch checkpoint first; the followers' request is quicker): a retry soon
        # finds it, so the wait starts short and doubles up to replica.fetch.backoff.ms. Other errors wait
        # the whole backoff, as Kafka's fetcher does.
        for tp in behind:
            wait = self._epoch_retry_ms.get(tp, EPOCH_RETRY_FIRST_MS)
            self._epoch_retry_ms[tp] = min(wait * 2, self.settings.backoff_ms)
            self.partitions.delay_partitions([tp], min(wait, self.settings.backoff_ms), now)
        others = [tp for tp in result.partitions_with_error if tp not in behind]
        self.partitions.delay_partitions(others, self.settings.backoff_ms, now)
        for tp in result.partitions_to_fail:
            self._fail(tp, Errors.FENCED_LEADER_EPOCH, "fenced leader epoch in OFFSET_FOR_LEADER_EPOCH")

    def _log_end_offset(self, tp: TopicPartition) -> int:
        p = self._partition(tp)
        return -1 if p is None else p.log_end_offset

    def _follower_end_offset_for(self, tp: TopicPartition, epoch: int) -> tuple[int, int]:
        p = self._partition(tp)
        return (-1, -1) if p is None else p.end_offset_for_epoch(epoch)

    def _apply_truncations(
        self,
        truncations: Mapping[TopicPartition, OffsetTruncationState],
        reason: str,
        end_offsets: Mapping[TopicPartition, EpochEndOffset] | None = None,
    ) -> dict[TopicPartition, OffsetTruncationState]:
        done: dict[TopicPartition, OffsetTruncationState] = {}
        for tp, truncation in truncations.items():
            p = self._partition(tp)
            if p is None:
                continue
            detail = reason
            if end_offsets is not None and tp in end_offsets:
                eo = end_offsets[tp]
                if eo.leader_epoch == UNDEFINED_EPOCH:
                    detail = f"{reason}: leader answered end offset {eo.end_offset} (no epoch)"
                else:
                    detail = f"{reason}: leader epoch {eo.leader_epoch} ends at {eo.end_offset}"
                if not truncation.truncation_completed:
                    detail += " (another round follows)"
            p.truncate_to(truncation.offset, detail)
            # The log truncates whole batches, so its end may now be below the offset asked for: fetch from
            # where the log really ends, or the leader would count records this replica does not have.
            done[tp] = replace(truncation, offset=min(truncation.offset, p.log_end_offset))
        return done

    def _fail(self, tp: TopicPartition, error: Errors, reason: str) -> None:
        log.warning("%s: partition %s-%d marked failed: %s", self.name, tp[0], tp[1], reason)
        self.partitions.mark_partition_failed(tp)
        self.rm.on_partition_failed(tp, int(error), reason)

    # ------------------------------------------------------------------ fetch

    def build_fetch(self) -> ReplicaFetch | None:
        """The next FETCH (Kafka's ``buildFetch``): every partition ready to fetch goes to the fetch session,
        which decides what the request lists; None if there is nothing to send."""
        now = self.clock_ms()
        builder = self.session.new_builder()
        for tp, state in self.partitions.partition_states.partition_state_map().items():
            if not state.is_ready_for_fetch(now):
                continue
            p = self._partition(tp)
            if p is None:
                continue
            builder.add(
                tp,
                FetchRequestPartitionData(
                    state.fetch_offset,
                    p.log_start_offset,
                    self.settings.max_bytes,
                    state.current_leader_epoch,
                ),
            )
        data = builder.build()
        if not data.session_partitions and not data.to_forget:
            return None
        return ReplicaFetch(data, self._fetch_request(data))

    def _fetch_request(self, data: FetchRequestData) -> FetchRequest:
        topics: dict[str, list[FetchRequestPartition]] = {}
        for (topic, partition), pd in data.to_send.items():
            topics.setdefault(topic, []).append(
                FetchRequestPartition(
                    partition=partition,
                    current_leader_epoch=pd.current_leader_epoch,
                    fetch_offset=pd.fetch_offset,
                    log_start_offset=pd.log_start_offset,
                    partition_max_bytes=pd.max_bytes,
                )
            )
        forgotten: dict[str, list[int]] = {}
        for topic, partition in data.to_forget:
            forgotten.setdefault(topic, []).append(partition)
        return FetchRequest(
            replica_id=self.rm.broker_id,
            max_wait_ms=self._max_wait_ms(),
            min_bytes=self.settings.min_bytes,
            max_bytes=self.settings.response_max_bytes,
            isolation_level=0,
            session_id=data.session_id,
            session_epoch=data.epoch,
            topics=[FetchRequestTopic(topic=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[
                FetchRequestForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()
            ],
        )

    async def maybe_fetch(self) -> None:
        fetch = self.build_fetch()
        if fetch is None:
            await self._wait_for_change(self._idle_wait_ms())
            return
        self.fetch_requests += 1
        self.stats.requests += 1
        with trio.CancelScope() as scope:
            self._in_flight = scope
            try:
                response = await self.leader.fetch(fetch.request)
            finally:
                self._in_flight = None
        if scope.cancelled_caught:
            # Partitions were added while this fetch waited on the leader (``add_partitions``): its answer
            # will not be read, so the session starts again (a full fetch) on a new connection.
            self.abandoned_fetches += 1
            self.session.handle_error(None)
            raise FetchAbandoned()
        await self.process_fetch_response(fetch.data, response)

    def _max_wait_ms(self) -> int:
        """``replica.fetch.wait.max.ms``, or less when a partition left out of this request for a short
        back-off (a leader behind this follower's epoch) is due sooner: the long poll would otherwise hold
        its retry back (the leader answers this connection's requests in order)."""
        wait = self.settings.wait_max_ms
        now = self.clock_ms()
        for state in self.partitions.partition_states.state_iterator():
            if state.delay_until_ms is not None and state.delay_until_ms > now:
                wait = min(wait, state.delay_until_ms - now)
        return max(wait, 0)

    def _idle_wait_ms(self) -> int:
        """Nothing to fetch: how long to wait for a partition to become ready (or for a change)."""
        now = self.clock_ms()
        wait = self.settings.backoff_ms
        for state in self.partitions.partition_states.state_iterator():
            if state.is_truncating(now):
                return 0  # another truncation round is due now
            if state.delay_until_ms is not None:
                wait = min(wait, max(0, state.delay_until_ms - now))
        return wait

    async def process_fetch_response(self, data: FetchRequestData, response: FetchResponse) -> None:
        partitions: dict[TopicPartition, FetchResponsePartition] = {}
        for t in response.responses:
            for p in t.partitions:
                partitions[(t.topic, p.partition_index)] = p
        top_error = response.error_code
        if not self.session.handle_response(
            response.session_id, top_error, set(partitions), response.throttle_time_ms
        ):
            if top_error not in (Errors.FETCH_SESSION_ID_NOT_FOUND, Errors.INVALID_FETCH_SESSION_EPOCH):
                log.info("%s: FETCH error %s; backing off", self.name, error_name(top_error))
                self.partitions.delay_partitions(
                    list(data.session_partitions), self.settings.backoff_ms, self.clock_ms()
                )
            return
        states = self.partitions.partition_states

        def current(tp: TopicPartition) -> PartitionFetchState | None:
            """The partition's state if this answer is still for it: answers for partitions that moved
            while the request was in flight (or while their appends were prepared) are dropped."""
            requested = data.session_partitions.get(tp)
            state = states.state_value(tp)
            if (
                requested is None
                or state is None
                or state.fetch_offset != requested.fetch_offset
                or state.current_leader_epoch != requested.current_leader_epoch
                or state.state is not ReplicaState.FETCHING
            ):
                return None
            return state

        with_error: list[TopicPartition] = []
        appends = {
            tp: pdata.records
            for tp, pdata in partitions.items()
            if pdata.error_code == Errors.NONE and pdata.records and current(tp) is not None
        }
        async with self.rm.follower_appends(appends):
            for tp, pdata in partitions.items():
                state = current(tp)
                if (
                    state is not None
                    and pdata.error_code == Errors.NONE
                    and not self._try_process_partition_data(tp, state, pdata)
                ):
                    with_error.append(tp)
        for tp, pdata in partitions.items():
            state = current(tp)
            error = pdata.error_code
            if state is None or error == Errors.NONE:
                continue
            if error == Errors.OFFSET_OUT_OF_RANGE:
                if not await self._handle_out_of_range(tp, state):
                    with_error.append(tp)
            elif error == Errors.FENCED_LEADER_EPOCH:
                self._fail(tp, Errors.FENCED_LEADER_EPOCH, "fenced leader epoch in FETCH")
            else:
                self.rm.on_fetch_error(tp, error, f"FETCH error {error_name(error)}")
                with_error.append(tp)
        if with_error:
            self.partitions.delay_partitions(with_error, self.settings.backoff_ms, self.clock_ms())

    def _try_process_partition_data(
        self, tp: TopicPartition, state: PartitionFetchState, pdata: FetchResponsePartition
    ) -> bool:
        """``process_partition_data`` with Kafka's error handling: corrupt records are retried after the
        back-off (returns False); any other failure (records that do not continue the log, a disk error)
        marks the partition failed, and the fetcher and its other partitions carry on."""
        try:
            self.process_partition_data(tp, state, pdata)
        except CorruptRecordError as exc:
            log.warning(
                "%s: invalid records for %s-%d at offset %d: %s",
                self.name,
                tp[0],
                tp[1],
                state.fetch_offset,
                exc.message,
            )
            self.rm.on_fetch_error(tp, int(Errors.CORRUPT_MESSAGE), exc.message)
            return False
        except KafkaStorageError as exc:  # the log dir failed: logged once where it happened
            self._fail(tp, exc.error, f"error appending fetched records: {exc}")
        except Exception as exc:
            log.exception(
                "%s: unexpected error processing data for %s-%d at offset %d",
                self.name,
                tp[0],
                tp[1],
                state.fetch_offset,
            )
            code = exc.error if isinstance(exc, KafkaError) else Errors.UNKNOWN_SERVER_ERROR
            self._fail(tp, code, f"error appending fetched records: {exc}")
        return True

    def process_partition_data(
        self, tp: TopicPartition, state: PartitionFetchState, pdata: FetchResponsePartition
    ) -> None:
        """Kafka's ``processPartitionData``: append as follower, take the leader's HW and log start offset."""
        p = self._partition(tp)
        if p is None:
            return
        records = pdata.records
        next_offset = state.fetch_offset
        if records:
            self.stats.bytes += len(records)
            info = p.append_as_follower(records)
            if info is not None:
                next_offset = info.last_offset + 1
        p.update_high_watermark(pdata.high_watermark)
        if pdata.log_start_offset >= 0:
            p.maybe_increment_log_start_offset(pdata.log_start_offset)
        lag = max(0, pdata.high_watermark - next_offset)
        new_state = replace(state, fetch_offset=next_offset, lag=lag, last_fetched_epoch=p.latest_epoch())
        if records:
            # Partitions that returned data go to the end of the order, so others get their turn.
            self.partitions.partition_states.update_and_move_to_end(tp, new_state)
        else:
            self.partitions.partition_states.update(tp, new_state)

    async def _leader_offset(self, tp: TopicPartition, epoch: int, *, earliest: bool) -> int | None:
        """The leader's log start (``earliest``) or end offset; None after an error (journaled), for which the
        partition backs off. Raises ``_Fenced`` if the leader has a newer epoch."""
        try:
            if earliest:
                return await self.leader.fetch_earliest_offset(tp, epoch)
            return await self.leader.fetch_latest_offset(tp, epoch)
        except KafkaError as exc:
            if exc.error == Errors.FENCED_LEADER_EPOCH:
                raise _Fenced from exc  # the caller marks the partition failed, which journals the error
            self.rm.on_fetch_error(
                tp, int(exc.error), "LIST_OFFSETS error while resetting an out-of-range offset"
            )
            return None

    async def _handle_out_of_range(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """Kafka's ``fetchOffsetAndTruncate``: reset an out-of-range fetch offset from the leader's LEO or log
        start offset. Returns False if the partition should back off."""
        try:
            return await self._fetch_offset_and_truncate(tp, state)
        except _Fenced:
            # Kafka's onPartitionFenced: the leader has a newer epoch; wait for the LEADER_AND_ISR.
            current = self.partitions.partition_states.state_value(tp)
            if current is not None and current.current_leader_epoch == state.current_leader_epoch:
                self._fail(tp, Errors.FENCED_LEADER_EPOCH, "fenced leader epoch in LIST_OFFSETS")
            # Else a new epoch arrived while LIST_OFFSETS was in flight: leave its fresh state alone.
            return True

    async def _fetch_offset_and_truncate(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        p = self._partition(tp)
        if p is None:
            return True
        epoch = state.current_leader_epoch
        leader_end = await self._leader_offset(tp, epoch, earliest=False)
        if leader_end is None:
            return False
        current = self.partitions.partition_states.state_value(tp)
        if current is None or current.current_leader_epoch != epoch or self._partition(tp) is None:
            return True
        replica_end = p.log_end_offset
        if (
            leader_end < replica_end
            and self.settings.truncation_mode is not TruncationMode.LEADER_EPOCH
            and not self.settings.unclean_leader_election_enable
        ):
            # Kafka 0.10.1 - 2.0 (ReplicaFetcherThread.handleOffsetOutOfRange; KAFKA-7414 made it non-fatal
            # in 2.1): truncating below this replica's log end could lose committed records, so it exits.
            message = (
                f"Exiting because log truncation is not allowed for partition {tp[0]}-{tp[1]}: current "
                f"leader {self.leader_id}'s latest offset {leader_end} is less than replica "
                f"{self.rm.broker_id}'s latest offset {replica_end}"
            )
            log.critical("%s: %s", self.name, message)
            self.partitions.mark_partition_failed(tp)
            self.rm.on_fatal_error(tp, message)
            return True
        if leader_end < replica_end:
            # Only possible after an unclean election (or without epochs): the leader's log is shorter.
            log.warning(
                "%s: %s-%d: leader %d's LEO %d is below this replica's LEO %d; truncating (out of range)",
                self.name,
                tp[0],
                tp[1],
                self.leader_id,
                leader_end,
                replica_end,
            )
            p.truncate_to(leader_end, f"out_of_range: leader LEO {leader_end} < follower LEO {replica_end}")
            # Whole batches go: the log may now end below the leader's LEO. Fetch from where it ends.
            offset = min(leader_end, p.log_end_offset)
        else:
            leader_start = await self._leader_offset(tp, epoch, earliest=True)
            if leader_start is None:
                return False
            current = self.partitions.partition_states.state_value(tp)
            if current is None or current.current_leader_epoch != epoch or self._partition(tp) is None:
                return True
            offset = max(leader_start, replica_end)
            if leader_start > replica_end:
                p.truncate_fully_and_start_at(leader_start, f"out_of_range: leader log start {leader_start}")
        lag = max(0, leader_end - offset)
        self.partitions.partition_states.update_and_move_to_end(
            tp,
            PartitionFetchState(offset, lag, epoch, None, ReplicaState.FETCHING, p.latest_epoch()),
        )
        return True


class _Fenced(Exception):
    """LIST_OFFSETS answered FENCED_LEADER_EPOCH."""
