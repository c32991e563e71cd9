"""The simulation's own parts: the crash-faithful file layer and the online invariants."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from lab.sim.environment import CrashFiles
from lab.sim.invariants import AckedBatch, OnlineInvariants
from protocol import build_simple_batch, read_header


def _write(path: Path, data: bytes, *, sync: bool, files: CrashFiles) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        if sync:
            files.fsync(fd)
    finally:
        os.close(fd)


def test_a_kill_keeps_what_was_fsynced_and_loses_the_rest(tmp_path: Path) -> None:
    files = CrashFiles(random.Random(1))
    files.rng.random = lambda: 1.0  # type: ignore[method-assign]  # no torn tail in this test
    segment = tmp_path / "00000000000000000000.log"
    _write(segment, b"synced", sync=True, files=files)
    _write(segment, b"+lost", sync=False, files=files)
    never = tmp_path / "never-synced"
    _write(never, b"gone", sync=False, files=files)
    tmp = tmp_path / "checkpoint.tmp"
    _write(tmp, b"renamed", sync=True, files=files)
    files.replace(tmp, tmp_path / "checkpoint")
    journal = tmp_path / "events.jsonl"
    _write(journal, b"{}\n", sync=False, files=files)

    assert files.crash(tmp_path) == 2
    assert segment.read_bytes() == b"synced"
    assert never.read_bytes() == b""
    assert (tmp_path / "checkpoint").read_bytes() == b"renamed"
    assert journal.read_bytes() == b"{}\n"  # the observer's record survives


def test_a_torn_tail_is_a_prefix_of_what_was_written(tmp_path: Path) -> None:
    files = CrashFiles(random.Random(3))
    files.rng.random = lambda: 0.0  # type: ignore[method-assign]  # always tear
    path = tmp_path / "seg.log"
    _write(path, b"abc", sync=True, files=files)
    _write(path, b"defgh", sync=False, files=files)
    files.crash(tmp_path)
    kept = path.read_bytes()
    assert kept.startswith(b"abc") and b"abcdefgh".startswith(kept) and len(kept) > 3


@dataclass
class FakeLog:
    data: bytes = b""

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def log_end_offset(self) -> int:
        end, pos = 0, 0
        while pos < len(self.data):
            h = read_header(self.data, pos)
            end, pos = h.next_offset, pos + h.size
        return end

    def read(self, offset: int, max_bytes: int) -> bytes:
        pos = 0
        while pos < len(self.data):
            h = read_header(self.data, pos)
            if h.next_offset > offset:
                return self.data[pos:]
            pos += h.size
        return b""


@dataclass
class FakePartition:
    is_leader: bool
    leader_epoch: int
    high_watermark: int
    log: FakeLog = field(default_factory=FakeLog)


@dataclass
class FakeReplicaManager:
    partitions: dict[tuple[str, int], FakePartition]


def test_a_high_watermark_moving_back_within_an_epoch_is_a_violation() -> None:
    inv = OnlineInvariants()
    rm = FakeReplicaManager({("t", 0): FakePartition(True, 3, 10)})
    inv.step(0, [(1, rm)])
    rm.partitions[("t", 0)].high_watermark = 12
    inv.step(50, [(1, rm)])
    assert inv.violations == []
    rm.partitions[("t", 0)].high_watermark = 8
    inv.step(100, [(1, rm)])
    assert [v.invariant for v in inv.violations] == ["hw_monotonic"]


def test_two_leaders_of_one_epoch_are_a_violation() -> None:
    inv = OnlineInvariants()
    inv.step(0, [(1, FakeReplicaManager({("t", 0): FakePartition(True, 3, 0)}))])
    inv.step(50, [(2, FakeReplicaManager({("t", 0): FakePartition(True, 3, 0)}))])
    assert [v.invariant for v in inv.violations] == ["one_leader_per_epoch"]


def test_a_lost_acknowledged_batch_and_diverged_replicas_are_found() -> None:
    a = build_simple_batch([b"a", b"b"], base_offset=0)
    b = build_simple_batch([b"c"], base_offset=2)
    other = build_simple_batch([b"X"], base_offset=2)
    leader = FakePartition(True, 5, 3, FakeLog(a + other))
    follower = FakePartition(False, 5, 3, FakeLog(a + b))
    acked = [
        AckedBatch("t", 0, 0, 1, read_header(a, 0).crc),
        AckedBatch("t", 0, 2, 2, read_header(b, 0).crc),
    ]
    inv = OnlineInvariants()
    inv.final(
        0, [(1, FakeReplicaManager({("t", 0): leader})), (2, FakeReplicaManager({("t", 0): follower}))], acked
    )
    assert sorted(v.invariant for v in inv.violations) == ["acked_not_lost", "replicas_match"]
    assert "offsets 2..2" in str(next(v for v in inv.violations if v.invariant == "acked_not_lost"))
