"""The committed-offsets checks (``spark_jobs.group_checks``, docs/report.md) on rows made here: a commit
missing from a replica that must hold it, a commit superseded by a later one, offsets above the HW."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_jobs import group_checks
from spark_jobs.plan import collect_tables, count_of, violation_tables
from tests.spark.test_checks import BATCHES, PARTITIONS, REPLICAS, STOP_ISR, df, journal, rows

pytestmark = pytest.mark.spark

OFFSETS = "__consumer_offsets"


def commit(
    base: int, crc: int, offsets: list[tuple[str, int, int, int, int]], group: str = "g", coordinator: int = 1
) -> dict[str, Any]:
    """An ``offsets_committed`` line as the coordinator writes it (``offsets``: topic, partition, offset,
    high_watermark, local_high_watermark), its batch at ``base`` in __consumer_offsets-0."""
    return {
        "ts_ms": 1000 + base,
        "broker_id": coordinator,
        "event": "offsets_committed",
        "topic": OFFSETS,
        "partition": 0,
        "group_id": group,
        "base_offset": base,
        "last_offset": base + len(offsets) - 1,
        "crc": crc,
        "offsets": json.dumps(
            [
                {"topic": t, "partition": p, "offset": o, "high_watermark": hw, "local_high_watermark": lhw}
                for t, p, o, hw, lhw in offsets
            ]
        ),
    }


def offsets_batch(broker: int, base: int, last: int, crc: int) -> tuple[Any, ...]:
    return (broker, OFFSETS, 0, f"b{broker}/{OFFSETS}-0/0.log", 0, base * 100, base, last, 0, crc, True)


def offsets_replica(broker: int, leo: int, hw: int) -> tuple[Any, ...]:
    return (broker, OFFSETS, 0, leo, hw, "checkpoint", 0)


def test_a_commit_missing_from_a_replica_fails_a_superseded_one_passes(spark: Any) -> None:
    events = [
        commit(0, 11, [("t", 0, 5, 5, 5), ("t", 1, 3, 3, 3)]),  # both superseded below on broker 3
        commit(2, 22, [("t", 0, 9, 9, 9)]),
        commit(3, 33, [("t", 1, 7, 7, 7)]),
        commit(4, 44, [("t", 0, 12, 12, 12)], group="h"),  # lost from broker 2; above the HW on broker 3
    ]
    commits = group_checks.committed_offsets(journal(spark, events))
    batches = df(
        spark,
        BATCHES,
        [
            *(
                offsets_batch(1, b, last, crc)
                for b, last, crc in [(0, 1, 11), (2, 2, 22), (3, 3, 33), (4, 4, 44)]
            ),
            # Broker 2 lost the last commit (a different batch is there); broker 3 no longer holds the first
            # (deleted below its log start) but holds the later commits of both of its partitions.
            *(
                offsets_batch(2, b, last, crc)
                for b, last, crc in [(0, 1, 11), (2, 2, 22), (3, 3, 33), (4, 4, 99)]
            ),
            *(offsets_batch(3, b, last, crc) for b, last, crc in [(2, 2, 22), (3, 3, 33), (4, 4, 44)]),
        ],
    )
    replicas = df(
        spark, REPLICAS, [offsets_replica(1, 5, 5), offsets_replica(2, 5, 5), offsets_replica(3, 5, 4)]
    )
    partitions = df(spark, PARTITIONS, [(OFFSETS, 0, 1, 3, [1, 2, 3], "journal", [1, 2, 3])])
    stop_isr = df(spark, STOP_ISR, [])
    violations = group_checks.offsets_not_lost_violations(commits, partitions, stop_isr, batches, replicas)
    assert rows(violations, "group_id", "committed_partition", "offset", "broker", "problem") == [
        ("h", 0, 12, 2, "a different batch is at this offset (CRC differs)"),
    ]
    got = collect_tables(
        {
            **violation_tables(violations, ["group_id", "broker"], 20),
            "checked": count_of(commits),
            "commits": count_of(commits, "topic", "partition", "base_offset", "crc"),
        }
    )
    result = group_checks.phrase_offsets_not_lost(got)
    assert (result.verdict, result.violations, result.checked) == ("invalid", 1, 5)
    assert "5 committed offset(s) of 4 acknowledged OffsetCommit(s)" in result.notes[0]

    # Broker 3's HW (4) is the lowest, but the partition's final HW is 5: the last commit is below it.
    # Lower every replica's HW to 4 and the last commit is above the final HW everywhere it is held.
    low = df(spark, REPLICAS, [offsets_replica(b, 5, 4) for b in (1, 2, 3)])
    again = group_checks.offsets_not_lost_violations(commits, partitions, stop_isr, batches, low)
    assert rows(again, "broker", "problem") == [
        (1, "above the partition's final HW"),
        (2, "a different batch is at this offset (CRC differs)"),
        (3, "above the partition's final HW"),
    ]


def test_without_commits_both_checks_pass_with_a_note() -> None:
    empty = {"examples": [], "violations": [{"n": 0}], "checked": [{"n": 0}], "commits": [{"n": 0}]}
    lost = group_checks.phrase_offsets_not_lost(empty)
    assert (lost.verdict, lost.checked) == ("valid", None)
    assert lost.notes == [group_checks.NO_COMMITS_NOTE]
    hw = group_checks.phrase_offsets_below_hw({"examples": [], "violations": [{"n": 0}], "evidence": []})
    assert (hw.verdict, hw.checked) == ("valid", None)


def test_a_committed_offset_above_the_hw_fails(spark: Any) -> None:
    events = [
        # At the commit the coordinator led t-0, whose HW was 10: 12 is above it.
        commit(0, 1, [("t", 0, 12, 10, 10)]),
        # t-1 led elsewhere; the coordinator's follower replica had HW 4: 4 is proven fine.
        commit(1, 2, [("t", 1, 4, -1, 4)]),
        # t-2: no replica on the coordinator; only the final HW (6) bounds it: 8 is above.
        commit(2, 3, [("t", 2, 8, -1, -1)]),
        # t-3: no replica of the partition at the end: not judged.
        commit(3, 4, [("t", 3, 1, -1, -1)]),
        commit(4, 5, [("t", 0, 10, 10, 10)]),
    ]
    commits = group_checks.committed_offsets(journal(spark, events))
    final_hws = {0: 20, 1: 20, 2: 6}
    replicas = df(spark, REPLICAS, [(1, "t", p, 20, hw, "checkpoint", 0) for p, hw in final_hws.items()])
    found = group_checks.offsets_below_hw_violations(commits, replicas)
    assert rows(found.violations, "committed_partition", "offset", "problem") == [
        (0, 12, "above the partition's HW when committed"),
        (2, 8, "above the partition's final HW"),
    ]
    got = collect_tables({**violation_tables(found.violations, ["ts_ms"], 20), "evidence": found.evidence})
    result = group_checks.phrase_offsets_below_hw(got)
    assert (result.verdict, result.violations, result.checked) == ("invalid", 2, 4)
    assert result.notes[0].startswith("2 committed offset(s) compared with the HW its coordinator")
    assert "1 committed offset(s) not judged" in result.notes[1]
