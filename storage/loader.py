"""Loading a partition directory's segments at start-up (Kafka's ``LogLoader``).

After a clean stop (the log directory holds the clean-shutdown marker, ``.kafka_cleanshutdown``) nothing is
recovered: every segment was flushed and closed, so each is only sanity-checked as below. Otherwise the
segments that may hold offsets at or after the recovery point were possibly not fsynced before a crash,
so each is recovered: every batch is validated (CRC included), the first invalid or partial batch is cut
off with everything after it, the index is rebuilt, and the segments after a cut one are deleted, since
their data no longer follows on. Segments wholly below the recovery point are trusted, unless their index
is missing or inconsistent, in which case that segment is recovered on its own.
"""

from __future__ import annotations

import logging
from pathlib import Path

from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_file_name,
)
from storage.transaction_index import TXN_INDEX_SUFFIX

logger = logging.getLogger(__name__)


def load_segments(
    directory: Path,
    index_interval_bytes: int,
    recovery_point: int,
    cache: LeaderEpochFileCache,
    prefix: str,
    had_clean_shutdown: bool = False,
) -> list[LogSegment]:
    """Open the segments in ``directory`` in offset order, recovering as described above. Epochs found
    in recovered batches go into ``cache``. Index files without a log file are deleted."""
    bases: list[int] = []
    for path in directory.iterdir():
        base = parse_segment_file_name(path.name, LOG_SUFFIX)
        if base is not None:
            bases.append(base)
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            orphan = parse_segment_file_name(path.name, suffix)
            if orphan is not None and not (directory / segment_file_name(orphan, LOG_SUFFIX)).exists():
                logger.warning("%sdeleting index %s that has no log file", prefix, path.name)
                path.unlink()
    bases.sort()
    segments: list[LogSegment] = []
    for i, base in enumerate(bases):
        segment = LogSegment.open(directory, base, index_interval_bytes=index_interval_bytes)
        segments.append(segment)
        unflushed = not had_clean_shutdown and (i == len(bases) - 1 or bases[i + 1] > recovery_point)
        if unflushed:
            truncated = segment.recover(cache)
            if truncated:
                later = bases[i + 1 :]
                logger.warning(
                    "%scorrupt segment %d: cut %d bytes, log now ends at %d; deleting %d later segments",
                    prefix,
                    base,
                    truncated,
                    segment.next_offset,
                    len(later),
                )
                for later_base in later:
                    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                        (directory / segment_file_name(later_base, suffix)).unlink(missing_ok=True)
                break
        else:
            problem = segment.sanity_check()
            if problem is not None:
                logger.warning("%ssegment %d needs recovery: %s", prefix, base, problem)
                segment.recover(cache)
    return segments
