"""Delayed operations and their purgatory (Kafka's ``DelayedOperation`` / ``DelayedOperationPurgatory``).

An operation is tried once when it arrives; if it cannot complete it is watched under keys
(topic-partitions) and tried again whenever something happens to a key (``check_and_complete``), until it
completes or its deadline passes. Completion is synchronous and happens exactly once
(``force_complete``). One reaper task per purgatory expires operations from a deadline heap.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable

import trio

# The deadline heap is compacted when it reaches this size or twice its live size after the last compaction.
MIN_COMPACT_HEAP = 64


class DelayedOperation:
    """Subclasses implement ``try_complete`` (call ``force_complete`` when done), ``on_complete`` and
    ``on_expiration``."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._completed = False

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Completes the operation once; returns False if it was already completed."""
        if self._completed:
            return False
        self._completed = True
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Called after ``force_complete`` by the reaper when the deadline passed."""

    def note_change(self, key: Hashable) -> None:
        """Something happened to ``key`` (called by ``check_and_complete`` before ``try_complete``)."""


class DelayedOperationPurgatory:
    def __init__(self, name: str, *, clock: Callable[[], float] = trio.current_time) -> None:
        self.name = name
        self._clock = clock
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._heap: list[tuple[float, int, DelayedOperation]] = []
        self._seq = itertools.count()
        self._wakeup = trio.Event()
        self._watches_since_purge = 0
        self._compact_at = MIN_COMPACT_HEAP
        self.expired = 0

    @property
    def watched(self) -> int:
        return sum(1 for ops in self._watchers.values() for op in ops if not op.is_completed)

    @property
    def delayed(self) -> int:
        """Operations waiting to complete or expire (Kafka's ``NumDelayedOperations``)."""
        return sum(1 for _, _, op in self._heap if not op.is_completed)

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Tries ``op`` now; if not done, watches it under every key and arms its deadline."""
        if op.try_complete():
            return True
        watchers = self._watchers
        count = 0
        for key in keys:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = [op]
            else:
                ops.append(op)
            count += 1
        self._watches_since_purge += count
        # Something may have happened between the first try and the watch: try once more.
        if op.try_complete():
            return True
        deadline = self._clock() + op.delay_ms / 1000.0
        first = self._heap[0][0] if self._heap else None
        heapq.heappush(self._heap, (deadline, next(self._seq), op))
        if len(self._heap) >= self._compact_at:
            self._compact_heap()
        if first is None or deadline < first:
            self._wakeup.set()
        return False

    def _compact_heap(self) -> None:
        """Drops completed operations from the deadline heap. Without this an operation completed early stays
        there, with everything it holds (a PRODUCE's records, through its response callback), until its
        deadline: 30 s of a producer's data. Amortized O(1) per watched operation."""
        self._heap = [entry for entry in self._heap if not entry[2].is_completed]
        heapq.heapify(self._heap)
        self._compact_at = max(MIN_COMPACT_HEAP, 2 * len(self._heap))

    def check_and_complete(self, key: Hashable) -> int:
        """Tries the operations watched under ``key`` and drops the completed; returns how many completed.

        Re-entrant: an operation's completion may append (and so call this for the same key) and watch a
        new operation under the key. The operations are tried from a copy of the list, and the list kept
        afterwards is the one in place then, less the completed: a watch added meanwhile stays."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if op.is_completed:
                continue
            op.note_change(key)
            if op.try_complete():
                completed += 1
        current = self._watchers.get(key)
        if current is not None:
            live = [op for op in current if not op.is_completed]
            if live:
                self._watchers[key] = live
            else:
                del self._watchers[key]
        return completed

    def _expire_due(self) -> None:
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            _, _, op = heapq.heappop(self._heap)
            if op.force_complete():
                self.expired += 1
                op.on_expiration()
        if self._watches_since_purge > 1000 or not self._heap:
            # Operations completed through another key linger in this key's list: purge them now and then.
            self._watches_since_purge = 0
            for key in list(self._watchers):
                live = [op for op in self._watchers[key] if not op.is_completed]
                if live:
                    self._watchers[key] = live
                else:
                    del self._watchers[key]

    def complete_all(self) -> None:
        """Forces every pending operation to complete (used at shutdown)."""
        while self._heap:
            _, _, op = heapq.heappop(self._heap)
            if op.force_complete():
                op.on_expiration()
        self._watchers.clear()

    async def run(self) -> None:
        """The reaper: expires operations whose deadline passed. Runs until cancelled."""
        while True:
            self._expire_due()
            while self._heap and self._heap[0][2].is_completed:
                heapq.heappop(self._heap)
            deadline = self._heap[0][0] if self._heap else float("inf")
            self._wakeup = trio.Event()
            with trio.move_on_at(deadline):
                await self._wakeup.wait()
