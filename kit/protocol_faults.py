"""Protocol-level fault rules on a running cluster (SPEC §16, docs/faults.md "Protocol-level faults"), as a
library: add rules to the nodes, list them with their hits, remove them, wait for hits, load a rules file.

A rule lives in the memory of each node it is given to (every node that answers, or only ``--node N``),
set through PROTOCOL_FAULTS (api key 1002); the CLI gives it one id for the whole cluster (one more than
any id the nodes or ``faults.jsonl`` know). ``count`` and ``probability`` act per node: a rule on every
node fires at most ``count`` times on each (``--node`` bounds it to one node); ``fault list`` sums the
nodes' hits. A node that restarts starts without rules, as it starts without network faults.

Journal (``<root>/faults.jsonl``, beside the network faults): ``rule_add`` and ``rule_remove`` are written
here when a rule is added or removed; a node records each hit (``rule_hit``) in its own journal
(``events.jsonl``) and keeps the last ones in memory, and every call of this module that reads the nodes
(list, wait, remove, the chaos run's end) appends the hits not yet in ``faults.jsonl`` there, each once
(by node, rule and hit number), with the node's time of the hit. A hit on a node that stopped before it
was read stays in that node's ``events.jsonl`` only.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import trio
import yaml

from kit.cluster_files import ClusterInfo
from kit.errors import KitError
from kit.fault_journal import RULE_ACTIONS, append_fault, read_faults
from kit.net_faults import NetCluster, NetError, Node, cluster_from_info
from kit.node_query import NO_ANSWER, QueryError, ask
from protocol import (
    ApiKeys,
    Errors,
    ProtocolFaultRule,
    ProtocolFaultsResponse,
    RuleError,
    answer_rules,
    protocol_faults_answer,
    protocol_faults_body,
    rule_from_json,
)

REQUEST_TIMEOUT_S = 3.0


class RuleInputError(KitError):
    """A rule that cannot be (an unknown API or error name, a bad value, a bad rules file): the command
    line says it in one line and exits 2, as for a bad option."""


@dataclass
class RuleStatus:
    """A rule as the nodes hold it: the nodes that have it and its hits on each."""

    rule: ProtocolFaultRule
    hits_by_node: dict[str, int] = field(default_factory=dict)

    @property
    def hits(self) -> int:
        return sum(self.hits_by_node.values())

    @property
    def nodes(self) -> list[str]:
        return sorted(self.hits_by_node)

    def as_json(self) -> dict[str, Any]:
        return {"rule": self.rule.to_json(), "hits": self.hits, "hits_by_node": self.hits_by_node}


# ---------------------------------------------------------------------------------------------- the wire


async def _ask(node: Node, body: dict[str, Any]) -> ProtocolFaultsResponse | None:
    """A node's PROTOCOL_FAULTS answer; None when it does not answer. A refusal raises NetError."""
    if node.state in ("stopped", "paused"):
        return None
    try:
        answer = await ask(node.host, node.port, ApiKeys.PROTOCOL_FAULTS, body, timeout=REQUEST_TIMEOUT_S)
    except QueryError as exc:
        raise NetError(str(exc)) from None
    except NO_ANSWER:
        return None
    if answer is None:
        return None
    resp = protocol_faults_answer(answer)
    if resp.error_code != 0:
        raise NetError(
            f"node {node.name} refused: {Errors(resp.error_code).name}: {resp.error_message or ''}".rstrip(
                ": "
            )
        )
    return resp


async def describe_nodes(cluster: NetCluster) -> dict[str, ProtocolFaultsResponse | None]:
    """Every node's rules and recent hits (None for a node that is down or does not answer)."""
    out: dict[str, ProtocolFaultsResponse | None] = dict.fromkeys(cluster.names)
    refusals: list[NetError] = []

    async def one(node: Node) -> None:
        try:
            out[node.name] = await _ask(node, protocol_faults_body("describe"))
        except NetError as exc:
            refusals.append(exc)

    async with trio.open_nursery() as nursery:
        for node in cluster.nodes.values():
            nursery.start_soon(one, node)
    if refusals:
        raise refusals[0]
    return out


def statuses(answers: dict[str, ProtocolFaultsResponse | None]) -> list[RuleStatus]:
    """The rules the nodes hold, by id, with each node's hits."""
    by_id: dict[int, RuleStatus] = {}
    for name, resp in answers.items():
        for rule, hits in answer_rules(resp) if resp is not None else ():
            status = by_id.setdefault(rule.id, RuleStatus(rule))
            status.hits_by_node[name] = hits
    return [by_id[i] for i in sorted(by_id)]


# ---------------------------------------------------------------------------------------------- journal


def sync_hits(cluster: NetCluster, answers: dict[str, ProtocolFaultsResponse | None]) -> int:
    """Appends the hits the nodes reported that ``faults.jsonl`` does not hold yet; returns how many."""
    if cluster.root is None:
        return 0
    seen = {
        (str((r.get("nodes") or [""])[0]), r.get("rule_id"), r.get("hit"))
        for r in read_faults(cluster.root)
        if r.get("action") == "rule_hit"
    }
    rules = {s.rule.id: s.rule.to_json() for s in statuses(answers)}
    new: list[dict[str, Any]] = []
    for name, resp in answers.items():
        for hit in resp.hits if resp is not None else ():
            if (name, hit.rule_id, hit.hit) not in seen:
                record = dataclasses.asdict(hit)
                if hit.rule_id in rules:
                    record["rule"] = rules[hit.rule_id]
                new.append(record)
    new.sort(key=lambda h: (h["ts_ms"], h["node"], h["rule_id"], h["hit"]))
    for record in new:
        ts_ms = record.pop("ts_ms")
        node = record.pop("node")
        append_fault(cluster.root, "rule_hit", [node], {}, ts_ms=ts_ms, extra=record)
    return len(new)


def _journal_rules(
    cluster: NetCluster, action: str, rules: list[ProtocolFaultRule], nodes: list[str]
) -> None:
    if cluster.root is None:
        return
    for rule in rules:
        append_fault(cluster.root, action, nodes, {}, extra={"rule_id": rule.id, "rule": rule.to_json()})


def _used_ids(cluster: NetCluster, answers: dict[str, ProtocolFaultsResponse | None]) -> set[int]:
    ids = {s.rule.id for s in statuses(answers)}
    if cluster.root is not None:
        ids |= {int(r["rule_id"]) for r in read_faults(cluster.root) if isinstance(r.get("rule_id"), int)}
    return ids


# ---------------------------------------------------------------------------------------------- operations


def _targets(cluster: NetCluster, rule: ProtocolFaultRule, answers: dict[str, Any]) -> list[str]:
    if rule.node is not None:
        node = cluster.node(rule.node)
        if answers.get(node.name) is None:
            raise NetError(f"node {node.name} ({node.address}) does not answer; is it up?")
        return [node.name]
    up = [n for n in cluster.names if answers.get(n) is not None]
    if not up:
        raise NetError("no node of the cluster answers PROTOCOL_FAULTS (is the cluster up?)")
    return up


async def add_rules(
    cluster: NetCluster, rules: list[ProtocolFaultRule]
) -> list[tuple[ProtocolFaultRule, list[str]]]:
    """Gives each rule a new id and adds it to its nodes (``rule.node``, else every node that answers), all
    or none: if a node refuses, the rules already added are removed again. Journals ``rule_add``."""
    answers = await describe_nodes(cluster)
    sync_hits(cluster, answers)
    next_id = max(_used_ids(cluster, answers), default=0) + 1
    plan: list[tuple[ProtocolFaultRule, list[str]]] = []
    for offset, rule in enumerate(rules):
        if rule.node is not None:
            rule = replace(rule, node=cluster.node(rule.node).name)
        rule = replace(rule, id=next_id + offset)
        plan.append((rule, _targets(cluster, rule, answers)))
    done: list[tuple[str, int]] = []
    try:
        for rule, nodes in plan:
            body = protocol_faults_body("add", [rule])
            for name in nodes:
                if await _ask(cluster.nodes[name], body) is None:
                    raise NetError(f"node {name} did not answer")
                done.append((name, rule.id))
    except NetError as exc:
        for name, rule_id in reversed(done):
            await _ask(cluster.nodes[name], protocol_faults_body("remove", rule_ids=[rule_id]))
        raise NetError(f"{exc}; nothing changed") from None
    for rule, nodes in plan:
        _journal_rules(cluster, "rule_add", [rule], nodes)
    return plan


async def list_rules(
    cluster: NetCluster,
) -> tuple[list[RuleStatus], dict[str, ProtocolFaultsResponse | None]]:
    """The rules in force with their hits (and each node's answer); new hits go to ``faults.jsonl``."""
    answers = await describe_nodes(cluster)
    sync_hits(cluster, answers)
    return statuses(answers), answers


async def remove_rules(
    cluster: NetCluster, ids: list[int] | None, *, missing_ok: bool = False
) -> list[RuleStatus]:
    """Removes the rules ``ids`` (None: every rule) from every node holding them; returns them with their
    final hits. Unknown ids raise :class:`RuleInputError` unless ``missing_ok``. Journals the hits, then
    ``rule_remove``."""
    answers = await describe_nodes(cluster)
    sync_hits(cluster, answers)
    held = statuses(answers)
    if ids is not None and not missing_ok:
        unknown = sorted(set(ids) - {s.rule.id for s in held})
        if unknown:
            known = ", ".join(str(s.rule.id) for s in held) or "none"
            raise RuleInputError(f"no rule {', '.join(map(str, unknown))} in force (rules in force: {known})")
    gone = [s for s in held if ids is None or s.rule.id in ids]
    body = (
        protocol_faults_body("clear")
        if ids is None
        else protocol_faults_body("remove", rule_ids=[s.rule.id for s in gone])
    )
    after: dict[str, ProtocolFaultsResponse | None] = {}
    for status in gone:
        for name in status.nodes:
            after.setdefault(name, None)
    for name in after:
        after[name] = await _ask(cluster.nodes[name], body)
    sync_hits(cluster, after)
    for status in gone:
        _journal_rules(cluster, "rule_remove", [status.rule], status.nodes)
    return gone


async def wait_for_hits(cluster: NetCluster, rule_id: int, hits: int, timeout_s: float) -> int:
    """Polls the nodes until rule ``rule_id`` fired ``hits`` times in all; returns the hits seen. Raises
    :class:`NetError` when the time is up (the message says how many it saw), :class:`RuleInputError`
    when no node holds the rule."""
    seen = 0
    with trio.move_on_after(timeout_s):
        while True:
            rules, _ = await list_rules(cluster)
            match = [s for s in rules if s.rule.id == rule_id]
            if not match:
                raise RuleInputError(f"no rule {rule_id} in force (see `isrsim fault list`)")
            seen = match[0].hits
            if seen >= hits:
                return seen
            await trio.sleep(0.1)
    raise NetError(f"rule {rule_id} fired {seen} time(s), not {hits}, within {timeout_s:g} s")


# ---------------------------------------------------------------------------------------------- rules files


def load_rules_file(path: Path) -> list[ProtocolFaultRule]:
    """A rules file (``isrsim run|chaos --rules FILE``): a YAML or JSON list of rules, each a mapping of
    ``fault add``'s options (``api``, ``topic``, ``error``, ``delay-ms``, ``drop-response``, ``when``,
    ``count`` ...). The ids are given when the rules are added. Raises :class:`RuleInputError` naming the
    file, the entry and the problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleInputError(f"cannot read the rules file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise RuleInputError(f"{path}: not valid YAML or JSON: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict) and "rules" in data:
        data = data["rules"]
    if not isinstance(data, list):
        raise RuleInputError(f"{path}: a rules file is a list of rules (or a mapping with `rules:`)")
    rules: list[ProtocolFaultRule] = []
    for i, entry in enumerate(data):
        try:
            rules.append(rule_from_json(entry, rule_id=1))
        except RuleError as exc:
            raise RuleInputError(f"{path}: rule {i + 1}: {exc}") from None
    return rules


@dataclass
class AppliedRules:
    """Rules a run added (``isrsim chaos|run --rules FILE``): kept in force on nodes that restart (a node
    starts without rules; the run gives them back, and their counts start again there), removed at the end."""

    root: Path
    plan: list[tuple[ProtocolFaultRule, list[str]]] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return [rule.id for rule, _ in self.plan]


def _cluster_of(root: Path) -> NetCluster:
    """The cluster at ``root`` as its cluster.json says now (a restarted node has a new pid)."""
    return cluster_from_info(ClusterInfo.load(root))


async def apply_rules(root: Path, rules: list[ProtocolFaultRule]) -> AppliedRules:
    """Adds ``rules`` to the cluster at ``root``; see :class:`AppliedRules`."""
    return AppliedRules(root, await add_rules(_cluster_of(root), rules) if rules else [])


async def keep_rules(applied: AppliedRules) -> list[str]:
    """Gives the rules back to the nodes of their plan that answer without them; returns those nodes."""
    if not applied.plan:
        return []
    cluster = _cluster_of(applied.root)
    answers = await describe_nodes(cluster)
    restored: list[str] = []
    for rule, nodes in applied.plan:
        for name in nodes:
            resp = answers.get(name)
            if resp is None or any(w.id == rule.id for w in resp.rules):
                continue
            try:
                if await _ask(cluster.nodes[name], protocol_faults_body("add", [rule])) is not None:
                    _journal_rules(cluster, "rule_add", [rule], [name])
                    restored.append(name)
            except NetError:
                continue  # added meanwhile, or the node went away again: the next look sees
    return sorted(set(restored))


async def remove_applied(applied: AppliedRules) -> list[RuleStatus]:
    """Removes a run's rules (those still in force) and journals their last hits."""
    if not applied.plan:
        return []
    gone = await remove_rules(_cluster_of(applied.root), applied.ids, missing_ok=True)
    applied.plan = []
    return gone


def topic_exists(cluster: NetCluster, topic: str) -> bool | None:
    """Whether a broker knows ``topic`` (None: no broker answered)."""

    async def go() -> bool | None:
        for node in cluster.nodes.values():
            if not node.name.isdigit() or int(node.name) >= 1000 or node.state in ("stopped", "paused"):
                continue
            body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
            try:
                answer = await ask(node.host, node.port, ApiKeys.METADATA, body, timeout=REQUEST_TIMEOUT_S)
            except QueryError:
                return None
            if answer is None:
                continue
            topics = answer.get("topics") or []
            return bool(topics) and topics[0].get("error_code", 0) != Errors.UNKNOWN_TOPIC_OR_PARTITION
        return None

    return trio.run(go)


__all__ = [
    "RULE_ACTIONS",
    "AppliedRules",
    "RuleInputError",
    "RuleStatus",
    "add_rules",
    "apply_rules",
    "describe_nodes",
    "keep_rules",
    "list_rules",
    "load_rules_file",
    "remove_applied",
    "remove_rules",
    "statuses",
    "sync_hits",
    "topic_exists",
    "wait_for_hits",
]
