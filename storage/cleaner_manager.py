"""Which compacted log to clean and from where (Kafka's ``LogCleanerManager``), and one pass over a log in
three steps, so the broker's shell can run the middle one off its event loop:

- :func:`plan_pass` (on the log's owner, the event loop): what the pass needs of the log, taken at once;
- :func:`run_pass` (any thread): the offset map and the ``<base>.log.cleaned`` files, from the segment files
  through descriptors of its own; it stops (:class:`~storage.cleaner.CleaningAbortedError`) as soon as the
  log changed;
- :func:`finish_pass` (the owner again): the swaps (``Log.replace_segments``).

``cleaner-offset-checkpoint`` (Kafka's name and text format, in the log directory) holds, per compacted
partition, the first offset not yet cleaned: where the next pass's dirty range starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from protocol import environment
from storage.cleaner import (
    CleanedTransactionMetadata,
    CleanerConfig,
    CleaningAbortedError,
    FilterContext,
    FilterStats,
    OffsetMap,
    SegmentView,
    build_offset_map,
    clean_group_into,
    group_segments_by_size,
)
from storage.loader import CLEANED_FILE_SUFFIX
from storage.log import Log
from storage.segment import LOG_SUFFIX, segment_file_name
from storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
# Kafka's internal topics, created with cleanup.policy=compact.
COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True, slots=True)
class LogToClean:
    """Kafka's ``LogToClean``: a compacted log's clean and cleanable sizes."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def cleanable_offsets(log: Log, checkpointed: int | None, high_watermark: int, now_ms: int) -> LogToClean:
    """Kafka's ``cleanableOffsets`` and ``LogToClean``: the dirty range starts at the checkpointed offset
    (the log start if there is none or it is out of the log); it ends at the first uncleanable offset,
    the lowest of the last stable offset (at most the high watermark), the active segment's base offset
    and the base of the first segment whose largest timestamp is within ``min.compaction.lag.ms`` of now.
    ``needs_compaction_now``: the first dirty segment is older than ``max.compaction.lag.ms``."""
    segments = log.segments
    log_start = log.log_start_offset
    first_dirty = checkpointed
    if first_dirty is None or first_dirty < log_start or first_dirty > log.log_end_offset:
        first_dirty = log_start
    candidates = [log.last_stable_offset(high_watermark), segments[-1].base_offset]
    config = log.config
    inactive = [
        (s, segments[i + 1].base_offset)
        for i, s in enumerate(segments[:-1])
        if segments[i + 1].base_offset > first_dirty
    ]
    if config.min_compaction_lag_ms > 0:
        for segment, _ in inactive:
            if segment.max_timestamp > now_ms - config.min_compaction_lag_ms:
                candidates.append(segment.base_offset)
                break
    first_uncleanable = max(min(candidates), log_start)
    needs_now = False
    if config.max_compaction_lag_ms < 2**62 and inactive:
        first_segment = inactive[0][0]
        ts = first_segment.max_timestamp if first_segment.max_timestamp >= 0 else now_ms
        needs_now = now_ms - ts > config.max_compaction_lag_ms
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty and s is not segments[-1])
    cleanable_bytes = sum(
        s.size for s, nxt in inactive if s.base_offset < first_uncleanable and nxt > first_dirty
    )
    if first_dirty >= first_uncleanable:
        cleanable_bytes = 0
    return LogToClean(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, needs_now)


def should_clean(to_clean: LogToClean, min_ratio: float, delete_horizon_ms: int | None, now_ms: int) -> bool:
    """Kafka's ``grabFilthiestCompactedLog`` test: cleanable bytes and either the ratio above
    ``min.cleanable.dirty.ratio`` or ``max.compaction.lag.ms`` passed; else a delete horizon a pass set
    has passed (tombstones and markers to drop in a quiet log)."""
    if to_clean.cleanable_bytes > 0 and (
        to_clean.needs_compaction_now or to_clean.cleanable_ratio > min_ratio
    ):
        return True
    return delete_horizon_ms is not None and delete_horizon_ms <= now_ms


@dataclass
class CleaningPlan:
    """What :func:`run_pass` needs, taken from the log on its owner."""

    directory: Path
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments: list[SegmentView]
    aborted: list[AbortedTxn]
    last_records_of_active_producers: dict[int, tuple[int | None, int]]
    mutations: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int


@dataclass
class PassResult:
    end_offset: int
    # Per cleaned segment: its base offset and the base offsets of the segments it replaces.
    swaps: list[tuple[int, list[int]]] = field(default_factory=list)
    stats: FilterStats = field(default_factory=FilterStats)
    map_entries: int = 0


def plan_pass(log: Log, to_clean: LogToClean, now_ms: int) -> CleaningPlan:
    segments = log.segments
    views = [
        SegmentView(
            s.base_offset, segments[i + 1].base_offset, s.log_path, s.size, tuple(s.txn_index.entries)
        )
        for i, s in enumerate(segments[:-1])
    ]
    return CleaningPlan(
        directory=log.dir,
        first_dirty_offset=to_clean.first_dirty_offset,
        first_uncleanable_offset=to_clean.first_uncleanable_offset,
        segments=views,
        aborted=log.collect_aborted_transactions(log.log_start_offset, to_clean.first_uncleanable_offset),
        last_records_of_active_producers=log.last_records_of_active_producers(),
        mutations=log.mutations,
        now_ms=now_ms,
        delete_retention_ms=log.config.delete_retention_ms,
        segment_bytes=log.config.segment_bytes,
    )


def run_pass(
    plan: CleaningPlan,
    config: CleanerConfig,
    throttle: Callable[[int], None] | None = None,
    check_done: Callable[[], None] | None = None,
) -> PassResult:
    """Build the offset map over the dirty range and write a ``.cleaned`` segment per group of the
    segments below its end. Touches only files: safe off the log's owner."""
    offset_map = OffsetMap(config.max_map_entries)
    build_offset_map(
        plan.segments,
        offset_map,
        plan.first_dirty_offset,
        plan.first_uncleanable_offset,
        plan.aborted,
        config.io_buffer_size,
        throttle,
        check_done,
    )
    end_offset = offset_map.latest_offset + 1
    result = PassResult(end_offset=max(end_offset, plan.first_dirty_offset), map_entries=len(offset_map))
    if end_offset <= plan.first_dirty_offset:
        return result
    to_clean = [s for s in plan.segments if s.base_offset < end_offset]
    ctx = FilterContext(
        offset_map=offset_map,
        txn=CleanedTransactionMetadata(),
        last_records_of_active_producers=plan.last_records_of_active_producers,
        upper_bound_offset=plan.first_uncleanable_offset,
        now_ms=plan.now_ms,
        delete_retention_ms=plan.delete_retention_ms,
    )
    ctx.txn.add_aborted_transactions(plan.aborted)
    written: list[Path] = []
    try:
        for group in group_segments_by_size(to_clean, plan.segment_bytes):
            base = group[0].base_offset
            out = plan.directory / (segment_file_name(base, LOG_SUFFIX) + CLEANED_FILE_SUFFIX)
            written.append(out)
            kept_txns = clean_group_into(group, ctx, out, config.io_buffer_size, throttle, check_done)
            if kept_txns:
                txn_out = plan.directory / (segment_file_name(base, TXN_INDEX_SUFFIX) + CLEANED_FILE_SUFFIX)
                written.append(txn_out)
                txn_out.write_bytes(b"".join(t.encode() for t in kept_txns))
            result.swaps.append((base, [s.base_offset for s in group]))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    result.stats = ctx.stats
    return result


def finish_pass(log: Log, plan: CleaningPlan, result: PassResult) -> bool:
    """Swap the cleaned segments in (in offset order). False, with the rest of the ``.cleaned`` files
    deleted, if the log changed since the plan."""
    seen = plan.mutations
    for n, (base, old_bases) in enumerate(result.swaps):
        if not log.replace_segments(base, old_bases, seen):
            for later, _ in result.swaps[n + 1 :]:
                for suffix in (LOG_SUFFIX, TXN_INDEX_SUFFIX):
                    (plan.directory / (segment_file_name(later, suffix) + CLEANED_FILE_SUFFIX)).unlink(
                        missing_ok=True
                    )
            return False
        seen = log.mutations
    return True


def clean_log_now(
    log: Log,
    high_watermark: int,
    config: CleanerConfig | None = None,
    checkpointed: int | None = None,
    now_ms: int | None = None,
) -> PassResult | None:
    """One whole pass on the calling thread (tools and tests): None if there is nothing to clean."""
    now = environment.wall_time_ms() if now_ms is None else now_ms
    to_clean = cleanable_offsets(log, checkpointed, high_watermark, now)
    if to_clean.first_dirty_offset >= to_clean.first_uncleanable_offset:
        return None
    plan = plan_pass(log, to_clean, now)

    def check_done() -> None:
        if log.mutations != plan.mutations:
            raise CleaningAbortedError(f"{log.topic}-{log.partition} changed while it was being cleaned")

    result = run_pass(plan, config or CleanerConfig(), None, check_done)
    if not finish_pass(log, plan, result):
        return None
    return result
