"""Scenario 4: producer-visible unavailability when a leader goes away.

Each case runs on a fresh managed cluster: a quorum of three controllers and three brokers
(``broker.session.timeout.ms`` and ``broker.heartbeat.interval.ms`` below), a topic with replication factor
3 and ``min.insync.replicas=2`` created through the controller with 3 x N partitions, so that the controller's
round-robin placement gives each broker N leaderships (N = 1 and 100).

A prober writes to every partition the victim leads, as a producer would: one PRODUCE (acks=-1, one small
batch per partition) per leader every ``PROBE_INTERVAL_S``, refreshing metadata after an error (at most
every ``METADATA_BACKOFF_S``). The victim is killed with SIGKILL, or stopped cleanly with SIGTERM (the broker
then moves its leaderships away through the controller first). A partition's unavailability is the longest
time without an acknowledgement from the signal until the first acknowledgement by another broker (the new
leader), counting only requests sent after the signal: after SIGKILL that is the time to the first
acknowledgement; after SIGTERM the victim may still acknowledge for a while (until its leadership moves),
and what counts is the gap between its last acknowledgement and the new leader's first. The figure is the
worst partition (every partition writable again), the median is in the details.

Two more kinds of case time the controller quorum: the active controller killed first and a broker with it
(the broker's failure is handled by the controller elected after it), and the active controller alone taken
away by SIGKILL, SIGSTOP or a network isolation from every node and client, timed until another voter
answers as the active controller.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from kit.cluster_client import ClientError, ClusterClient
from kit.net_faults import NetCluster, Node, change_faults
from kit.ports import free_ports
from kit.processes import ControllerProcess, async_wait_until
from lab.bench.cluster import (
    LOG_LEVEL,
    BenchCluster,
    BenchError,
    request,
)
from lab.bench.context import BenchContext
from lab.bench.results import Figure, ScenarioResult, Target
from protocol import ApiKeys, ConnectionClosed, Errors, TopicPartition, build_simple_batch, error_name

CONTROLLER_IDS = (1000, 1001, 1002)
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_MS = 500
ELECTION_TIMEOUT_MS = 1000  # controller.quorum.election.timeout.ms (Kafka's default)
PROBE_INTERVAL_S = 0.01
METADATA_BACKOFF_S = 0.02
RECOVERY_TIMEOUT_S = 60.0
FETCH_TIMEOUT_MS = 2000  # controller.quorum.fetch.timeout.ms (Kafka's default)
CONTROLLER_THEN_SIGKILL = "controller_then_sigkill"
# How the active controller is taken away in the takeover cases.
TAKEOVER_MODES = ("sigkill", "pause", "isolate")


class ManagedCluster(BenchCluster):
    """Three controllers, voters of the controller quorum, plus brokers that register with whichever of
    them is active."""

    def __init__(self, root: Path) -> None:
        super().__init__(
            root,
            {
                "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
                "min.insync.replicas": "2",
            },
        )
        ports = free_ports(len(CONTROLLER_IDS))
        self.voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in zip(CONTROLLER_IDS, ports, strict=True))
        self.controllers = {
            node_id: ControllerProcess(
                root / f"controller-{node_id}",
                log_path=root / f"controller-{node_id}" / "controller.log",
                overrides={
                    "listeners": f"127.0.0.1:{port}",
                    "controller.quorum.voters": self.voters,
                    "controller.quorum.election.timeout.ms": str(ELECTION_TIMEOUT_MS),
                    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "min.insync.replicas": "2",
                },
                node_id=node_id,
                log_level=LOG_LEVEL,
            )
            for node_id, port in zip(CONTROLLER_IDS, ports, strict=True)
        }
        self.active_id = -1

    @property
    def controller_address(self) -> tuple[str, int]:
        controller = self.controllers.get(self.active_id) or next(iter(self.controllers.values()))
        return controller.address

    async def find_active(self, timeout: float = 30, exclude: int | None = None) -> int:
        """The id of the voter that answers controller APIs (not NOT_CONTROLLER)."""

        async def one_active() -> bool:
            for node_id, controller in self.controllers.items():
                if node_id == exclude or not controller.is_running():
                    continue
                try:
                    resp = await request(controller.address, ApiKeys.DESCRIBE_CLUSTER, {}, timeout=2)
                except (OSError, ConnectionClosed, trio.TooSlowError, BenchError):
                    continue
                if resp.get("error_code") == Errors.NONE:
                    self.active_id = node_id
                    return True
            return False

        await async_wait_until(one_active, timeout, "an active controller", interval=0.05)
        return self.active_id

    async def start_controller(self) -> None:
        for controller in self.controllers.values():
            controller.launch()
        for controller in self.controllers.values():
            await controller.wait_started_async()
        self.overrides["controller.quorum.voters"] = self.voters
        await self.find_active()

    async def wait_registered(self, ids: list[int], timeout: float = 30) -> None:
        async def all_unfenced() -> bool:
            resp = await request(self.controller_address, ApiKeys.DESCRIBE_CLUSTER, {})
            live = {b["broker_id"] for b in resp.get("brokers", []) if not b.get("fenced")}
            return set(ids) <= live

        await async_wait_until(
            all_unfenced, timeout, "every broker to register with the controller", interval=0.1
        )

    async def create_topic(self, name: str, partitions: int) -> None:
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 3,
                    "configs": {"min.insync.replicas": "2"},
                }
            ],
            "timeout_ms": 30_000,
        }
        resp = await request(self.controller_address, ApiKeys.CREATE_TOPICS, body, timeout=60)
        topic = resp["topics"][0]
        if topic["error_code"] != 0:
            raise BenchError(f"CREATE_TOPICS {name}: {topic['error_code']} {topic.get('error_message')}")

    def net_cluster(self) -> NetCluster:
        """The running nodes as ``isrsim net`` names them: voters and brokers by id."""
        nodes = {
            str(node_id): Node(str(node_id), *controller.address, "running")
            for node_id, controller in self.controllers.items()
            if controller.is_running()
        }
        for broker_id, broker in self.brokers.items():
            if broker.is_running():
                nodes[str(broker_id)] = Node(str(broker_id), broker.host, broker.port, "running")
        return NetCluster(nodes)

    def close(self) -> None:
        super().close()
        for controller in self.controllers.values():
            controller.close()


@dataclass
class Prober:
    client: ClusterClient
    partitions: list[TopicPartition]
    # Per partition: (sent, acknowledged, by which broker), monotonic seconds.
    acks: dict[TopicPartition, list[tuple[float, float, int]]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    _in_flight: set[TopicPartition] = field(default_factory=set)
    _stale: bool = False
    _last_refresh: float = 0.0

    async def run(self) -> None:
        batch = build_simple_batch([b"p" * 100])
        async with trio.open_nursery() as nursery:
            while True:
                if self._stale and time.monotonic() - self._last_refresh >= METADATA_BACKOFF_S:
                    self._stale = False
                    self._last_refresh = time.monotonic()
                    try:
                        await self.client.refresh_metadata([self.partitions[0][0]])
                    except (ClientError, OSError, ConnectionClosed, trio.TooSlowError, KeyError):
                        self._stale = True
                by_leader: dict[int, list[TopicPartition]] = {}
                for tp in self.partitions:
                    if tp not in self._in_flight:
                        by_leader.setdefault(self.client.leader_for(tp), []).append(tp)
                for leader, tps in by_leader.items():
                    self._in_flight.update(tps)
                    nursery.start_soon(self._send, leader, tps, batch)
                await trio.sleep(PROBE_INTERVAL_S)

    def _error(self, name: str) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1
        self._stale = True

    async def _send(self, leader: int, tps: list[TopicPartition], batch: bytes) -> None:
        sent = time.monotonic()
        topic = tps[0][0]
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 10_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": tp[1], "records": batch} for tp in tps]}
            ],
        }
        try:
            if leader < 0:
                raise ConnectionClosed("no leader")
            conn = await self.client.broker_connection(leader)
            resp = await conn.request(ApiKeys.PRODUCE, body, timeout=15)
            now = time.monotonic()
            for part in resp["responses"][0]["partition_responses"]:
                tp = (topic, part["index"])
                if part["error_code"] == Errors.NONE:
                    self.acks.setdefault(tp, []).append((sent, now, leader))
                else:
                    self._error(error_name(part["error_code"]))
        except (OSError, ConnectionClosed, trio.TooSlowError) as exc:
            self._error(type(exc).__name__)
            address = self.client.brokers.get(leader)
            if address is not None:
                self.client.drop(address)
        finally:
            self._in_flight.difference_update(tps)

    def recovered_after(self, t_kill: float, victim: int) -> dict[TopicPartition, float]:
        """Partition -> its unavailability in seconds: the longest gap between ``t_kill`` and the
        acknowledgements of requests sent after it, up to the first acknowledgement by a broker other than
        ``victim``. Partitions no other broker acknowledged yet are left out."""
        out = {}
        for tp in self.partitions:
            after = sorted((ack, by) for sent, ack, by in self.acks.get(tp, []) if sent >= t_kill)
            last, worst = t_kill, 0.0
            for ack, by in after:
                worst = max(worst, ack - last)
                last = ack
                if by != victim:
                    out[tp] = worst
                    break
        return out


async def _case(ctx: BenchContext, n: int, mode: str, trial: int) -> dict[str, Any]:
    cluster = ManagedCluster(ctx.scenario_dir("failover") / f"{mode}-{n}-{trial}")
    label = f"{mode}, {n} partition(s)"
    try:
        ctx.step(f"{label}: starting a controller and 3 brokers")
        await cluster.start_controller()
        await cluster.start([1, 2, 3])
        await cluster.wait_registered([1, 2, 3])
        topic = "fo"
        await cluster.create_topic(topic, 3 * n)
        async with trio.open_nursery() as nursery:
            client = ClusterClient(nursery, cluster.bootstrap, client_id="isrsim-bench-prober")

            async def placed() -> bool:
                await client.refresh_metadata([topic])
                parts = [info for (t, _), info in client.partitions.items() if t == topic]
                return len(parts) == 3 * n and all(i.leader >= 0 and len(i.isr) == 3 for i in parts)

            await async_wait_until(placed, 60, f"{topic}'s {3 * n} partitions to have leaders", interval=0.1)
            led: dict[int, list[TopicPartition]] = {}
            for tp, info in client.partitions.items():
                if tp[0] == topic:
                    led.setdefault(info.leader, []).append(tp)
            victim = max(led, key=lambda b: len(led[b]))
            prober = Prober(client, sorted(led[victim]))
            nursery.start_soon(prober.run)
            ctx.step(f"{label}: probing {len(prober.partitions)} partitions led by broker {victim}")
            await async_wait_until(
                lambda: all(prober.acks.get(tp) for tp in prober.partitions),
                30,
                "every probed partition to ack",
            )
            await trio.sleep(0.5)
            broker = cluster[victim]
            takeover_ms: float | None = None
            if mode == CONTROLLER_THEN_SIGKILL:
                # The active controller dies first, then the broker: the broker's failure is handled by
                # the controller elected after it.
                old = cluster.active_id
                ctx.step(f"{label}: SIGKILL to the active controller {old}, then to broker {victim}")
                t_controller = time.monotonic()
                cluster.controllers[old].proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            else:
                ctx.step(f"{label}: {'SIGKILL' if mode == 'sigkill' else 'SIGTERM'} to broker {victim}")
            t_kill = time.monotonic()
            broker.proc.send_signal(signal.SIGTERM if mode == "clean" else signal.SIGKILL)  # type: ignore[union-attr]
            if mode == CONTROLLER_THEN_SIGKILL:
                await cluster.find_active(RECOVERY_TIMEOUT_S, exclude=old)
                takeover_ms = (time.monotonic() - t_controller) * 1000
            await async_wait_until(
                lambda: len(prober.recovered_after(t_kill, victim)) == len(prober.partitions),
                RECOVERY_TIMEOUT_S + SESSION_TIMEOUT_MS / 1000,
                f"every partition led by broker {victim} to take writes again",
            )
            recovered = prober.recovered_after(t_kill, victim)
            await async_wait_until(lambda: not broker.is_running(), 30, f"broker {victim} to exit")
            nursery.cancel_scope.cancel()
    finally:
        cluster.close()
    times = sorted(recovered.values())
    return {
        "mode": mode,
        "partitions_led": len(times),
        "victim": victim,
        "worst_ms": times[-1] * 1000,
        "median_ms": statistics.median(times) * 1000,
        "errors_seen": prober.errors,
        "controller_takeover_ms": takeover_ms,
        "exit_code": broker.proc.returncode if broker.proc is not None else None,
    }


async def _takeover_case(ctx: BenchContext, mode: str, trial: int) -> float:
    """Milliseconds from taking the active controller away (SIGKILL, SIGSTOP, or a network isolation from
    every node and client) until another voter answers as the active controller."""
    cluster = ManagedCluster(ctx.scenario_dir("failover") / f"takeover-{mode}-{trial}")
    paused: subprocess.Popen[bytes] | None = None
    try:
        ctx.step(f"controller takeover ({mode}): starting 3 controllers and 3 brokers")
        await cluster.start_controller()
        await cluster.start([1, 2, 3])
        await cluster.wait_registered([1, 2, 3])
        old = cluster.active_id
        proc = cluster.controllers[old].proc
        assert proc is not None
        ctx.step(f"controller takeover ({mode}): taking the active controller {old} away")
        started = time.monotonic()
        if mode == "sigkill":
            proc.send_signal(signal.SIGKILL)
        elif mode == "pause":
            proc.send_signal(signal.SIGSTOP)
            paused = proc
        else:
            net = cluster.net_cluster()
            await change_faults(net, lambda faults: faults.isolate(str(old), net.names), required=[str(old)])
        await cluster.find_active(RECOVERY_TIMEOUT_S, exclude=old)
        return (time.monotonic() - started) * 1000
    finally:
        if paused is not None:
            paused.send_signal(signal.SIGCONT)
        cluster.close()


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    p = ctx.params
    cases: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for n in p.failover_partition_counts:
        for mode in ("sigkill", "clean"):
            for trial in range(p.failover_repeats):
                cases.setdefault((mode, n), []).append(await _case(ctx, n, mode, trial))
    # The controller quorum: the active controller killed, then a broker (the largest case only).
    n = max(p.failover_partition_counts)
    for trial in range(p.failover_repeats):
        cases.setdefault((CONTROLLER_THEN_SIGKILL, n), []).append(
            await _case(ctx, n, CONTROLLER_THEN_SIGKILL, trial)
        )
    takeovers = {
        mode: [await _takeover_case(ctx, mode, trial) for trial in range(p.failover_repeats)]
        for mode in TAKEOVER_MODES
    }
    # KRaft's bound for a leader that stops answering: the followers notice after their fetch timeout, and
    # at worst split their votes once (they stand together) and wait a randomized election timeout (1-2 s).
    bound = FETCH_TIMEOUT_MS + 2 * ELECTION_TIMEOUT_MS
    for mode, times in takeovers.items():
        trials = f", median of {len(times)} runs" if len(times) > 1 else ""
        result.add(
            Figure(
                f"controller_takeover_{mode}_ms",
                f"(4) active controller {'isolated' if mode == 'isolate' else mode}: new active controller",
                statistics.median(times),
                "ms",
                Target("<=", bound, f"<= fetch timeout + 2 x election timeout ({bound} ms)"),
                note=f"from the fault until another voter answers{trials}; the followers stand after their "
                f"fetch timeout ({FETCH_TIMEOUT_MS} ms), then at most one split vote",
            )
        )
    for (mode, n), runs in cases.items():
        worst = statistics.median(r["worst_ms"] for r in runs)
        trials = f", median of {len(runs)} runs" if len(runs) > 1 else ""
        median_partition = statistics.median(r["median_ms"] for r in runs)
        note = f"worst partition{trials}; median partition {median_partition:.0f} ms"
        if mode == "sigkill":
            target = Target(
                "<=", SESSION_TIMEOUT_MS + 500, f"<= session timeout + 500 ms ({SESSION_TIMEOUT_MS + 500} ms)"
            )
            title = "SIGKILL"
        elif mode == "clean":
            target = Target("<=", 100)
            title = "clean stop"
        else:
            bound = ELECTION_TIMEOUT_MS + SESSION_TIMEOUT_MS + 500
            target = Target("<=", bound, f"<= election timeout + session timeout + 500 ms ({bound} ms)")
            title = "active controller then broker SIGKILL"
            takeover = statistics.median(float(r["controller_takeover_ms"]) for r in runs)
            note += f"; controller takeover {takeover:.0f} ms"
        result.add(
            Figure(
                f"{mode}_{n}_worst_ms",
                f"(4) {title}, {runs[0]['partitions_led']} partition(s) led: unavailable",
                worst,
                "ms",
                target,
                note=note,
            )
        )
    result.details = {
        "controllers": len(CONTROLLER_IDS),
        "controller_quorum_election_timeout_ms": ELECTION_TIMEOUT_MS,
        "broker_session_timeout_ms": SESSION_TIMEOUT_MS,
        "broker_heartbeat_interval_ms": HEARTBEAT_MS,
        "probe_interval_ms": PROBE_INTERVAL_S * 1000,
        "metadata_backoff_ms": METADATA_BACKOFF_S * 1000,
        "cases": {f"{mode}-{n}": runs for (mode, n), runs in cases.items()},
        "controller_quorum_fetch_timeout_ms": FETCH_TIMEOUT_MS,
        "controller_takeover_ms": takeovers,
    }
