"""Scenario 6: fetch sessions with 1,000 idle partitions on one leader.

Two brokers; broker 1 leads every partition, broker 2 follows and reaches it through a frame-counting TCP
proxy, so request and response sizes are measured on the wire. Nothing is produced: every FETCH is idle
(the leader holds it for ``replica.fetch.wait.max.ms``, then answers with nothing new).

Run twice on fresh brokers:
* incremental: the leader keeps sessions (Kafka's default cache): the first FETCH is full and opens a
  session, every later one is incremental and lists no partition;
* full: the leader keeps no sessions (``max.incremental.fetch.session.cache.slots=0``), so every FETCH
  lists all 1,000 partitions and every response answers all of them.

Leader CPU per fetch round is the leader's utime+stime (``/proc/<pid>/stat``) over a window divided by the
FETCH requests in it, after subtracting what the same leader burns over an equal window with no follower
(its timers and journal).
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import struct
import threading
import time
from collections import deque
from typing import Any

import msgpack
import trio

from kit.processes import async_wait_until
from lab.bench.cluster import BenchBroker, BenchCluster
from lab.bench.context import BenchContext
from lab.bench.profile import start_recording, summarize
from lab.bench.results import Figure, ScenarioResult, Target
from protocol import ApiKeys

FETCH_WAIT_MS = 100
# An idle incremental round must cost the leader far less than a full one (KIP-227): targets of the issue.
TARGET_INCREMENTAL_CPU_MS = 4.0
TARGET_INCREMENTAL_CPU_SHARE = 0.20
_LEN = struct.Struct(">I")


class FrameCountingProxy:
    """A TCP proxy (threads) in front of a leader that records ``(time, api_key, session_epoch, request
    bytes, response bytes)`` of each request the follower sends; responses are matched in order (one
    connection answers in request order)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address: tuple[str, int] = self.listener.getsockname()[:2]
        self.requests: list[list[Any]] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = [self.listener]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                return
            self._sockets += [client, upstream]
            waiting: deque[list[Any]] = deque()
            threading.Thread(target=self._pump, args=(client, upstream, waiting, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, waiting, False), daemon=True).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, waiting: deque[list[Any]], requests: bool
    ) -> None:
        buf = bytearray()
        try:
            while chunk := src.recv(1 << 18):
                dst.sendall(chunk)
                buf += chunk
                while len(buf) >= 4:
                    (n,) = _LEN.unpack_from(buf)
                    if len(buf) < 4 + n:
                        break
                    if requests:
                        msg = msgpack.unpackb(bytes(buf[4 : 4 + n]), raw=False)
                        body = msg.get("body") or {}
                        row = [time.monotonic(), msg["api_key"], body.get("session_epoch", -99), n + 4, None]
                        with self._lock:
                            waiting.append(row)
                            self.requests.append(row)
                    else:
                        with self._lock:
                            if waiting:
                                waiting.popleft()[4] = n + 4
                    del buf[: 4 + n]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def fetches(self) -> list[list[Any]]:
        with self._lock:
            return [list(r) for r in self.requests if r[1] == ApiKeys.FETCH]

    def close(self) -> None:
        self._stop.set()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()


async def _measure(ctx: BenchContext, mode: str, slots: int) -> dict[str, Any]:
    p = ctx.params
    cluster = BenchCluster(ctx.scenario_dir("fetch-sessions") / mode)
    proxy: FrameCountingProxy | None = None
    try:
        ctx.step(f"{mode}: starting a leader and a follower")
        leader, follower = await cluster.start(
            [1, 2],
            per_broker={
                1: {"max.incremental.fetch.session.cache.slots": str(slots)},
                2: {"replica.fetch.wait.max.ms": str(FETCH_WAIT_MS)},
            },
        )
        parts = {p_: 1 for p_ in range(p.idle_partitions)}
        ctx.step(f"{mode}: leader takes {p.idle_partitions:,} partitions")
        await cluster.send_leader_and_isr(
            [leader], cluster.leader_and_isr_body("idle", parts, leader_epoch=1, replicas=[1, 2])
        )
        idle_cpu = await _cpu_over(leader, p.idle_window_s, ctx, f"{mode}: leader idle, no follower")

        proxy = FrameCountingProxy(leader.address)
        body = cluster.leader_and_isr_body(
            "idle", parts, leader_epoch=1, replicas=[1, 2], leader_address={1: proxy.address}
        )
        ctx.step(f"{mode}: follower takes {p.idle_partitions:,} partitions")
        await cluster.send_leader_and_isr([follower], body)
        watched = proxy
        await async_wait_until(
            lambda: len(watched.fetches()) >= 5, 60, "five FETCH requests through the proxy"
        )
        n0 = len(proxy.fetches())
        recording = None
        if p.profile and ctx.out_dir is not None:
            recording = start_recording(f"fetch-sessions-{mode}-leader", leader.pid, ctx.out_dir)
        busy_cpu = await _cpu_over(leader, p.idle_window_s, ctx, f"{mode}: follower fetching")
        profile = None
        if recording is not None:
            out = await trio.to_thread.run_sync(recording.stop)
            profile = summarize(out).to_json() | {"file": out.name} if out is not None else None
        fetches = proxy.fetches()
        window = [f for f in fetches[n0:] if f[4] is not None]
        rounds = len(fetches) - n0
        sessions = (await cluster.describe(leader))["fetch_sessions"]
    finally:
        if proxy is not None:
            proxy.close()
        cluster.close()
    first = fetches[0]
    return {
        "mode": mode,
        "first_request_bytes": first[3],
        "first_request_epoch": first[2],
        "first_response_bytes": first[4],
        "request_bytes_median": statistics.median(f[3] for f in window) if window else None,
        "request_bytes_max": max((f[3] for f in window), default=None),
        "response_bytes_median": statistics.median(f[4] for f in window) if window else None,
        "epochs_seen": sorted({f[2] for f in window})[:5],
        "rounds": rounds,
        "window_s": p.idle_window_s,
        "leader_cpu_s_idle": round(idle_cpu, 4),
        "leader_cpu_s_fetching": round(busy_cpu, 4),
        "leader_cpu_ms_per_round": (busy_cpu - idle_cpu) * 1000 / rounds if rounds else None,
        "leader_cpu_ms_per_round_gross": busy_cpu * 1000 / rounds if rounds else None,
        "leader_fetch_sessions": sessions,
        "leader_profile": profile,
    }


async def _cpu_over(broker: BenchBroker, seconds: float, ctx: BenchContext, what: str) -> float:
    ctx.step(f"{what} ({seconds:.0f}s)")
    c0 = broker.cpu_seconds()
    await trio.sleep(seconds)
    return broker.cpu_seconds() - c0


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    inc = await _measure(ctx, "incremental", 1000)
    full = await _measure(ctx, "full", 0)
    full_bytes = full["request_bytes_median"] or inc["first_request_bytes"]
    inc_bytes = inc["request_bytes_max"]
    n = ctx.params.idle_partitions
    result.add(
        Figure(
            "full_fetch_request_bytes",
            f"(6) full FETCH request, {n:,} partitions",
            full_bytes,
            "B",
            note=f"response {full['response_bytes_median']:,.0f} B" if full["response_bytes_median"] else "",
        )
    )
    if inc_bytes is not None:
        result.add(
            Figure(
                "incremental_fetch_request_bytes",
                "(6) idle incremental FETCH request (largest)",
                inc_bytes,
                "B",
                Target("<=", 0.02 * full_bytes, "<= 2% of full"),
                ratio=inc_bytes / full_bytes,
                ratio_to="full",
                note=f"response {inc['response_bytes_median']:,.0f} B",
            )
        )
    full_cpu = full["leader_cpu_ms_per_round"]
    inc_cpu = inc["leader_cpu_ms_per_round"]
    for key, data in (("full", full), ("incremental", inc)):
        cpu = data["leader_cpu_ms_per_round"]
        result.add(
            Figure(
                f"leader_cpu_ms_per_round_{key}",
                f"(6) leader CPU per idle fetch round, {key}",
                cpu,
                "ms",
                Target("<=", TARGET_INCREMENTAL_CPU_MS) if key == "incremental" else None,
                ratio=cpu / full_cpu if key == "incremental" and cpu is not None and full_cpu else None,
                ratio_to="full",
                note=f"{data['rounds']} rounds in {data['window_s']:.0f}s, net of idle",
            )
        )
    if full_cpu and inc_cpu is not None:
        share = inc_cpu / full_cpu
        result.add(
            Figure(
                "leader_cpu_incremental_share_of_full",
                "(6) leader CPU per idle round: incremental as a share of full",
                share * 100,
                "%",
                Target("<=", TARGET_INCREMENTAL_CPU_SHARE * 100),
            )
        )
        result.details["cpu_ratio_incremental_to_full"] = round(share, 4)
    result.details |= {"incremental": inc, "full": full, "replica_fetch_wait_max_ms": FETCH_WAIT_MS}
