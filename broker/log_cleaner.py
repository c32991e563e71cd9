"""The log cleaner's shell (Kafka's ``LogCleaner`` thread and ``LogCleanerManager``'s choice): one
background task of the broker that, every ``log.cleaner.backoff.ms`` when it has nothing to do, picks the
filthiest compacted log this broker hosts (leader or follower: every replica cleans its own log, as in
Kafka) and cleans it with ``storage.cleaner_manager``: the plan and the swap on the event loop, the
reading and writing in a worker thread under its own I/O budget (``log.cleaner.io.max.bytes.per.second``,
shared by reads and writes). ``cleaner-offset-checkpoint`` is written after each pass."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from protocol import environment
from protocol.common import TopicPartition
from storage.cleaner import CleanerConfig, CleaningAbortedError, Throttler
from storage.cleaner_manager import (
    LogToClean,
    cleanable_offsets,
    finish_pass,
    plan_pass,
    run_pass,
    should_clean,
)
from storage.log import Log
from storage.log_manager import LogManager

log = logging.getLogger(__name__)


def cleaner_config_from(get: Callable[[str], object]) -> CleanerConfig:
    """The broker's ``log.cleaner.*`` keys."""
    return CleanerConfig(
        enable=bool(get("log.cleaner.enable")),
        num_threads=max(int(str(get("log.cleaner.threads"))), 1),
        dedupe_buffer_size=int(str(get("log.cleaner.dedupe.buffer.size"))),
        dedupe_buffer_load_factor=float(str(get("log.cleaner.io.buffer.load.factor"))),
        io_buffer_size=int(str(get("log.cleaner.io.buffer.size"))),
        max_io_bytes_per_second=float(str(get("log.cleaner.io.max.bytes.per.second"))),
        backoff_ms=int(str(get("log.cleaner.backoff.ms"))),
    )


@dataclass
class CleanerRun:
    """What the last pass did (for logs, metrics and tests)."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    bytes_read: int
    bytes_kept: int
    swapped: bool


class LogCleaner:
    def __init__(
        self,
        log_manager: LogManager,
        config: CleanerConfig,
        high_watermark: Callable[[TopicPartition], int | None],
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.log_manager = log_manager
        self.config = config
        self.high_watermark = high_watermark
        self.clock_ms = clock_ms or environment.wall_time_ms
        self.throttler = Throttler(config.max_io_bytes_per_second)
        # Per log: the latest delete horizon a pass put into its batches (Kafka's latestDeleteHorizon).
        self.delete_horizons: dict[TopicPartition, int] = {}
        self.passes = 0
        self.last_run: CleanerRun | None = None
        self._stopping = False

    async def run(self) -> None:
        log.info("log cleaner started (backoff %d ms)", self.config.backoff_ms)
        try:
            while True:
                try:
                    cleaned = await self.clean_filthiest_log()
                except Exception:
                    log.exception("log cleaner: a pass failed")
                    cleaned = False
                if not cleaned:
                    await trio.sleep(self.config.backoff_ms / 1000)
                else:
                    await trio.sleep(0)
        finally:
            self._stopping = True

    def _compacted_logs(self) -> list[tuple[TopicPartition, Log, int]]:
        out = []
        for tp, lg in list(self.log_manager.logs.items()):
            if not lg.config.compact:
                continue
            hw = self.high_watermark(tp)
            if hw is None:
                continue
            if tp not in self.log_manager.cleaner_offsets:
                # Named in the checkpoint from now on: a restart knows the log may have gaps.
                self.log_manager.cleaner_offsets[tp] = lg.log_start_offset
                self.log_manager.checkpoint_cleaner_offsets()
            out.append((tp, lg, hw))
        return out

    def grab_filthiest_log(self) -> tuple[TopicPartition, Log, LogToClean] | None:
        """Kafka's ``grabFilthiestCompactedLog``: the compacted log with the highest dirty ratio among those
        due (see ``should_clean``)."""
        if self.log_manager.offline:
            return None
        now = self.clock_ms()
        best: tuple[TopicPartition, Log, LogToClean] | None = None
        for tp, lg, hw in self._compacted_logs():
            to_clean = cleanable_offsets(lg, self.log_manager.cleaner_offsets.get(tp), hw, now)
            horizon = self.delete_horizons.get(tp)
            if not should_clean(to_clean, lg.config.min_cleanable_dirty_ratio, horizon, now):
                continue
            if to_clean.first_uncleanable_offset <= lg.log_start_offset:
                continue
            if best is None or to_clean.cleanable_ratio > best[2].cleanable_ratio:
                best = (tp, lg, to_clean)
        return best

    async def clean_filthiest_log(self) -> bool:
        """One pass over the filthiest log; False if no log needed one."""
        found = self.grab_filthiest_log()
        if found is None:
            return False
        tp, lg, to_clean = found
        now = self.clock_ms()
        if to_clean.first_dirty_offset >= to_clean.first_uncleanable_offset:
            # Only tombstones past their horizon to drop: clean the whole clean range again.
            to_clean = LogToClean(
                lg.log_start_offset,
                to_clean.first_uncleanable_offset,
                to_clean.clean_bytes,
                to_clean.cleanable_bytes,
                to_clean.needs_compaction_now,
            )
        plan = plan_pass(lg, to_clean, now)

        def check_done() -> None:
            if self._stopping or lg.mutations != plan.mutations:
                raise CleaningAbortedError(f"{tp[0]}-{tp[1]} changed while it was being cleaned")

        try:
            result = await environment.run_sync(
                run_pass, plan, self.config, self.throttler.maybe_throttle, check_done, abandon_on_cancel=True
            )
        except CleaningAbortedError as exc:
            log.info("log cleaner: %s; it is cleaned again later", exc)
            self.delete_horizons.pop(tp, None)
            return True
        if self.log_manager.logs.get(tp) is not lg:
            return True
        if not result.swaps:
            # Nothing below the high watermark to map yet (it lies inside an inactive segment): back off.
            return False
        swapped = finish_pass(lg, plan, result)
        self.passes += 1
        stats = result.stats
        self.last_run = CleanerRun(
            tp[0],
            tp[1],
            plan.first_dirty_offset,
            result.end_offset,
            stats.bytes_read,
            stats.bytes_kept,
            swapped,
        )
        if not swapped:
            return True
        self.log_manager.cleaner_offsets[tp] = result.end_offset
        self.log_manager.checkpoint_cleaner_offsets()
        old = self.delete_horizons.get(tp)
        if old is not None and old <= now:
            old = None
        horizons = [h for h in (old, stats.delete_horizon_set_ms) if h is not None]
        if horizons:
            self.delete_horizons[tp] = max(horizons)
        else:
            self.delete_horizons.pop(tp, None)
        log.info(
            "log cleaner: cleaned %s-%d [%d, %d): %d of %d bytes kept, %d of %d records, %d keys in the map",
            tp[0],
            tp[1],
            plan.first_dirty_offset,
            result.end_offset,
            stats.bytes_kept,
            stats.bytes_read,
            stats.records_kept,
            stats.records_read,
            result.map_entries,
        )
        return True
