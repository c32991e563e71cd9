"""The leader epoch cache of one partition (Kafka's ``LeaderEpochFileCache``, KIP-101 / KIP-279).

It maps each leader epoch to the first offset written in that epoch. Followers ask the leader for the
end offset of their latest epoch (OFFSET_FOR_LEADER_EPOCH) and truncate to it, which is what keeps
replicas from diverging across leader changes; :meth:`LeaderEpochFileCache.end_offset_for` answers that
question with Kafka's exact semantics.

Invariant: entries are ordered with strictly increasing epochs *and* strictly increasing start offsets.
``assign`` keeps it by removing conflicting entries from the tail before appending.

Every change is written through to the ``leader-epoch-checkpoint`` (synchronously; Kafka defers the
flush of truncations to a background thread and relies on log recovery to re-truncate a stale file,
which :class:`storage.log.Log` also does on open).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable

from protocol.api_keys import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile

__all__ = ["EpochEntry", "LeaderEpochFileCache"]

logger = logging.getLogger(__name__)


class LeaderEpochFileCache:
    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None, *, log_prefix: str = "") -> None:
        self._checkpoint = checkpoint
        self._prefix = log_prefix
        self._entries: list[EpochEntry] = []
        self._epochs: list[int] = []  # parallel to _entries, for bisect
        if checkpoint is not None:
            for entry in checkpoint.read():
                self._assign(entry)

    # ------------------------------------------------------------------ updates

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``.

        Ignored if the latest entry already has this epoch with a start offset <= ``start_offset`` (an
        epoch's start offset never moves forward once assigned). Otherwise entries that would break
        monotonicity (epoch >= ``epoch`` or start offset >= ``start_offset``) are dropped first.
        Negative epochs or offsets (a batch with no leader epoch) are ignored.
        """
        if epoch < 0 or start_offset < 0:
            logger.debug(
                "%signoring invalid epoch entry epoch=%d start_offset=%d", self._prefix, epoch, start_offset
            )
            return
        if self._assign(EpochEntry(epoch, start_offset)):
            logger.debug(
                "%sappended epoch entry %r; cache now has %d entries",
                self._prefix,
                EpochEntry(epoch, start_offset),
                len(self._entries),
            )
            self._flush()

    def assign_all(self, entries: Iterable[EpochEntry]) -> None:
        """Assign several entries in order, writing the checkpoint once."""
        changed = False
        for entry in entries:
            if entry.epoch >= 0 and entry.start_offset >= 0:
                changed = self._assign(entry) or changed
        if changed:
            self._flush()

    def _update_needed(self, entry: EpochEntry) -> bool:
        if not self._entries:
            return True
        latest = self._entries[-1]
        return entry.epoch != latest.epoch or entry.start_offset < latest.start_offset

    def _assign(self, entry: EpochEntry) -> bool:
        if not self._update_needed(entry):
            return False
        removed: list[EpochEntry] = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
            self._epochs.pop()
        self._entries.append(entry)
        self._epochs.append(entry.epoch)
        # Removing an entry that started at the same offset means nothing was written under it: expected.
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            logger.warning(
                "%snew epoch entry %r caused truncation of conflicting entries %r; cache now has %d entries",
                self._prefix,
                entry,
                removed[::-1],
                len(self._entries),
            )
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove every entry whose start offset is >= ``end_offset`` (after the log is truncated to it).

        A negative ``end_offset`` (UNDEFINED_EPOCH_OFFSET) changes nothing.
        """
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        removed: list[EpochEntry] = []
        while self._entries and self._entries[-1].start_offset >= end_offset:
            removed.append(self._entries.pop())
            self._epochs.pop()
        logger.debug(
            "%scleared entries %r after truncating to end offset %d, %d entries left",
            self._prefix,
            removed[::-1],
            end_offset,
            len(self._entries),
        )
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget history below ``start_offset`` (after the log start moved up to it).

        Entries starting at or below ``start_offset`` are removed, then the last of them is put back with
        its start moved to ``start_offset``: the epoch that covers the new log start is kept. So
        ``truncate_from_start(6)`` keeps an entry at 6 unchanged.
        """
        count = 0
        while count < len(self._entries) and self._entries[count].start_offset <= start_offset:
            count += 1
        if count == 0:
            return
        removed = self._entries[:count]
        covering = EpochEntry(removed[-1].epoch, start_offset)
        self._entries[:count] = [covering]
        self._epochs[:count] = [covering.epoch]
        logger.debug(
            "%scleared entries %r and rewrote first entry %r after truncating to start offset %d",
            self._prefix,
            removed,
            covering,
            start_offset,
        )
        self._flush()

    def clear_and_flush(self) -> None:
        """Delete every entry and write the (empty) checkpoint."""
        self.clear()
        self._flush()

    def clear(self) -> None:
        """Delete every entry without writing the checkpoint."""
        self._entries.clear()
        self._epochs.clear()

    def checkpoint_after_assign(
        self, epoch: int, start_offset: int
    ) -> tuple[LeaderEpochCheckpointFile, str] | None:
        """The checkpoint file and the text ``assign(epoch, start_offset)`` would write to it, without
        changing anything; None if it would write nothing (no file, or no change)."""
        return self.checkpoint_after_assigns([(epoch, start_offset)])

    def checkpoint_after_assigns(
        self, assigns: Iterable[tuple[int, int]]
    ) -> tuple[LeaderEpochCheckpointFile, str] | None:
        """:meth:`checkpoint_after_assign` for ``assign(epoch, start_offset)`` of each pair in turn (the
        batches of one follower append)."""
        if self._checkpoint is None:
            return None
        trial: LeaderEpochFileCache | None = None
        for epoch, start_offset in assigns:
            if epoch < 0 or start_offset < 0:
                continue
            if trial is None:
                latest = self._entries[-1] if self._entries else None
                if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
                    continue  # the common case: a batch of the current epoch changes nothing
                trial = LeaderEpochFileCache(None)
                trial.assign_all(self._entries)
            trial._assign(EpochEntry(epoch, start_offset))
        if trial is None or trial._entries == self._entries:
            return None
        return self._checkpoint, LeaderEpochCheckpointFile.text(trial._entries)

    def _flush(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self._entries)

    # ------------------------------------------------------------------ queries

    @property
    def is_empty(self) -> bool:
        return not self._entries

    @property
    def non_empty(self) -> bool:
        return bool(self._entries)

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The greatest epoch below ``epoch`` (default: below the latest epoch)."""
        entry = self.previous_entry(epoch)
        return entry.epoch if entry is not None else None

    def previous_entry(self, epoch: int | None = None) -> EpochEntry | None:
        if epoch is None:
            if not self._entries:
                return None
            epoch = self._entries[-1].epoch
        i = bisect.bisect_left(self._epochs, epoch)
        return self._entries[i - 1] if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest epoch above ``epoch``."""
        i = bisect.bisect_right(self._epochs, epoch)
        return self._epochs[i] if i < len(self._epochs) else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        i = bisect.bisect_left(self._epochs, epoch)
        if i < len(self._epochs) and self._epochs[i] == epoch:
            return self._entries[i]
        return None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch under which ``offset`` was written, or None if it is below the first entry."""
        result: int | None = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            result = entry.epoch
        return result

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end_offset)`` for OFFSET_FOR_LEADER_EPOCH.

        - ``requested_epoch`` is UNDEFINED_EPOCH -> ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``;
        - it is the latest epoch -> ``(latest, log_end_offset)``;
        - no epoch above it is known (this includes an empty cache) -> undefined, as above;
        - it is below every known epoch -> ``(requested_epoch, start of the first epoch)``: the history
          before that is gone, and the follower must truncate to where the leader's log begins;
        - otherwise -> ``(largest epoch <= requested, start offset of the next higher epoch)``.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            result = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        elif self._entries and self._entries[-1].epoch == requested_epoch:
            result = (requested_epoch, log_end_offset)
        else:
            higher = bisect.bisect_right(self._epochs, requested_epoch)
            if higher == len(self._entries):
                result = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            elif higher == 0:
                result = (requested_epoch, self._entries[0].start_offset)
            else:
                result = (self._entries[higher - 1].epoch, self._entries[higher].start_offset)
        logger.debug(
            "%send offset for epoch %d is epoch %d offset %d (%d entries)",
            self._prefix,
            requested_epoch,
            result[0],
            result[1],
            len(self._entries),
        )
        return result

    def end_offset_for_pre_kip_279(self, requested_epoch: int, log_end_offset: int) -> int:
        """Kafka 0.11 - 1.1's ``endOffsetFor`` (before KIP-279): an end offset with no epoch.

        - ``requested_epoch`` is the latest epoch -> ``log_end_offset`` (UNDEFINED_EPOCH on an empty cache
          is "the latest" too, as it was there);
        - it is above the latest epoch, or below the first one -> UNDEFINED_EPOCH_OFFSET (the follower falls
          back to its high watermark);
        - otherwise -> the start offset of the first epoch above it, whether or not this cache has the
          requested epoch itself. A follower whose latest epoch the leader never had gets the start of the
          leader's next epoch, which may be past where the two logs diverged (KIP-279's case).
        """
        latest = self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH
        if requested_epoch == latest:
            return log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._entries) or requested_epoch < self._epochs[0]:
            return UNDEFINED_EPOCH_OFFSET
        return self._entries[higher].start_offset

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self._entries!r})"
