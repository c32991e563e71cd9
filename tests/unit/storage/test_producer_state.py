"""ProducerStateManager, ProducerStateEntry and ProducerAppendInfo, with Kafka's own cases
(ProducerStateManagerTest, the non-transactional ones) and a few of isrsim's."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import Errors
from storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
)
from storage.producer_state_entry import (
    INT32_MAX,
    NO_SEQUENCE,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    decrement_sequence,
    increment_sequence,
)

PRODUCER_ID = 1
EPOCH = 0


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(tmp_path: Path, clock: FakeClock) -> ProducerStateManager:
    return ProducerStateManager("test-0", tmp_path, clock_ms=clock)


def append(
    manager: ProducerStateManager,
    producer_id: int,
    epoch: int,
    seq: int,
    offset: int,
    timestamp: int | None = None,
    origin: AppendOrigin = AppendOrigin.CLIENT,
) -> None:
    """Kafka's test helper ``appendEntry``: one single-record batch at ``offset``."""
    info = manager.prepare_update(producer_id, origin)
    ts = 1_000_000 if timestamp is None else timestamp
    info.append_data_batch(epoch, seq, seq, ts, offset, offset)
    manager.update(info)
    manager.update_map_end_offset(offset + 1)


def replicate(
    manager: ProducerStateManager, epoch: int, seq: int, offset: int, timestamp: int | None = None
) -> None:
    append(manager, PRODUCER_ID, epoch, seq, offset, timestamp, AppendOrigin.REPLICATION)


def last(manager: ProducerStateManager, producer_id: int = PRODUCER_ID) -> ProducerStateEntry:
    entry = manager.last_entry(producer_id)
    assert entry is not None
    return entry


def snapshot_offsets(directory: Path) -> set[int]:
    return {int(p.name.split(".")[0]) for p in directory.iterdir() if p.name.endswith(".snapshot")}


# ---------------------------------------------------------------------- Kafka's cases


def test_basic_id_mapping(manager: ProducerStateManager) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0)
    append(manager, PRODUCER_ID, EPOCH, 1, 1)
    # Duplicates are checked separately (find_duplicate_batch): appended, they are out of order.
    with pytest.raises(OutOfOrderSequenceError):
        append(manager, PRODUCER_ID, EPOCH, 1, 1)
    # A sequence past the next expected one.
    with pytest.raises(OutOfOrderSequenceError) as gap:
        append(manager, PRODUCER_ID, EPOCH, 5, 2)
    assert gap.value.error is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    # A new epoch starting at 0.
    append(manager, PRODUCER_ID, EPOCH + 1, 0, 3)
    with pytest.raises(InvalidProducerEpochError) as fenced:
        append(manager, PRODUCER_ID, EPOCH, 0, 4)
    assert fenced.value.error is Errors.INVALID_PRODUCER_EPOCH


def test_producer_sequence_wrap_around(manager: ProducerStateManager) -> None:
    replicate(manager, 15, INT32_MAX, 735)
    append(manager, PRODUCER_ID, 15, 0, 735 + 500)
    entry = last(manager)
    assert entry.producer_epoch == 15
    assert entry.first_seq == INT32_MAX
    assert entry.last_seq == 0


def test_producer_sequence_with_wrap_around_batch_record(manager: ProducerStateManager) -> None:
    info = manager.prepare_update(PRODUCER_ID, AppendOrigin.REPLICATION)
    info.append_data_batch(15, INT32_MAX - 10, 9, 0, 2000, 2020)
    assert manager.last_entry(PRODUCER_ID) is None
    manager.update(info)
    entry = last(manager)
    assert (entry.first_seq, entry.last_seq) == (INT32_MAX - 10, 9)
    assert (entry.first_data_offset, entry.last_data_offset) == (2000, 2020)


def test_producer_sequence_invalid_wrap_around(manager: ProducerStateManager) -> None:
    replicate(manager, 15, INT32_MAX, 735)
    with pytest.raises(OutOfOrderSequenceError):
        append(manager, PRODUCER_ID, 15, 1, 735 + 500)


def test_no_validation_on_first_entry_when_loading_log(manager: ProducerStateManager) -> None:
    replicate(manager, 5, 16, 735)
    entry = last(manager)
    assert entry.producer_epoch == 5
    assert (entry.first_seq, entry.last_seq) == (16, 16)
    assert (entry.first_data_offset, entry.last_data_offset) == (735, 735)


def test_prepare_update_does_not_mutate(manager: ProducerStateManager) -> None:
    info = manager.prepare_update(PRODUCER_ID, AppendOrigin.CLIENT)
    info.append_data_batch(EPOCH, 0, 5, 0, 15, 20)
    assert manager.last_entry(PRODUCER_ID) is None
    manager.update(info)
    following = manager.prepare_update(PRODUCER_ID, AppendOrigin.CLIENT)
    following.append_data_batch(EPOCH, 6, 10, 0, 26, 30)
    entry = last(manager)
    assert (entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 5, 20)
    manager.update(following)
    entry = last(manager)
    assert (entry.first_seq, entry.last_seq, entry.last_data_offset) == (0, 10, 30)


def test_truncate_and_reload_removes_out_of_range_snapshots(
    manager: ProducerStateManager, clock: FakeClock
) -> None:
    for seq in range(5):
        append(manager, PRODUCER_ID, EPOCH, seq, seq)
        manager.take_snapshot()
    manager.truncate_and_reload(1, 3, clock())
    assert manager.oldest_snapshot_offset() == 2
    assert manager.latest_snapshot_offset() == 3


def test_take_snapshot(manager: ProducerStateManager, tmp_path: Path) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0)
    append(manager, PRODUCER_ID, EPOCH, 1, 1)
    manager.take_snapshot()
    files = list(tmp_path.iterdir())
    assert [p.name for p in files] == [snapshot_file_name(2)] == ["00000000000000000002.snapshot"]
    assert files[0].stat().st_size > 0


def test_remove_expired_pids_on_reload(manager: ProducerStateManager, tmp_path: Path) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0, timestamp=0)
    append(manager, PRODUCER_ID, EPOCH, 1, 1, timestamp=1)
    manager.take_snapshot()
    recovered = ProducerStateManager("test-0", tmp_path, clock_ms=lambda: 70_000)
    recovered.truncate_and_reload(0, 1, DEFAULT_PRODUCER_ID_EXPIRATION_MS + 2)
    assert not recovered.active_producers  # expired on reload: any sequence is accepted again
    append(recovered, PRODUCER_ID, EPOCH, 2, 2, timestamp=70_001)
    assert len(recovered.active_producers) == 1
    assert last(recovered).last_seq == 2
    assert recovered.map_end_offset == 3


def test_accept_append_without_producer_state_on_replica(
    manager: ProducerStateManager, tmp_path: Path
) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0, timestamp=0)
    append(manager, PRODUCER_ID, EPOCH, 1, 1, timestamp=1)
    manager.take_snapshot()
    recovered = ProducerStateManager("test-0", tmp_path, clock_ms=lambda: 70_000)
    recovered.truncate_and_reload(0, 1, 70_000)
    assert PRODUCER_ID not in recovered.active_producers
    replicate(recovered, EPOCH, 2, 2, timestamp=70_001)
    entry = last(recovered)
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq) == (EPOCH, 2, 2)


def test_accept_append_with_sequence_gaps_on_replica(manager: ProducerStateManager) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0, timestamp=0)
    with pytest.raises(OutOfOrderSequenceError):
        append(manager, PRODUCER_ID, EPOCH, 3, 1, timestamp=1)
    assert last(manager).last_seq == 0
    replicate(manager, EPOCH, 3, 1, timestamp=1)
    assert last(manager).last_seq == 3


def test_delete_snapshots_before(manager: ProducerStateManager, tmp_path: Path) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0)
    append(manager, PRODUCER_ID, EPOCH, 1, 1)
    manager.take_snapshot()
    assert snapshot_offsets(tmp_path) == {2}
    append(manager, PRODUCER_ID, EPOCH, 2, 2)
    manager.take_snapshot()
    assert snapshot_offsets(tmp_path) == {2, 3}
    manager.delete_snapshots_before(3)
    assert snapshot_offsets(tmp_path) == {3}
    manager.delete_snapshots_before(4)
    assert snapshot_offsets(tmp_path) == set()
    assert manager.snapshot_offsets == []


def test_truncate_fully_and_start_at(manager: ProducerStateManager, tmp_path: Path) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0)
    append(manager, PRODUCER_ID, EPOCH, 1, 1)
    manager.take_snapshot()
    append(manager, PRODUCER_ID, EPOCH, 2, 2)
    manager.take_snapshot()
    assert snapshot_offsets(tmp_path) == {2, 3}
    manager.truncate_fully_and_start_at(0)
    assert snapshot_offsets(tmp_path) == set()
    assert manager.is_empty
    append(manager, PRODUCER_ID, EPOCH, 0, 0)
    manager.take_snapshot()
    assert snapshot_offsets(tmp_path) == {1}


def test_reload_snapshots(manager: ProducerStateManager, tmp_path: Path, clock: FakeClock) -> None:
    append(manager, PRODUCER_ID, EPOCH, 1, 1)
    append(manager, PRODUCER_ID, EPOCH, 2, 2)
    manager.take_snapshot()
    saved = {p: p.read_bytes() for p in tmp_path.iterdir()}
    append(manager, PRODUCER_ID, EPOCH, 3, 3)
    append(manager, PRODUCER_ID, EPOCH, 4, 4)
    manager.take_snapshot()
    assert snapshot_offsets(tmp_path) == {3, 5}
    manager.truncate_and_reload(3, 5, clock())
    assert snapshot_offsets(tmp_path) == {5}
    for path, data in saved.items():
        path.write_bytes(data)
    manager.truncate_fully_and_reload_snapshots()
    assert manager.latest_snapshot_offset() == 3
    assert manager.snapshot_offsets == [3]


def test_load_from_snapshot_retains_non_expired_producers(
    manager: ProducerStateManager, clock: FakeClock
) -> None:
    append(manager, 1, EPOCH, 0, 0)
    append(manager, 2, EPOCH, 0, 1)
    manager.take_snapshot()
    assert len(manager.active_producers) == 2
    manager.truncate_and_reload(1, 2, clock())
    assert len(manager.active_producers) == 2
    assert (last(manager, 1).last_seq, last(manager, 1).last_data_offset) == (0, 0)
    assert (last(manager, 2).last_seq, last(manager, 2).last_data_offset) == (0, 1)


def test_skip_snapshot_if_offset_unchanged(manager: ProducerStateManager, tmp_path: Path) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0)
    manager.take_snapshot()
    assert snapshot_offsets(tmp_path) == {1}
    assert manager.take_snapshot() is None
    assert snapshot_offsets(tmp_path) == {1}


def test_pid_expiration_timeout(manager: ProducerStateManager, clock: FakeClock) -> None:
    append(manager, PRODUCER_ID, 5, 0, 1, timestamp=clock())
    clock.ms += DEFAULT_PRODUCER_ID_EXPIRATION_MS + 1
    manager.remove_expired_producers(clock())
    assert manager.is_empty
    append(manager, PRODUCER_ID, 5, 1, 2, timestamp=clock())
    assert len(manager.active_producers) == 1
    assert last(manager).last_seq == 1
    assert manager.map_end_offset == 3


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: bytes(37) + data[37:], id="garbage"),
    ],
)
def test_load_from_corrupt_snapshot_file(
    manager: ProducerStateManager, tmp_path: Path, clock: FakeClock, damage: object
) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0)
    manager.take_snapshot()
    append(manager, PRODUCER_ID, EPOCH, 1, 1)
    manager.take_snapshot()
    assert manager.latest_snapshot_offset() == 2
    path = tmp_path / snapshot_file_name(2)
    assert callable(damage)
    path.write_bytes(damage(path.read_bytes()))
    reloaded = ProducerStateManager("test-0", tmp_path, clock_ms=clock)
    reloaded.truncate_and_reload(0, 20, clock())
    assert not path.exists()
    assert last(reloaded).last_data_offset == 0


def test_remove_stray_snapshots_keeps_clean_shutdown_snapshot(
    manager: ProducerStateManager, tmp_path: Path
) -> None:
    for offset in (5, 2, 42):
        (tmp_path / snapshot_file_name(offset)).touch()
    manager.remove_stray_snapshots([5])
    assert manager.latest_snapshot_offset() == 42
    assert manager.oldest_snapshot_offset() == 5
    assert sorted(snapshot_offsets(tmp_path)) == [5, 42]


def test_remove_all_stray_snapshots(manager: ProducerStateManager, tmp_path: Path) -> None:
    for offset in (5, 2, 42):
        (tmp_path / snapshot_file_name(offset)).touch()
    manager.remove_stray_snapshots([42])
    assert sorted(snapshot_offsets(tmp_path)) == [42]


def test_read_write_snapshot() -> None:
    with_batch = ProducerStateEntry(1, 2, 3, -1)
    with_batch.batch_metadata.append(BatchMetadata(1, 2, 3, -1))
    without = ProducerStateEntry(11, 12, 13, 123456)
    decoded = {e.producer_id: e for e in decode_snapshot(encode_snapshot([with_batch, without]))}
    assert decoded.keys() == {1, 11}
    for expected in (with_batch, without):
        got = decoded[expected.producer_id]
        assert (got.producer_epoch, got.coordinator_epoch, got.last_timestamp) == (
            expected.producer_epoch,
            expected.coordinator_epoch,
            expected.last_timestamp,
        )
        assert list(got.batch_metadata) == list(expected.batch_metadata)


def test_snapshot_bytes_are_kafkas_format() -> None:
    """version 1, CRC-32C of the rest, an int32 count and 46 bytes per producer."""
    entry = ProducerStateEntry(7, 3, -1, 99)
    entry.batch_metadata.append(BatchMetadata(4, 10, 2, 99))
    data = encode_snapshot([entry])
    assert len(data) == 2 + 4 + 4 + 46
    assert data[:2] == b"\x00\x01"
    assert data[6:10] == b"\x00\x00\x00\x01"
    assert int.from_bytes(data[10:18], "big") == 7


# ---------------------------------------------------------------------- isrsim's cases


def test_duplicate_of_each_of_the_last_five_batches(manager: ProducerStateManager) -> None:
    for seq in range(7):
        append(manager, PRODUCER_ID, EPOCH, seq, 10 * seq)
    entry = last(manager)
    assert [b.first_seq for b in entry.batch_metadata] == [2, 3, 4, 5, 6]
    for seq in range(2, 7):
        duplicate = entry.find_duplicate_batch(EPOCH, seq, seq)
        assert duplicate is not None
        assert duplicate.first_offset == 10 * seq
    assert entry.find_duplicate_batch(EPOCH, 1, 1) is None  # no longer retained
    assert entry.find_duplicate_batch(EPOCH + 1, 6, 6) is None  # another epoch
    assert entry.find_duplicate_batch(EPOCH, 5, 6) is None  # another range


def test_new_epoch_must_start_at_sequence_zero(manager: ProducerStateManager) -> None:
    append(manager, PRODUCER_ID, EPOCH, 0, 0)
    with pytest.raises(OutOfOrderSequenceError, match="starts at sequence 0"):
        append(manager, PRODUCER_ID, EPOCH + 1, 1, 1)
    append(manager, PRODUCER_ID, EPOCH + 1, 0, 1)
    entry = last(manager)
    assert entry.producer_epoch == EPOCH + 1
    assert [b.last_seq for b in entry.batch_metadata] == [0]  # the old epoch's batches are forgotten


def test_unknown_producer_is_accepted_with_any_sequence(manager: ProducerStateManager) -> None:
    append(manager, 42, 3, 17, 0)
    assert last(manager, 42).last_seq == 17


def test_coordinator_origin_checks_the_epoch_but_not_sequences(manager: ProducerStateManager) -> None:
    append(manager, PRODUCER_ID, 2, 0, 0)
    append(manager, PRODUCER_ID, 2, 9, 1, origin=AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        append(manager, PRODUCER_ID, 1, 10, 2, origin=AppendOrigin.COORDINATOR)


def test_older_epoch_on_replica_is_taken_as_it_comes(manager: ProducerStateManager) -> None:
    append(manager, PRODUCER_ID, 3, 0, 0)
    replicate(manager, 2, 0, 1)
    assert last(manager).producer_epoch == 2


def test_no_sequence_sentinel() -> None:
    entry = ProducerStateEntry.empty(5)
    assert (entry.first_seq, entry.last_seq, entry.last_data_offset) == (NO_SEQUENCE, NO_SEQUENCE, -1)


@given(st.integers(0, INT32_MAX), st.integers(0, 10_000))
def test_sequence_arithmetic_wraps_like_kafka(sequence: int, delta: int) -> None:
    up = increment_sequence(sequence, delta)
    assert 0 <= up <= INT32_MAX
    assert up == (sequence + delta) % (INT32_MAX + 1)
    assert decrement_sequence(up, delta) == sequence


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**15 - 1),
            st.integers(0, INT32_MAX),
            st.integers(0, 2**40),
            st.integers(0, 1000),
            st.integers(-1, 2**45),
        ),
        max_size=20,
        unique_by=lambda t: t[0],
    )
)
def test_snapshot_round_trip(rows: list[tuple[int, int, int, int, int, int]]) -> None:
    entries = []
    for producer_id, epoch, seq, offset, delta, ts in rows:
        entry = ProducerStateEntry(producer_id, epoch, -1, ts)
        entry.batch_metadata.append(BatchMetadata(seq, offset + delta, delta, ts))
        entries.append(entry)
    decoded = decode_snapshot(encode_snapshot(entries))
    assert [(e.producer_id, e.producer_epoch, e.last_timestamp, list(e.batch_metadata)) for e in decoded] == [
        (e.producer_id, e.producer_epoch, e.last_timestamp, list(e.batch_metadata)) for e in entries
    ]
