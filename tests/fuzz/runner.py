"""The fuzz run against a real cluster (docs/fuzzing.md): inputs over several connections to the brokers
(which forward admin requests to the active controller), a watcher sampling every node's liveness, RSS and
the quorum's leader while it runs, and the figures a run prints.

The checks after a run (every node alive, a quorum leader, no acknowledged record lost, RSS bounded) are
the test's (``tests/fuzz/test_fuzz.py``); this module gathers what they read.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trio

from kit.cluster_files import ClusterInfo
from kit.controller_quorum import describe_quorum, leader_of, voters_of
from kit.node_query import ask
from kit.processes import process_state
from protocol.api_keys import ApiKeys
from tests.fuzz.mutate import Input

# How long a connection waits for any bytes of an answer before it gives the connection up and opens a new
# one (a request the broker holds, a frame it still waits the rest of).
REPLY_TIMEOUT_S = 0.5
RECEIVE_BYTES = 1 << 20
# Inputs pipelined on a connection before its sentinel (fewer when a terminal input ends the batch).
BATCH_INPUTS = 32
CONNECT_TIMEOUT_S = 5.0
WATCH_INTERVAL_S = 0.5
# How long the watcher waits for a broker's answer to its probe (a broker that does not answer is hung).
PROBE_TIMEOUT_S = 5.0


def rss_bytes(pid: int | None) -> int:
    """A process's resident set (VmRSS), 0 when it is gone."""
    if pid is None:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class NodeWatch:
    name: str
    pid: int | None
    rss_start: int = 0
    rss_peak: int = 0
    died_at: float | None = None
    # Brokers: the slowest answer to the watcher's API_VERSIONS probe, and probes not answered in time.
    slowest_probe_s: float = 0.0
    probes_unanswered: int = 0


@dataclass
class FuzzStats:
    inputs: int = 0
    answered: int = 0  # inputs after which the broker wrote something
    closed: int = 0  # inputs after which the broker closed the connection
    timed_out: int = 0  # inputs with no answer in REPLY_TIMEOUT_S (the connection was given up)
    connect_failures: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    slow_kinds: Counter[str] = field(default_factory=Counter)  # the kinds of the inputs with no answer
    elapsed_s: float = 0.0
    nodes: dict[str, NodeWatch] = field(default_factory=dict)
    leader_epochs: list[int] = field(default_factory=list)  # every quorum epoch seen, in order
    no_leader_s: float = 0.0  # the longest time the quorum had no leader
    batches_lost: int | None = None
    batches_acked: int | None = None

    @property
    def inputs_per_s(self) -> float:
        return self.inputs / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def crashes(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.died_at is not None]

    @property
    def lost_leaders(self) -> int:
        """How many times the quorum's leader changed during the run."""
        return max(0, len(set(self.leader_epochs)) - 1)

    def summary(self) -> str:
        mib = 1024 * 1024
        rss = ", ".join(
            f"{n.name} {n.rss_peak / mib:.0f} MiB (+{(n.rss_peak - n.rss_start) / mib:.0f})"
            for n in self.nodes.values()
        )
        lost = "not checked" if self.batches_lost is None else f"{self.batches_lost} of {self.batches_acked}"
        probes = ", ".join(
            f"{n.name} {n.slowest_probe_s * 1000:.0f} ms"
            + (f" ({n.probes_unanswered} unanswered)" if n.probes_unanswered else "")
            for n in self.nodes.values()
            if n.name.startswith("broker-")
        )
        return (
            f"fuzz: {self.inputs} inputs in {self.elapsed_s:.1f} s ({self.inputs_per_s:.0f} inputs/s); "
            f"answered {self.answered}, closed by the node {self.closed}, no answer {self.timed_out}, "
            f"connect failures {self.connect_failures}\n"
            f"crashes: {len(self.crashes)} {self.crashes or ''}; quorum leader changes: {self.lost_leaders}, "
            f"longest without a leader {self.no_leader_s:.1f} s; acked batches lost: {lost}\n"
            f"peak RSS: {rss}\n"
            f"slowest answer to the watcher's probe: {probes}"
        )


class _Feed:
    """Hands the inputs out to the connections, ``total`` of them; inputs a connection could not deliver
    (it was closed before them) are given back and handed out first."""

    def __init__(self, source: Iterator[Input], total: int) -> None:
        self.source = source
        self.left = total
        self.back: deque[Input] = deque()

    def next(self) -> Input | None:
        if self.back:
            return self.back.popleft()
        if self.left <= 0:
            return None
        self.left -= 1
        return next(self.source)

    def give_back(self, items: list[Input]) -> None:
        self.back.extendleft(reversed(items))

    def batch(self, size: int) -> list[Input]:
        """Up to ``size`` inputs, ending early after a terminal one (``Input.terminal``)."""
        out: list[Input] = []
        while len(out) < size:
            item = self.next()
            if item is None:
                break
            out.append(item)
            if item.terminal:
                break
        return out


def _numbered(item: Input, correlation_id: int) -> bytes:
    """The input with its correlation id (bytes 8-12 of its one frame) set to ``correlation_id``, so that
    its answer can be told apart; a terminal input, or one too short to have one, goes as it is."""
    data = item.data
    if item.terminal or len(data) < 12:
        return data
    return data[:8] + struct.pack(">i", correlation_id) + data[12:]


def _sentinel(correlation_id: int) -> bytes:
    """API_VERSIONS v0 (an empty body): the broker's answer to it closes a batch of honest frames."""
    payload = struct.pack(">hhih", int(ApiKeys.API_VERSIONS), 0, correlation_id, -1)
    return struct.pack(">I", len(payload)) + payload


class _Answers:
    """Reads a connection's answers (length-prefixed frames) and remembers the correlation ids seen."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.seen: set[int] = set()
        self.eof = False

    async def until(self, wanted: int | None) -> str:
        """Reads until the answer to ``wanted`` ("answered"), the end of the stream ("closed"), or no
        bytes for REPLY_TIMEOUT_S ("timed_out")."""
        while wanted is None or wanted not in self.seen:
            data = b""
            with trio.move_on_after(REPLY_TIMEOUT_S):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = await self.stream.receive_some(RECEIVE_BYTES)
                if not data:
                    self.eof = True
                    return "closed"
            if not data:
                return "timed_out"
            self.buffer += data
            pos = 0
            while len(self.buffer) - pos >= 8:
                (size,) = struct.unpack_from(">I", self.buffer, pos)
                if len(self.buffer) - pos - 4 < size:
                    break
                self.seen.add(struct.unpack_from(">i", self.buffer, pos + 4)[0])
                pos += 4 + size
            del self.buffer[:pos]
        return "answered"


async def _send(stream: trio.SocketStream, data: bytes, half_close: bool) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await stream.send_all(data)
        if half_close:
            await stream.send_eof()


async def _connection_worker(
    host: str, port: int, feed: _Feed, stats: FuzzStats, deadline: float, batch_size: int
) -> None:
    """Sends batches of inputs pipelined on one connection (docs/fuzzing.md): the honest frames of a batch
    numbered by their correlation ids and followed by an API_VERSIONS sentinel, whose answer ends the batch
    with no round trip per input; or ended by a terminal input and a half-close. An input the connection
    was closed before is given back to the feed."""
    stream: trio.SocketStream | None = None
    ids = itertools.count(1)
    try:
        while time.monotonic() < deadline:
            batch = feed.batch(batch_size)
            if not batch:
                return
            if stream is None:
                try:
                    with trio.fail_after(CONNECT_TIMEOUT_S):
                        stream = await trio.open_tcp_stream(host, port)
                except (OSError, trio.TooSlowError):
                    stats.connect_failures += 1
                    feed.give_back(batch)
                    await trio.sleep(0.05)
                    continue
            numbers = [next(ids) & 0x7FFFFFFF for _ in batch]
            frames = [_numbered(item, n) for item, n in zip(batch, numbers, strict=True)]
            terminal = batch[-1].terminal
            sentinel = None if terminal else next(ids) & 0x7FFFFFFF
            if sentinel is not None:
                frames.append(_sentinel(sentinel))
            answers = _Answers(stream)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_send, stream, b"".join(frames), terminal)
                outcome = await answers.until(sentinel)
                nursery.cancel_scope.cancel()
            answered = [i for i, n in enumerate(numbers) if n in answers.seen]
            delivered = len(batch)
            if outcome == "closed" and not terminal:
                # Closed by an input: the one after the last answered. What follows it was never read.
                delivered = min(len(batch), (answered[-1] + 2) if answered else 1)
                feed.give_back(batch[delivered:])
            for item in batch[:delivered]:
                stats.kinds[item.kind] += 1
            stats.inputs += delivered
            stats.answered += len(answered)
            if outcome == "timed_out":
                stats.timed_out += 1
                held = batch[answered[-1] + 1 if answered else 0] if len(answered) < len(batch) else batch[-1]
                stats.slow_kinds[held.kind] += 1
            elif outcome == "closed":
                stats.closed += 1
            if outcome != "answered":
                await trio.aclose_forcefully(stream)
                stream = None
    finally:
        if stream is not None:
            await trio.aclose_forcefully(stream)


async def _watch(info: ClusterInfo, stats: FuzzStats, done: trio.Event) -> None:
    voters = voters_of(info)
    no_leader_since: float | None = None
    while not done.is_set():
        for node in stats.nodes.values():
            if node.died_at is None and process_state(node.pid) != "running":
                node.died_at = time.monotonic()
            node.rss_peak = max(node.rss_peak, rss_bytes(node.pid))
        for b in info.brokers:
            node = stats.nodes[f"broker-{b.id}"]
            if node.died_at is not None:
                continue
            t = time.monotonic()
            answer = await ask(b.host, b.port, ApiKeys.API_VERSIONS, {}, PROBE_TIMEOUT_S)
            node.slowest_probe_s = max(node.slowest_probe_s, time.monotonic() - t)
            if answer is None:
                node.probes_unanswered += 1
        leader = leader_of(await describe_quorum(voters))
        now = time.monotonic()
        if leader is None:
            no_leader_since = no_leader_since or now
            stats.no_leader_s = max(stats.no_leader_s, now - no_leader_since)
        else:
            no_leader_since = None
            if not stats.leader_epochs or stats.leader_epochs[-1] != leader.epoch:
                stats.leader_epochs.append(leader.epoch)
        with trio.move_on_after(WATCH_INTERVAL_S):
            await done.wait()


async def run_fuzz(
    info: ClusterInfo,
    source: Iterator[Input],
    total: int,
    *,
    connections: int = 24,
    max_seconds: float = 600.0,
    batch_size: int = BATCH_INPUTS,
) -> FuzzStats:
    """Sends ``total`` inputs (or as many as fit in ``max_seconds``) over ``connections`` connections spread
    over the brokers, up to ``batch_size`` pipelined at a time on each, while watching every node."""
    stats = FuzzStats()
    for c in info.controllers:
        stats.nodes[f"controller-{c.id}"] = NodeWatch(f"controller-{c.id}", c.pid)
    for b in info.brokers:
        stats.nodes[f"broker-{b.id}"] = NodeWatch(f"broker-{b.id}", b.pid)
    for node in stats.nodes.values():
        node.rss_start = node.rss_peak = rss_bytes(node.pid)
    feed = _Feed(source, total)
    first = feed.next()  # the stream's first input makes its pool of schema-valid requests: not timed
    if first is not None:
        feed.give_back([first])
    done = trio.Event()
    start = time.monotonic()
    deadline = start + max_seconds
    async with trio.open_nursery() as outer:
        outer.start_soon(_watch, info, stats, done)
        async with trio.open_nursery() as workers:
            for i in range(connections):
                b = info.brokers[i % len(info.brokers)]
                workers.start_soon(_connection_worker, b.host, b.port, feed, stats, deadline, batch_size)
        stats.elapsed_s = time.monotonic() - start
        done.set()
    return stats
