"""The checks on the controller quorum (docs/controller.md), from the controllers' and brokers' journals and
the controllers' metadata logs.

- ``one_leader_per_epoch``: no two controllers journaled ``quorum_state`` role ``leader`` for one epoch;
- ``metadata_log_matching``: every committed metadata batch is the same on every voter: each voter's
  metadata log on disk (``__cluster_metadata-0``), read below the offset its journal says it committed
  (``metadata_committed``), and the journal lines themselves (Raft's log matching, on what was committed);
- ``no_stale_controller_obeyed``: no broker applied a LEADER_AND_ISR or STOP_REPLICA (its
  ``became_leader``, ``became_follower`` and ``partition_stopped`` lines, which carry the request's
  ``controller_epoch``) whose controller epoch was lower than one it had already accepted in the same
  process (a restarted broker starts knowing no epoch, as Kafka's does).

A cluster with a single controller (no quorum) journals none of the controller events: the first two
examine nothing and pass (``checked`` None, with a note), rather than make the report unknown.

As in ``checks``: ``<name>_violations`` (DataFrames in, violating rows out, no action),
``phrase_<name>`` (collected tables to a ``CheckResult``) and ``check_<name>`` (wired to ``Inputs``).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.inputs import Inputs
from spark_jobs.plan import collect_tables, count_of, finished, single, violation_tables
from spark_jobs.result import DEFAULT_MAX_EXAMPLES, CheckResult

APPLIED_EVENTS = ("became_leader", "became_follower", "partition_stopped")


def _controller(journal: DataFrame, event: str) -> DataFrame:
    return journal.filter((F.col("source") == "controller") & (F.col("event") == event))


# ------------------------------------------------------------------------------------- one leader per epoch


def one_leader_per_epoch_violations(journal: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(epochs with more than one leader, every epoch that had a leader)."""
    leaders = (
        _controller(journal, "quorum_state")
        .filter(F.col("role") == "leader")
        .groupBy("epoch")
        .agg(F.array_sort(F.collect_set("owner")).alias("leaders"), F.min("ts_ms").alias("first_ts_ms"))
    )
    return leaders.filter(F.size("leaders") > 1), leaders


def phrase_one_leader_per_epoch(got: dict[str, list[dict[str, Any]]]) -> CheckResult:
    checked = int(single(got["epochs"]) or 0)
    return finished(
        "one_leader_per_epoch",
        "One quorum leader per epoch",
        "No two controllers were the Raft leader (quorum_state role leader) in the same epoch.",
        got,
        checked=checked or None,
        notes=[] if checked else ["no controller quorum journaled a leader (a controller without a quorum?)"],
    )


def check_one_leader_per_epoch(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    violations, epochs = one_leader_per_epoch_violations(inp.journal)
    got = collect_tables(
        {**violation_tables(violations, ["epoch"], max_examples), "epochs": count_of(epochs)}
    )
    return phrase_one_leader_per_epoch(got)


# ------------------------------------------------------------------------------------- metadata log matching


def metadata_log_matching_violations(
    journal: DataFrame, log_batches: DataFrame | None = None
) -> tuple[DataFrame, DataFrame]:
    """(committed metadata batches that differ, every committed batch compared: ``base_offset``).

    What each voter committed: the batches it journaled as committed (``metadata_committed``: offset,
    last offset, leader epoch, CRC), so its committed end is the last of them + 1. ``log_batches``: the
    batch headers of every voter's metadata log on disk (``__cluster_metadata-0``; ``broker`` is the
    voter); each voter's log is read below its own committed end (an uncommitted tail may differ, as Raft
    allows). At each committed base offset every side (each voter's log and each voter's journal line)
    must hold the same batch (last offset, leader epoch, CRC), the log's bytes must match their CRC, and
    a voter with a metadata log must hold every batch below its committed end."""
    committed = _controller(journal, "metadata_committed").filter(F.col("offset").isNotNull())
    ends = committed.groupBy(F.col("owner").alias("voter")).agg(
        (F.max(F.coalesce("last_offset", "offset")) + 1).alias("committed_end")
    )
    journal_sides = committed.select(
        F.col("owner").alias("voter"),
        F.col("offset").alias("base_offset"),
        F.coalesce("last_offset", "offset").alias("last_offset"),
        "leader_epoch",
        "crc",
        F.lit(True).alias("crc_ok"),
        F.lit("journal").alias("side"),
    )
    sides = journal_sides
    if log_batches is not None:
        log_sides = (
            log_batches.select(
                F.col("broker").alias("voter"),
                "base_offset",
                "last_offset",
                "leader_epoch",
                "crc",
                F.coalesce("crc_ok", F.lit(True)).alias("crc_ok"),
                F.lit("log").alias("side"),
            )
            .join(ends, "voter")
            .filter(F.col("last_offset") < F.col("committed_end"))
            .drop("committed_end")
        )
        sides = sides.unionByName(log_sides)
    by_offset = sides.groupBy("base_offset").agg(
        F.array_sort(
            F.collect_list(F.struct("voter", "side", "last_offset", "leader_epoch", "crc", "crc_ok"))
        ).alias("sides"),
        F.max("last_offset").alias("last_offset"),
    )
    distinct = F.size(
        F.array_distinct(
            F.transform("sides", lambda x: F.struct(x["last_offset"], x["leader_epoch"], x["crc"]))
        )
    )
    bad_crc = F.exists("sides", lambda x: ~x["crc_ok"])
    if log_batches is not None:
        with_log = log_batches.select(F.col("broker").alias("voter")).distinct()
        expected = with_log.join(ends, "voter")
        holders = F.transform(F.filter("sides", lambda x: x["side"] == "log"), lambda x: x["voter"])
        missing_df = (
            by_offset.join(expected, F.col("base_offset") < F.col("committed_end"))
            .filter(~F.array_contains(holders, F.col("voter")))
            .groupBy("base_offset")
            .agg(F.array_sort(F.collect_list("voter")).alias("missing_on"))
        )
        by_offset = by_offset.join(missing_df, "base_offset", "left")
    else:
        by_offset = by_offset.withColumn("missing_on", F.lit(None).cast("array<int>"))
    problem = (
        F.when(distinct > 1, F.lit("voters hold different committed batches at this offset"))
        .when(bad_crc, F.lit("a committed batch's bytes do not match its CRC"))
        .when(F.size(F.coalesce("missing_on", F.array().cast("array<int>"))) > 0, F.lit("missing"))
    )
    detail = F.array_join(
        F.transform(
            "sides",
            lambda x: F.format_string(
                "voter %d %s: %d-%d epoch %d crc %d%s",
                x["voter"],
                x["side"],
                F.col("base_offset"),
                x["last_offset"],
                x["leader_epoch"],
                x["crc"],
                F.when(x["crc_ok"], F.lit("")).otherwise(F.lit(" (bytes fail the CRC)")),
            ),
        ),
        "; ",
    )
    violations = (
        by_offset.withColumn("problem", problem)
        .filter(F.col("problem").isNotNull())
        .select(
            F.col("base_offset").alias("offset"),
            "problem",
            F.concat(
                detail,
                F.when(
                    F.size(F.coalesce("missing_on", F.array().cast("array<int>"))) > 0,
                    F.concat(
                        F.lit("; missing on voter(s) "),
                        F.array_join(F.col("missing_on").cast("array<string>"), ","),
                    ),
                ).otherwise(F.lit("")),
            ).alias("detail"),
            F.coalesce("missing_on", F.array().cast("array<int>")).alias("missing_on"),
        )
    )
    return violations, by_offset.select("base_offset")


def phrase_metadata_log_matching(
    got: dict[str, list[dict[str, Any]]], *, voters_with_logs: int = 0
) -> CheckResult:
    checked = int(single(got["offsets"]) or 0)
    notes = []
    if checked:
        notes.append(
            f"{checked} committed metadata batch(es) compared: each voter's metadata log on disk "
            f"(__cluster_metadata-0 segments of {voters_with_logs} voter(s)) below what that voter journaled "
            "as committed, and the voters' metadata_committed journal lines"
        )
        if not voters_with_logs:
            notes.append("no voter's metadata log was found on disk: the journals alone were compared")
    else:
        notes.append("no committed metadata records journaled (a controller without a quorum?)")
    return finished(
        "metadata_log_matching",
        "Committed metadata log identical across voters",
        "Every committed metadata batch is the same on every voter: read from each voter's metadata log "
        "(__cluster_metadata-0) up to the offset its journal says it committed, and from the voters' "
        "metadata_committed journal lines, each batch has the same base and last offset, leader epoch and "
        "CRC everywhere, its bytes match the CRC, and no voter misses one below its committed offset.",
        got,
        checked=checked or None,
        notes=notes,
    )


def check_metadata_log_matching(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    violations, offsets = metadata_log_matching_violations(inp.journal, inp.metadata_batches)
    voters = len({s.broker for s in inp.layout.metadata_segments})
    got = collect_tables(
        {**violation_tables(violations, ["offset"], max_examples), "offsets": count_of(offsets)}
    )
    return phrase_metadata_log_matching(got, voters_with_logs=voters)


# ------------------------------------------------------------------------------------- stale controller


def stale_controller_obeyed_violations(journal: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(applied requests with a controller epoch below one the broker process had already accepted, every
    applied request that names its controller epoch)."""
    brokers = journal.filter(F.col("source") == "broker")
    lifetime = Window.partitionBy("owner").orderBy("ts_ms", "seq")
    marked = brokers.withColumn(
        "incarnation",
        F.sum(F.when(F.col("event") == "broker_started", 1).otherwise(0)).over(
            lifetime.rowsBetween(Window.unboundedPreceding, 0)
        ),
    )
    applied = marked.filter(F.col("event").isin(*APPLIED_EVENTS) & F.col("controller_epoch").isNotNull())
    before = (
        Window.partitionBy("owner", "incarnation")
        .orderBy("ts_ms", "seq")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    with_max = applied.withColumn("highest_before", F.max("controller_epoch").over(before))
    violations = with_max.filter(F.col("controller_epoch") < F.col("highest_before")).select(
        F.col("owner").alias("broker"),
        "ts_ms",
        "event",
        "topic",
        "partition",
        "controller_epoch",
        "highest_before",
    )
    return violations, applied


def phrase_stale_controller_obeyed(got: dict[str, list[dict[str, Any]]]) -> CheckResult:
    return finished(
        "no_stale_controller_obeyed",
        "No deposed controller obeyed",
        "No broker applied a LEADER_AND_ISR or STOP_REPLICA whose controller epoch was lower than one it had "
        "already accepted in the same process (became_leader / became_follower / partition_stopped carry "
        "the request's controller_epoch).",
        got,
        checked=int(single(got["applied"]) or 0) or None,
    )


def check_no_stale_controller_obeyed(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    violations, applied = stale_controller_obeyed_violations(inp.journal)
    got = collect_tables(
        {**violation_tables(violations, ["broker", "ts_ms"], max_examples), "applied": count_of(applied)}
    )
    return phrase_stale_controller_obeyed(got)


__all__ = [
    "check_metadata_log_matching",
    "check_no_stale_controller_obeyed",
    "check_one_leader_per_epoch",
    "metadata_log_matching_violations",
    "one_leader_per_epoch_violations",
    "stale_controller_obeyed_violations",
]
