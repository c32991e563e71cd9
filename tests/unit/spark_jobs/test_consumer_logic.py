"""The consumer checks' logic (spark_jobs.consumer_logic) on small hand-made journals."""

from __future__ import annotations

from spark_jobs.consumer_logic import (
    Commit,
    Crash,
    Generation,
    RebalanceStart,
    Served,
    find_redeliveries,
    find_skips,
    rebalance_windows,
)

T = "orders"


def gen(n: int, ts: int, *clients: str, group: str = "g") -> Generation:
    return Generation(group, n, ts, frozenset(clients))


def commit(offset: int, ts: int, generation: int = 1, partition: int = 0, group: str = "g") -> Commit:
    return Commit(group, generation, f"m-{generation}", T, partition, offset, ts)


def served(client: str, ts: int, lo: int, hi: int, partition: int = 0) -> Served:
    return Served(client, T, partition, ts, lo, hi)


def test_commits_of_what_was_served_are_no_skip() -> None:
    found = find_skips(
        [commit(50, 1100), commit(100, 2100)],
        [served("c1", 1000, 0, 49), served("c1", 2000, 50, 99)],
        [gen(1, 500, "c1")],
    )
    assert found.skips == [] and found.checked == 2 and found.offsets_judged == 100


def test_a_commit_past_what_was_served_is_a_skip_naming_group_and_offsets() -> None:
    found = find_skips(
        [commit(10, 1100), commit(60, 2100)],
        [served("c1", 1000, 0, 9), served("c1", 2000, 10, 19)],
        [gen(1, 500, "c1")],
    )
    assert [
        (s.group, s.partition, s.committed_offset, s.first_missing, s.last_missing) for s in found.skips
    ] == [("g", 0, 60, 20, 59)]
    assert found.skips[0].records_skipped == 40


def test_records_served_only_after_the_commit_do_not_count() -> None:
    found = find_skips(
        [commit(10, 1100), commit(20, 1500)],
        [served("c1", 1000, 0, 9), served("c1", 1600, 10, 19)],
        [gen(1, 500, "c1")],
    )
    assert [(s.first_missing, s.last_missing) for s in found.skips] == [(10, 19)]


def test_records_served_to_a_client_outside_the_generation_do_not_count() -> None:
    """c1 read 0..99 in generation 1, then left; generation 2 (c2 alone) committed 100 having read nothing."""
    found = find_skips(
        [commit(100, 3000, generation=2)],
        [served("c1", 1000, 0, 99)],
        [gen(1, 500, "c1"), gen(2, 2500, "c2")],
    )
    # The first commit starts where the group was first served (by c2: never): not judged.
    assert found.skips == [] and found.unjudged_first == 1
    found = find_skips(
        [commit(0, 900, generation=1), commit(100, 3000, generation=2)],
        [served("c1", 1000, 0, 99)],
        [gen(1, 500, "c1"), gen(2, 2500, "c2")],
    )
    assert [(s.generation, s.first_missing, s.last_missing) for s in found.skips] == [(2, 0, 99)]


def test_a_gap_during_a_broker_crash_is_unproven_not_a_skip() -> None:
    lines = [served("c1", 1000, 0, 9), served("c1", 3000, 20, 29)]
    found = find_skips([commit(10, 1100), commit(30, 3100)], lines, [gen(1, 500, "c1")], [Crash(2, 1900)])
    assert found.skips == [] and [(s.first_missing, s.last_missing) for s in found.unproven] == [(10, 19)]


def test_first_commit_starts_at_the_reset_position_and_standalone_commits_take_any_client() -> None:
    found = find_skips([commit(600, 2000, generation=-1)], [served("tool", 1000, 500, 599)], [])
    assert found.skips == [] and found.checked == 1 and found.loose == 1


def test_redelivery_after_a_rebalance_is_counted_per_group() -> None:
    gens = [gen(1, 0, "c1", "c2"), gen(2, 5000, "c2")]
    lines = [
        served("c1", 1000, 0, 49),
        served("c2", 1000, 0, 9, partition=1),
        served("c2", 6000, 30, 79),  # c1's partition after c1 left: 30..49 again
        served("c1", 6000, 0, 99),  # c1 is no member of generation 2: not this group's
        served("other", 1000, 0, 9),
    ]
    (d,) = find_redeliveries(lines, gens)
    assert d.group == "g"
    assert d.served_offsets == 50 + 10 + 50
    assert d.distinct_offsets == 80 + 10
    assert (d.redelivered, d.redelivered_after_rebalance) == (20, 20)
    assert d.examples[0]["first_served_in_generation"] == 1 and d.examples[0]["generation"] == 2


def test_a_repeat_within_one_generation_is_redelivered_but_not_after_a_rebalance() -> None:
    (d,) = find_redeliveries([served("c1", 1000, 0, 9), served("c1", 1100, 5, 14)], [gen(1, 0, "c1")])
    assert (d.redelivered, d.redelivered_after_rebalance, d.distinct_offsets) == (5, 0, 15)


def test_rebalance_windows_run_from_the_first_start_to_the_next_generation() -> None:
    starts = [
        RebalanceStart("g", 1, 2000, "member_expired", "removing member m-1 on heartbeat expiration"),
        RebalanceStart("g", 1, 2500, "member_joined", "adding new member m-3"),
        RebalanceStart("g", 2, 9000, "member_left", "removing member m-2 on LeaveGroup"),
    ]
    windows = rebalance_windows(starts, [gen(1, 0, "c1", "c2"), gen(2, 5000, "c2", "c3")])
    assert [(w["from_generation"], w["to_generation"], w["cause"], w["seconds"]) for w in windows] == [
        (1, 2, "member_expired", 3.0),
        (2, None, "member_left", None),
    ]
