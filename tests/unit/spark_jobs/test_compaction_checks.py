"""compaction_kept_latest's judgement of one key on one replica, and the last value per key of a
cleaned log read from its segment files."""

from __future__ import annotations

from pathlib import Path

from crc32c import crc32c

from protocol.record_codec import Record
from protocol.records import build_batch
from spark_jobs.compaction_checks import _latest_per_key, judge_key
from storage.cleaner_manager import clean_log_now
from storage.log import Log, LogConfig


def test_the_last_acknowledged_value_or_a_later_write_is_kept() -> None:
    assert judge_key(10, 7, (10, 7)) is None
    assert judge_key(10, 7, (12, 9)) is None  # a later write of the key
    assert judge_key(10, 7, None) == "the key's last acknowledged value is gone (no record of the key)"
    assert judge_key(10, 7, (4, 7)) == "an older value is the key's last record"
    assert judge_key(10, 7, (10, 8)) == "a different value is at the acknowledged offset"


def test_a_tombstone_may_be_gone_but_no_older_value_may_be_back() -> None:
    assert judge_key(10, None, None) is None
    assert judge_key(10, None, (10, None)) is None
    assert judge_key(10, None, (3, 5)) == "an older value is back after its acknowledged tombstone"


def test_latest_per_key_of_a_cleaned_log(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=300, cleanup_policy="compact"))
    for i in range(12):
        log.append_as_leader(build_batch([Record(0, 0, b"k%d" % (i % 3), b"v%d" % i)], base_timestamp=0), 0)
    log.roll()
    clean_log_now(log, log.log_end_offset, now_ms=1)
    latest = _latest_per_key([str(s.log_path) for s in log.segments])
    assert latest == {
        b"k0".hex(): (9, crc32c(b"v9")),
        b"k1".hex(): (10, crc32c(b"v10")),
        b"k2".hex(): (11, crc32c(b"v11")),
    }
