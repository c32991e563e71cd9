"""The fault kinds, defined once: every word ``faults.jsonl`` records, and per kind the rule that the
command line, the chaos nemesis and the report all read (docs/faults.md).

A **fault kind** starts a fault: a process fault (``kill``, ``term``, ``pause``: a signal to a node) or a
network fault (``partition``, ``isolate``, ``delay``, ``loss``: rules in the nodes' fault tables,
:mod:`protocol.faults`). An **ending action** ends one: ``restart`` (a killed or stopped node started again;
it also starts healed), ``resume`` (SIGCONT) and ``heal`` (its links' rules removed). ``faults.jsonl``'s
``action`` is one of the two (:data:`FAULT_ACTIONS`).

Per kind (:class:`FaultKind`): its family, the action that ends it, the signal a process fault sends,
whether a network fault is on a pair of nodes or on every link of one node, what the chaos nemesis counts
and draws for it, how it edits a :class:`~protocol.faults.FaultSet`, its label and its colour in the
report. A new kind is one entry of :data:`FAULT_RULES` (and its command and its docs); the chaos schedule's
kinds, ``isrsim chaos --faults`` and the report's fault bands follow from the table.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from protocol.faults import FaultSet

Params = dict[str, Any]


class FaultAction(StrEnum):
    """Every ``action`` of ``faults.jsonl``: the fault kinds, then the actions that end them."""

    KILL = "kill"
    TERM = "term"
    PAUSE = "pause"
    PARTITION = "partition"
    ISOLATE = "isolate"
    DELAY = "delay"
    LOSS = "loss"
    RESTART = "restart"
    RESUME = "resume"
    HEAL = "heal"


PROCESS = "process"
NETWORK = "network"
# A network fault's scope: the links between two nodes, or every link of one node.
PAIR = "pair"
NODE = "node"


def _link(nodes: Sequence[str], params: Params) -> str:
    """``1 -> controller`` for a one-way fault (only that direction is cut), ``1 <-> 2`` for both."""
    return (" -> " if params.get("one_way") else " <-> ").join(nodes)


def _who(kind: str) -> Callable[[Sequence[str], Params], str]:
    return lambda nodes, params: f"{kind} {' '.join(nodes)}".strip()


def _delay_label(nodes: Sequence[str], params: Params) -> str:
    jitter = f"±{params['jitter_ms']}" if params.get("jitter_ms") else ""
    return f"delay {_link(nodes, params)} {params.get('ms')}{jitter} ms"


def _no_params(rng: random.Random) -> Params:
    return {}


def _delay_params(rng: random.Random) -> Params:
    ms = rng.randrange(50, 401, 25)
    return {"ms": ms, "jitter_ms": ms // 5}


@dataclass(frozen=True)
class FaultKind:
    """The rule of one fault kind."""

    name: str  # a FaultAction
    family: str  # PROCESS or NETWORK
    ended_by: FaultAction  # RESTART, RESUME or HEAL
    label: Callable[[Sequence[str], Params], str]  # as the report and chaos name one fault
    colour: str  # its band on the report's timelines
    # What a fault of this kind edits in the cluster's fault set: (the set, its nodes, its params, every
    # node's name) -> the new set. Network kinds only.
    edit: Callable[[FaultSet, Sequence[str], Params, Iterable[str]], FaultSet] | None = None
    scope: str = PAIR  # a network kind: PAIR (A and B) or NODE (every link of A)
    signal: str | None = None  # a process kind: the signal sent (KILL, TERM, STOP)
    # The chaos nemesis: does a fault take its broker out of service (``--max-down``)? may it fall on a
    # controller (a voter) instead of a broker? on a node's clients (``1 -> clients``)? Does it run alone?
    takes_down: bool = False
    on_voters: bool = False
    to_clients: bool = False
    alone: bool = False
    # The parameters chaos draws for one fault, and whether the nodes get a seed for their draws.
    chaos_params: Callable[[random.Random], Params] = _no_params
    seeded: bool = False


_RULES = (
    FaultKind(
        FaultAction.KILL,
        PROCESS,
        FaultAction.RESTART,
        _who("kill"),
        "#555555",
        signal="KILL",
        takes_down=True,
        on_voters=True,
        chaos_params=lambda rng: {"signal": "KILL"},
    ),
    FaultKind(
        FaultAction.TERM,
        PROCESS,
        FaultAction.RESTART,
        _who("term"),
        "#999999",
        signal="TERM",
        takes_down=True,
        on_voters=True,
        chaos_params=lambda rng: {"signal": "TERM"},
    ),
    FaultKind(
        FaultAction.PAUSE,
        PROCESS,
        FaultAction.RESUME,
        _who("pause"),
        "#17becf",
        signal="STOP",
        takes_down=True,
        on_voters=True,
    ),
    FaultKind(
        FaultAction.PARTITION,
        NETWORK,
        FaultAction.HEAL,
        lambda nodes, params: f"partition {_link(nodes, params)}",
        "#d62728",
        edit=lambda s, n, p, names: s.partition(n[0], n[1], one_way=bool(p.get("one_way"))),
        takes_down=True,
    ),
    FaultKind(
        FaultAction.ISOLATE,
        NETWORK,
        FaultAction.HEAL,
        _who("isolate"),
        "#9467bd",
        edit=lambda s, n, p, names: s.isolate(n[0], names),
        scope=NODE,
        takes_down=True,
        on_voters=True,
        alone=True,
    ),
    FaultKind(
        FaultAction.DELAY,
        NETWORK,
        FaultAction.HEAL,
        _delay_label,
        "#bcbd22",
        edit=lambda s, n, p, names: s.delay(
            n[0], n[1], int(p["ms"]), int(p.get("jitter_ms", 0)), one_way=bool(p.get("one_way"))
        ),
        chaos_params=_delay_params,
        seeded=True,
    ),
    FaultKind(
        FaultAction.LOSS,
        NETWORK,
        FaultAction.HEAL,
        lambda nodes, params: f"loss {_link(nodes, params)} {params.get('percent')}%",
        "#8c564b",
        edit=lambda s, n, p, names: s.loss(n[0], n[1], float(p["percent"]), one_way=bool(p.get("one_way"))),
        to_clients=True,
        chaos_params=lambda rng: {"percent": rng.randrange(5, 31, 5)},
        seeded=True,
    ),
)

FAULT_RULES: dict[str, FaultKind] = {str(rule.name): rule for rule in _RULES}
# The kinds in the table's order: chaos's ``--faults`` and its counts list them so.
FAULT_KINDS: tuple[str, ...] = tuple(FAULT_RULES)
PROCESS_KINDS: tuple[str, ...] = tuple(k for k, r in FAULT_RULES.items() if r.family == PROCESS)
NETWORK_KINDS: tuple[str, ...] = tuple(k for k, r in FAULT_RULES.items() if r.family == NETWORK)
DOWN_KINDS: tuple[str, ...] = tuple(k for k, r in FAULT_RULES.items() if r.takes_down)
ENDING_ACTIONS: tuple[str, ...] = (FaultAction.RESTART, FaultAction.RESUME, FaultAction.HEAL)
FAULT_ACTIONS: tuple[str, ...] = (*FAULT_KINDS, *ENDING_ACTIONS)

# The records of protocol-level fault rules in ``faults.jsonl`` (docs/faults.md): instants, not windows.
RULE_ACTIONS: tuple[str, ...] = ("rule_add", "rule_hit", "rule_remove")


def fault_label(action: str, nodes: Sequence[str], params: Params) -> str:
    """One record of ``faults.jsonl`` as the report and chaos name it (``delay 1 <-> 2 100±20 ms``)."""
    rule = FAULT_RULES.get(action)
    if rule is None:
        return f"{action} {' '.join(nodes)}".strip()
    return rule.label(nodes, params)


__all__ = [
    "DOWN_KINDS",
    "ENDING_ACTIONS",
    "FAULT_ACTIONS",
    "FAULT_KINDS",
    "FAULT_RULES",
    "NETWORK",
    "NETWORK_KINDS",
    "NODE",
    "PAIR",
    "PROCESS",
    "PROCESS_KINDS",
    "FaultAction",
    "FaultKind",
    "fault_label",
]
