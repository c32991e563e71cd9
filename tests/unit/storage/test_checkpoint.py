from __future__ import annotations

from pathlib import Path

import pytest

from storage.checkpoint import CheckpointError, EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    offsets = {("orders", 0): 17, ("orders", 1): 0, ("audit-log", 12): 123456789012}
    OffsetCheckpointFile(path).write(offsets)
    assert OffsetCheckpointFile(path).read() == offsets
    lines = path.read_text().splitlines()
    assert lines[:2] == ["0", "3"]
    assert sorted(lines[2:]) == sorted(["orders 0 17", "orders 1 0", "audit-log 12 123456789012"])


def test_offset_checkpoint_missing_file_reads_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}


def test_offset_checkpoint_empty_file_reads_empty(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("")
    assert OffsetCheckpointFile(path).read() == {}


def test_offset_checkpoint_empty_map(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    OffsetCheckpointFile(path).write({})
    assert path.read_text() == "0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


def test_offset_checkpoint_overwrites(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({("a", 0): 1, ("b", 0): 2})
    cp.write({("a", 0): 5})
    assert cp.read() == {("a", 0): 5}


def test_offset_checkpoint_accepts_kafka_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n2\ntp1  0  1\ntp1\t1\t2\n")
    assert OffsetCheckpointFile(path).read() == {("tp1", 0): 1, ("tp1", 1): 2}


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("1\n0\n", 1),  # unknown version
        ("x\n0\n", 1),
        ("0\ntwo\n", 2),
        ("0\n1\norders 0\n", 3),  # too few fields
        ("0\n1\norders zero 5\n", 3),
        ("0\n1\norders 0 5 extra\n", 3),
        ("0\n2\norders 0 abc\n", 3),
        ("0\n2\norders 0 5\n", None),  # count mismatch
        ("0\n0\norders 0 5\n", None),
        ("0\n-1\n", 2),
    ],
)
def test_offset_checkpoint_malformed(tmp_path: Path, content: str, line: int | None) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(content)
    with pytest.raises(CheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert info.value.path == path
    assert info.value.line_number == line
    assert str(path) in str(info.value)


def test_offset_checkpoint_rejects_unwritable_topic(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({("a b", 0): 1})


def test_write_leaves_no_tmp_file(tmp_path: Path) -> None:
    OffsetCheckpointFile(tmp_path / "cp").write({("t", 0): 1})
    LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").write([EpochEntry(1, 0)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp", "leader-epoch-checkpoint"]


def test_write_is_atomic_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cp"
    cp = OffsetCheckpointFile(path)
    cp.write({("t", 0): 1})

    def fail(*args: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr("storage.checkpoint.os.replace", fail)
    with pytest.raises(OSError):
        cp.write({("t", 0): 2})
    # The old content is intact: the new one only ever went to the temp file.
    assert cp.read() == {("t", 0): 1}


def test_stale_tmp_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    (tmp_path / "cp.tmp").write_text("garbage")
    cp = OffsetCheckpointFile(tmp_path / "cp")
    assert cp.read() == {}
    cp.write({("t", 0): 3})
    assert cp.read() == {("t", 0): 3}
    assert not (tmp_path / "cp.tmp").exists()


def test_leader_epoch_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    entries = [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(7, 9000)]
    LeaderEpochCheckpointFile(path).write(entries)
    assert path.read_text() == "0\n3\n0 0\n3 120\n7 9000\n"
    assert LeaderEpochCheckpointFile(path).read() == entries


def test_leader_epoch_checkpoint_missing_reads_empty(tmp_path: Path) -> None:
    assert LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read() == []


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("0\n1\n3\n", 3),
        ("0\n1\n3 4 5\n", 3),
        ("0\n1\nthree 4\n", 3),
        ("0\n1\n3 four\n", 3),
        ("7\n0\n", 1),
        ("0\n3\n1 0\n", None),
    ],
)
def test_leader_epoch_checkpoint_malformed(tmp_path: Path, content: str, line: int | None) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(content)
    with pytest.raises(CheckpointError) as info:
        LeaderEpochCheckpointFile(path).read()
    assert info.value.line_number == line
    assert "leader-epoch-checkpoint" in str(info.value)


def test_not_utf8_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\n\xff\xfe 0 1\n")
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(path).read()
