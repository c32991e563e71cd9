"""The pure election, ISR and ALTER_PARTITION rules."""

from __future__ import annotations

import pytest

from controller import elections as el
from controller.state import NO_LEADER, PartitionState
from protocol.common import validate_topic_name
from protocol.errors import Errors


class TestOfflineElection:
    def test_first_live_isr_member_in_assignment_order(self) -> None:
        assert el.offline_partition_leader_election([1, 2, 3], [3, 2], {2, 3}, False) == (2, False)

    def test_assignment_order_not_isr_order(self) -> None:
        assert el.offline_partition_leader_election([3, 1, 2], [1, 2, 3], {1, 2, 3}, False) == (3, False)

    def test_live_replica_outside_isr_is_not_elected_when_clean(self) -> None:
        assert el.offline_partition_leader_election([1, 2, 3], [1], {2, 3}, False) == (None, False)

    def test_unclean_picks_first_live_replica(self) -> None:
        assert el.offline_partition_leader_election([1, 2, 3], [1], {3, 2}, True) == (2, True)

    def test_unclean_still_prefers_isr(self) -> None:
        assert el.offline_partition_leader_election([1, 2, 3], [3], {2, 3}, True) == (3, False)

    def test_nobody_live(self) -> None:
        assert el.offline_partition_leader_election([1, 2], [1, 2], set(), True) == (None, False)

    def test_clean_new_isr_keeps_live_members(self) -> None:
        p = PartitionState([1, 2, 3], 1, 5, [1, 2, 3])
        change = el.elect_offline_leader(p, {2, 3}, False)
        assert change == el.LeaderAndIsr(2, [2, 3], False)

    def test_unclean_new_isr_is_the_leader_alone(self) -> None:
        p = PartitionState([1, 2, 3], 1, 5, [1])
        assert el.elect_offline_leader(p, {2, 3}, True) == el.LeaderAndIsr(2, [2], True)

    def test_shutting_down_broker_may_not_lead_but_stays_in_isr(self) -> None:
        p = PartitionState([1, 2, 3], 1, 5, [1, 2, 3])
        assert el.elect_offline_leader(p, {2, 3}, False, shutting_down={2}) == el.LeaderAndIsr(3, [2, 3])

    def test_no_candidate(self) -> None:
        p = PartitionState([1, 2], 1, 5, [1])
        assert el.elect_offline_leader(p, {2}, False) is None


class TestControlledShutdownElection:
    def test_skips_shutting_down_brokers(self) -> None:
        assert el.controlled_shutdown_partition_leader_election([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}) == 3

    def test_never_unclean(self) -> None:
        assert el.controlled_shutdown_partition_leader_election([1, 2, 3], [1], {1, 2, 3}, {1}) is None


class TestControlledShutdownChange:
    """KRaft's handleBrokerInControlledShutdown for one partition, without ELR."""

    def test_leader_moves_to_the_next_live_isr_member_and_the_broker_leaves_the_isr(self) -> None:
        p = PartitionState([1, 2, 3], 1, 0, [1, 2, 3])
        assert el.controlled_shutdown_change(p, 1, {1, 2, 3}, {1}) == el.LeaderAndIsr(2, [2, 3])

    def test_a_dead_isr_member_is_not_elected(self) -> None:
        p = PartitionState([1, 2, 3], 1, 0, [1, 2, 3])
        assert el.controlled_shutdown_change(p, 1, {1, 3}, {1}) == el.LeaderAndIsr(3, [2, 3])

    def test_a_follower_only_leaves_the_isr(self) -> None:
        p = PartitionState([1, 2, 3], 1, 0, [1, 2, 3])
        assert el.controlled_shutdown_change(p, 2, {1, 2, 3}, {2}) == el.LeaderAndIsr(1, [1, 3])

    def test_the_last_isr_member_goes_leaving_no_leader_and_the_isr_kept(self) -> None:
        p = PartitionState([1, 2], 1, 0, [1])
        assert el.controlled_shutdown_change(p, 1, {1, 2}, {1}) == el.LeaderAndIsr(NO_LEADER, [1])

    def test_nothing_to_change(self) -> None:
        p = PartitionState([1, 2], 2, 0, [2])
        assert el.controlled_shutdown_change(p, 1, {1, 2}, {1}) is None


class TestRemoveReplicaFromIsr:
    def test_follower_leaves(self) -> None:
        p = PartitionState([1, 2, 3], 1, 0, [1, 2, 3])
        assert el.remove_replica_from_isr(p, 2) == el.LeaderAndIsr(1, [1, 3])

    def test_leader_leaves_partition_has_no_leader(self) -> None:
        p = PartitionState([1, 2, 3], 1, 0, [1, 2])
        assert el.remove_replica_from_isr(p, 1) == el.LeaderAndIsr(NO_LEADER, [2])

    def test_last_isr_member_stays(self) -> None:
        p = PartitionState([1, 2, 3], 1, 0, [1])
        assert el.remove_replica_from_isr(p, 1) == el.LeaderAndIsr(NO_LEADER, [1])

    def test_not_in_isr_nothing_to_do(self) -> None:
        p = PartitionState([1, 2, 3], 1, 0, [1, 2])
        assert el.remove_replica_from_isr(p, 3) is None

    def test_offline_partition_with_last_member_unchanged(self) -> None:
        p = PartitionState([1, 2], NO_LEADER, 3, [1])
        assert el.remove_replica_from_isr(p, 1) is None


class TestTopicNames:
    @pytest.mark.parametrize("name", ["a", "my-topic_1.x", "A" * 249])
    def test_legal(self, name: str) -> None:
        assert validate_topic_name(name) is None

    @pytest.mark.parametrize("name", ["", ".", "..", "a b", "a/b", "ü", "A" * 250])
    def test_illegal(self, name: str) -> None:
        assert validate_topic_name(name) is not None


def _never(_: int) -> str | None:
    return None


class TestValidateAlterPartition:
    p = PartitionState([1, 2, 3], 1, 4, [1, 2], partition_epoch=7)

    def check(
        self, broker: int, leader_epoch: int, partition_epoch: int, isr: list[int], ineligible=_never
    ) -> Errors:  # type: ignore[no-untyped-def]
        return el.validate_alter_partition(self.p, broker, leader_epoch, partition_epoch, isr, ineligible)[0]

    def test_valid(self) -> None:
        assert self.check(1, 4, 7, [1, 2, 3]) == Errors.NONE

    def test_older_leader_epoch_is_fenced(self) -> None:
        assert self.check(1, 3, 7, [1, 2, 3]) == Errors.FENCED_LEADER_EPOCH

    def test_newer_leader_epoch_means_controller_behind(self) -> None:
        assert self.check(1, 5, 7, [1, 2, 3]) == Errors.NOT_CONTROLLER

    def test_newer_partition_epoch_means_controller_behind(self) -> None:
        assert self.check(1, 4, 8, [1, 2, 3]) == Errors.NOT_CONTROLLER

    def test_older_partition_epoch(self) -> None:
        assert self.check(1, 4, 6, [1, 2, 3]) == Errors.INVALID_UPDATE_VERSION

    def test_a_retry_of_a_change_already_made_gets_the_current_state(self) -> None:
        # The leader proposed [1, 2] at partition epoch 6, the controller made it (epoch 7), the answer was
        # lost and the leader asks again: not INVALID_UPDATE_VERSION (Kafka's
        # equalsAllowStalePartitionEpoch), in any order of the members; the leader epoch is still checked.
        assert self.check(1, 4, 6, [1, 2]) == Errors.NONE
        assert self.check(1, 4, 3, [2, 1]) == Errors.NONE
        assert self.check(1, 3, 6, [1, 2]) == Errors.FENCED_LEADER_EPOCH
        assert self.check(2, 4, 6, [1, 2]) == Errors.INVALID_REQUEST

    def test_not_the_leader(self) -> None:
        assert self.check(2, 4, 7, [1, 2]) == Errors.INVALID_REQUEST

    def test_fenced_leader_epoch_checked_before_leadership(self) -> None:
        assert self.check(2, 3, 7, [1, 2]) == Errors.FENCED_LEADER_EPOCH

    @pytest.mark.parametrize("isr", [[], [1, 1], [1, 4], [2, 3]])
    def test_invalid_isr(self, isr: list[int]) -> None:
        assert self.check(1, 4, 7, isr) == Errors.INVALID_REQUEST

    def test_ineligible_member(self) -> None:
        def ineligible(b: int) -> str | None:
            return "fenced" if b == 3 else None

        assert self.check(1, 4, 7, [1, 2, 3], ineligible) == Errors.INELIGIBLE_REPLICA
        assert self.check(1, 4, 7, [1, 2], ineligible) == Errors.NONE
