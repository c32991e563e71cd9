"""The one environment a node's shell takes its clock, network, file layer and randomness from (SPEC §15,
docs/simulation.md).

The real environment (:data:`REAL`, the default) is what every real process runs on: trio's clock, TCP
sockets on 127.0.0.1, the OS's files and ``fsync``, fresh random sources, worker threads. The deterministic
simulation installs its own (``lab/sim``) once, before it builds any node, in a process that runs nothing
else: a virtual clock, in-memory streams, a file layer that forgets what was not fsynced when a node is
killed, and every random choice drawn from the seed. The broker, controller, fetcher and coordinator code is
the same in both; only what they ask of this module differs.

The seam is process-wide (one module global), so the real hot paths pay one global lookup and nothing else.
What a shell asks:

* time: :func:`wall_time` (seconds; Kafka's ``Time.SYSTEM``) — trio's own clock (``trio.current_time``,
  ``trio.sleep``) needs nothing here, the simulation runs trio on its ``MockClock``;
* the network: :func:`open_tcp_stream`, :func:`open_tcp_listeners`, :func:`listener_port`,
  :func:`peer_address`;
* the file layer: :func:`fsync` (what survives a kill) and :func:`replace` (a rename keeps what was synced);
* randomness and identities: :func:`new_random`, :func:`uuid4`, :func:`process_id`;
* work off the event loop: :func:`run_sync` (a worker thread in the real one, inline in the simulation,
  where a thread's timing would make the history depend on the host).
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # trio is loaded by the first call that needs it: a light name of protocol stays light
    import trio

    StreamListener = trio.abc.Listener[trio.abc.Stream]

T = TypeVar("T")


class Environment:
    """The real environment: what a node process has always run on."""

    name = "real"

    def wall_time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def open_tcp_stream(self, host: str, port: int) -> trio.abc.Stream:
        import trio

        return await trio.open_tcp_stream(host, port)

    async def open_tcp_listeners(self, port: int, host: str | None) -> list[StreamListener]:
        import trio

        return list(await trio.open_tcp_listeners(port, host=host))

    def listener_port(self, listener: StreamListener) -> int:
        import trio

        assert isinstance(listener, trio.SocketListener)
        return int(listener.socket.getsockname()[1])

    def close_listener(self, listener: StreamListener) -> None:
        """Closes a listener synchronously (a bind that failed half-way)."""
        import trio

        if isinstance(listener, trio.SocketListener):
            listener.socket.close()

    def peer_address(self, stream: trio.abc.Stream) -> tuple[str, int]:
        """The far end of an accepted connection (``OSError`` if it is gone)."""
        import trio

        assert isinstance(stream, trio.SocketStream)
        address, port = stream.socket.getpeername()[:2]
        return str(address), int(port)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def replace(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        os.replace(src, dst)

    def new_random(self, purpose: str) -> random.Random:
        """A random source for one component (``purpose`` names it, so a simulation can seed each)."""
        return random.Random()

    def uuid4(self) -> str:
        return str(uuid.uuid4())

    def process_id(self) -> int:
        return os.getpid()

    async def run_sync(self, fn: Callable[..., T], *args: Any, abandon_on_cancel: bool = False) -> T:
        import trio

        return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=abandon_on_cancel)


REAL = Environment()
_env: Environment = REAL


def install(env: Environment) -> None:
    """Makes ``env`` the process's environment (the simulation, before it builds any node)."""
    from protocol.common import use_clocks

    global _env
    _env = env
    use_clocks(env.wall_time, env.monotonic)


install_environment = install


def current() -> Environment:
    return _env


def is_simulated() -> bool:
    return _env is not REAL


def wall_time() -> float:
    """Wall-clock seconds (the simulation's: virtual seconds from 0)."""
    return _env.wall_time()


def wall_time_ms() -> int:
    return int(_env.wall_time() * 1000)


def monotonic() -> float:
    """Seconds from a clock that never goes back (the simulation's virtual clock)."""
    return _env.monotonic()


async def open_tcp_stream(host: str, port: int) -> trio.abc.Stream:
    return await _env.open_tcp_stream(host, port)


async def open_tcp_listeners(port: int, host: str | None) -> list[StreamListener]:
    return await _env.open_tcp_listeners(port, host)


def listener_port(listener: StreamListener) -> int:
    return _env.listener_port(listener)


def close_listener(listener: StreamListener) -> None:
    _env.close_listener(listener)


def peer_address(stream: trio.abc.Stream) -> tuple[str, int]:
    return _env.peer_address(stream)


def fsync(fd: int) -> None:
    """``os.fsync``: in the simulation, what a kill keeps."""
    _env.fsync(fd)


def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``os.replace``: in the simulation, the synced content moves with the name."""
    _env.replace(src, dst)


def new_random(purpose: str) -> random.Random:
    return _env.new_random(purpose)


def uuid4() -> str:
    return _env.uuid4()


def process_id() -> int:
    return _env.process_id()


async def run_sync(fn: Callable[..., T], *args: Any, abandon_on_cancel: bool = False) -> T:
    """``trio.to_thread.run_sync`` (inline in the simulation). Every worker-thread call of the node shells
    goes through here, so that a simulated run stays on one thread and one history."""
    return await _env.run_sync(fn, *args, abandon_on_cancel=abandon_on_cancel)


__all__ = [
    "REAL",
    "Environment",
    "close_listener",
    "current",
    "fsync",
    "install",
    "install_environment",
    "is_simulated",
    "listener_port",
    "monotonic",
    "new_random",
    "open_tcp_listeners",
    "open_tcp_stream",
    "peer_address",
    "process_id",
    "replace",
    "run_sync",
    "uuid4",
    "wall_time",
    "wall_time_ms",
]
