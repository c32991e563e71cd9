"""The checks on consumer groups' committed offsets (docs/groups.md, docs/report.md), from the
coordinators' ``offsets_committed`` journal lines and the ``__consumer_offsets`` segments.

An OffsetCommit is an acknowledged write like any other: the coordinator answers it once its batch is
committed in ``__consumer_offsets`` (acks=all), and journals it then with the batch's place (base offset,
last offset, CRC) and each committed offset with the consumed partition's high watermark.

- ``committed_offsets_not_lost``: every acknowledged committed offset is still readable from every replica
  of its ``__consumer_offsets`` partition that must hold it (the final leader, every final ISR member and
  every member of the ISR when the final stop began), below the partition's final HW: its own batch, or a
  later acknowledged commit of the same group, topic and partition (which supersedes it, as a load would
  read it), at the journaled offset with the journaled CRC;
- ``committed_offsets_below_hw``: no committed offset was above its partition's HW when it was committed
  (a consumer's position comes from what it fetched, and a leader serves nothing above the HW), nor above
  the partition's final HW (the records before it would be gone).

A run without consumer groups journals no commit: both checks examine nothing and pass (``checked`` None,
with a note), rather than make the report unknown.

As in ``checks``: ``<name>_violations`` (DataFrames in, violating rows out, no action), ``phrase_<name>``
(collected tables to a ``CheckResult``) and ``check_<name>`` (wired to ``Inputs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.history import cached
from spark_jobs.inputs import REPLICA, TP, Inputs
from spark_jobs.plan import collect_tables, count_of, finished, single, violation_tables
from spark_jobs.result import DEFAULT_MAX_EXAMPLES, CheckResult

# One committed offset of an ``offsets_committed`` line (the journal keeps the list as JSON text).
COMMITTED_OFFSETS_SCHEMA = (
    "ARRAY<STRUCT<topic: STRING, partition: INT, offset: LONG, high_watermark: LONG, "
    "local_high_watermark: LONG>>"
)
KEY = ["group_id", "committed_topic", "committed_partition"]
NO_COMMITS_NOTE = "no offsets_committed line in the journals: no consumer group committed offsets in this run"


def committed_offsets(journal: DataFrame) -> DataFrame:
    """One row per committed offset of each acknowledged OffsetCommit: ``topic``/``partition`` of
    ``__consumer_offsets``, the batch (``base_offset``, ``last_offset``, ``crc``), ``coordinator``,
    ``ts_ms``, ``group_id``, ``committed_topic``/``committed_partition``/``offset`` and the HWs journaled
    with it."""
    commits = journal.filter((F.col("source") == "broker") & (F.col("event") == "offsets_committed"))
    parsed = commits.select(
        *TP,
        "base_offset",
        "last_offset",
        "crc",
        "ts_ms",
        "group_id",
        F.col("owner").alias("coordinator"),
        F.explode(F.from_json("offsets", COMMITTED_OFFSETS_SCHEMA)).alias("o"),
    )
    return parsed.select(
        *TP,
        "base_offset",
        "last_offset",
        "crc",
        "ts_ms",
        "group_id",
        "coordinator",
        F.col("o.topic").alias("committed_topic"),
        F.col("o.partition").alias("committed_partition"),
        F.col("o.offset").alias("offset"),
        F.coalesce(F.col("o.high_watermark"), F.lit(-1)).alias("high_watermark"),
        F.coalesce(F.col("o.local_high_watermark"), F.lit(-1)).alias("local_high_watermark"),
    )


def _final_hw(replicas: DataFrame) -> DataFrame:
    """Per partition, its final HW: the highest HW a replica ended with (null when none is known)."""
    return replicas.groupBy(*TP).agg(F.max("hw").alias("final_hw"))


def _expected_replicas(partitions: DataFrame, stop_isr: DataFrame) -> DataFrame:
    """Per partition, the replicas that must hold what was committed in it: the final leader, the final
    ISR and the ISR when the final stop began (as ``acked_not_lost``)."""
    none = F.array().cast("array<int>")
    return partitions.join(stop_isr, TP, "left").select(
        *TP,
        "leader",
        F.array_distinct(
            F.concat(
                "isr",
                # No leader (-1): its ISR keeps the last member, which is judged instead.
                F.when(F.col("leader").isNotNull() & (F.col("leader") >= 0), F.array("leader")).otherwise(
                    none
                ),
                F.coalesce("stop_isr", none),
            )
        ).alias("expected"),
    )


def offsets_not_lost_violations(
    commits: DataFrame,
    partitions: DataFrame,
    stop_isr: DataFrame,
    batches: DataFrame,
    replicas: DataFrame,
    cleaned: DataFrame | None = None,
) -> DataFrame:
    """Each committed offset (``commits``: ``committed_offsets``) on each replica of its
    ``__consumer_offsets`` partition that must hold it: the replica holds, below the partition's final HW,
    this commit's batch or a later acknowledged commit's of the same group, topic and partition (at its
    journaled base offset, with its last offset and CRC). The violating rows, with ``problem`` saying what
    the replica has at the commit's offset. ``cleaned`` (``topic``, ``partition``, ``cleaned_below``): below
    there a compacted partition's batches may have been rewritten by its cleaner (other CRC, fewer
    records): a batch at the commit's base and last offset is the commit's."""
    hw = _final_hw(replicas)

    def with_crc_key(df: DataFrame) -> DataFrame:
        if cleaned is None:
            return df.withColumn("crc_key", F.col("crc"))
        rewritten = F.col("cleaned_below").isNotNull() & (F.col("base_offset") < F.col("cleaned_below"))
        return (
            df.join(F.broadcast(cleaned), TP, "left")
            .withColumn("crc_key", F.when(rewritten, F.lit(-1)).otherwise(F.col("crc")))
            .drop("cleaned_below")
        )

    held_batches = with_crc_key(
        batches.select(*REPLICA, "base_offset", "last_offset", "crc")
        .join(hw, TP, "left")
        .filter(F.col("final_hw").isNull() | (F.col("last_offset") < F.col("final_hw")))
        .drop("final_hw")
    ).drop("crc")
    # The commits each replica holds, and per key the newest of them.
    held = (
        with_crc_key(commits.select(*TP, *KEY, "base_offset", "last_offset", "crc"))
        .join(held_batches, [*TP, "base_offset", "last_offset", "crc_key"])
        .groupBy(*REPLICA, *KEY)
        .agg(F.max("base_offset").alias("newest_held"))
    )
    expected = (
        commits.join(_expected_replicas(partitions, stop_isr), TP, "left")
        .select("*", F.explode_outer("expected").alias("broker"))
        .drop("expected")
    )
    judged = expected.join(held, [*REPLICA, *KEY], "left")
    bad = judged.filter(F.col("newest_held").isNull() | (F.col("newest_held") < F.col("base_offset")))
    at_offset = batches.select(
        *REPLICA,
        "base_offset",
        F.col("last_offset").alias("found_last_offset"),
        F.col("crc").alias("found_crc"),
    )
    bad = bad.join(at_offset, [*REPLICA, "base_offset"], "left").join(hw, TP, "left")
    problem = (
        F.when(F.col("broker").isNull(), F.lit("the __consumer_offsets partition has no replica"))
        .when(F.col("found_crc").isNull(), F.lit("missing"))
        .when(F.col("found_crc") != F.col("crc"), F.lit("a different batch is at this offset (CRC differs)"))
        .when(F.col("found_last_offset") != F.col("last_offset"), F.lit("batch boundary differs"))
        .otherwise(F.lit("above the partition's final HW"))
    )
    return bad.select(
        "group_id",
        "committed_topic",
        "committed_partition",
        "offset",
        "ts_ms",
        "coordinator",
        *TP,
        "base_offset",
        "last_offset",
        "crc",
        "broker",
        F.when(F.col("broker") == F.col("leader"), F.lit("leader")).otherwise(F.lit("isr")).alias("role"),
        problem.alias("problem"),
        "found_crc",
        "final_hw",
    )


def phrase_offsets_not_lost(got: dict[str, list[dict[str, Any]]]) -> CheckResult:
    """The result from ``examples``, ``violations``, ``checked`` (committed offsets) and ``commits``."""
    checked = int(single(got["checked"]) or 0)
    commits = int(single(got["commits"]) or 0)
    notes = (
        [
            f"{checked} committed offset(s) of {commits} acknowledged OffsetCommit(s) checked on the final "
            "leader, every final ISR member and every member of the ISR before the final stop of their "
            "__consumer_offsets partition"
        ]
        if checked
        else [NO_COMMITS_NOTE]
    )
    return finished(
        "committed_offsets_not_lost",
        "No acknowledged committed offset lost",
        "Every offset a group coordinator acknowledged (its offsets_committed journal line: the commit's "
        "batch in __consumer_offsets and its CRC) can still be read from every replica of that "
        "__consumer_offsets partition that must hold it (final leader, final ISR, ISR before the final "
        "stop), below the partition's final HW: that batch itself, or a later acknowledged commit for the "
        "same group, topic and partition, which supersedes it.",
        got,
        checked=checked or None,
        notes=notes,
    )


def check_committed_offsets_not_lost(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    from spark_jobs.compacted import cleaned_bounds

    commits = committed_offsets(inp.journal)
    bounds = cleaned_bounds(inp)
    if bounds:
        # A deleted group's commits are removed by the cleaner with its tombstones (as in Kafka): not judged
        # on a compacted __consumer_offsets.
        deleted = (
            inp.journal.filter((F.col("source") == "broker") & (F.col("event") == "group_deleted"))
            .groupBy("group_id")
            .agg(F.max("ts_ms").alias("deleted_ms"))
        )
        compacted = [t for (t, _p) in bounds]
        commits = (
            commits.join(deleted, "group_id", "left")
            .filter(
                F.col("deleted_ms").isNull()
                | (F.col("deleted_ms") < F.col("ts_ms"))
                | ~F.col("topic").isin(compacted)
            )
            .drop("deleted_ms")
        )
    cleaned = (
        inp.batches.sparkSession.createDataFrame(
            [(t, p, b) for (t, p), b in bounds.items()], "topic STRING, partition INT, cleaned_below LONG"
        )
        if bounds
        else None
    )
    violations = offsets_not_lost_violations(
        commits, inp.partitions, cached(inp, "stop_isr"), inp.batches, inp.replicas, cleaned
    )
    got = collect_tables(
        {
            **violation_tables(violations, [*KEY, "base_offset", "broker"], max_examples),
            "checked": count_of(commits),
            "commits": count_of(commits, *TP, "base_offset", "crc"),
        }
    )
    return phrase_offsets_not_lost(got)


@dataclass
class BelowHwFindings:
    """``violations``: committed offsets above their partition's HW; ``evidence``: per kind of evidence
    (``leader``, ``follower``, ``final``, ``none``) how many committed offsets were judged by it."""

    violations: DataFrame
    evidence: DataFrame


def offsets_below_hw_violations(commits: DataFrame, replicas: DataFrame) -> BelowHwFindings:
    """A committed offset is never above its partition's HW when committed (``high_watermark``, journaled
    when the coordinator led the partition) nor above the partition's final HW (the highest HW a replica of
    it ended with)."""
    hw = _final_hw(replicas).select(
        F.col("topic").alias("committed_topic"),
        F.col("partition").alias("committed_partition"),
        "final_hw",
    )
    df = commits.join(hw, ["committed_topic", "committed_partition"], "left")
    at_commit = (F.col("high_watermark") >= 0) & (F.col("offset") > F.col("high_watermark"))
    at_end = F.col("final_hw").isNotNull() & (F.col("offset") > F.col("final_hw"))
    violations = df.filter(at_commit | at_end).select(
        "group_id",
        "committed_topic",
        "committed_partition",
        "offset",
        "ts_ms",
        "coordinator",
        "high_watermark",
        "final_hw",
        F.when(at_commit, F.lit("above the partition's HW when committed"))
        .otherwise(F.lit("above the partition's final HW"))
        .alias("problem"),
    )
    evidence = (
        df.select(
            F.when(F.col("high_watermark") >= 0, F.lit("leader"))
            .when(
                (F.col("local_high_watermark") >= 0) & (F.col("offset") <= F.col("local_high_watermark")),
                F.lit("follower"),
            )
            .when(F.col("final_hw").isNotNull(), F.lit("final"))
            .otherwise(F.lit("none"))
            .alias("evidence")
        )
        .groupBy("evidence")
        .agg(F.count(F.lit(1)).alias("n"))
    )
    return BelowHwFindings(violations, evidence)


def phrase_offsets_below_hw(got: dict[str, list[dict[str, Any]]]) -> CheckResult:
    """The result from ``examples``, ``violations`` and ``evidence``."""
    by = {r["evidence"]: int(r["n"]) for r in got["evidence"]}
    checked = by.get("leader", 0) + by.get("follower", 0) + by.get("final", 0)
    notes: list[str] = []
    if not by:
        notes.append(NO_COMMITS_NOTE)
    else:
        notes.append(
            f"{by.get('leader', 0)} committed offset(s) compared with the HW its coordinator, the "
            f"partition's leader, journaled at the commit; {by.get('follower', 0)} at or below the HW of the "
            "coordinator's follower replica then (never above the leader's); "
            f"{by.get('final', 0)} only with the partition's final HW (the coordinator held no replica of it)"
        )
    if by.get("none"):
        notes.append(
            f"{by['none']} committed offset(s) not judged: their partition has no replica with a known HW "
            "at the end (a deleted topic?)"
        )
    return finished(
        "committed_offsets_below_hw",
        "No committed offset above the high watermark",
        "No offset a consumer group committed was above its partition's high watermark when it was "
        "committed (a consumer's position comes from records it fetched, and a leader serves none above "
        "the HW), nor above the partition's final HW (the records before it would be lost). The HW at the "
        "commit is known where the coordinator led the partition; elsewhere the final HW bounds it.",
        got,
        checked=checked if by else None,
        notes=notes,
    )


def check_committed_offsets_below_hw(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    found = offsets_below_hw_violations(committed_offsets(inp.journal), inp.replicas)
    got = collect_tables(
        {
            **violation_tables(found.violations, [*KEY, "ts_ms"], max_examples),
            "evidence": found.evidence,
        }
    )
    return phrase_offsets_below_hw(got)
