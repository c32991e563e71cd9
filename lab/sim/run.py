"""``isrsim sim run`` (SPEC §15, docs/simulation.md): the cluster's real broker and controller code, 3
controllers and 3 brokers by default, with an acks=all idempotent producer, in this one process on one trio
loop over the simulated environment (:mod:`lab.sim.environment`); one seed is one exact history.

The run writes the real layout and journals under its directory (``ts_ms`` virtual milliseconds from 0),
so ``isrsim report DIR`` judges it, and its digest is SHA-256 over every file under it (names relative to
it, in order, then contents).

The process must hash strings the same way every time (``PYTHONHASHSEED=0``: the command line re-runs
itself with it), and must run nothing else: the environment is process-wide.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.testing

from broker import BrokerConfig, KafkaServer
from controller import ControllerConfig, KafkaController
from kit.cluster_client import ClusterClient
from kit.cluster_files import ClusterInfo, ProcessEntry
from kit.errors import KitError
from kit.fault_journal import append_fault
from kit.local_cluster import create_layout
from kit.producer import AckJournal, Producer, ProducerSettings
from lab.sim.environment import SimEnvironment
from lab.sim.invariants import STEP_S, AckedBatch, OnlineInvariants, Violation
from protocol import ApiKeys, install_environment, open_connection

log = logging.getLogger(__name__)

TOPIC = "sim"
PARTITIONS = 3
BASE_PORT = 19092
# After the faults stop: how long the brokers have to catch up before the last checks (virtual seconds).
SETTLE_S = 10.0
# Kinds of faults the simulation draws today (SPEC §7's others are to come: docs/simulation.md).
SIM_FAULT_KINDS = ("kill",)
DEFAULT_FAULTS = ("kill",)


class SimError(KitError):
    """A simulated run that could not be set up (its message says why)."""


def check_fault_kinds(kinds: tuple[str, ...]) -> None:
    unknown = [k for k in kinds if k not in SIM_FAULT_KINDS]
    if unknown:
        raise SimError(
            f"--faults {','.join(unknown)}: the simulation draws {', '.join(SIM_FAULT_KINDS)} so far "
            "(docs/simulation.md)"
        )


@dataclass
class SimOptions:
    seed: int
    out: Path
    duration_s: float = 60.0
    brokers: int = 3
    controllers: int = 3
    faults: tuple[str, ...] = DEFAULT_FAULTS
    truncation_mode: str | None = None
    idempotent: bool = True


@dataclass
class SimResult:
    seed: int
    digest: str
    virtual_s: float
    wall_s: float
    steps: int
    acked: int
    faults: int
    violations: list[Violation] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "ok" if not self.violations else "FAIL"


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


def tree_digest(root: Path) -> str:
    """SHA-256 over every file under ``root``: in name order, each file's path relative to ``root`` then
    its contents (SPEC §15)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


class SimNode:
    """One broker or controller of the run: its own cancel scope (a kill cancels it, as SIGKILL ends a
    process: nothing of its clean shutdown runs), then its files lose what was not fsynced."""

    def __init__(
        self,
        env: SimEnvironment,
        name: str,
        entry: ProcessEntry,
        data_dir: Path,
        build: Callable[[], Any],
    ) -> None:
        self.env = env
        self.name = name
        self.entry = entry
        self.data_dir = data_dir
        self.build = build
        self.scope: trio.CancelScope | None = None
        self.server: Any = None
        self.exited = trio.Event()
        self.running = False

    async def start(self, nursery: trio.Nursery) -> None:
        self.exited = trio.Event()
        await nursery.start(self._run)

    async def _run(self, *, task_status: trio.TaskStatus[None]) -> None:
        try:
            with trio.CancelScope() as scope:
                self.scope = scope
                server = self.server = self.build()
                self.running = True
                await scope_started(server.run, task_status)
        finally:
            self.running = False
            self.server = None
            self.exited.set()

    async def stop(self) -> None:
        """A clean stop (SIGTERM without the controlled shutdown, as the end of a real run): the node
        flushes and closes its logs and journals its stop."""
        if self.server is None or not self.running:
            return
        if isinstance(self.server, KafkaServer):
            self.server.stop(controlled=False)
        else:
            self.server.stop()
        await self.exited.wait()
        self.env.network.close_address(("127.0.0.1", self.entry.port))

    async def kill(self) -> None:
        if self.scope is None or not self.running:
            return
        self.scope.cancel()
        await self.exited.wait()
        self.env.network.close_address(("127.0.0.1", self.entry.port))
        self.env.files.crash(self.data_dir)


async def scope_started(run: Callable[..., Awaitable[Any]], task_status: trio.TaskStatus[None]) -> None:
    """Runs a server's ``run`` in a nursery of its own, reporting started once it has bound."""
    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        task_status.started()


def _node_files(info: ClusterInfo) -> list[tuple[str, ProcessEntry, Path]]:
    out = [(f"controller-{c.id}", c, Path(c.dir)) for c in info.controllers]
    out += [(f"broker-{b.id}", b, Path(b.data_dir or b.dir)) for b in info.brokers]
    return out


class Simulation:
    def __init__(self, options: SimOptions, env: SimEnvironment) -> None:
        self.options = options
        self.env = env
        self.rng = random.Random(f"{options.seed}:schedule")
        self.faults = 0
        self.nodes: dict[str, SimNode] = {}
        self.info: ClusterInfo | None = None
        self.producer: Producer | None = None
        self.invariants = OnlineInvariants()

    def layout(self) -> ClusterInfo:
        o = self.options
        overrides = ["metrics.port=0", "min.insync.replicas=2", "default.replication.factor=3"]
        if o.truncation_mode is not None:
            overrides.append(f"replication.truncation.mode={o.truncation_mode}")
        info = create_layout(o.out, o.brokers, BASE_PORT, tuple(overrides), controllers=o.controllers)
        info.created_ms = 0
        info.save()
        return info

    async def main(self) -> None:
        info = self.info = self.layout()
        for name, entry, data_dir in _node_files(info):
            config = Path(entry.config)
            if name.startswith("controller"):

                def build(config: Path = config) -> Any:
                    return KafkaController(ControllerConfig.load(config, environ={}))

            else:

                def build(config: Path = config) -> Any:
                    return KafkaServer(BrokerConfig.load(config, environ={}))

            self.nodes[name] = SimNode(self.env, name, entry, data_dir, build)
        async with trio.open_nursery() as nursery:
            for node in self.nodes.values():
                if node.name.startswith("controller"):
                    await node.start(nursery)
            for node in self.nodes.values():
                if node.name.startswith("broker"):
                    await node.start(nursery)
            await self._create_topic()
            with trio.move_on_after(self.options.duration_s):
                async with trio.open_nursery() as inner:
                    inner.start_soon(self._workload)
                    inner.start_soon(self._watch)
                    if "kill" in self.options.faults:
                        inner.start_soon(self._nemesis, nursery)
            # The faults stop; every broker comes back and catches up before the last checks.
            for node in self.nodes.values():
                if not node.running:
                    await node.start(nursery)
            with trio.move_on_after(SETTLE_S):
                await self._watch()
            self.invariants.final(_now_ms(), self._live_brokers(), self._acked())
            # The end of the run is a clean stop, brokers first (as `isrsim cluster down`), so that the
            # report reads what the nodes had, not what a last crash would leave.
            for node in self.nodes.values():
                if node.name.startswith("broker"):
                    await node.stop()
            for node in self.nodes.values():
                await node.stop()
            nursery.cancel_scope.cancel()

    def _live_brokers(self) -> list[tuple[int, Any]]:
        return [
            (n.entry.id, n.server.replica_manager)
            for n in self.nodes.values()
            if n.name.startswith("broker") and n.running and n.server is not None
        ]

    async def _watch(self) -> None:
        """The online invariants, every step."""
        while True:
            self.invariants.step(_now_ms(), self._live_brokers())
            await trio.sleep(STEP_S)

    def _acked(self) -> list[AckedBatch]:
        info = self.info
        assert info is not None
        out = []
        for path in sorted((Path(info.root) / "workload").glob("acked-*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                r = json.loads(line)
                if r.get("base_offset", -1) >= 0:
                    out.append(
                        AckedBatch(r["topic"], r["partition"], r["base_offset"], r["last_offset"], r["crc"])
                    )
        return out

    async def _create_topic(self) -> None:
        info = self.info
        assert info is not None
        body = {
            "topics": [
                {
                    "name": TOPIC,
                    "num_partitions": PARTITIONS,
                    "replication_factor": min(3, self.options.brokers),
                    "configs": {},
                }
            ],
            "timeout_ms": 30_000,
        }
        for _ in range(600):
            for c in info.controllers:
                try:
                    async with open_connection(c.host, c.port, client_id="sim-admin") as conn:
                        resp = await conn.request(ApiKeys.CREATE_TOPICS, body, timeout=10)
                except (OSError, trio.TooSlowError, Exception) as exc:
                    log.debug("create topic via %s: %r", c.id, exc)
                    continue
                topics = resp.get("topics") or [{"error_code": resp.get("error_code", -1)}]
                code = topics[0]["error_code"]
                if code in (0, 36):  # created, or TOPIC_ALREADY_EXISTS
                    return
                log.debug("create topic via %s: %s", c.id, resp)
            await trio.sleep(0.5)
        raise SimError("the topic could not be created in 300 virtual seconds")

    async def _workload(self) -> None:
        info = self.info
        assert info is not None
        producer_id = f"sim-{self.options.seed}"
        journal = AckJournal(Path(info.root) / "workload", producer_id)
        settings = ProducerSettings(
            acks=-1, request_timeout_ms=10_000, batch_records=20, idempotence=self.options.idempotent
        )
        bootstrap = [(b.host, b.port) for b in info.brokers]
        async with trio.open_nursery() as nursery:
            client = ClusterClient(nursery, bootstrap, client_id=f"producer-{producer_id}")
            producer = Producer(client, TOPIC, settings, journal=journal, producer_id=producer_id)
            count = int(self.options.duration_s * 200) + 1
            self.producer = producer
            await producer.run(count, rate=200.0)
            nursery.cancel_scope.cancel()

    async def _nemesis(self, nursery: trio.Nursery) -> None:
        """Kills a broker now and then and restarts it a while later (every choice from the seed)."""
        info = self.info
        assert info is not None
        brokers = [n for n in self.nodes.values() if n.name.startswith("broker")]
        while True:
            await trio.sleep(self.rng.uniform(3.0, 8.0))
            victim = self.rng.choice(brokers)
            append_fault(Path(info.root), "kill", [str(victim.entry.id)])
            self.faults += 1
            await victim.kill()
            await trio.sleep(self.rng.uniform(1.0, 5.0))
            append_fault(Path(info.root), "restart", [str(victim.entry.id)])
            await victim.start(nursery)


def _seed_scheduler(seed: int) -> None:
    """trio shuffles the order of runnable tasks from its own random source. Here (as under Hypothesis)
    each batch is first put in the tasks' creation order, then shuffled from the seed: the order is part of
    the seed's history, never of where objects happen to lie in memory."""
    from trio._core import _run as trio_run

    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r.seed(f"{seed}:scheduler")


def run_simulation(options: SimOptions) -> SimResult:
    """Runs one seed to the end and returns its digest (the directory must not exist, or be empty)."""
    out = options.out
    if out.exists() and any(out.iterdir()):
        raise SimError(f"{out} exists and is not empty; choose another --out")
    random.seed(f"{options.seed}:global")
    _seed_scheduler(options.seed)
    env = SimEnvironment(options.seed)
    install_environment(env)
    sim = Simulation(options, env)
    clock = trio.testing.MockClock(autojump_threshold=0)
    started = time.perf_counter()
    trio.run(sim.main, clock=clock)
    wall = time.perf_counter() - started
    return SimResult(
        seed=options.seed,
        digest=tree_digest(out),
        virtual_s=clock.current_time(),
        wall_s=wall,
        steps=sim.invariants.steps,
        acked=0 if sim.producer is None else sim.producer.stats.records_acked,
        faults=sim.faults,
        violations=list(sim.invariants.violations),
    )
