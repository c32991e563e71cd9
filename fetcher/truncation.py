"""The follower's truncation decision (KIP-101 / KIP-279): the pure parts of Kafka's
``AbstractFetcherThread.maybeTruncate``.

A Truncating partition asks the leader (OFFSET_FOR_LEADER_EPOCH) for the end offset of the follower's
latest epoch and truncates to where the two logs stop agreeing. When the leader answers with an epoch the
follower does not have, the follower truncates to the end of its own largest epoch below that one and asks
again (another round, now with a smaller latest epoch) until both name the same epoch.

The fetcher shell drives a round like this::

    with_epochs, without_epochs = fetch_truncating_partitions(states, latest_epoch, now)
    # send OFFSET_FOR_LEADER_EPOCH for with_epochs, then:
    result = maybe_truncate_to_epoch_end_offsets(states, responses, with_epochs, ...)
    # truncate each log to result.fetch_offsets[tp].offset, fail / delay the others, then:
    update_fetch_offset_and_maybe_mark_truncation_complete(states, truncated, latest_epoch)
    # and for without_epochs: truncate_to_high_watermark(states, without_epochs) the same way.

``replication.truncation.mode`` (``TruncationMode``; docs/truncation-modes.md) picks the rules: the default
is the above (Kafka 2.0+); ``leader-epoch-pre-kip-279`` takes the leader's single answer as Kafka 0.11 - 1.1
did (``get_offset_truncation_state_pre_kip_279``); ``high-watermark`` asks the leader nothing, as Kafka
<= 0.10.2: the broker truncated the log to its high watermark when it became a follower
(``become_follower_truncation_offset``) and the fetcher starts from there (``initial_fetch_offset``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from fetcher.fetch_state import PartitionFetchState, PartitionStates, ReplicaState
from protocol.api_keys import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.replication import TruncationMode

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EpochData:
    """One partition of an OFFSET_FOR_LEADER_EPOCH request: the follower's view of the leader's epoch (for
    fencing) and the epoch whose end offset it asks for."""

    current_leader_epoch: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """One partition of an OFFSET_FOR_LEADER_EPOCH response."""

    error_code: int
    leader_epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class OffsetTruncationState:
    """Truncate to ``offset``; if not ``truncation_completed``, ask the leader again afterwards."""

    offset: int
    truncation_completed: bool = True

    def __str__(self) -> str:
        return f"TruncationState(offset={self.offset}, completed={self.truncation_completed})"


class IllegalStateError(Exception):
    """The leader answered for a partition that was not asked about."""


def get_offset_truncation_state(
    tp: TopicPartition,
    leader_epoch_offset: EpochEndOffset,
    *,
    fetch_offset: int,
    log_end_offset: int,
    follower_end_offset_for: Callable[[int], tuple[int, int]],
) -> OffsetTruncationState:
    """Where to truncate ``tp`` given the leader's answer (Kafka's ``getOffsetTruncationState``).

    ``fetch_offset``: the partition's current fetch offset (the offset it was handed when it became a follower
    -- its log end offset, since a log that asks this question has epochs -- or the offset of the previous
    truncation round). ``follower_end_offset_for(epoch)``: the follower's own
    ``LeaderEpochFileCache.end_offset_for(epoch, log_end_offset)``.

    * The leader does not know the offset (UNDEFINED_EPOCH_OFFSET: it has no epoch at or below the one asked
      for): truncate to ``fetch_offset``. Completed.
    * The leader gives an offset but no epoch (old protocol): truncate to min(leader's offset, LEO).
      Completed.
    * The follower has no epoch at or below the leader's epoch: truncate to min(leader's offset, LEO).
      Completed.
    * The follower's largest epoch <= the leader's epoch is not the leader's epoch: the follower never had
      the leader's epoch, so truncate to the end of the follower's epoch (bounded by LEO) and ask again.
      Not completed.
    * Same epoch: truncate to min(follower's end offset for it, leader's end offset, LEO). Completed.
    """
    if leader_epoch_offset.end_offset == UNDEFINED_EPOCH_OFFSET:
        log.warning(
            "Based on the replica's leader epoch, the leader replied with an unknown offset for %s-%d. "
            "The initial fetch offset %d will be used for truncation.",
            tp[0],
            tp[1],
            fetch_offset,
        )
        return OffsetTruncationState(fetch_offset, truncation_completed=True)
    if leader_epoch_offset.leader_epoch == UNDEFINED_EPOCH:
        log.warning(
            "The leader did not return an epoch for %s-%d; its offset %d will be used for truncation.",
            tp[0],
            tp[1],
            leader_epoch_offset.end_offset,
        )
        return OffsetTruncationState(
            min(leader_epoch_offset.end_offset, log_end_offset), truncation_completed=True
        )

    follower_epoch, follower_end_offset = follower_end_offset_for(leader_epoch_offset.leader_epoch)
    if follower_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The follower was not tracking epochs back then. The leader replied with an epoch below the one the
        # follower asked for, so its offset is safe to truncate to.
        log.warning(
            "The leader replied with epoch %d for %s-%d, below any epoch the replica tracks. "
            "Only the leader's offset %d will be used for truncation.",
            leader_epoch_offset.leader_epoch,
            tp[0],
            tp[1],
            leader_epoch_offset.end_offset,
        )
        return OffsetTruncationState(
            min(leader_epoch_offset.end_offset, log_end_offset), truncation_completed=True
        )
    if follower_epoch != leader_epoch_offset.leader_epoch:
        intermediate = min(follower_end_offset, log_end_offset)
        log.info(
            "The leader replied with epoch %d unknown to the replica for %s-%d. Will truncate to %d and send "
            "another leader epoch request.",
            leader_epoch_offset.leader_epoch,
            tp[0],
            tp[1],
            intermediate,
        )
        return OffsetTruncationState(intermediate, truncation_completed=False)
    offset = min(follower_end_offset, leader_epoch_offset.end_offset)
    return OffsetTruncationState(min(offset, log_end_offset), truncation_completed=True)


def get_offset_truncation_state_pre_kip_279(
    tp: TopicPartition,
    leader_epoch_offset: EpochEndOffset,
    *,
    fetch_offset: int,
    log_end_offset: int,
) -> OffsetTruncationState:
    """Where to truncate ``tp`` by KIP-101 as first shipped (Kafka 0.11 - 1.1,
    ``ReplicaFetcherThread.maybeTruncate``): the leader's answer is an offset only, and it is final.

    * UNDEFINED_EPOCH_OFFSET: truncate to ``fetch_offset`` (which was the high watermark).
    * An offset at or past the log end: nothing to truncate (the log end).
    * Otherwise: the leader's offset.

    Any epoch in the answer is ignored and there is never a second round: when the leader never had the
    follower's latest epoch, its answer (the start of its next epoch) can be at or past a log end that
    diverged further back, which is KIP-279's case.
    """
    if leader_epoch_offset.end_offset == UNDEFINED_EPOCH_OFFSET:
        log.warning(
            "Based on the replica's leader epoch, the leader replied with an unknown offset for %s-%d. "
            "The initial fetch offset %d will be used for truncation.",
            tp[0],
            tp[1],
            fetch_offset,
        )
        return OffsetTruncationState(fetch_offset, truncation_completed=True)
    if leader_epoch_offset.end_offset >= log_end_offset:
        log.info(
            "The leader replied with offset %d >= the log end offset %d of %s-%d. No truncation needed.",
            leader_epoch_offset.end_offset,
            log_end_offset,
            tp[0],
            tp[1],
        )
        return OffsetTruncationState(log_end_offset, truncation_completed=True)
    return OffsetTruncationState(leader_epoch_offset.end_offset, truncation_completed=True)


def truncation_reason(mode: TruncationMode) -> str:
    """The rule a truncation followed, as journaled (``truncated`` events' ``reason`` starts with it)."""
    return {
        TruncationMode.LEADER_EPOCH: "leader_epoch",
        TruncationMode.LEADER_EPOCH_PRE_KIP_279: "leader_epoch_pre_kip_279",
        TruncationMode.HIGH_WATERMARK: "high_watermark",
    }[mode]


def initial_fetch_offset(
    mode: TruncationMode, *, log_end_offset: int, high_watermark: int, has_epochs: bool
) -> int:
    """Where a new follower starts (the offset handed to the fetcher with the partition).

    * ``leader-epoch``: the log end offset when the log has epochs, so nothing is cut before the leader is
      asked; the high watermark otherwise.
    * ``leader-epoch-pre-kip-279``: the high watermark, as Kafka 0.11 - 2.x's ``makeFollowers`` handed
      ``replica.highWatermark`` to the fetcher (a truncation falls back to it when the leader cannot answer).
    * ``high-watermark``: the log end after the truncation to the high watermark (Kafka 0.10's
      ``makeFollowers`` truncated, then handed ``logEndOffset``).
    """
    if mode is TruncationMode.LEADER_EPOCH:
        return log_end_offset if has_epochs else high_watermark
    return min(high_watermark, log_end_offset)


def become_follower_truncation_offset(mode: TruncationMode, *, high_watermark: int) -> int | None:
    """The offset a partition's log is truncated to when it becomes a follower (after a restart too: the
    first LEADER_AND_ISR makes it one), before any fetch; None: no truncation there.

    Only ``high-watermark`` mode truncates there, to the replica's own high watermark (Kafka 0.10's
    ``ReplicaManager.makeFollowers``: ``logManager.truncateTo(... highWatermark ...)``). A follower's high
    watermark lags the leader's, so this can cut records the leader already acknowledged (KIP-101).
    """
    if mode is TruncationMode.HIGH_WATERMARK:
        return high_watermark
    return None


def fetch_truncating_partitions(
    partition_states: PartitionStates[PartitionFetchState],
    latest_epoch: Callable[[TopicPartition], int | None],
    now_ms: int,
    *,
    offset_for_leader_epoch_supported: bool = True,
    mode: TruncationMode = TruncationMode.LEADER_EPOCH,
) -> tuple[dict[TopicPartition, EpochData], list[TopicPartition]]:
    """Split the (non-delayed) Truncating partitions into those to ask the leader about, with the epoch to ask
    for (the follower log's latest epoch), and those with no epoch at all, which truncate to their high
    watermark instead (Kafka's ``fetchTruncatingPartitions``). In ``high-watermark`` mode no partition asks
    the leader (Kafka <= 0.10.2 had no OFFSET_FOR_LEADER_EPOCH)."""
    if mode is TruncationMode.HIGH_WATERMARK:
        offset_for_leader_epoch_supported = False
    with_epochs: dict[TopicPartition, EpochData] = {}
    without_epochs: list[TopicPartition] = []
    for tp, state in partition_states.partition_state_map().items():
        if not state.is_truncating(now_ms):
            continue
        epoch = latest_epoch(tp)
        if epoch is not None and offset_for_leader_epoch_supported:
            with_epochs[tp] = EpochData(state.current_leader_epoch, epoch)
        else:
            without_epochs.append(tp)
    return with_epochs, without_epochs


def truncate_to_high_watermark(
    partition_states: PartitionStates[PartitionFetchState], partitions: Collection[TopicPartition]
) -> dict[TopicPartition, OffsetTruncationState]:
    """Truncation to the fetch offset (the high watermark) for partitions without epochs; partitions removed
    in the meantime are skipped."""
    out: dict[TopicPartition, OffsetTruncationState] = {}
    for tp in partitions:
        state = partition_states.state_value(tp)
        if state is not None:
            out[tp] = OffsetTruncationState(state.fetch_offset, truncation_completed=True)
    return out


@dataclass(slots=True)
class EpochTruncationResult:
    """What to do after an OFFSET_FOR_LEADER_EPOCH response.

    ``fetch_offsets``: truncate these, then pass the ones that succeeded to
    ``update_fetch_offset_and_maybe_mark_truncation_complete``. ``partitions_with_error``: retry later
    (delay them by the fetch back-off). ``partitions_to_fail``: fenced with the epoch they asked with; mark
    them failed and wait for the next LEADER_AND_ISR.
    """

    fetch_offsets: dict[TopicPartition, OffsetTruncationState] = field(default_factory=dict)
    partitions_with_error: set[TopicPartition] = field(default_factory=set)
    partitions_to_fail: set[TopicPartition] = field(default_factory=set)


def filter_epoch_end_offsets(
    partition_states: PartitionStates[PartitionFetchState],
    requested: Mapping[TopicPartition, EpochData],
    end_offsets: Mapping[TopicPartition, EpochEndOffset],
) -> dict[TopicPartition, EpochEndOffset]:
    """Drop answers for partitions that were removed, or whose leader epoch changed, while the request was in
    flight (Kafka's ``truncateToEpochEndOffsets``). An answer for a partition not asked about is a bug on the
    leader's side and raises ``IllegalStateError``."""
    kept: dict[TopicPartition, EpochEndOffset] = {}
    for tp, end_offset in end_offsets.items():
        request = requested.get(tp)
        if request is None:
            raise IllegalStateError(
                f"Leader replied with partition {tp} not requested in OffsetsForLeaderEpoch"
            )
        state = partition_states.state_value(tp)
        if state is not None and request.current_leader_epoch == state.current_leader_epoch:
            kept[tp] = end_offset
    return kept


def maybe_truncate_to_epoch_end_offsets(
    partition_states: PartitionStates[PartitionFetchState],
    end_offsets: Mapping[TopicPartition, EpochEndOffset],
    requested: Mapping[TopicPartition, EpochData],
    *,
    log_end_offset: Callable[[TopicPartition], int],
    follower_end_offset_for: Callable[[TopicPartition, int], tuple[int, int]],
    mode: TruncationMode = TruncationMode.LEADER_EPOCH,
) -> EpochTruncationResult:
    """Decide, for each answer of the leader, whether to truncate, retry or fail the partition (Kafka's
    ``truncateToEpochEndOffsets`` + ``maybeTruncateToEpochEndOffsets`` + ``onPartitionFenced``). ``mode``
    picks the truncation rule: ``get_offset_truncation_state`` (KIP-279) or
    ``get_offset_truncation_state_pre_kip_279``."""
    result = EpochTruncationResult()
    for tp, leader_epoch_offset in filter_epoch_end_offsets(partition_states, requested, end_offsets).items():
        state = partition_states.state_value(tp)
        if state is None:
            continue
        error = leader_epoch_offset.error_code
        if error == Errors.NONE and mode is TruncationMode.LEADER_EPOCH_PRE_KIP_279:
            result.fetch_offsets[tp] = get_offset_truncation_state_pre_kip_279(
                tp,
                leader_epoch_offset,
                fetch_offset=state.fetch_offset,
                log_end_offset=log_end_offset(tp),
            )
        elif error == Errors.NONE:
            result.fetch_offsets[tp] = get_offset_truncation_state(
                tp,
                leader_epoch_offset,
                fetch_offset=state.fetch_offset,
                log_end_offset=log_end_offset(tp),
                follower_end_offset_for=functools.partial(follower_end_offset_for, tp),
            )
        elif error == Errors.FENCED_LEADER_EPOCH:
            if requested[tp].current_leader_epoch == state.current_leader_epoch:
                # Our epoch is older than the leader's: wait for the new LEADER_AND_ISR.
                log.info(
                    "Partition %s-%d has an older epoch (%d) than the current leader. Will await the new "
                    "LeaderAndIsr state before resuming fetching.",
                    tp[0],
                    tp[1],
                    state.current_leader_epoch,
                )
                result.partitions_to_fail.add(tp)
            else:
                result.partitions_with_error.add(tp)
        else:
            log.info(
                "Retrying leader epoch request for %s-%d: the leader reported error %d.", tp[0], tp[1], error
            )
            result.partitions_with_error.add(tp)
    return result


def update_fetch_offset_and_maybe_mark_truncation_complete(
    partition_states: PartitionStates[PartitionFetchState],
    fetch_offsets: Mapping[TopicPartition, OffsetTruncationState],
    latest_epoch: Callable[[TopicPartition], int | None],
    *,
    truncation_on_fetch_supported: bool = False,
) -> None:
    """After truncating: move each partition's fetch offset to its truncation offset and make it Fetching if
    truncation is complete (otherwise it stays Truncating for another round). The states are re-set grouped by
    topic, as Kafka does."""
    new_states: dict[TopicPartition, PartitionFetchState] = {}
    for tp, current in partition_states.partition_state_map().items():
        truncation = fetch_offsets.get(tp)
        if truncation is None:
            new_states[tp] = current
            continue
        done = truncation_on_fetch_supported or truncation.truncation_completed
        new_states[tp] = PartitionFetchState(
            fetch_offset=truncation.offset,
            lag=current.lag,
            current_leader_epoch=current.current_leader_epoch,
            delay_until_ms=current.delay_until_ms,
            state=ReplicaState.FETCHING if done else ReplicaState.TRUNCATING,
            last_fetched_epoch=latest_epoch(tp),
        )
    partition_states.set(new_states)
