"""The checks on the controller quorum (docs/controller.md), from the controllers' and brokers' journals.

- ``one_leader_per_epoch``: no two controllers journaled ``quorum_state`` role ``leader`` for one epoch;
- ``metadata_log_matching``: every committed metadata batch (``metadata_committed``: offset, CRC) is the
  same on every voter that committed it (Raft's log matching, on what the quorum committed);
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


def metadata_log_matching_violations(journal: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(committed offsets whose batches differ between voters, every committed offset)."""
    committed = (
        _controller(journal, "metadata_committed")
        .filter(F.col("offset").isNotNull())
        .groupBy("offset")
        .agg(
            F.array_sort(F.collect_set("crc")).alias("crcs"),
            F.array_sort(F.collect_set("leader_epoch")).alias("leader_epochs"),
            F.array_sort(F.collect_set("owner")).alias("voters"),
        )
    )
    return committed.filter((F.size("crcs") > 1) | (F.size("leader_epochs") > 1)), committed


def phrase_metadata_log_matching(got: dict[str, list[dict[str, Any]]]) -> CheckResult:
    checked = int(single(got["offsets"]) or 0)
    return finished(
        "metadata_log_matching",
        "Committed metadata log identical across voters",
        "Every metadata batch a voter saw committed (metadata_committed) has the same CRC and leader epoch "
        "on every voter that committed that offset.",
        got,
        checked=checked or None,
        notes=[] if checked else ["no committed metadata records journaled (a controller without a quorum?)"],
    )


def check_metadata_log_matching(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    violations, offsets = metadata_log_matching_violations(inp.journal)
    got = collect_tables(
        {**violation_tables(violations, ["offset"], max_examples), "offsets": count_of(offsets)}
    )
    return phrase_metadata_log_matching(got)


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
