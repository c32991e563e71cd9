"""The checks on the replicas' logs and final state.

Each check is three functions: ``<name>_violations`` takes the input DataFrames it needs and returns the
DataFrame(s) of violating rows (pure: no Spark action, so a test runs it on a few rows made by hand);
``phrase_<name>`` turns the collected tables into a ``CheckResult`` (title, description, notes; plain
Python); ``check_<name>`` wires them to the report's ``Inputs`` and fetches every table in one action.

- ``convergence``: live ISR replicas agree on LEO and HW at the end; the replicas in the ISR when the final
  stop began agree on LEO; HW <= LEO everywhere;
- ``log_matching``: every replica holds the same batches below what was replicated to it: the
  partition's final HW for the replicas in sync, its own HW for the others (Kafka's StrongIsr);
- ``acked_not_lost``: every acknowledged batch (the leaders' ``acked.jsonl`` and the workload's journal) is
  on the final leader, every final ISR member and every member of the ISR when the final stop began;
- ``offsets_contiguous``: no gap, overlap or duplicate batch within a replica;
- ``epoch_cache``: the leader-epoch-checkpoint agrees with the batches' epochs and is increasing;
- ``batches_intact``: every batch's CRC matches its bytes;
- ``no_duplicates``: no batch of an idempotent producer is written twice in a replica's log (others'
  duplicates are listed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.history import after_deletion, cached
from spark_jobs.inputs import REPLICA, TP, Inputs
from spark_jobs.plan import collect_tables, count_of, finished, single, top, violation_tables
from spark_jobs.result import DEFAULT_MAX_EXAMPLES, CheckResult

SINGLE_REPLICA_NOTE = (
    "every partition has a single replica here: there is no second replica to compare it with"
)


def _replica_list(prefix: str = "") -> F.Column:
    return F.array_join(
        F.transform(
            F.sort_array(F.collect_list(F.struct("broker", "leo", "hw"))),
            lambda s: F.format_string(f"{prefix}broker %d: LEO %d HW %s", s["broker"], s["leo"], s["hw"]),
        ),
        "; ",
    )


@dataclass
class ConvergenceFindings:
    """``violations`` (one row per partition or replica, ``problem`` says which rule) and ``out_of_isr``:
    replicas out of the ISR since before the final stop (listed, not judged)."""

    violations: DataFrame
    out_of_isr: DataFrame


def convergence_violations(
    replicas: DataFrame, partitions: DataFrame, series: DataFrame, stop_isr: DataFrame
) -> ConvergenceFindings:
    """The live ISR replicas of each partition (``partitions.live_isr``) agree on LEO and HW at the end,
    every ISR member holds a replica, HW <= LEO in every replica's final state (``replicas``) and journal
    event (``series``), and every replica in the ISR when the final stop began (``stop_isr``) ends with
    the same LEO."""
    live = replicas.join(partitions.select(*TP, "leader", "live_isr"), TP).filter(
        F.array_contains("live_isr", F.col("broker"))
    )
    agg = live.groupBy(*TP).agg(
        F.countDistinct("leo").alias("n_leo"),
        F.countDistinct(F.coalesce("hw", F.lit(-1))).alias("n_hw"),
        F.count("*").alias("n"),
        _replica_list().alias("replicas"),
    )
    agg = agg.join(partitions.select(*TP, F.size("live_isr").alias("n_isr")), TP, "right")
    common = [F.lit(None).cast("int").alias("broker"), F.lit(None).cast("long").alias("ts_ms")]
    disagree = agg.filter((F.col("n_leo") > 1) | (F.col("n_hw") > 1)).select(
        *TP,
        *common,
        F.lit("live ISR replicas disagree on LEO/HW").alias("problem"),
        F.col("replicas").alias("detail"),
    )
    missing = agg.filter(F.coalesce("n", F.lit(0)) < F.col("n_isr")).select(
        *TP,
        *common,
        F.lit("an ISR member holds no replica of the partition").alias("problem"),
        F.coalesce("replicas", F.lit("")).alias("detail"),
    )
    above = replicas.filter(F.col("hw") > F.col("leo")).select(
        *TP,
        "broker",
        F.lit(None).cast("long").alias("ts_ms"),
        F.lit("HW above LEO at the end").alias("problem"),
        F.format_string("HW %d (%s) > LEO %d", F.col("hw"), F.col("hw_source"), F.col("leo")).alias("detail"),
    )
    journal_above = series.filter(F.col("hw") > F.col("leo")).select(
        *TP,
        "broker",
        "ts_ms",
        F.format_string("HW above LEO in a %s journal event", F.col("event")).alias("problem"),
        F.format_string("HW %d > LEO %d", F.col("hw"), F.col("leo")).alias("detail"),
    )
    stop_disagree, out_of_isr = _stop_isr_replicas(replicas, stop_isr, common)
    violations = (
        disagree.unionByName(missing).unionByName(above).unionByName(journal_above).unionByName(stop_disagree)
    )
    return ConvergenceFindings(violations, out_of_isr)


def deleted_note(deleted: list[dict[str, Any]]) -> str | None:
    """The note naming the partitions left out because their topic was deleted (and not made again)."""
    if not deleted:
        return None
    names = ", ".join(f"{r['topic']}-{r['partition']}" for r in deleted[:10])
    more = f" and {len(deleted) - 10} more" if len(deleted) > 10 else ""
    return (
        f"{len(deleted)} deleted partition(s) left out: {names}{more} (their topic was deleted during the "
        "run; every replica journaled partition_stopped with deleted=true, so no replica is expected)"
    )


def phrase_convergence(
    got: dict[str, list[dict[str, Any]]], *, partitions: int, fenced: list[int], max_replicas: int
) -> CheckResult:
    """The result of ``convergence`` from its collected tables (``examples``, ``violations``,
    ``out_of_isr``, ``partitions``: the final state, ``faults``, and ``deleted``: partitions whose topic
    was deleted, left out)."""
    notes = [
        f"final ISR from the journals; fenced at the end (not live): {fenced}"
        if fenced
        else "final ISR from the journals (controller's when present); no broker fenced at the end"
    ]
    deleted = got.get("deleted", [])
    if (note := deleted_note(deleted)) is not None:
        notes.append(note)
    if max_replicas <= 1:
        notes.append(SINGLE_REPLICA_NOTE)
    out_rows = got["out_of_isr"]
    if out_rows:
        notes.append(
            f"{len(out_rows)} replica(s) out of the ISR since before the final stop: listed under "
            "out_of_isr_before_stop, not judged against the ISR's log"
        )
    return finished(
        "convergence",
        "Replicas converged",
        "For each partition the live ISR replicas agree on LEO and HW at the end, every replica in the ISR "
        "when the final stop began ends with the same LEO, and HW <= LEO everywhere (final checkpoints and "
        "every journal event).",
        got,
        checked=partitions,
        notes=notes,
        extra={
            "partitions": got["partitions"],
            "time_to_converge": [],  # filled by the report from spark_jobs.converge (ISR-based)
            "faults": got["faults"],
            "out_of_isr_before_stop": out_rows,
            "deleted_partitions": [{"topic": r["topic"], "partition": r["partition"]} for r in deleted],
        },
    )


def check_convergence(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    found = convergence_violations(
        inp.replicas, inp.partitions, cached(inp, "series"), cached(inp, "stop_isr")
    )
    got = collect_tables(
        {
            **violation_tables(found.violations, [*TP, "broker", "ts_ms"], max_examples),
            "out_of_isr": top(found.out_of_isr, [*TP, "broker"], 200),
            "partitions": final_table(inp.replicas, inp.partitions, cached(inp, "stop_isr")).limit(200),
            "faults": top(cached(inp, "faults"), ["ts_ms", "kind", "broker", *TP], 100),
            "deleted": top(cached(inp, "deleted").filter("deleted_at_end").select(*TP), TP, 1000),
        }
    )
    return phrase_convergence(
        got, partitions=len(inp.layout.partition_names()), fenced=inp.fenced, max_replicas=inp.max_replicas
    )


def _stop_isr_replicas(
    replicas: DataFrame, stop: DataFrame, common: list[F.Column]
) -> tuple[DataFrame, DataFrame]:
    """Every replica in the ISR when the final stop began must end with the same log end: the violations;
    and the replicas that were out of that ISR (listed, not judged)."""
    judged = replicas.join(stop, TP).filter(F.array_contains("stop_isr", F.col("broker")))
    agg = judged.groupBy(*TP).agg(
        F.countDistinct("leo").alias("n_leo"), F.count("*").alias("n"), _replica_list().alias("replicas")
    )
    agg = agg.join(stop, TP, "right")
    isr_text = F.array_join(F.col("stop_isr").cast("array<string>"), ",")
    disagree = agg.filter(F.col("n_leo") > 1).select(
        *TP,
        *common,
        F.lit("replicas in the ISR before the final stop end with different logs (LEO)").alias("problem"),
        F.format_string("ISR before the stop %s; %s", isr_text, F.col("replicas")).alias("detail"),
    )
    missing = agg.filter(F.coalesce("n", F.lit(0)) < F.size("stop_isr")).select(
        *TP,
        *common,
        F.lit("a member of the ISR before the final stop holds no replica").alias("problem"),
        F.format_string("ISR before the stop %s; %s", isr_text, F.coalesce("replicas", F.lit(""))).alias(
            "detail"
        ),
    )
    out = (
        replicas.join(stop, TP)
        .filter(~F.array_contains("stop_isr", F.col("broker")))
        .select(*TP, "broker", "leo", "hw", F.col("stop_isr").alias("isr_before_stop"))
    )
    return disagree.unionByName(missing), out


def final_table(replicas: DataFrame, partitions: DataFrame, stop_isr: DataFrame) -> DataFrame:
    """Per partition: final leader, leader epoch, ISR (and where it came from), the ISR when the final stop
    began (``cluster down`` stops the brokers one at a time, each leaving the ISRs as it goes, so the final
    ISR is the last broker alone: the one before the stop says which replicas were in sync) and every
    replica's LEO/HW."""
    r = replicas.groupBy(*TP).agg(
        F.sort_array(F.collect_list(F.struct("broker", "leo", "hw"))).alias("replicas")
    )
    return (
        partitions.join(r, TP, "left")
        .join(stop_isr, TP, "left")
        .select(
            *TP,
            "leader",
            "leader_epoch",
            "isr",
            "isr_source",
            F.col("stop_isr").alias("isr_before_stop"),
            "replicas",
        )
        .orderBy(*TP)
    )


@dataclass
class LogMatchingFindings:
    """``violations``: one row per base offset where the replicas differ (``sides``: what each holds);
    ``compared``: the batches compared (each replica's, below its bound, where two replicas or more
    must hold the offset)."""

    violations: DataFrame
    compared: DataFrame


def replicated_bounds(
    replicas: DataFrame, partitions: DataFrame | None = None, stop_isr: DataFrame | None = None
) -> DataFrame:
    """Per replica (``REPLICA`` + ``bound``): the end of what it must hold as replicated. A replica in the
    final ISR, in the ISR when the final stop began, or the final leader, holds everything below the
    partition's final HW, the largest HW any of its replicas holds (a HW is only ever an offset the leader
    committed); any other replica, what is below its own HW. A follower learns the leader's HW only from
    its next fetch response, so the HW it checkpoints at a clean stop may lag behind (and a follower that
    takes over while the ISR is below min.insync.replicas keeps its own, as Kafka's does): the highest one
    says what was committed. Capped at the replica's LEO (a replica short of it is ``convergence``'s and
    ``acked_not_lost``'s finding, not a mismatch)."""
    own = F.coalesce(F.col("hw"), F.lit(0))
    if partitions is None:
        return replicas.select(*REPLICA, F.least(own, "leo").alias("bound"))
    no_brokers = F.array().cast("array<int>")
    parts = partitions.select(*TP, "leader", "isr")
    if stop_isr is not None:
        parts = parts.join(stop_isr, TP, "left")
    else:
        parts = parts.withColumn("stop_isr", no_brokers)
    final_hw = replicas.groupBy(*TP).agg(F.max(own).alias("final_hw"))
    parts = parts.join(final_hw, TP, "left").select(
        *TP,
        "final_hw",
        F.array_distinct(
            F.concat(
                F.coalesce("isr", no_brokers),
                F.coalesce("stop_isr", no_brokers),
                F.when(F.col("leader").isNotNull(), F.array("leader")).otherwise(no_brokers),
            )
        ).alias("in_sync"),
    )
    r = replicas.join(parts, TP, "left")
    in_sync = F.coalesce(F.array_contains("in_sync", F.col("broker")), F.lit(False))
    bound = F.when(in_sync, F.greatest("final_hw", own)).otherwise(own)
    return r.select(*REPLICA, F.least(bound, "leo").alias("bound"))


def log_matching_violations(
    replicas: DataFrame,
    batches: DataFrame,
    partitions: DataFrame | None = None,
    stop_isr: DataFrame | None = None,
) -> LogMatchingFindings:
    """Every replica holds the same batches (base offset, last offset, leader epoch and CRC) below its
    bound (``replicated_bounds``: the partition's final HW for the replicas in sync, its own HW for any other)
    and at or above the partition's largest log start, at every base offset that two replicas or more
    must hold. Without ``partitions`` every replica's bound is its own HW."""
    rb = replicated_bounds(replicas, partitions, stop_isr)
    lower = replicas.groupBy(*TP).agg(F.max("log_start").alias("lower"))
    b = (
        batches.join(rb, REPLICA)
        .join(lower, TP)
        .filter((F.col("base_offset") < F.col("bound")) & (F.col("base_offset") >= F.col("lower")))
    )
    offsets = b.select(*TP, "base_offset").distinct()
    expected = (
        offsets.join(rb.withColumnRenamed("broker", "holder"), TP)
        .filter(F.col("bound") > F.col("base_offset"))
        .groupBy(*TP, "base_offset")
        .agg(
            F.sort_array(F.collect_list("holder")).alias("holders"),
            F.min("bound").alias("smallest_hw"),
        )
        .filter(F.size("holders") > 1)
    )
    b = b.join(expected.select(*TP, "base_offset"), [*TP, "base_offset"])
    by_offset = b.groupBy(*TP, "base_offset").agg(
        F.sort_array(
            F.collect_list(F.struct("broker", "last_offset", "leader_epoch", "crc", "file", "position"))
        ).alias("sides"),
    )
    by_offset = by_offset.join(expected, [*TP, "base_offset"])
    distinct = F.size(
        F.array_distinct(
            F.transform("sides", lambda s: F.struct(s["last_offset"], s["leader_epoch"], s["crc"]))
        )
    )
    bad = by_offset.filter((F.size("sides") < F.size("holders")) | (distinct > 1))
    violations = bad.select(
        *TP,
        "base_offset",
        "smallest_hw",
        F.array_join(
            F.transform(
                "sides",
                lambda s: F.format_string(
                    "broker %d: %d-%d epoch %d crc %d",
                    s["broker"],
                    F.col("base_offset"),
                    s["last_offset"],
                    s["leader_epoch"],
                    s["crc"],
                ),
            ),
            "; ",
        ).alias("detail"),
        F.array_except("holders", F.transform("sides", lambda s: s["broker"])).alias("missing_on"),
        "sides",
    )
    return LogMatchingFindings(violations, b)


def phrase_log_matching(got: dict[str, list[dict[str, Any]]], *, max_replicas: int) -> CheckResult:
    """The result of ``log_matching`` (``sides`` stays in the examples for the evidence; the caller drops
    it once the first records are decoded)."""
    return finished(
        "log_matching",
        "Logs match below the high watermark",
        "What was replicated is the same everywhere: below the partition's final HW (the largest HW a "
        "replica holds) for the final leader and the replicas in the final ISR or in the ISR when the "
        "final stop began, and below its own HW for any other replica "
        "(and above the largest log start offset), every replica holds the same batches: base offset, "
        "last offset, leader epoch and CRC.",
        got,
        checked=int(single(got["checked"])),
        notes=[] if max_replicas > 1 else [SINGLE_REPLICA_NOTE],
    )


def check_log_matching(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    from spark_jobs.compacted import above_cleaned, compacted_note

    batches = above_cleaned(inp, inp.batches)
    found = log_matching_violations(inp.replicas, batches, inp.partitions, cached(inp, "stop_isr"))
    got = collect_tables(
        {
            **violation_tables(found.violations, [*TP, "base_offset"], max_examples),
            "checked": count_of(found.compared),
        }
    )
    result = phrase_log_matching(got, max_replicas=inp.max_replicas)
    note = compacted_note(inp)
    if note:
        result.notes.append(note)
    if result.examples:
        result.extra["first_records"] = _divergence_records(inp, result.examples)
    for ex in result.examples:
        ex.pop("sides", None)
    return result


def _divergence_records(inp: Inputs, examples: list[dict[str, object]]) -> list[dict[str, object]]:
    """The first record of each side of the first few divergences, decoded (per-record rows only here)."""
    import json

    wanted: list[list[object]] = []
    for ex in examples[:5]:
        for side in ex.get("sides") or []:  # type: ignore[union-attr]
            wanted.append([side["broker"], side["file"], side["position"]])
    if not wanted:
        return []
    spark = inp.batches.sparkSession
    recs = spark.read.format("isrsim-records").option("batches", json.dumps(wanted)).load()
    first = recs.filter(F.col("offset") == F.col("base_offset")).select(
        "broker", "offset", "leader_epoch", "timestamp", "value", "problem"
    )
    return collect_tables({"first": top(first, ["offset", "broker"], 50)})["first"]


@dataclass
class AckedFindings:
    """``violations``: acknowledged batches (not acks=1) missing or different on a replica that must hold
    them; ``acks1_lost``: the same for acks=1 batches (allowed by Kafka: listed, not failed)."""

    violations: DataFrame
    acks1_lost: DataFrame


def acked_violations(
    acked: DataFrame,
    partitions: DataFrame,
    stop_isr: DataFrame,
    batches: DataFrame,
    replicas: DataFrame,
    deleted: DataFrame | None = None,
) -> AckedFindings:
    """Each acknowledged batch (``acked``: ``inputs.acknowledged_batches``, the leaders' and the workload's)
    must be at its base offset, with its last offset and CRC, on the
    final leader, every final ISR member and every member of the ISR when the final stop began; a batch
    below a replica's log start was deleted by retention, not lost, and a batch acknowledged before its
    topic was deleted (``deleted``: ``history.deletions``) went with the topic, on purpose."""
    if deleted is not None:
        acked = after_deletion(acked, deleted, "acked_ms")
    no_brokers = F.array().cast("array<int>")
    parts = partitions.join(stop_isr, TP, "left").select(
        *TP,
        "leader",
        F.array_distinct(
            F.concat(
                "isr",
                # A partition left without a leader (-1: its last ISR member stopped or failed) is judged
                # on its ISR, which keeps that member.
                F.when(F.col("leader").isNotNull() & (F.col("leader") >= 0), F.array("leader")).otherwise(
                    no_brokers
                ),
                F.coalesce("stop_isr", no_brokers),
            )
        ).alias("expected"),
    )
    expected = acked.join(parts, TP, "left").select("*", F.explode_outer("expected").alias("broker"))
    found = batches.select(
        *REPLICA,
        "base_offset",
        F.col("last_offset").alias("found_last_offset"),
        F.col("crc").alias("found_crc"),
        F.col("leader_epoch").alias("found_epoch"),
    )
    df = expected.join(found, [*REPLICA, "base_offset"], "left").join(
        replicas.select(*REPLICA, "log_start"), REPLICA, "left"
    )
    df = df.filter(F.col("log_start").isNull() | (F.col("last_offset") >= F.col("log_start")))
    problem = (
        F.when(F.col("broker").isNull(), F.lit("partition has no replica"))
        .when(F.col("found_crc").isNull(), F.lit("missing"))
        .when(F.col("found_crc") != F.col("crc"), F.lit("a different batch is at this offset (CRC differs)"))
        .when(F.col("found_last_offset") != F.col("last_offset"), F.lit("batch boundary differs"))
    )
    missing = (
        df.withColumn("problem", problem)
        .filter(F.col("problem").isNotNull())
        .select(
            "producer_id",
            *TP,
            "base_offset",
            "last_offset",
            "crc",
            "acks",
            "acked_ms",
            "broker",
            F.when(F.col("broker") == F.col("leader"), F.lit("leader")).otherwise(F.lit("isr")).alias("role"),
            "problem",
            "found_crc",
            "found_epoch",
        )
    )
    # Kafka guarantees an acks=all batch across leader failovers; an acks=1 batch only while its leader
    # lives. acks=1 losses are listed (the zombie-leader and crash cases) but are not violations.
    return AckedFindings(missing.filter(F.col("acks") != 1), missing.filter(F.col("acks") == 1))


def phrase_acked(got: dict[str, list[dict[str, Any]]], *, torn_lines: int) -> CheckResult:
    """The result of ``acked_not_lost`` from its tables (``checked``, ``by_source``, ``n_acks1``,
    ``acks1_lost``, ``lost_by_acks``, ``of_deleted``: batches of deleted topics, left out)."""
    checked = int(single(got["checked"]) or 0)
    of_deleted = int(single(got["of_deleted"]) or 0) if got.get("of_deleted") else 0
    by_source = {r["source"]: int(r["n"]) for r in got.get("by_source", [])}
    leaders = sum(n for src, n in by_source.items() if src != "workload")
    notes = [
        f"{checked} acknowledged batches checked on the final leader, every final ISR member and every "
        "member of the ISR before the final stop"
        + (
            f" ({leaders} journaled by their leaders (acked.jsonl), {by_source.get('workload', 0)} by the "
            "workload (workload/acked-*.jsonl))"
            if by_source
            else ""
        )
    ]
    if torn_lines:
        notes.append(f"{torn_lines} torn acked-journal line(s) skipped")
    if of_deleted:
        notes.append(
            f"{of_deleted} acknowledged batch(es) of topics deleted after they were acknowledged left out: "
            "deleting a topic deletes its records, which is not a loss"
        )
    result = finished(
        "acked_not_lost",
        "No acknowledged batch lost",
        "Every batch acknowledged to a client (the leaders' broker-<id>/acked.jsonl, any client's, and "
        "workload/acked-*.jsonl) is present at the same base offset with the same CRC on the final leader, "
        "on every final ISR member and on every replica in the ISR when the final stop began (batches "
        "below a replica's log start offset were deleted by retention, not lost). Kafka guarantees this "
        "for acks=all; acks=1 batches may be lost when their leader fails over (a crash, or a zombie "
        "leader that acknowledged alone): those are listed under acks1_lost, not counted as violations.",
        got,
        checked=checked,
        notes=notes,
    )
    n_acks1 = int(single(got["n_acks1"]) or 0)
    if n_acks1:
        result.notes.append(
            f"{n_acks1} acks=1 batch(es) lost: allowed by Kafka's acks=1 contract on a leader failover; "
            "listed under acks1_lost"
        )
        result.extra["acks1_lost"] = got["acks1_lost"]
    if result.violations:
        result.extra["lost_by_acks"] = got["lost_by_acks"]
    return result


def check_acked(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    from spark_jobs.compacted import above_cleaned

    deleted = cached(inp, "deleted")
    acked = above_cleaned(inp, after_deletion(inp.acknowledged, deleted, "acked_ms"))
    found = acked_violations(acked, inp.partitions, cached(inp, "stop_isr"), inp.batches, inp.replicas)
    got = collect_tables(
        {
            **violation_tables(found.violations, [*TP, "base_offset", "broker"], max_examples),
            "checked": count_of(acked),
            "of_deleted": count_of(inp.acknowledged.join(deleted, TP).filter("acked_ms <= deleted_ms")),
            "by_source": acked.select(F.explode("acked_by").alias("source"))
            .withColumn("source", F.when(F.col("source") == "workload", "workload").otherwise("leader"))
            .groupBy("source")
            .agg(F.count("*").alias("n")),
            "n_acks1": count_of(found.acks1_lost, "producer_id", *TP, "base_offset"),
            "acks1_lost": top(found.acks1_lost, [*TP, "base_offset", "broker"], max_examples),
            "lost_by_acks": top(
                found.violations.groupBy("acks").agg(
                    F.countDistinct("producer_id", *TP, "base_offset").alias("batches")
                ),
                ["acks"],
                10,
            ),
        }
    )
    torn = inp.stats.torn_acked_lines + inp.stats.torn_broker_acked_lines
    return phrase_acked(got, torn_lines=torn)


def contiguous_violations(batches: DataFrame, replicas: DataFrame) -> DataFrame:
    """Within each replica, from its log start offset, batches follow each other with no gap, overlap or
    duplicate, each in the segment whose name is at or below its base offset."""
    w = Window.partitionBy(*REPLICA).orderBy("base_offset", "segment_base", "position")
    b = (
        batches.withColumn("prev_base", F.lag("base_offset").over(w))
        .withColumn("prev_last", F.lag("last_offset").over(w))
        .withColumn("rank", F.row_number().over(w))
        .join(replicas.select(*REPLICA, "log_start"), REPLICA)
    )
    problem = (
        F.when(F.col("base_offset") < F.col("segment_base"), F.lit("batch below its segment's base offset"))
        .when(
            (F.col("rank") == 1) & (F.col("base_offset") > F.col("log_start")),
            F.lit("gap after the log start offset"),
        )
        .when(F.col("base_offset") == F.col("prev_base"), F.lit("duplicate batch"))
        .when(F.col("base_offset") <= F.col("prev_last"), F.lit("overlap"))
        .when(F.col("base_offset") > F.col("prev_last") + 1, F.lit("gap"))
    )
    expected = F.when(F.col("rank") == 1, F.col("log_start")).otherwise(F.col("prev_last") + 1)
    return (
        b.withColumn("problem", problem)
        .filter(F.col("problem").isNotNull())
        .select(
            *REPLICA,
            "problem",
            expected.alias("expected_offset"),
            "base_offset",
            "last_offset",
            "prev_base",
            "prev_last",
            (F.col("base_offset") - expected).alias("missing_records"),
            "file",
            "position",
        )
    )


def phrase_contiguous(got: dict[str, list[dict[str, Any]]], *, batches: int) -> CheckResult:
    return finished(
        "offsets_contiguous",
        "Offsets contiguous in every replica",
        "Within each replica, batches follow each other with no gap, no overlap and no duplicate, from the "
        "log start offset on, each in the segment whose name is at or below its base offset.",
        got,
        checked=batches,
    )


def check_contiguous(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    from spark_jobs.compacted import without_compacted

    violations = contiguous_violations(without_compacted(inp, inp.batches), inp.replicas)
    got = collect_tables(violation_tables(violations, [*REPLICA, "base_offset"], max_examples))
    return phrase_contiguous(got, batches=inp.stats.batches)


@dataclass
class EpochCacheFindings:
    """``violations``: bad cache entries and batches whose epoch is not the cache's; ``entries``: every
    cache entry (what was checked)."""

    violations: DataFrame
    entries: DataFrame


def epoch_cache_violations(
    checkpoints: DataFrame, batches: DataFrame, replicas: DataFrame
) -> EpochCacheFindings:
    """In each replica's leader-epoch-checkpoint (``checkpoints`` rows of kind ``epoch``) epochs and start
    offsets strictly increase and no entry starts past the LEO; each batch's partition leader epoch is the
    cache's epoch for its base offset."""
    entries = checkpoints.filter(F.col("kind") == "epoch").select(
        *REPLICA, "seq", "epoch", F.col("offset").alias("start_offset"), "file"
    )
    ws = Window.partitionBy(*REPLICA).orderBy("seq")
    order_bad = (
        entries.withColumn("prev_epoch", F.lag("epoch").over(ws))
        .withColumn("prev_start", F.lag("start_offset").over(ws))
        .join(replicas.select(*REPLICA, "leo"), REPLICA)
    )
    none = F.lit(None)
    entry_rows = order_bad.select(
        *REPLICA,
        F.when(F.col("epoch") <= F.col("prev_epoch"), F.lit("epochs not increasing"))
        .when(F.col("start_offset") <= F.col("prev_start"), F.lit("start offsets not increasing"))
        .when(F.col("start_offset") > F.col("leo"), F.lit("entry starts beyond the log end offset"))
        .alias("problem"),
        F.col("start_offset").alias("offset"),
        none.cast("int").alias("batch_epoch"),
        F.col("epoch").alias("cache_epoch"),
        F.format_string(
            "entry %d: epoch %d start %d (previous: epoch %s start %s; LEO %d)",
            "seq",
            "epoch",
            "start_offset",
            F.coalesce(F.col("prev_epoch").cast("string"), F.lit("-")),
            F.coalesce(F.col("prev_start").cast("string"), F.lit("-")),
            "leo",
        ).alias("detail"),
    ).filter(F.col("problem").isNotNull())
    markers = entries.select(
        *REPLICA,
        F.col("start_offset").alias("offset"),
        F.lit(1).alias("marker"),
        F.col("epoch").alias("cache_epoch"),
        none.cast("int").alias("batch_epoch"),
        none.cast("long").alias("last_offset"),
    )
    bats = batches.select(
        *REPLICA,
        F.col("base_offset").alias("offset"),
        F.lit(0).alias("marker"),
        none.cast("int").alias("cache_epoch"),
        F.col("leader_epoch").alias("batch_epoch"),
        "last_offset",
    )
    w = (
        Window.partitionBy(*REPLICA)
        .orderBy("offset", F.col("marker").desc())
        .rowsBetween(Window.unboundedPreceding, 0)
    )
    merged = markers.unionByName(bats).withColumn(
        "epoch_for", F.last("cache_epoch", ignorenulls=True).over(w)
    )
    merged = merged.filter(F.col("marker") == 0).join(replicas.select(*REPLICA, "log_start"), REPLICA)
    mismatched = merged.filter(
        (F.col("last_offset") >= F.col("log_start"))
        & (F.col("batch_epoch") >= 0)
        & (F.col("epoch_for").isNull() | (F.col("epoch_for") != F.col("batch_epoch")))
    ).select(
        *REPLICA,
        F.when(F.col("epoch_for").isNull(), F.lit("no cache entry covers the batch"))
        .otherwise(F.lit("batch epoch differs from the cache's epoch for its offset"))
        .alias("problem"),
        "offset",
        "batch_epoch",
        F.col("epoch_for").alias("cache_epoch"),
        F.format_string("batch %d-%d", "offset", "last_offset").alias("detail"),
    )
    return EpochCacheFindings(entry_rows.unionByName(mismatched), entries)


def phrase_epoch_cache(got: dict[str, list[dict[str, Any]]]) -> CheckResult:
    return finished(
        "epoch_cache",
        "Leader epoch cache consistent",
        "In each replica's leader-epoch-checkpoint, epochs and start offsets strictly increase and no entry "
        "starts past the LEO; each batch's partition leader epoch is the cache's epoch for its base offset.",
        got,
        checked=int(single(got["checked"])),
    )


def check_epoch_cache(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    found = epoch_cache_violations(inp.checkpoints, inp.batches, inp.replicas)
    got = collect_tables(
        {
            **violation_tables(found.violations, [*REPLICA, "offset"], max_examples),
            "checked": count_of(found.entries),
        }
    )
    return phrase_epoch_cache(got)


def batches_intact_violations(batches: DataFrame) -> DataFrame:
    """Batches whose stored CRC-32C does not match their bytes (``crc_ok`` false; null: not verified)."""
    return batches.filter(F.col("crc_ok") == F.lit(False)).select(
        *REPLICA, "base_offset", "last_offset", "leader_epoch", "crc", "file", "position"
    )


def phrase_batches_intact(got: dict[str, list[dict[str, Any]]], *, batches: int) -> CheckResult:
    return finished(
        "batches_intact",
        "Batches intact (CRC)",
        "Every batch's stored CRC-32C matches its bytes (a torn last batch of a partition is not counted: "
        "log recovery cuts it off).",
        got,
        checked=batches,
    )


def check_batches_intact(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    violations = batches_intact_violations(inp.batches)
    got = collect_tables(violation_tables(violations, [*REPLICA, "base_offset"], max_examples))
    return phrase_batches_intact(got, batches=inp.stats.batches)


@dataclass
class DuplicateFindings:
    """``violations``: an idempotent producer's batch (producer id >= 0) written twice in one replica's log;
    ``non_idempotent``: batches of producers without idempotence whose bytes (CRC, record count) appear at
    two offsets of one replica's log, a retry written twice (counted and shown, not failed)."""

    violations: DataFrame
    non_idempotent: DataFrame


def duplicate_batches(batches: DataFrame) -> DuplicateFindings:
    """No two batches in a replica's log carry the same (producer_id, producer_epoch, base_sequence) of an
    idempotent producer (Kafka's KIP-98 promise); for the others, the same bytes twice are listed."""

    def twice(df: DataFrame, key: list[str]) -> DataFrame:
        per_replica = df.groupBy("broker", *TP, *key).agg(
            F.sort_array(F.collect_list("base_offset")).alias("offsets"), F.count("*").alias("n")
        )
        return (
            per_replica.filter(F.col("n") > 1)
            .groupBy(*TP, *key)
            .agg(
                F.sort_array(F.collect_set("broker")).alias("brokers"),
                F.max("n").alias("copies"),
                F.sort_array(F.flatten(F.collect_set("offsets"))).alias("all_offsets"),
            )
            .select(*TP, *key, "brokers", "copies", F.array_distinct("all_offsets").alias("offsets"))
        )

    # A batch with a producer id and no sequence is a transaction marker (a control batch): a producer's
    # markers repeat (producer, epoch, -1) by design and are no duplicates.
    idempotent = batches.filter((F.col("producer_id") >= 0) & (F.col("base_sequence") >= 0))
    others = batches.filter(F.col("producer_id") < 0).withColumn(
        "records", F.col("last_offset") - F.col("base_offset") + 1
    )
    return DuplicateFindings(
        twice(idempotent, ["producer_id", "producer_epoch", "base_sequence"]),
        twice(others, ["crc", "records"]),
    )


def phrase_no_duplicates(got: dict[str, list[dict[str, Any]]], *, batches: int) -> CheckResult:
    """The result of ``no_duplicates`` (``n_non_idempotent``, ``non_idempotent``)."""
    n_other = int(single(got["n_non_idempotent"]) or 0)
    result = finished(
        "no_duplicates",
        "No batch of an idempotent producer written twice",
        "No two batches of one idempotent producer (producer_id >= 0) in a replica's log carry the same "
        "(producer_id, producer_epoch, base_sequence). Batches of producers without idempotence whose "
        "bytes (CRC and record count) appear at two offsets of a log, a retry written twice, are counted "
        "and listed under non_idempotent_duplicates, not counted as violations.",
        got,
        checked=batches,
    )
    if n_other:
        result.notes.append(
            f"{n_other} batch(es) of producers without idempotence written more than once (a retry after a "
            "lost answer): allowed, listed under non_idempotent_duplicates"
        )
        result.extra["non_idempotent_duplicates"] = got["non_idempotent"]
    return result


def check_no_duplicates(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    found = duplicate_batches(inp.batches)
    order = [*TP, "offsets"]
    got = collect_tables(
        {
            **violation_tables(found.violations, order, max_examples),
            "n_non_idempotent": count_of(found.non_idempotent),
            "non_idempotent": top(found.non_idempotent, order, max_examples),
        }
    )
    return phrase_no_duplicates(got, batches=inp.stats.batches)
