"""Static membership (KIP-345) in the pure core, after Kafka's GroupCoordinatorTest static member cases:
a static member joins without MEMBER_ID_REQUIRED, a restarted instance takes its old place without a
rebalance, and the older incarnation is fenced (FENCED_INSTANCE_ID, 82)."""

from __future__ import annotations

from coordinator.group.coordinator_core import CommitResult, LeaveResult, StoreGroup
from coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from protocol.errors import Errors
from tests.unit.coordinator.group.support import DELAY, GROUP, Harness

TP = ("topic", 0)


def static_group(h: Harness, *instances: str) -> tuple[list[str], int]:
    """Static members, one per instance id, joined and synced (the first leads); ids and generation."""
    for i, instance in enumerate(instances):
        assert h.join(f"j{i}", instance=instance) is None  # no MEMBER_ID_REQUIRED: they join at once
    h.advance(DELAY if len(instances) == 1 else 2 * DELAY)
    results = [h.answer(f"j{i}") for i in range(len(instances))]
    assert all(r is not None and r.error == Errors.NONE for r in results), results
    ids = [r.member_id for r in results]
    generation = results[0].generation_id
    for i, (member_id, instance) in enumerate(zip(ids, instances, strict=True)):
        if i:
            assert h.sync(f"s{i}", member_id, generation, instance=instance) is None
    assignments = {m: f"assignment-{m}".encode() for m in ids}
    assert h.sync("s0", ids[0], generation, assignments, instance=instances[0]) is not None
    for i in range(1, len(ids)):
        assert h.answers.pop(f"s{i}").error == Errors.NONE
    assert h.state() is GroupState.STABLE
    return ids, generation


def test_a_static_member_joins_without_member_id_required() -> None:
    h = Harness()
    ids, _ = static_group(h, "instance-a")
    assert ids[0].startswith("instance-a-")
    assert h.core.groups[GROUP].get(ids[0]).group_instance_id == "instance-a"


def test_a_restarted_instance_takes_its_place_without_a_rebalance_and_fences_the_old_one() -> None:
    h = Harness()
    (a, b), generation = static_group(h, "instance-a", "instance-b")
    writes = len(h.group_writes)
    # instance-b restarts: it joins with no member id, the same instance id and protocols.
    rejoined = h.join("again", instance="instance-b")
    assert rejoined is not None and rejoined.error == Errors.NONE
    new_b = rejoined.member_id
    assert new_b != b and rejoined.generation_id == generation and rejoined.leader_id == a
    assert h.state() is GroupState.STABLE  # no rebalance
    synced = h.sync("sync-again", new_b, generation, instance="instance-b")
    assert synced is not None and synced.assignment == f"assignment-{b}".encode()
    # The group's metadata is written with the new member id.
    stored = h.group_writes[writes:]
    assert [w.generation_id for w in stored] == [generation] and isinstance(stored[0], StoreGroup)
    assert stored[0].value is not None
    assert [m.member_id for m in stored[0].value.members] == [a, new_b]
    # The old incarnation is fenced everywhere.
    assert h.heartbeat(b, generation, instance="instance-b") == Errors.FENCED_INSTANCE_ID
    stale_sync = h.sync("stale", b, generation, instance="instance-b")
    assert stale_sync is not None and stale_sync.error == Errors.FENCED_INSTANCE_ID
    assert h.join("stale-join", b, instance="instance-b").error == Errors.FENCED_INSTANCE_ID  # type: ignore[union-attr]
    h.apply(
        h.core.commit_offsets(
            "stale-commit", GROUP, b, generation, {TP: OffsetAndMetadata(1)}, group_instance_id="instance-b"
        )
    )
    assert h.answer("stale-commit") == CommitResult({TP: Errors.FENCED_INSTANCE_ID})
    assert h.heartbeat(new_b, generation, instance="instance-b") == Errors.NONE
    assert h.heartbeat(a, generation, instance="instance-a") == Errors.NONE


def test_a_restarted_instance_with_other_protocols_rebalances() -> None:
    h = Harness()
    (a,), generation = static_group(h, "instance-a")
    # Now preferring another protocol (range still supported): the group's choice changes.
    protocols = [("roundrobin", b"rr"), ("range", b"range-meta")]
    # The only member rejoined, so the rebalance completes at once: a new generation.
    result = h.join("again", instance="instance-a", protocols=protocols)
    assert result is not None and result.error == Errors.NONE
    assert result.generation_id == generation + 1 and result.member_id != a
    assert h.core.groups[GROUP].protocol_name == "roundrobin"


def test_a_static_member_leaves_by_its_instance_id() -> None:
    h = Harness()
    (a, _b), _ = static_group(h, "instance-a", "instance-b")
    h.apply(
        h.core.leave_group("leave", GROUP, [("", "instance-b"), ("", "unknown"), ("wrong", "instance-a")])
    )
    result = h.answer("leave")
    assert isinstance(result, LeaveResult)
    assert [(r.group_instance_id, r.error) for r in result.members] == [
        ("instance-b", Errors.NONE),
        ("unknown", Errors.UNKNOWN_MEMBER_ID),
        ("instance-a", Errors.FENCED_INSTANCE_ID),
    ]
    assert list(h.core.groups[GROUP].members) == [a]


def test_a_restarted_leader_is_not_told_it_leads_so_it_does_not_assign_again() -> None:
    h = Harness()
    (a, b), generation = static_group(h, "instance-a", "instance-b")
    rejoined = h.join("again", instance="instance-a")
    assert rejoined is not None and rejoined.error == Errors.NONE
    assert (rejoined.leader_id, rejoined.members) == (a, [])
    assert h.core.groups[GROUP].leader_id == rejoined.member_id
    synced = h.sync("sync-again", rejoined.member_id, generation, instance="instance-a")
    assert synced is not None and synced.assignment == f"assignment-{a}".encode()
    assert h.heartbeat(b, generation, instance="instance-b") == Errors.NONE
    assert h.state() is GroupState.STABLE
