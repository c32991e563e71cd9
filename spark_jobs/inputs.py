"""The job's input DataFrames: batch headers, checkpoints, journals and acknowledged batches, and the final
state derived from them (per replica: LEO, HW, log start; per partition: final leader and ISR).

The segments' batch headers and the checkpoints are read on the driver (``spark_jobs.header_reader``) and
handed to Spark as Arrow tables; the journals are read by Spark tasks. The driver collects only counts and
problems.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.header_reader import Progress, checkpoints_frame, segments_frame
from spark_jobs.layout import ClusterLayout, InputProblem
from spark_jobs.plan import collect_tables
from spark_jobs.sources import register_sources

JOURNAL_SCHEMA = (
    "ts_ms LONG, broker_id INT, controller_id INT, producer_id STRING, event STRING, topic STRING, "
    "partition INT, leader_epoch INT, leader_id INT, isr ARRAY<INT>, old_isr ARRAY<INT>, "
    "replicas ARRAY<INT>, log_end_offset LONG, high_watermark LONG, log_start_offset LONG, "
    "start_offset LONG, truncate_to LONG, reason STRING, error_code INT, clean BOOLEAN, unclean BOOLEAN, "
    "role STRING, epoch INT, offset LONG, crc LONG, controller_epoch INT, group_id STRING, "
    "base_offset LONG, last_offset LONG, offsets STRING, deleted BOOLEAN"
)
# ``offsets`` is an ``offsets_committed`` line's list of committed offsets, kept as its JSON text (another
# event's ``offsets`` is a count); ``group_checks.committed_offsets`` parses it.
ACKED_SCHEMA = (
    "ts_ms LONG, producer_id STRING, topic STRING, partition INT, base_offset LONG, last_offset LONG, "
    "crc LONG, acks INT, sent_ms LONG, acked_ms LONG"
)
# broker-<id>/acked.jsonl: a line per batch a leader acknowledged to a client (docs/storage.md).
BROKER_ACKED_SCHEMA = (
    "ts_ms LONG, broker_id INT, topic STRING, partition INT, base_offset LONG, last_offset LONG, crc LONG, "
    "acks INT, producer_id LONG, producer_epoch INT, base_sequence INT, client_id STRING"
)
FATAL_SEGMENT_KINDS = ("foreign", "corrupt", "error")
TP = ["topic", "partition"]
REPLICA = ["broker", "topic", "partition"]


@dataclass
class ReadStats:
    segment_files: int = 0
    segment_bytes: int = 0
    batches: int = 0
    seconds: float = 0.0
    torn_tail_bytes: int = 0
    journal_lines: int = 0
    torn_journal_lines: int = 0
    acked_lines: int = 0
    torn_acked_lines: int = 0
    broker_acked_lines: int = 0
    torn_broker_acked_lines: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.segment_bytes / 1e6 / max(self.seconds, 1e-9)


@dataclass
class Inputs:
    layout: ClusterLayout
    segments: DataFrame
    batches: DataFrame
    checkpoints: DataFrame
    journal: DataFrame
    acked: DataFrame  # workload/acked-*.jsonl (sent_ms, acked_ms: throughput and latency)
    acknowledged: DataFrame  # every acknowledged batch, workload's and leaders' (acknowledged_batches)
    replicas: DataFrame
    partitions: DataFrame
    fenced: list[int]
    stats: ReadStats
    problems: list[InputProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    derived: dict[str, DataFrame] = field(default_factory=dict)
    # When the cluster's final stop began (see ``_shutdown_facts``), found while loading.
    shutdown_start: int | None = None
    # The controllers' metadata logs: one row per batch header (``broker`` = the voter's id), as ``batches``.
    metadata_batches: DataFrame | None = None

    @property
    def max_replicas(self) -> int:
        counts: dict[tuple[str, int], int] = {}
        for b in self.layout.brokers:
            for p in b.partitions:
                counts[(p.topic, p.partition)] = counts.get((p.topic, p.partition), 0) + 1
        return max(counts.values(), default=0)


def pinned(df: DataFrame) -> DataFrame:
    """``df`` computed once, when first used, and kept on the executors; later plans start from its rows
    (a leaf), not from the plan that made them. The checks' plans stay small: Spark's planning time grows
    with the depth of the plans and the number of cached ones they are compared against, and on the
    report's metadata-sized inputs that time, not the data, was most of each check's cost."""
    return df.localCheckpoint(eager=False)


def _jsonl(spark: SparkSession, paths: list[str], schema: str) -> DataFrame:
    """Lines of ``paths`` parsed with ``schema``; ``valid`` is false for a line that is not a JSON object
    with ``ts_ms`` (a torn last line after kill -9, or a foreign file). ``seq`` orders lines of a file."""
    if not paths:
        empty = spark.createDataFrame([], f"file STRING, seq LONG, valid BOOLEAN, {schema}")
        return empty
    raw = spark.read.text(paths).select(
        F.col("value"),
        F.col("_metadata.file_path").alias("file"),
        F.monotonically_increasing_id().alias("seq"),
    )
    raw = raw.filter(F.trim("value") != "")
    parsed = raw.withColumn("j", F.from_json("value", schema, {"mode": "PERMISSIVE"}))
    return parsed.select(
        "file", "seq", F.col("j.ts_ms").isNotNull().alias("valid"), *[F.col(f"j.{c}") for c in _names(schema)]
    )


def _names(schema: str) -> list[str]:
    return [part.strip().split(" ", 1)[0] for part in schema.split(", ") if " " in part.strip()]


def _line_counts(df: DataFrame) -> DataFrame:
    return df.groupBy("file").agg(F.sum(F.col("valid").cast("int")).alias("ok"), F.count("*").alias("n"))


def load_inputs(
    spark: SparkSession,
    layout: ClusterLayout,
    *,
    verify_crc: bool = True,
    progress: Progress | None = None,
) -> Inputs:
    """Every input of the checks; ``progress`` is told (files, bytes) as the segments are read."""
    register_sources(spark)
    stats = ReadStats()
    problems = list(layout.problems)
    notes: list[str] = []

    # ---- segments: one pass over every byte on the driver (spark_jobs.header_reader), timed.
    segments, seg_facts = segments_frame(spark, layout, verify_crc=verify_crc, progress=progress)
    stats.seconds = seg_facts.seconds
    stats.segment_files, stats.segment_bytes = seg_facts.kinds.get("segment", (0, 0))
    stats.batches = seg_facts.kinds.get("batch", (0, 0))[0]
    for r in seg_facts.bad:
        where = f"{r['file']} (position {r['position']}, {r['size']} bytes)"
        if r["kind"] == "torn_tail":
            stats.torn_tail_bytes += int(r["size"])
            notes.append(f"{where}: {r['problem']}; ignored, as log recovery would cut it off")
        else:
            problems.append(
                InputProblem(str(r["file"]), f"{r['kind']}: {r['problem']} at position {r['position']}")
            )
    batches = segments.filter(F.col("kind") == "batch").drop("kind", "problem")
    metadata_segments, _ = segments_frame(spark, layout, verify_crc=verify_crc, metadata=True)
    metadata_batches = metadata_segments.filter(F.col("kind") == "batch").drop("kind", "problem")

    # ---- checkpoints and journals: parsed once and cached; what the driver needs of them in one action.
    checkpoints = checkpoints_frame(spark, layout)
    broker_j = _jsonl(spark, layout.broker_journals, JOURNAL_SCHEMA).withColumn("source", F.lit("broker"))
    ctrl_j = _jsonl(spark, layout.controller_journals, JOURNAL_SCHEMA).withColumn(
        "source", F.lit("controller")
    )
    journal_all = pinned(broker_j.unionByName(ctrl_j))
    acked_all = pinned(_jsonl(spark, layout.acked_journals, ACKED_SCHEMA))
    broker_from_path = F.regexp_extract("file", r"broker-(\d+)/", 1)
    journal = (
        journal_all.filter("valid")
        .withColumn(
            "owner",
            F.when(F.col("source") == "controller", F.col("controller_id")).otherwise(
                F.coalesce(F.col("broker_id"), F.when(broker_from_path != "", broker_from_path.cast("int")))
            ),
        )
        .drop("valid")
    )
    acked = acked_all.filter("valid").drop("valid", "seq")
    broker_acked_all = pinned(_jsonl(spark, layout.broker_acked_journals, BROKER_ACKED_SCHEMA))
    broker_acked = broker_acked_all.filter("valid").drop("valid", "seq")
    facts = collect_tables(
        {
            "checkpoint_errors": checkpoints.filter(F.col("kind") == "error").select("file", "problem"),
            "journal": _line_counts(journal_all),
            "acked": _line_counts(acked_all),
            "broker_acked": _line_counts(broker_acked_all),
            "fenced": _fenced_at_end(journal),
            "shutdown": _shutdown_facts(journal),
        }
    )
    for r in facts["checkpoint_errors"]:
        problems.append(InputProblem(str(r["file"]), str(r["problem"])))
    checkpoints = checkpoints.filter(F.col("kind") != "error")
    for kind in ("journal", "acked", "broker_acked"):
        for r in facts[kind]:
            bad = int(r["n"]) - int(r["ok"])
            if kind == "journal":
                stats.journal_lines += int(r["ok"])
                stats.torn_journal_lines += bad
            elif kind == "acked":
                stats.acked_lines += int(r["ok"])
                stats.torn_acked_lines += bad
            else:
                stats.broker_acked_lines += int(r["ok"])
                stats.torn_broker_acked_lines += bad
            if bad and not int(r["ok"]):
                problems.append(
                    InputProblem(str(r["file"]), f"none of its {bad} lines is a JSON journal event")
                )
            elif bad:
                notes.append(
                    f"{r['file']}: {bad} unreadable line(s) skipped (a torn last line is what kill -9 leaves)"
                )
    fenced = sorted(int(r["broker_id"]) for r in facts["fenced"])
    shutdown = facts["shutdown"][0] if facts["shutdown"] else {}
    shutdown_start = shutdown.get("controlled")
    if shutdown_start is None:
        shutdown_start = shutdown.get("stopped")

    journal = pinned(journal)
    replicas = pinned(_replica_state(spark, layout, segments, checkpoints, journal))
    partitions = pinned(_partition_state(replicas, journal, fenced))
    acknowledged = pinned(acknowledged_batches(acked, broker_acked))
    return Inputs(
        layout,
        segments,
        batches,
        checkpoints,
        journal,
        acked,
        acknowledged,
        replicas,
        partitions,
        fenced,
        stats,
        problems,
        notes,
        shutdown_start=None if shutdown_start is None else int(shutdown_start),
        metadata_batches=metadata_batches,
    )


def acknowledged_batches(acked: DataFrame, broker_acked: DataFrame) -> DataFrame:
    """Every batch acknowledged to a client, once: the workload's lines (``acked``, ``isrsim produce``'s) and
    the leaders' (``broker_acked``, any client's), one row per (topic, partition, base offset, last offset,
    CRC). ``producer_id``: the workload's id, else the client id; ``acks``: -1 if any line says so;
    ``acked_ms``: the first acknowledgement; ``sent_ms`` and ``client_acked_ms``: the workload's, when it
    journaled the batch; ``acked_by``: ``workload`` and/or ``broker <id>``."""
    key = [*TP, "base_offset", "last_offset", "crc"]
    workload = acked.select(
        *key,
        "producer_id",
        F.lit(None).cast("string").alias("client_id"),
        "acks",
        "acked_ms",
        "sent_ms",
        F.col("acked_ms").alias("client_acked_ms"),
        F.lit("workload").alias("source"),
    )
    leaders = broker_acked.select(
        *key,
        F.lit(None).cast("string").alias("producer_id"),
        "client_id",
        "acks",
        F.col("ts_ms").alias("acked_ms"),
        F.lit(None).cast("long").alias("sent_ms"),
        F.lit(None).cast("long").alias("client_acked_ms"),
        F.format_string("broker %d", F.col("broker_id")).alias("source"),
    )
    return (
        workload.unionByName(leaders)
        .groupBy(*key)
        .agg(
            F.coalesce(
                F.first("producer_id", ignorenulls=True), F.first("client_id", ignorenulls=True)
            ).alias("producer_id"),
            F.min("acks").alias("acks"),
            F.min("acked_ms").alias("acked_ms"),
            F.min("sent_ms").alias("sent_ms"),
            F.min("client_acked_ms").alias("client_acked_ms"),
            F.sort_array(F.collect_set("source")).alias("acked_by"),
        )
    )


def _replica_state(
    spark: SparkSession,
    layout: ClusterLayout,
    segments: DataFrame,
    checkpoints: DataFrame,
    journal: DataFrame,
) -> DataFrame:
    """Per replica: ``leo`` (from the segments), ``hw`` (replication-offset-checkpoint, else the last
    ``offsets`` journal event), ``log_start``, ``recovery_point``, batch and byte counts."""
    listed = [(b.broker, p.topic, p.partition, p.path) for b in layout.brokers for p in b.partitions]
    base = spark.createDataFrame(listed, "broker INT, topic STRING, partition INT, dir STRING")
    seg = segments.groupBy(*REPLICA).agg(
        F.max(F.when(F.col("kind") == "batch", F.col("last_offset") + 1)).alias("batch_end"),
        F.max("segment_base").alias("max_segment_base"),
        F.min("segment_base").alias("min_segment_base"),
        F.sum(F.when(F.col("kind") == "batch", 1).otherwise(0)).alias("batches"),
        F.sum(F.when(F.col("kind") == "segment", F.col("size")).otherwise(0)).alias("bytes"),
    )
    cp = checkpoints.groupBy(*REPLICA).agg(
        *[
            F.max(F.when(F.col("kind") == k, F.col("offset"))).alias(f"cp_{k}")
            for k in ("hw", "recovery_point", "log_start")
        ]
    )
    offsets = journal.filter((F.col("source") == "broker") & (F.col("event") == "offsets"))
    last = offsets.groupBy(F.col("owner").alias("broker"), "topic", "partition").agg(
        F.max_by("high_watermark", F.struct("ts_ms", "seq")).alias("journal_hw"),
        F.max_by("log_end_offset", F.struct("ts_ms", "seq")).alias("journal_leo"),
    )
    df = base.join(seg, REPLICA, "left").join(cp, REPLICA, "left").join(last, REPLICA, "left")
    log_start = F.coalesce("cp_log_start", "min_segment_base", F.lit(0))
    return df.select(
        *REPLICA,
        "dir",
        F.greatest(F.coalesce("batch_end", log_start), F.coalesce("max_segment_base", log_start)).alias(
            "leo"
        ),
        F.coalesce("cp_hw", "journal_hw").alias("hw"),
        F.when(F.col("cp_hw").isNotNull(), F.lit("checkpoint"))
        .when(F.col("journal_hw").isNotNull(), F.lit("journal"))
        .alias("hw_source"),
        log_start.alias("log_start"),
        F.col("cp_recovery_point").alias("recovery_point"),
        "journal_leo",
        "journal_hw",
        F.coalesce("batches", F.lit(0)).alias("batches"),
        F.coalesce("bytes", F.lit(0)).alias("bytes"),
    )


def _shutdown_facts(journal: DataFrame) -> DataFrame:
    """One row: ``controlled``, the first controlled shutdown after the last ``broker_started``, and
    ``stopped``, the first clean ``broker_stopped`` after it (the same rule as ``converge.final_stop_ms``)."""
    broker = F.col("source") == "broker"
    last_start = journal.filter(broker & (F.col("event") == "broker_started")).agg(
        F.max("ts_ms").alias("last_start")
    )
    after = F.col("ts_ms") > F.col("last_start")
    return (
        journal.crossJoin(last_start)
        .filter(F.col("last_start").isNotNull() & after)
        .agg(
            F.min(
                F.when(
                    (F.col("source") == "controller") & (F.col("reason") == "controlled_shutdown"),
                    F.col("ts_ms"),
                )
            ).alias("controlled"),
            F.min(
                F.when(
                    broker & (F.col("event") == "broker_stopped") & (F.col("clean") == F.lit(True)),
                    F.col("ts_ms"),
                )
            ).alias("stopped"),
        )
    )


def _fenced_at_end(journal: DataFrame) -> DataFrame:
    """The brokers (``broker_id``) whose last registration event in the controller journal fenced them."""
    ctrl = journal.filter(
        (F.col("source") == "controller")
        & F.col("event").isin("broker_fenced", "broker_registered", "broker_unfenced")
        & F.col("broker_id").isNotNull()
    )
    last = ctrl.groupBy("broker_id").agg(F.max_by("event", F.struct("ts_ms", "seq")).alias("event"))
    return last.filter(F.col("event") == "broker_fenced").select("broker_id")


def _partition_state(replicas: DataFrame, journal: DataFrame, fenced: list[int]) -> DataFrame:
    """Per partition: the replicas holding it, the final leader (last ``became_leader`` of a broker or
    ``leader_elected`` of the controller, the controller winning ties) and the final ISR (last event that
    carries one), and ``live_isr`` = final ISR minus brokers the controller fenced last."""
    prio = F.when(F.col("source") == "controller", 1).otherwise(0)
    ev = journal.filter(F.col("topic").isNotNull()).withColumn("prio", prio)
    leader_ev = ev.filter(
        ((F.col("source") == "broker") & (F.col("event") == "became_leader"))
        | ((F.col("source") == "controller") & (F.col("event") == "leader_elected"))
    ).withColumn("leader", F.when(F.col("source") == "broker", F.col("owner")).otherwise(F.col("leader_id")))
    order = F.struct("ts_ms", "prio", "seq")
    leaders = leader_ev.groupBy(*TP).agg(
        F.max_by("leader", order).alias("leader"), F.max_by("leader_epoch", order).alias("leader_epoch")
    )
    isr_ev = ev.filter(
        F.col("event").isin("became_leader", "isr_changed", "leader_elected") & F.col("isr").isNotNull()
    )
    isrs = isr_ev.groupBy(*TP).agg(F.max_by("isr", order).alias("journal_isr"))
    holders = replicas.groupBy(*TP).agg(F.sort_array(F.collect_list("broker")).alias("holders"))
    df = holders.join(leaders, TP, "left").join(isrs, TP, "left")
    fenced_arr = F.array(*[F.lit(b) for b in fenced]) if fenced else F.array().cast("array<int>")
    isr = F.coalesce(F.sort_array("journal_isr"), F.col("holders"))
    return df.select(
        *TP,
        "holders",
        "leader",
        "leader_epoch",
        isr.alias("isr"),
        F.when(F.col("journal_isr").isNull(), F.lit("assumed: every replica (no journal)"))
        .otherwise(F.lit("journal"))
        .alias("isr_source"),
        F.array_except(isr, fenced_arr).alias("live_isr"),
    )
