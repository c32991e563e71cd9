"""One segment of a partition log: ``<20-digit base offset>.log`` plus Kafka's sparse ``.index`` and
``.timeindex``, and Kafka's ``.txnindex`` of the aborted transactions whose markers it holds
(``storage.transaction_index``, created on the first entry).

The ``.log`` file is record batches back to back (docs/storage.md), exactly as they were appended. A segment
never decodes records: it writes bytes, reads byte ranges that are whole batches, and looks at 61-byte batch
headers to find its way. Finding an offset is a binary search in the index plus a scan of the headers of
at most about ``index.interval.bytes`` of log, read with one ``pread``. Finding the first record at or
after a timestamp (ListOffsets) is a binary search in the time index, then in the offset index, then that
scan; only the batch that holds the answer is decoded.

Files stay open for the life of the segment (one descriptor each); appends are one ``pwrite`` into the
OS page cache, so a killed process loses nothing it appended, and only :meth:`LogSegment.flush` fsyncs.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

from protocol import environment
from protocol.errors import CorruptRecordError
from protocol.records import BATCH_HEADER_SIZE, BatchHeader, decode_records, read_header, scan_valid_prefix
from storage.index import MAX_RELATIVE, OffsetIndex
from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.time_index import NO_TIMESTAMP, TimeIndex
from storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

_PREFIX = struct.Struct(">qi")  # base_offset, batch_length

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

# How much to read at once when scanning headers (reads, truncation) and when recovering.
SCAN_CHUNK = 64 * 1024
RECOVER_CHUNK = 8 * 1024 * 1024


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str, suffix: str) -> int | None:
    """The base offset in ``<20 digits><suffix>``, or None for any other name."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class LogSegment:
    """A ``.log`` file and its index. Not thread-safe; the owning :class:`~storage.log.Log` serialises."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        create: bool,
        allow_gaps: bool = False,
    ) -> None:
        self.base_offset = base_offset
        # A compacted log's segment: batches need only increase (the cleaner removed whole batches and
        # left gaps), else each must start where the one before it ended.
        self.allow_gaps = allow_gaps
        self.log_path = Path(directory) / segment_file_name(base_offset, LOG_SUFFIX)
        self.index_path = Path(directory) / segment_file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = Path(directory) / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        self.txn_index_path = Path(directory) / segment_file_name(base_offset, TXN_INDEX_SUFFIX)
        self._index_interval = index_interval_bytes
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if create else 0)
        if create:
            self.index_path.unlink(missing_ok=True)
            self.time_index_path.unlink(missing_ok=True)
            self.txn_index_path.unlink(missing_ok=True)
        self._index_was_missing = not self.index_path.exists() or not self.time_index_path.exists()
        self._fd = os.open(self.log_path, flags, 0o644)
        self.index = OffsetIndex(self.index_path, base_offset)
        self.time_index = TimeIndex(self.time_index_path, base_offset)
        self.txn_index = TransactionIndex(self.txn_index_path, base_offset)
        self._size = os.fstat(self._fd).st_size
        self._next_offset = base_offset
        # Kafka's maxTimestampAndOffsetSoFar: the largest batch max_timestamp and the last offset of the
        # first batch that had it.
        self._max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry()
        _, last_position = self.index.last_entry()
        self._bytes_since_index_entry = self._size - last_position
        self._tail_problem: str | None = None
        if self._size:
            self._load_next_offset()

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096, allow_gaps: bool = False
    ) -> LogSegment:
        """A new empty segment (any files already at this base offset are replaced)."""
        return cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            create=True,
            allow_gaps=allow_gaps,
        )

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096, allow_gaps: bool = False
    ) -> LogSegment:
        """An existing segment, trusted as it is; call :meth:`sanity_check` or :meth:`recover` next."""
        return cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            create=False,
            allow_gaps=allow_gaps,
        )

    def _off_track(self, base_offset: int, expected: int) -> bool:
        """Whether a batch at ``base_offset`` cannot follow offsets that end before ``expected``."""
        return base_offset < expected if self.allow_gaps else base_offset != expected

    # ------------------------------------------------------------------ state

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    @property
    def next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty)."""
        return self._next_offset

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    @property
    def max_timestamp(self) -> int:
        """The largest batch max_timestamp in the segment (-1 when it has none)."""
        return self._max_timestamp

    def can_hold(self, last_offset: int, nbytes: int) -> bool:
        """Whether an append ending at ``last_offset`` of ``nbytes`` fits the index's u32 fields."""
        return last_offset - self.base_offset <= MAX_RELATIVE and self._size + nbytes <= MAX_RELATIVE

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self._size}, next_offset={self._next_offset})"
        )

    # ------------------------------------------------------------------ header scanning

    def _headers_from(
        self,
        position: int,
        expected: int | None,
        limit: int | None = None,
        *,
        expected_last: int | None = None,
    ) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` (a batch boundary) to ``limit``.

        ``expected`` is the base offset the batch at ``position`` must have, or None; ``expected_last``
        instead the last offset it must have (an offset index entry's): from there on each batch must
        start where the one before it ended. The base offset is not covered by the CRC, so this is what
        keeps a damaged one from being served at the wrong offset.
        Raises CorruptRecordError if a header does not parse, a batch runs past the end of the file, or
        offsets do not follow on.
        """
        end = self._size if limit is None else min(limit, self._size)
        check = expected is not None
        follows = -1 if expected is None else expected
        pos = position
        while pos < end:
            data = os.pread(self._fd, min(SCAN_CHUNK, self._size - pos), pos)
            if len(data) < BATCH_HEADER_SIZE:
                raise CorruptRecordError(f"{self.log_path}: partial batch header at byte {pos}")
            i = 0
            while i + BATCH_HEADER_SIZE <= len(data) and pos + i < end:
                header = read_header(data, i)
                if pos + i + header.size > self._size:
                    raise CorruptRecordError(
                        f"{self.log_path}: batch at byte {pos + i} claims {header.size} bytes, "
                        f"the file ends at {self._size}"
                    )
                if expected_last is not None:
                    if header.last_offset != expected_last:
                        raise CorruptRecordError(
                            f"{self.log_path}: batch at byte {pos + i} ends at offset {header.last_offset}, "
                            f"its index entry says {expected_last}"
                        )
                    expected_last, check = None, True
                elif check and self._off_track(header.base_offset, follows):
                    raise CorruptRecordError(
                        f"{self.log_path}: batch at byte {pos + i} has base offset {header.base_offset}, "
                        f"expected {follows} (the offsets before it end at {follows - 1})"
                    )
                follows = header.next_offset
                yield pos + i, header
                i += header.size
            pos += i

    def _scan_from_entry(self, entry: tuple[int, int] | None) -> Iterator[tuple[int, BatchHeader]]:
        """Headers from an offset index entry (its batch must end at the entry's offset), or from the start
        of the segment (its first batch must start at the segment's base offset)."""
        if entry is None:
            return self._headers_from(0, self.base_offset)
        return self._headers_from(entry[1], None, expected_last=entry[0])

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset`` (None if none)."""
        for pos, header in self._scan_from_entry(self.index.lookup_entry(offset)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def _first_position_at_or_after(self, offset: int) -> int:
        """Byte position of the first batch with base offset >= ``offset`` (the size if none)."""
        _, position = self.index.lookup(offset)
        for pos, header in self._headers_from(position, None):
            if header.base_offset >= offset:
                return pos
        return self._size

    def _last_boundary_at_or_before(self, start: int, limit: int) -> int:
        """The largest batch boundary in [start, limit], scanning from the nearest index entry."""
        _, entry_position = self.index.lookup_position(limit)
        boundary = max(start, entry_position)
        for pos, header in self._headers_from(boundary, None):
            if pos + header.size > limit:
                break
            boundary = pos + header.size
        return boundary

    def headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches from the one containing ``from_offset`` (default: all)."""
        start, expected = 0, self.base_offset
        if from_offset is not None:
            found = self.find(from_offset)
            if found is None:
                return
            start, expected = found[0], found[1].base_offset
        for _, header in self._headers_from(start, expected):
            yield header

    # ------------------------------------------------------------------ reads

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> bytes:
        """Whole batches starting with the one that contains ``start_offset``.

        At most ``max_bytes`` bytes, except that with ``min_one_message`` the first batch is returned even
        if it is bigger. Batches whose base offset is >= ``max_offset`` are not returned.
        """
        found = self.find(start_offset)
        if found is None:
            return b""
        position, first = found
        if max_offset is not None and first.base_offset >= max_offset:
            return b""
        limit = self._size if max_offset is None else self._first_position_at_or_after(max_offset)
        wanted = position + max(max_bytes, 0)
        end = limit if wanted >= limit else self._last_boundary_at_or_before(position, wanted)
        if end == position:
            if not min_one_message:
                return b""
            end = position + first.size
        return self._following_on(os.pread(self._fd, end - position, position), position, first.base_offset)

    def _following_on(self, data: bytes, position: int, first_offset: int) -> bytes:
        """The prefix of ``data`` (read at ``position``) whose batches follow on from ``first_offset``. A
        batch whose base offset was damaged (it is outside the CRC) is never served: reads stop before it,
        and a read that starts at it raises CorruptRecordError."""
        pos, expected = 0, first_offset
        while pos + BATCH_HEADER_SIZE <= len(data):
            base_offset, _ = _PREFIX.unpack_from(data, pos)
            if self._off_track(base_offset, expected):
                logger.error(
                    "%s: batch at byte %d has base offset %d, expected %d: not served (the log is damaged; "
                    "this replica should be rebuilt from the leader)",
                    self.log_path,
                    position + pos,
                    base_offset,
                    expected,
                )
                if pos == 0:
                    raise CorruptRecordError(
                        f"{self.log_path}: batch at byte {position} has base offset {base_offset}, "
                        f"expected {expected}"
                    )
                return data[:pos]
            header = read_header(data, pos)
            pos, expected = pos + header.size, header.next_offset
        return data

    def read_bytes(self, position: int, length: int) -> bytes:
        """Raw bytes of the ``.log`` file (for tools)."""
        return os.pread(self._fd, length, position)

    # ------------------------------------------------------------------ writes

    def append(self, data: bytes | bytearray | memoryview, headers: Sequence[BatchHeader]) -> None:
        """Append validated batches ``data`` whose headers (offsets already final) are ``headers``.

        The data is written first and the index entries after it, so an index never points past the data.
        If the write fails (a full disk) the file is cut back to where it was, so no partial batch stays at
        the end (recovery would cut it anyway after a crash), and the ``OSError`` propagates."""
        if not headers:
            return
        view = memoryview(data)
        entries: list[tuple[int, int]] = []
        since_entry = self._bytes_since_index_entry
        position = self._size
        max_ts, max_ts_offset = self._max_timestamp, self._offset_of_max_timestamp
        time_entries: list[tuple[int, int]] = []
        for header in headers:
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, header.last_offset
            if since_entry > self._index_interval:
                entries.append((header.last_offset, position))
                time_entries.append((max_ts, max_ts_offset))
                since_entry = 0
            since_entry += header.size
            position += header.size
        if position - self._size != len(view):
            raise ValueError(f"headers describe {position - self._size} bytes but {len(view)} were given")
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], self._size + written)
        except OSError:
            if written:
                try:
                    os.ftruncate(self._fd, self._size)
                except OSError:
                    logger.error(
                        "%s: could not cut a partial write back to byte %d", self.log_path, self._size
                    )
            raise
        self._size = position
        self._next_offset = headers[-1].next_offset
        self._bytes_since_index_entry = since_entry
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_ts_offset
        for offset, entry_position in entries:
            self.index.append(offset, entry_position)
        for timestamp, ts_offset in time_entries:
            self.time_index.maybe_append(timestamp, ts_offset)

    def _track_max_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = header.max_timestamp, header.last_offset

    def on_become_inactive(self) -> None:
        """The segment is no longer the active one (a roll): the time index gets its last entry, as Kafka's
        ``onBecomeInactiveSegment`` writes it."""
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)

    # ------------------------------------------------------------------ timestamps

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int, int] | None:
        """Kafka's ``findOffsetByTimestamp``: ``(timestamp, offset, leader_epoch)`` of the first record at
        or after ``starting_offset`` whose timestamp is >= ``timestamp`` (the leader epoch is its batch's,
        -1 if none), or None. Only the batch that holds it is decoded (decompressed if it is compressed)."""
        _, ts_offset = self.time_index.lookup(timestamp)
        entry = self.index.lookup_entry(max(ts_offset, starting_offset))
        for pos, header in self._scan_from_entry(entry):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            _, records = decode_records(os.pread(self._fd, header.size, pos))
            for r in records:
                ts = header.base_timestamp + r.timestamp_delta
                offset = header.base_offset + r.offset_delta
                if ts >= timestamp and offset >= starting_offset:
                    epoch = header.partition_leader_epoch
                    return ts, offset, epoch if epoch >= 0 else -1
        return None

    def truncate_to(self, offset: int) -> int:
        """Cut the log at the batch that contains ``offset`` (or the first batch after it): no batch with
        an offset >= ``offset`` is left. Returns the bytes removed; :attr:`next_offset` tells where the
        segment now ends (the base offset of the removed batch, which may be below ``offset``)."""
        found = self.find(offset)
        if found is None:
            return 0
        position, header = found
        # In a compacted segment the batch found may start past ``offset`` (a gap): the end is ``offset``.
        return self._cut(position, min(header.base_offset, offset))

    def _cut(self, position: int, next_offset: int) -> int:
        removed = self._size - position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to(next_offset)
        self.txn_index.truncate_to(next_offset)
        os.ftruncate(self._fd, position)
        self._size = position
        self._next_offset = next_offset
        _, last_position = self.index.last_entry()
        self._bytes_since_index_entry = self._size - last_position
        # The largest timestamp left: read again from the headers (a cut is rare; Kafka takes the time
        # index's last entry instead, which can miss the batches after it).
        self._max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, -1
        for _, header in self._headers_from(0, self.base_offset):
            self._track_max_timestamp(header)
        return removed

    # ------------------------------------------------------------------ start-up

    def _load_next_offset(self) -> None:
        """Find the end of the data by scanning headers from the last index entry (no CRC checks)."""
        entry = self.index.last_entry() if len(self.index) else None
        if entry is not None and not (0 <= entry[1] < self._size and entry[0] >= self.base_offset):
            self._tail_problem = f"index {self.index_path.name}: last entry {entry} is outside the log"
            return
        position = 0 if entry is None else entry[1]
        next_offset = self.base_offset
        last_end = position
        try:
            for pos, header in self._scan_from_entry(entry):
                next_offset = header.next_offset
                last_end = pos + header.size
                self._track_max_timestamp(header)
        except CorruptRecordError as e:
            self._tail_problem = str(e)
        if last_end == position and position > 0:
            self._tail_problem = self._tail_problem or "no batch at the last index entry"
        self._next_offset = next_offset

    def sanity_check(self) -> str | None:
        """Why this segment's index or tail cannot be trusted without :meth:`recover`, or None."""
        if self._index_was_missing and self._size:
            return f"index {self.index_path.name} is missing"
        problem = self.index.sanity_check(self._size)
        if problem:
            return f"index {self.index_path.name}: {problem}"
        if self._tail_problem:
            return self._tail_problem
        if len(self.index):
            offset, position = self.index.last_entry()
            try:
                found = read_header(os.pread(self._fd, BATCH_HEADER_SIZE, position)).last_offset
            except CorruptRecordError as e:
                return f"index {self.index_path.name}: last entry points at no batch ({e})"
            if found != offset:
                name = self.index_path.name
                return f"index {name}: last entry ({offset}, {position}) points at a batch ending at {found}"
        problem = self.time_index.sanity_check()
        if problem:
            return f"time index {self.time_index_path.name}: {problem}"
        last_ts, last_offset = self.time_index.last_entry()
        if len(self.time_index) and not (self.base_offset <= last_offset < self._next_offset):
            name = self.time_index_path.name
            return f"time index {name}: last entry ({last_ts}, {last_offset}) is past the log"
        return None

    def recover(self, epoch_cache: LeaderEpochFileCache | None = None) -> int:
        """Validate every batch (CRC included), cut everything from the first invalid or partial batch,
        and rebuild the index. Epochs of the batches go into ``epoch_cache`` as Kafka's recovery does.
        Returns the number of bytes cut off."""
        self.index.reset()
        self.time_index.reset()
        self._max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, -1
        self._index_was_missing = False
        self._tail_problem = None
        pos = 0
        since_entry = 0
        next_offset = self.base_offset
        want = RECOVER_CHUNK
        while pos < self._size:
            data = os.pread(self._fd, min(want, self._size - pos), pos)
            valid, headers = scan_valid_prefix(data)
            off_track = False
            at, follows = pos, next_offset
            for n, header in enumerate(headers):
                if self._off_track(header.base_offset, follows):
                    # The base offset is not covered by the CRC: a batch that does not follow on is damaged.
                    logger.warning(
                        "%s: batch at byte %d has base offset %d, expected %d: cutting from there",
                        self.log_path,
                        at,
                        header.base_offset,
                        follows,
                    )
                    valid, headers, off_track = at - pos, headers[:n], True
                    break
                at, follows = at + header.size, header.next_offset
            batch_pos = pos
            for header in headers:
                self._track_max_timestamp(header)
                if since_entry > self._index_interval:
                    self.index.append(header.last_offset, batch_pos)
                    self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
                    since_entry = 0
                since_entry += header.size
                batch_pos += header.size
                epoch = header.partition_leader_epoch
                if epoch_cache is not None and epoch >= 0:
                    latest = epoch_cache.latest_epoch()
                    if latest is None or epoch > latest:
                        epoch_cache.assign(epoch, header.base_offset)
            if headers:
                next_offset = headers[-1].next_offset
            pos += valid
            if off_track or pos + (len(data) - valid) >= self._size:
                break  # the chunk reached the end of the file: the rest is a torn or corrupt tail
            rest = len(data) - valid
            if rest >= BATCH_HEADER_SIZE:
                try:
                    header = read_header(data, valid)
                except CorruptRecordError:
                    break
                if header.size <= rest or pos + header.size > self._size:
                    break  # a whole batch that does not validate, or one running past the file
                want = header.size  # a batch bigger than the chunk: read it whole
            else:
                want = RECOVER_CHUNK  # a header split by the chunk boundary: read again from it
        truncated = self._size - pos
        if truncated:
            logger.warning(
                "%s: cutting %d invalid bytes at byte %d (offset %d) during recovery",
                self.log_path,
                truncated,
                pos,
                next_offset,
            )
            os.ftruncate(self._fd, pos)
            self._size = pos
        self._next_offset = next_offset
        # Entries of markers cut off go; those of markers kept stay (the producer state's replay of the
        # log writes any that are missing).
        self.txn_index.truncate_to(next_offset)
        self._bytes_since_index_entry = since_entry
        return truncated

    # ------------------------------------------------------------------ lifecycle

    def flush(self) -> None:
        environment.fsync(self._fd)
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.index.delete()
        self.time_index.delete()
        self.txn_index.delete()
