"""Partition reassignment as KRaft's ``ReplicationControlManager`` and ``PartitionReassignmentReplicas`` make
it, pure (docs/controller.md): a target replica set first adds the new replicas (the partition's replicas
become the target followed by those being removed, ``adding_replicas`` and ``removing_replicas`` recorded),
the leader brings the new ones into the ISR as they catch up, and once every target replica is in the ISR
the reassignment completes: the replicas become the target, the removed ones leave the ISR (and lead no
more), and they are stopped and deleted. A null target cancels an ongoing reassignment: the original replicas
come back and the added ones go."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from controller.state import NO_LEADER, PartitionState
from protocol.errors import Errors


@dataclass(frozen=True, slots=True)
class ReplicaChange:
    """A partition's new replicas, ISR and leader, and the brokers whose replicas go."""

    replicas: list[int]
    isr: list[int]
    leader: int
    adding: list[int]
    removing: list[int]
    stopped: list[int]


def original_replicas(p: PartitionState) -> list[int]:
    """The replicas before the ongoing reassignment (all of them when there is none)."""
    return [r for r in p.replicas if r not in p.adding_replicas]


def target_replicas(p: PartitionState) -> list[int]:
    return [r for r in p.replicas if r not in p.removing_replicas]


def validate_target(
    target: list[int], registered: Collection[int], current_size: int, allow_rf_change: bool
) -> tuple[Errors, str] | None:
    if not target:
        return (
            Errors.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    if len(set(target)) != len(target):
        return (
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment {target} includes duplicate replicas.",
        )
    for r in target:
        if r not in registered:
            return (
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {r}, but no such broker is registered.",
            )
    if not allow_rf_change and len(target) != current_size:
        return (
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"The replication factor is changed from {current_size} to {len(target)}, which is not allowed",
        )
    return None


def start_reassignment(p: PartitionState, target: list[int], acceptable: Collection[int]) -> ReplicaChange:
    """The partition's state once ``target`` is asked for (over any ongoing reassignment, which is replaced;
    replicas it had added and the new target drops are stopped). Completes at once when the ISR holds the
    whole target already."""
    original = original_replicas(p)
    adding = [r for r in target if r not in original]
    removing = [r for r in original if r not in target]
    replicas = list(target) + removing
    stopped = [r for r in p.replicas if r not in replicas]
    isr = [r for r in p.isr if r in replicas]
    leader = p.leader if p.leader in isr else _first(replicas, isr, acceptable)
    change = ReplicaChange(replicas, isr or list(p.isr), leader, adding, removing, stopped)
    return maybe_complete(change, acceptable) or change


def cancel_reassignment(p: PartitionState, acceptable: Collection[int]) -> ReplicaChange:
    """Back to the original replicas: the added ones leave the ISR and are stopped."""
    original = original_replicas(p)
    isr = [r for r in p.isr if r in original] or list(p.isr)
    leader = p.leader if p.leader in original and p.leader in isr else _first(original, isr, acceptable)
    return ReplicaChange(original, isr, leader, [], [], list(p.adding_replicas))


def maybe_complete(change: ReplicaChange, acceptable: Collection[int]) -> ReplicaChange | None:
    """KRaft's ``isReassignmentComplete`` / ``completeReassignmentIfNeeded``: when every target replica is in
    the ISR, the replicas become the target and the removed ones leave the ISR and leadership."""
    if not change.adding and not change.removing:
        return None
    target = [r for r in change.replicas if r not in change.removing]
    if not all(r in change.isr for r in target):
        return None
    isr = [r for r in change.isr if r not in change.removing]
    leader = change.leader if change.leader in isr else _first(target, isr, acceptable)
    return ReplicaChange(target, isr, leader, [], [], [*change.stopped, *change.removing])


def ongoing(p: PartitionState) -> ReplicaChange:
    return ReplicaChange(
        list(p.replicas), list(p.isr), p.leader, list(p.adding_replicas), list(p.removing_replicas), []
    )


def _first(replicas: list[int], isr: list[int], acceptable: Collection[int]) -> int:
    return next((r for r in replicas if r in isr and r in acceptable), NO_LEADER)
