"""``--max-down`` while the run goes on (pure): which brokers are out of service now, and may a fault start.

The schedule (``lab.chaos.schedule``) keeps the faults *in force* within ``--max-down``, but a broker is
out of service longer than its fault: after a pause, a kill, an isolation or a partition from the
controller, the controller keeps it fenced until its heartbeats come back, and it is out of the ISRs until
it has caught up. So before a fault that takes a broker down starts, the run counts every broker out of
service at that moment:

- the brokers of the faults in force that take one down (``FaultStep.down``: killed, stopped, paused,
  isolated, partitioned away);
- every broker the controller has fenced (its heartbeats stopped: it stays down until unfenced);
- every broker an earlier fault of this run took down (or partitioned) that is not yet back in every ISR
  it belongs to ("recovering").

The fault starts only when that count, with its own broker added, is at most ``--max-down``; until then it
waits (and is skipped if it cannot start before its planned end). So ``--max-down 1`` never has two
brokers out of the ISR at once by the chaos's own doing.

Nodes are names (``"1"``, ``"controller"``), so other kinds of target (controllers, with a budget of their
own) add their own counts beside ``brokers_out``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from lab.chaos.schedule import FaultStep
from protocol import FAULT_RULES, NETWORK


@dataclass(frozen=True)
class ServiceView:
    """What the controller says now: the brokers it has fenced, and per partition its replicas and ISR."""

    fenced: frozenset[str] = frozenset()
    replicas: Mapping[int, list[int]] = field(default_factory=dict)
    isr: Mapping[int, list[int]] = field(default_factory=dict)
    known: bool = True  # False: the controller did not answer (nothing is known to be back)

    def out_of_isr(self) -> set[str]:
        """Brokers missing from the ISR of a partition they hold a replica of."""
        out: set[str] = set()
        for p, replicas in self.replicas.items():
            isr = set(self.isr.get(p, []))
            out.update(str(b) for b in replicas if b not in isr)
        return out


def taken_down(step: FaultStep) -> set[str]:
    """The brokers a step takes out of service (and that must be back before they stop counting)."""
    rule = FAULT_RULES[step.kind]
    if not rule.takes_down:
        return set()
    # A network fault that takes brokers down (a partition, an isolation) takes each of its brokers.
    return set(step.down) | (step.brokers if rule.family == NETWORK else set())


def brokers_out(
    in_force: Iterable[FaultStep], recovering: Iterable[str], view: ServiceView
) -> dict[str, str]:
    """Every broker out of service now, with why (the first reason found)."""
    out: dict[str, str] = {}
    for step in in_force:
        for b in step.down:
            out.setdefault(b, step.describe())
    for b in sorted(view.fenced):
        out.setdefault(b, "fenced by the controller")
    behind = view.out_of_isr()
    for b in sorted(recovering):
        if not view.known:
            out.setdefault(b, "not known to be back (the controller did not answer)")
        elif b in behind:
            out.setdefault(b, "not yet back in every ISR")
    return out


def blocked(step: FaultStep, out: Mapping[str, str], max_down: int) -> str | None:
    """Why ``step`` may not start now (None: it may): the brokers it takes down, added to those already
    out, would be more than ``max_down``."""
    if not step.down:
        return None
    adds = [b for b in step.down if b not in out]
    if not adds or len(out) + len(adds) <= max_down:
        return None
    why = ", ".join(f"broker {b}: {reason}" for b, reason in sorted(out.items()))
    return f"--max-down {max_down}: {len(out)} broker(s) already out of service ({why})"


def still_recovering(recovering: Iterable[str], view: ServiceView) -> set[str]:
    """The recovering brokers that are not yet back (fenced, or out of an ISR); all of them when the
    controller did not answer."""
    if not view.known:
        return set(recovering)
    behind = view.out_of_isr() | set(view.fenced)
    return {b for b in recovering if b in behind}


__all__ = ["ServiceView", "blocked", "brokers_out", "still_recovering", "taken_down"]
