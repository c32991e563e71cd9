"""ELECT_LEADERS' decision (controller/leader_election.py) and the core applying it, as KRaft's
ReplicationControlManager.electLeaders answers."""

from __future__ import annotations

from controller.elections import LeaderAndIsr
from controller.leader_election import elect_leader
from controller.state import NO_LEADER, PartitionState
from protocol.admin_messages import ELECTION_PREFERRED, ELECTION_UNCLEAN
from protocol.errors import Errors


def part(replicas: list[int], leader: int, isr: list[int]) -> PartitionState:
    return PartitionState(replicas=replicas, leader=leader, leader_epoch=3, isr=isr)


def test_preferred_election_moves_leadership_to_the_first_replica() -> None:
    assert elect_leader(part([1, 2, 3], 2, [1, 2, 3]), ELECTION_PREFERRED, {1, 2, 3}) == LeaderAndIsr(
        1, [1, 2, 3]
    )


def test_preferred_election_not_needed_when_the_preferred_replica_leads() -> None:
    assert elect_leader(part([1, 2, 3], 1, [1, 2, 3]), ELECTION_PREFERRED, {1, 2, 3}) == (
        Errors.ELECTION_NOT_NEEDED,
        None,
    )


def test_preferred_replica_out_of_the_isr_or_not_acceptable() -> None:
    for isr, acceptable in (([2, 3], {1, 2, 3}), ([1, 2, 3], {2, 3})):
        result = elect_leader(part([1, 2, 3], 2, isr), ELECTION_PREFERRED, acceptable)
        assert isinstance(result, tuple) and result[0] == Errors.PREFERRED_LEADER_NOT_AVAILABLE


def test_preferred_election_of_a_leaderless_partition_elects_an_isr_member() -> None:
    assert elect_leader(part([1, 2, 3], NO_LEADER, [2]), ELECTION_PREFERRED, {2, 3}) == LeaderAndIsr(2, [2])


def test_unclean_election() -> None:
    # a partition with a leader needs none
    assert elect_leader(part([1, 2, 3], 2, [2]), ELECTION_UNCLEAN, {1, 2, 3})[0] == Errors.ELECTION_NOT_NEEDED  # type: ignore[index]
    # clean when an ISR member is back
    assert elect_leader(part([1, 2, 3], NO_LEADER, [3]), ELECTION_UNCLEAN, {1, 3}) == LeaderAndIsr(3, [3])
    # else the first live replica, with an ISR of itself
    assert elect_leader(part([1, 2, 3], NO_LEADER, [3]), ELECTION_UNCLEAN, {2}) == LeaderAndIsr(
        2, [2], unclean=True
    )
    result = elect_leader(part([1, 2, 3], NO_LEADER, [3]), ELECTION_UNCLEAN, {4})
    assert isinstance(result, tuple) and result[0] == Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_the_core_elects_named_partitions_and_every_partition_that_needs_it() -> None:
    from protocol import admin_messages as am
    from tests.unit.controller.support import create_topic, live_core

    core = live_core([1, 2, 3])
    create_topic(core, "t", 2, 3)
    core.drain()
    p0 = core.state.topics["t"].partitions[0]
    preferred = p0.replicas[0]
    p0.leader = p0.replicas[1]  # as after a failover
    epoch = p0.leader_epoch
    # null: every partition, those needing no election left out
    resp = core.elect_leaders(am.ElectLeadersRequest(election_type=ELECTION_PREFERRED, topic_partitions=None))
    assert [
        (r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
        for r in resp.replica_election_results
    ] == [("t", [(0, 0)])]
    assert (p0.leader, p0.leader_epoch) == (preferred, epoch + 1)
    effects = core.drain()
    assert any(
        e == "leader_elected" and f["reason"] == "preferred_leader_election" for e, f in effects.events
    )
    # named: not needed any more, and an unknown partition
    resp = core.elect_leaders(
        am.ElectLeadersRequest(
            topic_partitions=[am.ElectLeadersTopicPartitions(topic="t", partitions=[0, 7])],
        )
    )
    [result] = resp.replica_election_results
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [
        (0, Errors.ELECTION_NOT_NEEDED),
        (7, Errors.UNKNOWN_TOPIC_OR_PARTITION),
    ]
