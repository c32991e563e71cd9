"""The controller's decisions as pure functions (no I/O, no clock, no state of their own).

Kafka's names: ``offline_partition_leader_election`` and ``controlled_shutdown_partition_leader_election``
are ``PartitionLeaderElectionAlgorithms``; ``remove_replica_from_isr`` is the ZooKeeper-era
``ReplicaStateMachine.doRemoveReplicasFromIsr``; ``assign_replicas_to_brokers`` is
``AdminUtils.assignReplicasToBrokers`` (rack unaware); ``validate_alter_partition`` follows KRaft's
``ReplicationControlManager.validateAlterPartitionData``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from controller.state import NO_LEADER, PartitionState
from protocol.errors import Errors

# ------------------------------------------------------------------------------------------ elections


def offline_partition_leader_election(
    assignment: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    unclean_leader_election_enabled: bool,
) -> tuple[int | None, bool]:
    """The first live replica, in assignment order, that is in the ISR; failing that, if unclean
    election is enabled, the first live replica at all. Returns (leader or None, unclean)."""
    for replica in assignment:
        if replica in live and replica in isr:
            return replica, False
    if unclean_leader_election_enabled:
        for replica in assignment:
            if replica in live:
                return replica, True
    return None, False


def controlled_shutdown_partition_leader_election(
    assignment: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    """The first live ISR replica, in assignment order, that is not shutting down (never unclean)."""
    for replica in assignment:
        if replica in live and replica in isr and replica not in shutting_down:
            return replica
    return None


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A new leader / ISR for one partition, before it is applied."""

    leader: int
    isr: list[int]
    unclean: bool = False


def elect_offline_leader(
    p: PartitionState,
    live: Collection[int],
    unclean_enabled: bool,
    shutting_down: Collection[int] = (),
) -> LeaderAndIsr | None:
    """Kafka's offline election applied: a clean leader keeps the live part of the ISR, an unclean one
    starts a new ISR of itself alone. Brokers shutting down may stay in the ISR but not lead (KRaft's
    ``isAcceptableLeader``). None: nobody can lead."""
    candidates = [r for r in live if r not in shutting_down]
    leader, unclean = offline_partition_leader_election(p.replicas, p.isr, candidates, unclean_enabled)
    if leader is None:
        return None
    isr = [leader] if unclean else [r for r in p.isr if r in live]
    return LeaderAndIsr(leader, isr, unclean)


def controlled_shutdown_change(
    p: PartitionState, broker_id: int, live: Collection[int], shutting_down: Collection[int]
) -> LeaderAndIsr | None:
    """KRaft's ``handleBrokerInControlledShutdown`` for one partition of ``broker_id``
    (``generateLeaderAndIsrUpdates`` with ``PartitionChangeBuilder``, without ELR): the broker leaves the
    ISR unless it is its last member (an ISR is never emptied); the current leader stays if it is still
    in that ISR and may lead (live, not shutting down), else the first such replica in assignment order
    leads, else nobody: the leader becomes NO_LEADER and the ISR keeps its last member, which leads again
    when it returns. Never unclean. None if nothing changes."""
    isr = [r for r in p.isr if r != broker_id] or list(p.isr)

    def acceptable(r: int) -> bool:
        return r != broker_id and r in isr and r in live and r not in shutting_down

    if p.leader != NO_LEADER and acceptable(p.leader):
        leader = p.leader
    else:
        leader = next((r for r in p.replicas if acceptable(r)), NO_LEADER)
    if leader == p.leader and isr == p.isr:
        return None
    return LeaderAndIsr(leader, isr)


def remove_replica_from_isr(p: PartitionState, replica: int) -> LeaderAndIsr | None:
    """A replica that went offline leaves the ISR; if it led, the partition has no leader. The ISR is
    never emptied: its last member stays (it holds every committed record, and is the only clean
    choice when it returns). None if nothing changes."""
    if replica not in p.isr and p.leader != replica:
        return None
    new_leader = NO_LEADER if p.leader == replica else p.leader
    new_isr = list(p.isr) if len(p.isr) == 1 else [r for r in p.isr if r != replica]
    if new_leader == p.leader and new_isr == p.isr:
        return None
    return LeaderAndIsr(new_leader, new_isr)


# ------------------------------------------------------------------------------------------ assignment


def assign_replicas_to_brokers(
    broker_ids: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: partition p's first replica is broker ``(p + start) % n``
    (brokers sorted), the followers are shifted by ``1 + (shift + j) % (n - 1)``, and the shift grows
    by one every ``n`` partitions, so leaders and followers both spread evenly. The random start index
    and shift come from ``rng`` (the same ``fixed_start_index`` for both when given)."""
    brokers = sorted(broker_ids)
    n = len(brokers)
    if num_partitions <= 0:
        raise ValueError("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise ValueError("replication factor must be larger than 0")
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} larger than available brokers {n}")
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition_id = max(0, start_partition_id)
    out: dict[int, list[int]] = {}
    for _ in range(num_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[_replica_index(first, shift, j, n)])
        out[partition_id] = replicas
        partition_id += 1
    return out


def _replica_index(first: int, second_replica_shift: int, replica_index: int, n: int) -> int:
    shift = 1 + (second_replica_shift + replica_index) % (n - 1)
    return (first + shift) % n


# ------------------------------------------------------------------------------------- ALTER_PARTITION


def validate_alter_partition(
    p: PartitionState,
    broker_id: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: Sequence[int],
    ineligible: Callable[[int], str | None],
) -> tuple[Errors, str]:
    """KRaft's checks, in KRaft's order, of a leader's proposed ISR. ``ineligible(b)`` says why broker
    ``b`` may not be in an ISR (not registered, fenced, shutting down), or None.

    A leader epoch above the controller's, or a partition epoch above it, means this controller is
    behind: NOT_CONTROLLER. An older leader epoch: FENCED_LEADER_EPOCH. Not the leader: INVALID_REQUEST.
    An older partition epoch: INVALID_UPDATE_VERSION, unless the partition already has the proposed ISR: then
    the proposal is a retry of a change this controller made but whose answer the leader never got (lost on
    the network, or a failover between the change and its answer), and it is answered NONE with the current
    state (Kafka's ``LeaderAndIsr.equalsAllowStalePartitionEpoch``, checked before the partition epoch "to
    maintain idempotency"), so the leader learns the ISR and partition epoch it missed. An ISR with unknown
    or repeated replicas or without the leader: INVALID_REQUEST. A member other than the leader that may not
    be in an ISR: INELIGIBLE_REPLICA."""
    if leader_epoch > p.leader_epoch:
        return Errors.NOT_CONTROLLER, (
            f"leader epoch {leader_epoch} is newer than the controller's {p.leader_epoch}"
        )
    if partition_epoch > p.partition_epoch:
        return Errors.NOT_CONTROLLER, (
            f"partition epoch {partition_epoch} is newer than the controller's {p.partition_epoch}"
        )
    if leader_epoch < p.leader_epoch:
        return Errors.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} is older than {p.leader_epoch}"
    if broker_id != p.leader:
        return Errors.INVALID_REQUEST, f"broker {broker_id} is not the leader (leader is {p.leader})"
    if partition_epoch < p.partition_epoch and sorted(new_isr) == sorted(p.isr):
        return Errors.NONE, ""  # already in the proposed state: the retry gets the current one
    if partition_epoch < p.partition_epoch:
        return Errors.INVALID_UPDATE_VERSION, (
            f"partition epoch {partition_epoch} is older than {p.partition_epoch}"
        )
    if not new_isr or len(set(new_isr)) != len(new_isr) or any(r not in p.replicas for r in new_isr):
        return Errors.INVALID_REQUEST, f"ISR {list(new_isr)} is not a set of replicas of {p.replicas}"
    if p.leader not in new_isr:
        return Errors.INVALID_REQUEST, f"ISR {list(new_isr)} does not include the leader {p.leader}"
    # The leader itself is not checked (KRaft checks it too): a leader in controlled shutdown must still
    # be able to add a caught-up follower, so that it has someone to hand its leadership to.
    reasons = [f"{b} ({why})" for b in new_isr if b != p.leader and (why := ineligible(b)) is not None]
    if reasons:
        return Errors.INELIGIBLE_REPLICA, "ineligible replicas in the new ISR: " + ", ".join(reasons)
    return Errors.NONE, ""


__all__ = [
    "LeaderAndIsr",
    "assign_replicas_to_brokers",
    "controlled_shutdown_change",
    "controlled_shutdown_partition_leader_election",
    "elect_offline_leader",
    "offline_partition_leader_election",
    "remove_replica_from_isr",
    "validate_alter_partition",
]
