"""``isrsim chaos``: an acks=all workload and a seeded nemesis against a running cluster, then heal, converge,
stop and report (docs/faults.md).

1. The schedule (``cli.chaos_schedule``, pure) is drawn from ``--seed`` and written to ``<root>/chaos.json``.
2. The workload (``cli.producer.Producer``, in this process) and the nemesis (``cli.chaos_nemesis``) run
   side by side; each fault starts and ends at its scheduled time (or right after the action before it,
   when one runs late); every action goes to ``<root>/faults.jsonl``.
3. After ``--duration`` the workload stops (batches in flight get a grace period), whatever is still
   broken is healed, resumed or restarted, and the command waits until every partition's replicas are all
   in the ISR with one LEO and HW = LEO (bounded by ``--converge-timeout``).
4. The cluster is stopped (controlled shutdown) and ``isrsim report`` runs over the root; its exit code
   is this command's (1 if the replicas did not converge, whatever the report says).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import trio
from rich.console import Console
from rich.markup import escape

from cli.chaos_nemesis import ChaosError, Nemesis
from cli.chaos_schedule import FAULT_KINDS, FaultStep, Schedule, ScheduleError, make_schedule
from cli.chaos_view import ChaosState, ChaosView
from cli.cluster import STOP_TIMEOUT_S, stop_brokers, wait_healthy
from cli.cluster_client import ClientError, ClusterClient, bootstrap_from
from cli.cluster_files import ClusterError, ClusterInfo, process_state, stop_process
from cli.node_query import ask
from cli.producer import ACKS_BY_NAME, AckJournal, Producer, ProducerSettings, ProduceStats
from protocol import ApiKeys, Errors, error_name

CHAOS_FILE = "chaos.json"
RUN_FILE = "chaos-run.json"
POLL_S = 1.0
DRAIN_S = 20.0
REQUEST_TIMEOUT_MS = 5000  # the workload's PRODUCE timeout: a request to a paused leader fails fast


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


# ---------------------------------------------------------------------------------------------- views


async def _metadata(info: ClusterInfo, topics: list[str] | None) -> dict[tuple[str, int], dict[str, Any]]:
    body = {"topics": None if topics is None else [{"name": t} for t in topics]}
    meta = await ask(info.controller.host, info.controller.port, ApiKeys.METADATA, body, 2.0)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for t in (meta or {}).get("topics", []):
        for p in t.get("partitions", []):
            out[(t["name"], p["partition_index"])] = p
    return out


async def not_converged(info: ClusterInfo) -> list[str]:
    """What keeps the cluster from having converged (empty: every partition's replicas are all in the ISR,
    with one LEO and HW = LEO on every replica)."""
    meta = await _metadata(info, None)
    if not meta:
        return ["the controller did not answer METADATA"]
    states: dict[int, dict[tuple[str, int], dict[str, Any]] | None] = {}

    async def one(b: Any) -> None:
        resp = await ask(b.host, b.port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None}, 2.0)
        states[b.id] = None if resp is None else {(p["topic"], p["partition"]): p for p in resp["partitions"]}

    async with trio.open_nursery() as nursery:
        for b in info.brokers:
            nursery.start_soon(one, b)
    problems = [f"broker {b} does not answer" for b, s in sorted(states.items()) if s is None]
    for (topic, partition), p in sorted(meta.items()):
        name = f"{topic}-{partition}"
        replicas = sorted(p["replica_nodes"])
        if p["leader_id"] < 0:
            problems.append(f"{name}: no leader")
            continue
        if sorted(p["isr_nodes"]) != replicas:
            problems.append(f"{name}: ISR {sorted(p['isr_nodes'])} of replicas {replicas}")
            continue
        offsets = {}
        for r in replicas:
            state = (states.get(r) or {}).get((topic, partition))
            if state is not None:
                offsets[r] = (state["log_end_offset"], state["high_watermark"])
        if len(offsets) < len(replicas):
            continue  # the broker's own problem is listed above
        leos = {leo for leo, _ in offsets.values()}
        if len(leos) != 1 or any(hw != leo for leo, hw in offsets.values()):
            shown = ", ".join(f"{r}: LEO {leo} HW {hw}" for r, (leo, hw) in sorted(offsets.items()))
            problems.append(f"{name}: {shown}")
    return problems


# ---------------------------------------------------------------------------------------------- runner


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
    ) -> None:
        self.info = info
        self.schedule = schedule
        self.topic = topic
        self.rate = rate
        self.acks = acks
        self.bootstrap = bootstrap
        self.converge_timeout = converge_timeout
        self.view = view
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
                meta = await _metadata(self.info, [self.topic])
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


# ---------------------------------------------------------------------------------------------- command


def _ensure_topic(info: ClusterInfo, topic: str, partitions: int, replication_factor: int) -> str:
    meta = trio.run(_metadata, info, [topic])
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


def _check_cluster(info: ClusterInfo) -> None:
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


def _stop_cluster(info: ClusterInfo) -> None:
    stop_brokers(info, echo=False)
    stop_process(info.controller.pid, STOP_TIMEOUT_S)
    info.controller.pid = None
    info.save()


def _summary(schedule: Schedule) -> str:
    counts = ", ".join(f"{k} {n}" for k, n in schedule.counts().items())
    return f"schedule: {len(schedule.steps)} faults over {schedule.duration_s:g}s ({counts})"


def _report(root: Path) -> int:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "report", "--data-dir", str(root), "--out", str(root / "report")]
    )
    return proc.returncode


@click.command("chaos")
@click.option("--seed", type=int, default=None, help="Seed of the schedule (default: drawn and printed).")
@click.option("--duration", type=float, default=120.0, show_default=True, help="Seconds of faults.")
@click.option("--interval", type=float, default=3.0, show_default=True, help="Seconds between fault starts.")
@click.option(
    "--faults", default=",".join(FAULT_KINDS), show_default=True, help="Fault kinds, comma-separated."
)
@click.option(
    "--max-down", type=int, default=1, show_default=True, help="Brokers unavailable at once, at most."
)
@click.option("--rate", type=float, default=2000.0, show_default=True, help="Workload records per second.")
@click.option("--acks", type=click.Choice(["all", "-1", "1"]), default="all", show_default=True)
@click.option("--topic", default="chaos", show_default=True, help="Workload topic (created if missing).")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=6,
    show_default=True,
    help="Partitions of a new topic.",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Replication factor of a new topic.",
)
@click.option(
    "--converge-timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds to wait for convergence.",
)
@click.option("--dry-run", is_flag=True, help="Print the schedule (chaos.json's content) and do nothing.")
@click.option("--no-report", is_flag=True, help="Stop the cluster but skip the report.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("isrsim-data"),
    show_default=True,
    envvar="ISRSIM_DATA_DIR",
    help="The cluster root (cluster.json; chaos.json and faults.jsonl go there); or $ISRSIM_DATA_DIR.",
)
@click.option(
    "--bootstrap-server", default=None, help="host:port the workload bootstraps from (default: cluster.json)."
)
def chaos(
    seed: int | None,
    duration: float,
    interval: float,
    faults: str,
    max_down: int,
    rate: float,
    acks: str,
    topic: str,
    partitions: int,
    replication_factor: int,
    converge_timeout: float,
    dry_run: bool,
    no_report: bool,
    data_dir: Path,
    bootstrap_server: str | None,
) -> None:
    """Run an acks=all workload and a seeded nemesis (kill, term, pause, partition, isolate, delay, loss)
    against a running cluster; then heal everything, wait for convergence, stop the cluster and run the
    report. The exit code is the report's.

    The schedule is a pure function of --seed, --duration, --interval, --faults, --max-down and the broker
    ids, written to <root>/chaos.json; every action is appended to <root>/faults.jsonl. See docs/faults.md.
    """
    try:
        info = ClusterInfo.load(data_dir)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    try:
        schedule = make_schedule(seed, duration, interval, faults, max_down, [b.id for b in info.brokers])
    except ScheduleError as exc:
        raise click.UsageError(str(exc)) from None
    if rate <= 0:
        raise click.UsageError(f"--rate must be > 0 records/s (got {rate:g})")
    if dry_run:
        click.echo(schedule.to_json(), nl=False)
        click.echo(_summary(schedule), err=True)
        return
    root = Path(info.root)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a log or a pipe: one status line is one line
    try:
        _check_cluster(info)
        console.print(_ensure_topic(info, topic, partitions, replication_factor))
        bootstrap = bootstrap_from(bootstrap_server, data_dir)
    except (ClusterError, ClientError) as exc:
        raise click.ClickException(str(exc)) from None
    (root / CHAOS_FILE).write_text(schedule.to_json(), encoding="utf-8")
    console.print(
        f"seed {seed} (replay: --seed {seed}); {_summary(schedule)}; written to {root / CHAOS_FILE}"
    )
    state = ChaosState(duration_s=schedule.duration_s)
    started_ms = int(time.time() * 1000)
    error: str | None = None
    with ChaosView(console, state) as view:
        run = ChaosRun(info, schedule, topic, rate, ACKS_BY_NAME[acks], bootstrap, converge_timeout, view)
        interrupted = False
        try:
            outcome = trio.run(run.main)
        except BaseExceptionGroup as group:
            chaos_error = _first(group, ChaosError)
            outcome = run.outcome
            if group.split(KeyboardInterrupt)[0] is not None:
                interrupted = True
            elif chaos_error is None:
                raise
            else:
                error = str(chaos_error)
        except ChaosError as exc:
            outcome, error = run.outcome, str(exc)
        except KeyboardInterrupt:
            outcome, interrupted = run.outcome, True
        if error is not None:
            view.say(f"[red]{escape(error)}[/]: resuming, healing and restarting what can be")
            try:
                trio.run(run.nemesis.heal_everything)
            except ChaosError as exc:
                view.say(f"[red]{escape(str(exc))}[/]")
        if interrupted:
            view.say("interrupted: resuming, healing and restarting what the nemesis broke")
            done = trio.run(run.nemesis.heal_everything)
            view.say(", ".join(done) or "nothing was left broken")
            raise SystemExit(130)
    _print_outcome(console, outcome)
    if error is not None:
        _write_run(root, schedule, outcome, started_ms, error, None)
        raise click.ClickException(
            f"{error}; the cluster is left running for a look (`isrsim cluster status`)"
        )
    console.print("stopping the cluster (controlled shutdown)")
    _stop_cluster(info)
    if no_report:
        _write_run(root, schedule, outcome, started_ms, None, None)
        sys.exit(1 if outcome.not_converged else 0)
    code = _report(root)
    _write_run(root, schedule, outcome, started_ms, None, code)
    if outcome.not_converged and code in (0, 3):
        # 3 is the report's "unknown": a run that did not converge is a failure whatever the report says.
        console.print("[red]no violation found, but the replicas had not converged before the stop[/]")
        code = 1
    sys.exit(code)


def _write_run(
    root: Path, schedule: Schedule, o: Outcome, started_ms: int, error: str | None, report: int | None
) -> None:
    """``chaos-run.json``: what this run of the schedule did (chaos.json holds only the plan)."""
    s = o.stats
    body = {
        "seed": schedule.seed,
        "started_ms": started_ms,
        "finished_ms": int(time.time() * 1000),
        "injected": {k: o.injected.get(k, 0) for k in schedule.faults},
        "skipped": o.skipped,
        "records_acked": s.records_acked if s else 0,
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


def _first(group: BaseExceptionGroup[Any], kind: type[Exception]) -> Exception | None:
    """The first ``kind`` exception in ``group`` (from the run's nurseries)."""
    found: BaseException | None = group.split(kind)[0]
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found if isinstance(found, Exception) else None


def _print_outcome(console: Console, o: Outcome) -> None:
    kinds = ", ".join(f"{k} {o.injected[k]}" for k in FAULT_KINDS if k in o.injected)
    skipped = f"; skipped: {o.skipped}" if o.skipped else ""
    console.print(
        f"faults injected: {sum(o.injected.values())} ({kinds or 'none'}){skipped}", highlight=False
    )
    if o.stats is not None:
        s = o.stats
        line = f"workload: {s.records_acked:,} records acknowledged in {s.batches_acked:,} batches"
        if s.batches_failed:
            line += f"; {s.batches_failed} batches not acknowledged (delivery timeout)"
        if s.errors:
            line += f"; errors seen: {dict(s.errors.most_common(6))}"
        console.print(line, highlight=False)
    if o.converged_after is not None:
        console.print(
            f"[green]converged[/] {o.converged_after:.1f}s after the last fault ended "
            f"({o.converged_after_workload or 0:.1f}s after the workload stopped)",
            highlight=False,
        )
    elif o.not_converged:
        console.print("[red]did not converge[/]: " + "; ".join(o.not_converged[:12]), highlight=False)


__all__ = ["chaos", "not_converged"]
