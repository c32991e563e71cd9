"""kit.protocol_faults without a cluster: rules files, and hits merged into faults.jsonl once each."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.fault_journal import append_fault, read_faults
from kit.net_faults import NetCluster, Node
from kit.protocol_faults import RuleInputError, load_rules_file, statuses, sync_hits
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.fault_messages import ProtocolFaultsHit, ProtocolFaultsResponse
from protocol.fault_rules import ProtocolFaultRule, rule_to_wire


def test_a_yaml_or_json_rules_file_reads_as_rules(tmp_path: Path) -> None:
    yml = tmp_path / "rules.yaml"
    yml.write_text(
        "- api: Produce\n  topic: t\n  error: NOT_LEADER_OR_FOLLOWER\n  count: 3\n"
        "- api: fetch\n  delay-ms: 50\n  probability: 0.1\n  seed: 1\n  when: after\n"
    )
    produce, fetch = load_rules_file(yml)
    assert (produce.api, produce.topic, produce.error, produce.count) == (0, "t", 6, 3)
    assert (fetch.api, fetch.delay_ms, fetch.probability, fetch.when) == (1, 50, 0.1, "after")
    js = tmp_path / "rules.json"
    js.write_text('{"rules": [{"api": "JoinGroup", "group": "g", "error": 27}]}')
    (join,) = load_rules_file(js)
    assert (join.api, join.group, join.error) == (ApiKeys.JOIN_GROUP, "g", Errors.REBALANCE_IN_PROGRESS)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("- api: Produc\n  error: 6\n", "rule 1: unknown API 'Produc'"),
        ("- api: Produce\n  error: 6\n- api: Produce\n  error: NOPE\n", "rule 2: unknown error 'NOPE'"),
        ("- api: Produce\n", "rule 1: a rule does exactly one of"),
        ("api: Produce\n", "a rules file is a list of rules"),
        ("- [unclosed\n", "not valid YAML or JSON"),
    ],
)
def test_a_bad_rules_file_is_refused_naming_the_rule(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    with pytest.raises(RuleInputError, match=why) as info:
        load_rules_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_hits_go_to_faults_jsonl_once_each_with_their_rule(tmp_path: Path) -> None:
    cluster = NetCluster({"1": Node("1", "127.0.0.1", 1, "unknown")}, tmp_path)
    rule = ProtocolFaultRule(id=4, api=0, topic="t", error=6, count=2)
    hit = {"node": "1", "rule_id": 4, "api": "Produce", "topic": "t", "partition": 0, "client_id": "p"}
    answer = ProtocolFaultsResponse(
        node="1",
        rules=[rule_to_wire(rule, hits=2)],
        hits=[ProtocolFaultsHit(ts_ms=200 + n, hit=n, effect="error", when="before", **hit) for n in (1, 2)],
    )
    append_fault(tmp_path, "rule_add", ["1"], {}, extra={"rule_id": 4, "rule": rule.to_json()})
    assert sync_hits(cluster, {"1": answer}) == 2
    assert sync_hits(cluster, {"1": answer, "2": None}) == 0  # already there
    records = [r for r in read_faults(tmp_path) if r["action"] == "rule_hit"]
    assert [(r["nodes"], r["hit"], r["ts_ms"], r["rule"]["error"]) for r in records] == [
        (["1"], 1, 201, "NOT_LEADER_OR_FOLLOWER"),
        (["1"], 2, 202, "NOT_LEADER_OR_FOLLOWER"),
    ]
    (status,) = statuses({"1": answer, "2": None})
    assert (status.rule, status.hits, status.nodes) == (rule, 2, ["1"])
