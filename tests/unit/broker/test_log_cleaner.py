"""The broker's cleaner task: it picks a due compacted log, cleans it off the event loop, writes
cleaner-offset-checkpoint, and backs off when nothing is due; its I/O budget sleeps as Kafka's Throttler."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from broker.config import KEYS_BY_NAME
from broker.log_cleaner import LogCleaner, cleaner_config_from
from protocol.record_codec import Record
from protocol.records import build_batch
from storage.checkpoint import OffsetCheckpointFile
from storage.cleaner import CleanerConfig, Throttler
from storage.log import LogConfig
from storage.log_manager import LogManager

COMPACT = LogConfig(segment_bytes=600, cleanup_policy="compact")


def test_a_pass_cleans_the_due_log_and_checkpoints_it(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, 1, "c", LogConfig(), time.time)
    compacted = manager.get_or_create_log(("kv", 0))
    compacted.config = COMPACT
    plain = manager.get_or_create_log(("plain", 0))
    for i in range(40):
        batch = build_batch([Record(0, 0, b"k%d" % (i % 4), b"v%d" % i)])
        compacted.append_as_leader(batch, 0)
        plain.append_as_leader(batch, 0)
    compacted.roll()
    cleaner = LogCleaner(manager, CleanerConfig(), lambda tp: manager.logs[tp].log_end_offset)
    assert trio.run(cleaner.clean_filthiest_log)
    assert OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read() == {("kv", 0): 40}
    assert sum(h.records_count for h in compacted.batch_headers()) == 4
    assert sum(h.records_count for h in plain.batch_headers()) == 40  # delete policy: not the cleaner's
    assert not trio.run(cleaner.clean_filthiest_log)  # nothing dirty left: it backs off


def test_nothing_is_cleaned_above_the_high_watermark(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, 1, "c", LogConfig(), time.time)
    log = manager.get_or_create_log(("kv", 0))
    log.config = COMPACT
    for i in range(40):
        log.append_as_leader(build_batch([Record(0, 0, b"k", b"v%d" % i)]), 0)
    log.roll()
    cleaner = LogCleaner(manager, CleanerConfig(), lambda tp: 0)
    assert not trio.run(cleaner.clean_filthiest_log)
    assert sum(h.records_count for h in log.batch_headers()) == 40


def test_the_throttler_sleeps_to_the_budget() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    throttler = Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    throttler.maybe_throttle(600)  # more than 0.3 s worth at once: 0.6 s of budget used in no time
    assert slept == [0.6]
    unlimited = Throttler(CleanerConfig().max_io_bytes_per_second, clock=lambda: 0.0, sleep=sleep)
    unlimited.maybe_throttle(10**9)
    assert slept == [0.6]


def test_kafkas_defaults() -> None:
    config = cleaner_config_from(lambda key: KEYS_BY_NAME[key].default)
    assert config == CleanerConfig()
    assert config.max_map_entries == int(134217728 // 24 * 0.9)
