"""The pure fault table: per-link decisions, seeded loss and jitter, FIFO delays, the cluster view."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.fault_injector import FaultInjector, rule_from_wire, rule_to_wire
from protocol.faults import (
    CLIENT,
    CONTROLLER,
    DELIVER,
    DelayLine,
    FaultError,
    FaultSet,
    FaultTable,
    LinkFault,
    node_of_client_id,
)


def table(node: str, *rules: LinkFault, seed: int = 7) -> FaultTable:
    t = FaultTable(node, seed=seed)
    t.set_rules(rules)
    return t


@pytest.mark.parametrize(
    ("client_id", "node"),
    [
        ("broker-2", "2"),
        ("broker-12/heartbeat", "12"),
        ("replica-fetcher-3-0", "3"),
        ("controller-1000", CONTROLLER),
        ("controller", CONTROLLER),
        ("producer-17-99", CLIENT),
        ("isrsim-cli", CLIENT),
        ("", CLIENT),
        ("brokers-2", CLIENT),
        ("replica-fetcher-x-0", CLIENT),
    ],
)
def test_node_of_client_id(client_id: str, node: str) -> None:
    assert node_of_client_id(client_id) == node


def test_a_quorums_voters_are_named_by_their_ids() -> None:
    """With a controller quorum each voter is a node of its own: a rule between two voters (`net partition
    1000 1001 --one-way`) must tell them apart, and a single controller keeps its name."""
    assert node_of_client_id("controller-1001", voters_by_id=True) == "1001"
    assert node_of_client_id("controller-1002/raft", voters_by_id=True) == "1002"
    assert node_of_client_id("broker-3", voters_by_id=True) == "3"
    assert node_of_client_id("controller", voters_by_id=True) == CONTROLLER
    assert node_of_client_id("controller-1001") == CONTROLLER
    # One way stays one way between voters: 1000 -> 1001 dropped, 1001 -> 1000 delivered.
    t = table("1001", LinkFault("1000", "1001", partitioned=True))
    assert t.decide(node_of_client_id("controller-1000", voters_by_id=True), "1001").drop
    assert not t.decide("1001", node_of_client_id("controller-1000", voters_by_id=True)).drop


def test_no_rules_delivers_everything() -> None:
    t = FaultTable("1")
    assert t.empty
    assert t.decide("2", "1") is DELIVER
    assert t.can_connect("1", "2")


def test_one_way_partition_drops_one_direction_only() -> None:
    t = table("1", LinkFault("1", "2", partitioned=True))
    assert t.decide("1", "2").drop
    assert not t.decide("2", "1").drop
    assert not t.decide("1", "3").drop
    # TCP's handshake needs both ways: no new connection either way.
    assert not t.can_connect("1", "2") and not t.can_connect("2", "1")
    assert t.can_connect("1", "3")


def test_both_ways_partition_and_heal() -> None:
    faults = FaultSet().partition("1", "2")
    assert {r.link for r in faults} == {("1", "2"), ("2", "1")}
    t = table("2", *faults.for_node("2"))
    assert t.decide("1", "2").drop and t.decide("2", "1").drop
    t.set_rules(faults.heal("2", "1").for_node("2"))
    assert t.empty and t.decide("1", "2") is DELIVER


def test_heal_a_pair_keeps_the_others() -> None:
    faults = FaultSet().partition("1", "2").partition("1", "3").delay("2", "controller", 50)
    healed = faults.heal("1", "2")
    assert {r.link for r in healed} == {("1", "3"), ("3", "1"), ("2", CONTROLLER), (CONTROLLER, "2")}
    assert {r.link for r in faults.heal("1")} == {("2", CONTROLLER), (CONTROLLER, "2")}
    assert len(faults.heal()) == 0
    assert faults.heal("3", "2") == faults  # nothing between them: unchanged


def test_isolate_cuts_every_node_and_clients_both_ways() -> None:
    faults = FaultSet().isolate("2", [CONTROLLER, "1", "2", "3"])
    assert {r.link for r in faults} == {
        (a, b) for other in (CONTROLLER, "1", "3", CLIENT) for a, b in (("2", other), (other, "2"))
    }
    assert all(r.partitioned for r in faults)
    assert {r.link for r in faults.for_node("1")} == {("1", "2"), ("2", "1")}
    t = table("2", *faults.for_node("2"))
    assert t.decide(CLIENT, "2").drop and t.decide("2", CLIENT).drop


def test_faults_combine_on_one_link() -> None:
    faults = FaultSet().delay("1", "2", 100, 20, one_way=True).loss("1", "2", 5.0, one_way=True)
    (rule,) = list(faults)
    assert (rule.delay_ms, rule.jitter_ms, rule.loss_percent, rule.partitioned) == (100, 20, 5.0, False)
    assert rule.describe() == "delay 100±20 ms, loss 5%"


def test_merge_is_the_union_of_node_tables() -> None:
    faults = FaultSet().partition("1", "2").loss(CONTROLLER, "3", 10)
    merged = FaultSet.merge(faults.for_node(n) for n in (CONTROLLER, "1", "2", "3"))
    assert merged == faults


@pytest.mark.parametrize(
    "kwargs",
    [
        {"src": "1", "dst": "1"},
        {"src": "x", "dst": "1"},
        {"src": "1", "dst": "2", "delay_ms": -1},
        {"src": "1", "dst": "2", "jitter_ms": -5},
        {"src": "1", "dst": "2", "loss_percent": 100.5},
        {"src": "1", "dst": "2", "loss_percent": -0.1},
    ],
)
def test_invalid_rules_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(FaultError):
        LinkFault(**kwargs)  # type: ignore[arg-type]


def test_loss_rate_is_statistically_right_and_seeded() -> None:
    rule = LinkFault("1", "2", loss_percent=20.0)
    n = 20_000
    t = table("2", rule, seed=42)
    drops = [t.decide("1", "2").drop for _ in range(n)]
    rate = sum(drops) / n
    # 20 %: the standard deviation of the rate is sqrt(.2 * .8 / n) ~ 0.0028; allow 5 sigma.
    assert abs(rate - 0.20) < 0.015
    t2 = table("2", rule, seed=42)
    assert [t2.decide("1", "2").drop for _ in range(n)] == drops
    t3 = table("2", rule, seed=43)
    assert [t3.decide("1", "2").drop for _ in range(n)] != drops


def test_total_loss_and_no_loss() -> None:
    assert all(table("2", LinkFault("1", "2", loss_percent=100)).decide("1", "2").drop for _ in range(100))
    t = table("2", LinkFault("1", "2", loss_percent=0, delay_ms=5))
    assert all(t.decide("1", "2").delay_ms == 5 for _ in range(100))


def test_jitter_stays_within_bounds_and_is_seeded() -> None:
    t = table("2", LinkFault("1", "2", delay_ms=100, jitter_ms=30), seed=1)
    delays = [t.decide("1", "2").delay_ms for _ in range(2000)]
    assert all(70 <= d <= 130 for d in delays)
    assert max(delays) - min(delays) > 50  # it does jitter
    t2 = table("2", LinkFault("1", "2", delay_ms=100, jitter_ms=30), seed=1)
    assert [t2.decide("1", "2").delay_ms for _ in range(2000)] == delays
    # A jitter larger than the delay never makes a negative delay.
    t3 = table("2", LinkFault("1", "2", delay_ms=10, jitter_ms=50))
    assert all(t3.decide("1", "2").delay_ms >= 0 for _ in range(500))


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.floats(0, 10, allow_nan=False), st.floats(0, 5, allow_nan=False)),
        min_size=1,
        max_size=50,
    )
)
def test_delay_line_keeps_fifo_order(frames: list[tuple[float, float]]) -> None:
    """Frames arriving in order (gaps, delays) are released in order and never before their own time."""
    line = DelayLine()
    now = 0.0
    released: list[float] = []
    for gap, delay in frames:
        now += gap
        at = line.release_at(now, delay)
        assert at >= now + delay
        released.append(at)
    assert released == sorted(released)


def test_delay_line_does_not_delay_more_than_needed() -> None:
    line = DelayLine()
    assert line.release_at(0.0, 1.0) == 1.0
    assert line.release_at(0.1, 0.0) == 1.0  # behind the delayed frame
    assert line.release_at(5.0, 0.0) == 5.0  # the line is empty again


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([CONTROLLER, "1", "2", "3"]),
            st.sampled_from([CONTROLLER, "1", "2", "3"]),
            st.sampled_from(["partition", "partition1", "delay", "loss", "heal2", "heal1", "heal0"]),
        ),
        max_size=12,
    )
)
def test_every_node_share_rebuilds_the_cluster_view(ops: list[tuple[str, str, str]]) -> None:
    """Whatever is applied, the nodes' shares (what each one is sent) merge back into the same view, and
    every rule is held by both of its ends."""
    faults = FaultSet()
    for a, b, op in ops:
        if a == b and op not in ("heal1", "heal0"):
            continue
        if op == "partition":
            faults = faults.partition(a, b)
        elif op == "partition1":
            faults = faults.partition(a, b, one_way=True)
        elif op == "delay":
            faults = faults.delay(a, b, 10, 2)
        elif op == "loss":
            faults = faults.loss(a, b, 1.5)
        elif op == "heal2" and a != b:
            faults = faults.heal(a, b)
        elif op == "heal1":
            faults = faults.heal(a)
        else:
            faults = faults.heal()
    shares = {n: faults.for_node(n) for n in (CONTROLLER, "1", "2", "3")}
    assert FaultSet.merge(shares.values()) == faults
    for rule in faults:
        assert rule in shares[rule.src] and rule in shares[rule.dst]


def test_wire_round_trip_of_rules() -> None:
    rule = LinkFault("1", CLIENT, partitioned=True, delay_ms=3, jitter_ms=1, loss_percent=12.5)
    assert rule_from_wire(rule_to_wire(rule)) == rule


def test_net_faults_api_validates_and_replaces_the_table() -> None:
    inj = FaultInjector("2", peers=lambda: [(CONTROLLER, "h", 1)])
    ok = inj.handle_net_faults(
        {"operation": "set", "rules": [{"src": "1", "dst": "2", "partitioned": True}], "seed": 5}
    )
    assert ok["error_code"] == 0 and ok["node"] == "2" and ok["seed"] == 5
    assert ok["rules"][0]["src"] == "1" and ok["peers"] == [{"node": CONTROLLER, "host": "h", "port": 1}]
    assert inj.inbound("broker-1", 1).drop
    assert not inj.inbound("broker-1", 1001).drop  # NET_FAULTS itself is exempt
    bad = [
        ({"operation": "drop"}, "operation"),
        ({"operation": "set", "rules": [{"src": "1"}]}, "rules[0]"),
        ({"operation": "set", "rules": [{"src": "1", "dst": "3"}]}, "does not involve"),
        ({"operation": "set", "rules": [{"src": "1", "dst": "2", "delay_ms": -1}]}, "delay_ms"),
        ({"operation": "set", "rules": [{"src": "1", "dst": "2", "loss_ppm": 2_000_000}]}, "loss_ppm"),
        ({"operation": "set", "rules": [{"src": "9x", "dst": "2"}]}, "unknown node"),
        ({"operation": "set", "rules": [{"src": "1", "dst": "2"}, {"src": "1", "dst": "2"}]}, "second rule"),
    ]
    for body, needle in bad:
        resp = inj.handle_net_faults(body)
        assert resp["error_code"] == 42, body
        assert needle in resp["error_message"], (body, resp)
    # Nothing half-applied: the table is still the one set above.
    assert [r.link for r in inj.table.rules()] == [("1", "2")]
    healed = inj.handle_net_faults({"operation": "set", "rules": []})
    assert healed["rules"] == [] and not inj.active


def test_a_rule_naming_controller_applies_to_each_voter_of_a_quorum() -> None:
    """On a broker of a quorum cluster: rules naming a voter by id apply to that voter only; a rule naming
    ``controller`` applies to every voter that no rule of its own names (as ``client`` is every client)."""
    from protocol.fault_injector import FaultInjector

    voters = frozenset({"1000", "1001", "1002"})
    injector = FaultInjector("2", voters=voters)
    injector.table.set_rules([LinkFault("1000", "2", partitioned=True)])
    assert injector.inbound("controller-1000", 4).drop
    assert not injector.inbound("controller-1001", 4).drop
    assert not injector.outbound("controller-1000", 4).drop  # one way stays one way
    injector.table.set_rules(
        [LinkFault("controller", "2", delay_ms=300), LinkFault("1001", "2", partitioned=True)]
    )
    assert injector.inbound("controller-1000", 4).delay_ms == 300
    assert injector.inbound("controller-1001", 4).drop  # its own rule wins
    assert not injector.inbound("broker-3", 4).drop and injector.inbound("broker-3", 4).delay_ms == 0
    # A single controller keeps the name "controller".
    single = FaultInjector("2")
    single.table.set_rules([LinkFault("controller", "2", partitioned=True)])
    assert single.inbound("controller-1000", 4).drop
