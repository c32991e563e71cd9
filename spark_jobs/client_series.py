"""Throughput and commit latency per client (SPEC §13: one line per client on the overview's plots), from
the leaders' ``acked.jsonl``: every batch a leader acknowledged, with the client id that wrote it and
``received_ms`` (when the leader read the produce request), so a Kafka client's commit latency is
``ts_ms - received_ms`` (the broker's side of it). The user's topics only, unless ``include_internal``."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_jobs.clients import INTERNAL_TOPICS

LEADER_ACKED_SCHEMA = (
    "ts_ms LONG, topic STRING, partition INT, base_offset LONG, last_offset LONG, client_id STRING, "
    "received_ms LONG"
)
MAX_CLIENTS = 8  # lines on one plot; the busiest clients


def client_rates(
    spark: SparkSession,
    paths: list[str],
    t0_ms: int,
    bin_s: float,
    n_bins: int,
    include_internal: bool = False,
    max_clients: int = MAX_CLIENTS,
) -> dict[str, dict[str, list[Any]]]:
    """Per client id (the ``max_clients`` with the most records), per bin of ``bin_s`` seconds from
    ``t0_ms``: ``records_per_s`` and ``latency_p50_ms`` (None for a bin without a batch of it)."""
    if not paths or n_bins <= 0 or bin_s <= 0:
        return {}
    bin_ms = int(bin_s * 1000)
    df = spark.read.schema(LEADER_ACKED_SCHEMA).json(paths).filter(F.col("ts_ms").isNotNull())
    if not include_internal:
        df = df.filter(~F.col("topic").isin(*INTERNAL_TOPICS))
    lat = (F.col("ts_ms") - F.col("received_ms")).cast("double")
    rows = (
        df.withColumn("client", F.coalesce(F.col("client_id"), F.lit("?")))
        .withColumn("bin", F.floor((F.col("ts_ms") - F.lit(t0_ms)) / F.lit(bin_ms)).cast("long"))
        .groupBy("client", "bin")
        .agg(
            F.sum(F.col("last_offset") - F.col("base_offset") + 1).alias("records"),
            F.percentile_approx(lat, 0.5, 1000).alias("p50"),
        )
        .collect()
    )
    totals: dict[str, int] = {}
    for r in rows:
        totals[str(r["client"])] = totals.get(str(r["client"]), 0) + int(r["records"] or 0)
    keep = sorted(totals, key=lambda c: (-totals[c], c))[:max_clients]
    out: dict[str, dict[str, list[Any]]] = {
        c: {"records_per_s": [0.0] * n_bins, "latency_p50_ms": [None] * n_bins} for c in sorted(keep)
    }
    for r in rows:
        c, b = str(r["client"]), int(r["bin"])
        if c in out and 0 <= b < n_bins:
            out[c]["records_per_s"][b] = round(int(r["records"] or 0) / bin_s, 1)
            out[c]["latency_p50_ms"][b] = None if r["p50"] is None else float(r["p50"])
    return out


__all__ = ["LEADER_ACKED_SCHEMA", "client_rates"]
