"""Each check of the report on a few rows made here: the pure ``<name>_violations`` functions on small
DataFrames, and the ``phrase_<name>`` functions on their collected tables (docs/report.md, "The checks")."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs import availability, checks, journal_checks
from spark_jobs.history import offsets_series, role_timeline
from spark_jobs.inputs import BROKER_ACKED_SCHEMA, JOURNAL_SCHEMA, acknowledged_batches
from spark_jobs.plan import collect_tables, count_of, violation_tables

pytestmark = pytest.mark.spark

REPLICAS = "broker INT, topic STRING, partition INT, leo LONG, hw LONG, hw_source STRING, log_start LONG"
PARTITIONS = (
    "topic STRING, partition INT, leader INT, leader_epoch INT, isr ARRAY<INT>, isr_source STRING, "
    "live_isr ARRAY<INT>"
)
STOP_ISR = "topic STRING, partition INT, stop_isr ARRAY<INT>"
BATCHES = (
    "broker INT, topic STRING, partition INT, file STRING, segment_base LONG, position LONG, "
    "base_offset LONG, last_offset LONG, leader_epoch INT, crc LONG, crc_ok BOOLEAN"
)
ACKED = (
    "producer_id STRING, topic STRING, partition INT, base_offset LONG, last_offset LONG, crc LONG, "
    "acks INT, acked_ms LONG"
)
CHECKPOINTS = (
    "broker INT, file STRING, kind STRING, topic STRING, partition INT, seq INT, epoch INT, offset LONG, "
    "problem STRING"
)


def df(spark: Any, schema: str, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(rows, schema)


def rows(frame: Any, *cols: str) -> list[tuple[Any, ...]]:
    """The rows' ``cols``, sorted (nulls first)."""
    got = [tuple(r[c] for c in cols) for r in frame.collect()]
    return sorted(got, key=lambda t: [(v is not None, v) for v in t])


def replica(broker: int, leo: int, hw: int | None, log_start: int = 0, p: int = 0) -> tuple[Any, ...]:
    return (broker, "t", p, leo, hw, "checkpoint", log_start)


def batch(
    broker: int, base: int, last: int, epoch: int = 0, crc: int = 7, p: int = 0, ok: bool | None = True
) -> tuple[Any, ...]:
    return (broker, "t", p, f"b{broker}/t-{p}/0.log", 0, base * 100, base, last, epoch, crc, ok)


def journal(spark: Any, events: list[dict[str, Any]]) -> Any:
    """Journal rows as ``load_inputs`` makes them: the schema's columns, ``source``, ``owner``, ``seq``."""
    names = [c.strip().split(" ", 1)[0] for c in JOURNAL_SCHEMA.split(", ")]
    data = []
    for seq, e in enumerate(events):
        source = "controller" if "controller_id" in e else "broker"
        owner = e.get("controller_id") if source == "controller" else e.get("broker_id")
        data.append((*(e.get(n) for n in names), source, owner, seq, "f"))
    return spark.createDataFrame(data, f"{JOURNAL_SCHEMA}, source STRING, owner INT, seq LONG, file STRING")


# ---------------------------------------------------------------------------------------- convergence


def test_convergence_names_disagreeing_live_isr_replicas_and_hw_above_leo(spark: Any) -> None:
    replicas = df(
        spark,
        REPLICAS,
        [
            replica(1, 10, 10),
            replica(2, 8, 8),
            replica(3, 5, 5),
            replica(1, 4, 6, p=1),
            replica(2, 4, 4, p=1),
        ],
    )
    # Partition 0: broker 3 is fenced at the end (not live), brokers 1 and 2 disagree. Partition 1 agrees
    # on LEO but broker 1's HW is above its LEO, and broker 2 journaled an HW above its LEO.
    partitions = df(
        spark,
        PARTITIONS,
        [("t", 0, 1, 3, [1, 2, 3], "journal", [1, 2]), ("t", 1, 2, 1, [1, 2], "journal", [1, 2])],
    )
    series = df(
        spark,
        "broker INT, topic STRING, partition INT, ts_ms LONG, seq LONG, event STRING, leo LONG, hw LONG",
        [(2, "t", 1, 500, 1, "offsets", 3, 4)],
    )
    stop = df(spark, STOP_ISR, [])
    found = checks.convergence_violations(replicas, partitions, series, stop)
    assert rows(found.violations, "partition", "broker", "ts_ms", "problem") == [
        (0, None, None, "live ISR replicas disagree on LEO/HW"),
        (1, None, None, "live ISR replicas disagree on LEO/HW"),  # on HW: 6 and 4
        (1, 1, None, "HW above LEO at the end"),
        (1, 2, 500, "HW above LEO in a offsets journal event"),
    ]
    assert rows(found.out_of_isr, "broker") == []


def test_convergence_judges_the_isr_before_the_final_stop(spark: Any) -> None:
    """``cluster down`` shrinks every ISR to its last broker; the replicas in sync before it must still end
    with the same log, and one that was out of it is listed, not judged."""
    replicas = df(spark, REPLICAS, [replica(1, 10, 10), replica(2, 9, 9), replica(3, 3, 3)])
    partitions = df(spark, PARTITIONS, [("t", 0, 1, 5, [1], "journal", [1])])
    series = df(
        spark,
        "broker INT, topic STRING, partition INT, ts_ms LONG, seq LONG, event STRING, leo LONG, hw LONG",
        [],
    )
    stop = df(spark, STOP_ISR, [("t", 0, [1, 2, 4])])
    found = checks.convergence_violations(replicas, partitions, series, stop)
    got = rows(found.violations, "problem", "detail")
    assert got == [
        (
            "a member of the ISR before the final stop holds no replica",
            "ISR before the stop 1,2,4; broker 1: LEO 10 HW 10; broker 2: LEO 9 HW 9",
        ),
        (
            "replicas in the ISR before the final stop end with different logs (LEO)",
            "ISR before the stop 1,2,4; broker 1: LEO 10 HW 10; broker 2: LEO 9 HW 9",
        ),
    ]
    assert rows(found.out_of_isr, "broker", "isr_before_stop") == [(3, [1, 2, 4])]


def _deleted_and_recreated_journal(spark: Any) -> Any:
    """``gone`` made on brokers 1-3 and deleted; ``again`` deleted, then made again on brokers 1 and 2."""
    events: list[dict[str, Any]] = []
    for topic in ("gone", "again"):
        events.append(
            {"ts_ms": 100, "broker_id": 1, "event": "became_leader", "topic": topic, "partition": 0,
             "leader_epoch": 0, "isr": [1, 2, 3]}
        )  # fmt: skip
        for b in (1, 2, 3):
            events.append(
                {"ts_ms": 200 + b, "broker_id": b, "event": "partition_stopped", "topic": topic,
                 "partition": 0, "deleted": True}
            )  # fmt: skip
    events.append(
        {"ts_ms": 300, "broker_id": 2, "event": "became_leader", "topic": "again", "partition": 0,
         "leader_epoch": 0, "isr": [1, 2]}
    )  # fmt: skip
    events.append({"ts_ms": 400, "broker_id": 2, "event": "partition_stopped", "topic": "again",
                   "partition": 0, "deleted": False})  # fmt: skip
    return journal(spark, events)


def test_a_deleted_topic_is_not_judged_but_one_made_again_is(spark: Any) -> None:
    """A topic deleted during the run leaves no replica on purpose: convergence leaves it out (and says
    so); a topic made again with the same name is judged from its new incarnation's events."""
    from spark_jobs.history import _isr_before, deletions

    j = _deleted_and_recreated_journal(spark)
    deleted = deletions(j)
    assert rows(deleted, "topic", "deleted_ms", "deleted_at_end") == [
        ("again", 203, False),
        ("gone", 203, True),
    ]
    stop = _isr_before(j, 1000, deleted)
    assert rows(stop, "topic", "stop_isr") == [("again", [1, 2])]
    replicas = df(
        spark,
        REPLICAS,
        [(1, "again", 0, 5, 5, "checkpoint", 0)],  # broker 2's replica of the new `again` is missing
    )
    partitions = df(spark, PARTITIONS, [("again", 0, 2, 0, [1, 2], "journal", [1, 2])])
    series = df(
        spark,
        "broker INT, topic STRING, partition INT, ts_ms LONG, seq LONG, event STRING, leo LONG, hw LONG",
        [],
    )
    found = checks.convergence_violations(replicas, partitions, series, stop)
    assert rows(found.violations, "topic", "problem") == [
        ("again", "a member of the ISR before the final stop holds no replica"),
        ("again", "an ISR member holds no replica of the partition"),
    ]
    got = collect_tables(
        {
            **violation_tables(found.violations, [*["topic", "partition"], "broker", "ts_ms"], 5),
            "out_of_isr": found.out_of_isr,
            "partitions": partitions,
            "faults": partitions.limit(0),
            "deleted": deleted.filter("deleted_at_end").select("topic", "partition"),
        }
    )
    result = checks.phrase_convergence(got, partitions=1, fenced=[], max_replicas=2)
    assert result.extra["deleted_partitions"] == [{"topic": "gone", "partition": 0}]
    assert any(n.startswith("1 deleted partition(s) left out: gone-0") for n in result.notes)


def test_acknowledged_batches_of_a_deleted_topic_are_not_lost(spark: Any) -> None:
    """Records acknowledged before their topic was deleted went with it; those of the topic made again
    with the same name (same offsets, other CRCs) must still be there."""
    from spark_jobs.history import deletions

    deleted = deletions(_deleted_and_recreated_journal(spark))
    replicas = df(
        spark, REPLICAS, [(1, "again", 0, 10, 10, "checkpoint", 0), (2, "again", 0, 0, 0, "checkpoint", 0)]
    )
    partitions = df(spark, PARTITIONS, [("again", 0, 1, 0, [1, 2], "journal", [1, 2])])
    stop = df(spark, STOP_ISR, [("again", 0, [1, 2])])
    batches = df(spark, BATCHES, [(1, "again", 0, "f", 0, 0, 0, 9, 0, 8, True)])
    acked = df(
        spark,
        ACKED,
        [
            ("p1", "gone", 0, 0, 9, 7, -1, 150),  # acknowledged, then its topic was deleted
            ("p1", "again", 0, 0, 9, 7, -1, 150),  # the first `again`: deleted with it
            ("p1", "again", 0, 0, 9, 8, -1, 350),  # the second `again`: missing on broker 2
        ],
    )
    found = checks.acked_violations(acked, partitions, stop, batches, replicas, deleted)
    assert rows(found.violations, "topic", "crc", "broker", "problem") == [("again", 8, 2, "missing")]
    before = checks.acked_violations(acked, partitions, stop, batches, replicas)
    assert len(before.violations.collect()) > 1


def test_phrase_convergence_notes_fenced_brokers_and_out_of_isr_replicas() -> None:
    got = {
        "examples": [],
        "violations": [{"n": 0}],
        "out_of_isr": [{"topic": "t", "partition": 0, "broker": 3}],
        "partitions": [{"topic": "t", "partition": 0}],
        "faults": [],
    }
    result = checks.phrase_convergence(got, partitions=1, fenced=[3], max_replicas=3)
    assert result.verdict == "valid" and result.checked == 1
    assert result.notes[0] == "final ISR from the journals; fenced at the end (not live): [3]"
    assert "1 replica(s) out of the ISR" in result.notes[1]
    assert result.extra["out_of_isr_before_stop"] == got["out_of_isr"]
    assert checks.phrase_convergence(got, partitions=0, fenced=[], max_replicas=1).verdict == "unknown"


# --------------------------------------------------------------------------------------- log matching


def test_log_matching_compares_below_the_smallest_hw_only(spark: Any) -> None:
    replicas = df(spark, REPLICAS, [replica(1, 30, 30), replica(2, 30, 20)])
    batches = df(
        spark,
        BATCHES,
        [
            batch(1, 0, 9),
            batch(2, 0, 9),
            batch(1, 10, 19, epoch=1, crc=8),  # broker 2 holds another batch here: diverged
            batch(2, 10, 19, epoch=2, crc=9),
            batch(1, 20, 29, crc=10),  # above broker 2's HW: not compared
        ],
    )
    found = checks.log_matching_violations(replicas, batches)
    assert rows(found.violations, "base_offset", "smallest_hw", "detail", "missing_on") == [
        (10, 20, "broker 1: 10-19 epoch 1 crc 8; broker 2: 10-19 epoch 2 crc 9", [])
    ]
    assert found.compared.count() == 4
    got = collect_tables(
        {**violation_tables(found.violations, ["base_offset"], 5), "checked": count_of(found.compared)}
    )
    result = checks.phrase_log_matching(got, max_replicas=2)
    assert (result.verdict, result.violations, result.checked) == ("invalid", 1, 4)


def test_log_matching_lists_a_replica_missing_a_batch(spark: Any) -> None:
    replicas = df(spark, REPLICAS, [replica(1, 20, 20), replica(2, 20, 20)])
    batches = df(spark, BATCHES, [batch(1, 0, 9), batch(2, 0, 9), batch(1, 10, 19)])
    found = checks.log_matching_violations(replicas, batches)
    assert rows(found.violations, "base_offset", "missing_on") == [(10, [2])]


def test_log_matching_judges_in_sync_replicas_below_the_partitions_final_hw(spark: Any) -> None:
    """A clean stop: the followers had not yet learned the leader's HW (their checkpoints say 0), yet they
    were in sync when the stop began: every batch below the partition's final HW is compared on all
    three. A replica out of the ISR is compared below its own HW only."""
    replicas = df(
        spark, REPLICAS, [replica(1, 30, 30), replica(2, 30, 0), replica(3, 30, 0), replica(4, 20, 10)]
    )
    partitions = df(spark, PARTITIONS, [("t", 0, 1, 0, [1], "journal", [1])])
    stop = df(spark, STOP_ISR, [("t", 0, [1, 2, 3])])
    held = [batch(b, base, base + 9) for b in (1, 2, 3) for base in (0, 10, 20)]
    held += [batch(4, 0, 9), batch(4, 10, 19, epoch=3, crc=99)]  # broker 4 diverged above its own HW
    batches = df(spark, BATCHES, held)
    found = checks.log_matching_violations(replicas, batches, partitions, stop)
    assert rows(found.violations, "base_offset") == []
    assert found.compared.count() == 3 * 3 + 1
    # Without the partitions' ISR every replica is bounded by its own HW: the followers' 0 leaves only
    # broker 1's and broker 4's first batch.
    assert checks.log_matching_violations(replicas, batches).compared.count() == 2


def test_log_matching_finds_a_divergence_on_an_in_sync_replica_whose_hw_lagged(spark: Any) -> None:
    """The final leader (2) took over while the ISR was below min.insync.replicas and kept its HW 0; the
    HW broker 1 learned as leader says what was committed, and both are compared below it."""
    replicas = df(spark, REPLICAS, [replica(1, 20, 20), replica(2, 20, 0)])
    partitions = df(spark, PARTITIONS, [("t", 0, 2, 1, [2], "journal", [2])])
    stop = df(spark, STOP_ISR, [("t", 0, [1, 2])])
    batches = df(spark, BATCHES, [batch(1, 0, 9), batch(2, 0, 9), batch(1, 10, 19), batch(2, 10, 19, crc=5)])
    found = checks.log_matching_violations(replicas, batches, partitions, stop)
    assert rows(found.violations, "base_offset", "smallest_hw", "missing_on") == [(10, 20, [])]


# ---------------------------------------------------------------------------------------------- acked


def test_acked_batches_missing_or_different_on_a_replica_that_must_hold_them(spark: Any) -> None:
    replicas = df(spark, REPLICAS, [replica(1, 30, 30), replica(2, 30, 30), replica(3, 20, 20, log_start=10)])
    partitions = df(spark, PARTITIONS, [("t", 0, 1, 2, [1, 2], "journal", [1, 2])])
    stop = df(spark, STOP_ISR, [("t", 0, [1, 2, 3])])
    batches = df(
        spark,
        BATCHES,
        [batch(1, 0, 9), batch(1, 10, 19), batch(2, 0, 9), batch(2, 10, 19, crc=99), batch(3, 10, 14)],
    )
    acked = df(
        spark,
        ACKED,
        [
            ("p1", "t", 0, 0, 9, 7, -1, 100),  # below broker 3's log start: deleted there, not lost
            ("p1", "t", 0, 10, 19, 7, -1, 200),  # other CRC on 2, other boundary on 3
            ("p1", "t", 0, 20, 29, 7, 1, 300),  # acks=1, on no replica: listed apart
        ],
    )
    found = checks.acked_violations(acked, partitions, stop, batches, replicas)
    assert rows(found.violations, "base_offset", "broker", "role", "problem") == [
        (10, 2, "isr", "a different batch is at this offset (CRC differs)"),
        (10, 3, "isr", "batch boundary differs"),
    ]
    assert rows(found.acks1_lost, "base_offset", "broker") == [(20, 1), (20, 2), (20, 3)]


def test_acked_batches_of_a_partition_left_without_a_leader_are_judged_on_its_isr(spark: Any) -> None:
    # The last ISR member stopped (a controlled shutdown that nobody could take over): leader -1, ISR [1].
    replicas = df(spark, REPLICAS, [replica(1, 10, 10), replica(2, 0, 0)])
    partitions = df(spark, PARTITIONS, [("t", 0, -1, 3, [1], "journal", [1])])
    stop = df(spark, STOP_ISR, [("t", 0, [1])])
    batches = df(spark, BATCHES, [batch(1, 0, 9)])
    acked = df(spark, ACKED, [("p1", "t", 0, 0, 9, 7, -1, 100)])
    found = checks.acked_violations(acked, partitions, stop, batches, replicas)
    assert found.violations.count() == 0


def test_phrase_acked_lists_acks1_losses_without_failing() -> None:
    got = {
        "examples": [],
        "violations": [{"n": 0}],
        "checked": [{"n": 5}],
        "by_source": [{"source": "leader", "n": 5}, {"source": "workload", "n": 3}],
        "n_acks1": [{"n": 2}],
        "acks1_lost": [{"base_offset": 20}],
        "lost_by_acks": [],
    }
    result = checks.phrase_acked({**got, "of_deleted": [{"n": 4}]}, torn_lines=1)
    assert result.verdict == "valid" and result.extra == {"acks1_lost": [{"base_offset": 20}]}
    assert result.notes[0].endswith(
        "(5 journaled by their leaders (acked.jsonl), 3 by the workload (workload/acked-*.jsonl))"
    )
    assert result.notes[1] == "1 torn acked-journal line(s) skipped"
    assert result.notes[2].startswith("4 acknowledged batch(es) of topics deleted after they were")
    assert result.notes[3].startswith("2 acks=1 batch(es) lost")
    nothing = {**got, "checked": [{"n": 0}], "by_source": [], "n_acks1": [{"n": 0}]}
    assert checks.phrase_acked(nothing, torn_lines=0).verdict == "unknown"


def test_acknowledged_batches_are_the_leaders_and_the_workloads_lines_once_each(spark: Any) -> None:
    workload = df(
        spark,
        f"{ACKED}, sent_ms LONG",
        [("p1", "t", 0, 0, 9, 7, -1, 105, 100), ("p1", "t", 0, 10, 19, 8, -1, 205, 200)],
    )
    leaders = df(
        spark,
        BROKER_ACKED_SCHEMA,
        [
            (103, 1, "t", 0, 0, 9, 7, -1, -1, -1, -1, "isrsim"),  # the same acknowledgement as p1's first
            (150, 1, "t", 1, 0, 4, 9, 1, 12, 0, 0, "rdkafka"),  # another client's
            (160, 2, "t", 1, 0, 4, 9, 1, 12, 0, 0, "rdkafka"),  # ... answered again by a new leader
        ],
    )
    got = acknowledged_batches(workload, leaders)
    assert rows(got, "partition", "base_offset", "producer_id", "acks", "acked_ms", "acked_by") == [
        (0, 0, "p1", -1, 103, ["broker 1", "workload"]),
        (0, 10, "p1", -1, 205, ["workload"]),
        (1, 0, "rdkafka", 1, 150, ["broker 1", "broker 2"]),
    ]


def test_an_idempotent_batch_written_twice_fails_another_producers_is_listed(spark: Any) -> None:
    schema = f"{BATCHES}, producer_id LONG, producer_epoch INT, base_sequence INT"
    batches = df(
        spark,
        schema,
        [
            (*batch(1, 0, 4, crc=1), 12, 0, 0),
            (*batch(1, 5, 9, crc=2), 12, 0, 5),
            (*batch(1, 10, 14, crc=1), 12, 0, 0),  # the first again: a retry written twice
            (*batch(2, 0, 4, crc=1), 12, 0, 0),
            (*batch(2, 5, 9, crc=2), 12, 0, 5),
            (*batch(1, 15, 19, crc=3), 12, 1, 0),  # a new epoch starts its sequences again: fine
            (*batch(1, 20, 24, crc=5), -1, -1, -1),
            (*batch(1, 25, 29, crc=5), -1, -1, -1),  # no idempotence: the same bytes twice, listed
            (*batch(1, 30, 32, crc=6), -1, -1, -1),
        ],
    )
    found = checks.duplicate_batches(batches)
    assert rows(found.violations, "producer_id", "producer_epoch", "base_sequence", "brokers", "offsets") == [
        (12, 0, 0, [1], [0, 10])
    ]
    assert rows(found.non_idempotent, "crc", "records", "brokers", "copies", "offsets") == [
        (5, 5, [1], 2, [20, 25])
    ]
    got = {
        "examples": [{"offsets": [0, 10]}],
        "violations": [{"n": 1}],
        "n_non_idempotent": [{"n": 1}],
        "non_idempotent": [{"crc": 5}],
    }
    result = checks.phrase_no_duplicates(got, batches=9)
    assert (result.verdict, result.extra) == ("invalid", {"non_idempotent_duplicates": [{"crc": 5}]})
    clean = {**got, "examples": [], "violations": [{"n": 0}], "n_non_idempotent": [{"n": 0}]}
    assert checks.phrase_no_duplicates(clean, batches=9).verdict == "valid"


# ------------------------------------------------------------------------------ contiguity, CRC, cache


def test_contiguity_finds_gaps_overlaps_and_duplicates(spark: Any) -> None:
    replicas = df(spark, REPLICAS, [replica(1, 60, 60, log_start=0), replica(2, 20, 20, log_start=0)])
    batches = df(
        spark,
        BATCHES,
        [
            batch(1, 0, 9),
            batch(1, 10, 19),
            batch(1, 25, 29),  # gap of 5
            batch(1, 28, 39),  # overlap
            batch(2, 5, 19),  # starts above the log start
        ],
    )
    found = checks.contiguous_violations(batches, replicas)
    assert rows(found, "broker", "base_offset", "problem", "expected_offset", "missing_records") == [
        (1, 25, "gap", 20, 5),
        (1, 28, "overlap", 30, -2),
        (2, 5, "gap after the log start offset", 0, 5),
    ]


def test_batches_intact_fails_only_on_a_crc_mismatch(spark: Any) -> None:
    batches = df(spark, BATCHES, [batch(1, 0, 9), batch(1, 10, 19, ok=False), batch(1, 20, 29, ok=None)])
    assert rows(checks.batches_intact_violations(batches), "base_offset") == [(10,)]
    result = checks.phrase_batches_intact(
        {"examples": [{"base_offset": 10}], "violations": [{"n": 1}]}, batches=3
    )
    assert (result.verdict, result.violations) == ("invalid", 1)


def test_epoch_cache_entries_and_batches_against_the_cache(spark: Any) -> None:
    replicas = df(spark, REPLICAS, [replica(1, 30, 30), replica(2, 30, 30)])
    checkpoints = df(
        spark,
        CHECKPOINTS,
        [
            (1, "c1", "epoch", "t", 0, 0, 0, 0, None),
            (1, "c1", "epoch", "t", 0, 1, 2, 20, None),
            (2, "c2", "epoch", "t", 0, 0, 3, 0, None),
            (2, "c2", "epoch", "t", 0, 1, 1, 40, None),  # epoch goes down (and starts past the LEO)
            (1, "c1", "hw", "t", 0, 0, None, 30, None),  # not an epoch entry
        ],
    )
    batches = df(
        spark,
        BATCHES,
        [
            batch(1, 0, 9, epoch=0),
            batch(1, 10, 19, epoch=1),
            batch(1, 20, 29, epoch=2),
            batch(2, 0, 9, epoch=3),
        ],
    )
    found = checks.epoch_cache_violations(checkpoints, batches, replicas)
    assert rows(found.violations, "broker", "offset", "problem", "batch_epoch", "cache_epoch") == [
        (1, 10, "batch epoch differs from the cache's epoch for its offset", 1, 0),
        (2, 40, "epochs not increasing", None, 1),
    ]
    assert found.entries.count() == 4


# ------------------------------------------------------------------------------------------ journals


def test_leader_hw_backwards_within_a_tenure_but_not_across_a_restart(spark: Any) -> None:
    def ev(ts: int, event: str, hw: int | None = None, **more: Any) -> dict[str, Any]:
        e = {"ts_ms": ts, "broker_id": 1, "event": event, "topic": "t", "partition": 0, **more}
        if hw is not None:
            e.update(high_watermark=hw, log_end_offset=hw + 5)
        return e

    j = journal(
        spark,
        [
            {"ts_ms": 1, "broker_id": 1, "event": "broker_started"},
            ev(2, "became_leader", 0, leader_epoch=1),
            ev(3, "offsets", 10),
            ev(4, "offsets", 8),  # backwards in the same tenure
            {"ts_ms": 5, "broker_id": 1, "event": "broker_started"},  # a restart (killed): a new tenure
            ev(6, "became_leader", 5, leader_epoch=1),
            ev(7, "offsets", 6),
            ev(8, "became_follower", 6, leader_epoch=2),
            ev(9, "truncated", truncate_to=4, reason="diverged"),
            ev(10, "offsets", 4),  # a follower's drop: listed, not failed
        ],
    )
    found = journal_checks.leader_hw_violations(role_timeline(j))
    assert rows(found.violations, "ts_ms", "prev_hw", "hw", "leader_epoch") == [(4, 10, 8, 1)]
    assert rows(found.follower_drops, "ts_ms", "prev_hw", "hw", "trunc_to", "trunc_reason") == [
        (10, 6, 4, 4, "diverged")
    ]
    assert found.tenures.count() == 2


def test_unclean_election_costs_records_and_acknowledged_batches(spark: Any) -> None:
    def offsets(broker: int, ts: int, leo: int) -> dict[str, Any]:
        return {
            "ts_ms": ts,
            "broker_id": broker,
            "event": "offsets",
            "topic": "t",
            "partition": 0,
            "log_end_offset": leo,
            "high_watermark": leo,
        }

    j = journal(
        spark,
        [
            offsets(1, 10, 50),
            offsets(2, 11, 30),
            {
                "ts_ms": 20,
                "controller_id": 1000,
                "event": "leader_elected",
                "topic": "t",
                "partition": 0,
                "leader_id": 2,
                "leader_epoch": 3,
                "isr": [2],
                "unclean": True,
            },
            {
                "ts_ms": 21,
                "broker_id": 2,
                "event": "became_leader",
                "topic": "t",
                "partition": 0,
                "leader_epoch": 3,
                "log_end_offset": 30,
                "high_watermark": 30,
            },
            {
                "ts_ms": 22,
                "controller_id": 1000,
                "event": "leader_elected",
                "topic": "t",
                "partition": 1,
                "leader_id": 1,
                "leader_epoch": 1,
                "isr": [1],
            },
        ],
    )
    acked = df(spark, ACKED, [("p", "t", 0, 0, 9, 1, -1, 5), ("p", "t", 0, 40, 49, 1, -1, 15)])
    found = journal_checks.unclean_election_violations(j, offsets_series(j), acked)
    assert rows(
        found.violations, "leader", "leader_start", "others_leo", "records_lost", "acked_batches_lost"
    ) == [(2, 30, 50, 20, 1)]
    assert found.examined.count() == 2
    got = collect_tables(
        {
            **violation_tables(found.violations, ["elected_ts"], 5),
            "elections": found.elections,
            "examined": count_of(found.examined),
        }
    )
    result = journal_checks.phrase_unclean_elections(got, controller_journal=True)
    assert (result.verdict, result.checked, len(result.extra["elections"])) == ("invalid", 2, 1)
    empty = {"examples": [], "violations": [{"n": 0}], "elections": [], "examined": [{"n": 0}]}
    unseen = journal_checks.phrase_unclean_elections(empty, controller_journal=False)
    assert unseen.verdict == "unknown" and "no controller journal" in unseen.notes[0]


def test_without_a_controller_journal_elections_are_the_brokers_new_leader_epochs(spark: Any) -> None:
    def led(broker: int, ts: int, epoch: int, isr: list[int], leo: int) -> dict[str, Any]:
        return {
            "ts_ms": ts,
            "broker_id": broker,
            "event": "became_leader",
            "topic": "t",
            "partition": 0,
            "leader_epoch": epoch,
            "isr": isr,
            "log_end_offset": leo,
            "high_watermark": leo,
        }

    j = journal(
        spark,
        [
            led(1, 10, 1, [1, 2], 0),
            {
                "ts_ms": 20,
                "broker_id": 1,
                "event": "offsets",
                "topic": "t",
                "partition": 0,
                "log_end_offset": 40,
                "high_watermark": 40,
            },
            {
                "ts_ms": 30,
                "broker_id": 1,
                "event": "isr_changed",
                "topic": "t",
                "partition": 0,
                "leader_epoch": 1,
                "old_isr": [1, 2],
                "isr": [1],
            },
            led(1, 35, 1, [1], 40),  # the same epoch again (a restart): not an election
            led(2, 40, 2, [2], 25),  # broker 2 was out of the ISR [1]: unclean, 15 records lost
        ],
    )
    elections = journal_checks.broker_elections(j)
    assert rows(elections, "elected_ts", "leader", "epoch", "unclean") == [
        (10, 1, 1, False),
        (40, 2, 2, True),
    ]
    empty = df(spark, ACKED, [])
    found = journal_checks.unclean_election_violations(j, offsets_series(j), empty, controller_journal=False)
    assert rows(found.violations, "leader", "leader_start", "others_leo", "records_lost") == [(2, 25, 40, 15)]
    assert found.examined.count() == 2


# -------------------------------------------------------------------------------------- availability


def test_a_stall_is_a_wait_of_a_second_or_more_with_no_acknowledgement(spark: Any) -> None:
    """Partition 0: acknowledgements every 100 ms, then a batch sent at 1.2 s waits until 4.0 s (a stall
    from when it was sent, not from the acknowledgement before); a quiet gap with nothing sent is no
    stall. Partition 1: batches fail after its last acknowledgement.
    Partition 2 is known only from a leader's acked.jsonl: steady, then a 3 s gap."""
    ack = "topic STRING, partition INT, acked_ms LONG, sent_ms LONG"
    rows_0 = [("t", 0, t, t - 5) for t in range(100, 1001, 100)]
    rows_0 += [("t", 0, 4000, 1200), ("t", 0, 6500, 6490)]  # 4.0 -> 6.5 s: nothing was waiting
    rows_1 = [("t", 1, 500, 450)]
    rows_2 = [("t", 2, t, None) for t in range(100, 2001, 100)] + [("t", 2, 5000, None)]
    acknowledged = df(spark, ack, rows_0 + rows_1 + rows_2)
    failed = df(spark, "topic STRING, partition INT, ts_ms LONG, sent_ms LONG", [("t", 1, 9000, 600)])
    got = availability.stall_candidates(acknowledged, failed, span_start_ms=0)
    assert rows(got, "partition", "from_ms", "to_ms") == [(0, 1200, 4000), (1, 600, 9000), (2, 2000, 5000)]
