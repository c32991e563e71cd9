"""Broker processes for benchmarks, under one temporary root, laid out like ``isrsim cluster up``'s
(``broker-<id>/`` holding ``data/`` (log.dirs), ``events.jsonl`` and the process log; ``cluster.json``),
so the report job can read what a scenario leaves behind.

Leadership is given with LEADER_AND_ISR from the benchmark (the brokers are unmanaged), as the integration
tests do. The processes are the kit's (:mod:`kit.processes`): each in its own session (a Ctrl-C of the
benchmark does not reach it), killed by :meth:`BenchCluster.close`, which the runner calls in a ``finally``,
and by the kit if the interpreter exits some other way.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from kit import unmanaged
from kit.errors import KitError
from kit.node_query import request as node_request
from kit.processes import BrokerProcess, async_wait_until, launch
from protocol import CLUSTER_FILE, ApiKeys

REPO_ROOT = Path(__file__).resolve().parents[2]
# The log level of the benchmark's brokers and controllers (``ISRSIM_BENCH_LOG_LEVEL=DEBUG`` with
# ``--keep`` to see what a figure is made of).
LOG_LEVEL = os.environ.get("ISRSIM_BENCH_LOG_LEVEL", "WARNING")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(KitError):
    """A benchmark step failed; the message says which and shows what the process said."""


def launch_owned(args: list[str], *, log_path: Path | None = None, **options: Any) -> subprocess.Popen[bytes]:
    """A helper process of the benchmark (the report job, a profiler, a sink), run from the repository and
    killed at exit if the benchmark forgets it (:func:`kit.processes.launch`)."""
    return launch(args, log_path, owned=True, cwd=REPO_ROOT, **options)


# ------------------------------------------------------------------------------------------ /proc


def cpu_seconds(pid: int) -> float:
    """CPU time of a process, in seconds: its live threads' run time in nanoseconds
    (``/proc/<pid>/task/*/schedstat``), so that a short smoke run's few milliseconds are not rounded to
    clock ticks, plus what threads that have exited used (the process's utime + stime, in 10 ms ticks,
    less its live threads' own); only the ticks where schedstat is not available."""
    total = _stat_ticks(f"/proc/{pid}/stat")
    try:
        live_ns = 0
        live_ticks = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                    ns = int(f.read().split()[0])
                ticks = _stat_ticks(f"/proc/{pid}/task/{task}/stat")
            except FileNotFoundError:  # the thread exited meanwhile: it is in the process's total
                continue
            live_ns += ns
            live_ticks += ticks
    except (OSError, ValueError, IndexError):
        return total / CLK_TCK
    return live_ns / 1e9 + max(0, total - live_ticks) / CLK_TCK


def _stat_ticks(path: str) -> int:
    """utime + stime of a ``stat`` file, in clock ticks."""
    with open(path, encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the ")" closing comm: state is field 3, utime field 14, stime field 15 (1-based).
    return int(fields[11]) + int(fields[12])


def status_kib(pid: int, key: str) -> int:
    """A ``kB`` line of ``/proc/<pid>/status`` (``VmHWM``: peak resident set; ``VmRSS``: current)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise BenchError(f"/proc/{pid}/status has no {key}")


# ------------------------------------------------------------------------------------------ brokers


class BenchBroker(BrokerProcess):
    """One broker: ``<root>/broker-<id>/`` (its journal there, its data in ``data/``) and at most one
    running process at a time."""

    def __init__(self, broker_id: int, root: Path, overrides: Mapping[str, str]) -> None:
        self.dir = root / f"broker-{broker_id}"
        super().__init__(
            broker_id,
            self.dir / "data",
            log_path=self.dir / "broker.log",
            overrides=overrides,
            journal_dir=self.dir,
            log_level=LOG_LEVEL,
            cwd=REPO_ROOT,
        )

    async def stop(self) -> None:
        """Clean stop (SIGTERM)."""
        code = await self.kill_async(signal.SIGTERM)
        if code != 0:
            raise BenchError(f"broker {self.broker_id} exited with {code} on SIGTERM:\n{self.log_tail(25)}")

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
            await b.wait_started_async()
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
        (self.root / CLUSTER_FILE).write_text(json.dumps(doc, indent=2), encoding="utf-8")

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
        """LEADER_AND_ISR for ``topic`` (:func:`kit.unmanaged.leader_and_isr_body`): partition -> leader in
        ``leaders``; ISR defaults to the replicas, replicas to every broker."""
        return unmanaged.leader_and_isr_body(
            topic,
            leaders,
            leader_epoch=leader_epoch,
            replicas=list(replicas) if replicas is not None else sorted(self.brokers),
            isr=isr,
            live=live or list(self.brokers.values()),
            leader_address=leader_address,
            controller_epoch=self.controller_epoch,
        )

    async def send_leader_and_isr(self, targets: Sequence[BenchBroker], body: dict[str, Any]) -> None:
        """Sends ``body`` to each target in order (leaders first, as a controller does) and checks it."""
        await unmanaged.send_leader_and_isr(targets, body)

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
        return await unmanaged.replica_state(broker)

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

        async def done() -> dict[tuple[str, int], tuple[int, int]] | None:
            views = [await self.partitions_view(b) for b in members]
            return unmanaged.converged(views, topic, range(partitions))

        offsets = await async_wait_until(done, timeout, f"{topic} to converge on every replica", 0.1)
        return sum(leo for leo, _ in offsets.values())


async def request(
    address: tuple[str, int], api_key: int, body: Any, *, timeout: float = 30.0
) -> dict[str, Any]:
    """One request on a fresh connection; the response body."""
    return await node_request(
        address[0], address[1], api_key, body, timeout=timeout, client_id="isrsim-bench"
    )


def dir_bytes(path: Path, pattern: str = "*.log") -> int:
    return sum(p.stat().st_size for p in path.rglob(pattern) if p.is_file())
