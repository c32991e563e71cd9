"""The sparse offset index of one segment, ``<20-digit base offset>.index``: Kafka's ``OffsetIndex``.

File format (Kafka's; docs/storage.md): a flat array of 8-byte entries and nothing else::

    relative_offset  i32 big-endian   a batch's *last* offset minus the segment's base offset
    position         i32 big-endian   byte position of that batch in the ``.log`` file

Entry *i* says "the batch that starts at byte ``position`` ends at offset ``segment_base +
relative_offset``", so every offset after it is at ``position`` or later. Both columns strictly increase.
Entries are sparse: the segment adds one for a batch once more than ``log.index.interval.bytes`` (default
4096) have been appended since the previous entry, so finding any offset is a binary search here plus a scan
of at most about that many bytes of batch headers in the log. Unlike Kafka's the file is neither
memory-mapped nor pre-allocated: it holds exactly its entries (Kafka trims its file to them when a segment
is closed or rolled, so the bytes are the same).

The index is derived data. Appends write entries through to the OS (no fsync); ``flush`` fsyncs.
On start-up a segment whose index is missing or fails :meth:`OffsetIndex.sanity_check` rebuilds it from
the log (see ``segment.py``).
"""

from __future__ import annotations

import bisect
import os
import sys
from array import array
from pathlib import Path

from protocol import environment

ENTRY_SIZE = 8
MAX_RELATIVE = 2**31 - 1  # i32: the largest relative offset or position an entry can hold


class OffsetIndex:
    """Sparse (offset -> position) map of one segment, kept in memory and mirrored to its file."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._rel = array("i")  # last offsets of batches, relative to base_offset
        self._positions = array("i")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._load()

    def _load(self) -> None:
        size = os.fstat(self._fd).st_size
        usable = size - size % ENTRY_SIZE
        raw = os.pread(self._fd, usable, 0) if usable else b""
        words = array("i")
        words.frombytes(raw)
        if sys.byteorder == "little":
            words.byteswap()
        self._rel = words[0::2]
        self._positions = words[1::2]
        self._file_entries = usable // ENTRY_SIZE
        self._torn_bytes = size - usable

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def entries(self) -> list[tuple[int, int]]:
        """All (absolute offset, position) pairs; for tools and tests."""
        base = self.base_offset
        return [(base + r, p) for r, p in zip(self._rel, self._positions, strict=True)]

    def _entry(self, i: int) -> tuple[int, int]:
        return self.base_offset + self._rel[i], self._positions[i]

    def last_entry(self) -> tuple[int, int]:
        """The last entry, or (base_offset, 0) when there is none."""
        return self._entry(-1) if self._rel else (self.base_offset, 0)

    def lookup_entry(self, offset: int) -> tuple[int, int] | None:
        """The last entry with offset <= ``offset`` (a batch ending at or before it), or None."""
        rel = offset - self.base_offset
        if rel < 0 or not self._rel:
            return None
        i = bisect.bisect_right(self._rel, min(rel, MAX_RELATIVE))
        return self._entry(i - 1) if i else None

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry with offset <= ``offset``: where a scan for ``offset`` can start.

        With no such entry, ``(base_offset, 0)``: the start of the segment.
        """
        rel = offset - self.base_offset
        if rel < 0:
            return self.base_offset, 0
        i = bisect.bisect_right(self._rel, min(rel, MAX_RELATIVE))
        return self._entry(i - 1) if i else (self.base_offset, 0)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """The last entry with position <= ``position`` (or ``(base_offset, 0)``)."""
        i = bisect.bisect_right(self._positions, min(max(position, 0), MAX_RELATIVE))
        return self._entry(i - 1) if i else (self.base_offset, 0)

    def sanity_check(self, log_size: int) -> str | None:
        """Describe why the index cannot be trusted for a log of ``log_size`` bytes, or None if it can.

        The caller still has to check that the last entry points at a batch with that last offset.
        """
        if self._torn_bytes:
            return f"size is not a multiple of {ENTRY_SIZE} ({self._torn_bytes} trailing bytes)"
        for name, column in (("offsets", self._rel), ("positions", self._positions)):
            as_list = column.tolist()
            if as_list and as_list[0] < 0:
                return f"{name} are negative"
            if as_list != sorted(as_list) or len(set(as_list)) != len(as_list):
                return f"{name} are not strictly increasing"
        if self._positions and self._positions[-1] >= log_size:
            return f"last entry points at byte {self._positions[-1]} but the log has {log_size} bytes"
        return None

    # ------------------------------------------------------------------ updates

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must grow."""
        rel = offset - self.base_offset
        if not 0 <= rel <= MAX_RELATIVE or not 0 <= position <= MAX_RELATIVE:
            raise ValueError(
                f"index entry ({offset}, {position}) out of range for segment {self.base_offset}"
            )
        if self._rel and (rel <= self._rel[-1] or position <= self._positions[-1]):
            raise ValueError(
                f"index entry ({offset}, {position}) does not follow {self.last_entry()} in {self.path}"
            )
        self._rel.append(rel)
        self._positions.append(position)
        entry = rel.to_bytes(4, "big", signed=True) + position.to_bytes(4, "big", signed=True)
        os.pwrite(self._fd, entry, self._file_entries * ENTRY_SIZE)
        self._file_entries += 1

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        rel = offset - self.base_offset
        keep = 0 if rel <= 0 else bisect.bisect_left(self._rel, min(rel, MAX_RELATIVE + 1))
        self._truncate_entries(keep)

    def truncate_to_position(self, position: int) -> None:
        """Remove entries with position >= ``position`` (the log was cut there)."""
        keep = 0 if position <= 0 else bisect.bisect_left(self._positions, min(position, MAX_RELATIVE + 1))
        self._truncate_entries(keep)

    def _truncate_entries(self, keep: int) -> None:
        if keep < len(self._rel) or self._torn_bytes:
            del self._rel[keep:]
            del self._positions[keep:]
            os.ftruncate(self._fd, keep * ENTRY_SIZE)
            self._file_entries = keep
            self._torn_bytes = 0

    def reset(self) -> None:
        """Remove every entry (before a rebuild)."""
        self._truncate_entries(0)

    def flush(self) -> None:
        environment.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
