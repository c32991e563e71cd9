"""DeleteGroups and the expiry of committed offsets (``offsets.retention.minutes``) in the pure core, with a
fake clock (docs/groups.md)."""

from __future__ import annotations

from coordinator.group.coordinator_core import DeleteResult, GroupConfig, StoreTombstones
from coordinator.group.group_metadata import GroupState
from protocol.consumer_protocol import encode_subscription
from protocol.errors import Errors
from tests.unit.coordinator.group.support import DELAY, GROUP, Harness

TP = ("topic", 0)
MINUTE = 60_000
RETENTION = 60 * MINUTE
CHECK = 5 * MINUTE


def retention_harness(**kwargs: object) -> Harness:
    return Harness(
        config=GroupConfig(
            initial_rebalance_delay_ms=DELAY,
            offsets_retention_ms=RETENTION,
            offsets_retention_check_interval_ms=CHECK,
        ),
        **kwargs,  # type: ignore[arg-type]
    )


def delete(h: Harness, *group_ids: str) -> dict[str, Errors]:
    h.apply(h.core.delete_groups("delete", list(group_ids)))
    result = h.answer("delete")
    assert isinstance(result, DeleteResult)
    return result.errors


def test_an_empty_group_is_deleted_with_its_offsets_and_tombstones_written() -> None:
    h = Harness()
    h.commit({TP: 42, ("topic", 1): 7})
    assert delete(h, GROUP) == {GROUP: Errors.NONE}
    assert GROUP not in h.core.groups
    assert h.core.fetch_offsets(GROUP, [TP])[1][TP] is None
    assert h.tombstones == [
        StoreTombstones(GROUP, h.core.partition_for(GROUP), [TP, ("topic", 1)], group_tombstone=True)
    ]
    # Gone: a second delete does not find it.
    assert delete(h, GROUP) == {GROUP: Errors.GROUP_ID_NOT_FOUND}


def test_delete_refuses_groups_with_members_unknown_ids_and_groups_led_elsewhere() -> None:
    h = Harness()
    h.stable_group("a")
    here = h.core.partition_for(GROUP)
    names = [f"other-{i}" for i in range(1000)]
    unknown = next(g for g in names if h.core.partition_for(g) == here)
    elsewhere = next(g for g in names if h.core.partition_for(g) != here)  # a partition not led here
    errors = delete(h, GROUP, unknown, "", elsewhere)
    assert errors == {
        GROUP: Errors.NON_EMPTY_GROUP,
        unknown: Errors.GROUP_ID_NOT_FOUND,
        "": Errors.INVALID_GROUP_ID,
        elsewhere: Errors.NOT_COORDINATOR,
    }
    assert h.state() is GroupState.STABLE and h.tombstones == []


def test_a_group_whose_members_left_can_be_deleted() -> None:
    h = Harness()
    ids, generation = h.stable_group("a")
    h.commit({TP: 5}, member_id=ids[0], generation=generation)
    h.leave(ids[0])
    assert h.state() is GroupState.EMPTY
    assert delete(h, GROUP) == {GROUP: Errors.NONE}
    assert h.tombstones[-1].offsets == [TP] and h.tombstones[-1].group_tombstone


def test_a_simple_consumers_offsets_expire_after_the_retention_from_their_commit() -> None:
    h = retention_harness()
    h.commit({TP: 1})
    h.advance(30 * MINUTE)
    h.commit({("topic", 1): 2})
    h.advance(RETENTION - 30 * MINUTE + CHECK)  # the first commit is past the retention, not the second
    assert h.core.fetch_offsets(GROUP, None)[1].keys() == {("topic", 1)}
    assert h.tombstones == [StoreTombstones(GROUP, h.core.partition_for(GROUP), [TP], group_tombstone=False)]
    assert h.core.offset_expirations == 1
    h.advance(30 * MINUTE)
    # The last offset gone, the Empty group is deleted too.
    assert GROUP not in h.core.groups
    assert h.tombstones[-1] == StoreTombstones(
        GROUP, h.core.partition_for(GROUP), [("topic", 1)], group_tombstone=True
    )
    assert h.core.offset_expirations == 2


def test_a_consumer_groups_offsets_expire_from_when_it_became_empty_not_while_it_has_members() -> None:
    h = retention_harness()
    ids, generation = h.stable_group("a")
    h.commit({TP: 5}, member_id=ids[0], generation=generation)
    for _ in range(3 * RETENTION // 5_000):  # members keep the group alive well past the retention
        h.advance(5_000)
        assert h.heartbeat(ids[0], generation) == Errors.NONE
    assert h.core.fetch_offsets(GROUP, [TP])[1][TP] is not None
    h.leave(ids[0])
    h.advance(RETENTION - CHECK)
    assert h.core.fetch_offsets(GROUP, [TP])[1][TP] is not None
    h.advance(2 * CHECK)
    assert GROUP not in h.core.groups and h.tombstones[-1].group_tombstone


def test_an_offset_being_written_does_not_expire() -> None:
    h = retention_harness(auto_store=False)
    h.commit({TP: 1})
    h.core.on_offsets_stored(h.offset_writes[-1], Errors.NONE)
    h.answers.clear()
    h.advance(RETENTION - MINUTE)
    h.commit({TP: 2})  # in flight while the old commit of TP expires
    h.advance(2 * CHECK)
    assert h.tombstones == []
    h.apply(h.core.on_offsets_stored(h.offset_writes[-1], Errors.NONE))
    assert h.core.fetch_offsets(GROUP, [TP])[1][TP].offset == 2  # type: ignore[union-attr]


def test_a_stable_consumer_groups_offsets_of_topics_it_no_longer_reads_expire() -> None:
    h = retention_harness()
    subscription = [("range", encode_subscription(["topic"]))]
    member = h.new_member_id("id", protocols=subscription)
    assert h.join("j", member, protocols=subscription) is None
    h.advance(DELAY)
    joined = h.answer("j")
    assert joined is not None and joined.error == Errors.NONE
    generation = joined.generation_id
    assert h.sync("s", member, generation, {member: b""}) is not None
    h.commit({TP: 5, ("gone", 0): 9}, member_id=member, generation=generation)
    for _ in range((RETENTION + 2 * CHECK) // 5_000):
        h.advance(5_000)
        assert h.heartbeat(member, generation) == Errors.NONE
    assert h.core.fetch_offsets(GROUP, None)[1].keys() == {TP}
    assert h.tombstones == [StoreTombstones(GROUP, h.core.partition_for(GROUP), [("gone", 0)], False)]
    assert h.state() is GroupState.STABLE
