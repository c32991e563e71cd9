"""Network faults on a running cluster (docs/faults.md), as a library: find the cluster's nodes, read
their rule tables, change them all or none.

A fault is applied by sending each node concerned its whole new rule table (NET_FAULTS, api key 1001): the
cluster-wide view is the union of what the nodes answer, the caller edits it (``protocol.faults.FaultSet``)
and every node whose share changed gets its new share. Everything is checked before anything is applied
(names, values, every node concerned up and answering); if one node then fails to take its rules, the
nodes already changed get their old tables back. Every change is appended to ``<root>/faults.jsonl``.
``isrsim net``, ``cluster status``, restarts and the chaos nemesis use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from kit.cluster_client import ClientError, parse_address
from kit.cluster_files import ClusterError, ClusterInfo
from kit.errors import KitError
from kit.node_query import NO_ANSWER
from kit.processes import process_state
from protocol import (
    CLIENT,
    CLIENTS,
    CONTROLLER,
    ApiKeys,
    FaultError,
    FaultSet,
    LinkFault,
    net_faults_set_body,
    open_connection,
    rules_from_body,
)

CLIENT_ID = "isrsim-net"


REQUEST_TIMEOUT_S = 3.0


class NetError(KitError):
    """A fault that cannot be applied or healed; the message says why (one line)."""


@dataclass
class Node:
    name: str
    host: str
    port: int
    state: str  # "running", "paused", "stopped" (from cluster.json's pid) or "unknown" (--bootstrap-server)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class NetCluster:
    """The nodes of a cluster, and the root whose faults.jsonl records changes (None: not recorded)."""

    nodes: dict[str, Node]
    root: Path | None = None
    names: list[str] = field(default_factory=list)
    # Other names a node answers to: a single controller (the only voter of its quorum) is the node
    # ``controller`` in every rule table, and its id names it too.
    aliases: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.names = sorted(self.nodes, key=node_sort_key)

    def node(self, name: str) -> Node:
        name = normalize_node(name)
        name = self.aliases.get(name, name)
        if name not in self.nodes:
            raise NetError(f"unknown node {name!r}: this cluster's nodes are {', '.join(self.names)}")
        return self.nodes[name]


def node_sort_key(name: str) -> tuple[int, int]:
    return (0, 0) if name == CONTROLLER else (1, int(name)) if name.isdigit() else (2, 0)


def normalize_node(name: str) -> str:
    name = name.strip().lower()
    if name in (CLIENTS, CLIENT):
        return CLIENTS
    return str(int(name)) if name.isdigit() else name


def endpoint(cluster: NetCluster, name: str) -> str:
    """The rules' name of a link end: a node of ``cluster``, or every client (:data:`CLIENTS`)."""
    name = normalize_node(name)
    return CLIENT if name == CLIENTS else cluster.node(name).name


def cluster_from_info(info: ClusterInfo) -> NetCluster:
    """The cluster's nodes: the brokers by id, a single controller as ``controller`` (its id is taken for
    it too), each voter of a controller quorum of several by its id (1000, 1001, ...)."""
    nodes: dict[str, Node] = {}
    aliases: dict[str, str] = {}
    for c in info.controllers:
        name = info.node_name(c)
        nodes[name] = Node(name, c.host, c.port, process_state(c.pid))
        if name != str(c.id):
            aliases[str(c.id)] = name
    for b in info.brokers:
        nodes[str(b.id)] = Node(str(b.id), b.host, b.port, process_state(b.pid))
    return NetCluster(nodes, Path(info.root), aliases=aliases)


def find_cluster(data_dir: Path | None, bootstrap_server: str | None) -> NetCluster:
    """The cluster named by ``--bootstrap-server`` (asks the first node that answers for its peers) or by
    ``--data-dir``'s cluster.json. With both, nodes come from the bootstrap and faults.jsonl goes to the
    data dir."""
    if not bootstrap_server:
        try:
            return cluster_from_info(ClusterInfo.load(data_dir or Path("isrsim-data")))
        except ClusterError as exc:
            raise NetError(str(exc)) from None
    try:
        addresses = [parse_address(s) for s in bootstrap_server.split(",") if s.strip()]
    except ClientError as exc:
        raise NetError(str(exc)) from None
    for host, port in addresses:
        body = trio.run(_ask, host, port, {"operation": "describe"})
        if body is None or body.get("error_code", 0) != 0:
            continue
        nodes = {body["node"]: Node(body["node"], host, port, "unknown")}
        for peer in body.get("peers", []):
            nodes.setdefault(peer["node"], Node(peer["node"], peer["host"], peer["port"], "unknown"))
        # A controller knows every registered broker (a broker only those in its metadata); a quorum's
        # voters are named by id (from 1000), and only the active one knows the brokers: ask each.
        controllers = [
            n
            for n in list(nodes.values())
            if n.name == CONTROLLER or (n.name.isdigit() and int(n.name) >= 1000)
        ]
        for controller in controllers:
            if controller.name == body["node"]:
                continue
            answer = trio.run(_ask, controller.host, controller.port, {"operation": "describe"})
            for peer in (answer or {}).get("peers", []):
                nodes.setdefault(peer["node"], Node(peer["node"], peer["host"], peer["port"], "unknown"))
        return NetCluster(nodes, data_dir)
    raise NetError(f"no node at {bootstrap_server} answers NET_FAULTS (is the cluster up?)")


async def _ask(host: str, port: int, body: dict[str, Any]) -> dict[str, Any] | None:
    try:
        with trio.fail_after(REQUEST_TIMEOUT_S):
            async with open_connection(
                host, port, client_id=CLIENT_ID, connect_timeout=REQUEST_TIMEOUT_S
            ) as c:
                return await c.request(ApiKeys.NET_FAULTS, body, timeout=REQUEST_TIMEOUT_S)
    except NO_ANSWER:
        return None


async def read_tables(cluster: NetCluster) -> dict[str, list[LinkFault] | None]:
    """Every node's rules (None for a node that is down or does not answer)."""
    out: dict[str, list[LinkFault] | None] = dict.fromkeys(cluster.names)

    async def one(node: Node) -> None:
        if node.state in ("stopped", "paused"):
            return
        body = await _ask(node.host, node.port, {"operation": "describe"})
        if body is not None and body.get("error_code", 0) == 0:
            out[node.name] = rules_from_body(body)

    async with trio.open_nursery() as nursery:
        for node in cluster.nodes.values():
            nursery.start_soon(one, node)
    return out


async def _set_table(node: Node, rules: list[LinkFault], seed: int | None) -> str | None:
    """None on success, else why not."""
    body = await _ask(node.host, node.port, net_faults_set_body(rules, seed))
    if body is None:
        return f"node {node.name} ({node.address}) did not answer"
    if body.get("error_code", 0) != 0:
        return f"node {node.name} refused the rules: {body.get('error_message')}"
    return None


def _down_reason(node: Node) -> str:
    if node.state == "stopped":
        return f"node {node.name} is down (stopped); start it first (faults need the node running)"
    if node.state == "paused":
        return f"node {node.name} is paused; `isrsim broker resume {node.name}` first"
    return f"node {node.name} ({node.address}) does not answer; is it up?"


@dataclass
class Change:
    before: FaultSet
    after: FaultSet
    changed: list[str]
    skipped: list[str]


async def change_faults(
    cluster: NetCluster,
    edit: Callable[[FaultSet], FaultSet],
    *,
    required: list[str],
    seed: int | None = None,
) -> Change:
    """Reads every node's table, applies ``edit`` to the cluster-wide set and gives each node its new share.

    ``required`` nodes must be up and answering (else :class:`NetError` and nothing is changed); other
    nodes that are down are skipped (a node starts healed). If a node refuses or does not answer while the
    change is applied, the nodes already changed are set back and :class:`NetError` is raised."""
    for name in required:
        node = cluster.node(name)
        if node.state in ("stopped", "paused"):
            raise NetError(_down_reason(node))
    tables = await read_tables(cluster)
    for name in required:
        if tables[cluster.node(name).name] is None:
            raise NetError(_down_reason(cluster.node(name)))
    before = FaultSet.merge(t for t in tables.values() if t is not None)
    try:
        after = edit(before)
    except FaultError as exc:
        raise NetError(str(exc)) from None
    plan: list[tuple[Node, list[LinkFault], list[LinkFault]]] = []
    skipped: list[str] = []
    for name in cluster.names:
        table = tables[name]
        share = after.for_node(name)
        if table is None:
            if cluster.nodes[name].state == "paused" and set(before.for_node(name)) != set(share):
                # A paused node keeps its rules and would wake up with them: change them all or none.
                raise NetError(_down_reason(cluster.nodes[name]))
            if share:
                skipped.append(name)
            continue
        if set(table) != set(share):
            plan.append((cluster.nodes[name], table, share))
    done: list[tuple[Node, list[LinkFault]]] = []
    for node, old, new in plan:
        error = await _set_table(node, new, seed)
        if error is not None:
            for applied, previous in reversed(done):
                await _set_table(applied, previous, None)
            raise NetError(f"{error}; nothing changed (the {len(done)} node(s) already set were restored)")
        done.append((node, old))
    return Change(before, after, [n.name for n, _, _ in plan], skipped)
