"""Leader-epoch checkpoints written in one ``group_commit`` (one LEADER_AND_ISR) reach the disk together when
it ends, through the same write-rename protocol as a single write; real files in ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from storage import checkpoint
from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile, group_commit


def files(tmp_path: Path, count: int) -> list[LeaderEpochCheckpointFile]:
    out = []
    for i in range(count):
        directory = tmp_path / f"t-{i}"
        directory.mkdir()
        out.append(LeaderEpochCheckpointFile(directory / "leader-epoch-checkpoint"))
    return out


@pytest.mark.parametrize("count", [2, 12])  # one by one, and with one filesystem sync for all
def test_writes_in_a_group_commit_land_together_when_it_ends(tmp_path: Path, count: int) -> None:
    cps = files(tmp_path, count)
    for cp in cps:
        cp.write([EpochEntry(0, 0)])
    with group_commit():
        for i, cp in enumerate(cps):
            cp.write([EpochEntry(0, 0), EpochEntry(1, i)])
            with group_commit():  # nested: joins the outer one
                cp.write([EpochEntry(0, 0), EpochEntry(2, i)])
        assert all(cp.read() == [EpochEntry(0, 0)] for cp in cps)
    assert [cp.read() for cp in cps] == [[EpochEntry(0, 0), EpochEntry(2, i)] for i in range(count)]
    assert not list(tmp_path.glob("*/*.tmp"))
    # Outside a group commit a write is durable at once, as before.
    cps[0].write([EpochEntry(5, 9)])
    assert cps[0].read() == [EpochEntry(5, 9)]


def test_a_checkpoint_whose_directory_went_away_is_skipped(tmp_path: Path) -> None:
    cps = files(tmp_path, 6)
    with group_commit():
        for cp in cps:
            cp.write([EpochEntry(3, 7)])
        cps[0].path.parent.rmdir()
    assert not cps[0].path.parent.exists()
    assert all(cp.read() == [EpochEntry(3, 7)] for cp in cps[1:])


def test_without_syncfs_the_files_are_written_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where the C library has no syncfs (not Linux), the fallback is the single-file protocol.
    monkeypatch.setattr(checkpoint, "_syncfs", None)
    cps = files(tmp_path, 8)
    with group_commit():
        for cp in cps:
            cp.write([EpochEntry(4, 1)])
    assert all(cp.read() == [EpochEntry(4, 1)] for cp in cps)


async def test_a_task_started_inside_a_group_commit_writes_for_itself_after_it(tmp_path: Path) -> None:
    # A LEADER_AND_ISR starts replica fetchers inside its group commit; trio copies the context into the
    # new task, so the task must not keep deferring its writes to a group commit that has ended.
    [cp] = files(tmp_path, 1)
    started = trio.Event()
    go_on = trio.Event()

    async def fetcher() -> None:
        started.set()
        await go_on.wait()
        cp.write([EpochEntry(0, 0), EpochEntry(3, 40)])

    async with trio.open_nursery() as nursery:
        with group_commit():
            nursery.start_soon(fetcher)
        await started.wait()
        go_on.set()
    assert cp.read() == [EpochEntry(0, 0), EpochEntry(3, 40)]
