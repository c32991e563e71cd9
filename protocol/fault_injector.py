"""The trio side of network faults: one :class:`FaultInjector` per node process applies its
:class:`~protocol.faults.FaultTable` where the process's traffic passes.

* The socket server (``server.network``) asks :meth:`FaultInjector.inbound` for every request frame it
  reads and :meth:`FaultInjector.outbound` for every response frame it is about to write; the peer is named
  by the request's ``client_id`` (:func:`protocol.faults.node_of_client_id`). A dropped request is never
  handled, a dropped response never written: the sender's request times out, the connection stays open.
* Client connections (``protocol.client.open_connection``) made by the process's tasks find the injector in
  the :data:`current_faults` context variable (set by the server's ``run``, inherited by every task it
  starts) and hold a new connection to a partitioned peer until it heals or the connect timeout fires.
* :meth:`FaultInjector.handle_net_faults` serves the NET_FAULTS admin API (describe / replace the table).
* Protocol-level fault rules (SPEC §16, :mod:`protocol.fault_rules`) live beside the network faults:
  :attr:`FaultInjector.rules` is the node's rule table, which the socket server asks about every request it
  is about to act on; :meth:`FaultInjector.handle_protocol_faults` serves PROTOCOL_FAULTS (describe, add,
  remove, clear), and :meth:`FaultInjector.rule_hit` journals a hit (``on_rule_hit``: the node's journal).

NET_FAULTS, PROTOCOL_FAULTS and DESCRIBE_REPLICA_STATE are exempt (:data:`EXEMPT_APIS`): a node can always
be healed and observed, as if they came over a management network the faults do not touch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import trio

from protocol.api_keys import ApiKeys
from protocol.common import wall_clock_ms
from protocol.errors import Errors, InvalidRequestError
from protocol.fault_messages import (
    LOSS_PPM_MAX,
    NetFaultsRequest,
    NetFaultsResponse,
    NetFaultsResponsePeer,
    NetFaultsRule,
    ProtocolFaultsRequest,
    ProtocolFaultsResponse,
)
from protocol.fault_rules import (
    ProtocolFaultTable,
    RequestFacts,
    RuleError,
    RuleHit,
    hit_to_wire,
)
from protocol.fault_rules import rule_from_wire as protocol_rule_from_wire
from protocol.fault_rules import rule_to_wire as protocol_rule_to_wire
from protocol.faults import (
    CONTROLLER,
    DELIVER,
    Decision,
    FaultError,
    FaultTable,
    LinkFault,
    node_of_client_id,
)
from protocol.schema import from_body, to_body

log = logging.getLogger(__name__)

EXEMPT_APIS: frozenset[int] = frozenset(
    {int(ApiKeys.NET_FAULTS), int(ApiKeys.PROTOCOL_FAULTS), int(ApiKeys.DESCRIBE_REPLICA_STATE)}
)
# How often a held connect looks at the table again (a heal lets it through within this time).
CONNECT_RECHECK_S = 0.05

Resolver = Callable[[str, int], str | None]
PeerLister = Callable[[], list[tuple[str, str, int]]]


def rule_to_wire(rule: LinkFault) -> NetFaultsRule:
    return NetFaultsRule(
        src=rule.src,
        dst=rule.dst,
        partitioned=rule.partitioned,
        delay_ms=rule.delay_ms,
        jitter_ms=rule.jitter_ms,
        loss_ppm=round(rule.loss_percent * LOSS_PPM_MAX / 100),
    )


def rule_from_wire(rule: NetFaultsRule) -> LinkFault:
    return LinkFault(
        src=rule.src,
        dst=rule.dst,
        partitioned=rule.partitioned,
        delay_ms=rule.delay_ms,
        jitter_ms=rule.jitter_ms,
        loss_percent=rule.loss_ppm * 100 / LOSS_PPM_MAX,
    )


def net_faults_set_body(rules: list[LinkFault], seed: int | None = None) -> dict[str, Any]:
    """The body of a NET_FAULTS ``set`` request that gives a node exactly ``rules``."""
    return to_body(NetFaultsRequest(operation="set", rules=[rule_to_wire(r) for r in rules], seed=seed))


def rules_from_body(body: dict[str, Any]) -> list[LinkFault]:
    """A NET_FAULTS describe response's rules as :class:`LinkFault` values."""
    resp = from_body(NetFaultsResponse, body)
    return [rule_from_wire(r) for r in resp.rules]


class FaultInjector:
    """One node's fault table, and the questions its connection layer asks it."""

    def __init__(
        self,
        node: str,
        *,
        resolve: Resolver | None = None,
        peers: PeerLister | None = None,
        seed: int | None = None,
        voters: frozenset[str] = frozenset(),
    ) -> None:
        self.node = node
        # The names of a controller quorum's voters: each is a node of its own, named by its id (see
        # node_of_client_id); a rule naming "controller" still applies to each of them (see _link).
        self.voters = voters
        self.table = FaultTable(node, seed=seed)
        self._resolve = resolve or (lambda host, port: None)
        self._peers = peers or list
        self.frames_dropped = 0
        self.frames_delayed = 0
        # Protocol-level fault rules (SPEC §16), and who journals their hits (the node's events journal).
        self.rules = ProtocolFaultTable(node)
        self.on_rule_hit: Callable[[dict[str, Any]], None] | None = None

    @property
    def active(self) -> bool:
        return not self.table.empty

    # ------------------------------------------------------------------------------- frame decisions

    def _count(self, decision: Decision) -> Decision:
        if decision.drop:
            self.frames_dropped += 1
        elif decision.delay_ms > 0:
            self.frames_delayed += 1
        return decision

    def inbound(self, client_id: str, api_key: int) -> Decision:
        """A request frame that arrived from the peer behind ``client_id``."""
        if self.table.empty or api_key in EXEMPT_APIS:
            return DELIVER
        return self._count(self.table.decide(*self._link(self.peer_of(client_id), self.node)))

    def outbound(self, client_id: str, api_key: int) -> Decision:
        """A response frame to be written to the peer behind ``client_id``."""
        if self.table.empty or api_key in EXEMPT_APIS:
            return DELIVER
        return self._count(self.table.decide(*self._link(self.node, self.peer_of(client_id))))

    def peer_of(self, client_id: str) -> str:
        """The node behind a request's ``client_id``, as this cluster names its nodes."""
        return node_of_client_id(client_id, voters_by_id=bool(self.voters))

    def _as_controller(self, name: str) -> str:
        return CONTROLLER if name in self.voters else name

    def _link(self, src: str, dst: str) -> tuple[str, str]:
        """The rule's names for the link ``src -> dst``: in a quorum a voter is named by its id, and a rule
        naming ``controller`` (every controller, as ``client`` is every client) applies to a voter that no
        rule of its own names."""
        if not self.voters or self.table.rule(src, dst) is not None:
            return src, dst
        alias = (self._as_controller(src), self._as_controller(dst))
        return alias if self.table.rule(*alias) is not None else (src, dst)

    async def wait_connectable(self, host: str, port: int) -> None:
        """Returns when a TCP connection to ``host:port`` would complete: at once unless the peer is a
        node partitioned from this one (either way); then when the partition heals (the caller's connect
        timeout bounds the wait, like SYN retransmissions that get no answer)."""
        if self.table.empty:
            return
        peer = self._resolve(host, port)
        if peer is None:
            return
        logged = False
        while not (
            self.table.can_connect(self.node, peer)
            and self.table.can_connect(self._as_controller(self.node), self._as_controller(peer))
        ):
            if not logged:
                log.info("%s: connect to %s (%s:%d) held: partitioned", self.node, peer, host, port)
                logged = True
            await trio.sleep(CONNECT_RECHECK_S)

    # ------------------------------------------------------------------------------- the admin API

    def handle_net_faults(self, body: dict[str, Any]) -> dict[str, Any]:
        """Serves NET_FAULTS: validates the body (INVALID_REQUEST naming the field), applies a ``set`` as
        a whole, and answers with the table now in force."""
        try:
            req = from_body(NetFaultsRequest, body)
            rules = self._validate(req)
        except InvalidRequestError as exc:
            return {"error_code": int(Errors.INVALID_REQUEST), "error_message": exc.message}
        if req.operation == "set":
            before = self.table.rules()
            self.table.set_rules(rules, seed=req.seed)
            if before != self.table.rules():
                now = "; ".join(f"{r.src} -> {r.dst}: {r.describe()}" for r in self.table.rules())
                log.warning("%s: network faults in force: %s", self.node, now or "none (healed)")
        return to_body(self.describe())

    def _validate(self, req: NetFaultsRequest) -> list[LinkFault]:
        out: list[LinkFault] = []
        seen: set[tuple[str, str]] = set()
        for i, wire in enumerate(req.rules):
            try:
                rule = rule_from_wire(wire)
            except FaultError as exc:
                raise InvalidRequestError(f"rules[{i}]: {exc}") from None
            if self.node not in rule.link:
                raise InvalidRequestError(
                    f"rules[{i}]: link {rule.src} -> {rule.dst} does not involve this node ({self.node})"
                )
            if rule.link in seen:
                raise InvalidRequestError(f"rules[{i}]: a second rule for link {rule.src} -> {rule.dst}")
            seen.add(rule.link)
            out.append(rule)
        return out

    # ------------------------------------------------------------------------------- protocol-level rules

    def rule_hit(self, hit: RuleHit, facts: RequestFacts) -> dict[str, Any]:
        """Records a hit (the table's hit log, the node's journal, the log) and returns the record."""
        record = hit.record(self.node, facts, wall_clock_ms())
        self.rules.log_hit(record)
        log.info("%s: fault rule %d fired (hit %d): %s", self.node, hit.rule.id, hit.hit, hit.rule.describe())
        if self.on_rule_hit is not None:
            try:
                self.on_rule_hit(record)
            except Exception:  # a journal that cannot be written never fails the request
                log.exception("%s: cannot journal a fault rule hit", self.node)
        return record

    def handle_protocol_faults(self, body: dict[str, Any]) -> dict[str, Any]:
        """Serves PROTOCOL_FAULTS: validates the body (INVALID_REQUEST naming the field and rule), applies
        the operation as a whole, and answers with the rules now in force and the hits recorded."""
        try:
            req = from_body(ProtocolFaultsRequest, body)
            if req.operation == "add":
                new = []
                for i, wire in enumerate(req.rules):
                    try:
                        new.append(protocol_rule_from_wire(wire))
                    except RuleError as exc:
                        raise InvalidRequestError(f"rules[{i}]: {exc}") from None
                try:
                    self.rules.add(new)
                except RuleError as exc:
                    raise InvalidRequestError(str(exc)) from None
                for rule in new:
                    log.warning("%s: fault rule %d in force: %s", self.node, rule.id, rule.describe())
            elif req.operation in ("remove", "clear"):
                gone = self.rules.remove(None if req.operation == "clear" else req.rule_ids)
                for rule in gone:
                    log.warning("%s: fault rule %d removed", self.node, rule.id)
        except InvalidRequestError as exc:
            return {"error_code": int(Errors.INVALID_REQUEST), "error_message": exc.message}
        return to_body(self.describe_rules())

    def describe_rules(self) -> ProtocolFaultsResponse:
        table = self.rules
        return ProtocolFaultsResponse(
            node=self.node,
            rules=[protocol_rule_to_wire(r, table.hits.get(r.id, 0)) for r in table.rules()],
            hits=[hit_to_wire(h) for h in table.hit_log],
        )

    def describe(self) -> NetFaultsResponse:
        return NetFaultsResponse(
            node=self.node,
            seed=self.table.seed,
            rules=[rule_to_wire(r) for r in self.table.rules()],
            peers=[NetFaultsResponsePeer(node=n, host=h, port=p) for n, h, p in self._peers()],
            frames_dropped=self.frames_dropped,
            frames_delayed=self.frames_delayed,
        )


current_faults: ContextVar[FaultInjector | None] = ContextVar("isrsim_current_faults", default=None)


__all__ = [
    "EXEMPT_APIS",
    "FaultInjector",
    "current_faults",
    "net_faults_set_body",
    "rule_from_wire",
    "rule_to_wire",
    "rules_from_body",
]
