"""The chaos nemesis: starts and ends the faults of a schedule (``lab.chaos.schedule``) on a running cluster.

Process faults signal the brokers named in ``cluster.json`` (kill: SIGKILL, term: SIGTERM and a controlled
shutdown, pause: SIGSTOP) and end with a restart on the same data (kill, term) or SIGCONT (pause). The
same faults fall on controllers (a step with ``controller``: the voters of the quorum, by id): a killed or
stopped voter starts again on its metadata log and quorum-state, a paused one is resumed. Network
faults go through the same library as ``isrsim net`` (``kit.net_faults.change_faults``) and end with a heal
of exactly their links. On a quorum a network step's ``controller`` end is the voter that is the active
controller when the step starts (asked of the quorum, DESCRIBE_QUORUM): the fault is set on that voter's
links, by its id, as ``isrsim net isolate 1001`` would, and healed there. Every action is appended to
``<root>/faults.jsonl`` with the step's index in ``chaos.json`` (``params.chaos_step``), its nodes as they
were acted on (the voter's id, with ``params.active_controller``).

Blocking work (a controlled shutdown, a broker start that waits for its ``broker_started`` line) runs in a
worker thread, so the workload and the progress line go on meanwhile.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio
from rich.markup import escape

from kit.cluster_files import ClusterError, ClusterInfo, ProcessEntry
from kit.controller_quorum import NoActiveController, find_active, voters_of
from kit.fault_journal import append_fault
from kit.local_cluster import STOP_TIMEOUT_S, start_broker, start_controller
from kit.net_faults import NetCluster, NetError, change_faults, cluster_from_info, read_tables
from kit.processes import process_state, send_signal, stop_process, wait_exit
from lab.chaos.schedule import FaultStep
from protocol import CLIENT, CLIENTS, CONTROLLER, FAULT_RULES, NODE, PROCESS_KINDS, FaultAction, FaultSet

NET_RETRIES = 3
RESTART_ATTEMPTS = 2
# How long a step naming the controller waits for the quorum to have an active controller (an election
# takes about one election timeout; a step right after a voter's restart may meet one).
ACTIVE_WAIT_S = 5.0


def _step_marks(step: FaultStep) -> dict[str, Any]:
    """What every faults.jsonl record of a step carries: its index in chaos.json, and whether its node is a
    controller (a voter id) rather than a broker."""
    return {"chaos_step": step.index, **({"controller": True} if step.controller else {})}


class ChaosError(Exception):
    """The nemesis cannot go on (a broker does not start again); the message says which and why."""


class Nemesis:
    def __init__(self, info: ClusterInfo, say: Callable[[str], None], max_controllers_down: int = 1) -> None:
        self.info = info
        self.root = Path(info.root)
        self.say = say
        self.max_controllers_down = max_controllers_down
        self.applied: dict[int, FaultStep] = {}  # steps started and not yet ended
        # The nodes each started step acted on: its own, with ``controller`` resolved to a voter's id.
        self.acted: dict[int, list[str]] = {}
        self.skipped: list[tuple[FaultStep, str]] = []
        self.injected: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers

    def _net(self) -> NetCluster:
        return cluster_from_info(self.info)  # process states as they are now

    def _record(self, action: str, nodes: list[str], params: dict[str, Any]) -> None:
        append_fault(self.root, action, nodes, params)

    async def _change(
        self, edit: Callable[[NetCluster, FaultSet], FaultSet], required: list[str], seed: int | None
    ) -> int:
        cluster = self._net()
        change = await change_faults(cluster, lambda s: edit(cluster, s), required=required, seed=seed)
        return len(change.changed)

    # ------------------------------------------------------------------ one step

    def label(self, step: FaultStep) -> str:
        """``step`` as it was acted on: ``isolate 1001`` for the schedule's ``isolate controller``."""
        nodes = self.acted.get(step.index)
        return step.describe() if nodes is None else replace(step, nodes=nodes).describe()

    async def _resolve(self, step: FaultStep) -> tuple[list[str], int | None]:
        """The nodes ``step`` acts on, and the voter its ``controller`` end names on a quorum of several (None
        when it names none): the active controller now. Raises ClusterError when there is none, or when
        isolating it would leave fewer than a majority of the voters up. A sole voter is the node
        ``controller`` itself (as the network faults name it), faulted as a single controller was."""
        if CONTROLLER not in step.nodes or not self.info.several_voters:
            return list(step.nodes), None
        try:
            view = await find_active(voters_of(self.info), wait_s=ACTIVE_WAIT_S)
        except NoActiveController as exc:
            raise ClusterError(str(exc)) from None
        voter = view.voter.id
        if voter is None:  # pragma: no cover - voters_of names every voter by id
            raise ClusterError("the active controller has no id in cluster.json")
        if FAULT_RULES[step.kind].scope == NODE:
            down = [c.id for c in self.info.controllers if process_state(c.pid) != "running"]
            if len(down) + 1 > self.max_controllers_down:
                raise ClusterError(
                    f"isolating the active controller {voter} would leave a majority of the voters down "
                    f"(down: {', '.join(map(str, down)) or 'none'}; at most {self.max_controllers_down})"
                )
        return [str(voter) if n == CONTROLLER else n for n in step.nodes], voter

    async def start(self, step: FaultStep) -> bool:
        """Starts ``step``'s fault; False (and the reason in ``skipped``) when it cannot be applied now."""
        params = {**step.params, **_step_marks(step)}
        kind = step.kind
        voter: int | None = None
        try:
            nodes, voter = await self._resolve(step)
            if voter is not None:
                params["active_controller"] = voter
            self.acted[step.index] = nodes
            rule = FAULT_RULES[kind]
            if kind in PROCESS_KINDS:
                self._start_process_fault(step, params)
            else:
                seed = step.params.get("seed")
                a = nodes[0]
                b = nodes[1] if len(nodes) > 1 else ""
                required = [a] if rule.scope == NODE else [n for n in (a, b) if n != CLIENTS]
                ends = [a] if rule.scope == NODE else [a, CLIENT if b == CLIENTS else b]
                edit = rule.edit
                assert edit is not None  # every network kind edits the fault set
                await self._change(
                    lambda c, s: edit(s, ends, step.params, c.names), required, seed if rule.seeded else None
                )
                self._record(kind, nodes, params)
        except (NetError, ClusterError) as exc:
            self.acted.pop(step.index, None)
            self.skipped.append((step, str(exc)))
            self.say(f"[yellow]skipped[/] {step.describe()}: {escape(str(exc))}")
            return False
        self.applied[step.index] = step
        self.injected[kind] = self.injected.get(kind, 0) + 1
        which = "" if voter is None else f"; {voter} is the active controller"
        self.say(f"[red]{self.label(step)}[/] (for {step.until_s - step.at_s:.1f}s{which})")
        ended_by_restart = FAULT_RULES[kind].ended_by == FaultAction.RESTART
        pid = self._entry(step).pid if ended_by_restart else None
        if kind == FaultAction.KILL:
            await trio.to_thread.run_sync(wait_exit, pid, 5.0)  # reaps it if this process started it
        elif kind == FaultAction.TERM:
            result = await trio.to_thread.run_sync(stop_process, pid, STOP_TIMEOUT_S)
            self.say(f"{self._name(step)} {result}")
        return True

    def _entry(self, step: FaultStep) -> ProcessEntry:
        """The process a process fault falls on: a broker, or a controller of the quorum."""
        node = int(step.nodes[0])
        return self.info.controller_by_id(node) if step.controller else self.info.broker(node)

    @staticmethod
    def _name(step: FaultStep) -> str:
        return f"{'controller' if step.controller else 'broker'} {step.nodes[0]}"

    def _start_process_fault(self, step: FaultStep, params: dict[str, Any]) -> None:
        b = self._entry(step)
        state = process_state(b.pid)
        if state != "running":
            raise ClusterError(f"{self._name(step)} is {state}")
        sig = signal.Signals[f"SIG{FAULT_RULES[step.kind].signal}"]
        if step.kind == FaultAction.TERM:
            # Recorded before the signal: the controlled shutdown that follows is part of the fault.
            self._record(FaultAction.TERM, step.nodes, {**params, "pid": b.pid})
            return
        if not send_signal(b.pid, sig):
            raise ClusterError(f"{self._name(step)} is not running")
        self._record(step.kind, step.nodes, {**params, "pid": b.pid})

    def skip(self, step: FaultStep, why: str) -> None:
        """A step that was never started (``--max-down`` kept it waiting until its planned end)."""
        self.skipped.append((step, why))
        self.say(f"[yellow]skipped[/] {step.describe()}: {escape(why)}")

    async def end(self, step: FaultStep) -> None:
        """Ends a started step: restart (kill, term), resume (pause) or heal its links."""
        if self.applied.pop(step.index, None) is None:
            return
        node = step.nodes[0]
        params = _step_marks(step)
        rule = FAULT_RULES[step.kind]
        if rule.ended_by == FaultAction.RESTART and step.controller:
            await self.restart_controller(int(node), params)
        elif rule.ended_by == FaultAction.RESTART:
            await self.restart(int(node), params)
        elif rule.ended_by == FaultAction.RESUME:
            b = self._entry(step)
            send_signal(b.pid, signal.SIGCONT)
            self._record(FaultAction.RESUME, [node], {**params, "pid": b.pid})
            self.say(f"[green]resume {node}[/]")
        else:
            acted = self.acted.pop(step.index, step.nodes)
            pair = acted[:1] if rule.scope == NODE else acted
            a, b2 = pair[0], pair[1] if len(pair) > 1 else None
            b2 = CLIENT if b2 == CLIENTS else b2
            for attempt in range(1, NET_RETRIES + 1):
                try:
                    await self._change(lambda c, s: s.heal(a, b2), [], None)
                    break
                except NetError as exc:
                    if attempt == NET_RETRIES:
                        why = escape(str(exc))
                        self.say(f"[yellow]heal {' '.join(pair)} failed[/] ({why}); healed at the end")
                        return
                    await trio.sleep(1.0)
            self._record(FaultAction.HEAL, pair, params)
            self.say(f"[green]heal {' '.join(pair)}[/]")

    async def restart(self, broker_id: int, params: dict[str, Any]) -> None:
        b = self.info.broker(broker_id)
        error: ClusterError | None = None
        for _ in range(RESTART_ATTEMPTS):
            try:
                await trio.to_thread.run_sync(self._start_broker, b.id)
                break
            except ClusterError as exc:
                error = exc
        else:
            raise ChaosError(f"broker {broker_id} did not start again: {error}")
        healed = 0
        try:
            cluster = self._net()
            change = await change_faults(cluster, lambda s: s.heal(str(broker_id)), required=[])
            healed = len(change.before) - len(change.after)
        except NetError:
            pass
        self._record(FaultAction.RESTART, [str(broker_id)], {**params, "pid": b.pid, "healed_links": healed})
        self.say(f"[green]restart {broker_id}[/] (pid {b.pid})")

    async def restart_controller(self, voter: int, params: dict[str, Any]) -> None:
        """Starts a controller again on its own metadata log and quorum-state (it rejoins as a follower)."""
        c = self.info.controller_by_id(voter)
        error: ClusterError | None = None
        for _ in range(RESTART_ATTEMPTS):
            try:
                await trio.to_thread.run_sync(self._start_controller, voter)
                break
            except ClusterError as exc:
                error = exc
        else:
            raise ChaosError(f"controller {voter} did not start again: {error}")
        self._record(FaultAction.RESTART, [str(voter)], {**params, "pid": c.pid, "controller": True})
        self.say(f"[green]restart controller {voter}[/] (pid {c.pid})")

    def _start_controller(self, voter: int) -> None:
        c = self.info.controller_by_id(voter)
        if process_state(c.pid) != "stopped":
            stop_process(c.pid, STOP_TIMEOUT_S)
        start_controller(self.info, c)
        self.info.save()

    def _start_broker(self, broker_id: int) -> None:
        b = self.info.broker(broker_id)
        if process_state(b.pid) != "stopped":
            stop_process(b.pid, STOP_TIMEOUT_S)
        start_broker(self.info, b)
        self.info.save()

    # ------------------------------------------------------------------ the end

    async def heal_everything(self) -> list[str]:
        """Resumes paused brokers, heals every network fault, restarts stopped brokers. Returns what it did
        (nothing when every step ended as planned)."""
        done: list[str] = []
        controllers = self.info.controllers if self.info.several_voters else []
        for c in controllers:
            if process_state(c.pid) == "paused":
                send_signal(c.pid, signal.SIGCONT)
                self._record(
                    FaultAction.RESUME, [str(c.id)], {"pid": c.pid, "controller": True, "chaos_final": True}
                )
                done.append(f"resumed controller {c.id}")
        for c in controllers:
            if process_state(c.pid) == "stopped":
                await self.restart_controller(c.id, {"chaos_final": True})
                done.append(f"restarted controller {c.id}")
        for b in self.info.brokers:
            if process_state(b.pid) == "paused":
                send_signal(b.pid, signal.SIGCONT)
                self._record(FaultAction.RESUME, [str(b.id)], {"pid": b.pid, "chaos_final": True})
                done.append(f"resumed {b.id}")
        for attempt in range(1, NET_RETRIES + 1):
            try:
                tables = await read_tables(self._net())
                if not any(tables.values()):
                    break
                await self._change(lambda c, s: s.heal(), [], None)
                self._record(FaultAction.HEAL, [], {"chaos_final": True})
                done.append("healed every network fault")
                break
            except NetError as exc:
                if attempt == NET_RETRIES:
                    raise ChaosError(f"could not heal the network faults: {exc}") from None
                await trio.sleep(1.0)
        for b in self.info.brokers:
            if process_state(b.pid) == "stopped":
                await self.restart(b.id, {"chaos_final": True})
                done.append(f"restarted {b.id}")
        self.applied.clear()
        return done


__all__ = ["ChaosError", "Nemesis"]
