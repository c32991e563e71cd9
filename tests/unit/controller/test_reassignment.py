"""Partition reassignment in the controller (controller/reassignment.py and the core), as KRaft's
ReplicationControlManager / PartitionReassignmentReplicas do it."""

from __future__ import annotations

from controller.core import ControllerCore
from controller.state import ClusterState, PartitionState
from protocol import admin_messages as am
from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from tests.unit.controller.support import create_topic, live_core


def reassign(
    core: ControllerCore, topic: str, index: int, replicas: list[int] | None
) -> am.AlterPartitionReassignmentsResponse:
    return core.alter_partition_reassignments(
        am.AlterPartitionReassignmentsRequest(
            topics=[
                am.ReassignableTopic(
                    name=topic,
                    partitions=[am.ReassignablePartition(partition_index=index, replicas=replicas)],
                )
            ]
        )
    )


def codes(resp: am.AlterPartitionReassignmentsResponse) -> list[int]:
    return [p.error_code for t in resp.responses for p in t.partitions]


def test_a_replica_is_added_then_the_old_one_removed_once_the_new_one_is_in_sync() -> None:
    core = live_core([1, 2, 3])
    create_topic(core, "t", 1, 2)
    p = core.state.topics["t"].partitions[0]
    p.replicas, p.isr, p.leader = [1, 2], [1, 2], 1
    core.drain()
    assert codes(reassign(core, "t", 0, [2, 3])) == [0]
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader) == (
        [2, 3, 1],
        [3],
        [1],
        [1, 2],
        1,
    )
    effects = core.drain()
    # the new replica is told to follow
    assert any(r.broker_id == 3 for r in effects.requests)
    listed = core.list_partition_reassignments(am.ListPartitionReassignmentsRequest(topics=None))
    assert [
        (t.name, [(q.replicas, q.adding_replicas, q.removing_replicas) for q in t.partitions])
        for t in listed.topics
    ] == [("t", [([2, 3, 1], [3], [1])])]
    # the leader brings 3 into the ISR: the reassignment completes, 1 leaves the ISR and leadership
    epoch = core.state.brokers[1].epoch
    core.alter_partition(
        cm.AlterPartitionRequest(
            broker_id=1,
            broker_epoch=epoch,
            topics=[
                cm.AlterPartitionRequestTopic(
                    topic_name="t",
                    partitions=[
                        cm.AlterPartitionRequestPartition(
                            partition_index=0,
                            leader_epoch=p.leader_epoch,
                            new_isr=[1, 2, 3],
                            partition_epoch=p.partition_epoch,
                        )
                    ],
                )
            ],
        )
    )
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader) == (
        [2, 3],
        [],
        [],
        [2, 3],
        2,
    )
    effects = core.drain()
    stops = [r for r in effects.requests if r.broker_id == 1 and r.api_key == ApiKeys.STOP_REPLICA]
    assert stops, effects.requests
    assert core.list_partition_reassignments(am.ListPartitionReassignmentsRequest()).topics == []
    # the state survives its JSON
    again = ClusterState.from_json(core.state.to_json()).topics["t"].partitions[0]
    assert again == p


def test_cancel_and_refusals() -> None:
    core = live_core([1, 2, 3])
    create_topic(core, "t", 1, 2)
    p = core.state.topics["t"].partitions[0]
    p.replicas, p.isr, p.leader = [1, 2], [1, 2], 1
    assert codes(reassign(core, "t", 0, None)) == [Errors.NO_REASSIGNMENT_IN_PROGRESS]
    assert codes(reassign(core, "t", 0, [])) == [Errors.INVALID_REPLICA_ASSIGNMENT]
    assert codes(reassign(core, "t", 0, [1, 1])) == [Errors.INVALID_REPLICA_ASSIGNMENT]
    assert codes(reassign(core, "t", 0, [1, 9])) == [Errors.INVALID_REPLICA_ASSIGNMENT]
    assert codes(reassign(core, "nope", 0, [1, 2])) == [Errors.UNKNOWN_TOPIC_OR_PARTITION]
    assert codes(reassign(core, "t", 0, [1, 2, 3])) == [0]
    saved = PartitionState(**{f: getattr(p, f) for f in ("replicas", "leader", "leader_epoch", "isr")})
    assert (p.replicas, p.adding_replicas) == ([1, 2, 3], [3])
    core.drain()
    assert codes(reassign(core, "t", 0, None)) == [0]
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr) == ([1, 2], [], [], [1, 2])
    assert saved.leader == p.leader
    effects = core.drain()
    assert any(r.broker_id == 3 and r.api_key == ApiKeys.STOP_REPLICA for r in effects.requests)
