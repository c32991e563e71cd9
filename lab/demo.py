"""``isrsim demo``: the main job end to end. A 3-broker cluster with a quorum of 3 controllers, a 6-partition
topic with replication factor 3 and min.insync.replicas=2, an acks=all workload, and meanwhile: the active
controller killed with SIGKILL (another voter takes over) and restarted, a leader killed with SIGKILL and
restarted, another broker bounced cleanly, a third paused and resumed (a zombie leader). Then the cluster
settles and stops, and the Spark report says whether anything acknowledged was lost or any replica diverged.

The workload is Kafka's own producer by default: librdkafka (confluent-kafka) with acks=all, idempotence and
linger.ms=5, in a thread of the demo (``kit.librdkafka_producer``); the report judges what the leaders
acknowledged to it (their ``acked.jsonl``). ``client="isrsim"`` runs ``isrsim produce`` instead, whose own
acknowledgement journal the report reads beside the leaders'."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from rich.console import Console

from kit.cluster_files import ClusterError, ClusterInfo
from kit.controller_quorum import NoActiveController, ask_controller_sync, find_active, voters_of
from kit.librdkafka_producer import LibrdkafkaWorkload, producer_config, read_properties
from kit.local_cluster import (
    fresh_cluster,
    record_fault,
    start_broker,
    start_controller,
    stop_brokers,
    stop_controllers,
)
from kit.node_query import ask_sync
from kit.processes import process_state, send_signal, stop_process
from kit.producer import AckJournal
from kit.run_clock import RunClock
from protocol import CLIENT_PROPERTIES, ApiKeys, FaultAction

TOPIC = "demo"
DEMO_SETTINGS = (
    "min.insync.replicas=2",
    "replica.lag.time.max.ms=2000",
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.fetch.backoff.ms=200",
    "controlled.shutdown.timeout.ms=10000",
)
DEMO_CONTROLLERS = 3  # a quorum: the demo kills its active controller once
CLIENTS = ("librdkafka", "isrsim")  # the workload's producer: Kafka's C client, or `isrsim produce`
LINGER_MS = 5


class Demo:
    def __init__(self, root: Path, console: Console, rate: int, seconds: int) -> None:
        self.root = root
        self.console = console
        self.rate = rate
        self.seconds = seconds
        self.t0 = time.monotonic()  # for the demo's length only
        self.clock = RunClock(root)  # what every line's time counts from: the run's t0, as in the report
        self.info: ClusterInfo | None = None
        self.producer: subprocess.Popen[str] | None = None
        self.secure = False  # `--secure`: SASL_SSL everywhere (docs/security.md)
        self.client = "librdkafka"  # `--client`: one of CLIENTS
        self.workload: LibrdkafkaWorkload | None = None
        self.stop_workload = threading.Event()

    # ------------------------------------------------------------------ output

    def say(self, text: str) -> None:
        self.console.print(f"[dim]{self.clock.stamp()}[/]  {text}")

    def acked(self) -> int:
        """Acknowledged so far: records (librdkafka's delivery reports), or batches (`isrsim produce`'s
        acknowledgement journal)."""
        if self.workload is not None:
            return self.workload.stats.records_acked
        return sum(p.read_text().count("\n") for p in (self.root / "workload").glob("acked-*.jsonl"))

    def progress(self) -> str:
        unit = "records" if self.client == "librdkafka" else "batches"
        return f"acknowledged {unit}: {self.acked():,}"

    def wait(self, what: str, cond: Callable[[], Any], timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        with self.console.status(f"{what} ({self.progress()})") as status:
            while time.monotonic() < deadline:
                result = cond()
                if result:
                    return result
                status.update(f"{what} ({self.progress()})")
                time.sleep(0.2)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for: {what}")

    # ------------------------------------------------------------------ cluster views

    @property
    def cluster(self) -> ClusterInfo:
        assert self.info is not None
        return self.info

    def metadata(self) -> dict[tuple[str, int], dict[str, Any]]:
        meta = ask_controller_sync(self.cluster, ApiKeys.METADATA, {"topics": [{"name": TOPIC}]})
        if not meta or not meta.get("topics"):
            return {}
        return {(TOPIC, p["partition_index"]): p for p in meta["topics"][0].get("partitions", [])}

    def leader_of(self, partition: int) -> int:
        return int(self.metadata()[(TOPIC, partition)]["leader_id"])

    def all_isr_full(self) -> bool:
        meta = self.metadata()
        return bool(meta) and all(
            len(p["isr_nodes"]) == len(p["replica_nodes"]) and p["leader_id"] >= 0 for p in meta.values()
        )

    def fenced(self, broker_id: int) -> bool:
        resp = ask_controller_sync(self.cluster, ApiKeys.DESCRIBE_CLUSTER, {})
        return bool(resp) and any(b["broker_id"] == broker_id and b.get("fenced") for b in resp["brokers"])

    def converged(self) -> bool:
        views: dict[tuple[str, int], set[tuple[int, int]]] = {}
        for b in self.cluster.brokers:
            resp = ask_sync(b, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": [{"name": TOPIC}]})
            if resp is None:
                return False
            for p in resp["partitions"]:
                views.setdefault((p["topic"], p["partition"]), set()).add(
                    (p["log_end_offset"], p["high_watermark"])
                )
        return len(views) == 6 and all(
            len(v) == 1 and next(iter(v))[0] == next(iter(v))[1] for v in views.values()
        )

    # ------------------------------------------------------------------ steps

    def up(self) -> None:
        self.info = fresh_cluster(
            self.root, 3, DEMO_SETTINGS, what="demo", secure=self.secure, controllers=DEMO_CONTROLLERS
        )
        self.clock = RunClock(self.root)  # a fresh cluster: its first journal line is the run's t0
        origin = self.clock.anchor()
        if origin is not None:
            self.console.print(f"[dim]times are seconds since {origin.describe()}, as in the report[/]")
        self.say(
            f"cluster up: {DEMO_CONTROLLERS} controllers (a quorum) + 3 brokers under {self.root} "
            f"({', '.join(DEMO_SETTINGS[:3])})"
        )
        body = {
            "topics": [
                {
                    "name": TOPIC,
                    "num_partitions": 6,
                    "replication_factor": 3,
                    "configs": {"min.insync.replicas": "2"},
                }
            ],
            "timeout_ms": 30000,
        }
        resp = ask_controller_sync(self.cluster, ApiKeys.CREATE_TOPICS, body, timeout=35)
        if not resp or resp["topics"][0]["error_code"] != 0:
            raise ClusterError(f"CREATE_TOPICS failed: {resp}")
        self.wait(
            "every partition to have a leader", lambda: len(self.metadata()) == 6 and self.all_isr_full()
        )
        self.say(f"topic {TOPIC}: 6 partitions, replication factor 3, min.insync.replicas=2")

    def start_workload(self) -> None:
        if self.client == "librdkafka":
            self.start_librdkafka()
        else:
            self.start_isrsim_produce()

    def going(self) -> bool:
        """The workload has had acknowledgements (20 batches, or 20 batches' worth of records)."""
        return self.acked() >= (20 if self.client == "isrsim" else 20 * max(1, self.rate // 100))

    def start_librdkafka(self) -> None:
        count = self.rate * self.seconds
        properties = read_properties(self.root / CLIENT_PROPERTIES) if self.secure else {}
        config = producer_config(
            [(b.host, b.port) for b in self.cluster.brokers],
            client_id="demo-librdkafka",
            acks="all",
            linger_ms=LINGER_MS,
            properties=properties,
        )
        producer_id = f"demo-librdkafka-{int(time.time())}"
        journal = AckJournal(self.root / "workload", producer_id)
        log = self.root / "workload" / f"{producer_id}.log"
        self.workload = LibrdkafkaWorkload(config, TOPIC, journal=journal, log_path=log)
        self.workload.start(count, self.rate, stop=self.stop_workload)
        security = (
            f", {properties.get('security.protocol', '')} from client.properties" if self.secure else ""
        )
        self.say(
            f"workload: {count:,} records through librdkafka (confluent-kafka), acks=all, idempotent, "
            f"linger.ms={LINGER_MS}{security}, at {self.rate:,}/s (its log: {log})"
        )

    def start_isrsim_produce(self) -> None:
        count = self.rate * self.seconds
        self.producer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli.main",
                "produce",
                TOPIC,
                "--count",
                str(count),
                "--acks",
                "all",
                "--rate",
                str(self.rate),
                "--data-dir",
                str(self.root),
                "--no-progress",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.say(
            f"workload: {count:,} records with acks=all at {self.rate:,}/s (journal: {self.root}/workload)"
        )

    def active_controller(self, exclude: int | None = None) -> tuple[int, int] | None:
        """The active controller's id and quorum epoch, if one (other than ``exclude``) answers now."""
        voters = [v for v in voters_of(self.cluster) if v.id != exclude]
        try:
            view = trio.run(find_active, voters, 2.0)
        except NoActiveController:
            return None
        return (view.voter.id, view.epoch) if view.voter.id is not None else None

    def sigkill_the_active_controller(self) -> int:
        found = self.wait("the active controller", self.active_controller)
        voter, epoch = found
        c = self.cluster.controller_by_id(voter)
        send_signal(c.pid, __import__("signal").SIGKILL)
        record_fault(self.cluster, FaultAction.KILL, str(voter), signal="KILL", pid=c.pid, controller=True)
        t0 = time.monotonic()
        self.say(f"[red]SIGKILL[/] controller {voter}, the active controller (quorum epoch {epoch})")
        new, new_epoch = self.wait(
            "another voter to take over", lambda: self.active_controller(exclude=voter), timeout=30
        )
        self.say(
            f"controller {new} took over in {time.monotonic() - t0:.1f}s (epoch {new_epoch}): rebuilt from "
            "the metadata log, brokers resynced"
        )
        start_controller(self.cluster, c)
        self.cluster.save()
        record_fault(self.cluster, FaultAction.RESTART, str(voter), pid=c.pid, controller=True)
        self.say(f"controller {voter} restarted: it rejoins the quorum as a follower")
        return int(voter)

    def sigkill_a_leader(self) -> int:
        victim = self.leader_of(0)
        b = self.cluster.broker(victim)
        send_signal(b.pid, __import__("signal").SIGKILL)
        record_fault(self.cluster, FaultAction.KILL, str(victim), signal="KILL", pid=b.pid)
        self.say(f"[red]SIGKILL[/] broker {victim}, leader of {TOPIC}-0")
        self.wait(
            f"the controller to fence broker {victim} and elect new leaders",
            lambda: self.leader_of(0) != victim,
        )
        self.say(f"new leader of {TOPIC}-0: broker {self.leader_of(0)}")
        start_broker(self.cluster, b)
        self.cluster.save()
        record_fault(self.cluster, FaultAction.RESTART, str(victim), pid=b.pid)
        self.say(f"broker {victim} restarted: truncating by leader epoch and catching up")
        self.wait(f"broker {victim} to rejoin every ISR", self.all_isr_full)
        self.say(f"broker {victim} is back in every ISR")
        return victim

    def clean_bounce(self, avoid: set[int]) -> int:
        victim = next(b.id for b in self.cluster.brokers if b.id not in avoid)
        b = self.cluster.broker(victim)
        self.say(f"[yellow]SIGTERM[/] broker {victim}: controlled shutdown moves its leaderships first")
        record_fault(self.cluster, FaultAction.TERM, str(victim), signal="TERM", pid=b.pid)
        result = stop_process(b.pid, 30)
        self.say(f"broker {victim} {result}; restarting it")
        start_broker(self.cluster, b)
        self.cluster.save()
        record_fault(self.cluster, FaultAction.RESTART, str(victim), pid=b.pid)
        self.wait(f"broker {victim} to rejoin every ISR", self.all_isr_full)
        self.say(f"broker {victim} is back in every ISR")
        return victim

    def pause_a_leader(self, avoid: set[int]) -> int:
        leaders = {self.leader_of(p) for p in range(6)}
        victim = next((x for x in sorted(leaders) if x not in avoid), None) or sorted(leaders)[0]
        b = self.cluster.broker(victim)
        send_signal(b.pid, __import__("signal").SIGSTOP)
        record_fault(self.cluster, FaultAction.PAUSE, str(victim), pid=b.pid)
        self.say(f"[magenta]SIGSTOP[/] broker {victim}: a zombie leader, sockets open, answering nothing")
        self.wait(f"the controller to fence broker {victim}", lambda: self.fenced(victim))
        self.say(f"broker {victim} fenced; its partitions have new leaders")
        send_signal(b.pid, __import__("signal").SIGCONT)
        record_fault(self.cluster, FaultAction.RESUME, str(victim), pid=b.pid)
        self.say(f"[magenta]SIGCONT[/] broker {victim}: it learns its leaderships are gone (fenced by epoch)")
        self.wait(f"broker {victim} to rejoin every ISR", self.all_isr_full)
        self.say(f"broker {victim} is back in every ISR")
        return victim

    def finish_workload(self) -> tuple[int, str]:
        if self.workload is not None:
            return self.finish_librdkafka(self.workload)
        assert self.producer is not None
        with self.console.status("waiting for the workload to finish") as status:
            while self.producer.poll() is None:
                status.update(f"waiting for the workload to finish (acknowledged batches: {self.acked()})")
                time.sleep(0.3)
        out = (self.producer.stdout.read() if self.producer.stdout else "").strip()
        self.say(f"workload done: {out.splitlines()[0] if out else '(no output)'}")
        return self.producer.returncode, out

    def finish_librdkafka(self, workload: LibrdkafkaWorkload) -> tuple[int, str]:
        with self.console.status("waiting for the workload to finish") as status:
            while workload.running():
                status.update(f"waiting for the workload to finish ({self.progress()})")
                workload.join(0.3)
        stats = workload.join()
        if workload.journal is not None:
            workload.journal.close()
        self.say(f"workload done: {workload.summary()}")
        failed = stats.records_failed or stats.records_acked < stats.records_sent or workload.fatals
        return (1 if failed else 0), workload.summary()

    def settle_and_stop(self) -> None:
        self.wait("every replica to agree on LEO and HW", self.converged, timeout=90)
        self.say("replicas in sync (one LEO, HW = LEO); stopping the cluster")
        stop_brokers(self.cluster)
        stop_controllers(self.cluster)

    def cleanup(self) -> None:
        if self.producer is not None and self.producer.poll() is None:
            self.producer.kill()
        if self.workload is not None:
            self.stop_workload.set()
            self.workload.join(15)
        if self.info is not None:
            for p in [*self.info.brokers, *self.info.controllers]:
                if process_state(p.pid) != "stopped":
                    stop_process(p.pid, 10)


def run_report(root: Path, console: Console) -> int:
    out = root / "report"
    console.print(f"[dim]running the Spark report over {root} ...[/]")
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "report", "--data-dir", str(root), "--out", str(out)]
    )
    return proc.returncode


def run_demo(
    data_dir: Path,
    *,
    keep: bool,
    rate: int,
    seconds: int,
    secure: bool,
    console: Console,
    client: str = "librdkafka",
) -> int:
    """The demo from start to end; returns the report's exit code (0 when kept running: no report). A
    ClusterError leaves nothing running."""
    if client not in CLIENTS:
        raise ClusterError(f"unknown workload client {client!r}: one of {', '.join(CLIENTS)}")
    d = Demo(data_dir.resolve(), console, rate, seconds)
    d.secure = secure
    d.client = client
    try:
        d.up()
        d.start_workload()
        d.wait("the workload to get going", d.going)
        d.sigkill_the_active_controller()
        killed = d.sigkill_a_leader()
        bounced = d.clean_bounce({killed})
        d.pause_a_leader({killed, bounced})
        code, _ = d.finish_workload()
        if code != 0 and d.producer is not None:
            err = d.producer.stderr.read() if d.producer.stderr else ""
            console.print(f"[red]the producer exited with {code}[/]: {err[-2000:]}")
        elif code != 0:
            console.print(
                "[yellow]not every record was acknowledged[/] (delivery timeouts are allowed; "
                "the report judges what was acknowledged)"
            )
        if keep:
            d.say(f"--keep: the cluster stays up; `isrsim cluster status --data-dir {d.root}`")
            return 0
        d.settle_and_stop()
    except (ClusterError, KeyboardInterrupt):
        d.cleanup()
        raise
    verdict = run_report(d.root, console)
    elapsed = time.monotonic() - d.t0
    console.print(f"demo finished in {elapsed:.0f}s; report: {d.root / 'report' / 'report.html'}")
    return verdict
