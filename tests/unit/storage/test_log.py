from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from protocol.errors import CorruptRecordError, Errors, KafkaError, OffsetOutOfRangeError
from protocol.records import BATCH_HEADER_SIZE, decode_records
from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from storage.log import Log, LogConfig, OffsetsOutOfOrderError

from .support import SMALL, batch, headers, offsets, open_log, read_all


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return open_log(tmp_path / "topic-0")


def snapshot(log: Log) -> tuple[int, int, list[EpochEntry], bytes, list[str]]:
    # Producer state snapshots come and go with loads and truncations (test_producer_state_log.py).
    files = sorted(p.name for p in log.dir.iterdir() if not p.name.endswith(".snapshot"))
    return log.log_end_offset, log.log_start_offset, log.leader_epoch_cache.entries(), read_all(log), files


def test_new_log_is_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path / "topic-0")
    assert log.dir == tmp_path / "topic-0"
    assert (log.topic, log.partition) == ("topic", 0)
    assert log.log_end_offset == 0
    assert log.log_start_offset == 0
    assert log.latest_epoch is None
    assert log.size_in_bytes == 0
    assert (tmp_path / "topic-0" / "00000000000000000000.log").exists()
    assert log.read(0, 100) == b""


def test_leader_append_assigns_offsets_and_epoch(log: Log) -> None:
    info = log.append_as_leader(batch(3, base_offset=999), leader_epoch=4)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (0, 2, 1, 3)
    assert info.leader_epoch == 4
    assert info.max_timestamp == 1_000
    assert info.log_append_time_ms == -1
    info = log.append_as_leader(batch(2) + batch(1), leader_epoch=4)
    assert (info.first_offset, info.last_offset, info.num_batches, info.num_records) == (3, 5, 2, 3)
    assert info.valid_bytes == len(batch(2)) + len(batch(1))
    assert log.log_end_offset == 6
    data = log.read(0, 1 << 20)
    assert offsets(data) == [(0, 2), (3, 4), (5, 5)]
    assert {h.partition_leader_epoch for h in headers(data)} == {4}
    assert log.leader_epoch_cache.entries() == [EpochEntry(4, 0)]
    # Records are untouched by the rewrite and the CRC still holds.
    header, records = decode_records(data)
    assert header.base_offset == 0
    assert [r.value for r in records] == [b"\x00" * 10, b"\x01" * 10, b"\x02" * 10]


def test_new_leader_epoch_is_recorded_at_its_first_offset(log: Log) -> None:
    log.append_as_leader(batch(2), leader_epoch=1)
    log.append_as_leader(batch(2), leader_epoch=1)
    log.append_as_leader(batch(1), leader_epoch=3)
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(3, 4)]
    assert log.latest_epoch == 3
    assert log.leader_epoch_cache.end_offset_for(1, log.log_end_offset) == (1, 4)
    assert LeaderEpochCheckpointFile(log.dir / "leader-epoch-checkpoint").read() == [
        EpochEntry(1, 0),
        EpochEntry(3, 4),
    ]


def test_data_is_appended_byte_for_byte(log: Log) -> None:
    first = batch(2, tag=1)
    log.append_as_leader(first, leader_epoch=0)
    stored = read_all(log)
    # Only base_offset and partition_leader_epoch differ (both zero / -1 -> 0 here: same base offset).
    assert stored[:12] == first[:12]
    assert stored[16:] == first[16:]


def test_empty_and_partial_input_rejected(log: Log) -> None:
    log.append_as_leader(batch(1), leader_epoch=0)
    before = snapshot(log)
    good = batch(2)
    for bad in (b"", good[:30], good[:-1], good + good[:BATCH_HEADER_SIZE], good + b"\x00"):
        with pytest.raises(CorruptRecordError):
            log.append_as_leader(bad, leader_epoch=0)
        with pytest.raises(CorruptRecordError):
            log.append_as_follower(bad)
    assert snapshot(log) == before


def test_corrupt_batch_rejected_and_log_unchanged(log: Log) -> None:
    log.append_as_leader(batch(1), leader_epoch=0)
    before = snapshot(log)
    flipped = bytearray(batch(2) + batch(3))
    flipped[-5] ^= 0x40  # inside the second batch's records: CRC mismatch
    with pytest.raises(CorruptRecordError) as info:
        log.append_as_leader(bytes(flipped), leader_epoch=0)
    assert info.value.error is Errors.CORRUPT_MESSAGE
    bad_magic = bytearray(batch(1))
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(bad_magic), leader_epoch=0)
    assert snapshot(log) == before


def test_batch_bigger_than_max_message_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(max_message_bytes=500))
    with pytest.raises(KafkaError) as info:
        log.append_as_leader(batch(1, 100) + batch(1, 600), leader_epoch=0)
    assert info.value.error is Errors.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0
    assert log.leader_epoch_cache.is_empty
    # A follower takes what the leader accepted (Kafka skips the size check for replication).
    log.append_as_follower(batch(1, 600, epoch=2))
    assert log.log_end_offset == 1


def test_append_bigger_than_a_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300))
    with pytest.raises(KafkaError) as info:
        log.append_as_leader(batch(5, 100), leader_epoch=0)
    assert info.value.error is Errors.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0


def test_roll_when_segment_is_full(log: Log) -> None:
    for _ in range(40):
        log.append_as_leader(batch(2, 50), leader_epoch=0)
    segments = log.segments
    assert len(segments) > 3
    for segment, following in itertools.pairwise(segments):
        assert segment.size <= SMALL.segment_bytes
        assert following.base_offset == segment.next_offset
    assert log.size_in_bytes == sum(s.size for s in segments)
    names = sorted(p.name for p in log.dir.glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in segments]
    assert offsets(read_all(log)) == [(i, i + 1) for i in range(0, 80, 2)]


def test_roll_on_segment_age(tmp_path: Path) -> None:
    now = [1000.0]
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig(segment_ms=60_000), clock=lambda: now[0])
    log.append_as_leader(batch(1), leader_epoch=0)
    now[0] += 59
    log.append_as_leader(batch(1), leader_epoch=0)
    assert len(log.segments) == 1
    now[0] += 1
    log.append_as_leader(batch(1), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_read_across_segments_one_segment_at_a_time(log: Log) -> None:
    for _ in range(40):
        log.append_as_leader(batch(2, 50), leader_epoch=0)
    second = log.segments[1]
    data = log.read(second.base_offset - 1, 1 << 20)
    assert offsets(data)[-1][1] == second.base_offset - 1  # ends with the first segment
    data = log.read(second.base_offset, 1 << 20)
    assert offsets(data)[0][0] == second.base_offset


def test_read_bounds(log: Log) -> None:
    for _ in range(10):
        log.append_as_leader(batch(2, 20), leader_epoch=0)  # offsets 0..19, batches of 2
    size = len(batch(2, 20))
    assert offsets(log.read(0, 3 * size)) == [(0, 1), (2, 3), (4, 5)]
    assert offsets(log.read(5, 2 * size + 10)) == [(4, 5), (6, 7)]
    assert offsets(log.read(0, 1 << 20, max_offset=6)) == [(0, 1), (2, 3), (4, 5)]
    assert offsets(log.read(0, 1 << 20, max_offset=7)) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert offsets(log.read(2, 2 * size, max_offset=20)) == [(2, 3), (4, 5)]
    assert log.read(6, 1 << 20, max_offset=6) == b""
    assert offsets(log.read(0, 1)) == [(0, 1)]
    assert log.read(0, 1, min_one_message=False) == b""
    assert log.read(20, 100) == b""


def test_read_out_of_range(log: Log) -> None:
    log.append_as_leader(batch(5), leader_epoch=0)
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(6, 100)
    assert "[0, 5]" in str(info.value)
    assert info.value.error is Errors.OFFSET_OUT_OF_RANGE
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.maybe_increment_log_start_offset(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    assert offsets(log.read(3, 100)) == [(0, 4)]  # the batch containing the log start


def test_follower_append_keeps_bytes_and_epochs(log: Log) -> None:
    fetched = (
        batch(2, base_offset=0, epoch=1) + batch(3, base_offset=2, epoch=1) + batch(1, base_offset=5, epoch=3)
    )
    info = log.append_as_follower(fetched)
    assert (info.first_offset, info.last_offset, info.num_batches, info.leader_epoch) == (0, 5, 3, 3)
    assert read_all(log) == fetched
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(3, 5)]


def test_follower_append_must_continue_the_log(log: Log) -> None:
    log.append_as_follower(batch(2, base_offset=0, epoch=1))
    before = snapshot(log)
    for bad in (
        batch(1, base_offset=3, epoch=1),  # gap
        batch(1, base_offset=1, epoch=1),  # overlap
        batch(1, base_offset=2, epoch=1) + batch(1, base_offset=4, epoch=1),  # not contiguous
        batch(2, base_offset=2, epoch=1) + batch(1, base_offset=3, epoch=1),  # going backwards
    ):
        with pytest.raises(OffsetsOutOfOrderError) as info:
            log.append_as_follower(bad)
        assert info.value.error is Errors.UNKNOWN_SERVER_ERROR
        assert info.value.expected_offset in (2, 3, 4)
    assert snapshot(log) == before


def test_follower_batch_with_older_epoch_drops_conflicting_cache_entries(log: Log) -> None:
    # This replica assigned epoch 5 at offset 2 as leader but wrote nothing; the new leader's data at
    # offset 2 was written in epoch 4.
    log.append_as_follower(batch(2, base_offset=0, epoch=3))
    log.leader_epoch_cache.assign(5, 2)
    log.append_as_follower(batch(1, base_offset=2, epoch=4))
    assert log.leader_epoch_cache.entries() == [EpochEntry(3, 0), EpochEntry(4, 2)]


def test_truncate_to(log: Log) -> None:
    for epoch in (1, 1, 2, 2, 3):
        log.append_as_leader(batch(2, 50), leader_epoch=epoch)  # offsets 0..9
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 4), EpochEntry(3, 8)]
    assert log.truncate_to(10) is False
    assert log.truncate_to(6) is True
    assert log.log_end_offset == 6
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 4)]
    assert offsets(read_all(log)) == [(0, 1), (2, 3), (4, 5)]
    # Inside a batch: that batch goes too and the log end offset says where the log now ends.
    assert log.truncate_to(3) is True
    assert log.log_end_offset == 2
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0)]
    log.append_as_leader(batch(1), leader_epoch=4)
    assert offsets(read_all(log)) == [(0, 1), (2, 2)]


def test_truncate_to_at_log_end_still_trims_the_epoch_cache(log: Log) -> None:
    log.append_as_leader(batch(2), leader_epoch=1)
    log.leader_epoch_cache.assign(2, 2)  # became leader, wrote nothing
    assert log.truncate_to(2) is False
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0)]


def test_truncate_across_segments_deletes_later_ones(log: Log) -> None:
    for _ in range(40):
        log.append_as_leader(batch(2, 50), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    target = bases[2]
    assert log.truncate_to(target) is True
    assert [s.base_offset for s in log.segments] == bases[:3]
    assert log.segments[-1].size == 0
    assert log.log_end_offset == target
    assert sorted(p.name for p in log.dir.glob("*.log")) == [f"{b:020d}.log" for b in bases[:3]]
    log.append_as_leader(batch(1), leader_epoch=1)
    assert log.log_end_offset == target + 1


def test_truncate_below_first_segment_truncates_fully(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", log_start_offset=50)
    log.append_as_leader(batch(5), leader_epoch=1)
    assert log.log_start_offset == 50
    assert log.truncate_to(20) is True
    assert (log.log_start_offset, log.log_end_offset) == (20, 20)
    assert log.leader_epoch_cache.is_empty
    assert [s.base_offset for s in log.segments] == [20]


def test_truncate_fully_and_start_at(log: Log) -> None:
    for _ in range(40):
        log.append_as_leader(batch(2, 50), leader_epoch=1)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (1000, 1000, 1000)
    assert log.leader_epoch_cache.is_empty
    assert sorted(p.name for p in log.dir.glob("*.log")) == ["00000000000000001000.log"]
    assert sorted(p.name for p in log.dir.glob("*.index")) == ["00000000000000001000.index"]
    log.append_as_leader(batch(1), leader_epoch=2)
    assert offsets(read_all(log)) == [(1000, 1000)]


def test_maybe_increment_log_start_offset(log: Log) -> None:
    for epoch in range(1, 41):
        log.append_as_leader(batch(2, 50), leader_epoch=epoch)
    bases = [s.base_offset for s in log.segments]
    assert log.maybe_increment_log_start_offset(0) is False
    new_start = bases[2] + 1
    assert log.maybe_increment_log_start_offset(new_start) is True
    assert log.log_start_offset == new_start
    assert [s.base_offset for s in log.segments] == bases[2:]
    first = log.leader_epoch_cache.earliest_entry()
    assert first is not None and first.start_offset == new_start
    assert log.maybe_increment_log_start_offset(new_start - 1) is False
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(log.log_end_offset + 1)
    assert log.maybe_increment_log_start_offset(log.log_end_offset) is True
    assert len(log.segments) == 1  # the active segment stays


def test_flush_moves_recovery_point(log: Log) -> None:
    log.append_as_leader(batch(3), leader_epoch=0)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 3
    log.truncate_to(0)
    assert log.recovery_point == 0


def test_flush_of_an_unchanged_log_syncs_nothing(log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    log.append_as_leader(batch(3), leader_epoch=0)
    log.append_as_leader(batch(2), leader_epoch=0)
    log.flush()
    assert synced  # new data: the active segment (and its indexes) synced
    synced.clear()
    log.flush()
    assert synced == []  # idle: nothing to sync
    log.truncate_to(3)
    assert log.recovery_point == 3 == log.log_end_offset
    log.flush()
    assert synced  # a truncation is made durable too, though the recovery point did not move
    synced.clear()
    log.append_as_leader(batch(2), leader_epoch=0)
    log.flush()
    assert synced and log.recovery_point == 5


def test_batch_headers(log: Log) -> None:
    for _ in range(40):
        log.append_as_leader(batch(2, 50), leader_epoch=0)
    assert [h.base_offset for h in log.batch_headers()] == list(range(0, 80, 2))
    assert [h.base_offset for h in log.batch_headers(31)] == list(range(30, 80, 2))


def test_delete_removes_directory(log: Log) -> None:
    log.append_as_leader(batch(1), leader_epoch=0)
    log.delete()
    assert not log.dir.exists()


def test_reopen_after_clean_close(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for epoch in (1, 1, 2):
        for _ in range(15):
            log.append_as_leader(batch(2, 50), leader_epoch=epoch)
    log.flush()
    before = snapshot(log)
    recovery_point = log.recovery_point
    log.close()
    again = open_log(tmp_path / "t-0", recovery_point=recovery_point)
    assert snapshot(again) == before
    assert again.recovery_point == recovery_point
    assert [s.index.entries for s in again.segments] == [s.index.entries for s in log.segments]


def test_log_start_offset_from_checkpoint_below_first_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", log_start_offset=100)
    log.append_as_leader(batch(2), leader_epoch=0)
    log.close()
    again = open_log(tmp_path / "t-0", log_start_offset=0, recovery_point=0)
    assert again.log_start_offset == 100


def test_log_start_beyond_log_end_on_open_is_ignored_and_the_data_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka deletes every segment here; isrsim takes a checkpoint beyond the data for a damaged one."""
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(2), leader_epoch=3)
    log.close()
    with caplog.at_level("ERROR"):
        again = open_log(tmp_path / "t-0", log_start_offset=50)
    assert (again.log_start_offset, again.log_end_offset) == (0, 2)
    assert again.read(0, 10_000) and again.leader_epoch_cache.latest_epoch() == 3
    assert "log start offset 50 is beyond the log end offset 2" in caplog.text
