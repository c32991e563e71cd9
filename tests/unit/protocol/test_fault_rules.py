"""The protocol-level fault rule table (sans-I/O): names, validation, what a request touches, matching."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.fault_rules import (
    ProtocolFaultRule,
    ProtocolFaultTable,
    RuleError,
    api_name,
    parse_api,
    parse_error,
    request_facts,
    rule_from_json,
    rule_from_wire,
    rule_to_wire,
)

NLOF = int(Errors.NOT_LEADER_OR_FOLLOWER)


def produce(*tps: tuple[str, int], client_id: str = "p1") -> Any:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    body = {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": t, "partition_data": [{"index": p, "records": b""} for p in ps]}
            for t, ps in by_topic.items()
        ],
    }
    return request_facts(ApiKeys.PRODUCE, client_id, body)


def rule(rule_id: int = 1, **kw: Any) -> ProtocolFaultRule:
    kw.setdefault("api", int(ApiKeys.PRODUCE))
    if not any(k in kw for k in ("error", "delay_ms", "drop_response", "disconnect")):
        kw["error"] = NLOF
    return ProtocolFaultRule(id=rule_id, **kw)


def test_api_names_are_kafkas_camel_case_and_parse_back() -> None:
    assert api_name(ApiKeys.PRODUCE) == "Produce"
    assert api_name(ApiKeys.JOIN_GROUP) == "JoinGroup"
    assert api_name(ApiKeys.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert api_name(ApiKeys.INIT_PRODUCER_ID) == "InitProducerId"
    for key in ApiKeys:
        if key not in (ApiKeys.SASL_HANDSHAKE, ApiKeys.SASL_AUTHENTICATE) and key < 1000:
            assert parse_api(api_name(key)) == key
    assert parse_api("join_group") == ApiKeys.JOIN_GROUP
    assert parse_api("0") == ApiKeys.PRODUCE


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Produc", "unknown API 'Produc'"),
        ("NetFaults", "cannot be the target of a rule"),
        ("SaslHandshake", "cannot be the target of a rule"),
        ("999", "unknown API key 999"),
    ],
)
def test_bad_api_names_are_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(RuleError, match=why):
        parse_api(text)


def test_errors_by_kafkas_name_or_code() -> None:
    assert parse_error("NOT_LEADER_OR_FOLLOWER") == 6
    assert parse_error("coordinator_load_in_progress") == 14
    assert parse_error("27") == int(Errors.REBALANCE_IN_PROGRESS)
    for bad, why in (("NOT_A_THING", "unknown error 'NOT_A_THING'"), ("4242", "unknown error code 4242")):
        with pytest.raises(RuleError, match=why):
            parse_error(bad)
    with pytest.raises(RuleError, match="no error"):
        parse_error("NONE")


def test_a_rule_does_exactly_one_thing_within_its_limits() -> None:
    with pytest.raises(RuleError, match="exactly one"):
        ProtocolFaultRule(id=1, api=0)
    with pytest.raises(RuleError, match="exactly one"):
        ProtocolFaultRule(id=1, api=0, error=NLOF, disconnect=True)
    with pytest.raises(RuleError, match="not both"):
        rule(count=1, probability=0.5)
    with pytest.raises(RuleError, match="probability"):
        rule(probability=1.5)
    with pytest.raises(RuleError, match="count"):
        rule(count=0)
    with pytest.raises(RuleError, match="when"):
        rule(when="during")


def test_request_facts_of_each_shape() -> None:
    facts = produce(("a", 0), ("a", 1), ("b", 2))
    assert facts.partitions == (("a", 0), ("a", 1), ("b", 2))
    fetch = {
        "replica_id": -1,
        "topics": [{"topic": "t", "partitions": [{"partition": 3, "fetch_offset": 0}]}],
    }
    assert request_facts(ApiKeys.FETCH, "c", fetch).partitions == (("t", 3),)
    lo = {"topics": [{"name": "t", "partitions": [{"partition_index": 1, "timestamp": -1}]}]}
    assert request_facts(ApiKeys.LIST_OFFSETS, "c", lo).partitions == (("t", 1),)
    commit = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    facts = request_facts(ApiKeys.OFFSET_COMMIT, "c", commit)
    assert (facts.groups, facts.partitions) == (("g",), (("t", 0),))
    assert request_facts(ApiKeys.JOIN_GROUP, "c", {"group_id": "g"}).groups == ("g",)
    assert request_facts(ApiKeys.METADATA, "c", {"topics": None}).all_topics
    assert request_facts(ApiKeys.METADATA, "c", {"topics": [{"name": "t"}]}).partitions == (("t", None),)
    txn = request_facts(ApiKeys.FIND_COORDINATOR, "c", {"key_type": 1, "coordinator_keys": ["tx"]})
    assert (txn.transactional_id, txn.groups) == ("tx", ())
    assert request_facts(ApiKeys.FIND_COORDINATOR, "c", {"key": "g"}).groups == ("g",)
    pid = request_facts(ApiKeys.INIT_PRODUCER_ID, "c", {"transactional_id": "tx"})
    assert pid.transactional_id == "tx"


def test_topic_filter_matches_a_request_touching_it_as_a_whole() -> None:
    table = ProtocolFaultTable("1")
    table.add([rule(topic="b", partition=2)])
    assert table.match(produce(("a", 0))) is None
    assert table.match(produce(("b", 1))) is None
    hit = table.match(produce(("a", 0), ("b", 2)))
    assert hit is not None and (hit.topic, hit.partition, hit.hit) == ("b", 2, 1)
    # A topic that does not exist is accepted and never hits.
    table.add([rule(2, topic="no-such-topic")])
    assert table.match(produce(("a", 0))) is None
    assert table.hits == {1: 1, 2: 0}


def test_metadata_for_every_topic_touches_every_topic() -> None:
    table = ProtocolFaultTable("1")
    table.add([rule(api=int(ApiKeys.METADATA), topic="t", delay_ms=100)])
    assert table.match(request_facts(ApiKeys.METADATA, "c", {"topics": None})) is not None
    assert table.match(request_facts(ApiKeys.METADATA, "c", {"topics": [{"name": "u"}]})) is None


def test_other_filters_api_client_group_node() -> None:
    table = ProtocolFaultTable("2")
    table.add(
        [
            rule(1, api=int(ApiKeys.JOIN_GROUP), group="g1", error=int(Errors.REBALANCE_IN_PROGRESS)),
            rule(2, client_id="only-me"),
            rule(3, api=int(ApiKeys.FETCH), node="1", disconnect=True),
        ]
    )
    assert table.match(request_facts(ApiKeys.JOIN_GROUP, "c", {"group_id": "g2"})) is None
    hit = table.match(request_facts(ApiKeys.JOIN_GROUP, "c", {"group_id": "g1"}))
    assert hit is not None and hit.rule.id == 1 and hit.group == "g1"
    assert table.match(produce(("a", 0), client_id="someone")) is None
    assert table.match(produce(("a", 0), client_id="only-me")) is not None
    fetch = {"topics": [{"topic": "t", "partitions": [{"partition": 0}]}]}
    assert table.match(request_facts(ApiKeys.FETCH, "c", fetch)) is None  # rule 3 is for node 1


def test_count_limits_hits_and_the_first_added_rule_wins() -> None:
    table = ProtocolFaultTable("1")
    table.add([rule(1, count=2), rule(2, drop_response=True)])
    ids = [h.rule.id if (h := table.match(produce(("a", 0)))) else None for _ in range(4)]
    assert ids == [1, 1, 2, 2]
    assert table.hits == {1: 2, 2: 2}
    table.remove([2])
    assert table.match(produce(("a", 0))) is None
    assert not table.remove([42])


def test_probability_is_seeded_per_rule_and_node() -> None:
    def pattern(seed: int, node: str = "1") -> list[bool]:
        table = ProtocolFaultTable(node)
        table.add([rule(probability=0.3, seed=seed)])
        return [table.match(produce(("a", 0))) is not None for _ in range(200)]

    assert pattern(7) == pattern(7)
    assert pattern(7) != pattern(8)
    assert pattern(7, "1") != pattern(7, "2")
    assert 30 < sum(pattern(7)) < 90


def test_duplicate_ids_are_refused_all_or_none() -> None:
    table = ProtocolFaultTable("1")
    table.add([rule(1)])
    with pytest.raises(RuleError, match="already in force"):
        table.add([rule(2), rule(1)])
    assert [r.id for r in table.rules()] == [1]
    assert table
    table.remove()
    assert not table


def test_json_and_wire_round_trips() -> None:
    r = rule(5, topic="t", partition=1, when="after", probability=0.25, seed=3)
    assert rule_from_wire(rule_to_wire(r)) == r
    assert rule_from_json(r.to_json()) == r
    assert r.to_json()["error"] == "NOT_LEADER_OR_FOLLOWER"
    from_file = rule_from_json({"api": "Produce", "error": "6", "count": 3, "delay-ms": 0}, rule_id=9)
    assert (from_file.id, from_file.error, from_file.count) == (9, 6, 3)
    with pytest.raises(RuleError, match="unknown rule field"):
        rule_from_json({"api": "Produce", "error": 6, "bogus": 1})
    with pytest.raises(RuleError, match="needs api"):
        rule_from_json({"error": 6})
    assert (
        r.describe()
        == "Produce topic=t partition=1 -> error NOT_LEADER_OR_FOLLOWER (after, probability 0.25)"
    )


def test_an_observe_rule_counts_every_match_and_never_stands_in_the_way() -> None:
    table = ProtocolFaultTable("1")
    table.add(
        [rule(1, error=None, observe=True), rule(2, count=1), rule(3, error=None, observe=True, count=2)]
    )
    assert table.observing
    for _ in range(3):
        seen = [h.rule.id for h in table.observe(produce(("a", 0)))]
        acting = table.match(produce(("a", 0)))
        assert acting is None or acting.rule.id == 2  # observers never act, and never win a match
    assert table.hits == {1: 3, 2: 1, 3: 2}
    assert seen == [1]  # rule 3 stopped counting at its count
    assert [h.rule.action for h in table.observe(produce(("a", 0)))] == ["observe"]
    assert rule_from_wire(rule_to_wire(rule(4, error=None, observe=True))).observe
    assert rule_from_json({"api": "Produce", "observe": True}).action == "observe"
    with pytest.raises(RuleError, match="exactly one"):
        rule(5, observe=True)  # an error and observe
