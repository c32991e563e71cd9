"""Kafka's text checkpoint files, replaced atomically.

Every checkpoint has the same shape (Kafka's ``CheckpointFile``)::

    0                 <- format version
    2                 <- number of entries that follow
    <entry line>
    <entry line>

``OffsetCheckpointFile`` entries are ``<topic> <partition> <offset>`` (used for
``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint``); ``LeaderEpochCheckpointFile`` entries are ``<epoch> <start_offset>``
(``leader-epoch-checkpoint`` inside a partition directory).

A write goes to ``<file>.tmp``, which is flushed and fsynced, renamed over the file, and then the
directory is fsynced so the rename itself survives a crash. A reader therefore sees either the old or
the new content, never a mix. Leader-epoch checkpoints written inside :func:`group_commit` (one
LEADER_AND_ISR) are made durable together, with one filesystem sync before and one after the renames.
A missing or empty file reads as no entries (as Kafka's reader does); anything else that does not parse
raises :class:`CheckpointError` naming the file and the line.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from protocol import environment

CURRENT_VERSION = 0

T = TypeVar("T")


class CheckpointError(Exception):
    """A checkpoint file exists but its content is not a valid checkpoint."""

    def __init__(self, path: Path, line_number: int | None, message: str) -> None:
        where = f"{path}:{line_number}" if line_number is not None else str(path)
        super().__init__(f"malformed checkpoint file {where}: {message}")
        self.path = path
        self.line_number = line_number


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """The first offset written under a leader epoch."""

    epoch: int
    start_offset: int

    def __repr__(self) -> str:
        return f"EpochEntry(epoch={self.epoch}, start_offset={self.start_offset})"


def fsync_directory(directory: Path) -> None:
    """Make a rename or create inside ``directory`` durable (no-op where directories can't be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        environment.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str, tmp_suffix: str = ".tmp") -> None:
    """Replace ``path`` with ``text``: write ``<path>.tmp``, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + tmp_suffix)
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        environment.fsync(f.fileno())
    environment.replace(tmp, path)
    fsync_directory(path.parent)


class _GroupCommit:
    """The leader-epoch checkpoints written inside one ``group_commit`` (path -> text), waiting to be made
    durable together. ``open`` is False once it ended: a task started inside it (a replica fetcher that a
    LEADER_AND_ISR starts) inherits the context variable, and its later writes must not wait for a group
    commit that is over (they would never reach the disk)."""

    __slots__ = ("files", "open")

    def __init__(self) -> None:
        self.files: dict[Path, str] = {}
        self.open = True


_deferred: ContextVar[_GroupCommit | None] = ContextVar("deferred_checkpoints", default=None)
# Checkpoint texts already made durable (by ``write_all_atomically`` run in a worker thread before a
# LEADER_AND_ISR is applied): a group commit inside ``already_durable`` does not write them again.
_durable: ContextVar[Mapping[Path, str] | None] = ContextVar("durable_checkpoints", default=None)


def _open_group_commit() -> _GroupCommit | None:
    batch = _deferred.get()
    return batch if batch is not None and batch.open else None


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int], int], fn)


_syncfs = _load_syncfs() if sys.platform.startswith("linux") else None

# Below this many files a group commit is not worth a filesystem-wide sync: they are written one by one.
GROUP_COMMIT_MIN_FILES = 4


@contextmanager
def group_commit() -> Iterator[None]:
    """Leader-epoch checkpoints written inside are made durable together when it ends, with the same
    guarantee as ``write_atomically`` (the new text is durable before it replaces the old, and the rename is
    durable before this returns), but two ``syncfs`` calls for all of them instead of two fsyncs each: a
    LEADER_AND_ISR that moves 150 partitions pays for two syncs, not 300 (Kafka batches these flushes too).
    Nested uses join the outermost. Where ``syncfs`` is missing the files are written one by one."""
    if _open_group_commit() is not None:
        yield
        return
    batch = _GroupCommit()
    token = _deferred.set(batch)
    try:
        yield
    finally:
        batch.open = False
        _deferred.reset(token)
        durable = _durable.get() or {}
        write_all_atomically({p: t for p, t in batch.files.items() if durable.get(p) != t})


@contextmanager
def already_durable(files: Mapping[Path, str]) -> Iterator[None]:
    """Inside, a group commit skips a checkpoint whose text is ``files[path]``: it is on disk, durable,
    already (written with ``write_all_atomically`` before, off the event loop)."""
    token = _durable.set(files)
    try:
        yield
    finally:
        _durable.reset(token)


def write_all_atomically(files: Mapping[Path, str], tmp_suffix: str = ".tmp") -> None:
    """``write_atomically`` for several files at once: every ``<path><tmp_suffix>`` is written, one
    ``syncfs`` per filesystem makes them durable, all are renamed over their files, and a second ``syncfs``
    makes the renames durable. A file whose directory is gone (its log was deleted meanwhile) is skipped.
    Safe in a worker thread (a suffix of its own keeps it off the temp files of the event loop's writes)."""
    live = {path: text for path, text in files.items() if path.parent.is_dir()}
    if _syncfs is None or len(live) < GROUP_COMMIT_MIN_FILES:
        for path, text in live.items():
            write_atomically(path, text, tmp_suffix)
        return
    devices: dict[int, Path] = {}
    renames: list[tuple[Path, Path]] = []
    for path, text in live.items():
        tmp = path.with_name(path.name + tmp_suffix)
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            devices.setdefault(os.fstat(f.fileno()).st_dev, path.parent)
        renames.append((tmp, path))
    _sync_filesystems(devices.values())
    for tmp, path in renames:
        environment.replace(tmp, path)
    _sync_filesystems(devices.values())


def _sync_filesystems(directories: Iterable[Path]) -> None:
    assert _syncfs is not None
    for directory in directories:
        fd = os.open(directory, os.O_RDONLY)
        try:
            if _syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs failed: {os.strerror(err)}", str(directory))
        finally:
            os.close(fd)


def _format(lines: Iterable[str], count: int) -> str:
    body = "".join(line + "\n" for line in lines)
    return f"{CURRENT_VERSION}\n{count}\n{body}"


def _parse_int(path: Path, line_number: int, text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CheckpointError(path, line_number, f"expected {what}, got {text!r}") from None


def _read_entries(path: Path, parse_entry: Callable[[int, list[str]], T]) -> list[T]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as e:
        raise CheckpointError(path, None, f"not UTF-8 text ({e})") from None
    lines = text.splitlines()
    if not lines:
        return []
    version = _parse_int(path, 1, lines[0].strip(), "a version number")
    if version != CURRENT_VERSION:
        raise CheckpointError(path, 1, f"unrecognised version {version}, expected {CURRENT_VERSION}")
    if len(lines) < 2:
        return []
    expected = _parse_int(path, 2, lines[1].strip(), "an entry count")
    if expected < 0:
        raise CheckpointError(path, 2, f"negative entry count {expected}")
    entries: list[T] = []
    for index, line in enumerate(lines[2:], start=3):
        entries.append(parse_entry(index, line.split()))
    if len(entries) != expected:
        raise CheckpointError(path, None, f"expected {expected} entries but found {len(entries)}")
    return entries


class OffsetCheckpointFile:
    """A map of (topic, partition) -> offset, e.g. ``replication-offset-checkpoint``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        lines = []
        for (topic, partition), offset in offsets.items():
            if not topic or any(c.isspace() for c in topic):
                raise ValueError(f"topic name {topic!r} cannot be written to {self.path}")
            lines.append(f"{topic} {partition} {offset}")
        write_atomically(self.path, _format(lines, len(lines)))

    def read(self) -> dict[tuple[str, int], int]:
        def parse(line_number: int, parts: list[str]) -> tuple[tuple[str, int], int]:
            if len(parts) != 3:
                raise CheckpointError(
                    self.path,
                    line_number,
                    f"expected '<topic> <partition> <offset>', got {' '.join(parts)!r}",
                )
            partition = _parse_int(self.path, line_number, parts[1], "a partition number")
            offset = _parse_int(self.path, line_number, parts[2], "an offset")
            return (parts[0], partition), offset

        return dict(_read_entries(self.path, parse))


class LeaderEpochCheckpointFile:
    """The ``leader-epoch-checkpoint`` of one partition: ``<epoch> <start_offset>`` lines."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @staticmethod
    def text(entries: Sequence[EpochEntry]) -> str:
        """The file's text for ``entries``."""
        lines = [f"{e.epoch} {e.start_offset}" for e in entries]
        return _format(lines, len(lines))

    def write(self, entries: Sequence[EpochEntry]) -> None:
        text = self.text(entries)
        batch = _open_group_commit()
        if batch is not None:
            batch.files[self.path] = text
            return
        write_atomically(self.path, text)

    def read(self) -> list[EpochEntry]:
        def parse(line_number: int, parts: list[str]) -> EpochEntry:
            if len(parts) != 2:
                raise CheckpointError(
                    self.path, line_number, f"expected '<epoch> <start_offset>', got {' '.join(parts)!r}"
                )
            epoch = _parse_int(self.path, line_number, parts[0], "an epoch")
            start = _parse_int(self.path, line_number, parts[1], "a start offset")
            return EpochEntry(epoch, start)

        return _read_entries(self.path, parse)
