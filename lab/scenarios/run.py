"""What a scenario script works with: a fresh cluster of real processes under one root, one topic-partition
named by the roles of its replicas, and steps that wait on replica state (DESCRIBE_REPLICA_STATE, METADATA,
DESCRIBE_CLUSTER) or journal events, never on a fixed sleep. Each interesting moment is printed as a table
of the replicas' offsets and epochs, and kept for the summary."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio
from rich.console import Console
from rich.table import Table

from broker import read_journal
from kit.cluster_client import ClientError, ClusterClient
from kit.cluster_files import ClusterError, ClusterInfo, ProcessEntry
from kit.controller_quorum import ask_controller_sync
from kit.fault_journal import append_fault
from kit.local_cluster import fresh_cluster, start_broker, stop_brokers, stop_controllers
from kit.net_faults import NetError, change_faults, endpoint, find_cluster
from kit.node_query import ask_sync
from kit.processes import process_state, send_signal, stop_process
from kit.producer import AckJournal, Producer, ProducerSettings, ProduceStats, now_ms
from kit.run_clock import RunClock
from protocol import ApiKeys, FaultAction, build_simple_batch, read_header

T = TypeVar("T")
TOPIC = "kip"
PARTITION = 0
WAIT_S = 60.0

# Fast failure detection, as the integration tests and the demo use; a scenario adds its own keys.
BASE_SETTINGS = (
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.fetch.backoff.ms=200",
    "controlled.shutdown.timeout.ms=10000",
    "replica.high.watermark.checkpoint.interval.ms=200",
)


class ScenarioError(ClusterError):
    """A step did not happen as the script expects (the message names the step and what was seen)."""


@dataclass
class ReplicaView:
    broker: int
    process: str  # running / paused / stopped
    role: str = "-"
    leader_epoch: int | None = None
    leo: int | None = None
    hw: int | None = None
    isr: list[int] = field(default_factory=list)
    fetch_state: str = ""


@dataclass
class Moment:
    title: str
    replicas: list[ReplicaView]


class ScenarioRun:
    """One play of a scenario: the cluster, its topic-partition, the console, the moments seen."""

    def __init__(self, root: Path, mode: str, console: Console, settings: tuple[str, ...]) -> None:
        self.root = root
        self.mode = mode
        self.console = console
        self.settings = (*BASE_SETTINGS, *settings, f"replication.truncation.mode={mode}")
        self.info: ClusterInfo | None = None
        self.moments: list[Moment] = []
        self.notes: list[str] = []
        self.marks: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.clock = RunClock(root)  # seconds since the run's t0, as in the report (kit.run_clock)
        self._journal: AckJournal | None = None
        self.replicas: list[int] = []

    # ------------------------------------------------------------------ output

    def say(self, text: str) -> None:
        self.console.print(f"[dim]{self.clock.stamp()}[/]  {text}")

    @staticmethod
    def now_ms() -> int:
        return now_ms()

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.say(text)

    # ------------------------------------------------------------------ cluster

    @property
    def cluster(self) -> ClusterInfo:
        if self.info is None:
            raise ScenarioError("the cluster is not up")
        return self.info

    def broker(self, broker_id: int) -> ProcessEntry:
        return self.cluster.broker(broker_id)

    def up(self, brokers: int = 3, controllers: int = 1) -> None:
        try:
            self.info = fresh_cluster(
                self.root, brokers, tuple(self.settings), what="scenario", controllers=controllers
            )
        except ClusterError as exc:  # a root that is not a cluster's, a bad setting: the script cannot start
            raise ScenarioError(str(exc)) from None
        self.clock = RunClock(self.root)  # a fresh cluster: its first journal line is the run's t0
        origin = self.clock.anchor()
        if origin is not None:
            self.console.print(f"[dim]times are seconds since {origin.describe()}, as in the report[/]")
        quorum = f"{controllers} controllers (a quorum)" if controllers > 1 else "controller"
        self.say(f"cluster up under {self.root}: {quorum} + {brokers} brokers, mode [bold]{self.mode}[/]")

    def ask_controller(
        self, api_key: int, body: dict[str, Any], timeout: float = 10.0
    ) -> dict[str, Any] | None:
        """One request to the active controller (through any voter of a quorum)."""
        return ask_controller_sync(self.cluster, api_key, body, timeout=timeout)

    def create_topic(self, replication_factor: int, configs: dict[str, str]) -> list[int]:
        body = {
            "topics": [
                {
                    "name": TOPIC,
                    "num_partitions": 1,
                    "replication_factor": replication_factor,
                    "configs": configs,
                }
            ],
            "timeout_ms": 30000,
        }
        resp = self.ask_controller(ApiKeys.CREATE_TOPICS, body, timeout=35)
        if not resp or resp["topics"][0]["error_code"] != 0:
            raise ScenarioError(f"CREATE_TOPICS failed: {resp}")
        self.wait("the partition's replicas to be in sync", lambda: self.isr_is(self.assignment()))
        self.replicas = self.assignment()
        cfg = ", ".join(f"{k}={v}" for k, v in configs.items())
        self.say(f"topic {TOPIC}: 1 partition, replicas {self.replicas} (leader {self.replicas[0]}); {cfg}")
        return self.replicas

    def down(self) -> None:
        """`isrsim cluster down`: every broker SIGTERM at once (controlled shutdowns), then the controller."""
        stop_brokers(self.cluster)
        stop_controllers(self.cluster)
        self.say("cluster stopped cleanly (`cluster down`)")

    def cleanup(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self.info is None:
            return
        for p in [*self.info.brokers, *self.info.controllers]:
            if process_state(p.pid) == "paused":
                send_signal(p.pid, signal.SIGCONT)
            if process_state(p.pid) != "stopped":
                stop_process(p.pid, 10)

    # ------------------------------------------------------------------ views

    def partition_meta(self) -> dict[str, Any] | None:
        meta = self.ask_controller(ApiKeys.METADATA, {"topics": [{"name": TOPIC}]})
        if not meta or not meta.get("topics") or meta["topics"][0]["error_code"] != 0:
            return None
        parts = meta["topics"][0]["partitions"]
        return parts[0] if parts else None

    def assignment(self) -> list[int]:
        p = self.partition_meta()
        return [] if p is None else list(p["replica_nodes"])

    def leader(self) -> int:
        p = self.partition_meta()
        return -1 if p is None else int(p["leader_id"])

    def leader_epoch(self) -> int:
        p = self.partition_meta()
        return -1 if p is None else int(p["leader_epoch"])

    def isr(self) -> list[int]:
        p = self.partition_meta()
        return [] if p is None else sorted(p["isr_nodes"])

    def isr_is(self, members: list[int]) -> bool:
        p = self.partition_meta()
        return p is not None and p["leader_id"] >= 0 and sorted(p["isr_nodes"]) == sorted(members)

    def fenced(self, broker_id: int) -> bool:
        resp = self.ask_controller(ApiKeys.DESCRIBE_CLUSTER, {})
        return bool(resp) and any(b["broker_id"] == broker_id and b.get("fenced") for b in resp["brokers"])

    def replica(self, broker_id: int) -> dict[str, Any] | None:
        """The broker's DESCRIBE_REPLICA_STATE entry for the partition (None: down, paused or no replica)."""
        b = self.broker(broker_id)
        if process_state(b.pid) != "running":
            return None
        resp = ask_sync(b, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": [{"name": TOPIC}]}, timeout=2.0)
        if not resp:
            return None
        for p in resp.get("partitions", []):
            if p["partition"] == PARTITION:
                return p
        return None

    def leo(self, broker_id: int) -> int:
        r = self.replica(broker_id)
        return -1 if r is None else int(r["log_end_offset"])

    def hw(self, broker_id: int) -> int:
        r = self.replica(broker_id)
        return -1 if r is None else int(r["high_watermark"])

    def view(self) -> list[ReplicaView]:
        out = []
        for bid in self.replicas:
            state = process_state(self.broker(bid).pid)
            v = ReplicaView(bid, state)
            r = self.replica(bid) if state == "running" else None
            if r is not None:
                v.role, v.leader_epoch = r["role"], r["leader_epoch"]
                v.leo, v.hw = r["log_end_offset"], r["high_watermark"]
                v.isr = sorted(r.get("isr") or [])
                fs = r.get("fetch_state") or {}
                v.fetch_state = str(fs.get("state", "")) if r["role"] == "follower" else ""
            out.append(v)
        return out

    def moment(self, title: str) -> Moment:
        m = Moment(title, self.view())
        self.moments.append(m)
        self.console.print(moment_table(m))
        return m

    def running(self) -> list[int]:
        return [b for b in self.replicas if process_state(self.broker(b).pid) == "running"]

    def converged(self) -> bool:
        """The ISR is every running replica, and each has LEO == HW, the same everywhere."""
        members = self.running()
        if not self.isr_is(members):
            return False
        seen = set()
        for bid in members:
            r = self.replica(bid)
            if r is None:
                return False
            seen.add((r["log_end_offset"], r["high_watermark"]))
        return len(seen) == 1 and len({x for pair in seen for x in pair}) == 1

    # ------------------------------------------------------------------ waiting

    def wait(self, what: str, cond: Callable[[], T | None], timeout: float = WAIT_S) -> T:
        deadline = time.monotonic() + timeout
        with self.console.status(what):
            while time.monotonic() < deadline:
                result = cond()
                if result:
                    return result
                time.sleep(0.1)
        raise ScenarioError(f"timed out after {timeout:.0f}s waiting for {what}; replicas: {self.view()}")

    def events(self, broker_id: int | str, event: str | None = None) -> list[dict[str, Any]]:
        entry = self.cluster.controller if broker_id == "controller" else self.broker(int(broker_id))
        return [e for e in read_journal(Path(entry.journal), event) if e.get("topic") in (None, TOPIC)]

    def wait_event(
        self,
        broker_id: int | str,
        event: str,
        pred: Callable[[dict[str, Any]], bool] = lambda e: True,
        *,
        after: int = 0,
        what: str = "",
    ) -> dict[str, Any]:
        """The first ``event`` in the broker's (or "controller") journal at or after ``after`` (ms)."""

        def found() -> dict[str, Any] | None:
            for e in self.events(broker_id, event):
                if e.get("ts_ms", 0) >= after and pred(e):
                    return e
            return None

        return self.wait(what or f"{event} in {broker_id}'s journal", found)

    # ------------------------------------------------------------------ processes

    def fault(self, action: str, broker_id: int, **params: Any) -> None:
        """Appends a process fault to ``<root>/faults.jsonl``, as ``isrsim broker kill|pause ...`` do, so the
        report draws it on the timelines."""
        append_fault(self.root, action, [str(broker_id)], params)

    def pause(self, broker_id: int) -> None:
        self.fault(FaultAction.PAUSE, broker_id, pid=self.broker(broker_id).pid)
        send_signal(self.broker(broker_id).pid, signal.SIGSTOP)
        self.say(f"[magenta]SIGSTOP[/] broker {broker_id} (`isrsim broker pause {broker_id}`)")

    def resume(self, broker_id: int) -> None:
        self.fault(FaultAction.RESUME, broker_id, pid=self.broker(broker_id).pid)
        send_signal(self.broker(broker_id).pid, signal.SIGCONT)
        self.say(f"[magenta]SIGCONT[/] broker {broker_id} (`isrsim broker resume {broker_id}`)")

    def kill(self, broker_id: int) -> None:
        b = self.broker(broker_id)
        self.fault(FaultAction.KILL, broker_id, pid=b.pid, signal="KILL")
        send_signal(b.pid, signal.SIGKILL)
        self.wait(f"broker {broker_id} to exit", lambda: process_state(b.pid) == "stopped")
        self.say(f"[red]SIGKILL[/] broker {broker_id} (`isrsim broker kill {broker_id}`)")

    def stop(self, broker_id: int) -> None:
        b = self.broker(broker_id)
        self.fault(FaultAction.TERM, broker_id, pid=b.pid, signal="TERM")
        result = stop_process(b.pid, 30)
        b.pid = None
        self.cluster.save()
        self.say(f"[yellow]SIGTERM[/] broker {broker_id}: controlled shutdown; {result}")

    def set_broker_config(self, broker_id: int, values: dict[str, str | None]) -> None:
        """Sets (or, with None, removes) keys of one broker's server.properties; applies at its next start."""
        path = Path(self.broker(broker_id).config)
        lines = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.split("=", 1)[0] not in values
        ]
        lines += [f"{k}={v}" for k, v in values.items() if v is not None]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        shown = ", ".join(f"{k}={v}" if v is not None else f"{k} (default)" for k, v in values.items())
        self.say(f"broker {broker_id}'s config: {shown}")

    def exited(self, broker_id: int) -> bool:
        return process_state(self.broker(broker_id).pid) == "stopped"

    def start(self, broker_id: int) -> None:
        start_broker(self.cluster, self.broker(broker_id))
        self.cluster.save()
        self.fault(FaultAction.RESTART, broker_id, pid=self.broker(broker_id).pid)
        self.say(f"broker {broker_id} started again on its data (`isrsim broker restart {broker_id}`)")

    def drop_link(self, src: int, dst: int) -> None:
        """Drops every message from broker ``src`` to broker ``dst`` from now on (``isrsim net partition SRC
        DST --one-way``), through the library rather than a CLI process, so that the state a step holds
        (a follower that got its data but not the answer after it) is taken within a poll of being seen."""
        cluster = find_cluster(self.root, None)
        a, b = str(src), str(dst)
        try:
            trio.run(
                lambda: change_faults(
                    cluster,
                    lambda fs: fs.partition(endpoint(cluster, a), endpoint(cluster, b), one_way=True),
                    required=[a, b],
                )
            )
        except NetError as exc:
            raise ScenarioError(f"`isrsim net partition {a} {b} --one-way` failed: {exc}") from None
        append_fault(self.root, FaultAction.PARTITION, [a, b], {"one_way": True})
        self.say(f"[cyan]isrsim net partition {a} {b} --one-way[/]: {a}'s messages to {b} are dropped")

    def heal_links(self) -> None:
        """Removes every network fault still in force (``isrsim net heal``); none left is fine (a stopped
        node took its rules with it). Nodes that are down or paused and hold no rule are skipped."""
        cluster = find_cluster(self.root, None)
        try:
            change = trio.run(lambda: change_faults(cluster, lambda fs: fs.heal(), required=[]))
        except NetError as exc:
            raise ScenarioError(f"`isrsim net heal` failed: {exc}") from None
        if change.after != change.before:
            append_fault(self.root, FaultAction.HEAL, [], {})
            self.say("[cyan]isrsim net heal[/]")

    def net(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "cli.main", "net", *args, "--data-dir", str(self.root)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise ScenarioError(f"`isrsim net {' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout}")
        self.say(f"[cyan]isrsim net {' '.join(args)}[/]")

    # ------------------------------------------------------------------ producing

    @property
    def journal(self) -> AckJournal:
        if self._journal is None:
            self._journal = AckJournal(self.root / "workload", f"scenario-{int(time.time() * 1000)}")
        return self._journal

    def produce(
        self,
        count: int,
        acks: int = -1,
        batch_records: int = 10,
        via: list[int] | None = None,
        *,
        idempotence: bool = True,
        max_in_flight: int = 1,
        request_timeout_ms: int = 30_000,
        label: str | None = None,
    ) -> ProduceStats:
        """``isrsim produce``'s producer (retries, metadata refresh; idempotent with acks=all unless
        ``idempotence`` is False), acknowledged batches journaled; bootstrapped from ``via`` (default: every
        running broker). ``label`` goes into the records' values (``<journal id>-<label>:<seq>:``)."""
        settings = ProducerSettings(
            acks=acks,
            record_size=40,
            batch_records=batch_records,
            max_in_flight=max_in_flight,
            request_timeout_ms=request_timeout_ms,
            idempotence=idempotence,
        )
        producer_id = journal_id = self.journal.producer_id
        if label is not None:
            producer_id = f"{journal_id}-{label}"
        journal = self.journal
        bootstrap = [
            (b.host, b.port)
            for b in self.cluster.brokers
            if process_state(b.pid) == "running" and (via is None or b.id in via)
        ]

        async def main() -> ProduceStats:
            async with trio.open_nursery() as nursery:
                client = ClusterClient(nursery, bootstrap, client_id="scenario")
                producer = Producer(client, TOPIC, settings, journal=journal, producer_id=producer_id)
                stats = await producer.run(count)
                await client.aclose()
                nursery.cancel_scope.cancel()
            return stats

        try:
            stats = trio.run(main)
        except (ClientError, BaseExceptionGroup) as exc:
            raise ScenarioError(f"producing {count} records failed: {exc!r}") from exc
        if stats.batches_failed:
            raise ScenarioError(f"{stats.batches_failed} batches were not acknowledged: {dict(stats.errors)}")
        name = "all" if acks == -1 else str(acks)
        self.say(f"produced {stats.records_acked} records in {stats.batches_acked} batches, acks={name}")
        return stats

    def produce_to(self, broker_id: int, records: int, acks: int, timeout_ms: int) -> dict[str, Any]:
        """One PRODUCE of one batch straight to ``broker_id`` (as a client with stale metadata would);
        returns the partition response (``error_code`` -1: no answer in time). An acknowledged batch is
        journaled like any other."""
        values = [f"{broker_id}-direct-{i}".encode() for i in range(records)]
        batch = build_simple_batch(values)
        body = {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": timeout_ms,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": PARTITION, "records": batch}]}],
        }
        sent = now_ms()
        resp = ask_sync(self.broker(broker_id), ApiKeys.PRODUCE, body, timeout=timeout_ms / 1000 + 3)
        if resp is None:
            return {"error_code": -1, "base_offset": -1}
        part: dict[str, Any] = resp["responses"][0]["partition_responses"][0]
        if part["error_code"] == 0:
            self.journal.acked(
                (TOPIC, PARTITION),
                part["base_offset"],
                part["base_offset"] + records - 1,
                read_header(batch).crc,
                acks,
                sent,
                now_ms(),
            )
        return part


def moment_table(m: Moment) -> Table:
    t = Table(title=m.title, title_justify="left", title_style="bold", show_edge=False, pad_edge=False)
    for col in ("broker", "process", "role", "epoch", "LEO", "HW", "ISR (leader's)", "fetch"):
        t.add_column(col, justify="right" if col in ("epoch", "LEO", "HW") else "left")
    for v in m.replicas:
        t.add_row(
            str(v.broker),
            v.process,
            v.role,
            "-" if v.leader_epoch is None else str(v.leader_epoch),
            "-" if v.leo is None else str(v.leo),
            "-" if v.hw is None else str(v.hw),
            ",".join(map(str, v.isr)) if v.role == "leader" else "",
            v.fetch_state,
        )
    return t
