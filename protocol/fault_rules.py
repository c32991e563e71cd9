"""Protocol-level fault rules as data (sans-I/O): which requests a node answers with a chosen error, a delay,
no answer, or a closed connection (SPEC §16, docs/faults.md "Protocol-level faults").

* :class:`ProtocolFaultRule`: one rule: what it matches (an API by Kafka's name, and optionally a topic, a
  partition, a group, a transactional id, a client id, a node) and what it does (``error``, ``delay``,
  ``drop-response`` or ``disconnect``, or ``observe``: only count and journal the matches), ``before``
  the request is acted on or ``after``, at most ``count`` times or with a ``probability`` drawn from a
  seeded generator.
* :func:`request_facts`: what a request touches (topic-partitions, groups, transactional id), read from its
  body, the same dict in both encodings.
* :class:`ProtocolFaultTable`: one node's rules in the order they were added; :meth:`~.match`
  answers "does a rule fire on this request?". The first rule (in the order added) that matches the request
  and fires wins; an exhausted rule (``count`` hits) or one whose draw failed lets the next rule have its
  turn. An ``observe`` rule never acts and never stands in another's way: every observe rule that matches
counts the request (:meth:`~.ProtocolFaultTable.observe`). The table keeps each rule's hits and the last
:data:`HIT_LOG_SIZE` hit records.

A rule with a topic (and partition) matches a request that touches it: a PRODUCE or FETCH for several
partitions is acted on as a whole when any of them matches (Kafka answers a request, not a partition). A
METADATA request for every topic touches every topic.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.fault_messages import (
    ProtocolFaultsHit,
    ProtocolFaultsRequest,
    ProtocolFaultsResponse,
    ProtocolFaultsRule,
)
from protocol.schema import from_body, to_body

WHEN = ("before", "after")
ACTIONS = ("error", "delay", "drop-response", "disconnect", "observe")
HIT_LOG_SIZE = 2000
PROBABILITY_PPM_MAX = 1_000_000

# Answered by the connection layer itself, never by a rule: a node can always be observed and healed, and
# SASL is answered before a request is acted on (docs/faults.md).
UNRULED_APIS: frozenset[int] = frozenset(
    {
        int(ApiKeys.SASL_HANDSHAKE),
        int(ApiKeys.SASL_AUTHENTICATE),
        int(ApiKeys.DESCRIBE_REPLICA_STATE),
        int(ApiKeys.NET_FAULTS),
        int(ApiKeys.PROTOCOL_FAULTS),
    }
)


class RuleError(ValueError):
    """A rule that cannot be: the message names the field and the problem (one line)."""


# ------------------------------------------------------------------------------------------ names


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``Produce``, ``JoinGroup``, ``OffsetForLeaderEpoch``), from ``ApiKeys``."""
    try:
        enum_name = ApiKeys(api_key).name
    except ValueError:
        return f"api_key {api_key}"
    return "".join(word.capitalize() for word in enum_name.split("_"))


def _squash(text: str) -> str:
    return text.replace("_", "").replace("-", "").lower()


_API_BY_NAME: dict[str, int] = {_squash(k.name): int(k) for k in ApiKeys}


def parse_api(text: str | int) -> int:
    """An API by Kafka's name (``Produce``, ``JoinGroup``; case and underscores do not matter: ``JOIN_GROUP``
    too) or by its key. Raises :class:`RuleError` for an API this cluster does not serve."""
    if isinstance(text, int) or str(text).strip().isdigit():
        key = int(text)
        if key not in {int(k) for k in ApiKeys}:
            raise RuleError(f"unknown API key {key}")
    else:
        found = _API_BY_NAME.get(_squash(str(text).strip()))
        if found is None:
            raise RuleError(f"unknown API {text!r}: Kafka's names, e.g. Produce, Fetch, Metadata, JoinGroup")
        key = found
    if key in UNRULED_APIS:
        raise RuleError(
            f"{api_name(key)} is answered by the connection layer and cannot be the target of a rule"
        )
    return key


def parse_error(text: str | int) -> int:
    """An error by Kafka's name (``NOT_LEADER_OR_FOLLOWER``, case-insensitive) or code (``6``)."""
    raw = str(text).strip()
    try:
        code = int(raw)
    except ValueError:
        try:
            code = int(Errors[raw.upper().replace("-", "_")])
        except KeyError:
            raise RuleError(
                f"unknown error {raw!r}: Kafka's names or codes, e.g. NOT_LEADER_OR_FOLLOWER, 6"
            ) from None
    try:
        error = Errors(code)
    except ValueError:
        raise RuleError(f"unknown error code {code}") from None
    if error is Errors.NONE:
        raise RuleError("error NONE (0) is no error: choose an error to answer with")
    return int(error)


# ------------------------------------------------------------------------------------------ rules


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolFaultRule:
    """One rule. ``id`` is given by whoever adds it (the CLI: one id for the rule on every node)."""

    id: int
    api: int
    topic: str | None = None
    partition: int | None = None
    group: str | None = None
    transactional_id: str | None = None
    client_id: str | None = None
    node: str | None = None
    error: int | None = None  # a Kafka error code
    delay_ms: int = 0
    drop_response: bool = False
    disconnect: bool = False
    observe: bool = False
    when: str = "before"
    count: int | None = None
    probability: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        actions = [
            self.error is not None,
            self.delay_ms > 0,
            self.drop_response,
            self.disconnect,
            self.observe,
        ]
        if sum(actions) != 1:
            raise RuleError(
                "a rule does exactly one of: --error, --delay-ms N (> 0), --drop-response, --disconnect "
                "(or observes: `fault observe`)"
            )
        if self.delay_ms < 0:
            raise RuleError(f"delay_ms must be >= 0 (got {self.delay_ms})")
        if self.when not in WHEN:
            raise RuleError(f"when must be before or after (got {self.when!r})")
        if self.count is not None and self.probability is not None:
            raise RuleError("give --count or --probability, not both")
        if self.count is not None and self.count < 1:
            raise RuleError(f"count must be >= 1 (got {self.count})")
        if self.probability is not None and not 0 < self.probability <= 1:
            raise RuleError(f"probability must be within (0, 1] (got {self.probability})")
        if self.partition is not None and self.partition < 0:
            raise RuleError(f"partition must be >= 0 (got {self.partition})")
        if self.id < 1:
            raise RuleError(f"rule id must be >= 1 (got {self.id})")
        if self.error is not None:
            parse_error(self.error)
        if self.api in UNRULED_APIS:
            raise RuleError(f"{api_name(self.api)} cannot be the target of a rule")

    @property
    def action(self) -> str:
        if self.error is not None:
            return "error"
        if self.delay_ms > 0:
            return "delay"
        if self.observe:
            return "observe"
        return "drop-response" if self.drop_response else "disconnect"

    def describe(self) -> str:
        """One line: ``Produce topic=t partition=0 -> error NOT_LEADER_OR_FOLLOWER (before, count 3)``."""
        where = [
            f"{k}={v}"
            for k, v in (
                ("topic", self.topic),
                ("partition", self.partition),
                ("group", self.group),
                ("transactional-id", self.transactional_id),
                ("client-id", self.client_id),
                ("node", self.node),
            )
            if v is not None
        ]
        if self.error is not None:
            what = f"error {Errors(self.error).name}"
        elif self.delay_ms > 0:
            what = f"delay {self.delay_ms} ms"
        else:
            what = self.action
        limit = (
            f", count {self.count}"
            if self.count is not None
            else f", probability {self.probability:g}"
            if self.probability is not None
            else ""
        )
        return f"{' '.join([api_name(self.api), *where])} -> {what} ({self.when}{limit})"

    def to_json(self) -> dict[str, Any]:
        """The rule as journaled (``faults.jsonl``) and read back from a rules file: Kafka's names."""
        out: dict[str, Any] = {"id": self.id, "api": api_name(self.api)}
        for key, value in asdict(self).items():
            if key in ("id", "api") or value is None or value is False or (key == "delay_ms" and value == 0):
                continue
            out[key] = Errors(value).name if key == "error" else value
        out["when"] = self.when
        return out


def rule_from_json(obj: Mapping[str, Any], *, rule_id: int | None = None) -> ProtocolFaultRule:
    """A rule from a plain mapping: a rules file's entry (the CLI's option names, dashes or underscores:
    ``api``, ``topic``, ``error``, ``delay-ms``, ``drop-response``, ``when``, ``count`` ...) or
    :meth:`ProtocolFaultRule.to_json`. Raises :class:`RuleError` naming the field."""
    if not isinstance(obj, Mapping):
        raise RuleError(f"a rule is a mapping of options (got {type(obj).__name__})")
    norm = {str(k).replace("-", "_"): v for k, v in obj.items()}
    known = {f for f in ProtocolFaultRule.__dataclass_fields__} | {"hits"}
    unknown = sorted(set(norm) - known)
    if unknown:
        raise RuleError(f"unknown rule field(s): {', '.join(unknown)}")
    if "api" not in norm:
        raise RuleError("a rule needs api (Kafka's name, e.g. Produce)")

    def opt_int(name: str) -> int | None:
        value = norm.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise RuleError(f"{name} must be an integer (got {value!r})")
        try:
            return int(value)
        except ValueError:
            raise RuleError(f"{name} must be an integer (got {value!r})") from None

    def opt_str(name: str) -> str | None:
        value = norm.get(name)
        return None if value is None else str(value)

    probability = norm.get("probability")
    if probability is not None:
        try:
            probability = float(probability)
        except (TypeError, ValueError):
            raise RuleError(f"probability must be a number (got {probability!r})") from None
    error = norm.get("error")
    the_id = rule_id if rule_id is not None else opt_int("id")
    return ProtocolFaultRule(
        id=the_id if the_id is not None else 1,
        api=parse_api(norm["api"]),
        topic=opt_str("topic"),
        partition=opt_int("partition"),
        group=opt_str("group"),
        transactional_id=opt_str("transactional_id"),
        client_id=opt_str("client_id"),
        node=None if norm.get("node") is None else str(norm["node"]),
        error=None if error is None else parse_error(error),
        delay_ms=opt_int("delay_ms") or 0,
        drop_response=bool(norm.get("drop_response", False)),
        disconnect=bool(norm.get("disconnect", False)),
        observe=bool(norm.get("observe", False)),
        when=str(norm.get("when", "before")),
        count=opt_int("count"),
        probability=probability,
        seed=opt_int("seed"),
    )


# ------------------------------------------------------------------------------------------ requests


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What a request touches. ``partitions`` holds (topic, partition), partition None for a request that
    names a topic and no partition (METADATA, CREATE_TOPICS); ``all_topics``: METADATA for every topic."""

    api: int
    client_id: str
    partitions: tuple[tuple[str, int | None], ...] = ()
    groups: tuple[str, ...] = ()
    transactional_id: str | None = None
    all_topics: bool = False


# (list field, topic name field, partitions field, partition index field) per request shape, first found.
_TOPIC_SHAPES: tuple[tuple[str, str, str, str], ...] = (
    ("topic_data", "name", "partition_data", "index"),  # Produce
    ("topics", "topic", "partitions", "partition"),  # Fetch, OffsetForLeaderEpoch
    ("topics", "name", "partitions", "partition_index"),  # ListOffsets, OffsetCommit, TxnOffsetCommit
    ("topics", "name", "partition_indexes", ""),  # OffsetFetch v1-7
    ("topics", "name", "partitions", ""),  # AddPartitionsToTxn (a list of ints)
)


def _topic_partitions(
    entries: Any, name_key: str, parts_key: str, index_key: str
) -> list[tuple[str, int | None]]:
    out: list[tuple[str, int | None]] = []
    for entry in entries or ():
        if isinstance(entry, str):
            out.append((entry, None))
            continue
        if not isinstance(entry, Mapping):
            continue
        name = entry.get(name_key, entry.get("name", entry.get("topic")))
        if not isinstance(name, str):
            continue
        parts = entry.get(parts_key)
        if not parts:
            out.append((name, None))
            continue
        for p in parts:
            index = p.get(index_key) if isinstance(p, Mapping) and index_key else p
            out.append((name, index if isinstance(index, int) else None))
    return out


def _shape_fits(entries: list[Any], name_key: str, parts_key: str, index_key: str) -> bool:
    """Whether a request's topic list has this shape (judged on its first entry)."""
    if not entries:
        return False
    first = entries[0]
    if not isinstance(first, Mapping) or name_key not in first or parts_key not in first:
        return False
    parts = first.get(parts_key) or []
    if not parts:
        return True
    return isinstance(parts[0], Mapping) and index_key in parts[0] if index_key else isinstance(parts[0], int)


def request_facts(api_key: int, client_id: str | None, body: Mapping[str, Any]) -> RequestFacts:
    """What ``body`` (a request of ``api_key``, either encoding) touches."""
    partitions: list[tuple[str, int | None]] = []
    all_topics = False
    if api_key == ApiKeys.METADATA:
        topics = body.get("topics")
        if topics is None:
            all_topics = True
        else:
            partitions = _topic_partitions(topics, "name", "", "")
    elif api_key == ApiKeys.DELETE_TOPICS:
        partitions = [(n, None) for n in body.get("topic_names") or () if isinstance(n, str)]
        partitions += _topic_partitions(body.get("topics"), "name", "", "")
    else:
        for list_key, name_key, parts_key, index_key in _TOPIC_SHAPES:
            entries = body.get(list_key)
            if isinstance(entries, list) and _shape_fits(entries, name_key, parts_key, index_key):
                partitions = _topic_partitions(entries, name_key, parts_key, index_key)
                break
    groups: list[str] = []
    group_id = body.get("group_id")
    if isinstance(group_id, str) and group_id:
        groups.append(group_id)
    for g in body.get("groups") or ():  # DescribeGroups (names), OffsetFetch v8+ (entries)
        name = g.get("group_id") if isinstance(g, Mapping) else g
        if isinstance(name, str):
            groups.append(name)
            if isinstance(g, Mapping):
                partitions += _topic_partitions(g.get("topics"), "name", "partition_indexes", "")
    groups += [g for g in body.get("groups_names") or () if isinstance(g, str)]  # DeleteGroups
    transactional_id = body.get("transactional_id")
    if api_key == ApiKeys.FIND_COORDINATOR:
        keys = [
            k for k in [body.get("key"), *(body.get("coordinator_keys") or ())] if isinstance(k, str) and k
        ]
        if body.get("key_type", 0) == 1:
            transactional_id = keys[0] if keys else None
        else:
            groups += keys
    return RequestFacts(
        api=int(api_key),
        client_id=client_id or "",
        partitions=tuple(partitions),
        groups=tuple(groups),
        transactional_id=transactional_id if isinstance(transactional_id, str) else None,
        all_topics=all_topics,
    )


# ------------------------------------------------------------------------------------------ the table


@dataclass(frozen=True, slots=True)
class RuleHit:
    """A rule that fired on a request: the ``hit``-th time on this node, and what of the request matched."""

    rule: ProtocolFaultRule
    hit: int
    topic: str | None
    partition: int | None
    group: str | None

    def record(self, node: str, facts: RequestFacts, ts_ms: int) -> dict[str, Any]:
        """The hit as journaled: the node's journal, the PROTOCOL_FAULTS answer, ``faults.jsonl``."""
        return {
            "ts_ms": ts_ms,
            "node": node,
            "rule_id": self.rule.id,
            "hit": self.hit,
            "api": api_name(facts.api),
            "topic": self.topic,
            "partition": self.partition,
            "group": self.group,
            "transactional_id": facts.transactional_id,
            "client_id": facts.client_id,
            "effect": self.rule.action,
            "when": self.rule.when,
        }


def _matches(
    rule: ProtocolFaultRule, facts: RequestFacts
) -> tuple[str | None, int | None, str | None] | None:
    """None when ``rule``'s filters do not all match ``facts``; else the matched (topic, partition, group)."""
    if rule.api != facts.api:
        return None
    if rule.client_id is not None and rule.client_id != facts.client_id:
        return None
    if rule.transactional_id is not None and rule.transactional_id != facts.transactional_id:
        return None
    group: str | None = facts.groups[0] if facts.groups else None
    if rule.group is not None:
        if rule.group not in facts.groups:
            return None
        group = rule.group
    topic: str | None = None
    partition: int | None = None
    if rule.topic is not None or rule.partition is not None:
        for t, p in facts.partitions:
            if (rule.topic is None or t == rule.topic) and (
                rule.partition is None or p is None or p == rule.partition
            ):
                topic, partition = t, p if p is not None else rule.partition
                break
        else:
            if not (facts.all_topics and rule.topic is not None):
                return None
            topic, partition = rule.topic, rule.partition
    elif facts.partitions:
        topic, partition = facts.partitions[0]
    return topic, partition, group


class ProtocolFaultTable:
    """One node's rules, in the order added, with their hit counts (sans-I/O: no clock, no sockets)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._rules: list[ProtocolFaultRule] = []
        self.hits: dict[int, int] = {}
        self._draws: dict[int, random.Random] = {}
        self.hit_log: deque[dict[str, Any]] = deque(maxlen=HIT_LOG_SIZE)

    def __bool__(self) -> bool:
        return bool(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def rules(self) -> list[ProtocolFaultRule]:
        return list(self._rules)

    def add(self, rules: Iterable[ProtocolFaultRule]) -> None:
        """Appends ``rules`` (all or none): an id already in the table raises :class:`RuleError`."""
        new = list(rules)
        ids = {r.id for r in self._rules}
        for rule in new:
            if rule.id in ids:
                raise RuleError(f"rule {rule.id} is already in force on node {self.node}")
            ids.add(rule.id)
        for rule in new:
            self._rules.append(rule)
            self.hits.setdefault(rule.id, 0)
            # Each rule draws from its own generator: the same seed gives the same hits on the same
            # requests whatever else the node's rules do; each node draws its own sequence.
            self._draws[rule.id] = random.Random(f"{rule.seed}:{self.node}:{rule.id}")

    def remove(self, ids: Iterable[int] | None = None) -> list[ProtocolFaultRule]:
        """Removes the rules with ``ids`` (None: all) and returns them; their hit counts stay readable."""
        wanted = None if ids is None else set(ids)
        gone = [r for r in self._rules if wanted is None or r.id in wanted]
        self._rules = [r for r in self._rules if not (wanted is None or r.id in wanted)]
        for rule in gone:
            self._draws.pop(rule.id, None)
        return gone

    @property
    def observing(self) -> bool:
        """Whether any rule only observes (so :meth:`observe` has something to count)."""
        return any(rule.observe for rule in self._rules)

    def observe(self, facts: RequestFacts) -> list[RuleHit]:
        """Every ``observe`` rule that matches this request, each counted as a hit."""
        out: list[RuleHit] = []
        for rule in self._rules:
            if not rule.observe or (rule.node is not None and rule.node != self.node):
                continue
            matched = _matches(rule, facts)
            if matched is None:
                continue
            hits = self.hits.get(rule.id, 0)
            if rule.count is not None and hits >= rule.count:
                continue
            self.hits[rule.id] = hits + 1
            out.append(RuleHit(rule, hits + 1, *matched))
        return out

    def match(self, facts: RequestFacts) -> RuleHit | None:
        """The rule that fires on this request, if any, counted as a hit (see the module's doc)."""
        for rule in self._rules:
            if rule.observe or (rule.node is not None and rule.node != self.node):
                continue
            matched = _matches(rule, facts)
            if matched is None:
                continue
            hits = self.hits.get(rule.id, 0)
            if rule.count is not None and hits >= rule.count:
                continue
            if rule.probability is not None and self._draws[rule.id].random() >= rule.probability:
                continue
            self.hits[rule.id] = hits + 1
            return RuleHit(rule, hits + 1, *matched)
        return None

    def log_hit(self, record: dict[str, Any]) -> None:
        self.hit_log.append(record)


# ------------------------------------------------------------------------------------------ the wire


def rule_to_wire(rule: ProtocolFaultRule, hits: int = 0) -> ProtocolFaultsRule:
    return ProtocolFaultsRule(
        id=rule.id,
        api=rule.api,
        topic=rule.topic,
        partition=rule.partition,
        group=rule.group,
        transactional_id=rule.transactional_id,
        client_id=rule.client_id,
        node=rule.node,
        error_code=rule.error,
        delay_ms=rule.delay_ms,
        drop_response=rule.drop_response,
        disconnect=rule.disconnect,
        observe=rule.observe,
        when=rule.when,
        count=rule.count,
        probability_ppm=None
        if rule.probability is None
        else max(1, round(rule.probability * PROBABILITY_PPM_MAX)),
        seed=rule.seed,
        hits=hits,
    )


def rule_from_wire(wire: ProtocolFaultsRule) -> ProtocolFaultRule:
    """Raises :class:`RuleError` for a rule that cannot be."""
    return ProtocolFaultRule(
        id=wire.id,
        api=wire.api,
        topic=wire.topic,
        partition=wire.partition,
        group=wire.group,
        transactional_id=wire.transactional_id,
        client_id=wire.client_id,
        node=wire.node,
        error=wire.error_code,
        delay_ms=wire.delay_ms,
        drop_response=wire.drop_response,
        disconnect=wire.disconnect,
        observe=wire.observe,
        when=wire.when,
        count=wire.count,
        probability=None if wire.probability_ppm is None else wire.probability_ppm / PROBABILITY_PPM_MAX,
        seed=wire.seed,
    )


def hit_to_wire(record: Mapping[str, Any]) -> ProtocolFaultsHit:
    return ProtocolFaultsHit(**{k: record[k] for k in ProtocolFaultsHit.__dataclass_fields__ if k in record})


def protocol_faults_body(
    operation: str, rules: Iterable[ProtocolFaultRule] = (), rule_ids: Iterable[int] = ()
) -> dict[str, Any]:
    """A PROTOCOL_FAULTS request: ``describe``, ``add`` (``rules``), ``remove`` (``rule_ids``), ``clear``."""
    return to_body(
        ProtocolFaultsRequest(
            operation=operation, rules=[rule_to_wire(r) for r in rules], rule_ids=list(rule_ids)
        )
    )


def protocol_faults_answer(body: Mapping[str, Any]) -> ProtocolFaultsResponse:
    """A PROTOCOL_FAULTS answer body as its dataclass (rules via :func:`answer_rules`)."""
    return from_body(ProtocolFaultsResponse, dict(body))


def answer_rules(resp: ProtocolFaultsResponse) -> list[tuple[ProtocolFaultRule, int]]:
    """The rules of a PROTOCOL_FAULTS answer with their hits on that node."""
    return [(rule_from_wire(w), w.hits) for w in resp.rules]


def with_id(rule: ProtocolFaultRule, rule_id: int) -> ProtocolFaultRule:
    return replace(rule, id=rule_id)


__all__ = [
    "ACTIONS",
    "HIT_LOG_SIZE",
    "PROBABILITY_PPM_MAX",
    "UNRULED_APIS",
    "WHEN",
    "ProtocolFaultRule",
    "ProtocolFaultTable",
    "RequestFacts",
    "RuleError",
    "RuleHit",
    "answer_rules",
    "api_name",
    "hit_to_wire",
    "parse_api",
    "parse_error",
    "protocol_faults_answer",
    "protocol_faults_body",
    "request_facts",
    "rule_from_json",
    "rule_from_wire",
    "rule_to_wire",
    "with_id",
]
