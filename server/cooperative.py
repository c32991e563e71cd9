"""Long request handling that lets the event loop go on (docs/protocol.md, "Limits"): a handler looping over
100,000 topics, partitions or group ids gives the loop back every ``STEP_ENTRIES`` entries, so that fetches,
heartbeats and the quorum's requests are served meanwhile; and the pure work of a large request (reading
its body into dataclasses, writing its answer back) is done in a worker thread."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar

import trio

from protocol import environment

T = TypeVar("T")
R = TypeVar("R")

# Entries handled between two checkpoints: a few milliseconds of work on a busy core (a checkpoint costs
# about 20 us).
STEP_ENTRIES = 200


async def chunks(items: Sequence[T], size: int = STEP_ENTRIES) -> AsyncIterator[Sequence[T]]:
    """``items`` in slices of ``size``, the loop given back between two slices."""
    for start in range(0, len(items), size):
        if start:
            await trio.sleep(0)
        yield items[start : start + size]


class Steps:
    """Counts entries handled and gives the loop back every ``size`` of them: ``await steps.tick()``."""

    def __init__(self, size: int = STEP_ENTRIES) -> None:
        self.size = size
        self.count = 0

    async def tick(self, n: int = 1) -> None:
        before = self.count
        self.count += n
        if self.count // self.size != before // self.size:
            await trio.sleep(0)


async def pure(large: bool, fn: Callable[..., R], *args: object) -> R:
    """``fn(*args)``, pure work, in a worker thread when ``large`` (else here, where a thread costs more)."""
    if large:
        return await environment.run_sync(fn, *args)
    return fn(*args)
