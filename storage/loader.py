"""Loading a partition directory's segments at start-up (Kafka's ``LogLoader``).

After a clean stop (the log directory holds the clean-shutdown marker, ``.kafka_cleanshutdown``) nothing is
recovered: every segment was flushed and closed, so each is only sanity-checked as below. Otherwise the
segments that may hold offsets at or after the recovery point were possibly not fsynced before a crash,
so each is recovered: every batch is validated (CRC included), the first invalid or partial batch is cut
off with everything after it, the index is rebuilt, and the segments after a cut one are deleted, since
their data no longer follows on. Segments wholly below the recovery point are trusted, unless their index
is missing or inconsistent, in which case that segment is recovered on its own.

Before that, what a log cleaner left behind when it was killed is settled as Kafka's ``LogLoader`` does:
``.cleaned`` files (a cleaned segment not yet complete) are deleted, the old segments stay; a ``.swap``
file is a complete cleaned segment (it was fsynced before it was renamed): the old segments whose base
offsets fall in its offset range are deleted and it is renamed into place.
"""

from __future__ import annotations

import logging
from pathlib import Path

from protocol.errors import CorruptRecordError
from protocol.records import iter_batches
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


CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def _swap_range(path: Path) -> tuple[int, int] | None:
    """``(base offset, next offset)`` of the batches in a ``.log.swap`` file, None if it does not read."""
    base = parse_segment_file_name(path.name[: -len(SWAP_FILE_SUFFIX)], LOG_SUFFIX)
    if base is None:
        return None
    try:
        data = path.read_bytes()
        next_offset = base
        for _, header in iter_batches(data, validate=True):
            next_offset = header.next_offset
    except (OSError, CorruptRecordError):
        return None
    return base, next_offset


def complete_interrupted_swaps(directory: Path, prefix: str) -> None:
    """Settle what a cleaner killed mid-swap left in ``directory`` (see the module docstring)."""
    for path in sorted(directory.iterdir()):
        if path.name.endswith(CLEANED_FILE_SUFFIX):
            logger.warning("%sdeleting %s: a cleaned segment never swapped in", prefix, path.name)
            path.unlink()
    for path in sorted(directory.iterdir()):
        if not path.name.endswith(LOG_SUFFIX + SWAP_FILE_SUFFIX):
            continue
        found = _swap_range(path)
        if found is None:
            logger.error("%sdeleting %s: it does not read as a segment", prefix, path.name)
            path.unlink()
            continue
        base, next_offset = found
        replaced = []
        for other in directory.iterdir():
            old = parse_segment_file_name(other.name, LOG_SUFFIX)
            if old is not None and base <= old < max(next_offset, base + 1):
                replaced.append(old)
        for old in replaced:
            for suffix in _SEGMENT_SUFFIXES:
                (directory / segment_file_name(old, suffix)).unlink(missing_ok=True)
        for suffix in _SEGMENT_SUFFIXES:
            swap = directory / (segment_file_name(base, suffix) + SWAP_FILE_SUFFIX)
            if swap.exists():
                swap.rename(directory / segment_file_name(base, suffix))
        logger.warning(
            "%scompleted the swap of cleaned segment %d (offsets [%d, %d)) a crash interrupted; replaced %s",
            prefix,
            base,
            base,
            next_offset,
            sorted(replaced),
        )
    for path in sorted(directory.iterdir()):
        if path.name.endswith(SWAP_FILE_SUFFIX):
            logger.warning("%sdeleting %s: an index swap without its log", prefix, path.name)
            path.unlink()


def load_segments(
    directory: Path,
    index_interval_bytes: int,
    recovery_point: int,
    cache: LeaderEpochFileCache,
    prefix: str,
    had_clean_shutdown: bool = False,
    allow_gaps: bool = False,
) -> list[LogSegment]:
    """Open the segments in ``directory`` in offset order, recovering as described above. Epochs found
    in recovered batches go into ``cache``. Index files without a log file are deleted. ``allow_gaps``:
    the log is compacted (its batches need only increase)."""
    complete_interrupted_swaps(directory, prefix)
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
        segment = LogSegment.open(
            directory, base, index_interval_bytes=index_interval_bytes, allow_gaps=allow_gaps
        )
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
