"""LeaderEpochFileCache: every case of Kafka's LeaderEpochFileCacheTest, same names in snake_case."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.api_keys import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from storage.leader_epoch_cache import LeaderEpochFileCache

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")


@pytest.fixture
def cache(checkpoint: LeaderEpochCheckpointFile) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(checkpoint, log_prefix="[TestTopic-5] ")


def E(epoch: int, start: int) -> EpochEntry:
    return EpochEntry(epoch, start)


def test_previous_epoch(cache: LeaderEpochFileCache) -> None:
    assert cache.previous_epoch() is None
    cache.assign(2, 10)
    assert cache.previous_epoch() is None
    cache.assign(4, 15)
    assert cache.previous_epoch() == 2
    cache.assign(10, 20)
    assert cache.previous_epoch() == 4
    cache.truncate_from_end(18)
    assert cache.previous_epoch() == 2


def test_should_add_epoch_and_message_offset_to_cache(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 10)
    log_end_offset = 11
    assert cache.latest_epoch() == 2
    assert cache.entries()[0] == E(2, 10)
    assert cache.end_offset_for(2, log_end_offset) == (2, log_end_offset)


def test_should_return_log_end_offset_if_latest_epoch_requested(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 11)
    cache.assign(2, 12)
    log_end_offset = 14
    assert cache.end_offset_for(2, log_end_offset) == (2, log_end_offset)


def test_should_return_undefined_offset_if_undefined_epoch_requested(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 11)
    cache.assign(3, 12)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_should_not_overwrite_log_end_offset_for_a_leader_epoch_once_it_has_been_assigned(
    cache: LeaderEpochFileCache,
) -> None:
    log_end_offset = 9
    cache.assign(2, log_end_offset)
    cache.assign(2, 10)
    assert cache.entries()[0].start_offset == log_end_offset
    assert cache.entries() == [E(2, 9)]


def test_should_enforce_monotonically_increasing_start_offsets(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.entries() == [E(3, 9)]


def test_should_not_overwrite_offset_for_a_leader_epoch_once_it_has_been_assigned(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(2, 6)
    cache.assign(2, 10)
    assert cache.entries()[0].start_offset == 6


def test_should_return_unsupported_if_no_epoch_recorded(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(0, 0) == UNDEFINED


def test_should_return_unsupported_if_no_epoch_recorded_and_undefined_epoch_requested(
    cache: LeaderEpochFileCache,
) -> None:
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED


def test_should_return_first_epoch_if_requested_epoch_less_than_first_epoch(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_should_truncate_if_matching_epoch_but_earlier_starting_offset(cache: LeaderEpochFileCache) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    # epoch 7 starts at an earlier offset
    cache.assign(7, 12)
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


def test_should_get_first_offset_of_subsequent_epoch_when_offset_requested_for_previous_epoch(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(1, 11)
    cache.assign(1, 12)
    cache.assign(2, 13)
    cache.assign(2, 14)
    cache.assign(3, 15)
    cache.assign(3, 16)
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_should_return_next_available_epoch_if_there_is_no_exact_epoch_for_the_one_requested(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(0, 10)
    cache.assign(2, 13)
    cache.assign(4, 17)
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_should_not_update_epoch_and_start_offset_if_it_did_not_change(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(2, 7)
    assert len(cache.entries()) == 1
    assert cache.entries()[0] == E(2, 6)


def test_should_return_invalid_offset_if_epoch_is_requested_which_is_not_currently_tracked(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_should_support_epochs_that_do_not_start_from_zero(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    log_end_offset = 7
    assert cache.end_offset_for(2, log_end_offset) == (2, log_end_offset)
    assert len(cache.entries()) == 1
    assert cache.entries()[0] == E(2, 6)


def test_should_persist_epochs_between_instances(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    cache.assign(2, 6)

    cache2 = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert len(cache2.entries()) == 1
    assert cache2.entries()[0] == E(2, 6)


def test_should_enforce_monotonically_increasing_epochs(cache: LeaderEpochFileCache) -> None:
    cache.assign(1, 5)
    cache.assign(2, 6)
    # An epoch in the past with a different offset: later epochs are truncated away so that epochs and
    # offsets stay monotonic.
    cache.assign(1, 7)
    log_end_offset = 8
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, log_end_offset) == (1, 8)
    assert cache.end_offset_for(2, log_end_offset) == UNDEFINED
    assert cache.entries()[0] == E(1, 7)


def test_should_enforce_offsets_increase_monotonically(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.entries()[0] == E(3, 5)


def test_should_increase_and_track_epochs_as_leaders_change_many_times(cache: LeaderEpochFileCache) -> None:
    log_end_offset = 0
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, log_end_offset) == (1, 0)
    assert cache.end_offset_for(0, log_end_offset) == (0, 0)

    log_end_offset = 5
    assert cache.end_offset_for(1, log_end_offset) == (1, 5)
    assert cache.end_offset_for(0, log_end_offset) == (0, 0)

    cache.assign(2, 5)
    log_end_offset = 10
    assert cache.end_offset_for(2, log_end_offset) == (2, 10)
    assert cache.end_offset_for(1, log_end_offset) == (1, 5)
    assert cache.end_offset_for(0, log_end_offset) == (0, 0)


def test_should_increase_and_track_epochs_as_follower_receives_many_messages(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(0, 0)
    cache.assign(0, 1)
    cache.assign(0, 2)
    log_end_offset = 3
    assert cache.latest_epoch() == 0
    assert cache.end_offset_for(0, log_end_offset) == (0, log_end_offset)

    cache.assign(1, 3)
    cache.assign(1, 4)
    cache.assign(1, 5)
    log_end_offset = 6
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, log_end_offset) == (1, log_end_offset)

    cache.assign(2, 6)
    cache.assign(2, 7)
    cache.assign(2, 8)
    log_end_offset = 9
    assert cache.latest_epoch() == 2
    assert cache.end_offset_for(2, log_end_offset) == (2, log_end_offset)

    # Older epochs end where the next epoch starts.
    assert cache.end_offset_for(0, log_end_offset) == (0, 3)
    assert cache.end_offset_for(1, log_end_offset) == (1, 6)


@pytest.fixture
def three(cache: LeaderEpochFileCache) -> LeaderEpochFileCache:
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 11)
    return cache


def test_should_drop_entries_on_epoch_boundary_when_removing_latest_entries(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_end(8)
    assert three.entries() == [E(2, 6)]


def test_should_preserve_reset_offset_on_clear_earliest_if_one_exists(three: LeaderEpochFileCache) -> None:
    three.truncate_from_start(8)
    assert three.entries() == [E(3, 8), E(4, 11)]


def test_should_update_saved_offset_when_offset_to_clear_to_is_between_epochs(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_start(9)
    assert three.entries() == [E(3, 9), E(4, 11)]


def test_should_not_clear_anything_if_offset_to_early(three: LeaderEpochFileCache) -> None:
    three.truncate_from_start(1)
    assert three.entries() == [E(2, 6), E(3, 8), E(4, 11)]


def test_should_not_clear_anything_if_offset_to_first_offset(three: LeaderEpochFileCache) -> None:
    three.truncate_from_start(6)
    assert three.entries() == [E(2, 6), E(3, 8), E(4, 11)]


def test_should_retain_latest_epoch_on_clear_all_earliest(three: LeaderEpochFileCache) -> None:
    three.truncate_from_start(11)
    assert three.entries() == [E(4, 11)]


def test_should_update_offset_between_epoch_boundaries_on_clear_earliest(three: LeaderEpochFileCache) -> None:
    three.truncate_from_start(9)
    assert three.entries() == [E(3, 9), E(4, 11)]


def test_should_update_offset_between_epoch_boundaries_on_clear_earliest2(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(0, 0)
    cache.assign(1, 7)
    cache.assign(2, 10)
    cache.truncate_from_start(5)
    assert cache.entries() == [E(0, 5), E(1, 7), E(2, 10)]


def test_should_retain_latest_epoch_on_clear_all_earliest_and_update_its_offset(
    three: LeaderEpochFileCache,
) -> None:
    three.truncate_from_start(15)
    assert three.entries() == [E(4, 15)]


def test_should_drop_entries_between_epoch_boundary_when_removing_newest(three: LeaderEpochFileCache) -> None:
    three.truncate_from_end(9)
    assert three.latest_epoch() == 3
    assert three.entries() == [E(2, 6), E(3, 8)]


def test_should_clear_all_entries(three: LeaderEpochFileCache) -> None:
    three.clear_and_flush()
    assert len(three.entries()) == 0


def test_should_not_reset_epoch_history_head_if_undefined_passed(three: LeaderEpochFileCache) -> None:
    three.truncate_from_start(UNDEFINED_EPOCH_OFFSET)
    assert len(three.entries()) == 3


def test_should_not_reset_epoch_history_tail_if_undefined_passed(three: LeaderEpochFileCache) -> None:
    three.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    assert len(three.entries()) == 3


def test_should_fetch_latest_epoch_of_empty_cache(cache: LeaderEpochFileCache) -> None:
    assert cache.latest_epoch() is None


def test_should_fetch_end_offset_of_empty_cache(cache: LeaderEpochFileCache) -> None:
    assert cache.end_offset_for(7, 0) == UNDEFINED


def test_should_clear_earliest_on_empty_cache(cache: LeaderEpochFileCache) -> None:
    cache.truncate_from_start(7)
    assert cache.is_empty


def test_should_clear_latest_on_empty_cache(cache: LeaderEpochFileCache) -> None:
    cache.truncate_from_end(7)
    assert cache.is_empty


def test_find_previous_epoch(cache: LeaderEpochFileCache) -> None:
    assert cache.previous_epoch(2) is None
    cache.assign(2, 10)
    assert cache.previous_epoch(2) is None
    cache.assign(4, 15)
    assert cache.previous_epoch(4) == 2
    cache.assign(10, 20)
    assert cache.previous_epoch(10) == 4
    cache.truncate_from_end(18)
    latest = cache.latest_epoch()
    assert latest is not None
    assert cache.previous_epoch(latest) == 2


def test_find_previous_entry(cache: LeaderEpochFileCache) -> None:
    assert cache.previous_entry(2) is None
    cache.assign(2, 10)
    assert cache.previous_entry(2) is None
    cache.assign(4, 15)
    assert cache.previous_entry(4) == E(2, 10)
    cache.assign(10, 20)
    assert cache.previous_entry(10) == E(4, 15)
    cache.truncate_from_end(18)
    latest = cache.latest_epoch()
    assert latest is not None
    assert cache.previous_entry(latest) == E(2, 10)


def test_find_next_epoch(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 0)
    cache.assign(1, 100)
    cache.assign(2, 200)
    assert cache.next_epoch(-1) == 0
    assert cache.next_epoch(0) == 1
    assert cache.next_epoch(1) == 2
    assert cache.next_epoch(2) is None
    assert cache.next_epoch(100) is None


def test_get_epoch_entry(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 100)
    cache.assign(3, 500)
    cache.assign(5, 1000)
    assert cache.epoch_entry(2) == E(2, 100)
    assert cache.epoch_entry(3) == E(3, 500)
    assert cache.epoch_entry(5) == E(5, 1000)
    assert cache.epoch_entry(4) is None


def test_should_fetch_epoch_for_given_offset(cache: LeaderEpochFileCache) -> None:
    cache.assign(0, 10)
    cache.assign(1, 20)
    cache.assign(5, 30)
    assert cache.epoch_for_offset(25) == 1
    assert cache.epoch_for_offset(20) == 1
    assert cache.epoch_for_offset(30) == 5
    assert cache.epoch_for_offset(50) == 5
    assert cache.epoch_for_offset(5) is None


def test_should_write_checkpoint_on_truncation(
    three: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile
) -> None:
    three.truncate_from_end(11)
    three.truncate_from_start(8)
    assert checkpoint.read() == [E(3, 8)]


# ---------------------------------------------------------------- beyond Kafka's test file


def test_negative_epoch_or_offset_is_ignored(cache: LeaderEpochFileCache) -> None:
    cache.assign(-1, 5)
    cache.assign(3, -1)
    assert cache.is_empty
    assert not cache.non_empty


def test_every_change_is_written_through(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    cache.assign(1, 0)
    cache.assign(2, 10)
    cache.assign(3, 20)
    assert LeaderEpochCheckpointFile(path).read() == [E(1, 0), E(2, 10), E(3, 20)]
    cache.truncate_from_end(15)
    assert LeaderEpochCheckpointFile(path).read() == [E(1, 0), E(2, 10)]
    cache.truncate_from_start(12)
    assert LeaderEpochCheckpointFile(path).read() == [E(2, 12)]
    cache.clear_and_flush()
    assert LeaderEpochCheckpointFile(path).read() == []
    assert path.read_text() == "0\n0\n"


def test_non_monotonic_checkpoint_is_repaired_on_load(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n3\n1 0\n3 10\n2 5\n")
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert cache.entries() == [E(1, 0), E(2, 5)]


def test_earliest_and_latest_entry(three: LeaderEpochFileCache) -> None:
    assert three.earliest_entry() == E(2, 6)
    assert three.latest_entry() == E(4, 11)
    three.clear()
    assert three.earliest_entry() is None
    assert three.latest_entry() is None
    assert three.previous_epoch() is None


def test_cache_without_checkpoint(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(None)
    cache.assign(1, 0)
    cache.truncate_from_end(0)
    assert cache.is_empty
    assert list(tmp_path.iterdir()) == []


def test_assign_all_writes_once_and_keeps_rules(cache: LeaderEpochFileCache) -> None:
    cache.assign_all([E(1, 0), E(1, 3), E(2, 5), E(-1, 7)])
    assert cache.entries() == [E(1, 0), E(2, 5)]
