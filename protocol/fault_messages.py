"""NET_FAULTS (isrsim, api key 1001): describe or replace the network fault rules a node applies.

Request ``{operation: "describe" | "set", rules: [...], seed}``; ``set`` replaces the node's whole table with
``rules`` (an empty list heals the node). A rule is one directed link ``src -> dst`` with ``partitioned``,
``delay_ms``, ``jitter_ms`` and ``loss_ppm`` (loss in parts per million: 100 % is 1,000,000; integers keep
the wire free of floats). Node names: ``"controller"``, a broker id such as ``"2"``, or ``"client"``.

The response carries the node's name, its table, its seed, and the peers it knows (``node``, ``host``,
``port``: the controller and the brokers it has metadata for), so a client that knows one broker can find
every node. NET_FAULTS is served by every node (brokers and the controller) and is never itself subject to
the faults (see docs/faults.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int16, Int32, Int64

NET_FAULTS_OPERATIONS = ("describe", "set")
LOSS_PPM_MAX = 1_000_000


@dataclass(slots=True, kw_only=True)
class NetFaultsRule:
    src: str
    dst: str
    partitioned: bool = False
    delay_ms: Int32 = field(default=0, metadata={"min": 0})
    jitter_ms: Int32 = field(default=0, metadata={"min": 0})
    loss_ppm: Int32 = field(default=0, metadata={"min": 0, "max": LOSS_PPM_MAX})


@dataclass(slots=True, kw_only=True)
class NetFaultsRequest:
    operation: str = field(metadata={"choices": NET_FAULTS_OPERATIONS})
    rules: list[NetFaultsRule] = field(default_factory=list)
    seed: Int64 | None = None


@dataclass(slots=True, kw_only=True)
class NetFaultsResponsePeer:
    node: str
    host: str
    port: Int32


@dataclass(slots=True, kw_only=True)
class NetFaultsResponse:
    error_code: Int16 = 0
    error_message: str | None = None
    node: str = ""
    seed: Int64 = 0
    rules: list[NetFaultsRule] = field(default_factory=list)
    peers: list[NetFaultsResponsePeer] = field(default_factory=list)
    frames_dropped: Int64 = 0
    frames_delayed: Int64 = 0


# ------------------------------------------------------------------------------ PROTOCOL_FAULTS (1002)
# Describe, add or remove a node's protocol-level fault rules (SPEC §16, ``protocol.fault_rules``).
# ``add`` appends ``rules`` (all or none; their ids must be new on the node), ``remove`` drops ``rule_ids``,
# ``clear`` drops every rule. Every answer carries the node's rules with their hit counts and the last hit
# records (``hits``, oldest first), which the CLI merges into ``faults.jsonl``. Probability in parts per
# million, as NET_FAULTS' loss.

PROTOCOL_FAULTS_OPERATIONS = ("describe", "add", "remove", "clear")


@dataclass(slots=True, kw_only=True)
class ProtocolFaultsRule:
    id: Int32 = field(metadata={"min": 1})
    api: Int16
    topic: str | None = None
    partition: Int32 | None = None
    group: str | None = None
    transactional_id: str | None = None
    client_id: str | None = None
    node: str | None = None
    error_code: Int16 | None = None
    delay_ms: Int32 = field(default=0, metadata={"min": 0})
    drop_response: bool = False
    disconnect: bool = False
    observe: bool = False  # count and journal matches, never act (``isrsim fault observe``)
    when: str = field(default="before", metadata={"choices": ("before", "after")})
    count: Int32 | None = None
    probability_ppm: Int32 | None = None
    seed: Int64 | None = None
    hits: Int64 = 0  # in answers: how often it fired on this node


@dataclass(slots=True, kw_only=True)
class ProtocolFaultsHit:
    ts_ms: Int64
    node: str
    rule_id: Int32
    hit: Int64
    api: str
    topic: str | None = None
    partition: Int32 | None = None
    group: str | None = None
    transactional_id: str | None = None
    client_id: str = ""
    effect: str = ""  # what the rule did: error, delay, drop-response, disconnect
    when: str = ""


@dataclass(slots=True, kw_only=True)
class ProtocolFaultsRequest:
    operation: str = field(metadata={"choices": PROTOCOL_FAULTS_OPERATIONS})
    rules: list[ProtocolFaultsRule] = field(default_factory=list)
    rule_ids: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class ProtocolFaultsResponse:
    error_code: Int16 = 0
    error_message: str | None = None
    node: str = ""
    rules: list[ProtocolFaultsRule] = field(default_factory=list)
    hits: list[ProtocolFaultsHit] = field(default_factory=list)


__all__ = [
    "LOSS_PPM_MAX",
    "NET_FAULTS_OPERATIONS",
    "PROTOCOL_FAULTS_OPERATIONS",
    "NetFaultsRequest",
    "NetFaultsResponse",
    "NetFaultsResponsePeer",
    "NetFaultsRule",
    "ProtocolFaultsHit",
    "ProtocolFaultsRequest",
    "ProtocolFaultsResponse",
    "ProtocolFaultsRule",
]
