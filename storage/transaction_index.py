"""A segment's aborted transactions (Kafka's ``TransactionIndex``, ``<20-digit base offset>.txnindex``).

Each entry is Kafka's ``AbortedTxn``, 34 bytes big-endian: ``version i16 (0) | producer_id i64 |
first_offset i64 | last_offset i64 | last_stable_offset i64``. ``first_offset`` is the transaction's first
data offset in the partition, ``last_offset`` the offset of its ABORT marker (which lives in this segment),
``last_stable_offset`` the partition's LSO right after the marker. Entries are in ``last_offset`` order. The
file is created on the first append, truncated with the log and deleted with the segment.

A read_committed fetch asks :meth:`TransactionIndex.collect_aborted_txns` which aborted transactions overlap
the offsets it returns, so that the consumer can drop their records.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol import environment

__all__ = [
    "ABORTED_TXN_SIZE",
    "TXN_INDEX_SUFFIX",
    "AbortedTxn",
    "CompletedTxn",
    "CorruptIndexError",
    "TransactionIndex",
    "decode_aborted_txns",
]

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE = _ENTRY.size  # 34


class CorruptIndexError(Exception):
    """A ``.txnindex`` file that is not whole entries, or whose entries are out of order."""


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended in this partition (Kafka's ``CompletedTxn``): its first data offset and
    the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    def encode(self) -> bytes:
        return _ENTRY.pack(
            self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode_aborted_txns(data: bytes) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file's bytes; a torn last entry is left out."""
    out: list[AbortedTxn] = []
    for pos in range(0, len(data) - ABORTED_TXN_SIZE + 1, ABORTED_TXN_SIZE):
        version, producer_id, first, last, lso = _ENTRY.unpack_from(data, pos)
        out.append(AbortedTxn(producer_id, first, last, lso, version))
    return out


class TransactionIndex:
    """The aborted transactions of one segment, in memory and in its file (appended, never rewritten
    except by truncation)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] = []
        if self.path.exists():
            data = self.path.read_bytes()
            self._entries = decode_aborted_txns(data)
            if len(data) % ABORTED_TXN_SIZE:
                # A torn tail (a kill mid-write): keep the whole entries.
                self._rewrite()

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(self._entries)

    @property
    def last_offset(self) -> int | None:
        return self._entries[-1].last_offset if self._entries else None

    def append(self, txn: AbortedTxn) -> None:
        """Append ``txn``; its marker must come after the last entry's (Kafka refuses otherwise)."""
        last = self.last_offset
        if last is not None and txn.last_offset <= last:
            raise ValueError(
                f"{self.path}: aborted transaction of producer {txn.producer_id} ends at {txn.last_offset}, "
                f"not after the last entry's {last}"
            )
        with open(self.path, "ab") as f:
            f.write(txn.encode())
        self._entries.append(txn)

    def maybe_append(self, txn: AbortedTxn) -> bool:
        """Append ``txn`` unless an entry at or after its marker is there already (a replay of the log)."""
        last = self.last_offset
        if last is not None and txn.last_offset <= last:
            return False
        self.append(txn)
        return True

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """Kafka's ``collectAbortedTxns``: the entries that overlap ``[fetch_offset, upper_bound_offset)``,
        and whether the search may stop here (an entry's LSO reached the upper bound: no later segment can
        hold a transaction that started below it)."""
        found: list[AbortedTxn] = []
        for txn in self._entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        keep = [t for t in self._entries if t.last_offset < offset]
        if len(keep) != len(self._entries):
            self._entries = keep
            self._rewrite()

    def reset(self) -> None:
        self._entries = []
        self.path.unlink(missing_ok=True)

    def _rewrite(self) -> None:
        if not self._entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(t.encode() for t in self._entries))
            f.flush()
            environment.fsync(f.fileno())
        environment.replace(tmp, self.path)

    def flush(self) -> None:
        if not self._entries:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            environment.fsync(fd)
        finally:
            os.close(fd)

    def sanity_check(self) -> str | None:
        last = -1
        for txn in self._entries:
            if (
                txn.last_offset < self.base_offset
                or txn.last_offset <= last
                or txn.first_offset > txn.last_offset
            ):
                return f"entry {txn} is out of order or outside the segment"
            last = txn.last_offset
        return None

    def delete(self) -> None:
        self._entries = []
        self.path.unlink(missing_ok=True)
