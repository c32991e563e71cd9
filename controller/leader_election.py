"""ELECT_LEADERS (43) as KRaft's ``ReplicationControlManager.electLeaders`` decides it, pure: for one
partition the new leader of a preferred or an unclean election (``PartitionChangeBuilder``'s elections),
or Kafka's error. The controller core applies a change like any other leader change (docs/controller.md)."""

from __future__ import annotations

from collections.abc import Collection

from controller.elections import LeaderAndIsr
from controller.state import NO_LEADER, PartitionState
from protocol.admin_messages import ELECTION_PREFERRED
from protocol.errors import Errors


def elect_leader(
    p: PartitionState, election_type: int, acceptable: Collection[int]
) -> LeaderAndIsr | tuple[Errors, str | None]:
    """``acceptable``: the brokers that may lead (live, not shutting down). A preferred election makes the
    first assigned replica leader if it is in the ISR and acceptable; an unclean one elects a partition that
    has no leader, from the ISR if it can, else the first acceptable assigned replica with an ISR of itself.
    Errors: ELECTION_NOT_NEEDED (the preferred replica leads already; an unclean election of a partition
    that has a leader), PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE."""

    def valid(r: int) -> bool:
        return r in p.isr and r in acceptable

    if election_type == ELECTION_PREFERRED:
        if p.replicas and p.leader == p.replicas[0]:
            return Errors.ELECTION_NOT_NEEDED, None
        preferred = p.replicas[0] if p.replicas else NO_LEADER
        if valid(preferred):
            leader = preferred
        elif valid(p.leader):
            leader = p.leader
        else:
            leader = next((r for r in p.replicas[1:] if valid(r)), NO_LEADER)
        if leader == NO_LEADER or leader == p.leader:
            return Errors.PREFERRED_LEADER_NOT_AVAILABLE, (
                f"Failed to elect leader for partition: the preferred replica {preferred} is not in the ISR "
                f"{p.isr} or not available"
            )
        return LeaderAndIsr(leader, list(p.isr))
    if p.leader != NO_LEADER:
        return Errors.ELECTION_NOT_NEEDED, None
    clean = next((r for r in p.replicas if valid(r)), NO_LEADER)
    if clean != NO_LEADER:
        return LeaderAndIsr(clean, [r for r in p.isr if r in acceptable or r == clean])
    unclean = next((r for r in p.replicas if r in acceptable), NO_LEADER)
    if unclean == NO_LEADER:
        return Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, (
            f"Failed to elect leader for partition: no live replica among {p.replicas}"
        )
    return LeaderAndIsr(unclean, [unclean], unclean=True)
