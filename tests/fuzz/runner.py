"""The fuzz run against a real cluster (docs/fuzzing.md): inputs over several connections to the brokers
(which forward admin requests to the active controller), a watcher sampling every node's liveness, RSS and
the quorum's leader while it runs, and the figures a run prints.

The checks after a run (every node alive, a quorum leader, no acknowledged record lost, RSS bounded) are
the test's (``tests/fuzz/test_fuzz.py``); this module gathers what they read.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trio

from kit.cluster_files import ClusterInfo
from kit.controller_quorum import describe_quorum, leader_of, voters_of
from kit.processes import process_state
from tests.fuzz.mutate import Input

# How long a connection waits for any answer to an input before it gives the connection up and opens a new
# one (a request the broker holds, a frame it still waits the rest of).
REPLY_TIMEOUT_S = 0.5
CONNECT_TIMEOUT_S = 5.0
WATCH_INTERVAL_S = 0.5


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
        return (
            f"fuzz: {self.inputs} inputs in {self.elapsed_s:.1f} s ({self.inputs_per_s:.0f} inputs/s); "
            f"answered {self.answered}, closed by the node {self.closed}, no answer {self.timed_out}, "
            f"connect failures {self.connect_failures}\n"
            f"crashes: {len(self.crashes)} {self.crashes or ''}; quorum leader changes: {self.lost_leaders}, "
            f"longest without a leader {self.no_leader_s:.1f} s; acked batches lost: {lost}\n"
            f"peak RSS: {rss}"
        )


class _Feed:
    """Hands the inputs out to the connections, ``total`` of them."""

    def __init__(self, source: Iterator[Input], total: int) -> None:
        self.source = source
        self.left = total

    def next(self) -> Input | None:
        if self.left <= 0:
            return None
        self.left -= 1
        return next(self.source)


async def _connection_worker(host: str, port: int, feed: _Feed, stats: FuzzStats, deadline: float) -> None:
    stream: trio.SocketStream | None = None
    try:
        while time.monotonic() < deadline:
            item = feed.next()
            if item is None:
                return
            if stream is None:
                try:
                    with trio.fail_after(CONNECT_TIMEOUT_S):
                        stream = await trio.open_tcp_stream(host, port)
                except (OSError, trio.TooSlowError):
                    stats.connect_failures += 1
                    await trio.sleep(0.05)
                    continue
            stats.inputs += 1
            stats.kinds[item.kind] += 1
            outcome = "timed_out"
            try:
                with trio.move_on_after(REPLY_TIMEOUT_S):
                    await stream.send_all(item.data)
                    if item.eof:
                        await stream.send_eof()
                    outcome = "answered" if await stream.receive_some(65536) else "closed"
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                outcome = "closed"
            if outcome == "answered":
                stats.answered += 1
            elif outcome == "closed":
                stats.closed += 1
            else:
                stats.timed_out += 1
                stats.slow_kinds[item.kind] += 1
            if outcome != "answered" or item.eof:
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
    connections: int = 12,
    max_seconds: float = 600.0,
) -> FuzzStats:
    """Sends ``total`` inputs (or as many as fit in ``max_seconds``) over ``connections`` connections spread
    over the brokers, while watching every node."""
    stats = FuzzStats()
    for c in info.controllers:
        stats.nodes[f"controller-{c.id}"] = NodeWatch(f"controller-{c.id}", c.pid)
    for b in info.brokers:
        stats.nodes[f"broker-{b.id}"] = NodeWatch(f"broker-{b.id}", b.pid)
    for node in stats.nodes.values():
        node.rss_start = node.rss_peak = rss_bytes(node.pid)
    feed = _Feed(source, total)
    done = trio.Event()
    start = time.monotonic()
    deadline = start + max_seconds
    async with trio.open_nursery() as outer:
        outer.start_soon(_watch, info, stats, done)
        async with trio.open_nursery() as workers:
            for i in range(connections):
                b = info.brokers[i % len(info.brokers)]
                workers.start_soon(_connection_worker, b.host, b.port, feed, stats, deadline)
        stats.elapsed_s = time.monotonic() - start
        done.set()
    return stats
