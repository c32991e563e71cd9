"""Kafka's LogDirFailureChannel: a disk error takes the log dir offline once, for good; running out of file
descriptors does not; a write that fails part way leaves no partial batch."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from protocol.errors import Errors, KafkaStorageError
from storage.log_dir_failure import LogDirFailureChannel

from .support import batch, open_log, read_all


def test_a_disk_error_takes_the_dir_offline_once_and_refuses_everything_after() -> None:
    channel = LogDirFailureChannel()
    offline: list[str] = []
    channel.add_listener(offline.append)
    for _ in range(2):
        with pytest.raises(KafkaStorageError) as info, channel.guard("/d", "appending to t-0"):
            raise OSError(errno.ENOSPC, "No space left on device")
        assert info.value.error == Errors.KAFKA_STORAGE_ERROR
    assert offline == ["/d"] and channel.offline_log_dirs == ["/d"]
    ran: list[bool] = []
    with pytest.raises(KafkaStorageError, match="is offline"), channel.guard("/d", "reading t-0"):
        ran.append(True)
    assert not ran
    with channel.guard("/other", "reading u-0"):
        ran.append(True)
    assert ran == [True]


def test_out_of_file_descriptors_refuses_the_operation_but_keeps_the_dir_online() -> None:
    channel = LogDirFailureChannel()
    with pytest.raises(KafkaStorageError), channel.guard("/d", "rolling t-0"):
        raise OSError(errno.EMFILE, "Too many open files")
    assert not channel.has_offline_log_dir("/d") and channel.transient_failures == 1
    with channel.guard("/d", "rolling t-0"):
        pass
    assert channel.transient_failures == 0


def test_a_write_that_fails_part_way_is_cut_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(3), leader_epoch=0)
    before = read_all(log)
    real_pwrite = os.pwrite

    def half_then_full(fd: int, data: bytes | memoryview, offset: int) -> int:
        if len(data) > 20:
            return real_pwrite(fd, bytes(data[:20]), offset)  # a short write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", half_then_full)
    with pytest.raises(KafkaStorageError, match="No space left on device"):
        log.append_as_leader(batch(3), leader_epoch=0)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert log.failure_channel.has_offline_log_dir(str(tmp_path))
    with pytest.raises(KafkaStorageError, match="offline"):
        log.append_as_leader(batch(1), leader_epoch=0)
    assert (tmp_path / "t-0" / "00000000000000000000.log").read_bytes() == before
