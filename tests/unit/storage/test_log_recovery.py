"""Start-up recovery: torn tails, flipped bytes, missing or bad indexes, stale epoch checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from storage.log import Log

from .support import batch, offsets, open_log, read_all


def build(directory: Path, batches: int = 40) -> tuple[Log, bytes]:
    log = open_log(directory)
    for i in range(batches):
        log.append_as_leader(batch(2, 50, tag=i), leader_epoch=1 + i // 10)
    data = read_all(log)
    log.close()
    return log, data


def last_log_file(directory: Path) -> Path:
    return sorted(directory.glob("*.log"))[-1]


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00",
        b"\xde\xad\xbe\xef" * 3,
        batch(3, 40)[:20],  # less than a header
        batch(3, 40)[:70],  # header and a bit
        batch(3, 40)[:-1],  # all but the last byte
    ],
    ids=["one-byte", "junk", "partial-header", "partial-batch", "all-but-one-byte"],
)
def test_torn_tail_is_cut(tmp_path: Path, garbage: bytes) -> None:
    directory = tmp_path / "t-0"
    _, data = build(directory)
    with open(last_log_file(directory), "ab") as f:
        f.write(garbage)
    log = open_log(directory)
    assert log.log_end_offset == 80
    assert read_all(log) == data
    log.append_as_leader(batch(1), leader_epoch=4)
    assert offsets(read_all(log))[-1] == (80, 80)


def test_flipped_byte_in_last_batch_cuts_that_batch(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _, data = build(directory)
    path = last_log_file(directory)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x01
    path.write_bytes(bytes(raw))
    last_batch = len(batch(2, 50))
    log = open_log(directory)
    assert log.log_end_offset == 78
    assert read_all(log) == data[:-last_batch]


def test_corrupt_middle_segment_drops_everything_after_it(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    first, data = build(directory)
    files = sorted(directory.glob("*.log"))
    assert len(files) >= 4
    bases = [s.base_offset for s in first.segments]
    raw = bytearray(files[1].read_bytes())
    size = len(batch(2, 50))
    raw[3 * size + 70] ^= 0xFF  # inside the fourth batch of the second segment
    files[1].write_bytes(bytes(raw))
    log = open_log(directory)
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert log.log_end_offset == bases[1] + 6
    assert read_all(log) == data[: len(files[0].read_bytes()) + 3 * size]
    assert sorted(directory.glob("*.log")) == files[:2]
    assert len(list(directory.glob("*.index"))) == 2
    # The epoch cache no longer names epochs that started after the cut.
    latest = log.leader_epoch_cache.latest_entry()
    assert latest is not None and latest.start_offset < log.log_end_offset


def test_segments_below_recovery_point_are_not_rescanned(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    first, _data = build(directory)
    files = sorted(directory.glob("*.log"))
    bases = [s.base_offset for s in first.segments]
    # Corrupt a record (not a header) in the first segment: only a CRC check could see it.
    raw = bytearray(files[0].read_bytes())
    raw[100] ^= 0xFF
    files[0].write_bytes(bytes(raw))
    log = open_log(directory, recovery_point=bases[-1])
    assert log.log_end_offset == 80  # trusted: Kafka skips flushed segments too
    log.close()
    log = open_log(directory, recovery_point=0)
    assert log.log_end_offset == 0  # full recovery finds it in the first batch and drops the rest
    assert read_all(log) == b""


@pytest.mark.parametrize("damage", ["missing", "truncated", "garbage", "wrong-offsets", "beyond-log"])
def test_bad_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "t-0"
    first, data = build(directory)
    entries = [s.index.entries for s in first.segments]
    bases = [s.base_offset for s in first.segments]
    index = sorted(directory.glob("*.index"))[0]
    assert entries[0], "the first segment should have index entries"
    if damage == "missing":
        index.unlink()
    elif damage == "truncated":
        index.write_bytes(index.read_bytes()[:-3])
    elif damage == "garbage":
        index.write_bytes(b"\xff" * 16)
    elif damage == "wrong-offsets":
        raw = bytearray(index.read_bytes())
        raw[-5] ^= 0x01  # last entry's relative offset off by one: points at the wrong batch
        index.write_bytes(bytes(raw))
    elif damage == "beyond-log":
        index.write_bytes(index.read_bytes() + (500).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    log = open_log(directory, recovery_point=bases[-1])
    assert [s.index.entries for s in log.segments] == entries
    assert read_all(log) == data
    for offset in range(0, 80, 7):
        assert offsets(log.read(offset, 1))[0][0] == offset - offset % 2


def test_stale_epoch_checkpoint_is_trimmed_to_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_as_leader(batch(4), leader_epoch=1)
    log.append_as_leader(batch(4), leader_epoch=2)
    log.close()
    # The checkpoint names an epoch past the data, e.g. written before a torn tail was cut.
    LeaderEpochCheckpointFile(directory / "leader-epoch-checkpoint").write(
        [EpochEntry(0, 0), EpochEntry(1, 0), EpochEntry(2, 4), EpochEntry(3, 8), EpochEntry(4, 12)]
    )
    log = open_log(directory, log_start_offset=2, recovery_point=8)
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 2), EpochEntry(2, 4)]
    assert LeaderEpochCheckpointFile(directory / "leader-epoch-checkpoint").read() == [
        EpochEntry(1, 2),
        EpochEntry(2, 4),
    ]


def test_missing_epoch_checkpoint_is_rebuilt_from_recovered_batches(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    build(directory)
    (directory / "leader-epoch-checkpoint").unlink()
    log = open_log(directory, recovery_point=0)
    assert log.leader_epoch_cache.entries() == [EpochEntry(e, (e - 1) * 20) for e in (1, 2, 3, 4)]


def test_orphan_index_is_removed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    build(directory, batches=2)
    (directory / "00000000000000099999.index").write_bytes(b"\x00" * 8)
    open_log(directory)
    assert not (directory / "00000000000000099999.index").exists()


def test_entire_segment_of_garbage(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _, data = build(directory)
    last = last_log_file(directory)
    base = int(last.name[:20])
    last.write_bytes(b"\x01" * 5000)
    log = open_log(directory)
    assert log.log_end_offset == base
    assert read_all(log) == data[: len(data) - (80 - base) // 2 * len(batch(2, 50))]


def _flip(path: Path, position: int, mask: int = 0x01) -> None:
    raw = bytearray(path.read_bytes())
    raw[position] ^= mask
    path.write_bytes(bytes(raw))


def test_after_a_clean_shutdown_nothing_is_recovered(tmp_path: Path) -> None:
    """Kafka's clean-shutdown marker: a flipped record byte in the active segment is not a reason to cut."""
    directory = tmp_path / "t-0"
    build(directory)
    _flip(last_log_file(directory), len(batch(2, 50)) + 70)  # inside the second batch, under the CRC
    log = Log.open(directory, "t", 0, open_log(tmp_path / "x-0").config, had_clean_shutdown=True)
    assert log.log_end_offset == 80
    log.close()
    assert open_log(directory).log_end_offset < 80  # the same bytes after a crash are recovered and cut


def test_base_offset_that_does_not_follow_on_is_cut_by_recovery(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, _ = build(directory)
    segment = log.segments[-1]
    size = len(batch(2, 50))
    _flip(last_log_file(directory), 2 * size + 7)  # lowest byte of the third batch's base offset
    again = open_log(directory)
    assert again.log_end_offset == segment.base_offset + 4


def test_base_offset_that_does_not_follow_on_is_never_served(tmp_path: Path) -> None:
    """After a clean stop there is no recovery; reads that meet the damaged batch refuse to serve it."""
    from protocol.errors import CorruptRecordError

    directory = tmp_path / "t-0"
    log, _ = build(directory)
    base = log.segments[-1].base_offset
    size = len(batch(2, 50))
    _flip(last_log_file(directory), 2 * size + 7)
    again = Log.open(directory, "t", 0, log.config, had_clean_shutdown=True)
    before = again.read(base, 2 * size)
    assert offsets(before) == [(base, base + 1), (base + 2, base + 3)]
    assert again.read(base, 10_000) == before  # a read stops before the damaged batch
    assert again.read(base, 10_000, max_offset=base + 6) == before
    with pytest.raises(CorruptRecordError, match="expected"):
        again.read(base + 4, 10_000)
