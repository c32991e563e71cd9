"""The pure group coordinator, case by case after Kafka's GroupCoordinatorTest, with a fake clock."""

from __future__ import annotations

from coordinator.group.coordinator_core import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    CommitResult,
    GroupConfig,
    JoinResult,
    LoadedGroup,
    Respond,
    SyncResult,
)
from coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from protocol.errors import Errors
from protocol.group_records import GroupMetadataValue, MemberMetadataValue
from tests.unit.coordinator.group.support import DELAY, GROUP, REBALANCE, SESSION, Harness

TP = ("topic", 0)


# ------------------------------------------------------------------ coordinator status


def test_join_with_empty_group_id_is_invalid_group_id() -> None:
    h = Harness()
    result = h.join("j", group="")
    assert result is not None and result.error == Errors.INVALID_GROUP_ID


def test_group_of_a_partition_not_led_here_is_not_coordinator() -> None:
    h = Harness()
    other = next(
        g for g in (f"g{i}" for i in range(200)) if h.core.partition_for(g) != h.core.partition_for(GROUP)
    )
    assert h.join("j", group=other).error == Errors.NOT_COORDINATOR  # type: ignore[union-attr]
    assert h.heartbeat("m", 1, group=other) == Errors.NOT_COORDINATOR
    assert h.core.fetch_offsets(other, None)[0] == Errors.NOT_COORDINATOR


def test_loading_partition_answers_load_in_progress_but_heartbeat_and_sync_go_on() -> None:
    h = Harness()
    partition = h.core.partition_for(GROUP)
    h.core.on_election(partition)
    assert h.join("j").error == Errors.COORDINATOR_LOAD_IN_PROGRESS  # type: ignore[union-attr]
    assert h.heartbeat("m", 1) == Errors.NONE
    sync = h.sync("s", "m", 1)
    assert sync is not None and sync.error == Errors.REBALANCE_IN_PROGRESS
    assert h.commit({TP: 1}).errors == {TP: Errors.COORDINATOR_LOAD_IN_PROGRESS}  # type: ignore[union-attr]
    assert h.core.list_groups()[0] == Errors.COORDINATOR_LOAD_IN_PROGRESS


def test_inactive_coordinator_is_not_available() -> None:
    h = Harness()
    h.core.shutdown()
    assert h.join("j").error == Errors.COORDINATOR_NOT_AVAILABLE  # type: ignore[union-attr]
    assert h.core.list_groups()[0] == Errors.COORDINATOR_NOT_AVAILABLE


# ------------------------------------------------------------------ JoinGroup


def test_session_timeout_outside_the_bounds_is_refused() -> None:
    h = Harness()
    assert h.join("a", session=5999).error == Errors.INVALID_SESSION_TIMEOUT  # type: ignore[union-attr]
    assert h.join("b", session=1_800_001).error == Errors.INVALID_SESSION_TIMEOUT  # type: ignore[union-attr]


def test_a_member_past_group_max_size_is_refused() -> None:
    """group.max.size (Kafka's GroupCoordinator): a third member of a stable group of two is refused
    GROUP_MAX_SIZE_REACHED and leaves no trace; the members already in are untouched."""
    h = Harness(config=GroupConfig(initial_rebalance_delay_ms=DELAY, max_size=2))
    (a, b), generation = h.stable_group("a", "b")
    third = h.join("c", require_known=False)
    assert third is not None and third.error == Errors.GROUP_MAX_SIZE_REACHED
    group = h.core.groups[GROUP]
    assert sorted(group.members) == sorted([a, b]) and group.generation_id == generation
    assert h.state() is GroupState.STABLE


def test_known_member_id_of_an_unknown_group_is_unknown_member() -> None:
    h = Harness()
    assert h.join("j", "someone").error == Errors.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]


def test_first_join_without_member_id_gets_member_id_required() -> None:
    h = Harness()
    result = h.join("j", client_id="consumer-1")
    assert result is not None
    assert result.error == Errors.MEMBER_ID_REQUIRED
    assert result.member_id.startswith("consumer-1-")
    assert h.core.groups[GROUP].is_pending_member(result.member_id)


def test_pending_member_expires_after_its_session_timeout() -> None:
    h = Harness()
    member_id = h.new_member_id("j")
    h.advance(SESSION)
    assert not h.core.groups[GROUP].is_pending_member(member_id)
    assert h.join("again", member_id).error == Errors.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]


def test_old_join_version_joins_at_once() -> None:
    h = Harness()
    assert h.join("j", require_known=False) is None  # waits for the rebalance
    h.advance(DELAY)
    result = h.answer("j")
    assert result.error == Errors.NONE and result.generation_id == 1


def test_single_member_joins_after_the_initial_delay_and_leads() -> None:
    h = Harness()
    member_id = h.new_member_id("first")
    assert h.join("j", member_id) is None
    assert h.state() is GroupState.PREPARING_REBALANCE
    h.advance(DELAY - 1)
    assert "j" not in h.answers
    h.advance(1)
    result = h.answer("j")
    assert result == JoinResult(
        member_id=member_id,
        error=Errors.NONE,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader_id=member_id,
        members=result.members,
    )
    assert [(m.member_id, m.metadata) for m in result.members] == [(member_id, b"range-meta")]
    assert h.state() is GroupState.COMPLETING_REBALANCE
    assert [r.generation_id for r in h.rebalanced] == [1]


def test_initial_delay_is_extended_while_new_members_keep_joining() -> None:
    h = Harness()
    a = h.new_member_id("a")
    h.join("ja", a)
    h.advance(DELAY - 10)
    b = h.new_member_id("b")
    h.join("jb", b)
    h.advance(10)  # first delay ends, a member was added: another delay
    assert "ja" not in h.answers
    h.advance(DELAY)
    assert h.answer("ja").generation_id == h.answer("jb").generation_id == 1


def test_inconsistent_protocol_type_and_no_common_protocol() -> None:
    h = Harness()
    h.stable_group("a")
    other_type = h.join("x", protocol_type="connect", require_known=False)
    assert other_type is not None and other_type.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    other_protocol = h.join("y", protocols=[("roundrobin", b"")], require_known=False)
    assert other_protocol is not None and other_protocol.error == Errors.INCONSISTENT_GROUP_PROTOCOL
    empty = Harness().join("z", protocols=[], require_known=False)
    assert empty is not None and empty.error == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_a_protocol_named_twice_by_one_member_is_chosen() -> None:
    """Found by the fuzzer: a JoinGroup naming "range" twice counted as two members supporting it, so no
    protocol was common to the group's one member and completing the join raised (the broker died)."""
    h = Harness()
    twice = [("range", b"a"), ("range", b"b")]
    a = h.new_member_id("a", protocols=twice)
    assert h.join("ja", a, protocols=twice) is None
    h.advance(DELAY)
    assert h.answer("ja").protocol_name == "range"


def test_protocol_selection_takes_the_most_preferred_common_protocol() -> None:
    h = Harness()
    a = h.new_member_id("a")
    b = h.new_member_id("b")
    c = h.new_member_id("c")
    h.join("ja", a, protocols=[("range", b"1"), ("roundrobin", b"1"), ("sticky", b"1")])
    h.join("jb", b, protocols=[("roundrobin", b"2"), ("range", b"2")])
    h.join("jc", c, protocols=[("roundrobin", b"3"), ("sticky", b"3"), ("range", b"3")])
    h.advance(2 * DELAY)
    leader = h.answer("ja")
    assert leader.protocol_name == "roundrobin"
    assert {m.member_id: m.metadata for m in leader.members} == {a: b"1", b: b"2", c: b"3"}
    assert h.answer("jb").members == []  # only the leader gets the members


def test_new_member_joining_a_stable_group_rebalances_and_completes_when_all_rejoined() -> None:
    h = Harness()
    (a,), generation = h.stable_group("a")
    b = h.new_member_id("b")
    assert h.join("jb", b) is None
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, generation) == Errors.REBALANCE_IN_PROGRESS
    ra = h.join("ja", a)  # the last member rejoins: the join phase ends at once
    rb = h.answer("jb")
    assert ra is not None
    assert ra.generation_id == rb.generation_id == generation + 1
    assert ra.leader_id == a and len(ra.members) == 2 and rb.members == []


def test_rejoin_during_completing_rebalance_with_same_protocols_gets_the_same_generation() -> None:
    h = Harness()
    a = h.new_member_id("a")
    h.join("ja", a)
    h.advance(DELAY)
    first = h.answer("ja")
    again = h.join("ja2", a)
    assert again is not None and again.generation_id == first.generation_id and again.members == first.members
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_follower_rejoining_stable_group_unchanged_stays_stable_but_leader_rebalances() -> None:
    h = Harness()
    (a, b), generation = h.stable_group("a", "b")
    follower = h.join("jb", b)
    assert follower is not None and follower.generation_id == generation and follower.members == []
    assert h.state() is GroupState.STABLE
    assert h.join("ja", a) is None
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout() -> None:
    h = Harness()
    (a, b), generation = h.stable_group("a", "b")
    h.join("ja", a, protocols=[("range", b"changed")])
    assert h.state() is GroupState.PREPARING_REBALANCE
    # b keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins.
    for _ in range(REBALANCE // 5000 - 1):
        h.advance(5000)
        assert h.heartbeat(b, generation) == Errors.REBALANCE_IN_PROGRESS
    h.advance(5000)
    result = h.answer("ja")
    assert result.generation_id == generation + 1 and [m.member_id for m in result.members] == [a]
    assert h.heartbeat(b, generation) == Errors.UNKNOWN_MEMBER_ID


# ------------------------------------------------------------------ SyncGroup


def test_sync_errors() -> None:
    h = Harness()
    assert h.sync("s0", "nobody", 1).error == Errors.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    (a,), generation = h.stable_group("a")
    assert h.sync("s1", "nobody", generation).error == Errors.UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    assert h.sync("s2", a, generation + 1).error == Errors.ILLEGAL_GENERATION  # type: ignore[union-attr]
    h.apply(h.core.sync_group("s3", GROUP, generation, a, protocol_name="roundrobin", assignments={}))
    assert h.answer("s3").error == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("", "", 1, group="").error == Errors.INVALID_GROUP_ID  # type: ignore[union-attr]


def test_sync_in_stable_group_returns_the_assignment() -> None:
    h = Harness()
    (_a, b), generation = h.stable_group("a", "b")
    assert h.sync("s", b, generation) == SyncResult(
        Errors.NONE, "consumer", "range", f"assignment-{b}".encode()
    )


def test_followers_wait_for_the_leader_and_missing_assignments_are_empty() -> None:
    h = Harness()
    a, b = h.new_member_id("a"), h.new_member_id("b")
    h.join("ja", a)
    h.join("jb", b)
    h.advance(2 * DELAY)
    generation = h.answer("ja").generation_id
    h.answer("jb")
    assert h.sync("sb", b, generation) is None
    leader = h.sync("sa", a, generation, {a: b"for-a"})
    assert leader == SyncResult(Errors.NONE, "consumer", "range", b"for-a")
    assert h.answer("sb") == SyncResult(Errors.NONE, "consumer", "range", b"")
    assert h.state() is GroupState.STABLE
    value = h.group_writes[-1].value
    assert value is not None and value.generation == generation and value.leader == a
    assert [(m.member_id, m.assignment) for m in value.members] == [(a, b"for-a"), (b, b"")]


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    h = Harness()
    (a, b), generation = h.stable_group("a", "b")
    h.join("ja", a)
    assert h.sync("s", b, generation).error == Errors.REBALANCE_IN_PROGRESS  # type: ignore[union-attr]


def test_assignment_is_given_only_once_stored_and_a_failed_store_rebalances() -> None:
    h = Harness(auto_store=False)
    a = h.new_member_id("a")
    h.join("ja", a)
    h.advance(DELAY)
    generation = h.answer("ja").generation_id
    assert h.sync("sa", a, generation, {a: b"x"}) is None
    store = h.group_writes[-1]
    h.apply(h.core.on_group_stored(store, Errors.NOT_ENOUGH_REPLICAS))
    assert h.answer("sa") == SyncResult(Errors.COORDINATOR_NOT_AVAILABLE)
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_an_assignment_too_large_to_store_is_unknown_server_error() -> None:
    """Kafka's storeGroup: members' metadata and assignments past the offsets topic's max.message.bytes fail
    the group record's append (MESSAGE_TOO_LARGE), answered UNKNOWN_SERVER_ERROR; a timeout is
    REBALANCE_IN_PROGRESS. Either way the group rebalances."""
    for store_error, answered in (
        (Errors.MESSAGE_TOO_LARGE, Errors.UNKNOWN_SERVER_ERROR),
        (Errors.RECORD_LIST_TOO_LARGE, Errors.UNKNOWN_SERVER_ERROR),
        (Errors.REQUEST_TIMED_OUT, Errors.REBALANCE_IN_PROGRESS),
    ):
        h = Harness(auto_store=False)
        a = h.new_member_id("a")
        h.join("ja", a)
        h.advance(DELAY)
        generation = h.answer("ja").generation_id
        assert h.sync("sa", a, generation, {a: b"x" * 2_000_000}) is None
        h.apply(h.core.on_group_stored(h.group_writes[-1], store_error))
        assert h.answer("sa") == SyncResult(answered)
        assert h.state() is GroupState.PREPARING_REBALANCE


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    a, b = h.new_member_id("a"), h.new_member_id("b")
    h.join("ja", a)
    h.join("jb", b)
    h.advance(2 * DELAY)
    generation = h.answer("ja").generation_id
    h.answer("jb")
    assert h.sync("sa", a, generation, {a: b"x", b: b"y"}).error == Errors.NONE  # type: ignore[union-attr]
    # b neither syncs nor heartbeats; a keeps heartbeating.
    for _ in range(REBALANCE // 5000):
        h.advance(5000)
        h.heartbeat(a, generation)
    assert not h.core.groups[GROUP].has(b)
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, generation) == Errors.REBALANCE_IN_PROGRESS


def test_rejoin_during_completing_rebalance_with_new_protocols_fails_waiting_syncs() -> None:
    h = Harness()
    a, b = h.new_member_id("a"), h.new_member_id("b")
    h.join("ja", a)
    h.join("jb", b)
    h.advance(2 * DELAY)
    generation = h.answer("ja").generation_id
    h.answer("jb")
    assert h.sync("sb", b, generation) is None
    h.join("ja2", a, protocols=[("range", b"new")])
    assert h.answer("sb") == SyncResult(Errors.REBALANCE_IN_PROGRESS)
    assert h.state() is GroupState.PREPARING_REBALANCE


# ------------------------------------------------------------------ Heartbeat and session timeouts


def test_heartbeat_errors() -> None:
    h = Harness()
    assert h.heartbeat("nobody", 1) == Errors.UNKNOWN_MEMBER_ID
    (a,), generation = h.stable_group("a")
    assert h.heartbeat(a, generation) == Errors.NONE
    assert h.heartbeat(a, generation - 1) == Errors.ILLEGAL_GENERATION
    assert h.heartbeat("nobody", generation) == Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat("", 1, group="") == Errors.INVALID_GROUP_ID


def test_heartbeat_during_completing_rebalance_is_fine() -> None:
    h = Harness()
    a = h.new_member_id("a")
    h.join("ja", a)
    h.advance(DELAY)
    generation = h.answer("ja").generation_id
    assert h.heartbeat(a, generation) == Errors.NONE


def test_heartbeats_keep_a_member_and_silence_removes_it() -> None:
    h = Harness()
    (a, b), generation = h.stable_group("a", "b")
    for _ in range(5):
        h.advance(SESSION - 1)
        assert h.heartbeat(a, generation) == Errors.NONE
        assert h.heartbeat(b, generation) == Errors.NONE
    h.advance(SESSION - 1)
    assert h.heartbeat(a, generation) == Errors.NONE
    h.advance(1)  # b has been silent for a whole session
    assert not h.core.groups[GROUP].has(b)
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_last_member_expiring_leaves_an_empty_group_with_its_metadata_written() -> None:
    h = Harness()
    (_a,), generation = h.stable_group("a")
    h.advance(SESSION)
    # No member is left to wait for: the join phase ends at once.
    assert h.state() is GroupState.EMPTY
    last = h.group_writes[-1]
    assert last.generation_id == generation + 1
    assert last.value is not None and last.value.members == [] and last.value.protocol is None
    assert h.rebalanced[-1].state == "Empty"


def test_new_member_waiting_to_join_expires_after_the_new_member_timeout() -> None:
    h = Harness()
    a = h.new_member_id("a")
    h.join("ja", a, rebalance=600_000)
    h.advance(DELAY)
    generation = h.answer("ja").generation_id
    h.sync("sa", a, generation, {a: b""})
    # b joins; a keeps heartbeating but never rejoins, so the join phase lasts a's rebalance timeout (10
    # minutes), longer than a new member may wait.
    b = h.new_member_id("b")
    assert h.join("jb", b, rebalance=600_000) is None
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // 5000):
        h.advance(5000)
        h.heartbeat(a, generation)
    assert h.answer("jb") == JoinResult("", Errors.UNKNOWN_MEMBER_ID)
    assert not h.core.groups[GROUP].has(b)


# ------------------------------------------------------------------ LeaveGroup


def test_leave_group() -> None:
    h = Harness()
    (a, b), generation = h.stable_group("a", "b")
    result = h.leave(b, "nobody")
    assert result.error == Errors.NONE
    assert [(m.member_id, m.error) for m in result.members] == [
        (b, Errors.NONE),
        ("nobody", Errors.UNKNOWN_MEMBER_ID),
    ]
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.join("ja", a).generation_id == generation + 1  # type: ignore[union-attr]


def test_leave_of_a_member_waiting_to_join_answers_its_join() -> None:
    h = Harness()
    (a, _b), _ = h.stable_group("a", "b")
    h.join("ja", a)
    h.leave(a)
    assert h.answer("ja") == JoinResult("", Errors.UNKNOWN_MEMBER_ID)


def test_leave_of_the_last_member_empties_the_group() -> None:
    h = Harness()
    (a,), generation = h.stable_group("a")
    h.leave(a)
    assert h.state() is GroupState.EMPTY
    assert h.group_writes[-1].generation_id == generation + 1


def test_leave_of_a_pending_member_and_errors() -> None:
    h = Harness()
    pending = h.new_member_id("p")
    assert h.leave(pending).members[0].error == Errors.NONE
    assert not h.core.groups[GROUP].is_pending_member(pending)
    assert h.leave("x", group="unknown-group-on-same-partition").error in (
        Errors.NONE,
        Errors.NOT_COORDINATOR,
    )
    assert h.leave("x", group="").error == Errors.INVALID_GROUP_ID


# ------------------------------------------------------------------ offsets


def test_simple_consumer_commits_and_fetches() -> None:
    h = Harness()
    result = h.commit({TP: 42, ("topic", 1): 7}, metadata="m")
    assert result == CommitResult({TP: Errors.NONE, ("topic", 1): Errors.NONE})
    error, offsets = h.core.fetch_offsets(GROUP, [TP, ("topic", 2)])
    assert error == Errors.NONE
    assert offsets[TP] == OffsetAndMetadata(42, metadata="m", commit_timestamp_ms=h.clock.now_ms)
    assert offsets[("topic", 2)] is None
    assert h.core.fetch_offsets(GROUP, None)[1].keys() == {TP, ("topic", 1)}
    assert h.state() is GroupState.EMPTY


def test_offsets_reach_the_cache_only_once_written() -> None:
    h = Harness(auto_store=False)
    assert h.commit({TP: 5}) is None
    assert h.core.fetch_offsets(GROUP, [TP])[1][TP] is None
    h.apply(h.core.on_offsets_stored(h.offset_writes[-1], Errors.NONE))
    assert h.answer("commit") == CommitResult({TP: Errors.NONE})
    assert h.core.fetch_offsets(GROUP, [TP])[1][TP] == OffsetAndMetadata(
        5, commit_timestamp_ms=h.clock.now_ms
    )


def test_failed_offset_write_errors_are_kafkas() -> None:
    for error, answered in [
        (Errors.NOT_ENOUGH_REPLICAS, Errors.COORDINATOR_NOT_AVAILABLE),
        (Errors.REQUEST_TIMED_OUT, Errors.COORDINATOR_NOT_AVAILABLE),
        (Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_COORDINATOR),
        (Errors.MESSAGE_TOO_LARGE, Errors.INVALID_COMMIT_OFFSET_SIZE),
    ]:
        h = Harness(auto_store=False)
        h.commit({TP: 5})
        h.apply(h.core.on_offsets_stored(h.offset_writes[-1], error))
        assert h.answer("commit") == CommitResult({TP: answered})
        assert h.core.fetch_offsets(GROUP, [TP])[1][TP] is None


def test_commit_with_a_generation_for_an_unknown_group_is_illegal_generation() -> None:
    h = Harness()
    assert h.commit({TP: 1}, member_id="m", generation=1) == CommitResult({TP: Errors.ILLEGAL_GENERATION})


def test_member_commits_with_its_generation_and_stale_ones_are_refused() -> None:
    h = Harness()
    (a,), generation = h.stable_group("a")
    assert h.commit({TP: 3}, member_id=a, generation=generation) == CommitResult({TP: Errors.NONE})
    assert h.commit({TP: 4}, member_id=a, generation=generation - 1) == CommitResult(
        {TP: Errors.ILLEGAL_GENERATION}
    )
    assert h.commit({TP: 4}, member_id="other", generation=generation) == CommitResult(
        {TP: Errors.UNKNOWN_MEMBER_ID}
    )
    # A simple consumer may not commit for a group with members.
    assert h.commit({TP: 4}) == CommitResult({TP: Errors.UNKNOWN_MEMBER_ID})
    assert h.core.fetch_offsets(GROUP, [TP])[1][TP] == OffsetAndMetadata(
        3, commit_timestamp_ms=h.clock.now_ms
    )


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    h = Harness()
    a = h.new_member_id("a")
    h.join("ja", a)
    h.advance(DELAY)
    generation = h.answer("ja").generation_id
    assert h.commit({TP: 1}, member_id=a, generation=generation) == CommitResult(
        {TP: Errors.REBALANCE_IN_PROGRESS}
    )


def test_commit_during_preparing_rebalance_is_accepted() -> None:
    h = Harness()
    (a, b), generation = h.stable_group("a", "b")
    h.join("ja", a)
    assert h.commit({TP: 9}, member_id=b, generation=generation) == CommitResult({TP: Errors.NONE})


def test_metadata_too_large_is_refused_per_partition() -> None:
    h = Harness(config=GroupConfig(max_metadata_size=3, initial_rebalance_delay_ms=DELAY))
    assert h.commit({TP: 1}, metadata="four") == CommitResult({TP: Errors.OFFSET_METADATA_TOO_LARGE})
    assert h.offset_writes == []


def test_commit_and_fetch_accept_an_empty_group_id() -> None:
    h = Harness()
    if h.core.partition_for("") == h.core.partition_for(GROUP):
        assert h.commit({TP: 1}, group="") == CommitResult({TP: Errors.NONE})
    else:
        assert h.commit({TP: 1}, group="") == CommitResult({TP: Errors.NOT_COORDINATOR})


# ------------------------------------------------------------------ loading and unloading


def test_resignation_answers_waiting_requests_not_coordinator_and_forgets_the_groups() -> None:
    h = Harness()
    (a, _b), _ = h.stable_group("a", "b")
    h.join("ja", a)
    effects = h.core.on_resignation(h.core.partition_for(GROUP))
    assert effects == [Respond("ja", JoinResult(a, Errors.NOT_COORDINATOR))]
    assert GROUP not in h.core.groups
    assert h.heartbeat(a, 1) == Errors.NOT_COORDINATOR


def test_loaded_group_is_stable_with_its_members_and_offsets() -> None:
    h = Harness()
    partition = h.core.partition_for(GROUP)
    h.core.on_resignation(partition)
    h.core.on_election(partition)
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=7,
        protocol="range",
        leader="m1",
        current_state_timestamp=5,
        members=[MemberMetadataValue("m1", None, "c", "/h", 30000, SESSION, b"sub", b"asg")],
    )
    h.core.on_loaded(partition, {GROUP: LoadedGroup(value, {TP: OffsetAndMetadata(11)})})
    assert h.state() is GroupState.STABLE
    assert h.heartbeat("m1", 7) == Errors.NONE
    assert h.sync("s", "m1", 7) == SyncResult(Errors.NONE, "consumer", "range", b"asg")
    assert h.core.fetch_offsets(GROUP, [TP])[1][TP] == OffsetAndMetadata(11)
    h.advance(SESSION)  # the member does not come back: removed, nobody to wait for
    assert h.state() is GroupState.EMPTY


def test_loaded_group_without_members_is_empty_and_keeps_its_generation() -> None:
    h = Harness()
    partition = h.core.partition_for(GROUP)
    h.core.on_resignation(partition)
    h.core.on_election(partition)
    h.core.on_loaded(
        partition, {GROUP: LoadedGroup(GroupMetadataValue("consumer", 4, None, None, -1, []), {})}
    )
    assert h.state() is GroupState.EMPTY
    a = h.new_member_id("a")
    h.join("ja", a)
    h.advance(DELAY)
    assert h.answer("ja").generation_id == 5


def test_resignation_while_loading_drops_the_load() -> None:
    h = Harness()
    partition = h.core.partition_for(GROUP)
    h.core.on_election(partition)
    h.core.on_resignation(partition)
    h.core.on_loaded(partition, {GROUP: LoadedGroup(None, {TP: OffsetAndMetadata(1)})})
    assert h.join("j").error == Errors.NOT_COORDINATOR  # type: ignore[union-attr]


# ------------------------------------------------------------------ ListGroups / DescribeGroups


def test_describe_group() -> None:
    h = Harness()
    assert h.core.describe_group("nobody-here")[1].state in ("Dead", "")
    (a, b), _ = h.stable_group("a", "b")
    error, summary = h.core.describe_group(GROUP)
    assert error == Errors.NONE
    assert (summary.state, summary.protocol_type, summary.protocol) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.metadata, m.assignment) for m in summary.members] == [
        (a, b"range-meta", f"assignment-{a}".encode()),
        (b, b"range-meta", f"assignment-{b}".encode()),
    ]
    h.join("ja", a)
    _, rebalancing = h.core.describe_group(GROUP)
    assert rebalancing.state == "PreparingRebalance" and rebalancing.protocol == ""
    assert all(m.metadata == b"" and m.assignment == b"" for m in rebalancing.members)


def test_list_groups_with_a_state_filter() -> None:
    h = Harness()
    h.stable_group("a")
    h.commit({TP: 1}, group="simple") if h.core.partition_for("simple") == h.core.partition_for(
        GROUP
    ) else None
    error, groups = h.core.list_groups()
    assert error == Errors.NONE and GROUP in {g.group_id for g in groups}
    assert [g.group_id for g in h.core.list_groups({"stable"})[1]] == [GROUP]
    assert h.core.list_groups({"Dead"})[1] == []


def test_metrics_counts() -> None:
    h = Harness()
    h.stable_group("a")
    h.commit({TP: 1}, member_id=h.core.groups[GROUP].leader_id or "", generation=1)
    assert h.core.state_counts()[GroupState.STABLE] == 1
    assert h.core.num_offsets() == 1
    assert h.core.completed_rebalances == 1 and h.core.offset_commits == 1


def test_every_rebalance_start_names_its_cause_and_the_generation_it_left() -> None:
    """``rebalance_started`` (the report's rebalance windows): a join, a LeaveGroup and a member whose
    heartbeats stopped each start one, from the generation in force, in Kafka's words."""
    h = Harness()
    ids, generation = h.stable_group("a", "b")
    assert [(s.cause, s.generation_id, s.state) for s in h.started] == [("member_joined", 0, "Empty")]
    h.started.clear()
    h.leave(ids[1])
    assert [(s.cause, s.generation_id, s.state) for s in h.started] == [("member_left", generation, "Stable")]
    assert h.started[0].reason == f"removing member {ids[1]} on LeaveGroup"
    h.started.clear()
    result = h.join("rejoin", ids[0])
    assert result is not None and result.generation_id == generation + 1
    h.sync("s", ids[0], generation + 1, {ids[0]: b"all"})
    assert h.state() is GroupState.STABLE and h.started == []
    h.advance(SESSION + 1)  # no heartbeat from the remaining member
    assert [(s.cause, s.generation_id) for s in h.started] == [("member_expired", generation + 1)]
    assert h.started[0].reason == f"removing member {ids[0]} on heartbeat expiration"
