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

With ``--rules FILE`` (``kit.protocol_faults``) the file's protocol-level fault rules are added before the
workload starts, given back to a node that restarts without them, and removed when the nemesis stops,
before the healing (their hits go to ``faults.jsonl``).
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
from kit.controller_quorum import NoActiveController, ask_controller, ask_controller_sync, voters_of
from kit.health import not_converged, partition_metadata, wait_healthy
from kit.librdkafka_producer import LibrdkafkaWorkload, producer_config, read_properties
from kit.local_cluster import stop_brokers, stop_controllers
from kit.node_query import ask
from kit.processes import process_state
from kit.producer import AckJournal, Producer, ProducerSettings, ProduceStats
from kit.protocol_faults import AppliedRules, apply_rules, keep_rules, remove_applied
from kit.run_clock import RunClock
from lab.chaos.budget import ServiceView, blocked, brokers_out, still_recovering, taken_down
from lab.chaos.nemesis import Nemesis
from lab.chaos.schedule import FaultStep, Schedule
from lab.chaos.view import ChaosView
from protocol import (
    CLIENT_PROPERTIES,
    ApiKeys,
    Errors,
    ProtocolFaultRule,
    error_name,
    wall_clock_ms,
)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def transactions_out_topic(topic: str) -> str:
    """Where ``--workload transactions``' processor writes what it read from ``topic``."""
    return f"{topic}-out"


RUN_FILE = "chaos-run.json"


POLL_S = 1.0


BUDGET_POLL_S = 0.25  # how often a start that waits for --max-down looks again


DRAIN_S = 20.0


REQUEST_TIMEOUT_MS = 5000  # the workload's PRODUCE timeout: a request to a paused leader fails fast


CLIENTS = ("isrsim", "librdkafka")  # the workload's producer: isrsim's own, or Kafka's C client


NO_WORKLOAD = "none"  # `chaos --workload none`: faults only, for a program started elsewhere


TRANSACTIONS = "transactions"  # `chaos --workload transactions`: exactly-once through librdkafka


MESSAGE_TIMEOUT_MS = 60_000  # librdkafka's delivery timeout (Kafka's delivery.timeout.ms)


@dataclass
class Outcome:
    stats: ProduceStats | None = None
    injected: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    skipped_steps: list[dict[str, Any]] = field(default_factory=list)  # {index, fault, why}
    # Wall-clock ms (the run's clock, kit.run_clock): when the last fault ended, the workload stopped, and
    # the replicas were in sync (every replica in its ISR, one LEO, HW = LEO, asked of the brokers).
    last_fault_end_ms: int | None = None
    workload_stopped_ms: int | None = None
    in_sync_ms: int | None = None
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
        rules: list[ProtocolFaultRule] | None = None,
    ) -> None:
        self.info = info
        self.rules = list(rules or [])
        self.applied = AppliedRules(Path(info.root))
        self.schedule = schedule
        self.topic = topic
        self.rate = rate
        self.acks = acks
        self.bootstrap = bootstrap
        self.converge_timeout = converge_timeout
        self.view = view
        self.client = client
        self.state = view.state
        self.nemesis = Nemesis(info, view.say, schedule.max_controllers_down)
        self.outcome = Outcome()
        self.stop_workload = trio.Event()
        self.recovering: set[str] = set()  # brokers a fault took down, until back in every ISR
        self.waiting: dict[int, str] = {}  # pending steps: why each may not start yet

    async def main(self) -> Outcome:
        try:
            await self.add_rules()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch)
                keeping = trio.CancelScope()
                if self.applied.plan:
                    nursery.start_soon(self._keep_rules, keeping)
                async with trio.open_nursery() as work:
                    await self._work(work)
                    self.stop_workload.set()
                self.outcome.workload_stopped_ms = wall_clock_ms()
                self.state.phase = "healing"
                keeping.cancel()
                removed = await self.remove_rules()
                self.outcome.final_actions = removed + await self.nemesis.heal_everything()
                if self.outcome.final_actions:
                    self.outcome.last_fault_end_ms = wall_clock_ms()
                    self.view.say("at the end: " + ", ".join(self.outcome.final_actions))
                self.state.faults = []
                self.state.phase = "converging (waiting for in-sync replicas)"
                self.view.say("converging: waiting until every replica is in its ISR with one LEO")
                await self._converge()
                nursery.cancel_scope.cancel()
        finally:
            self.outcome.injected = dict(self.nemesis.injected)
            self.outcome.skipped = len(self.nemesis.skipped)
            self.outcome.skipped_steps = [
                {"index": st.index, "fault": st.describe(), "why": why} for st, why in self.nemesis.skipped
            ]
        return self.outcome

    async def _work(self, work: trio.Nursery) -> None:
        """The workload (started in ``work``) and the fault schedule, until the schedule ends."""
        work.start_soon(self._workload)
        await self._play()
        self.state.phase = "draining"

    async def _play(self) -> None:
        """The schedule's actions in time order (ends before starts at the same moment). A start that would
        put more than ``--max-down`` brokers out of service (``lab.chaos.budget``) waits, while the other
        actions go on, and is skipped if it cannot start before its planned end."""
        actions: list[tuple[float, int, FaultStep]] = []
        for step in self.schedule.steps:
            actions.append((step.at_s, 1, step))
            actions.append((step.until_s, 0, step))
        actions.sort(key=lambda a: (a[0], a[1], a[2].index))
        # The view's clock (time.monotonic) started the run; trio sleeps on its own clock.
        t0 = trio.current_time() - (time.monotonic() - self.view.t0)
        pending: list[FaultStep] = []
        for at, is_start, step in actions:
            while pending and trio.current_time() < t0 + at:
                if not await self._try_pending(pending, trio.current_time() - t0):
                    await trio.sleep(min(BUDGET_POLL_S, max(0.0, t0 + at - trio.current_time())))
            await trio.sleep_until(t0 + at)
            if is_start:
                pending.append(step)
                await self._try_pending(pending, at)
            elif step in pending:
                pending.remove(step)
                self.nemesis.skip(step, self.waiting.pop(step.index, "it could not start in time"))
            else:
                was_applied = step.index in self.nemesis.applied
                label = self.nemesis.label(step)
                await self.nemesis.end(step)
                if was_applied:
                    self.state.faults.remove(label)
                    self.outcome.last_fault_end_ms = wall_clock_ms()
                    self.recovering |= taken_down(step)
            self.view.refresh()
        await trio.sleep_until(t0 + self.schedule.duration_s)

    async def _try_pending(self, pending: list[FaultStep], now_s: float) -> bool:
        """Starts the first pending step that fits ``--max-down`` now; True if one started."""
        if not any(s.down for s in pending):
            view = ServiceView(known=False)  # nothing to count: a fault that takes nobody down never waits
        else:
            view = await service_view(self.info, self.topic)
            self.recovering = still_recovering(self.recovering, view)
        in_force = list(self.nemesis.applied.values())
        for step in list(pending):
            why = blocked(step, brokers_out(in_force, self.recovering, view), self.schedule.max_down)
            if why is not None:
                if self.waiting.get(step.index) != why:
                    self.view.say(f"[yellow]waiting[/] {step.describe()}: {escape(why)}")
                self.waiting[step.index] = why
                continue
            pending.remove(step)
            self.waiting.pop(step.index, None)
            if await self.nemesis.start(step):
                self.state.faults.append(self.nemesis.label(step))
            self.view.refresh()
            return True
        return False

    async def _workload(self) -> None:
        if self.client == NO_WORKLOAD:
            await self.stop_workload.wait()
        elif self.client == "librdkafka":
            await self._librdkafka_workload()
        elif self.client == TRANSACTIONS:
            await self._transactions_workload()
        else:
            await self._isrsim_workload()

    async def _librdkafka_workload(self) -> None:
        """Kafka's C client with acks as asked (idempotent with acks=all, Kafka's default), linger.ms=5, the
        cluster's client.properties when it has one; stopped by stop_workload, then DRAIN_S for what is
        outstanding."""
        producer_id = f"chaos-librdkafka-{int(time.time())}-{os.getpid()}"
        journal = AckJournal(Path(self.info.root) / "workload", producer_id)
        props_path = Path(self.info.root) / CLIENT_PROPERTIES
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

    async def _transactions_workload(self) -> None:
        """``kit.transactional_workload``: a transactional source and a consume-transform-produce processor
        (TxnOffsetCommit) through librdkafka, in threads; stopped by stop_workload."""
        from kit.transactional_workload import TransactionsWorkload

        producer_id = f"chaos-txn-{int(time.time())}-{os.getpid()}"
        journal = AckJournal(Path(self.info.root) / "workload", producer_id)
        props_path = Path(self.info.root) / CLIENT_PROPERTIES
        config = producer_config(
            self.bootstrap,
            client_id=producer_id,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            message_timeout_ms=MESSAGE_TIMEOUT_MS,
            properties=read_properties(props_path) if props_path.is_file() else None,
        )

        def progress(stats: ProduceStats) -> None:
            self.state.records_acked = stats.records_acked

        workload = TransactionsWorkload(
            config,
            self.topic,
            transactions_out_topic(self.topic),
            group=f"{producer_id}-processor",
            transactional_id=producer_id,
            journal=journal,
            on_progress=progress,
            log_path=Path(self.info.root) / "workload" / f"{producer_id}.log",
        )
        self.outcome.stats = workload.stats
        stop = threading.Event()

        async def relay_stop() -> None:
            await self.stop_workload.wait()
            stop.set()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relay_stop)
                await trio.to_thread.run_sync(
                    lambda: workload.run(self.rate, stop=stop), abandon_on_cancel=True
                )
                nursery.cancel_scope.cancel()
        finally:
            stop.set()
            self.outcome.stats = workload.stats
            self.state.records_acked = workload.stats.records_acked
            journal.close()
        self.view.say(f"transactions: {workload.summary()}")

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

    async def _keep_rules(self, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                await trio.sleep(POLL_S)
                try:
                    restored = await keep_rules(self.applied)
                except Exception as exc:  # shown, never the end of the run
                    self.view.say(f"[yellow]fault rules check failed: {escape(str(exc))}[/]")
                    continue
                if restored:
                    self.view.say(f"fault rules given back to restarted node(s) {', '.join(restored)}")

    async def add_rules(self) -> None:
        """Adds the run's protocol-level fault rules (``--rules``) to the cluster; says each one."""
        if self.rules:
            self.applied = await apply_rules(Path(self.info.root), self.rules)
            for rule, nodes in self.applied.plan:
                self.view.say(f"fault rule {rule.id} on {', '.join(nodes)}: {escape(rule.describe())}")

    async def remove_rules(self) -> list[str]:
        """Removes the rules this run added (those still in force); says what each did."""
        gone = await remove_applied(self.applied)
        return [f"removed fault rule {s.rule.id} ({s.hits} hits)" for s in gone]

    async def _watch(self) -> None:
        """The status line's ISRs: the workload topic's; without one (a program's own workload), those of
        the one topic it uses (internal topics aside), if it uses only one."""
        while True:
            try:
                meta = await partition_metadata(self.info, [self.topic] if self.topic else None)
            except Exception as exc:  # a bug in a query must not stop the run; it is shown
                self.view.say(f"[yellow]status query failed: {escape(str(exc))}[/]")
                meta = {}
            meta = {tp: m for tp, m in meta.items() if tp[0] not in INTERNAL_TOPICS}
            if meta and len({t for t, _ in meta}) == 1:
                self.state.isr = {p: sorted(m["isr_nodes"]) for (_, p), m in meta.items()}
                self.state.replicas = {p: m["replica_nodes"] for (_, p), m in meta.items()}
                self.state.leaders = {p: m["leader_id"] for (_, p), m in meta.items()}
            self.view.refresh()
            await trio.sleep(POLL_S)

    async def _converge(self) -> None:
        """Waits until the replicas are in sync: every replica in its ISR, one LEO, HW = LEO (asked of the
        brokers; the report's "ISR full" is another measure, from the journals)."""
        o = self.outcome
        deadline = time.monotonic() + self.converge_timeout
        problems: list[str] = []
        while time.monotonic() < deadline:
            problems = await not_converged(self.info)
            if not problems:
                o.in_sync_ms = wall_clock_ms()
                return
            self.state.phase = f"waiting for in-sync replicas ({len(problems)} partition(s) not yet)"
            await trio.sleep(0.2)
        self.outcome.not_converged = problems


async def service_view(info: ClusterInfo, topic: str) -> ServiceView:
    """The controller's view of the brokers (fenced) and of ``topic``'s ISRs (every topic's when ``topic``
    is empty), for ``--max-down``."""
    cluster: dict[str, Any] | None
    if not info.quorum:
        c = info.controller
        cluster = await ask(c.host, c.port, ApiKeys.DESCRIBE_CLUSTER, {}, 2.0)
    else:
        try:  # the active controller, found through any voter
            cluster, _ = await ask_controller(voters_of(info), ApiKeys.DESCRIBE_CLUSTER, {}, 2.0, wait_s=2.0)
        except NoActiveController:
            cluster = None
    meta = await partition_metadata(info, [topic] if topic else None)
    if cluster is None or not cluster.get("brokers") or not meta:
        return ServiceView(known=False)
    fenced = frozenset(str(b["broker_id"]) for b in cluster["brokers"] if b.get("fenced"))
    return ServiceView(
        fenced=fenced,
        # Keyed by the partition's place in (topic, partition) order: several topics may be counted.
        replicas={i: meta[tp]["replica_nodes"] for i, tp in enumerate(sorted(meta))},
        isr={i: meta[tp]["isr_nodes"] for i, tp in enumerate(sorted(meta))},
    )


def ensure_topic(info: ClusterInfo, topic: str, partitions: int, replication_factor: int) -> str:
    meta = trio.run(partition_metadata, info, [topic])
    if meta:
        return f"topic {topic}: {len(meta)} partitions (existing)"
    rf = min(replication_factor, len(info.brokers))
    body = {
        "topics": [{"name": topic, "num_partitions": partitions, "replication_factor": rf, "configs": {}}],
        "timeout_ms": 30000,
    }
    # The active controller, found through any voter of the quorum.
    resp = ask_controller_sync(info, ApiKeys.CREATE_TOPICS, body, timeout=35.0)
    if resp is None or "topics" not in resp:
        raise ClusterError("the controller did not answer CREATE_TOPICS; is the cluster up?")
    code = resp["topics"][0]["error_code"]
    if code not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
        raise ClusterError(f"cannot create topic {topic}: {error_name(code)}")
    return f"topic {topic}: {partitions} partitions, replication factor {rf} (created)"


def check_cluster(info: ClusterInfo) -> None:
    down = [
        f"broker {b.id} is {process_state(b.pid)}" for b in info.brokers if process_state(b.pid) != "running"
    ]
    for c in reversed(info.controllers):
        if process_state(c.pid) != "running":
            name = f"controller {c.id}" if info.quorum else "the controller"
            down.insert(0, f"{name} is {process_state(c.pid)}")
    if down:
        raise ClusterError(
            "chaos starts from a healthy cluster, but " + "; ".join(down) + " (`isrsim cluster up` starts it)"
        )
    wait_healthy(info)


def stop_cluster(info: ClusterInfo) -> None:
    stop_brokers(info)
    stop_controllers(info)


def summary(schedule: Schedule) -> str:
    counts = ", ".join(f"{k} {n}" for k, n in schedule.counts().items())
    return f"schedule: {len(schedule.steps)} faults over {schedule.duration_s:g}s ({counts})"


def run_report(root: Path, options: tuple[str, ...] = ()) -> int:
    """``isrsim report`` on ``root`` (with the report's ``options``); its exit code."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "report",
            "--data-dir",
            str(root),
            "--out",
            str(root / "report"),
            *options,
        ]
    )
    return proc.returncode


def in_sync_figures(o: Outcome, clock: RunClock) -> dict[str, float | None]:
    """The run's times on its clock (seconds since t0) and the seconds from the last fault's end and from
    the workload's stop to the replicas being in sync."""

    def since(a: int | None, b: int | None) -> float | None:
        return None if a is None or b is None else round((a - b) / 1000, 2)

    def at(ts: int | None) -> float | None:
        s = None if ts is None else clock.seconds(ts)
        return None if s is None else round(s, 2)

    return {
        "last_fault_end_s": at(o.last_fault_end_ms),
        "workload_stopped_s": at(o.workload_stopped_ms),
        "in_sync_s": at(o.in_sync_ms),
        "in_sync_after_last_fault_s": since(o.in_sync_ms, o.last_fault_end_ms or o.in_sync_ms),
        "in_sync_after_workload_s": since(o.in_sync_ms, o.workload_stopped_ms),
    }


def write_run(
    root: Path,
    schedule: Schedule,
    o: Outcome,
    started_ms: int,
    error: str | None,
    report: int | None,
    client: str = "isrsim",
) -> None:
    """``chaos-run.json``: what this run of the schedule did (chaos.json holds only the plan). Times are on
    the run's clock (``t0_ms``, the report's too); "in sync" is the brokers' answer (every replica in its
    ISR, one LEO, HW = LEO), not the report's "ISR full" (from the journals)."""
    s = o.stats
    clock = RunClock(root)
    origin = clock.anchor()
    body = {
        "seed": schedule.seed,
        "started_ms": started_ms,
        "finished_ms": int(time.time() * 1000),
        "t0_ms": origin.ts_ms if origin else None,
        "t0_source": origin.source if origin else None,
        "started_s": clock.seconds(started_ms),
        "injected": {k: o.injected.get(k, 0) for k in schedule.faults},
        "skipped": o.skipped,
        "skipped_steps": o.skipped_steps,
        "client": client,
        "records_sent": s.records_sent if s else 0,
        "records_acked": s.records_acked if s else 0,
        "records_failed": s.records_failed if s else 0,
        "batches_acked": s.batches_acked if s else 0,
        "batches_failed": s.batches_failed if s else 0,
        "errors": dict(s.errors) if s else {},
        "final_actions": o.final_actions,
        **in_sync_figures(o, clock),
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
