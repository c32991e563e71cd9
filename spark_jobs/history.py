"""What happened over time, from the journals: the LEO/HW series of every replica, the faults, and each
broker's role (leader tenure, follower) at every event.

Faults are:

- ``crash``: a ``broker_started`` with no ``broker_stopped`` since the broker's previous start (the
  process was killed); dated at the restart, the first moment the journal shows it (a broker killed and
  never restarted shows only through the controller's ``broker_fenced``);
- ``unclean_stop``: ``broker_stopped`` with ``clean: false``;
- ``fenced``: the controller's ``broker_fenced``;
- ``isr_shrink``: an ``isr_changed`` whose ISR is smaller than before;
- ``leader_change``: any ``became_leader`` / ``leader_elected`` after a partition's first one;
- ``unclean_election``: a ``leader_elected`` with ``unclean: true``.

``crash``, ``unclean_stop`` and ``fenced`` concern every partition (``topic`` is null); the others one.

The final stop of the cluster is not a fault: events from the first controlled shutdown after the last
``broker_started`` of the run (the controller tags those with ``reason: controlled_shutdown``; without a
controller journal, from the first clean ``broker_stopped`` after it) are left out.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.inputs import TP, Inputs, pinned

FAULT_COLUMNS = ["ts_ms", "kind", "broker", "topic", "partition", "detail"]
SERIES_EVENTS = ("offsets", "became_leader", "became_follower", "isr_changed")


def _broker_events(journal: DataFrame) -> DataFrame:
    return journal.filter(F.col("source") == "broker")


def offsets_series(journal: DataFrame) -> DataFrame:
    """(broker, topic, partition, ts_ms, seq, event, leo, hw) for every broker event that carries both."""
    return (
        _broker_events(journal)
        .filter(
            F.col("event").isin(*SERIES_EVENTS)
            & F.col("log_end_offset").isNotNull()
            & F.col("high_watermark").isNotNull()
        )
        .select(
            F.col("owner").alias("broker"),
            *TP,
            "ts_ms",
            "seq",
            "event",
            F.col("log_end_offset").alias("leo"),
            F.col("high_watermark").alias("hw"),
        )
    )


def _fault(
    ts: Column | str, kind: str, broker: Column | str, detail: Column, *, scoped: bool
) -> list[Column]:
    topic = F.col("topic") if scoped else F.lit(None).cast("string")
    partition = F.col("partition") if scoped else F.lit(None).cast("int")
    return [
        F.col(ts).alias("ts_ms") if isinstance(ts, str) else ts.alias("ts_ms"),
        F.lit(kind).alias("kind"),
        (F.col(broker) if isinstance(broker, str) else broker).cast("int").alias("broker"),
        topic.alias("topic"),
        partition.alias("partition"),
        detail.alias("detail"),
    ]


LIFE_EVENTS = ("became_leader", "became_follower", "leader_elected", "isr_changed")


def deletions(journal: DataFrame) -> DataFrame:
    """Partitions whose topic was deleted during the run: ``deleted_ms``, the last ``partition_stopped``
    with ``deleted: true`` of the partition (its replicas' logs went with it; the controller completes a
    deletion only once every replica has stopped, so a topic made again with the name starts after it),
    and ``deleted_at_end``: no replica started again after it (the topic was not made again). Journal
    events and acknowledgements up to ``deleted_ms`` belong to the deleted incarnation."""
    gone = (
        journal.filter(
            (F.col("source") == "broker")
            & (F.col("event") == "partition_stopped")
            & (F.col("deleted") == F.lit(True))
        )
        .groupBy(*TP)
        .agg(F.max("ts_ms").alias("deleted_ms"))
    )
    later = (
        journal.filter(F.col("topic").isNotNull() & F.col("event").isin(*LIFE_EVENTS))
        .join(gone, TP)
        .filter(F.col("ts_ms") > F.col("deleted_ms"))
        .select(*TP)
        .distinct()
        .withColumn("recreated", F.lit(True))
    )
    return gone.join(later, TP, "left").select(
        *TP, "deleted_ms", F.col("recreated").isNull().alias("deleted_at_end")
    )


def after_deletion(df: DataFrame, deleted: DataFrame, ts: str = "ts_ms") -> DataFrame:
    """The rows of ``df`` (with ``topic``, ``partition`` and ``ts``) not of a deleted incarnation of their
    partition: after its last deletion, or of a partition never deleted."""
    d = deleted.select(*TP, F.col("deleted_ms").alias("_deleted_ms"))
    return (
        df.join(d, TP, "left")
        .filter(F.col("_deleted_ms").isNull() | (F.col(ts) > F.col("_deleted_ms")))
        .drop("_deleted_ms")
    )


def _isr_before(journal: DataFrame, cutoff: int | None, deleted: DataFrame | None = None) -> DataFrame:
    """Per partition, the ISR when the final stop began (``cutoff``), from the events of its latest
    incarnation only: a partition whose topic was deleted (and not made again) has none."""
    ev = journal.filter(
        F.col("topic").isNotNull()
        & F.col("event").isin("became_leader", "isr_changed", "leader_elected")
        & F.col("isr").isNotNull()
    )
    if deleted is not None:
        ev = after_deletion(ev, deleted)
    ev = ev.limit(0) if cutoff is None else ev.filter(F.col("ts_ms") < F.lit(cutoff))
    order = F.struct("ts_ms", F.when(F.col("source") == "controller", 1).otherwise(0), "seq")
    return ev.groupBy(*TP).agg(F.sort_array(F.max_by("isr", order)).alias("stop_isr"))


def _faults_before(journal: DataFrame, cutoff: int | None) -> DataFrame:
    every = _all_faults(journal)
    return every if cutoff is None else every.filter(F.col("ts_ms") < F.lit(cutoff))


def _all_faults(journal: DataFrame) -> DataFrame:
    b = _broker_events(journal)
    before = Window.partitionBy("owner").orderBy("ts_ms", "seq").rowsBetween(Window.unboundedPreceding, -1)
    life = F.when(F.col("event").isin("broker_started", "broker_stopped"), F.col("event"))
    lifecycle = b.withColumn("prev_life", F.last(life, ignorenulls=True).over(before))
    crash = lifecycle.filter(
        (F.col("event") == "broker_started") & (F.col("prev_life") == "broker_started")
    ).select(
        *_fault(
            "ts_ms",
            "crash",
            "owner",
            F.lit("restarted with no broker_stopped since its previous start (killed)"),
            scoped=False,
        )
    )
    unclean_stop = b.filter((F.col("event") == "broker_stopped") & (F.col("clean") == F.lit(False))).select(
        *_fault("ts_ms", "unclean_stop", "owner", F.lit("broker_stopped clean=false"), scoped=False)
    )
    c = journal.filter(F.col("source") == "controller")
    fenced = c.filter(F.col("event") == "broker_fenced").select(
        *_fault("ts_ms", "fenced", "broker_id", F.lit("fenced by the controller"), scoped=False)
    )
    shrink = journal.filter(
        (F.col("event") == "isr_changed") & F.col("old_isr").isNotNull() & (F.size("isr") < F.size("old_isr"))
    ).select(
        *_fault(
            "ts_ms",
            "isr_shrink",
            F.coalesce(F.col("leader_id"), F.col("owner")),
            F.format_string(
                "ISR %s -> %s (%s)",
                F.array_join(F.col("old_isr").cast("array<string>"), ","),
                F.array_join(F.col("isr").cast("array<string>"), ","),
                F.coalesce(F.col("reason"), F.lit("")),
            ),
            scoped=True,
        )
    )
    elections = journal.filter(
        ((F.col("source") == "broker") & (F.col("event") == "became_leader"))
        | ((F.col("source") == "controller") & (F.col("event") == "leader_elected"))
    ).withColumn("leader", F.when(F.col("source") == "broker", F.col("owner")).otherwise(F.col("leader_id")))
    we = Window.partitionBy(*TP).orderBy("ts_ms", "seq")
    change = (
        elections.filter(F.col("source") == "broker")
        .withColumn("rank", F.row_number().over(we))
        .filter(F.col("rank") > 1)
        .select(
            *_fault(
                "ts_ms",
                "leader_change",
                "leader",
                F.format_string("broker %d leads epoch %d", F.col("leader"), F.col("leader_epoch")),
                scoped=True,
            )
        )
    )
    unclean = elections.filter(F.col("unclean") == F.lit(True)).select(
        *_fault(
            "ts_ms",
            "unclean_election",
            "leader",
            F.format_string(
                "unclean election of broker %d, epoch %d", F.col("leader"), F.col("leader_epoch")
            ),
            scoped=True,
        )
    )
    return (
        crash.unionByName(unclean_stop)
        .unionByName(fenced)
        .unionByName(shrink)
        .unionByName(change)
        .unionByName(unclean)
    )


def role_timeline(journal: DataFrame) -> DataFrame:
    """Broker partition events with the broker's role at each: ``role`` (leader/follower/none), ``tenure``
    (the role event that started it, with the leader epoch) and ``incarnation`` (broker_started count), so
    ``(broker, topic, partition, tenure, incarnation)`` is one uninterrupted leader or follower tenure."""
    b = _broker_events(journal)
    part = b.filter(F.col("topic").isNotNull()).select(
        F.col("owner").alias("broker"),
        *TP,
        "ts_ms",
        "seq",
        "event",
        "leader_epoch",
        F.col("log_end_offset").alias("leo"),
        F.col("high_watermark").alias("hw"),
        "truncate_to",
        "reason",
    )
    starts = b.filter(F.col("event").isin("broker_started", "broker_stopped")).select(
        F.col("owner").alias("broker"), "ts_ms", "seq", F.col("event").alias("life_event")
    )
    tps = part.select("broker", *TP).distinct()
    life = starts.join(tps, "broker").select(
        "broker",
        *TP,
        "ts_ms",
        "seq",
        F.col("life_event").alias("event"),
        *[
            F.lit(None).cast(t).alias(c)
            for c, t in (("leader_epoch", "int"), ("leo", "long"), ("hw", "long"))
        ],
        F.lit(None).cast("long").alias("truncate_to"),
        F.lit(None).cast("string").alias("reason"),
    )
    ev = part.unionByName(life)
    marker = (
        F.when(
            F.col("event") == "became_leader",
            F.concat(F.lit("leader:"), F.col("leader_epoch"), F.lit(":"), F.col("seq")),
        )
        .when(
            F.col("event") == "became_follower",
            F.concat(F.lit("follower:"), F.col("leader_epoch"), F.lit(":"), F.col("seq")),
        )
        .when(
            F.col("event").isin("partition_stopped", "broker_stopped"),
            F.concat(F.lit("none::"), F.col("seq")),
        )
    )
    w = Window.partitionBy("broker", *TP).orderBy("ts_ms", "seq").rowsBetween(Window.unboundedPreceding, 0)
    ev = ev.withColumn("tenure", F.last(marker, ignorenulls=True).over(w)).withColumn(
        "incarnation", F.sum(F.when(F.col("event") == "broker_started", 1).otherwise(0)).over(w)
    )
    return ev.withColumn("role", F.coalesce(F.split("tenure", ":").getItem(0), F.lit("none"))).withColumn(
        "tenure_epoch", F.split("tenure", ":").getItem(1).try_cast("int")
    )


def cached(inp: Inputs, name: str) -> DataFrame:
    """``faults``, ``series``, ``roles``, ``deleted`` or ``stop_isr`` of the run, computed once and
    cached."""
    if name == "stop_isr":
        cached(inp, "deleted")
    if name not in inp.derived:
        # The final stop's start was found while loading the inputs: no action here.
        cutoff = inp.shutdown_start
        build = {
            "faults": lambda j: _faults_before(j, cutoff),
            "series": offsets_series,
            "roles": role_timeline,
            "deleted": deletions,
            "stop_isr": lambda j: _isr_before(j, cutoff, inp.derived["deleted"]),
        }[name]
        inp.derived[name] = pinned(build(inp.journal))
    return inp.derived[name]
