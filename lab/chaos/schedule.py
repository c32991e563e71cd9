"""The chaos nemesis's schedule: a pure function of (seed, duration, interval, fault kinds, max-down, broker
ids), written to ``<root>/chaos.json`` before anything is done (docs/faults.md).

Time is cut into slots of ``interval`` seconds. At each slot (from the first interval on, so the workload
gets going first) the nemesis starts at most one fault: it deals kinds from a shuffled deck of the requested
kinds (refilled when empty, so every kind comes up once per round) and starts the first kind in the deck
that fits now; a kind that does not fit stays in the deck for a later slot. Each fault lasts a drawn time
(one to three intervals) and ends (heal, restart or resume) by the end of the run.

What fits:

- at most ``max_down`` brokers unavailable at any moment, a broker counting for one more interval after its
  fault ended (it is fenced, or catching up to rejoin the ISRs, for a while). ``kill``, ``term`` and
  ``pause`` take their broker down; ``isolate`` cuts its broker off; ``partition`` counts one broker: the
  broker partitioned from the controller, or the first of two partitioned brokers (each side's ISR loses the
  other). ``delay`` and ``loss`` take nobody down. ``loss`` may also fall on a broker's responses to its
  clients (``1 -> clients``, one way: requests take effect, answers are lost), the fault that makes a
  non-idempotent producer write twice (docs/clients.md).
- two faults in force at once never share a broker (a fault on a killed or paused broker cannot be applied,
  and a restart heals a node's links); they may share the controller, each on its own links.
- ``isolate`` runs alone: its rules sit on every node's table, and a paused node's table cannot change.

Controllers (``controller_ids``, the voters of the controller quorum, SPEC §11) are targets of the process
kinds too (a step with ``controller`` true; its node is the voter's id, as ``isrsim controller kill``
records it): ``kill``, ``term`` and ``pause`` then fall on a broker or a controller (drawn among those
free). ``isolate`` falls on a broker or on ``controller``: the voter that is the active controller when the
step starts (the nemesis asks the quorum; ``faults.jsonl`` names the voter), so every such isolation makes
the quorum elect another leader. At most a minority of the voters is down (killed, stopped, paused or
isolated) at once (one of three), so the quorum always has a majority to elect and commit with;
``allow_quorum_loss`` lifts that to all voters but one. A controller down counts against that limit, not
against ``max_down`` (which counts brokers). The other network kinds stay between brokers, or a broker and
``controller`` (again the active controller when the step starts: the one whose heartbeats, ISR changes
and LEADER_AND_ISR the broker needs); such a fault and a controller's process fault never overlap (a
paused or stopped voter's table cannot change, and it may be the one holding the fault).

While the run goes on, ``lab.chaos.budget`` also counts the brokers still out of service after their fault
ended (fenced by the controller, not yet back in every ISR): a fault that would exceed ``max_down`` waits.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from protocol import (
    CLIENTS,
    CONTROLLER,
    DOWN_KINDS,
    FAULT_KINDS,
    FAULT_RULES,
    NETWORK,
    NETWORK_KINDS,
    NODE,
    PROCESS,
    PROCESS_KINDS,
    fault_label,
)

# The kinds and their rules (what each takes down, where it may fall, what is drawn for it) are
# protocol.fault_kinds'; this module decides when and on whom.
SCHEDULE_VERSION = 2
TARGETS = ("brokers", "controllers")
# A fault lasts between MIN_LENGTH and MAX_LENGTH intervals.
MIN_LENGTH, MAX_LENGTH = 1.0, 3.0
ONE_WAY_CHANCE = 0.3
MIN_INTERVAL = 0.5


class ScheduleError(ValueError):
    """Input that cannot make a schedule; the message is one line that says what to change."""


@dataclass(frozen=True)
class FaultStep:
    """One fault: started ``at_s`` seconds into the run, ended (healed, restarted, resumed) at ``until_s``."""

    index: int
    kind: str
    at_s: float
    until_s: float
    nodes: list[str]
    params: dict[str, Any] = field(default_factory=dict)
    down: list[str] = field(default_factory=list)  # the brokers this fault counts as unavailable
    # The step's own node ``nodes[0]`` is a controller: a voter id for a process fault, ``controller`` (the
    # active controller when the step starts, docs/faults.md) for an isolation.
    controller: bool = False

    @property
    def brokers(self) -> set[str]:
        if self.controller:
            return set()
        return {n for n in self.nodes if n not in (CONTROLLER, CLIENTS)}

    @property
    def controllers(self) -> set[str]:
        """The controllers this fault takes down: a voter id, or ``controller`` for the active one (an
        isolation; which voter that is is known only when the step starts)."""
        return {self.nodes[0]} if self.controller else set()

    def describe(self) -> str:
        """As the report names it; a voter by its id (from 1000), as `isrsim controller kill` does."""
        return fault_label(self.kind, self.nodes, self.params)


@dataclass(frozen=True)
class Schedule:
    seed: int
    duration_s: float
    interval_s: float
    faults: list[str]
    max_down: int
    brokers: list[int]
    steps: list[FaultStep]
    controllers: list[int] = field(default_factory=list)
    max_controllers_down: int = 0

    def to_json(self) -> str:
        """``chaos.json``: the same inputs give the same bytes (no timestamps; the run's times are in
        faults.jsonl)."""
        body = {"version": SCHEDULE_VERSION, **asdict(self)}
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    def down_at(self, t: float) -> set[str]:
        """The brokers counted unavailable at ``t`` seconds (a fault is in force on [at_s, until_s))."""
        return {b for s in self.steps if s.at_s <= t < s.until_s for b in s.down}

    def controllers_down_at(self, t: float) -> set[str]:
        """The controllers down (killed, stopped, paused or isolated) at ``t`` seconds."""
        return {c for s in self.steps if s.at_s <= t < s.until_s for c in s.controllers}

    def in_force_at(self, t: float) -> list[FaultStep]:
        return [s for s in self.steps if s.at_s <= t < s.until_s]

    def counts(self) -> dict[str, int]:
        return {k: sum(1 for s in self.steps if s.kind == k) for k in self.faults}


def parse_targets(text: str | Iterable[str]) -> set[str]:
    """``brokers,controllers`` -> the set; unknown names are an error."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = {i.strip().lower() for i in items if i.strip()}
    if not names:
        raise ScheduleError(f"--targets names nothing: choose from {', '.join(TARGETS)}")
    for name in names:
        if name not in TARGETS:
            raise ScheduleError(f"unknown target {name!r}: choose from {', '.join(TARGETS)}")
    return names


def max_controllers_down(voters: int, allow_quorum_loss: bool) -> int:
    """A minority of the voters (a majority must stay up to elect and commit); all but one with
    ``allow_quorum_loss``."""
    if voters <= 0:
        return 0
    return voters - 1 if allow_quorum_loss else (voters - 1) // 2


def parse_kinds(text: str | Iterable[str]) -> list[str]:
    """``kill,term,...`` -> the kinds in FAULT_KINDS order, each once; unknown names are an error."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [i.strip().lower() for i in items if i.strip()]
    if not names:
        raise ScheduleError(f"--faults names no fault kind: choose from {', '.join(FAULT_KINDS)}")
    for name in names:
        if name not in FAULT_RULES:
            raise ScheduleError(f"unknown fault kind {name!r}: choose from {', '.join(FAULT_RULES)}")
    return [k for k in FAULT_RULES if k in names]


def _check(
    duration: float,
    interval: float,
    kinds: list[str],
    max_down: int,
    brokers: list[int],
    controllers_allowed: bool = False,
) -> None:
    if not brokers:
        raise ScheduleError("the cluster has no brokers")
    if not math.isfinite(duration) or duration <= 0:
        raise ScheduleError(f"--duration must be a positive number of seconds (got {duration:g})")
    if not math.isfinite(interval) or interval < MIN_INTERVAL:
        raise ScheduleError(
            f"--interval must be at least {MIN_INTERVAL:g} seconds (got {interval:g}): "
            "a shorter fault is over before any node notices it"
        )
    if duration < 2 * interval:
        raise ScheduleError(
            f"--duration {duration:g} leaves no room for a fault: the first starts after one --interval "
            f"({interval:g}s) and lasts at least one more; use --duration >= {2 * interval:g}"
        )
    if max_down < 0:
        raise ScheduleError(f"--max-down must be >= 0 (got {max_down})")
    if max_down >= len(brokers):
        raise ScheduleError(
            f"--max-down {max_down} must be less than the number of brokers ({len(brokers)}): "
            "with every broker down there is nothing left to fail over to"
        )
    downs = [
        k
        for k in kinds
        if FAULT_RULES[k].takes_down and (not FAULT_RULES[k].on_voters or not controllers_allowed)
    ]
    if max_down == 0 and downs:
        raise ScheduleError(
            f"--max-down 0 lets no broker be unavailable, so {','.join(downs)} could never run: "
            "use --max-down 1 or --faults delay,loss"
        )


def make_schedule(
    seed: int,
    duration: float,
    interval: float,
    faults: str | Iterable[str],
    max_down: int,
    broker_ids: Sequence[int],
    controller_ids: Sequence[int] = (),
    *,
    targets: str | Iterable[str] = TARGETS,
    allow_quorum_loss: bool = False,
) -> Schedule:
    """The schedule for these inputs (pure: the same inputs give the same schedule). ``controller_ids``: the
    voters that process faults may also take down (when ``targets`` names controllers)."""
    kinds = parse_kinds(faults)
    wanted = parse_targets(targets)
    brokers = sorted(set(broker_ids))
    controllers = sorted(set(controller_ids)) if "controllers" in wanted else []
    controller_limit = max_controllers_down(len(controllers), allow_quorum_loss)
    duration, interval = float(duration), float(interval)  # 300 and 300.0 give the same bytes
    _check(duration, interval, kinds, max_down, brokers, controller_limit > 0)
    broker_processes = "brokers" in wanted
    rng = random.Random(seed)
    steps: list[FaultStep] = []
    active: list[FaultStep] = []
    deck: list[str] = []
    slot = 1
    while slot * interval + MIN_LENGTH * interval <= duration + 1e-9:
        t = round(float(slot * interval), 1)
        slot += 1
        active = [s for s in active if s.until_s > t]
        if not deck:
            deck = list(kinds)
            rng.shuffle(deck)
        # A broker a fault took down is still out of service for a while after it ended (fenced, catching up
        # to rejoin the ISRs): for one interval it keeps its place in --max-down.
        recovering = [s for s in steps if s.down and t - interval < s.until_s <= t]
        for kind in deck:
            step = _place(
                rng,
                kind,
                len(steps),
                t,
                duration,
                interval,
                active + recovering,
                brokers,
                max_down,
                controllers,
                controller_limit,
                broker_processes,
            )
            if step is not None:
                deck.remove(kind)
                steps.append(step)
                active.append(step)
                break
    return Schedule(seed, duration, interval, kinds, max_down, brokers, steps, controllers, controller_limit)


def _place(
    rng: random.Random,
    kind: str,
    index: int,
    t: float,
    duration: float,
    interval: float,
    active: list[FaultStep],
    brokers: list[int],
    max_down: int,
    controllers: Sequence[int] = (),
    controller_limit: int = 0,
    broker_processes: bool = True,
) -> FaultStep | None:
    """The step for ``kind`` starting at ``t``, or None when it does not fit now. ``active``: the steps in
    force, and those that ended less than an interval ago (their brokers still count as down)."""
    rule = FAULT_RULES[kind]
    in_force = [s for s in active if s.until_s > t]
    if any(FAULT_RULES[s.kind].alone for s in in_force):
        return None
    busy = {b for s in in_force for b in s.brokers}
    free = [str(b) for b in brokers if str(b) not in busy]
    down = len({b for s in active for b in s.down})
    if rule.alone and in_force:
        return None
    controllers_down = {c for s in in_force for c in s.controllers}
    if rule.family == PROCESS:
        # A broker (within max_down) or a controller (within the quorum's limit) that no fault holds.
        candidates = [(b, False) for b in free] if broker_processes and down < max_down else []
        # A fault on the controller's links is on a voter's table (the active one's): no voter goes down
        # meanwhile (a stopped or paused voter's table cannot be healed, and it may be that one).
        controller_links = any(CONTROLLER in s.nodes for s in in_force)
        if controllers and len(controllers_down) < controller_limit and not controller_links:
            candidates += [(str(c), True) for c in controllers if str(c) not in controllers_down]
        if not candidates:
            return None
        a, on_controller = rng.choice(candidates)
    elif rule.scope == NODE:
        # A broker (within max_down), or the active controller (within the quorum's limit: an isolated
        # voter is down as a killed one is); it runs alone, so nothing else is in force.
        candidates = [(b, False) for b in free] if down < max_down else []
        if controllers and len(controllers_down) < controller_limit:
            candidates.append((CONTROLLER, True))
        if not candidates:
            return None
        a, on_controller = rng.choice(candidates)
    else:
        if rule.takes_down and down >= max_down:
            return None
        if not free:
            return None
        a, on_controller = rng.choice(free), False
    nodes = [a]
    params: dict[str, Any] = {}
    if rule.family == NETWORK and rule.scope != NODE:
        # A fault on the controller's links falls on the active voter when it starts: none while a voter is
        # down (which one leads is not known here, and a stopped or paused voter's table cannot change).
        voters_down = any(s.controllers for s in in_force)
        peers = (
            [b for b in free if b != a]
            + ([] if voters_down else [CONTROLLER])
            + ([CLIENTS] if rule.to_clients else [])
        )
        if not peers:
            return None
        nodes.append(rng.choice(peers))
        # Towards the clients only the answers are lost (a lost request never takes effect).
        params["one_way"] = rng.random() < ONE_WAY_CHANCE or nodes[1] == CLIENTS
    params.update(rule.chaos_params(rng))
    if rule.seeded:
        params["seed"] = rng.randrange(1 << 31)
    length = rng.uniform(MIN_LENGTH * interval, MAX_LENGTH * interval)
    until = round(min(t + length, duration), 1)
    return FaultStep(
        index=index,
        kind=kind,
        at_s=t,
        until_s=until,
        nodes=nodes,
        params=params,
        down=[a] if rule.takes_down and not on_controller else [],
        controller=on_controller,
    )


__all__ = [
    "DOWN_KINDS",
    "FAULT_KINDS",
    "NETWORK_KINDS",
    "PROCESS_KINDS",
    "TARGETS",
    "FaultStep",
    "Schedule",
    "ScheduleError",
    "make_schedule",
    "max_controllers_down",
    "parse_kinds",
    "parse_targets",
]
