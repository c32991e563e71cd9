"""Network fault rules as data (sans-I/O): which frames between two nodes are delivered, dropped or delayed.

Nodes are named ``"controller"`` (a single controller), ``"1"``, ``"2"`` ... (broker ids), ``"1000"``,
``"1001"`` ... (each voter of a controller quorum, by its id) and ``"client"`` (anything that is not a node:
producers, consumers, the CLI). A :class:`LinkFault` is the rule for one *directed* link
``src -> dst``: partitioned (every frame dropped), a delay with jitter, a loss rate per frame. Rules may be
combined on one link (a delayed link can also lose frames).

* :class:`FaultTable` is what one node process holds: :meth:`FaultTable.decide` answers "deliver, drop or
  delay this frame from ``src`` to ``dst`` now?" with a seeded generator, so the same seed and the same
  sequence of questions give the same answers. :meth:`FaultTable.can_connect` answers whether a new TCP
  connection between two nodes completes (it needs both directions, as TCP's handshake does).
* :class:`DelayLine` turns per-frame delays into release times that keep a connection's frames in order
  (a TCP stream is FIFO: a frame never overtakes the one sent before it).
* :class:`FaultSet` is the cluster-wide view the CLI edits: partition, isolate, delay, loss, heal, and
  :meth:`FaultSet.for_node` (the rules one node must hold: those it is an endpoint of).

How a node learns who is at the other end of a connection: :func:`node_of_client_id` (see docs/faults.md).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

CONTROLLER = "controller"
CLIENT = "client"
# What the command line and faults.jsonl call CLIENT: every client of a node (``net loss 1 clients``).
CLIENTS = "clients"

_BROKER_CLIENT_ID = re.compile(r"^(?:broker|replica-fetcher)-(\d+)(?:[-/].*)?$")
_CONTROLLER_CLIENT_ID = re.compile(r"^controller(?:[-/].*)?$")
_VOTER_CLIENT_ID = re.compile(r"^controller-(\d+)(?:[-/].*)?$")
_NODE_NAME = re.compile(r"^(?:controller|client|\d{1,10})$")


def node_of_client_id(client_id: str, *, voters_by_id: bool = False) -> str:
    """The node behind a request's ``client_id``: ``broker-<id>...`` and ``replica-fetcher-<id>-<n>`` are
    broker ``<id>``, ``controller...`` is the controller, anything else is ``"client"``. ``voters_by_id``
    (the controllers are the voters of a quorum, each a node of its own): ``controller-<id>...`` is
    ``<id>``."""
    m = _BROKER_CLIENT_ID.match(client_id)
    if m is not None:
        return str(int(m.group(1)))
    if voters_by_id:
        m = _VOTER_CLIENT_ID.match(client_id)
        if m is not None:
            return str(int(m.group(1)))
    if _CONTROLLER_CLIENT_ID.match(client_id):
        return CONTROLLER
    return CLIENT


def valid_node_name(name: str) -> bool:
    return _NODE_NAME.match(name) is not None


class FaultError(ValueError):
    """A rule that cannot be: unknown node name, negative delay, loss outside 0..100, a link to itself."""


@dataclass(frozen=True, slots=True)
class LinkFault:
    """The faults on the directed link ``src -> dst``."""

    src: str
    dst: str
    partitioned: bool = False
    delay_ms: int = 0
    jitter_ms: int = 0
    loss_percent: float = 0.0

    def __post_init__(self) -> None:
        for name in (self.src, self.dst):
            if not valid_node_name(name):
                raise FaultError(
                    f"unknown node name {name!r} (a broker or controller id, 'controller' or 'client')"
                )
        if self.src == self.dst:
            raise FaultError(f"a link from {self.src} to itself")
        if self.delay_ms < 0 or self.jitter_ms < 0:
            raise FaultError(f"delay and jitter must be >= 0 ms (got {self.delay_ms}, {self.jitter_ms})")
        if not 0.0 <= self.loss_percent <= 100.0:
            raise FaultError(f"loss must be within 0..100 % (got {self.loss_percent})")

    @property
    def link(self) -> tuple[str, str]:
        return (self.src, self.dst)

    @property
    def is_noop(self) -> bool:
        return not self.partitioned and self.delay_ms == 0 and self.jitter_ms == 0 and self.loss_percent == 0

    def describe(self) -> str:
        """``partitioned``, ``delay 200±50 ms``, ``loss 10%`` joined by ``, ``."""
        parts: list[str] = []
        if self.partitioned:
            parts.append("partitioned")
        if self.delay_ms or self.jitter_ms:
            parts.append(
                f"delay {self.delay_ms}±{self.jitter_ms} ms"
                if self.jitter_ms
                else f"delay {self.delay_ms} ms"
            )
        if self.loss_percent:
            parts.append(f"loss {self.loss_percent:g}%")
        return ", ".join(parts) or "none"


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one frame: drop it, or deliver it after ``delay_ms`` (0: now)."""

    drop: bool = False
    delay_ms: float = 0.0
    reason: str = ""


DELIVER = Decision()


class FaultTable:
    """The rules one node process applies, and the seeded generator behind loss and jitter."""

    def __init__(self, node: str, *, seed: int | None = None) -> None:
        self.node = node
        self.seed = seed if seed is not None else random.randrange(2**31)
        self._rng = random.Random(f"{self.seed}:{node}")
        self._rules: dict[tuple[str, str], LinkFault] = {}
        self.version = 0

    @property
    def empty(self) -> bool:
        return not self._rules

    def rules(self) -> list[LinkFault]:
        return sorted(self._rules.values(), key=lambda r: r.link)

    def set_rules(self, rules: Iterable[LinkFault], *, seed: int | None = None) -> None:
        """Replaces the whole table (a node's rules are always set as a whole: nothing half-applied)."""
        table = {r.link: r for r in rules if not r.is_noop}
        self._rules = table
        if seed is not None and seed != self.seed:
            self.seed = seed
            self._rng = random.Random(f"{seed}:{self.node}")
        self.version += 1

    def rule(self, src: str, dst: str) -> LinkFault | None:
        return self._rules.get((src, dst))

    def decide(self, src: str, dst: str) -> Decision:
        """Deliver, drop or delay one frame sent from ``src`` to ``dst``."""
        if not self._rules:
            return DELIVER
        rule = self._rules.get((src, dst))
        if rule is None:
            return DELIVER
        if rule.partitioned:
            return Decision(drop=True, reason="partitioned")
        if rule.loss_percent > 0 and self._rng.random() * 100.0 < rule.loss_percent:
            return Decision(drop=True, reason="lost")
        delay = float(rule.delay_ms)
        if rule.jitter_ms:
            delay = max(0.0, delay + self._rng.uniform(-rule.jitter_ms, rule.jitter_ms))
        return Decision(delay_ms=delay) if delay > 0 else DELIVER

    def can_connect(self, a: str, b: str) -> bool:
        """Whether a new TCP connection between ``a`` and ``b`` completes: the SYN goes one way and the
        SYN-ACK the other, so a partition in either direction leaves the connect hanging."""
        if not self._rules:
            return True
        for link in ((a, b), (b, a)):
            rule = self._rules.get(link)
            if rule is not None and rule.partitioned:
                return False
        return True


class DelayLine:
    """Release times for one connection's frames that never reorder them: a frame is released at its own
    time (arrival + delay) or right after the frame before it, whichever is later."""

    def __init__(self) -> None:
        self._last = float("-inf")

    def release_at(self, now: float, delay: float) -> float:
        at = max(now + delay, self._last)
        self._last = at
        return at


# ---------------------------------------------------------------------------------------------- cluster view


def _pairs(a: str, b: str, one_way: bool) -> list[tuple[str, str]]:
    return [(a, b)] if one_way else [(a, b), (b, a)]


class FaultSet:
    """The faults in force across a cluster (the union of its nodes' tables), edited by the CLI.

    Every method returns a new set; :meth:`for_node` gives what one node's table must hold."""

    def __init__(self, rules: Iterable[LinkFault] = ()) -> None:
        self._rules: dict[tuple[str, str], LinkFault] = {}
        for r in rules:
            if not r.is_noop:
                self._rules[r.link] = r

    def __iter__(self) -> Iterator[LinkFault]:
        return iter(sorted(self._rules.values(), key=lambda r: r.link))

    def __len__(self) -> int:
        return len(self._rules)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FaultSet) and self._rules == other._rules

    def __hash__(self) -> int:  # pragma: no cover - sets are not hashed, but keep eq/hash consistent
        return hash(frozenset(self._rules.items()))

    @classmethod
    def merge(cls, tables: Iterable[Iterable[LinkFault]]) -> FaultSet:
        """The union of several nodes' tables (both ends of a link hold the same rule)."""
        rules: dict[tuple[str, str], LinkFault] = {}
        for table in tables:
            for r in table:
                rules[r.link] = r
        return cls(rules.values())

    def get(self, src: str, dst: str) -> LinkFault | None:
        return self._rules.get((src, dst))

    def _edit(self, links: Iterable[tuple[str, str]], **changes: object) -> FaultSet:
        rules = dict(self._rules)
        for src, dst in links:
            current = rules.get((src, dst)) or LinkFault(src, dst)
            rules[(src, dst)] = replace(current, **changes)  # type: ignore[arg-type]
        return FaultSet(rules.values())

    def partition(self, a: str, b: str, *, one_way: bool = False) -> FaultSet:
        return self._edit(_pairs(a, b, one_way), partitioned=True)

    def isolate(self, a: str, others: Iterable[str]) -> FaultSet:
        """``a`` from every node in ``others`` and from every client, both ways."""
        links: list[tuple[str, str]] = []
        for other in [*others, CLIENT]:
            if other != a:
                links += _pairs(a, other, False)
        return self._edit(links, partitioned=True)

    def delay(self, a: str, b: str, ms: int, jitter_ms: int = 0, *, one_way: bool = False) -> FaultSet:
        return self._edit(_pairs(a, b, one_way), delay_ms=ms, jitter_ms=jitter_ms)

    def loss(self, a: str, b: str, percent: float, *, one_way: bool = False) -> FaultSet:
        return self._edit(_pairs(a, b, one_way), loss_percent=percent)

    def heal(self, a: str | None = None, b: str | None = None) -> FaultSet:
        """Everything (no arguments), every link touching ``a``, or the links between ``a`` and ``b``."""
        if a is None:
            return FaultSet()
        if b is None:
            return FaultSet(r for r in self._rules.values() if a not in r.link)
        return FaultSet(r for r in self._rules.values() if set(r.link) != {a, b})

    def for_node(self, node: str) -> list[LinkFault]:
        """The rules ``node`` applies: those of the links it is an end of."""
        return [r for r in self if node in r.link]

    def nodes(self) -> set[str]:
        return {n for r in self._rules.values() for n in r.link}


__all__ = [
    "CLIENT",
    "CLIENTS",
    "CONTROLLER",
    "DELIVER",
    "Decision",
    "DelayLine",
    "FaultError",
    "FaultSet",
    "FaultTable",
    "LinkFault",
    "node_of_client_id",
    "valid_node_name",
]
