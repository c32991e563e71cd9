"""Broker processes for benchmarks, under one temporary root, laid out like ``isrsim cluster up``'s
(``broker-<id>/`` holding ``data/`` (log.dirs), ``events.jsonl`` and the process log; ``cluster.json``),
so the report job can read what a scenario leaves behind.

Leadership is given with LEADER_AND_ISR from the benchmark (the brokers are unmanaged), as the integration
tests do. Every process is started in its own session (a Ctrl-C of the benchmark does not reach it) and is
killed by :meth:`BenchCluster.close`, which the runner calls in a ``finally``; an ``atexit`` hook kills any
that are still alive if the interpreter exits some other way.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import trio

from broker import read_journal
from protocol import ApiKeys, open_connection

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
BENCH_CONTROLLER_ID = 100
CLK_TCK = os.sysconf("SC_CLK_TCK")

T = TypeVar("T")

_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            try:
                proc.kill()
                proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
    _LIVE.clear()


class BenchError(RuntimeError):
    """A benchmark step failed; the message says which and shows what the process said."""


def isrsim_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", *args]


def spawn(args: list[str], *, log_path: Path | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Starts a helper process in its own session, remembered so it is killed at exit."""
    out: Any = subprocess.DEVNULL
    if log_path is not None:
        out = open(log_path, "ab")  # noqa: SIM115 (the child holds it; we close our copy below)
    try:
        proc = subprocess.Popen(
            args,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=kwargs.pop("stdout", out),
            stderr=kwargs.pop("stderr", out),
            start_new_session=True,
            **kwargs,
        )
    finally:
        if log_path is not None:
            out.close()
    _LIVE.add(proc)
    return proc


def reap(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT_S) -> int:
    """Kills ``proc`` if it still runs, and waits for it."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        code = -9
    _LIVE.discard(proc)
    return code


async def wait_for(
    cond: Callable[[], T | Awaitable[T | None] | None],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.02,
) -> T:
    """Polls ``cond`` (sync or async) until it is truthy; raises :class:`BenchError` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            text = what() if callable(what) else what
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {text}")
        await trio.sleep(interval)


def read_events(path: Path, event: str | None = None) -> list[dict[str, Any]]:
    """A ``.jsonl`` journal's objects (a torn last line is skipped; a missing file is empty)."""
    return read_journal(path, event)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


# ------------------------------------------------------------------------------------------ /proc


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (``/proc/<pid>/stat``), in seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the ")" closing comm: state is field 3, utime field 14, stime field 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_kib(pid: int, key: str) -> int:
    """A ``kB`` line of ``/proc/<pid>/status`` (``VmHWM``: peak resident set; ``VmRSS``: current)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise BenchError(f"/proc/{pid}/status has no {key}")


# ------------------------------------------------------------------------------------------ brokers


class BenchBroker:
    """One broker: ``<root>/broker-<id>/`` and at most one running process at a time."""

    def __init__(self, broker_id: int, root: Path, overrides: Mapping[str, str]) -> None:
        self.broker_id = broker_id
        self.dir = root / f"broker-{broker_id}"
        self.log_dir = self.dir / "data"
        self.overrides = {
            "listeners": "127.0.0.1:0",
            "log.dirs": str(self.log_dir),
            "journal.dir": str(self.dir),
            **overrides,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = -1

    @property
    def events_path(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def log_path(self) -> Path:
        return self.dir / "broker.log"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise BenchError(f"broker {self.broker_id} is not running")
        return self.proc.pid

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        if self.is_running():
            raise BenchError(f"broker {self.broker_id} is already running")
        self.dir.mkdir(parents=True, exist_ok=True)
        args = ["broker", "start", "--id", str(self.broker_id), "--log-level", "WARNING"]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        self.proc = spawn(isrsim_cmd(*args), log_path=self.log_path)
        self.port = -1

    async def wait_started(self, timeout: float = START_TIMEOUT_S) -> int:
        proc = self.proc
        if proc is None:
            raise BenchError(f"broker {self.broker_id} was never launched")

        def started() -> dict[str, Any] | None:
            if proc.poll() is not None:
                raise BenchError(
                    f"broker {self.broker_id} exited with {proc.returncode} during start-up:\n"
                    f"{tail(self.log_path)}"
                )
            for e in reversed(read_events(self.events_path, "broker_started")):
                if e.get("pid") == proc.pid:
                    return e
            return None

        event = await wait_for(started, timeout, f"broker {self.broker_id} to start", interval=0.05)
        self.host, self.port = str(event["host"]), int(event["port"])
        return self.port

    async def start(self) -> int:
        self.launch()
        return await self.wait_started()

    async def kill(self, sig: int = signal.SIGKILL, timeout: float = STOP_TIMEOUT_S) -> int:
        """Sends ``sig`` and waits (without blocking trio) for the process to exit."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return 0 if proc is None else proc.returncode
        proc.send_signal(sig)
        try:
            await wait_for(lambda: proc.poll() is not None, timeout, f"broker {self.broker_id} to exit")
        except BenchError:
            reap(proc)
            raise
        _LIVE.discard(proc)
        return proc.returncode

    async def stop(self) -> None:
        """Clean stop (SIGTERM)."""
        code = await self.kill(signal.SIGTERM)
        if code != 0:
            raise BenchError(f"broker {self.broker_id} exited with {code} on SIGTERM:\n{tail(self.log_path)}")

    def close(self) -> None:
        if self.proc is not None:
            reap(self.proc)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def peak_rss_mib(self) -> float:
        return status_kib(self.pid, "VmHWM") / 1024

    def live_leader(self) -> dict[str, Any]:
        return {"broker_id": self.broker_id, "host_name": self.host, "port": self.port}


class BenchCluster:
    """Unmanaged brokers under ``root``; ``close()`` kills every process."""

    def __init__(self, root: Path, overrides: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.overrides = dict(overrides or {})
        self.brokers: dict[int, BenchBroker] = {}
        self.controller_epoch = 1
        root.mkdir(parents=True, exist_ok=True)

    async def start(
        self,
        ids: Iterable[int],
        overrides: Mapping[str, str] | None = None,
        per_broker: Mapping[int, Mapping[str, str]] | None = None,
    ) -> list[BenchBroker]:
        """Starts brokers in parallel (each takes a moment to import) and waits for all of them.
        ``per_broker`` adds overrides for single brokers."""
        started = []
        for i in ids:
            extra = (per_broker or {}).get(i, {})
            b = BenchBroker(i, self.root, {**self.overrides, **(overrides or {}), **extra})
            self.brokers[i] = b
            b.launch()
            started.append(b)
        for b in started:
            await b.wait_started()
        self.write_cluster_json()
        return started

    def write_cluster_json(self) -> None:
        """``cluster.json`` as ``isrsim cluster up`` writes it (docs/storage.md), for outside tools."""
        doc = {
            "controller": None,
            "brokers": [
                {
                    "id": b.broker_id,
                    "host": b.host,
                    "port": b.port,
                    "pid": b.proc.pid if b.proc is not None else None,
                    "dir": str(b.dir),
                    "log_dir": str(b.log_dir),
                }
                for b in self.brokers.values()
            ],
        }
        (self.root / "cluster.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")

    def __getitem__(self, broker_id: int) -> BenchBroker:
        return self.brokers[broker_id]

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        return [b.address for b in self.brokers.values() if b.is_running()]

    async def stop_all(self) -> None:
        """Stops every running broker cleanly (SIGTERM), all at once."""
        async with trio.open_nursery() as nursery:
            for b in self.brokers.values():
                if b.is_running():
                    nursery.start_soon(b.stop)

    def close(self) -> None:
        for b in self.brokers.values():
            b.close()

    # ---------------------------------------------------------------- controller's requests

    def leader_and_isr_body(
        self,
        topic: str,
        leaders: Mapping[int, int],
        *,
        leader_epoch: int,
        isr: Mapping[int, Sequence[int]] | None = None,
        replicas: Sequence[int] | None = None,
        live: Sequence[BenchBroker] | None = None,
        leader_address: Mapping[int, tuple[str, int]] | None = None,
    ) -> dict[str, Any]:
        """LEADER_AND_ISR for ``topic``: partition -> leader in ``leaders``; ISR defaults to the replicas.
        ``leader_address`` points followers of a leader at another address (a proxy)."""
        replicas = list(replicas) if replicas is not None else sorted(self.brokers)
        live_leaders = {b.broker_id: b.live_leader() for b in (live or self.brokers.values()) if b.port > 0}
        for broker_id, (host, port) in (leader_address or {}).items():
            live_leaders[broker_id] = {"broker_id": broker_id, "host_name": host, "port": port}
        return {
            "controller_id": BENCH_CONTROLLER_ID,
            "controller_epoch": self.controller_epoch,
            "broker_epoch": -1,
            "topic_states": [
                {
                    "topic_name": topic,
                    "partition_states": [
                        {
                            "partition_index": p,
                            "controller_epoch": self.controller_epoch,
                            "leader": leader,
                            "leader_epoch": leader_epoch,
                            "isr": list(isr[p]) if isr is not None else replicas,
                            "partition_epoch": leader_epoch,
                            "replicas": replicas,
                            "is_new": False,
                        }
                        for p, leader in sorted(leaders.items())
                    ],
                }
            ],
            "live_leaders": list(live_leaders.values()),
        }

    async def send_leader_and_isr(self, targets: Sequence[BenchBroker], body: dict[str, Any]) -> None:
        """Sends ``body`` to each target in order (leaders first, as a controller does) and checks it."""
        for b in targets:
            resp = await request(b.address, ApiKeys.LEADER_AND_ISR, body, timeout=60)
            bad = [e for e in resp.get("partition_errors", []) if e["error_code"] != 0]
            if resp.get("error_code", 0) != 0 or bad:
                raise BenchError(
                    f"LEADER_AND_ISR to broker {b.broker_id} failed: {resp.get('error_code')} {bad[:3]}"
                )

    async def assign(
        self,
        topic: str,
        partitions: int,
        *,
        leaders: Sequence[int] | None = None,
        replicas: Sequence[int] | None = None,
        leader_epoch: int = 1,
    ) -> dict[int, int]:
        """Makes ``topic`` with ``partitions`` partitions replicated on ``replicas`` (default: every broker),
        leaders round-robin over ``leaders`` (default: the replicas). Returns partition -> leader."""
        replicas = list(replicas) if replicas is not None else sorted(self.brokers)
        order = list(leaders) if leaders is not None else replicas
        leader_of = {p: order[p % len(order)] for p in range(partitions)}
        body = self.leader_and_isr_body(topic, leader_of, leader_epoch=leader_epoch, replicas=replicas)
        targets = [self.brokers[i] for i in dict.fromkeys([*order, *replicas])]
        await self.send_leader_and_isr(targets, body)
        return leader_of

    async def describe(self, broker: BenchBroker) -> dict[str, Any]:
        return await request(broker.address, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None}, timeout=30)

    async def partitions_view(self, broker: BenchBroker) -> dict[tuple[str, int], dict[str, Any]]:
        resp = await self.describe(broker)
        return {(p["topic"], p["partition"]): p for p in resp["partitions"]}

    async def wait_converged(
        self,
        topic: str,
        partitions: int,
        *,
        timeout: float = 120.0,
        brokers: Sequence[BenchBroker] | None = None,
    ) -> int:
        """Waits until every running replica has the same LEO and HW == LEO on every partition; returns the
        total LEO."""
        members = list(brokers or [b for b in self.brokers.values() if b.is_running()])

        async def converged() -> int | None:
            views = [await self.partitions_view(b) for b in members]
            total = 0
            for p in range(partitions):
                tp = (topic, p)
                seen = {(v[tp]["log_end_offset"], v[tp]["high_watermark"]) for v in views if tp in v}
                if len(seen) != 1 or any(tp not in v for v in views):
                    return None
                leo, hw = seen.pop()
                if leo != hw:
                    return None
                total += leo
            return total + 1  # truthy even for an empty topic

        return await wait_for(converged, timeout, f"{topic} to converge on every replica", interval=0.1) - 1


async def request(
    address: tuple[str, int], api_key: int, body: Any, *, timeout: float = 30.0
) -> dict[str, Any]:
    """One request on a fresh connection; the response body."""
    async with open_connection(address[0], address[1], client_id="isrsim-bench") as conn:
        return await conn.request(api_key, body, timeout=timeout)


def dir_bytes(path: Path, pattern: str = "*.log") -> int:
    return sum(p.stat().st_size for p in path.rglob(pattern) if p.is_file())
