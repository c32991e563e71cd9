"""Waiting on a condition in a trio test, with a deadline on trio's clock: seconds of virtual time under an
autojumping ``MockClock`` (a condition that never comes fails the test at once instead of spinning), real
seconds otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

T = TypeVar("T")


async def wait_for(cond: Callable[[], T], what: str, timeout: float = 5.0, interval: float = 0.01) -> T:
    """Polls ``cond`` every ``interval`` until it returns something truthy (returned); fails the test naming
    ``what`` after ``timeout``."""
    with trio.move_on_after(timeout):
        while not (value := cond()):
            await trio.sleep(interval)
        return value
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
