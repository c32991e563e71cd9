"""Static membership (KIP-345): a member that joins with a ``group.instance.id`` keeps its place in the
group across restarts. The pure helpers over a ``GroupMetadata`` (Kafka's ``GroupMetadata.staticMembers``,
``isStaticMemberFenced`` and ``replaceStaticMember``); the core (``coordinator_core``) decides when."""

from __future__ import annotations

from coordinator.group.group_metadata import GroupMetadata, MemberMetadata


def static_member_id(group: GroupMetadata, instance_id: str | None) -> str | None:
    """The member id that holds ``instance_id`` in the group (None: none does)."""
    if instance_id is None:
        return None
    for member in group.members.values():
        if member.group_instance_id == instance_id:
            return member.member_id
    return None


def is_fenced(group: GroupMetadata, instance_id: str | None, member_id: str) -> bool:
    """Kafka's ``isStaticMemberFenced``: ``instance_id`` is held in the group by another member id (an
    older incarnation of the instance, replaced by a newer one): answered FENCED_INSTANCE_ID (82)."""
    current = static_member_id(group, instance_id)
    return current is not None and current != member_id


def replace_static_member(
    group: GroupMetadata, old_id: str, new_id: str
) -> tuple[MemberMetadata, object | None, object | None]:
    """Kafka's ``replaceStaticMember``: the member of ``old_id`` continues as ``new_id`` (same place,
    assignment and leadership); returns it with the tokens of the old id's waiting JoinGroup and SyncGroup,
    which are answered FENCED_INSTANCE_ID."""
    member = group.members[old_id]
    join_token = group.take_join_token(member)
    sync_token = group.take_sync_token(member)
    member.member_id = new_id
    group.members = {(new_id if k == old_id else k): v for k, v in group.members.items()}
    if group.leader_id == old_id:
        group.leader_id = new_id
    if old_id in group.pending_sync_members:
        group.pending_sync_members.discard(old_id)
        group.pending_sync_members.add(new_id)
    return member, join_token, sync_token
