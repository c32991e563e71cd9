"""Retention as Kafka's UnifiedLog.deleteOldSegments decides it (LogTest / UnifiedLogTest's retention cases):
whole segments, oldest first, below the high watermark, by size and by age, with a fake clock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.records import build_simple_batch
from storage.checkpoint import EpochEntry
from storage.log import Log, LogConfig
from storage.log_manager import LOG_START_CHECKPOINT, LogManager

from .support import offsets, read_all

NOW_S = 1_000_000.0


def stamped(timestamp_ms: int, size: int = 100) -> bytes:
    """One record of ``size`` bytes with this timestamp."""
    return build_simple_batch([b"x" * size], base_timestamp=timestamp_ms)


def open_log(tmp_path: Path, now: list[float], **config: int | str) -> Log:
    settings = LogConfig(segment_bytes=400, index_interval_bytes=100)
    for key, value in config.items():
        setattr(settings, key, value)
    return Log.open(tmp_path / "t-0", "t", 0, settings, clock=lambda: now[0])


def fill(log: Log, count: int, timestamp_ms: int, epoch: int = 0) -> None:
    for _ in range(count):
        log.append_as_leader(stamped(timestamp_ms), leader_epoch=epoch)


def test_size_based_retention_deletes_the_oldest_segments_over_the_limit(tmp_path: Path) -> None:
    now = [NOW_S]
    log = open_log(tmp_path, now)
    fill(log, 12, int(NOW_S * 1000))
    segments = log.segments
    assert len(segments) >= 4
    seg_size = segments[0].size
    # keep three full segments' worth: everything older goes, whole segments only
    log.config.retention_bytes = log.size_in_bytes - 2 * seg_size
    deleted = log.delete_old_segments(high_watermark=log.log_end_offset)
    assert deleted == 2
    assert log.log_start_offset == segments[2].base_offset
    assert [s.base_offset for s in log.segments] == [s.base_offset for s in segments[2:]]
    assert not segments[0].log_path.exists()
    assert offsets(read_all(log))[0][0] == segments[2].base_offset
    # under the limit now: nothing more
    assert log.delete_old_segments(high_watermark=log.log_end_offset) == 0


def test_size_based_retention_keeps_a_segment_that_would_take_the_log_below_the_limit(tmp_path: Path) -> None:
    now = [NOW_S]
    log = open_log(tmp_path, now)
    fill(log, 12, int(NOW_S * 1000))
    before = log.segments
    log.config.retention_bytes = log.size_in_bytes - before[0].size + 1
    assert log.delete_old_segments(high_watermark=log.log_end_offset) == 0
    assert log.log_start_offset == 0


def test_time_based_retention_deletes_segments_whose_newest_record_is_too_old(tmp_path: Path) -> None:
    now = [NOW_S]
    log = open_log(tmp_path, now, retention_ms=60_000)
    now_ms = int(NOW_S * 1000)
    fill(log, 6, now_ms - 120_000)  # old segments
    log.roll()
    old_segments = len(log.segments) - 1
    young_base = log.segments[-1].base_offset
    fill(log, 2, now_ms)  # a young segment, the active one
    assert log.delete_old_segments(high_watermark=log.log_end_offset) == old_segments
    assert log.log_start_offset == young_base == 6
    assert [s.base_offset for s in log.segments] == [young_base]
    assert log.delete_old_segments(high_watermark=log.log_end_offset) == 0
    fill(log, 1, now_ms)
    # time passes: the young segments age too, the active one included; the log rolls and deletes them
    now[0] += 61
    assert log.delete_old_segments(high_watermark=log.log_end_offset) >= 1
    assert log.log_start_offset == log.log_end_offset == 9
    assert len(log.segments) == 1 and log.segments[0].is_empty
    # an empty active segment is never deleted nor rolled again
    assert log.delete_old_segments(high_watermark=log.log_end_offset) == 0
    assert [s.base_offset for s in log.segments] == [9]


def test_retention_never_passes_the_high_watermark(tmp_path: Path) -> None:
    now = [NOW_S]
    log = open_log(tmp_path, now, retention_ms=1)
    fill(log, 12, int(NOW_S * 1000) - 10_000)
    segments = log.segments
    # the HW inside the second segment: only the first is wholly below it
    hw = segments[1].base_offset + 1
    assert log.delete_old_segments(high_watermark=hw) == 1
    assert log.log_start_offset == segments[1].base_offset
    # the HW exactly at a segment's end lets that segment go
    assert log.delete_old_segments(high_watermark=segments[2].base_offset) == 1
    assert log.log_start_offset == segments[2].base_offset
    # nothing is below an HW of the log start
    assert log.delete_old_segments(high_watermark=log.log_start_offset) == 0


def test_no_limits_delete_nothing(tmp_path: Path) -> None:
    now = [NOW_S]
    log = open_log(tmp_path, now, retention_ms=-1, retention_bytes=-1)
    fill(log, 12, 1)
    assert log.delete_old_segments(high_watermark=log.log_end_offset) == 0
    assert log.log_start_offset == 0


def test_compact_policy_deletes_only_below_the_log_start(tmp_path: Path) -> None:
    now = [NOW_S]
    log = open_log(tmp_path, now, retention_ms=1, retention_bytes=0, cleanup_policy="compact")
    fill(log, 12, 1)
    assert log.delete_old_segments(high_watermark=log.log_end_offset) == 0
    log.config.cleanup_policy = "compact,delete"
    assert log.delete_old_segments(high_watermark=log.log_end_offset) > 0
    assert log.log_start_offset == log.log_end_offset


def test_retention_trims_the_epoch_cache_and_producer_snapshots(tmp_path: Path) -> None:
    now = [NOW_S]
    log = open_log(tmp_path, now, retention_ms=60_000)
    old = int(NOW_S * 1000) - 120_000
    fill(log, 4, old, epoch=1)
    fill(log, 4, old, epoch=2)
    log.roll()
    fill(log, 2, int(NOW_S * 1000), epoch=3)
    bases = [s.base_offset for s in log.segments]
    snapshots_before = {p.name for p in log.dir.glob("*.snapshot")}
    assert log.delete_old_segments(high_watermark=log.log_end_offset) == len(bases) - 1
    assert log.log_start_offset == 8
    assert log.leader_epoch_cache.entries() == [EpochEntry(3, 8)]
    deleted_snapshots = {f"{b:020d}.snapshot" for b in bases[:-1]} & snapshots_before
    assert not deleted_snapshots & {p.name for p in log.dir.glob("*.snapshot")}


def test_log_manager_cleanup_checkpoints_the_new_log_start(tmp_path: Path) -> None:
    now = [NOW_S]
    config = LogConfig(segment_bytes=400, index_interval_bytes=100, retention_bytes=0)
    manager = LogManager(tmp_path, 1, "c", config, clock=lambda: now[0])
    manager.check_meta_properties()
    hosted = manager.get_or_create_log(("t", 0))
    other = manager.get_or_create_log(("t", 1))
    fill(hosted, 8, int(NOW_S * 1000))
    fill(other, 8, int(NOW_S * 1000))
    moved = manager.cleanup_logs(lambda tp: hosted.log_end_offset if tp == ("t", 0) else None)
    assert moved == {("t", 0): 8}
    assert other.log_start_offset == 0  # not hosted: left alone
    assert manager.log_start_checkpoint.read()[("t", 0)] == 8
    assert (tmp_path / LOG_START_CHECKPOINT).exists()
    manager.shutdown({("t", 0): 8, ("t", 1): 0})
    again = LogManager(tmp_path, 1, "c", config, clock=lambda: now[0])
    again.load_logs()
    assert again.logs[("t", 0)].log_start_offset == 8
    assert again.logs[("t", 0)].log_end_offset == 8


def test_the_periodic_flush_goes_a_log_at_a_time_and_skips_logs_with_nothing_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker's periodic flush yields after each log (so its loop serves other work between two
    fsyncs), and a log whose recovery point is its log end is not synced again (Kafka's flush)."""
    now = [NOW_S]
    manager = LogManager(tmp_path, 1, "c", LogConfig(), clock=lambda: now[0])
    manager.check_meta_properties()
    busy = manager.get_or_create_log(("t", 0))
    manager.get_or_create_log(("t", 1))
    manager.get_or_create_log(("t", 2))
    manager.checkpoint_recovery_points(flush=True)
    fill(busy, 3, int(NOW_S * 1000))
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    steps = list(manager.flush_and_checkpoint_stepwise())
    assert len(steps) == 3
    assert busy.recovery_point == 3
    assert manager.recovery_checkpoint.read() == {("t", 0): 3, ("t", 1): 0, ("t", 2): 0}
    data_syncs = len(synced)
    synced.clear()
    list(manager.flush_and_checkpoint_stepwise())  # nothing new anywhere: only the checkpoint file's
    assert len(synced) < data_syncs
