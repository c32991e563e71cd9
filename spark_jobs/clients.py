"""Every client, judged from the brokers' side (docs/report.md, "Clients"; docs/your-application.md): what
each client id was acknowledged (the leaders' ``acked.jsonl``), served (``served.jsonl`` and the FETCH
counts of ``client-activity.jsonl``) and told in errors (``client-activity.jsonl``), and its longest stall.

Also where a write gap is idle time rather than a stall (SPEC §13): a gap counts as a stall only when the
journals show a cause in it (a leader, ISR or epoch change, a fenced leader, the controller cut off: the
cause ``availability.classify`` finds), a fault window overlapping it, or errors returned for the
partition during it. A gap with none of these is the client pausing: shown apart as ``idle``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.availability import Stall
from spark_jobs.converge import Window as FaultWindow

ACTIVITY_SCHEMA = (
    "ts_ms LONG, broker_id INT, client_id STRING, client_host STRING, api STRING, topic STRING, "
    "partition INT, requests LONG, records LONG, errors MAP<STRING, LONG>"
)
SERVED_SCHEMA = (
    "ts_ms LONG, broker_id INT, client_id STRING, client_host STRING, topic STRING, partition INT, "
    "fetch_offset LONG, last_offset LONG, isolation_level STRING"
)
ERROR_SLACK_MS = 1000  # activity lines are per second: an error line's second may start before the gap
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


def read_activity(spark: SparkSession, paths: list[str]) -> DataFrame:
    if not paths:
        return spark.createDataFrame([], ACTIVITY_SCHEMA)
    return spark.read.schema(ACTIVITY_SCHEMA).json(paths).filter(F.col("client_id").isNotNull())


def error_marks(activity: DataFrame) -> DataFrame:
    """``topic, partition, ts_ms``: the seconds in which a client was answered an error for a partition."""
    return (
        activity.filter(F.col("partition").isNotNull() & (F.size("errors") > 0))
        .select("topic", "partition", "ts_ms")
        .distinct()
    )


def split_idle(
    stalls: list[Stall], windows: list[FaultWindow], errors: list[tuple[str, int, int]]
) -> tuple[list[Stall], list[Stall]]:
    """``(stalls, idle)``: a gap is a stall when its cause is known, a fault window overlaps it, or a
    client was answered an error for its partition during it; otherwise it is idle time."""
    kept: list[Stall] = []
    idle: list[Stall] = []
    for s in stalls:
        overlapping = any(
            w.start_ms <= s.to_ms and s.from_ms <= (w.end_ms if w.end_ms is not None else 2**62)
            for w in windows
        )
        erred = any(
            t == s.topic and p == s.partition and s.from_ms - ERROR_SLACK_MS <= ts <= s.to_ms
            for t, p, ts in errors
        )
        (kept if s.cause != "unknown" or overlapping or erred else idle).append(s)
    return kept, idle


def clients_table(activity: DataFrame, acknowledged: DataFrame, stalls: list[Stall]) -> list[dict[str, Any]]:
    """``report.json``'s ``clients``: per client id, ``kind`` (producer, consumer or both), records
    acknowledged (the leaders' ``acked.jsonl``), records served (consumer FETCHes), the errors it was
    answered by name, and its longest stall (a stall on a partition with its acknowledgements before and
    after it)."""
    user = ~F.col("topic").isin(*INTERNAL_TOPICS) | F.col("topic").isNull()
    per_api = (
        activity.filter(user)
        .groupBy("client_id")
        .agg(
            F.max(F.col("api") == "produce").alias("produces"),
            F.max(F.col("api").isin("fetch", "offset_commit")).alias("consumes"),
            F.sum(F.when(F.col("api") == "fetch", F.col("records")).otherwise(0)).alias("served"),
        )
        .collect()
    )
    errors_rows = (
        activity.select("client_id", F.explode("errors").alias("code", "n"))
        .groupBy("client_id", "code")
        .agg(F.sum("n").alias("n"))
        .collect()
    )
    # Acknowledged to a client id (a leader's line carries it: ``producer_id`` holds it then).
    acked = (
        acknowledged.filter(F.col("producer_id").isNotNull())
        .groupBy(F.col("producer_id").alias("client_id"), "topic", "partition")
        .agg(
            F.sum(F.col("last_offset") - F.col("base_offset") + 1).alias("records"),
            F.min("acked_ms").alias("first_ms"),
            F.max("acked_ms").alias("last_ms"),
        )
        .collect()
    )
    table: dict[str, dict[str, Any]] = {}

    def row(client_id: str) -> dict[str, Any]:
        if client_id not in table:
            table[client_id] = {
                "client_id": client_id,
                "kind": "producer",
                "records_acked": 0,
                "records_served": 0,
                "errors": {},
                "longest_stall_s": 0.0,
                "_produces": False,
                "_consumes": False,
            }
        return table[client_id]

    for r in per_api:
        out = row(str(r["client_id"]))
        out["_produces"] = bool(r["produces"])
        out["_consumes"] = bool(r["consumes"])
        out["records_served"] = int(r["served"] or 0)
    for r in errors_rows:
        row(str(r["client_id"]))["errors"][str(r["code"])] = int(r["n"] or 0)
    for r in acked:
        if r["topic"] in INTERNAL_TOPICS:
            continue
        out = row(str(r["client_id"]))
        out["_produces"] = True
        out["records_acked"] += int(r["records"] or 0)
        for s in stalls:
            if (s.topic, s.partition) == (r["topic"], r["partition"]) and (
                r["first_ms"] <= s.from_ms and s.to_ms <= r["last_ms"]
            ):
                out["longest_stall_s"] = max(out["longest_stall_s"], round(s.seconds, 3))
    result: list[dict[str, Any]] = []
    for client_id in sorted(table):
        out = table[client_id]
        produces, consumes = out.pop("_produces"), out.pop("_consumes")
        if not produces and not consumes and not out["errors"]:
            continue  # metadata and admin requests only (a tool asking what the cluster holds)
        out["kind"] = "both" if produces and consumes else "consumer" if consumes else "producer"
        result.append(out)
    return result


__all__ = ["ACTIVITY_SCHEMA", "SERVED_SCHEMA", "clients_table", "error_marks", "read_activity", "split_idle"]
