"""The time index of one segment, ``<20-digit base offset>.timeindex``: Kafka's ``TimeIndex``.

File format (Kafka's): a flat array of 12-byte entries and nothing else::

    timestamp        i64 big-endian   the largest batch max_timestamp in the segment so far
    relative_offset  i32 big-endian   the last offset of the batch that first had it, minus the segment's
                                      base offset

Entries are written beside the offset index's (every ``log.index.interval.bytes``), and only when the
segment's largest timestamp has grown since the last entry, so both columns strictly increase; the segment
adds a last one when it stops being the active segment (Kafka's ``onBecomeInactiveSegment``). An entry
``(T, O)`` says: every record before the batch ending at ``O`` has a timestamp below ``T``. So the first
record with a timestamp >= t is found by the last entry with ``T <= t``, the offset index for its ``O``,
and a scan of the batches from there (``LogSegment.find_offset_by_timestamp``).

Derived data, like the offset index: rebuilt from the log with it.
"""

from __future__ import annotations

import bisect
import itertools
import os
import struct
from pathlib import Path

from protocol import environment

ENTRY_SIZE = 12
_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1


class TimeIndex:
    """Sparse (timestamp -> offset) map of one segment, kept in memory and mirrored to its file."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._timestamps: list[int] = []
        self._rel: list[int] = []
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        usable = size - size % ENTRY_SIZE
        raw = os.pread(self._fd, usable, 0) if usable else b""
        for ts, rel in _ENTRY.iter_unpack(raw):
            self._timestamps.append(ts)
            self._rel.append(rel)
        self._torn_bytes = size - usable

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def entries(self) -> list[tuple[int, int]]:
        """All (timestamp, absolute offset) pairs; for tools and tests."""
        return [(t, self.base_offset + r) for t, r in zip(self._timestamps, self._rel, strict=True)]

    def last_entry(self) -> tuple[int, int]:
        """The last entry, or Kafka's empty one ``(-1, base_offset)``."""
        if not self._timestamps:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[-1], self.base_offset + self._rel[-1]

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry with timestamp <= ``timestamp``, or ``(-1, base_offset)``."""
        i = bisect.bisect_right(self._timestamps, timestamp)
        if not i:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[i - 1], self.base_offset + self._rel[i - 1]

    def sanity_check(self) -> str | None:
        if self._torn_bytes:
            return f"size is not a multiple of {ENTRY_SIZE} ({self._torn_bytes} trailing bytes)"
        for name, column in (("timestamps", self._timestamps), ("offsets", self._rel)):
            if any(b <= a for a, b in itertools.pairwise(column)):
                return f"{name} are not strictly increasing"
        return None

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is larger than the last entry's (Kafka's rule)."""
        last_ts, last_offset = self.last_entry()
        if timestamp <= last_ts or (self._timestamps and offset <= last_offset):
            return
        rel = offset - self.base_offset
        if not 0 <= rel <= 2**31 - 1:
            raise ValueError(f"time index entry offset {offset} out of range for segment {self.base_offset}")
        self._timestamps.append(timestamp)
        self._rel.append(rel)
        os.pwrite(self._fd, _ENTRY.pack(timestamp, rel), (len(self._timestamps) - 1) * ENTRY_SIZE)

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        keep = bisect.bisect_left(self._rel, offset - self.base_offset)
        if keep < len(self._rel) or self._torn_bytes:
            del self._timestamps[keep:]
            del self._rel[keep:]
            os.ftruncate(self._fd, keep * ENTRY_SIZE)
            self._torn_bytes = 0

    def reset(self) -> None:
        self.truncate_to(self.base_offset)
        self._timestamps.clear()
        self._rel.clear()
        os.ftruncate(self._fd, 0)

    def flush(self) -> None:
        environment.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
