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


__all__ = [
    "LOSS_PPM_MAX",
    "NET_FAULTS_OPERATIONS",
    "NetFaultsRequest",
    "NetFaultsResponse",
    "NetFaultsResponsePeer",
    "NetFaultsRule",
]
