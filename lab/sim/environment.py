"""The simulated environment (SPEC §15, docs/simulation.md): what the node shells get instead of the real
one when ``isrsim sim run`` installs it.

* time: trio's ``MockClock`` (the run's clock): ``wall_time`` and ``monotonic`` are its virtual seconds
  from 0;
* the network: in-memory streams between the nodes of one process (:class:`SimNetwork`); an address is a
  (host, port) a node's listener took; a connect to an address nobody listens on is refused. §7's faults are
  the nodes' own :class:`~protocol.fault_injector.FaultInjector` tables, as over real sockets;
* the file layer: the OS's files under the run's directory, plus what each file held when it was last
  fsynced (:class:`CrashFiles`); a killed node's files go back to that, a torn tail of the rest possibly kept;
* randomness: one source per purpose, each seeded from the run's seed; ids (uuid4) and process ids too;
* work a real node does in a worker thread runs inline.
"""

from __future__ import annotations

import math
import os
import random
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import trio
import trio.testing

from protocol import Environment

T = TypeVar("T")
StreamListener = trio.abc.Listener[trio.abc.Stream]
_Pair = trio.StapledStream[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream]

# The files a kill leaves alone: the journals are the observer's record of the run, not the node's data
# (docs/simulation.md).
OBSERVER_SUFFIXES = (".jsonl",)
META = "meta.properties"  # the node's own (a config file is the operator's, not the node's)


class SimListener(trio.abc.Listener[trio.abc.Stream]):
    """A listening address of the in-memory network: accepted streams arrive through a channel."""

    def __init__(self, network: SimNetwork, address: tuple[str, int]) -> None:
        self.network = network
        self.address = address
        self._send, self._receive = trio.open_memory_channel[trio.abc.Stream](math.inf)

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("listener closed") from None

    def deliver(self, stream: trio.abc.Stream) -> None:
        self._send.send_nowait(stream)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        self.network.listeners.pop(self.address, None)
        self._send.close()
        self._receive.close()


class SimNetwork:
    """Addresses to listeners; every connection is a pair of in-memory streams."""

    def __init__(self) -> None:
        self.listeners: dict[tuple[str, int], SimListener] = {}
        self._peers: dict[int, tuple[str, int]] = {}
        # The server ends of each address's connections (a kill breaks them all).
        self._accepted: dict[tuple[str, int], list[_Pair]] = {}
        self._next_port = 40000
        self.connections = 0

    def listen(self, host: str | None, port: int) -> SimListener:
        address = (host or "127.0.0.1", port)
        if port == 0 or address in self.listeners:
            raise OSError(98, f"address {address[0]}:{address[1]} in use (the simulation binds fixed ports)")
        listener = self.listeners[address] = SimListener(self, address)
        return listener

    def connect(self, host: str, port: int) -> trio.abc.Stream:
        listener = self.listeners.get((host, port))
        if listener is None:
            raise ConnectionRefusedError(111, f"connect to {host}:{port} refused (nobody listens there)")
        client, server = trio.testing.memory_stream_pair()
        self._next_port += 1
        self.connections += 1
        self._peers[id(server)] = ("127.0.0.1", self._next_port)
        self._accepted.setdefault((host, port), []).append(server)
        listener.deliver(server)
        return client

    def close_address(self, address: tuple[str, int]) -> None:
        """A node is gone: its listener closes and every connection to it breaks (the peers read EOF)."""
        listener = self.listeners.get(address)
        if listener is not None:
            listener.close()
        for server in self._accepted.pop(address, []):
            server.send_stream.close()
            server.receive_stream.close()

    def peer_of(self, stream: trio.abc.Stream) -> tuple[str, int]:
        return self._peers.pop(id(stream), ("127.0.0.1", 0))


@dataclass
class _Synced:
    content: bytes
    inode: int


class CrashFiles:
    """What each file held when it was last fsynced, by path (a rename through the environment moves it).

    :meth:`crash` puts every file under a directory back to it: a file never fsynced is emptied, one written
    past its synced content may keep a torn part of what followed (drawn from ``rng``). Deletions and
    creations of names are durable at once (directory fsyncs are not modelled)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.synced: dict[str, _Synced] = {}
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return  # a directory: names are durable at once here
        path = os.readlink(f"/proc/self/fd/{fd}")
        self.fsyncs += 1
        with open(path, "rb") as f:  # the descriptor may be write-only
            self.synced[path] = _Synced(f.read(), st.st_ino)

    def replace(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        os.replace(src, dst)
        s, d = os.path.abspath(src), os.path.abspath(dst)
        moved = self.synced.pop(s, None)
        if moved is not None:
            self.synced[d] = moved
        else:
            self.synced.pop(d, None)
        prefix = s + os.sep  # a directory renamed: everything under it moves
        for path in [p for p in self.synced if p.startswith(prefix)]:
            self.synced[d + os.sep + path[len(prefix) :]] = self.synced.pop(path)

    def crash(self, directory: Path) -> int:
        """Loses every write under ``directory`` that was not fsynced; returns how many files changed."""
        changed = 0
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            if path.name.endswith(OBSERVER_SUFFIXES) or (path.suffix == ".properties" and path.name != META):
                continue
            key = str(path.resolve())
            current = path.read_bytes()
            synced = self.synced.get(key)
            if synced is not None and synced.inode != path.stat().st_ino:
                synced = None  # the name now holds another file, never synced
            kept = b"" if synced is None else synced.content
            if current == kept:
                continue
            if current.startswith(kept) and len(current) > len(kept) and self.rng.random() < 0.25:
                kept = current[: len(kept) + self.rng.randrange(1, len(current) - len(kept) + 1)]
            path.write_bytes(kept)
            changed += 1
        return changed


class SimEnvironment(Environment):
    """The environment of one simulated run (installed once, before any node is built)."""

    name = "sim"

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.network = SimNetwork()
        self.files = CrashFiles(random.Random(f"{seed}:files"))
        self._randoms: dict[str, int] = {}
        self._ids = random.Random(f"{seed}:ids")
        self._pid = 1000

    def wall_time(self) -> float:
        return trio.current_time()

    def monotonic(self) -> float:
        return trio.current_time()

    async def open_tcp_stream(self, host: str, port: int) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        return self.network.connect(host, port)

    async def open_tcp_listeners(self, port: int, host: str | None) -> list[StreamListener]:
        await trio.lowlevel.checkpoint()
        return [self.network.listen(host, port)]

    def listener_port(self, listener: StreamListener) -> int:
        assert isinstance(listener, SimListener)
        return listener.address[1]

    def close_listener(self, listener: StreamListener) -> None:
        if isinstance(listener, SimListener):
            listener.close()

    def peer_address(self, stream: trio.abc.Stream) -> tuple[str, int]:
        return self.network.peer_of(stream)

    def fsync(self, fd: int) -> None:
        self.files.fsync(fd)

    def replace(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        self.files.replace(src, dst)

    def new_random(self, purpose: str) -> random.Random:
        n = self._randoms[purpose] = self._randoms.get(purpose, 0) + 1
        return random.Random(f"{self.seed}:{purpose}:{n}")

    def uuid4(self) -> str:
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))

    def process_id(self) -> int:
        self._pid += 1
        return self._pid

    async def run_sync(self, fn: Callable[..., T], *args: Any, abandon_on_cancel: bool = False) -> T:
        await trio.lowlevel.checkpoint()
        return fn(*args)
