"""The checks on the journals' history.

- ``leader_hw_monotonic``: a leader's HW never moves backwards within its tenure (one leader epoch of one
  broker process); follower HW drops are listed (not violations) with the truncation that explains them;
- ``unclean_elections``: the controller's unclean elections (without a controller journal, the brokers'),
  with the records and acknowledged batches each cost.

As in ``checks``: ``<name>_violations`` (DataFrames in, violating rows out, no action), ``phrase_<name>``
(collected tables to a ``CheckResult``) and ``check_<name>`` (the two wired to the report's ``Inputs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.history import cached
from spark_jobs.inputs import TP, Inputs
from spark_jobs.plan import collect_tables, count_of, finished, single, top, violation_tables
from spark_jobs.result import DEFAULT_MAX_EXAMPLES, CheckResult


@dataclass
class LeaderHwFindings:
    """``violations``: a leader's HW lower than its previous one in the same tenure; ``follower_drops``:
    follower HW drops with the truncation before them (information); ``tenures``: every leader tenure."""

    violations: DataFrame
    follower_drops: DataFrame
    tenures: DataFrame


def leader_hw_violations(roles: DataFrame) -> LeaderHwFindings:
    """Within a leader's tenure (``roles``: broker partition events with ``role``, ``tenure`` and
    ``incarnation``, see ``history.role_timeline``) the HW never decreases."""
    with_hw = roles.filter(F.col("hw").isNotNull())
    tenure = Window.partitionBy("broker", *TP, "tenure", "incarnation").orderBy("ts_ms", "seq")
    leaders = (
        with_hw.filter(F.col("role") == "leader")
        .withColumn("prev_hw", F.lag("hw").over(tenure))
        .withColumn("prev_ts", F.lag("ts_ms").over(tenure))
    )
    violations = leaders.filter(F.col("hw") < F.col("prev_hw")).select(
        "broker",
        *TP,
        F.col("tenure_epoch").alias("leader_epoch"),
        "prev_ts",
        "prev_hw",
        "ts_ms",
        "hw",
        "leo",
        "event",
    )
    # Follower HW drops, each with the last truncation of that replica at or before it.
    everything = Window.partitionBy("broker", *TP).orderBy("ts_ms", "seq")
    upto = everything.rowsBetween(Window.unboundedPreceding, 0)
    fol = (
        roles.withColumn(
            "trunc_ts", F.last(F.when(F.col("event") == "truncated", F.col("ts_ms")), True).over(upto)
        )
        .withColumn(
            "trunc_to", F.last(F.when(F.col("event") == "truncated", F.col("truncate_to")), True).over(upto)
        )
        .withColumn(
            "trunc_reason", F.last(F.when(F.col("event") == "truncated", F.col("reason")), True).over(upto)
        )
        .filter(F.col("hw").isNotNull())
        .withColumn("prev_hw", F.lag("hw").over(everything))
        .filter((F.col("role") != "leader") & (F.col("hw") < F.col("prev_hw")))
        .select("broker", *TP, "ts_ms", "prev_hw", "hw", "role", "trunc_ts", "trunc_to", "trunc_reason")
    )
    tenures = leaders.select("broker", *TP, "tenure", "incarnation").distinct()
    return LeaderHwFindings(violations, fol, tenures)


def phrase_leader_hw(got: dict[str, list[dict[str, Any]]]) -> CheckResult:
    drops = got["drops"]
    return finished(
        "leader_hw_monotonic",
        "Leader HW never moves backwards",
        "Within a leader's tenure (one leader epoch of one broker process, from became_leader to the next "
        "role change or stop) the HW in its journal never decreases. Follower HW drops are listed apart, "
        "with the truncation that preceded them.",
        got,
        checked=int(single(got["tenures"])),
        notes=[f"{len(drops)} follower HW drop(s) listed (information, not violations)"] if drops else [],
        extra={"follower_hw_drops": drops},
    )


def check_leader_hw(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    found = leader_hw_violations(cached(inp, "roles"))
    got = collect_tables(
        {
            **violation_tables(found.violations, [*TP, "broker", "ts_ms"], max_examples),
            "drops": top(found.follower_drops, [*TP, "broker", "ts_ms"], max_examples),
            "tenures": count_of(found.tenures),
        }
    )
    return phrase_leader_hw(got)


@dataclass
class UncleanFindings:
    """``elections``: every unclean election with its cost; ``violations``: those that cost records or
    acknowledged batches, or whose cost cannot be worked out; ``examined``: every controller election."""

    violations: DataFrame
    elections: DataFrame
    examined: DataFrame


def broker_elections(journal: DataFrame) -> DataFrame:
    """Leader elections as the brokers' journals show them, for a cluster without a controller journal
    (unmanaged brokers led by whoever sends LEADER_AND_ISR, as the bench and the protocol tests do): each
    ``became_leader`` with a leader epoch newer than any before it for the partition; ``unclean`` when the
    new leader was not in the ISR last journaled before it (``became_leader`` / ``isr_changed``)."""
    ev = journal.filter(
        (F.col("source") == "broker")
        & F.col("topic").isNotNull()
        & F.col("event").isin("became_leader", "isr_changed")
    )
    before = Window.partitionBy(*TP).orderBy("ts_ms", "seq").rowsBetween(Window.unboundedPreceding, -1)
    ev = ev.withColumn("prev_isr", F.last("isr", ignorenulls=True).over(before)).withColumn(
        "prev_epoch", F.max("leader_epoch").over(before)
    )
    return ev.filter(
        (F.col("event") == "became_leader")
        & (F.col("leader_epoch") > F.coalesce(F.col("prev_epoch"), F.lit(-1)))
    ).select(
        *TP,
        F.col("ts_ms").alias("elected_ts"),
        F.col("owner").alias("leader"),
        F.col("leader_epoch").alias("epoch"),
        "isr",
        (F.col("prev_isr").isNotNull() & ~F.array_contains("prev_isr", F.col("owner"))).alias("unclean"),
    )


def unclean_election_violations(
    journal: DataFrame, series: DataFrame, acked: DataFrame, *, controller_journal: bool = True
) -> UncleanFindings:
    """Each ``leader_elected`` with ``unclean: true`` in the controller's journal (without one, each unclean
    election of ``broker_elections``), with the records the other replicas had beyond the new leader's log
    end and the acknowledged batches above it."""
    j = journal
    if controller_journal:
        every = j.filter((F.col("source") == "controller") & (F.col("event") == "leader_elected")).select(
            *TP,
            F.col("ts_ms").alias("elected_ts"),
            F.col("leader_id").alias("leader"),
            F.col("leader_epoch").alias("epoch"),
            "isr",
            F.coalesce(F.col("unclean"), F.lit(False)).alias("unclean"),
        )
    else:
        every = broker_elections(j)
    elections = every.filter("unclean").drop("unclean")
    # The new leader's LEO when it took over: its became_leader / epoch_assigned for that epoch, else its
    # last LEO before the election.
    took_over = (
        j.filter((F.col("source") == "broker") & F.col("event").isin("became_leader", "epoch_assigned"))
        .select(
            F.col("owner").alias("leader"),
            *TP,
            F.col("leader_epoch").alias("epoch"),
            F.coalesce("start_offset", "log_end_offset").alias("start"),
        )
        .groupBy("leader", *TP, "epoch")
        .agg(F.min("start").alias("start"))
    )
    e = elections.join(took_over, ["leader", *TP, "epoch"], "left")
    before = series.join(e.select(*TP, "elected_ts", "leader"), TP).filter(
        F.col("ts_ms") <= F.col("elected_ts")
    )
    last_leo = before.groupBy(*TP, "elected_ts", "leader", "broker").agg(
        F.max_by("leo", F.struct("ts_ms", "seq")).alias("leo")
    )
    agg = last_leo.groupBy(*TP, "elected_ts").agg(
        F.max(F.when(F.col("broker") != F.col("leader"), F.col("leo"))).alias("others_leo"),
        F.max(F.when(F.col("broker") == F.col("leader"), F.col("leo"))).alias("leader_leo_before"),
    )
    e = e.join(agg, [*TP, "elected_ts"], "left").withColumn(
        "leader_start", F.coalesce("start", "leader_leo_before")
    )
    acked = acked.select(*TP, "acked_ms", "last_offset")
    lost_acked = (
        e.join(acked, TP)
        .filter((F.col("acked_ms") <= F.col("elected_ts")) & (F.col("last_offset") >= F.col("leader_start")))
        .groupBy(*TP, "elected_ts")
        .agg(F.count("*").alias("acked_batches_lost"))
    )
    e = e.join(lost_acked, [*TP, "elected_ts"], "left").select(
        *TP,
        "elected_ts",
        "leader",
        "epoch",
        "isr",
        "leader_start",
        "others_leo",
        F.greatest(F.col("others_leo") - F.col("leader_start"), F.lit(0)).alias("records_lost"),
        F.coalesce("acked_batches_lost", F.lit(0)).alias("acked_batches_lost"),
    )
    violations = e.filter(
        F.col("records_lost").isNull() | (F.col("records_lost") > 0) | (F.col("acked_batches_lost") > 0)
    )
    # Every election journaled was looked at (clean ones cost nothing by definition).
    return UncleanFindings(violations, e, every)


def phrase_unclean_elections(
    got: dict[str, list[dict[str, Any]]], *, controller_journal: bool
) -> CheckResult:
    notes = []
    if not controller_journal:
        notes.append(
            "no controller journal: elections are the brokers' became_leader events with a new leader "
            "epoch, unclean when the new leader was not in the ISR journaled before it"
        )
    return finished(
        "unclean_elections",
        "No unclean election cost records",
        "Each leader_elected with unclean=true in the controller journal, with what it cost: records the "
        "other replicas had beyond the new leader's log end (from the journals) and acknowledged batches "
        "above it. An unclean election that cost nothing passes; one whose cost cannot be worked out fails.",
        got,
        checked=single(got["examined"]) or 0,
        notes=notes,
        extra={"elections": got["elections"]},
    )


def check_unclean_elections(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    controller = bool(inp.layout.controller_journals)
    found = unclean_election_violations(
        inp.journal, cached(inp, "series"), inp.acknowledged, controller_journal=controller
    )
    got = collect_tables(
        {
            **violation_tables(found.violations, ["elected_ts"], max_examples),
            "elections": top(found.elections, ["elected_ts"], 200),
            "examined": count_of(found.examined),
        }
    )
    return phrase_unclean_elections(got, controller_journal=controller)
