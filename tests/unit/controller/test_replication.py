"""Elections and ISR changes the controller makes (fencing, controlled shutdown) and the ones leaders
ask for (ALTER_PARTITION), with the requests and journal events they produce."""

from __future__ import annotations

import pytest

from controller.core import ControllerCore
from controller.state import NO_LEADER, PartitionState
from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from tests.unit.controller.support import (
    SESSION_MS,
    create_topic,
    events_named,
    heartbeat,
    lair_partitions,
    live_core,
    requests_by,
    set_partition,
)


def fence(core: ControllerCore, broker: int) -> None:
    """Fences ``broker`` by letting its session expire while the others heartbeat."""
    now = max(core._last_contact.values()) + SESSION_MS
    for b, reg in core.state.brokers.items():
        if b != broker and not reg.fenced:
            heartbeat(core, b, now_ms=now)
    assert broker in core.tick(now + 1)


class TestBrokerFailure:
    def test_leader_failure_elects_the_next_isr_member(self) -> None:
        core = live_core([1, 2, 3])
        set_partition(core, "t", 0, PartitionState([1, 2, 3], 1, 4, [1, 2, 3], 6))
        fence(core, 1)
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, [2, 3], 5, 7)
        effects = core.drain()
        assert events_named(effects, "leader_elected") == [
            {
                "topic": "t",
                "partition": 0,
                "leader_id": 2,
                "previous_leader_id": 1,
                "unclean": False,
                "leader_epoch": 5,
                "isr": [2, 3],
                "partition_epoch": 7,
                "reason": "broker_session_timeout",
            }
        ]
        lair = requests_by(effects, ApiKeys.LEADER_AND_ISR)
        assert set(lair) == {2, 3}  # not the fenced broker
        assert lair_partitions(lair[2])[("t", 0)].leader == 2
        um = requests_by(effects, ApiKeys.UPDATE_METADATA)
        assert set(um) == {2, 3}
        body = um[2].body
        assert isinstance(body, cm.UpdateMetadataRequest)
        assert body.topic_states[0].partition_states[0].offline_replicas == [1]
        assert [b.id for b in body.live_brokers] == [2, 3]

    def test_follower_failure_shrinks_the_isr_in_the_same_leader_epoch(self) -> None:
        # KRaft since metadata version 3.6 (KAFKA-15021): an ISR shrink with the same leader bumps only the
        # partition epoch; the replicas still get a LEADER_AND_ISR with the new ISR.
        core = live_core([1, 2, 3])
        set_partition(core, "t", 0, PartitionState([1, 2, 3], 1, 4, [1, 2, 3], 6))
        fence(core, 3)
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, [1, 2], 4, 7)
        effects = core.drain()
        changed = events_named(effects, "isr_changed")[0]
        assert (changed["isr"], changed["leader_epoch"], changed["partition_epoch"]) == ([1, 2], 4, 7)
        lair = requests_by(effects, ApiKeys.LEADER_AND_ISR)
        assert set(lair) == {1, 2}
        state = lair_partitions(lair[2])[("t", 0)]
        assert (state.leader_epoch, state.partition_epoch, state.isr) == (4, 7, [1, 2])

    def test_leader_failure_bumps_the_leader_epoch(self) -> None:
        core = live_core([1, 2, 3])
        set_partition(core, "t", 0, PartitionState([1, 2, 3], 1, 4, [1, 2, 3], 6))
        fence(core, 1)
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, [2, 3], 5, 7)

    def test_replica_outside_the_isr_changes_nothing_but_metadata(self) -> None:
        core = live_core([1, 2, 3])
        set_partition(core, "t", 0, PartitionState([1, 2, 3], 1, 4, [1, 2], 6))
        fence(core, 3)
        assert core.state.topics["t"].partitions[0].leader_epoch == 4
        effects = core.drain()
        assert requests_by(effects, ApiKeys.LEADER_AND_ISR) == {}
        assert set(requests_by(effects, ApiKeys.UPDATE_METADATA)) == {1, 2}

    def test_no_isr_member_left_unclean_disabled_goes_offline(self) -> None:
        core = live_core([1, 2])
        set_partition(core, "t", 0, PartitionState([1, 2], 1, 4, [1], 6))
        fence(core, 1)
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, [1], 5)

    def test_unclean_election_when_enabled(self) -> None:
        core = live_core([1, 2], unclean=True)
        set_partition(core, "t", 0, PartitionState([1, 2], 1, 4, [1], 6))
        fence(core, 1)
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr, p.leader_epoch) == (2, [2], 5)
        assert events_named(core.drain(), "leader_elected")[0]["unclean"] is True

    @pytest.mark.parametrize(("default", "topic", "leader"), [(False, "true", 2), (True, "false", NO_LEADER)])
    def test_topic_config_overrides_the_default(self, default: bool, topic: str, leader: int) -> None:
        core = live_core([1, 2], unclean=default)
        assert create_topic(core, "t", 1, 2, {"unclean.leader.election.enable": topic}).error_code == 0
        p = core.state.topics["t"].partitions[0]
        p.replicas, p.leader, p.isr = [1, 2], 1, [1]
        fence(core, 1)
        assert core.state.topics["t"].partitions[0].leader == leader

    def test_one_request_per_broker_for_many_partitions(self) -> None:
        core = live_core([1, 2, 3])
        assert create_topic(core, "many", 30, 3).error_code == 0
        core.drain()
        fence(core, 2)
        effects = core.drain()  # requests_by asserts one request per broker and API
        lair = requests_by(effects, ApiKeys.LEADER_AND_ISR)
        assert set(lair) == {1, 3}
        assert len(lair_partitions(lair[1])) == 30
        for p in core.state.topics["many"].partitions.values():
            assert 2 not in p.isr and p.leader != 2


class TestControlledShutdown:
    def shutdown(
        self, core: ControllerCore, broker: int, epoch: int | None = None
    ) -> cm.ControlledShutdownResponse:
        reg = core.state.brokers[broker]
        return core.controlled_shutdown(
            cm.ControlledShutdownRequest(broker_id=broker, broker_epoch=reg.epoch if epoch is None else epoch)
        )

    def test_moves_leaderships_and_leaves_isrs(self) -> None:
        core = live_core([1, 2, 3])
        set_partition(core, "t", 0, PartitionState([1, 2, 3], 1, 0, [1, 2, 3]))
        set_partition(core, "t", 1, PartitionState([2, 1, 3], 2, 0, [2, 1, 3]))
        set_partition(core, "solo", 0, PartitionState([1], 1, 0, [1]))
        resp = self.shutdown(core, 1)
        assert resp.error_code == 0 and resp.remaining_partitions == []
        t0, t1 = core.state.topics["t"].partitions[0], core.state.topics["t"].partitions[1]
        assert (t0.leader, t0.isr, t0.leader_epoch, t0.partition_epoch) == (2, [2, 3], 1, 1)
        # Led by 2 already: only the ISR shrinks, in the same leader epoch (KAFKA-15021).
        assert (t1.leader, t1.isr, t1.leader_epoch, t1.partition_epoch) == (2, [2, 3], 0, 1)
        # Not replicated: nobody else can lead, so it goes offline with its ISR kept (KRaft without ELR).
        solo = core.state.topics["solo"].partitions[0]
        assert (solo.leader, solo.isr, solo.leader_epoch) == (-1, [1], 1)
        assert core.state.brokers[1].in_controlled_shutdown
        effects = core.drain()
        assert events_named(effects, "broker_shutting_down") == [
            {"broker_id": 1, "broker_epoch": core.state.brokers[1].epoch}
        ]
        assert [e["reason"] for e in events_named(effects, "leader_elected")] == [
            "controlled_shutdown",
            "controlled_shutdown",
        ]
        assert lair_partitions(requests_by(effects, ApiKeys.LEADER_AND_ISR)[1])[("t", 0)].leader == 2
        stop = requests_by(effects, ApiKeys.STOP_REPLICA)
        assert set(stop) == {1}
        body = stop[1].body
        assert isinstance(body, cm.StopReplicaRequest)
        assert [
            (t.topic_name, p.partition_index, p.delete_partition)
            for t in body.topic_states
            for p in t.partition_states
        ] == [("t", 1, False)]
        # Per broker, Kafka's order: LEADER_AND_ISR, UPDATE_METADATA, STOP_REPLICA.
        assert [r.api_key for r in effects.requests if r.broker_id == 1] == [
            ApiKeys.LEADER_AND_ISR,
            ApiKeys.UPDATE_METADATA,
            ApiKeys.STOP_REPLICA,
        ]

    def test_last_isr_member_goes_and_leaves_the_partition_offline(self) -> None:
        # KRaft without ELR: the leader that is the last ISR member is let go at once; the partition has no
        # leader and keeps it as its ISR, so it is the one clean choice when it returns.
        core = live_core([1, 2])
        set_partition(core, "t", 0, PartitionState([1, 2], 1, 3, [1], 5))
        resp = self.shutdown(core, 1)
        assert resp.error_code == 0 and resp.remaining_partitions == []
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (-1, [1], 4, 6)
        effects = core.drain()
        [elected] = events_named(effects, "leader_elected")
        assert (elected["leader_id"], elected["previous_leader_id"], elected["isr"]) == (-1, 1, [1])
        # Both replicas hear of it (2 stops fetching from 1), every live broker gets the metadata.
        assert set(requests_by(effects, ApiKeys.LEADER_AND_ISR)) == {1, 2}
        # The broker comes back: it leads again, in a new epoch.
        fence(core, 1)
        core.drain()
        heartbeat(core, 1)
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr, p.leader_epoch) == (1, [1], 5)

    def test_follower_that_is_the_last_isr_member_with_the_leader_gone_stays_in_it(self) -> None:
        core = live_core([1, 2, 3])
        set_partition(core, "t", 0, PartitionState([1, 2, 3], 2, 3, [2, 1], 5))
        self.shutdown(core, 2)  # the leader goes first: 1 leads with ISR [1]
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr) == (1, [1])
        self.shutdown(core, 1)  # then the last ISR member
        assert (p.leader, p.isr, p.leader_epoch) == (-1, [1], 5)
        assert core.state.brokers[1].in_controlled_shutdown

    def test_every_broker_learns_the_shutting_down_broker_is_no_longer_live(self) -> None:
        # UPDATE_METADATA leaves it out of the live brokers, so leaders stop counting it for their HW and
        # ISR (KRaft's brokers see its controlled-shutdown state, KIP-841).
        core = live_core([1, 2, 3])
        self.shutdown(core, 3)
        um = requests_by(core.drain(), ApiKeys.UPDATE_METADATA)
        assert set(um) == {1, 2, 3}
        for request in um.values():
            assert isinstance(request.body, cm.UpdateMetadataRequest)
            assert sorted(b.id for b in request.body.live_brokers) == [1, 2]

    def test_shutting_down_broker_may_not_rejoin_an_isr(self) -> None:
        core = live_core([1, 2])
        set_partition(core, "t", 0, PartitionState([1, 2], 1, 0, [1]))
        self.shutdown(core, 2)
        resp = core.alter_partition(
            cm.AlterPartitionRequest(
                broker_id=1,
                broker_epoch=core.state.brokers[1].epoch,
                topics=[
                    cm.AlterPartitionRequestTopic(
                        topic_name="t",
                        partitions=[
                            cm.AlterPartitionRequestPartition(
                                partition_index=0, leader_epoch=0, new_isr=[1, 2], partition_epoch=0
                            )
                        ],
                    )
                ],
            )
        )
        assert resp.topics[0].partitions[0].error_code == Errors.INELIGIBLE_REPLICA

    def test_errors(self) -> None:
        core = live_core([1])
        assert self.shutdown(core, 1, epoch=0).error_code == Errors.STALE_BROKER_EPOCH
        unknown = core.controlled_shutdown(cm.ControlledShutdownRequest(broker_id=9, broker_epoch=1))
        assert unknown.error_code == Errors.BROKER_ID_NOT_REGISTERED
        assert self.shutdown(core, 1, epoch=-1).error_code == 0  # -1: no epoch check

    def test_heartbeat_want_shut_down_fences_once_done(self) -> None:
        core = live_core([1, 2])
        set_partition(core, "t", 0, PartitionState([1, 2], 1, 0, [1, 2]))
        resp = heartbeat(core, 1, want_shut_down=True)
        assert resp.should_shut_down and resp.is_fenced
        assert core.state.topics["t"].partitions[0].leader == 2
        effects = core.drain()
        assert events_named(effects, "broker_fenced")[0]["reason"] == "controlled_shutdown"
        again = heartbeat(core, 1, want_shut_down=True)
        assert again.should_shut_down and again.is_fenced

    def test_heartbeat_want_shut_down_does_not_wait_for_a_leadership_nobody_can_take(self) -> None:
        core = live_core([1, 2])
        set_partition(core, "t", 0, PartitionState([1, 2], 1, 0, [1]))
        resp = heartbeat(core, 1, want_shut_down=True)
        assert resp.should_shut_down and resp.is_fenced
        p = core.state.topics["t"].partitions[0]
        assert (p.leader, p.isr) == (-1, [1])


def alter(
    core: ControllerCore,
    broker: int,
    isr: list[int],
    leader_epoch: int,
    partition_epoch: int,
    broker_epoch: int | None = None,
    topic: str = "t",
) -> cm.AlterPartitionResponse:
    return core.alter_partition(
        cm.AlterPartitionRequest(
            broker_id=broker,
            broker_epoch=core.state.brokers[broker].epoch if broker_epoch is None else broker_epoch,
            topics=[
                cm.AlterPartitionRequestTopic(
                    topic_name=topic,
                    partitions=[
                        cm.AlterPartitionRequestPartition(
                            partition_index=0,
                            leader_epoch=leader_epoch,
                            new_isr=isr,
                            partition_epoch=partition_epoch,
                        )
                    ],
                )
            ],
        )
    )


class TestAlterPartition:
    def core(self) -> ControllerCore:
        core = live_core([1, 2, 3])
        set_partition(core, "t", 0, PartitionState([1, 2, 3], 1, 4, [1, 2], 7))
        return core

    def test_expansion_commits_and_bumps_only_the_partition_epoch(self) -> None:
        core = self.core()
        resp = alter(core, 1, [1, 2, 3], 4, 7)
        assert resp.error_code == 0
        got = resp.topics[0].partitions[0]
        assert (got.error_code, got.leader_id, got.leader_epoch, got.isr, got.partition_epoch) == (
            0,
            1,
            4,
            [1, 2, 3],
            8,
        )
        effects = core.drain()
        assert effects.dirty
        assert events_named(effects, "isr_changed") == [
            {
                "topic": "t",
                "partition": 0,
                "leader_id": 1,
                "isr": [1, 2, 3],
                "partition_epoch": 8,
                "leader_epoch": 4,
                "reason": "alter_partition",
            }
        ]
        assert requests_by(effects, ApiKeys.LEADER_AND_ISR) == {}
        assert set(requests_by(effects, ApiKeys.UPDATE_METADATA)) == {1, 2, 3}

    def test_shrink(self) -> None:
        core = self.core()
        assert alter(core, 1, [1], 4, 7).topics[0].partitions[0].isr == [1]

    def test_same_isr_changes_nothing(self) -> None:
        core = self.core()
        got = alter(core, 1, [1, 2], 4, 7).topics[0].partitions[0]
        assert (got.error_code, got.partition_epoch) == (0, 7)
        assert not core.drain().dirty

    def test_stale_broker_epoch(self) -> None:
        core = self.core()
        resp = alter(core, 1, [1, 2, 3], 4, 7, broker_epoch=0)
        assert resp.error_code == Errors.STALE_BROKER_EPOCH and resp.topics == []

    def test_unknown_partition(self) -> None:
        core = self.core()
        got = alter(core, 1, [1], 0, 0, topic="nope").topics[0].partitions[0]
        assert got.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION

    def test_error_carries_the_state_the_controller_holds(self) -> None:
        core = self.core()
        got = alter(core, 1, [1, 2, 3], 4, 6).topics[0].partitions[0]
        assert (got.error_code, got.leader_epoch, got.isr, got.partition_epoch) == (
            Errors.INVALID_UPDATE_VERSION,
            4,
            [1, 2],
            7,
        )
        assert not core.drain().dirty

    def test_fenced_replica_is_ineligible(self) -> None:
        core = self.core()
        fence(core, 3)
        p = core.state.topics["t"].partitions[0]
        got = alter(core, 1, [1, 2, 3], p.leader_epoch, p.partition_epoch).topics[0].partitions[0]
        assert got.error_code == Errors.INELIGIBLE_REPLICA

    def test_proposal_from_before_a_controller_change_is_fenced(self) -> None:
        core = self.core()
        fence(core, 2)  # the controller shrinks the ISR: partition epoch 8, leader epoch still 4
        got = alter(core, 1, [1, 2, 3], 4, 7).topics[0].partitions[0]
        assert got.error_code == Errors.INVALID_UPDATE_VERSION
        assert (got.leader_epoch, got.partition_epoch, got.isr) == (4, 8, [1])

    def test_proposal_from_an_older_leader_epoch_is_fenced(self) -> None:
        core = self.core()
        fence(core, 1)  # the leader fails: 2 leads in epoch 5
        got = alter(core, 1, [1, 2], 4, 7).topics[0].partitions[0]
        assert got.error_code == Errors.FENCED_LEADER_EPOCH
        assert (got.leader_id, got.leader_epoch, got.isr) == (2, 5, [2])
