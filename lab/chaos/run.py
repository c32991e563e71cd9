"""The chaos run (``isrsim chaos``, docs/faults.md): an acks=all workload and a seeded nemesis against a
running cluster, then heal, converge, stop and report.

1. The schedule (``lab.chaos.schedule``, pure) is drawn from a seed and written to ``<root>/chaos.json``.
2. The workload (``kit.producer.Producer``, in this process; or with ``client="librdkafka"`` Kafka's own C
   client, ``kit.librdkafka_producer``, in a thread, judged by the leaders' ``acked.jsonl``) and the
   nemesis (``lab.chaos.nemesis``) run side by side; each fault starts and ends at its scheduled time (or
   right after the action before it, when one runs late); every action goes to ``<root>/faults.jsonl``.
3. After the duration the workload stops (batches in flight get a grace period), whatever is still
   broken is healed, resumed or restarted, and the run waits until every partition's replicas are all
   in the ISR with one LEO and HW = LEO (bounded by the convergence timeout).
4. The cluster is stopped (controlled shutdown) and ``isrsim report`` runs over the root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from rich.markup import escape

from kit.cluster_client import ClusterClient
from kit.cluster_files import ClusterError, ClusterInfo
from kit.health import not_converged, partition_metadata, wait_healthy
from kit.librdkafka_producer import LibrdkafkaWorkload, producer_config, read_properties
from kit.local_cluster import STOP_TIMEOUT_S, stop_brokers
from kit.node_query import ask
from kit.processes import process_state, stop_process
from kit.producer import AckJournal, Producer, ProducerSettings, ProduceStats
from lab.chaos.nemesis import Nemesis
from lab.chaos.schedule import FaultStep, Schedule
from lab.chaos.view import ChaosView
from protocol import ApiKeys, Errors, error_name

CHAOS_FILE = "chaos.json"


RUN_FILE = "chaos-run.json"


POLL_S = 1.0


DRAIN_S = 20.0


REQUEST_TIMEOUT_MS = 5000  # the workload's PRODUCE timeout: a request to a paused leader fails fast


CLIENTS = ("isrsim", "librdkafka")  # the workload's producer: isrsim's own, or Kafka's C client


MESSAGE_TIMEOUT_MS = 60_000  # librdkafka's delivery timeout (Kafka's delivery.timeout.ms)


@dataclass
class Outcome:
    stats: ProduceStats | None = None
    injected: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    last_fault_end: float | None = None
    workload_stopped: float | None = None
    converged_after: float | None = None  # seconds after the last fault ended
    converged_after_workload: float | None = None  # seconds after the workload stopped
    not_converged: list[str] = field(default_factory=list)
    final_actions: list[str] = field(default_factory=list)


class ChaosRun:
    def __init__(
        self,
        info: ClusterInfo,
        schedule: Schedule,
        topic: str,
        rate: float,
        acks: int,
        bootstrap: list[tuple[str, int]],
        converge_timeout: float,
        view: ChaosView,
        client: str = "isrsim",
    ) -> None:
        self.info = info
        self.schedule = schedule
        self.topic = topic
        self.rate = rate
        self.acks = acks
        self.bootstrap = bootstrap
        self.converge_timeout = converge_timeout
        self.view = view
        self.client = client
        self.state = view.state
        self.nemesis = Nemesis(info, view.say)
        self.outcome = Outcome()
        self.stop_workload = trio.Event()

    async def main(self) -> Outcome:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch)
                async with trio.open_nursery() as work:
                    work.start_soon(self._workload)
                    await self._play()
                    self.state.phase = "draining"
                    self.stop_workload.set()
                self.outcome.workload_stopped = time.monotonic()
                self.state.phase = "healing"
                self.outcome.final_actions = await self.nemesis.heal_everything()
                if self.outcome.final_actions:
                    self.outcome.last_fault_end = time.monotonic()
                    self.view.say("at the end: " + ", ".join(self.outcome.final_actions))
                self.state.faults = []
                self.state.phase = "converging"
                await self._converge()
                nursery.cancel_scope.cancel()
        finally:
            self.outcome.injected = dict(self.nemesis.injected)
            self.outcome.skipped = len(self.nemesis.skipped)
        return self.outcome

    async def _play(self) -> None:
        """The schedule's actions in time order (ends before starts at the same moment)."""
        actions: list[tuple[float, int, FaultStep]] = []
        for step in self.schedule.steps:
            actions.append((step.at_s, 1, step))
            actions.append((step.until_s, 0, step))
        actions.sort(key=lambda a: (a[0], a[1], a[2].index))
        # The view's clock (time.monotonic) started the run; trio sleeps on its own clock.
        t0 = trio.current_time() - (time.monotonic() - self.view.t0)
        for at, is_start, step in actions:
            await trio.sleep_until(t0 + at)
            if is_start:
                if await self.nemesis.start(step):
                    self.state.faults.append(step.describe())
            else:
                was_applied = step.index in self.nemesis.applied
                await self.nemesis.end(step)
                if was_applied:
                    self.state.faults.remove(step.describe())
                    self.outcome.last_fault_end = time.monotonic()
            self.view.refresh()
        await trio.sleep_until(t0 + self.schedule.duration_s)

    async def _workload(self) -> None:
        if self.client == "librdkafka":
            await self._librdkafka_workload()
        else:
            await self._isrsim_workload()

    async def _librdkafka_workload(self) -> None:
        """Kafka's C client with acks as asked (idempotent with acks=all, Kafka's default), linger.ms=5, the
        cluster's client.properties when it has one; stopped by stop_workload, then DRAIN_S for what is
        outstanding."""
        producer_id = f"chaos-librdkafka-{int(time.time())}-{os.getpid()}"
        journal = AckJournal(Path(self.info.root) / "workload", producer_id)
        props_path = Path(self.info.root) / "client.properties"
        config = producer_config(
            self.bootstrap,
            client_id=producer_id,
            acks="all" if self.acks == -1 else str(self.acks),
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            message_timeout_ms=MESSAGE_TIMEOUT_MS,
            properties=read_properties(props_path) if props_path.is_file() else None,
        )

        def progress(stats: ProduceStats) -> None:
            self.state.records_acked = stats.records_acked

        log = Path(self.info.root) / "workload" / f"{producer_id}.log"
        workload = LibrdkafkaWorkload(config, self.topic, journal=journal, on_progress=progress, log_path=log)
        self.outcome.stats = workload.stats
        stop = threading.Event()
        count = int(self.rate * (self.schedule.duration_s + 60)) + 1

        async def relay_stop() -> None:
            await self.stop_workload.wait()
            stop.set()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relay_stop)
                # abandon_on_cancel: the thread ends by itself (stop, then at most DRAIN_S).
                await trio.to_thread.run_sync(
                    lambda: workload.run(count, self.rate, stop=stop, drain_s=DRAIN_S), abandon_on_cancel=True
                )
                nursery.cancel_scope.cancel()
        finally:
            stop.set()
            self.outcome.stats = workload.stats
            self.state.records_acked = workload.stats.records_acked
            journal.close()
        for fatal in workload.fatals:
            self.view.say(f"[yellow]librdkafka's fatal error (producer replaced): {escape(fatal)}[/]")

    async def _isrsim_workload(self) -> None:
        producer_id = f"chaos-{int(time.time())}-{os.getpid()}"
        journal = AckJournal(Path(self.info.root) / "workload", producer_id)
        settings = ProducerSettings(acks=self.acks, request_timeout_ms=REQUEST_TIMEOUT_MS)
        count = int(self.rate * (self.schedule.duration_s + 60)) + 1
        try:
            async with trio.open_nursery() as nursery:
                client = ClusterClient(nursery, self.bootstrap, client_id=f"producer-{producer_id}")

                def progress(stats: ProduceStats) -> None:
                    self.state.records_acked = stats.records_acked

                producer = Producer(
                    client,
                    self.topic,
                    settings,
                    journal=journal,
                    producer_id=producer_id,
                    on_progress=progress,
                )
                self.outcome.stats = producer.stats
                with trio.CancelScope() as scope:
                    # Stopped by stop_workload; batches still in flight after DRAIN_S are abandoned.
                    async def drain_deadline() -> None:
                        await self.stop_workload.wait()
                        scope.deadline = trio.current_time() + DRAIN_S

                    nursery.start_soon(drain_deadline)
                    await producer.run(count, self.rate, stop=self.stop_workload)
                self.outcome.stats = producer.stats
                self.state.records_acked = producer.stats.records_acked
                await client.aclose()
                nursery.cancel_scope.cancel()
        finally:
            journal.close()

    async def _watch(self) -> None:
        while True:
            try:
                meta = await partition_metadata(self.info, [self.topic])
            except Exception as exc:  # a bug in a query must not stop the run; it is shown
                self.view.say(f"[yellow]status query failed: {escape(str(exc))}[/]")
                meta = {}
            if meta:
                self.state.isr = {p: sorted(m["isr_nodes"]) for (_, p), m in meta.items()}
                self.state.replicas = {p: m["replica_nodes"] for (_, p), m in meta.items()}
                self.state.leaders = {p: m["leader_id"] for (_, p), m in meta.items()}
            self.view.refresh()
            await trio.sleep(POLL_S)

    async def _converge(self) -> None:
        o = self.outcome
        deadline = time.monotonic() + self.converge_timeout
        problems: list[str] = []
        while time.monotonic() < deadline:
            problems = await not_converged(self.info)
            if not problems:
                now = time.monotonic()
                o.converged_after = now - (o.last_fault_end or now)
                o.converged_after_workload = now - (o.workload_stopped or now)
                return
            self.state.phase = f"converging ({len(problems)} partition(s) not yet)"
            await trio.sleep(0.2)
        self.outcome.not_converged = problems


def ensure_topic(info: ClusterInfo, topic: str, partitions: int, replication_factor: int) -> str:
    meta = trio.run(partition_metadata, info, [topic])
    if meta:
        return f"topic {topic}: {len(meta)} partitions (existing)"
    rf = min(replication_factor, len(info.brokers))
    body = {
        "topics": [{"name": topic, "num_partitions": partitions, "replication_factor": rf, "configs": {}}],
        "timeout_ms": 30000,
    }
    c = info.controller
    resp = trio.run(ask, c.host, c.port, ApiKeys.CREATE_TOPICS, body, 35.0)
    if resp is None:
        raise ClusterError("the controller did not answer CREATE_TOPICS; is the cluster up?")
    code = resp["topics"][0]["error_code"]
    if code not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
        raise ClusterError(f"cannot create topic {topic}: {error_name(code)}")
    return f"topic {topic}: {partitions} partitions, replication factor {rf} (created)"


def check_cluster(info: ClusterInfo) -> None:
    down = [
        f"broker {b.id} is {process_state(b.pid)}" for b in info.brokers if process_state(b.pid) != "running"
    ]
    if process_state(info.controller.pid) != "running":
        down.insert(0, f"the controller is {process_state(info.controller.pid)}")
    if down:
        raise ClusterError(
            "chaos starts from a healthy cluster, but " + "; ".join(down) + " (`isrsim cluster up` starts it)"
        )
    wait_healthy(info)


def stop_cluster(info: ClusterInfo) -> None:
    stop_brokers(info)
    stop_process(info.controller.pid, STOP_TIMEOUT_S)
    info.controller.pid = None
    info.save()


def summary(schedule: Schedule) -> str:
    counts = ", ".join(f"{k} {n}" for k, n in schedule.counts().items())
    return f"schedule: {len(schedule.steps)} faults over {schedule.duration_s:g}s ({counts})"


def run_report(root: Path) -> int:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "report", "--data-dir", str(root), "--out", str(root / "report")]
    )
    return proc.returncode


def write_run(
    root: Path,
    schedule: Schedule,
    o: Outcome,
    started_ms: int,
    error: str | None,
    report: int | None,
    client: str = "isrsim",
) -> None:
    """``chaos-run.json``: what this run of the schedule did (chaos.json holds only the plan)."""
    s = o.stats
    body = {
        "seed": schedule.seed,
        "started_ms": started_ms,
        "finished_ms": int(time.time() * 1000),
        "injected": {k: o.injected.get(k, 0) for k in schedule.faults},
        "skipped": o.skipped,
        "client": client,
        "records_sent": s.records_sent if s else 0,
        "records_acked": s.records_acked if s else 0,
        "records_failed": s.records_failed if s else 0,
        "batches_acked": s.batches_acked if s else 0,
        "batches_failed": s.batches_failed if s else 0,
        "errors": dict(s.errors) if s else {},
        "final_actions": o.final_actions,
        "converged_after_last_fault_s": None if o.converged_after is None else round(o.converged_after, 2),
        "converged_after_workload_s": None
        if o.converged_after_workload is None
        else round(o.converged_after_workload, 2),
        "not_converged": o.not_converged,
        "error": error,
        "report_exit_code": report,
    }
    (root / RUN_FILE).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def first_error(group: BaseExceptionGroup[Any], kind: type[Exception]) -> Exception | None:
    """The first ``kind`` exception in ``group`` (from the run's nurseries)."""
    found: BaseException | None = group.split(kind)[0]
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found if isinstance(found, Exception) else None
