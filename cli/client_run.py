"""``trio.run`` for the client commands, with errors the user can act on raised alone.

trio wraps an exception raised in a nursery in an ``ExceptionGroup``, so ``except ClientError`` around
``trio.run`` misses it and the user sees a traceback of nested groups. ``run_client`` finds the one error
that matters: Ctrl-C (``KeyboardInterrupt``) first, then a :class:`ClientError` (no cluster, unknown topic).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from kit.cluster_client import ClientError

T = TypeVar("T")


def _first(group: BaseExceptionGroup[BaseException], kind: type[BaseException]) -> BaseException | None:
    matched: BaseException | None = group.split(kind)[0]
    while isinstance(matched, BaseExceptionGroup):
        matched = matched.exceptions[0]
    return matched


def run_client(fn: Callable[[], Awaitable[T]]) -> T:
    """Runs ``fn`` under trio; a Ctrl-C or a ClientError anywhere in its nurseries is raised by itself."""
    try:
        return trio.run(fn)
    except BaseExceptionGroup as group:
        if _first(group, KeyboardInterrupt) is not None:
            raise KeyboardInterrupt from None
        error = _first(group, ClientError)
        if error is not None:
            raise error from None
        leaves = list(_leaves(group))
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            out += _leaves(exc)
        else:
            out.append(exc)
    return out
