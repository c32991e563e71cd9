"""The log cleaner's core, after Kafka's LogCleanerTest: which records a pass keeps, tombstones and their
delete horizon, empty batches, producer state, transactions, leader epochs, the high watermark bound, and
the crash-safe swap (``.cleaned`` / ``.swap``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.control_records import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
from protocol.record_codec import Record
from protocol.records import (
    DELETE_HORIZON_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    build_batch,
    decode_records,
    iter_batches,
)
from storage.cleaner import CleanerConfig
from storage.cleaner_manager import clean_log_now, cleanable_offsets
from storage.loader import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX
from storage.log import Log, LogConfig
from storage.producer_state import AppendOrigin

COMPACT = LogConfig(segment_bytes=1024, index_interval_bytes=128, cleanup_policy="compact")
NOW = 1_000_000_000


def keyed(pairs: list[tuple[bytes | None, bytes | None]], **kwargs: int) -> bytes:
    return build_batch(
        [Record(i, 0, k, v) for i, (k, v) in enumerate(pairs)], base_timestamp=NOW - 10_000, **kwargs
    )


def open_compacted(directory: Path, config: LogConfig = COMPACT) -> Log:
    return Log.open(directory, "t", 0, config, clock=lambda: NOW / 1000)


def records_of(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, read as a consumer reads (gaps included)."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30)
        if not data:
            break
        for pos, h in iter_batches(data):
            _, records = decode_records(data, pos)
            out.extend((h.base_offset + r.offset_delta, r.key, r.value) for r in records)
            offset = h.next_offset
    return out


def batches_of(log: Log) -> list[BatchHeader]:
    return list(log.batch_headers())


def latest(log: Log) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in records_of(log):
        assert key is not None
        out[key] = (offset, value)
    return out


def fill(log: Log, rounds: int, keys: int, epoch: int = 0) -> None:
    for r in range(rounds):
        for k in range(keys):
            log.append_as_leader(keyed([(b"k%d" % k, b"v%d-%d" % (k, r))]), leader_epoch=epoch)


def test_keeps_the_latest_record_per_key_below_the_active_segment(tmp_path: Path) -> None:
    """LogCleanerTest.testCleanSegments: every key's last value stays at its offset, older ones go."""
    log = open_compacted(tmp_path / "t-0")
    fill(log, rounds=10, keys=5)
    before = latest(log)
    log.roll()
    hw = log.log_end_offset
    result = clean_log_now(log, hw, now_ms=NOW)
    assert result is not None and result.end_offset == hw
    after = records_of(log)
    assert {k: (o, v) for o, k, v in after if k is not None} == before
    assert len(after) == 5  # one record per key
    assert [o for o, _, _ in after] == sorted(o for o, _ in before.values())
    assert log.log_end_offset == hw and log.log_start_offset == 0
    # The cleaned log reopens (recovery walks the gaps) with the same records.
    log.close()
    again = open_compacted(tmp_path / "t-0")
    assert records_of(again) == after


def test_nothing_at_or_past_the_high_watermark_decides_what_goes(tmp_path: Path) -> None:
    """The dirty range ends at the high watermark: a newer value above it (which a truncation may take
    back) does not remove the older value below it."""
    log = open_compacted(tmp_path / "t-0")
    log.append_as_leader(keyed([(b"a", b"old")]), leader_epoch=0)  # 0
    log.append_as_leader(keyed([(b"b", b"x")]), leader_epoch=0)  # 1
    log.append_as_leader(keyed([(b"a", b"new")]), leader_epoch=0)  # 2: not committed
    log.roll()
    clean_log_now(log, high_watermark=2, now_ms=NOW)
    assert [(o, k, v) for o, k, v in records_of(log)] == [
        (0, b"a", b"old"),
        (1, b"b", b"x"),
        (2, b"a", b"new"),
    ]
    clean_log_now(log, high_watermark=3, checkpointed=2, now_ms=NOW)
    assert records_of(log) == [(1, b"b", b"x"), (2, b"a", b"new")]


def test_the_active_segment_is_never_cleaned(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0", LogConfig(cleanup_policy="compact"))
    fill(log, rounds=3, keys=2)
    assert cleanable_offsets(log, None, log.log_end_offset, NOW).cleanable_bytes == 0
    assert clean_log_now(log, log.log_end_offset, now_ms=NOW) is None
    assert len(records_of(log)) == 6


def test_a_tombstone_stays_until_its_delete_horizon_then_goes(tmp_path: Path) -> None:
    """KIP-534 as Kafka: the first pass that keeps a tombstone stamps its batch with a delete horizon
    (now + delete.retention.ms, attributes bit 6); a pass after the horizon drops it."""
    config = LogConfig(segment_bytes=1024, cleanup_policy="compact", delete_retention_ms=60_000)
    log = open_compacted(tmp_path / "t-0", config)
    log.append_as_leader(keyed([(b"a", b"1"), (b"b", b"1")]), leader_epoch=0)  # 0-1
    log.append_as_leader(keyed([(b"a", None)]), leader_epoch=0)  # 2: tombstone
    log.append_as_leader(keyed([(b"c", b"1")]), leader_epoch=0)  # 3
    log.roll()
    hw = log.log_end_offset
    clean_log_now(log, hw, now_ms=NOW)
    assert records_of(log) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    tomb = next(h for h in batches_of(log) if h.base_offset == 2)
    assert tomb.attributes & DELETE_HORIZON_FLAG_MASK and tomb.base_timestamp == NOW + 60_000
    # A consumer still sees the tombstone's own timestamp.
    data = log.read(2, 1 << 20)
    header, recs = decode_records(data)
    assert header.base_timestamp + recs[0].timestamp_delta == NOW - 10_000
    # Before the horizon: kept; after it: gone.
    clean_log_now(log, hw, now_ms=NOW + 59_999)
    assert (2, b"a", None) in records_of(log)
    clean_log_now(log, hw, now_ms=NOW + 60_000)
    assert records_of(log) == [(1, b"b", b"1"), (3, b"c", b"1")]


def test_an_empty_batch_keeps_a_producers_last_sequence(tmp_path: Path) -> None:
    """LogCleanerTest.testLogCleanerRetainsLastSequenceNumber: the last batch of an active producer
    stays as an empty batch (offsets and sequence kept), so a retry is still found a duplicate."""
    log = open_compacted(tmp_path / "t-0")
    pid = 7
    log.append_as_leader(keyed([(b"a", b"1")], producer_id=pid, producer_epoch=0, base_sequence=0), 0)  # 0
    log.append_as_leader(keyed([(b"b", b"1")], producer_id=pid, producer_epoch=0, base_sequence=1), 0)  # 1
    log.append_as_leader(keyed([(b"a", b"2"), (b"b", b"2")]), 0)  # 2-3, no producer id
    log.append_as_leader(keyed([(b"z", b"1")]), 0)  # 4: the last batch of the pass
    log.roll()
    clean_log_now(log, log.log_end_offset, now_ms=NOW)
    hs = batches_of(log)
    assert [(h.base_offset, h.last_offset, h.records_count) for h in hs] == [(1, 1, 0), (2, 3, 2), (4, 4, 1)]
    assert hs[0].producer_id == pid and hs[0].base_sequence == 1
    log.close()
    again = open_compacted(tmp_path / "t-0")
    retry = again.append_as_leader(
        keyed([(b"b", b"1")], producer_id=pid, producer_epoch=0, base_sequence=1), 0
    )
    assert retry.duplicate and retry.first_offset == 1
    nxt = again.append_as_leader(keyed([(b"c", b"1")], producer_id=pid, producer_epoch=0, base_sequence=2), 0)
    assert not nxt.duplicate and nxt.first_offset == 5


def test_whole_batches_go_and_a_fully_superseded_segment_leaves_a_gap(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0")
    fill(log, rounds=30, keys=3)
    log.roll()
    segments_before = len(log.segments)
    end = log.log_end_offset
    clean_log_now(log, end, now_ms=NOW)
    hs = batches_of(log)
    assert [h.base_offset for h in hs] == [end - 3, end - 2, end - 1]
    # As Kafka's, a pass keeps a segment per group; the emptied ones merge at the next pass.
    clean_log_now(log, end, now_ms=NOW)
    assert len(log.segments) < segments_before
    assert [h.base_offset for h in batches_of(log)] == [end - 3, end - 2, end - 1]
    # Reads and follower fetches from an offset in the gap get the next batch.
    assert decode_records(log.read(0, 1 << 20))[0].base_offset == end - 3


def test_leader_epochs_are_kept(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0")
    fill(log, rounds=2, keys=4, epoch=3)
    fill(log, rounds=2, keys=2, epoch=5)
    log.roll()
    clean_log_now(log, log.log_end_offset, now_ms=NOW)
    assert {h.partition_leader_epoch for h in batches_of(log)} == {3, 5}
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()] == [(3, 0), (5, 8)]


def test_compressed_batches_are_rewritten_with_their_codec(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0")
    gzip = 1
    log.append_as_leader(keyed([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], attributes=gzip), 0)
    log.append_as_leader(keyed([(b"z", b"1")]), 0)
    log.roll()
    clean_log_now(log, log.log_end_offset, now_ms=NOW)
    first = batches_of(log)[0]
    assert first.attributes & 0x07 == gzip and (first.base_offset, first.last_offset) == (0, 2)
    assert records_of(log) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"z", b"1")]


def _txn(log: Log, pid: int, seq: int, pairs: list[tuple[bytes, bytes | None]]) -> None:
    batch = keyed(
        pairs, producer_id=pid, producer_epoch=0, base_sequence=seq, attributes=TRANSACTIONAL_FLAG_MASK
    )
    log.append_as_leader(batch, 0)


def _marker(log: Log, pid: int, kind: ControlRecordType) -> None:
    batch = build_end_txn_marker_batch(pid, 0, EndTransactionMarker(kind, 0), timestamp_ms=NOW - 10_000)
    log.append_as_leader(batch, 0, AppendOrigin.COORDINATOR)


def test_aborted_transactional_data_goes_and_its_marker_after(tmp_path: Path) -> None:
    """LogCleanerTest.testAbortMarkerRemoval / testAbortedTransactionsRemoved."""
    config = LogConfig(segment_bytes=1 << 20, cleanup_policy="compact", delete_retention_ms=1_000)
    log = open_compacted(tmp_path / "t-0", config)
    _txn(log, 1, 0, [(b"a", b"aborted")])  # 0
    _marker(log, 1, ControlRecordType.ABORT)  # 1
    _txn(log, 2, 0, [(b"b", b"committed")])  # 2
    _marker(log, 2, ControlRecordType.COMMIT)  # 3
    log.append_as_leader(keyed([(b"c", b"plain")]), 0)  # 4
    _txn(log, 1, 1, [(b"d", b"committed")])  # 5: producer 1's last data batch from now on
    _marker(log, 1, ControlRecordType.COMMIT)  # 6
    log.append_as_leader(keyed([(b"z", b"plain")]), 0)  # 7
    log.roll()
    hw = log.log_end_offset
    clean_log_now(log, hw, now_ms=NOW)
    assert [(o, k) for o, k, _ in records_of(log) if k in (b"a", b"b", b"c")] == [(2, b"b"), (4, b"c")]
    # The abort marker stays while its data went in this pass; the commit markers have data: they stay.
    controls = [h.base_offset for h in batches_of(log) if h.attributes & 0x20]
    assert controls == [1, 3, 6]
    clean_log_now(log, hw, now_ms=NOW)  # the abort marker now has no data: it gets a horizon
    marker = next(h for h in batches_of(log) if h.base_offset == 1)
    assert marker.attributes & DELETE_HORIZON_FLAG_MASK and marker.base_timestamp == NOW + 1_000
    clean_log_now(log, hw, now_ms=NOW + 999)
    assert 1 in [h.base_offset for h in batches_of(log)]
    clean_log_now(log, hw, now_ms=NOW + 2_000)  # past the horizon: the abort marker goes
    assert [h.base_offset for h in batches_of(log) if h.attributes & 0x20] == [3, 6]


def test_an_active_producers_last_batch_keeps_its_abort_marker(tmp_path: Path) -> None:
    """As Kafka: the aborted data of a producer's last batch goes, its batch stays empty (the producer's
    sequence), and so its marker stays while the producer is active."""
    config = LogConfig(segment_bytes=1 << 20, cleanup_policy="compact", delete_retention_ms=1_000)
    log = open_compacted(tmp_path / "t-0", config)
    _txn(log, 1, 0, [(b"a", b"aborted")])  # 0
    _marker(log, 1, ControlRecordType.ABORT)  # 1
    log.append_as_leader(keyed([(b"z", b"plain")]), 0)  # 2
    log.roll()
    for now in (NOW, NOW, NOW + 5_000):
        clean_log_now(log, log.log_end_offset, now_ms=now)
    assert [(h.base_offset, h.records_count) for h in batches_of(log)] == [(0, 0), (1, 1), (2, 1)]
    assert b"a" not in [k for _, k, _ in records_of(log)]


def test_a_committed_transactions_marker_goes_once_its_data_is_gone(tmp_path: Path) -> None:
    """LogCleanerTest.testCommitMarkerRemoval: a later value removes the committed data, then the
    marker gets a horizon, then goes."""
    config = LogConfig(segment_bytes=1 << 20, cleanup_policy="compact", delete_retention_ms=1_000)
    log = open_compacted(tmp_path / "t-0", config)
    _txn(log, 2, 0, [(b"b", b"1")])  # 0
    _marker(log, 2, ControlRecordType.COMMIT)  # 1
    log.append_as_leader(keyed([(b"b", b"2")]), 0)  # 2
    _txn(log, 2, 1, [(b"y", b"1")])  # 3
    _marker(log, 2, ControlRecordType.COMMIT)  # 4
    log.append_as_leader(keyed([(b"z", b"2")]), 0)  # 5
    log.roll()
    hw = log.log_end_offset
    clean_log_now(log, hw, now_ms=NOW)  # the data at 0 goes; its marker stays this pass
    assert [h.base_offset for h in batches_of(log)] == [1, 2, 3, 4, 5]
    clean_log_now(log, hw, now_ms=NOW)  # the marker has no data left: it gets a horizon
    clean_log_now(log, hw, now_ms=NOW + 5_000)
    assert [h.base_offset for h in batches_of(log)] == [2, 3, 4, 5]


def test_records_without_a_key_are_dropped(tmp_path: Path) -> None:
    log = open_compacted(tmp_path / "t-0")
    log.append_as_leader(keyed([(None, b"x"), (b"a", b"1")]), 0)
    log.append_as_leader(keyed([(b"z", b"1")]), 0)
    log.roll()
    clean_log_now(log, log.log_end_offset, now_ms=NOW)
    assert records_of(log) == [(1, b"a", b"1"), (2, b"z", b"1")]


def test_a_small_dedupe_buffer_cleans_in_several_passes(tmp_path: Path) -> None:
    """The map holds what the buffer allows; its end is checkpointed and the next pass goes on from it."""
    log = open_compacted(tmp_path / "t-0")
    fill(log, rounds=3, keys=20)
    log.roll()
    hw = log.log_end_offset
    small = CleanerConfig(dedupe_buffer_size=24 * 12, dedupe_buffer_load_factor=1.0)
    first = clean_log_now(log, hw, small, now_ms=NOW)
    assert first is not None and first.end_offset < hw
    done, passes = first.end_offset, 1
    while done < hw and passes < 20:
        result = clean_log_now(log, hw, small, checkpointed=done, now_ms=NOW)
        assert result is not None
        done, passes = result.end_offset, passes + 1
    assert done == hw and passes > 1
    clean_log_now(log, hw, now_ms=NOW)
    assert len(records_of(log)) == 20


def test_follower_appends_and_reads_with_gaps_only_on_a_compacted_log(tmp_path: Path) -> None:
    from storage.log import OffsetsOutOfOrderError

    leader = open_compacted(tmp_path / "l-0")
    fill(leader, rounds=5, keys=2)
    leader.roll()
    clean_log_now(leader, leader.log_end_offset, now_ms=NOW)
    data = leader.read(0, 1 << 20)
    follower = open_compacted(tmp_path / "f-0")
    follower.append_as_follower(data)
    assert records_of(follower) == records_of(leader)
    plain = Log.open(tmp_path / "p-0", "p", 0, LogConfig())
    with pytest.raises(OffsetsOutOfOrderError):
        plain.append_as_follower(data)
    # Truncating into a gap leaves the log end at the target.
    follower.truncate_to(3)
    assert follower.log_end_offset == 3


def test_a_cleaned_segment_never_swapped_in_is_deleted_at_start_up(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_compacted(directory)
    fill(log, rounds=4, keys=3)
    log.roll()
    before = records_of(log)
    cleaned = directory / ("00000000000000000000.log" + CLEANED_FILE_SUFFIX)
    cleaned.write_bytes(b"half a segment")
    log.close()
    again = open_compacted(directory)
    assert not cleaned.exists()
    assert records_of(again) == before


def test_a_swap_interrupted_by_a_crash_is_completed_at_start_up(tmp_path: Path) -> None:
    """Crash after the ``.cleaned`` file was renamed ``.swap`` and before the old segments went: start-up
    deletes the old segments in the swap's range and renames the swap into place."""
    directory = tmp_path / "t-0"
    log = open_compacted(directory)
    fill(log, rounds=8, keys=3)
    log.roll()
    old = sorted(p.name for p in directory.glob("*.log"))
    assert len(old) > 2
    expected = records_of(log)
    # Clean a copy, then put its output next to the original's segments as a .swap.
    import shutil

    shutil.copytree(directory, tmp_path / "copy-0")
    copy = open_compacted(tmp_path / "copy-0")
    clean_log_now(copy, copy.log_end_offset, now_ms=NOW)
    clean_log_now(copy, copy.log_end_offset, now_ms=NOW)  # merges the emptied segments into the first
    assert len(copy.segments) == 2
    cleaned_expected = records_of(copy)
    copy.close()
    swap = directory / ("00000000000000000000.log" + SWAP_FILE_SUFFIX)
    swap.write_bytes((tmp_path / "copy-0" / "00000000000000000000.log").read_bytes())
    log.close()
    again = open_compacted(directory)
    assert not swap.exists()
    assert records_of(again) == cleaned_expected
    assert {k: v for _, k, v in records_of(again)} == {k: v for _, k, v in expected}
    assert len(list(directory.glob("*.log"))) < len(old)


def test_a_clean_that_raced_a_truncation_is_not_swapped_in(tmp_path: Path) -> None:
    from storage.cleaner_manager import finish_pass, plan_pass, run_pass

    directory = tmp_path / "t-0"
    log = open_compacted(directory)
    fill(log, rounds=6, keys=3)
    log.roll()
    hw = log.log_end_offset
    plan = plan_pass(log, cleanable_offsets(log, None, hw, NOW), NOW)
    result = run_pass(plan, CleanerConfig())
    log.truncate_to(5)
    assert not finish_pass(log, plan, result)
    assert not list(directory.glob("*" + CLEANED_FILE_SUFFIX))
    assert len(records_of(log)) == 5
