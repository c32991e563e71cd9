"""Whether anything listens at an address, to say in one line what did not answer.

A connection that is refused means no process listens there (a stopped cluster, a wrong port): waiting
cannot help, so the commands fail at once and say so. A node that accepts the connection but answers
nothing (paused, overloaded) is another matter: the commands keep their request timeout for it.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

NOTHING_LISTENING = "nothing is listening"
CLUSTER_HINT = "is the cluster up? (`isrsim cluster status` shows it, `isrsim cluster up` starts it)"


def refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it, or a member of its group) is a refused connection."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return True
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        todo.extend([e.__cause__, e.__context__])
    return False


async def is_listening(host: str, port: int, timeout: float = 1.0) -> bool | None:
    """True if a connection to ``host:port`` is accepted, False if it is refused, None if neither happens
    within ``timeout`` (a host that drops the connection attempt)."""
    with trio.move_on_after(timeout):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            return False if refused(exc) else None
        await stream.aclose()
        return True
    return None


def addresses_text(addresses: Iterable[tuple[str, int] | str]) -> str:
    return ", ".join(a if isinstance(a, str) else f"{a[0]}:{a[1]}" for a in addresses)


def nothing_listening(addresses: Iterable[tuple[str, int] | str], who: str) -> str:
    """One line: ``no broker answered: nothing is listening at 127.0.0.1:1 (connection refused); is the
    cluster up? ...``."""
    where = addresses_text(addresses)
    return f"no {who} answered: {NOTHING_LISTENING} at {where} (connection refused); {CLUSTER_HINT}"


__all__ = [
    "CLUSTER_HINT",
    "NOTHING_LISTENING",
    "addresses_text",
    "is_listening",
    "nothing_listening",
    "refused",
]
