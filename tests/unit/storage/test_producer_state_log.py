"""The log with producer state: duplicates, sequence and epoch checks on the leader path, no checks on the
follower path, truncation, snapshots at roll and clean stop, and the state rebuilt on open."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import Errors, KafkaError
from protocol.records import build_simple_batch, iter_batches
from storage.log import Log, LogConfig
from tests.unit.storage.support import SMALL, open_log, read_all

PID = 1000
NOW_MS = int(time.time() * 1000)  # producer ids idle for a day are expired on load


def idem(
    seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0, base_offset: int = 0, tag: int = 0
) -> bytes:
    values = [f"{pid}:{epoch}:{seq + i}:{tag}".encode().ljust(40, b".") for i in range(count)]
    return build_simple_batch(
        values,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        base_timestamp=NOW_MS,
    )


def sequences(log: Log) -> list[tuple[int, int, int]]:
    """(producer_id, epoch, base_sequence) of each batch in the log."""
    return [(h.producer_id, h.producer_epoch, h.base_sequence) for _, h in iter_batches(read_all(log))]


def snapshots(log: Log) -> list[int]:
    return sorted(int(p.name[:20]) for p in log.dir.iterdir() if p.name.endswith(".snapshot"))


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return open_log(tmp_path / "topic-0")


def test_retry_of_a_written_batch_is_not_written_again(log: Log) -> None:
    first = log.append_as_leader(idem(0, 3), leader_epoch=0)
    log.append_as_leader(idem(3, 2), leader_epoch=0)
    retry = log.append_as_leader(idem(0, 3), leader_epoch=1)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset) == (0, 2)
    assert log.log_end_offset == 5
    assert sequences(log) == [(PID, 0, 0), (PID, 0, 3)]
    assert log.leader_epoch_cache.latest_epoch() == 0  # nothing written, no epoch assigned


def test_sequence_gap_is_refused_and_nothing_written(log: Log) -> None:
    log.append_as_leader(idem(0), leader_epoch=0)
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(idem(2), leader_epoch=0)
    assert e.value.error is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "out of order sequence number" in e.value.message
    assert log.log_end_offset == 1


def test_older_epoch_is_refused(log: Log) -> None:
    log.append_as_leader(idem(0, epoch=2), leader_epoch=0)
    with pytest.raises(KafkaError) as e:
        log.append_as_leader(idem(1, epoch=1), leader_epoch=0)
    assert e.value.error is Errors.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 1


def test_batches_without_producer_id_are_not_checked(log: Log) -> None:
    plain = build_simple_batch([b"a"], base_timestamp=1_000)
    log.append_as_leader(plain, leader_epoch=0)
    log.append_as_leader(plain, leader_epoch=0)
    assert log.log_end_offset == 2
    assert log.producer_state_manager.is_empty


def test_follower_appends_without_checks_and_its_state_serves_a_later_leader(log: Log) -> None:
    log.append_as_follower(idem(0, 2, base_offset=0))
    log.append_as_follower(idem(5, 1, base_offset=2))  # a gap: the leader checked, the follower does not
    entry = log.producer_state_manager.last_entry(PID)
    assert entry is not None and entry.last_seq == 5
    # Becoming leader: a retry of what the old leader wrote is found.
    retry = log.append_as_leader(idem(0, 2), leader_epoch=3)
    assert retry.duplicate and retry.first_offset == 0
    log.append_as_leader(idem(6), leader_epoch=3)
    assert log.log_end_offset == 4


def test_truncation_cuts_the_state_back(log: Log) -> None:
    for seq in range(0, 8, 2):
        log.append_as_leader(idem(seq, 2), leader_epoch=0)
    assert log.truncate_to(4)
    entry = log.producer_state_manager.last_entry(PID)
    assert entry is not None and entry.last_seq == 3
    # seq 4 was cut: written again (not a duplicate), then its retry is one.
    again = log.append_as_leader(idem(4, 2), leader_epoch=1)
    assert not again.duplicate and again.first_offset == 4
    assert log.append_as_leader(idem(4, 2), leader_epoch=1).duplicate


def test_truncation_below_a_producers_first_batch_forgets_it(log: Log) -> None:
    log.append_as_leader(build_simple_batch([b"x"], base_timestamp=1_000), leader_epoch=0)
    log.append_as_leader(idem(0), leader_epoch=0)
    log.truncate_to(1)
    assert log.producer_state_manager.last_entry(PID) is None
    log.append_as_leader(idem(7), leader_epoch=0)  # unknown again: any sequence


def test_truncate_fully_forgets_everything(log: Log) -> None:
    log.append_as_leader(idem(0), leader_epoch=0)
    log.truncate_fully_and_start_at(10)
    assert log.producer_state_manager.is_empty
    assert snapshots(log) == []
    assert log.append_as_leader(idem(0), leader_epoch=1).first_offset == 10


def test_roll_writes_a_snapshot_at_the_new_segment_base(log: Log) -> None:
    while len(log.segments) < 3:
        log.append_as_leader(idem(log.log_end_offset), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    assert snapshots(log) == bases[1:]


def test_reopen_after_clean_stop_keeps_the_state(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for seq in range(0, 60, 3):
        log.append_as_leader(idem(seq, 3), leader_epoch=0)
    log.flush()
    log.take_producer_snapshot()
    log.close()
    assert snapshots(log)[-1] == 60
    again = open_log(tmp_path / "t-0", recovery_point=60)
    entry = again.producer_state_manager.last_entry(PID)
    assert entry is not None and (entry.last_seq, entry.last_data_offset) == (59, 59)
    retry = again.append_as_leader(idem(57, 3), leader_epoch=1)
    assert retry.duplicate and retry.first_offset == 57
    with pytest.raises(KafkaError) as e:
        again.append_as_leader(idem(61), leader_epoch=1)
    assert e.value.error is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_reopen_after_a_crash_replays_the_tail_after_the_last_roll_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for seq in range(0, 60, 3):
        log.append_as_leader(idem(seq, 3), leader_epoch=0)
    last_base = log.segments[-1].base_offset
    assert 0 < last_base < 57
    assert snapshots(log)[-1] == last_base
    log.close()  # no clean-stop snapshot
    again = open_log(tmp_path / "t-0")
    # The roll snapshot holds the last batch before the active segment; every batch after it is replayed.
    for seq in range(last_base - 3, 60, 3)[-5:]:
        retry = again.append_as_leader(idem(seq, 3), leader_epoch=1)
        assert retry.duplicate and retry.first_offset == seq
    assert again.log_end_offset == 60
    assert snapshots(again)[-1] == 60


def test_snapshot_beyond_a_recovered_log_end_is_dropped(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for seq in range(10):
        log.append_as_leader(idem(seq), leader_epoch=0)
    log.take_producer_snapshot()
    log.close()
    # The tail is lost (a torn write): the last segment loses its last batch.
    segment = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 5])
    again = open_log(tmp_path / "t-0")
    assert again.log_end_offset == 9
    assert 10 not in snapshots(again)
    entry = again.producer_state_manager.last_entry(PID)
    assert entry is not None and entry.last_seq == 8
    assert not again.append_as_leader(idem(9), leader_epoch=1).duplicate


def test_log_start_increment_deletes_snapshots_of_deleted_segments(log: Log) -> None:
    while len(log.segments) < 4:
        log.append_as_leader(idem(log.log_end_offset), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    log.maybe_increment_log_start_offset(bases[2])
    assert snapshots(log) == bases[2:]


def test_config_expires_idle_producers_on_load(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2000, index_interval_bytes=200, producer_id_expiration_ms=1)
    log = Log.open(tmp_path / "t-0", "t", 0, config)
    log.append_as_leader(idem(0), leader_epoch=0)
    log.take_producer_snapshot()
    log.close()
    again = Log.open(tmp_path / "t-0", "t", 0, config)
    assert again.producer_state_manager.is_empty


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=25),
    actions=st.lists(st.integers(0, 5), max_size=80),
)
def test_retries_of_in_flight_batches_leave_one_copy_each_in_order(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], actions: list[int]
) -> None:
    """A producer with up to five batches in flight resends any of them any number of times (lost
    responses); the log holds each batch once, in sequence order, and every answer has its offsets.
    ``actions``: 0 sends the next batch, k > 0 resends the k-th most recent one."""
    log = open_log(tmp_path_factory.mktemp("retries") / "t-0", SMALL)
    total = len(sizes)
    firsts = [sum(sizes[:i]) for i in range(total)]
    written: dict[int, int] = {}  # batch index -> first offset answered
    next_batch = 0
    for action in [*actions, *[0] * total]:
        if action == 0 or action > next_batch:
            if next_batch == total:
                continue
            i = next_batch
            next_batch += 1
        else:
            i = next_batch - action
        info = log.append_as_leader(idem(firsts[i], sizes[i]), leader_epoch=0)
        if i in written:
            assert info.duplicate and info.first_offset == written[i]
        else:
            assert not info.duplicate
            written[i] = info.first_offset
    assert sequences(log) == [(PID, 0, firsts[i]) for i in range(total)]
    assert [written[i] for i in range(total)] == firsts
