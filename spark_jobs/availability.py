"""What the run cost in availability (docs/report.md, "Availability"): the records the workload intended,
acknowledged, failed and left unknown, and the write stalls, each with its cause read from the journals
and the fault in force.

- **Counts** come from the workload's ``attempts-<producer_id>.jsonl`` summary lines (``isrsim produce``,
  ``chaos``, the demo), plus every record other clients got acknowledged (the leaders' ``acked.jsonl``):
  those clients' failed sends are not journaled, so they count as intended once acknowledged.
- A **stall** is a stretch of at least ``STALL_MS`` with no acknowledgement on a partition the workload was
  writing to: between two acknowledgements of the partition (or from the workload's start to the first)
  while a batch sent before the second was waiting, or after the last one while batches failed. A batch's
  send time comes from the workload's journals; a partition known only from the leaders' ``acked.jsonl``
  counts as written to steadily when its gap is also ``STEADY_FACTOR`` times its usual one.
- **Cause**, from the journals: ``leader_fenced`` (the controller fenced the partition's leader during the
  stall), ``no_leader`` (a new leader was elected during it), ``isr_shrink_wait`` (the ISR shrank during it:
  acks=all writes waited for a dead or slow follower to be dropped), ``controller_unreachable`` (a fault
  cut the cluster off its active controller: a network fault on "controller" or on a voter's id, a kill,
  term or pause of the active controller, or a stretch with no quorum leader in the voters'
  ``quorum_state`` journals), else ``unknown``. **Fault**: the fault window in force when the stall began
  (else the first one overlapping it).

Candidate gaps are found by Spark (a window per partition); the few stalls are classified on the driver
from the journal events ``converge.collect_events`` already gathered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark_jobs.converge import Event, controller_fault, leaderless_periods, voter_ids
from spark_jobs.converge import Window as FaultWindow

STALL_MS = 1000
CAUSE_SLACK_MS = 250
STEADY_FACTOR = 20
ATTEMPTS_SCHEMA = (
    "ts_ms LONG, producer_id STRING, event STRING, topic STRING, partition INT, records LONG, sent_ms LONG, "
    "error STRING, started_ms LONG, rate DOUBLE, intended LONG, sent LONG, acknowledged LONG, failed LONG, "
    "unknown LONG, client_id STRING"
)
TP = ["topic", "partition"]
CAUSES = ("isr_shrink_wait", "no_leader", "leader_fenced", "controller_unreachable", "unknown")


@dataclass(frozen=True)
class Stall:
    topic: str
    partition: int
    from_ms: int
    to_ms: int
    cause: str = "unknown"
    fault: str | None = None

    @property
    def seconds(self) -> float:
        return (self.to_ms - self.from_ms) / 1000


def stall_candidates(
    acknowledged: DataFrame, failed: DataFrame, span_start_ms: int | None, min_ms: int = STALL_MS
) -> DataFrame:
    """Per partition, the stretches of at least ``min_ms`` without an acknowledgement while a write was
    waiting (see the module doc): ``topic, partition, from_ms, to_ms``. ``acknowledged``: ``topic,
    partition, acked_ms, sent_ms`` (``sent_ms`` null when only a leader journaled it); ``failed``: ``topic,
    partition, ts_ms, sent_ms`` (batches given up on); ``span_start_ms``: when the workload started."""
    acks = acknowledged.select(*TP, F.col("acked_ms").alias("t"), "sent_ms")
    if span_start_ms is not None:
        # The workload's start is where every partition's first wait begins.
        starts = acks.select(*TP).distinct().withColumn("t", F.lit(span_start_ms).cast("long"))
        marks = acks.select(*TP, "t", F.lit(False).alias("virtual")).unionByName(
            starts.select(*TP, "t", F.lit(True).alias("virtual"))
        )
    else:
        marks = acks.select(*TP, "t", F.lit(False).alias("virtual"))
    w = Window.partitionBy(*TP).orderBy("t")
    gaps = (
        marks.withColumn("prev", F.lag("t").over(w))
        .filter(~F.col("virtual") & F.col("prev").isNotNull() & (F.col("t") - F.col("prev") >= min_ms))
        .select(*TP, "prev", F.col("t").alias("next"))
    )
    # What was waiting across each gap: batches sent before its end and answered (or failed) at or after it.
    waiting = acks.select(*TP, "sent_ms", F.col("t").alias("resolved")).unionByName(
        failed.select(*TP, "sent_ms", F.col("ts_ms").alias("resolved"))
    )
    pending = (
        gaps.join(waiting, TP)
        .filter(
            F.col("sent_ms").isNotNull()
            & (F.col("sent_ms") < F.col("next"))
            & (F.col("resolved") >= F.col("next"))
        )
        .groupBy(*TP, "prev", "next")
        .agg(F.min("sent_ms").alias("first_sent"))
    )
    # Partitions known only from the leaders' journals: steady writers only (a gap far above the usual).
    usual = (
        acks.withColumn("gap", F.col("t") - F.lag("t").over(w))
        .groupBy(*TP)
        .agg(
            F.percentile_approx("gap", 0.5).alias("usual_gap"),
            F.max(F.col("sent_ms").isNotNull()).alias("has_sent"),
        )
    )
    between = (
        gaps.join(pending, [*TP, "prev", "next"], "left")
        .join(usual, TP, "left")
        .filter(
            F.col("first_sent").isNotNull()
            | (
                ~F.coalesce(F.col("has_sent"), F.lit(False))
                & (F.col("next") - F.col("prev") >= F.lit(STEADY_FACTOR) * F.col("usual_gap"))
            )
        )
        .select(
            *TP,
            F.greatest(F.col("prev"), F.coalesce(F.col("first_sent"), F.col("prev"))).alias("from_ms"),
            F.col("next").alias("to_ms"),
        )
    )
    # After a partition's last acknowledgement: batches that failed.
    last = acks.groupBy(*TP).agg(F.max("t").alias("last_ack"))
    tail = (
        failed.join(last, TP, "left")
        .filter(F.col("last_ack").isNull() | (F.col("ts_ms") > F.col("last_ack")))
        .groupBy(*TP)
        .agg(
            F.greatest(F.max("last_ack"), F.min("sent_ms")).alias("from_ms"),
            F.max("ts_ms").alias("to_ms"),
        )
    )
    return between.unionByName(tail).filter(F.col("to_ms") - F.col("from_ms") >= min_ms)


def classify(stall: Stall, events: list[Event], windows: list[FaultWindow]) -> Stall:
    """``stall`` with its cause and fault (see the module doc). What ended a stall is journaled about when
    the acknowledgements resume, a few milliseconds either side: events up to ``CAUSE_SLACK_MS`` after the
    stall's end count."""
    tp = (stall.topic, stall.partition)
    start, end = stall.from_ms, stall.to_ms
    has_controller = any(e.source == "controller" for e in events)
    leader_kind = ("controller", "leader_elected") if has_controller else ("broker", "became_leader")
    leader: int | None = None
    isr: frozenset[int] | None = None
    changed = False
    shrank = False
    fenced: set[int] = set()
    for e in events:
        if e.ts_ms > end + CAUSE_SLACK_MS:
            break
        inside = start < e.ts_ms
        if e.tp == tp and (e.source, e.event) == leader_kind:
            if inside:
                changed = True
            else:
                leader = e.leader
        if e.tp == tp and e.isr is not None and e.event in ("became_leader", "isr_changed", "leader_elected"):
            # An ISR smaller than the one before it (the controller's isr_changed carries no old_isr).
            before = frozenset(e.old_isr) if e.old_isr is not None else isr
            if inside and before is not None and len(e.isr) < len(before):
                shrank = True
            isr = frozenset(e.isr)
        if e.event == "broker_fenced" and e.broker_id is not None and start - STALL_MS <= e.ts_ms:
            fenced.add(e.broker_id)
    voters = voter_ids(events)
    controller_cut = any(
        _overlaps(w, start, end) and controller_fault(w, events, voters) for w in windows
    ) or any(
        p_start <= end and start <= (p_end if p_end is not None else 2**62)
        for p_start, p_end in leaderless_periods(events)
    )
    if leader is not None and leader in fenced:
        cause = "leader_fenced"
    elif changed:
        cause = "no_leader"
    elif shrank:
        cause = "isr_shrink_wait"
    elif controller_cut:
        cause = "controller_unreachable"
    else:
        cause = "unknown"
    return Stall(stall.topic, stall.partition, start, end, cause, fault_in_force(windows, start, end))


def _overlaps(w: FaultWindow, start: int, end: int) -> bool:
    w_end = w.end_ms if w.end_ms is not None else 2**62
    return w.start_ms <= end and start <= w_end


def fault_in_force(windows: list[FaultWindow], start: int, end: int) -> str | None:
    """The label of the fault window in force at ``start``, else of the first one overlapping the span."""
    for w in windows:
        if w.start_ms <= start and (w.end_ms is None or start <= w.end_ms):
            return w.label
    for w in windows:
        if _overlaps(w, start, end):
            return w.label
    return None


def workload_attempts(spark: SparkSession, paths: list[str]) -> tuple[list[dict[str, Any]], DataFrame]:
    """The workload's summary lines (collected: one per producer run) and its failed batches (a
    DataFrame: ``topic, partition, ts_ms, sent_ms``)."""
    empty = spark.createDataFrame([], "topic STRING, partition INT, ts_ms LONG, sent_ms LONG")
    if not paths:
        return [], empty
    lines = spark.read.schema(ATTEMPTS_SCHEMA).json(paths)
    summaries = [r.asDict() for r in lines.filter(F.col("event") == "summary").collect()]
    failed = lines.filter((F.col("event") == "failed") & F.col("topic").isNotNull()).select(
        *TP, "ts_ms", "sent_ms"
    )
    return summaries, failed


OTHER_CLIENTS_MEANING = (
    "intended = what isrsim produce meant to write (its attempts journal) plus every record other clients "
    "got acknowledged (the leaders' acked.jsonl): another client's failed or unanswered sends are not "
    "journaled, so for those clients intended = acknowledged"
)
ONLY_OTHER_CLIENTS_MEANING = (
    "no isrsim produce run wrote here: intended = acknowledged = every record the leaders journaled as "
    "acknowledged (acked.jsonl); a client's failed or unanswered sends are not journaled, so the ratio "
    "cannot show them"
)


def summarise(
    summaries: list[dict[str, Any]],
    acknowledged_records: int,
    stalls: list[Stall],
    t0_ms: int,
    other_records: int | None = None,
) -> dict[str, Any]:
    """``report.json``'s ``availability``. ``acknowledged_records``: every acknowledged record, once (the
    leaders' ``acked.jsonl`` and the workload's journal); ``other_records``: those no workload summary
    counts (other clients': librdkafka, kafka-python, a Java client, the bench), all of
    ``acknowledged_records`` when None and there is no summary."""
    if other_records is None:
        other_records = 0 if summaries else acknowledged_records
    intended = sum(int(s.get("intended") or 0) for s in summaries) + other_records
    acknowledged = sum(int(s.get("acknowledged") or 0) for s in summaries) + other_records
    failed: int | None = sum(int(s.get("failed") or 0) for s in summaries) if summaries else None
    unknown: int | None = sum(int(s.get("unknown") or 0) for s in summaries) if summaries else None
    ratio = round(acknowledged / intended, 4) if intended else None
    if summaries and other_records:
        counted_by, meaning = "workload and acknowledgement journals", OTHER_CLIENTS_MEANING
    elif summaries:
        counted_by, meaning = (
            "workload",
            "intended = what isrsim produce meant to write (its attempts journal)",
        )
    else:
        counted_by, meaning = "acknowledgement journals", ONLY_OTHER_CLIENTS_MEANING
    rows = sorted(stalls, key=lambda s: (s.from_ms, s.topic, s.partition))
    longest = max(rows, key=lambda s: s.to_ms - s.from_ms, default=None)
    return {
        "intended": intended if summaries or intended else None,
        "acknowledged": acknowledged,
        "failed": failed,
        "unknown": unknown,
        "acknowledged_ratio": ratio,
        "counted_by": counted_by,
        "other_clients_records": other_records,
        "intended_means": meaning,
        "longest_stall_s": round(longest.seconds, 3) if longest else 0.0,
        "longest_stall": _row(longest, t0_ms) if longest else None,
        "stalls": [_row(s, t0_ms) for s in rows],
    }


def _row(s: Stall, t0_ms: int) -> dict[str, Any]:
    return {
        "topic": s.topic,
        "partition": s.partition,
        "from_s": round((s.from_ms - t0_ms) / 1000, 3),
        "to_s": round((s.to_ms - t0_ms) / 1000, 3),
        "seconds": round(s.seconds, 3),
        "cause": s.cause,
        "fault": s.fault,
    }


def idle_row(s: Stall, t0_ms: int) -> dict[str, Any]:
    """A write gap with no cause in the journals (the client paused): shown apart, never a stall."""
    return {k: v for k, v in _row(s, t0_ms).items() if k not in ("cause", "fault")}


def availability_sentence(availability: dict[str, Any] | None) -> str:
    """What the first line of the summary says of availability, always both figures SPEC names: the
    acknowledged ratio and the longest stall, e.g. ``45 % of intended writes acknowledged; longest stall
    21.3 s during partition 2 <-> 3`` (``longest stall 0.0 s`` when no write stalled)."""
    a = availability or {}
    ratio = a.get("acknowledged_ratio")
    others = int(a.get("other_clients_records") or 0)
    if ratio is not None and a.get("counted_by") == "acknowledgement journals":
        said = (
            f"{ratio * 100:.0f} % of intended writes acknowledged ({a.get('acknowledged', 0):,} records, all "
            "by other clients than isrsim produce: intended = acknowledged, their failures are not journaled)"
        )
    elif ratio is not None and others:
        said = (
            f"{ratio * 100:.0f} % of intended writes acknowledged ({others:,} records by other clients, "
            "counted as intended once acknowledged)"
        )
    elif ratio is not None:
        said = f"{ratio * 100:.0f} % of intended writes acknowledged"
    elif a.get("acknowledged"):
        said = f"{a['acknowledged']:,} records acknowledged (intended unknown)"
    else:
        said = "acknowledged ratio unknown (no write intended or acknowledged)"
    longest = a.get("longest_stall")
    seconds = float(a.get("longest_stall_s") or 0.0)
    during = f" during {longest['fault']}" if longest and longest.get("fault") else ""
    return f"{said}; longest stall {seconds:.1f} s{during}"


__all__ = [
    "CAUSES",
    "STALL_MS",
    "Stall",
    "availability_sentence",
    "classify",
    "fault_in_force",
    "idle_row",
    "stall_candidates",
    "summarise",
    "workload_attempts",
]
