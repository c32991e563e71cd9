"""Kafka's ``SimpleMemoryPool`` (non-strict) for request bytes, ``queued.max.request.bytes``, and the
connection limits of Kafka's ``ConnectionQuotas`` (``max.connections``, ``max.connections.per.ip``).

Both are plain bookkeeping with no sockets; the socket server (``network.py``) asks them and waits.

**The memory pool.** A connection that has read the length prefix of a request asks the pool for that many
bytes before it reads the rest; a request holds its bytes until its response is ready (or its connection
closes). When the pool cannot give them, the connection stops reading its socket until enough is released
(Kafka mutes the channel), so TCP pushes back on the client. As Kafka's pool in non-strict mode, an
allocation succeeds while any memory is left, so one request may take it below zero: the bytes held never
exceed ``size + socket.request.max.bytes``, and a request larger than what is left is not starved by
smaller ones. ``size <= 0`` means no limit (Kafka's ``MemoryPool.NONE``, its default -1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable


class MemoryPool:
    def __init__(self, size_bytes: int) -> None:
        self.size = size_bytes
        self._available = size_bytes
        self.out_of_memory_episodes = 0
        self._on_release: list[Callable[[], None]] = []

    @property
    def bounded(self) -> bool:
        return self.size > 0

    @property
    def available(self) -> int:
        return self._available

    @property
    def allocated(self) -> int:
        return self.size - self._available if self.bounded else 0

    def add_release_listener(self, listener: Callable[[], None]) -> None:
        self._on_release.append(listener)

    def try_allocate(self, nbytes: int) -> bool:
        """Takes ``nbytes`` if any memory is left (non-strict), else False (the caller waits)."""
        if not self.bounded:
            return True
        if self._available <= 0:
            return False
        self._available -= nbytes
        if self._available <= 0:
            self.out_of_memory_episodes += 1
        return True

    def release(self, nbytes: int) -> None:
        if not self.bounded or nbytes <= 0:
            return
        self._available += nbytes
        if self._available > self.size:
            raise AssertionError(f"memory pool released more than it gave: {self._available} > {self.size}")
        for listener in self._on_release:
            listener()


class ConnectionQuotas:
    """Open connections per address and in all (Kafka's ``ConnectionQuotas``): ``max.connections`` makes
    the acceptor wait for a free slot; ``max.connections.per.ip`` refuses (closes) a connection beyond it."""

    def __init__(self, max_connections: int, max_connections_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._per_ip: Counter[str] = Counter()
        self.total = 0
        self.refused_per_ip = 0

    def can_accept(self) -> bool:
        """A slot is free for one more connection (else the acceptor waits)."""
        return self.total < self.max_connections

    def inc(self, address: str) -> bool:
        """Counts a new connection from ``address``; False (not counted) if the address is at its limit."""
        if self._per_ip[address] >= self.max_connections_per_ip:
            self.refused_per_ip += 1
            return False
        self._per_ip[address] += 1
        self.total += 1
        return True

    def dec(self, address: str) -> None:
        self._per_ip[address] -= 1
        if self._per_ip[address] <= 0:
            del self._per_ip[address]
        self.total -= 1

    def count(self, address: str) -> int:
        return self._per_ip[address]
