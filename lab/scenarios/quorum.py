"""The controller quorum's story (SPEC §11, KIP-595): the active controller dies and another voter takes
over; a broker failure after it is handled by the new one; a paused active controller that wakes finds its
requests refused with STALE_CONTROLLER_EPOCH (11) and steps down."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import trio

from broker import read_journal
from kit.controller_quorum import NoActiveController, find_active, voters_of
from kit.fault_journal import append_fault
from kit.local_cluster import start_controller
from kit.node_query import ask_sync
from kit.processes import process_state, send_signal
from lab.scenarios.base import Scenario
from lab.scenarios.kips import BATCH
from lab.scenarios.run import TOPIC, ScenarioError, ScenarioRun
from protocol import ApiKeys, Errors, FaultAction

QUORUM_SETTINGS = ("min.insync.replicas=2", "replica.lag.time.max.ms=2000")
# How long broker 2 holds the old controller's requests (long enough for a new controller to take over
# and reach it first).
HOLD_MS = 12000
PROBE_TOPIC = "kip-probe"


class ControllerFailover(Scenario):
    name = "controller-failover"
    title = "The active controller dies, a new one takes over; a paused old one wakes and is refused"
    story = (
        "Three controllers are the voters of a Raft quorum (KIP-595); the quorum leader is the active "
        "controller. It is killed: the other voters notice within controller.quorum.fetch.timeout.ms, "
        "elect a new leader, which rebuilds the cluster state from the committed metadata log and resends "
        "every broker its state. A partition leader is then killed too: the new controller fences it when "
        "its session ends and elects another ISR member, and acks=all writes go on. Last, the active "
        "controller is paused while one of its LEADER_AND_ISR requests is still on its way to a broker; a "
        "new controller takes over and reaches the broker first. When the old one wakes, the broker "
        "refuses its request with STALE_CONTROLLER_EPOCH (11): a deposed controller cannot move a "
        "partition, and it learns the new epoch and steps down."
    )
    settings = QUORUM_SETTINGS

    def play(self, run: ScenarioRun) -> None:
        run.up(controllers=3)
        a, b, c = run.create_topic(3, {"min.insync.replicas": "2"})
        run.produce(4 * BATCH)
        n = 4 * BATCH
        run.wait("every replica to hold the batches", lambda: all(run.leo(x) == n for x in (a, b, c)))
        first, epoch = _active(run)
        run.moment(f"1. controller {first} is active (quorum epoch {epoch}); {a} leads; {n} records acked")

        # The active controller dies.
        t_kill = run.now_ms()
        _signal_controller(run, first, FaultAction.KILL, signal.SIGKILL)
        second, second_epoch = _active(run, exclude=first)
        took = _activation_ms(run, second, second_epoch) - t_kill
        run.note(
            f"controller {second} took over {took} ms after the kill (epoch {epoch} -> {second_epoch}): "
            "the fetch timeout, then an election, then its first entry committed"
        )

        # A broker failure after it: the new controller handles it.
        t = run.now_ms()
        run.kill(a)

        def elected() -> dict[str, Any] | None:
            for e in _controller_events(run, second, "leader_elected"):
                if e["ts_ms"] >= t and e.get("topic") == TOPIC and e.get("previous_leader_id") == a:
                    return e
            return None

        event = run.wait(f"controller {second} to fence {a} and elect a new leader", elected)
        new_leader = int(event["leader_id"])
        run.note(
            f"controller {second} fenced {a} and elected {new_leader} ({event['ts_ms'] - t} ms after the "
            "kill: the broker's session, counted from the takeover)"
        )
        run.wait(
            f"broker {new_leader} to lead",
            lambda: (r := run.replica(new_leader)) is not None and r["role"] == "leader",
        )
        run.produce(2 * BATCH)
        run.moment(f"2. {a} killed; controller {second} elected {new_leader}; 2 more batches acknowledged")

        # Bring the dead back: the old controller rejoins as a follower, the broker catches up.
        _start_controller(run, first)
        run.start(a)
        run.wait("the replicas to converge", run.converged, timeout=90)

        # The active controller is paused while its LEADER_AND_ISR is on its way to broker `target`.
        target = new_leader
        entry = run.broker(target)
        rule = {"src": "controller", "dst": str(target), "delay_ms": HOLD_MS}
        _net_faults(entry, [rule])
        run.say(f"[cyan]requests from the controllers to broker {target} are held {HOLD_MS} ms[/]")
        body = {
            "topics": [{"name": PROBE_TOPIC, "num_partitions": 1, "replication_factor": 3, "configs": {}}],
            "timeout_ms": 300,
        }
        run.ask_controller(ApiKeys.CREATE_TOPICS, body, timeout=10)
        _signal_controller(run, second, FaultAction.PAUSE, signal.SIGSTOP)
        t_pause = time.monotonic()
        try:
            _net_faults(entry, [])
            run.say(f"[cyan]broker {target} gets the controllers' requests at once again[/]")
            third, third_epoch = _active(run, exclude=second)
            run.note(f"controller {third} took over (epoch {third_epoch}) while {second} sleeps")
            run.wait(
                f"broker {target} to accept controller epoch {third_epoch}",
                lambda: _refuses_epoch(entry, second_epoch),
            )
            if time.monotonic() - t_pause >= HOLD_MS / 1000:
                raise ScenarioError("the old controller's request was released before the takeover")
            run.moment(f"3. controller {second} paused; {third} active in epoch {third_epoch}")
        finally:
            _signal_controller(run, second, FaultAction.RESUME, signal.SIGCONT)
        refused = run.wait(
            f"controller {second}'s held request to be refused with STALE_CONTROLLER_EPOCH",
            lambda: _controller_events(run, second, "stale_controller_epoch"),
            timeout=HOLD_MS / 1000 + 30,
        )[0]
        run.note(
            f"broker {refused['broker_id']} refused controller {second}'s {refused['api']} of epoch "
            f"{refused['controller_epoch']} with error {refused['error_code']} (STALE_CONTROLLER_EPOCH)"
        )
        run.wait(
            f"controller {second} to follow the new leader",
            lambda: (
                (states := _controller_events(run, second, "quorum_state"))
                and states[-1]["role"] == "follower"
                and states[-1]["epoch"] >= third_epoch
            ),
        )
        run.wait("the replicas to converge", run.converged, timeout=90)
        run.moment(f"4. controller {second} woke, was refused (11) and follows; converged")


def _active(run: ScenarioRun, exclude: int | None = None) -> tuple[int, int]:
    """The active controller's id and epoch (waiting for one other than ``exclude``)."""
    voters = [v for v in voters_of(run.cluster) if v.id != exclude]

    def found() -> tuple[int, int] | None:
        try:
            view = trio.run(find_active, voters, 2.0)
        except NoActiveController:
            return None
        assert view.voter.id is not None
        return view.voter.id, view.epoch

    return run.wait("an active controller" + (f" other than {exclude}" if exclude else ""), found)


def _controller_events(run: ScenarioRun, voter: int, event: str) -> list[dict[str, Any]]:
    return read_journal(Path(run.cluster.controller_by_id(voter).journal), event)


def _activation_ms(run: ScenarioRun, voter: int, epoch: int) -> int:
    for e in _controller_events(run, voter, "controller_activated"):
        if int(e["controller_epoch"]) == epoch:
            return int(e["ts_ms"])
    return run.now_ms()


def _signal_controller(run: ScenarioRun, voter: int, action: str, sig: signal.Signals) -> None:
    c = run.cluster.controller_by_id(voter)
    append_fault(run.root, action, [str(voter)], {"pid": c.pid, "controller": True})
    send_signal(c.pid, sig)
    if sig == signal.SIGKILL:
        run.wait(f"controller {voter} to exit", lambda: process_state(c.pid) == "stopped")
    run.say(f"[red]{signal.Signals(sig).name}[/] controller {voter} (`isrsim controller {action} {voter}`)")


def _start_controller(run: ScenarioRun, voter: int) -> None:
    c = run.cluster.controller_by_id(voter)
    start_controller(run.cluster, c)
    run.cluster.save()
    append_fault(run.root, FaultAction.RESTART, [str(voter)], {"pid": c.pid, "controller": True})
    run.say(f"controller {voter} started again on its metadata log (`isrsim controller restart {voter}`)")


def _net_faults(entry: Any, rules: list[dict[str, Any]]) -> None:
    resp = ask_sync(entry, ApiKeys.NET_FAULTS, {"operation": "set", "rules": rules}, timeout=10)
    if not resp or resp.get("error_code") != 0:
        raise ScenarioError(f"NET_FAULTS on broker {entry.id} failed: {resp}")


def _refuses_epoch(entry: Any, epoch: int) -> bool:
    """Whether the broker already refuses controller epoch ``epoch`` (an empty LEADER_AND_ISR changes
    nothing either way)."""
    probe = {
        "controller_id": -1,
        "controller_epoch": epoch,
        "broker_epoch": -1,
        "topic_states": [],
        "live_leaders": [],
    }
    resp = ask_sync(entry, ApiKeys.LEADER_AND_ISR, probe, timeout=3)
    return resp is not None and resp.get("error_code") == Errors.STALE_CONTROLLER_EPOCH


__all__ = ["ControllerFailover"]
