"""Scenarios 2 and 3: replicated throughput and commit latency.

Both use three brokers, replication factor 3, ``min.insync.replicas=2``, acks=-1 and one producer
(``cli.producer.Producer``, in this process), with the topic's partitions' leaders spread over the three
brokers (as a controller would place them).

2. throughput: (a) 100-byte records in batches, as fast as the producer gets acknowledgements; (b) batches
   of 1 MiB (16 records of ~64 KiB). Also the peak resident memory (VmHWM) of each broker process.
3. latency: acks=-1 at a fixed rate (20,000 records/s), p50/p99/p99.9 from a PRODUCE request's send to its
   acknowledgement.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import trio

from cli.bench.cluster import BenchCluster, cpu_seconds, status_kib
from cli.bench.context import BenchContext
from cli.bench.profile import Recording, start_recording, summarize
from cli.bench.results import Figure, ScenarioResult, Target
from cli.cluster_client import ClusterClient
from cli.producer import Producer, ProducerSettings, ProduceStats

BROKER_IDS = (1, 2, 3)
CLUSTER_OVERRIDES = {"min.insync.replicas": "2"}
LARGE_RECORDS_PER_BATCH = 16
# 16 records of this size make a batch just under 1 MiB (message.max.bytes is Kafka's 1048588).
LARGE_RECORD_SIZE = (1 << 20) // LARGE_RECORDS_PER_BATCH - 30

KAFKA_DEFAULT_BATCH_RECORDS = 150
# Targets of the performance issue (docs/performance.md), on a 2-core machine.
TARGET_RECORDS_S = 600_000  # (2a) 1,000-record batches
TARGET_16K_RECORDS_S = 300_000  # (2a) 16 KB batches
TARGET_LARGE_SHARE_OF_LOOPBACK = 0.15  # (2b)
TARGET_PEAK_RSS_MIB = 200
TARGET_P99_MS = 5.0  # (3)
# (2c) more partitions: keep at least this share of the 3-partition (2a) figure of the same run.
TARGET_SCALING_SHARE = 0.5
# (2c) requests in flight over all partitions, as in (2a) (5 per partition over 3 partitions).
SCALING_IN_FLIGHT = 15
KAFKA_3X_SYNC_RECORDS_S = 421_823
# (2d) Kafka's codecs, on 16 KB batches.
CODECS = ("gzip", "snappy", "lz4", "zstd")


async def produce(
    ctx: BenchContext,
    cluster: BenchCluster,
    topic: str,
    settings: ProducerSettings,
    count: int,
    rate: float | None = None,
    label: str = "",
) -> ProduceStats:
    """Runs one producer to completion, showing progress."""
    async with trio.open_nursery() as nursery:
        client = ClusterClient(nursery, cluster.bootstrap, client_id="isrsim-bench")
        producer = Producer(client, topic, settings, producer_id="bench")

        async def show() -> None:
            while True:
                s = producer.stats
                ctx.step(f"{label}: {s.records_acked:,}/{count:,} records acknowledged")
                await trio.sleep(0.5)

        nursery.start_soon(show)
        stats = await producer.run(count, rate)
        await client.aclose()
        nursery.cancel_scope.cancel()
    if stats.batches_failed:
        raise RuntimeError(
            f"{label}: {stats.batches_failed} batches were not acknowledged ({dict(stats.errors)})"
        )
    return stats


async def measured_produce(
    ctx: BenchContext,
    cluster: BenchCluster,
    topic: str,
    settings: ProducerSettings,
    count: int,
    *,
    label: str,
    profile_as: str,
) -> tuple[ProduceStats, dict[str, Any]]:
    """:func:`produce`, measuring the CPU each broker and this process (the producer) used, as a share of
    one core over the run; with ``--profile``, py-spy samples them all and the summaries go into the
    returned usage (``profiles``)."""
    recordings: list[Recording] = []
    if ctx.params.profile and ctx.out_dir is not None:
        targets = [(f"{profile_as}-broker-{b.broker_id}", b.pid) for b in cluster.brokers.values()]
        for name, pid in [*targets, (f"{profile_as}-producer", os.getpid())]:
            rec = start_recording(name, pid, ctx.out_dir)
            if rec is not None:
                recordings.append(rec)
        if not recordings:
            ctx.note("--profile: py-spy is not installed (pip install py-spy); running without a profile")
        else:
            await trio.sleep(1.0)  # py-spy attaches
    pids = {f"broker-{b.broker_id}": b.pid for b in cluster.brokers.values()} | {"producer": os.getpid()}
    cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
    t0 = time.monotonic()
    try:
        stats = await produce(ctx, cluster, topic, settings, count, label=label)
        wall = time.monotonic() - t0
        used = {k: cpu_seconds(pid) - cpu0[k] for k, pid in pids.items()}
        usage: dict[str, Any] = {
            "cpu_share_of_one_core": {k: round(v / wall, 3) for k, v in used.items()},
            "cpu_seconds": {k: round(v, 3) for k, v in used.items()},
            "broker_cpu_seconds": round(sum(v for k, v in used.items() if k.startswith("broker")), 3),
        }
    finally:
        outputs = [(rec.name, await trio.to_thread.run_sync(rec.stop)) for rec in recordings]
    if recordings:
        ctx.step("summarizing profiles")
        usage["profiles"] = {
            name: summarize(out).to_json() | {"file": out.name} for name, out in outputs if out is not None
        }
    return stats, usage


def rss_now(cluster: BenchCluster) -> dict[str, dict[str, float]]:
    """Each broker's current and peak resident set (MiB)."""
    return {
        f"broker-{b.broker_id}": {
            "rss": round(status_kib(b.pid, "VmRSS") / 1024, 1),
            "peak": round(status_kib(b.pid, "VmHWM") / 1024, 1),
        }
        for b in cluster.brokers.values()
    }


def cpu_note(usage: dict[str, Any]) -> str:
    shares = usage["cpu_share_of_one_core"]
    brokers = "/".join(f"{v * 100:.0f}" for k, v in sorted(shares.items()) if k.startswith("broker"))
    return f"CPU % of a core: producer {shares['producer'] * 100:.0f}, brokers {brokers}"


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


async def start_cluster(ctx: BenchContext, name: str) -> BenchCluster:
    cluster = BenchCluster(ctx.scenario_dir(name), CLUSTER_OVERRIDES)
    ctx.step("starting 3 brokers")
    await cluster.start(BROKER_IDS)
    return cluster


async def run_throughput(ctx: BenchContext, result: ScenarioResult) -> None:
    cluster = await start_cluster(ctx, "throughput")
    try:
        await _throughput(ctx, cluster, result)
    finally:
        cluster.close()


async def _throughput(ctx: BenchContext, cluster: BenchCluster, result: ScenarioResult) -> None:
    p = ctx.params
    details: dict[str, Any] = {}
    # (a) 100-byte records.
    await cluster.assign("small", p.small_partitions)
    small = ProducerSettings(acks=-1, record_size=100, batch_records=p.small_batch_records, max_in_flight=5)
    await produce(
        ctx, cluster, "small", small, max(p.small_records // 20, small.batch_records * 6), label="2a warm-up"
    )
    stats, usage = await measured_produce(
        ctx, cluster, "small", small, p.small_records, label="2a 100-byte records", profile_as="2a"
    )
    details["small_cpu"] = usage
    details["rss_mib_after"] = {"2a": rss_now(cluster)}
    secs = max(stats.elapsed, 1e-9)
    rec_s = stats.records_acked / secs
    mb_s = stats.bytes_acked / secs / 1e6
    result.add(
        Figure(
            "small_records_per_s",
            "(2a) 100-byte records, acks=-1, RF 3",
            rec_s,
            "records/s",
            Target(">=", TARGET_RECORDS_S),
            note=f"{p.small_batch_records} records/batch, {p.small_partitions} partitions; {cpu_note(usage)}",
        )
    )
    result.add(
        Figure(
            "small_broker_cpu_ms_per_1000_records",
            "(2a) broker CPU per 1,000 records (3 brokers together)",
            usage["broker_cpu_seconds"] * 1e6 / max(stats.records_acked, 1),
            "ms",
            note="CPU time: less sensitive to the machine's load than the rate",
        )
    )
    result.add(
        Figure(
            "small_mb_per_s",
            "(2a) 100-byte records: batch bytes",
            mb_s,
            "MB/s",
            ratio=ctx.of_loopback(mb_s),
            ratio_to="loopback",
        )
    )
    details["small"] = {
        "records": stats.records_acked,
        "bytes": stats.bytes_acked,
        "seconds": round(secs, 3),
        "batch_records": p.small_batch_records,
        "partitions": p.small_partitions,
        "retries": stats.retries,
        "kafka_3_machine_sync_3x_records_s": KAFKA_3X_SYNC_RECORDS_S,
        "ratio_to_kafka": round(rec_s / KAFKA_3X_SYNC_RECORDS_S, 3),
    }

    # (a) again with Kafka's default batch.size (16384 bytes: 150 records of 100 bytes): the per-request cost.
    kafka_like = ProducerSettings(
        acks=-1, record_size=100, batch_records=KAFKA_DEFAULT_BATCH_RECORDS, max_in_flight=5
    )
    stats, usage = await measured_produce(
        ctx,
        cluster,
        "small",
        kafka_like,
        p.kafka_batch_records,
        label="2a 16 KB batches",
        profile_as="2a-16k",
    )
    secs = max(stats.elapsed, 1e-9)
    result.add(
        Figure(
            "small_16k_batches_records_per_s",
            "(2a) same, 16 KB batches (Kafka's default batch.size)",
            stats.records_acked / secs,
            "records/s",
            Target(">=", TARGET_16K_RECORDS_S),
            note=f"{KAFKA_DEFAULT_BATCH_RECORDS} records/batch; {cpu_note(usage)}",
        )
    )
    result.add(
        Figure(
            "small_16k_broker_cpu_ms_per_1000_records",
            "(2a) 16 KB batches: broker CPU per 1,000 records (3 brokers together)",
            usage["broker_cpu_seconds"] * 1e6 / max(stats.records_acked, 1),
            "ms",
        )
    )
    details["rss_mib_after"]["2a-16k"] = rss_now(cluster)
    details["small_16k_batches"] = {
        "records": stats.records_acked,
        "seconds": round(secs, 3),
        "batch_records": KAFKA_DEFAULT_BATCH_RECORDS,
        "requests_per_s": round(stats.batches_acked / secs, 1),
        "cpu": usage,
    }

    # (d) the same 16 KB batches compressed with each of Kafka's codecs: the leader decompresses each batch
    # to walk its records; followers store and serve it as it is.
    details["codecs"] = {}
    for codec in CODECS:
        settings = replace(kafka_like, compression_type=codec)
        count = max(p.kafka_batch_records // 2, settings.batch_records * 20)
        stats, usage = await measured_produce(
            ctx,
            cluster,
            "small",
            settings,
            count,
            label=f"2d 16 KB batches, {codec}",
            profile_as=f"2d-{codec}",
        )
        secs = max(stats.elapsed, 1e-9)
        cpu_ms = usage["broker_cpu_seconds"] * 1e6 / max(stats.records_acked, 1)
        result.add(
            Figure(
                f"codec_{codec}_records_per_s",
                f"(2d) 16 KB batches, {codec}",
                stats.records_acked / secs,
                "records/s",
                note=f"broker CPU {cpu_ms:.3f} ms per 1,000 records; {cpu_note(usage)}",
            )
        )
        result.add(
            Figure(
                f"codec_{codec}_broker_cpu_ms_per_1000_records",
                f"(2d) 16 KB batches, {codec}: broker CPU per 1,000 records (3 brokers together)",
                cpu_ms,
                "ms",
            )
        )
        details["codecs"][codec] = {
            "records": stats.records_acked,
            "seconds": round(secs, 3),
            "batch_bytes": stats.bytes_acked // max(stats.batches_acked, 1),
            "cpu": usage,
        }

    # (c) the same records over more partitions: how the cost grows with the partition count.
    details["scaling"] = {}
    for count in p.scaling_partition_counts:
        topic = f"scaling-{count}"
        await cluster.assign(topic, count)
        spread = ProducerSettings(
            acks=-1,
            record_size=100,
            batch_records=p.small_batch_records,
            max_in_flight=max(1, SCALING_IN_FLIGHT // count),
        )
        label = f"2c {count} partitions"
        await produce(ctx, cluster, topic, spread, spread.batch_records * count, label=f"{label} warm-up")
        stats, usage = await measured_produce(
            ctx, cluster, topic, spread, p.scaling_records, label=label, profile_as=f"2c-{count}"
        )
        secs = max(stats.elapsed, 1e-9)
        value = stats.records_acked / secs
        result.add(
            Figure(
                f"scaling_{count}_records_per_s",
                f"(2c) 100-byte records, {count} partitions",
                value,
                "records/s",
                Target(
                    ">=",
                    TARGET_SCALING_SHARE * rec_s,
                    f">= {TARGET_SCALING_SHARE:.0%} of 3 partitions ({TARGET_SCALING_SHARE * rec_s:,.0f})",
                ),
                ratio=value / rec_s,
                ratio_to="3 partitions",
                note=f"{p.small_batch_records} records/batch, {spread.max_in_flight} in flight per "
                f"partition; {cpu_note(usage)}",
            )
        )
        result.add(
            Figure(
                f"scaling_{count}_broker_cpu_ms_per_1000_records",
                f"(2c) broker CPU per 1,000 records, {count} partitions",
                usage["broker_cpu_seconds"] * 1e6 / max(stats.records_acked, 1),
                "ms",
            )
        )
        details["scaling"][str(count)] = {
            "records": stats.records_acked,
            "seconds": round(secs, 3),
            "requests_per_s": round(stats.batches_acked / secs, 1),
            "max_in_flight_per_partition": spread.max_in_flight,
            "cpu": usage,
        }
    details["rss_mib_after"]["2c"] = rss_now(cluster)

    # (b) 1 MiB batches.
    await cluster.assign("large", p.large_partitions)
    large = ProducerSettings(
        acks=-1, record_size=LARGE_RECORD_SIZE, batch_records=LARGE_RECORDS_PER_BATCH, max_in_flight=2
    )
    await produce(ctx, cluster, "large", large, LARGE_RECORDS_PER_BATCH * 6, label="2b warm-up")
    stats, usage = await measured_produce(
        ctx,
        cluster,
        "large",
        large,
        p.large_batches * LARGE_RECORDS_PER_BATCH,
        label="2b 1 MiB batches",
        profile_as="2b",
    )
    details["large_cpu"] = usage
    details["rss_mib_after"]["2b"] = rss_now(cluster)
    secs = max(stats.elapsed, 1e-9)
    mb_s = stats.bytes_acked / secs / 1e6
    ratio = ctx.of_loopback(mb_s)
    result.add(
        Figure(
            "large_mb_per_s",
            "(2b) 1 MiB batches, acks=-1, RF 3",
            mb_s,
            "MB/s",
            Target(
                ">=",
                TARGET_LARGE_SHARE_OF_LOOPBACK * ctx.loopback_mb_s,
                f">= {TARGET_LARGE_SHARE_OF_LOOPBACK:.0%} of loopback",
            )
            if ctx.loopback_mb_s
            else None,
            ratio=ratio,
            ratio_to="loopback",
            note=f"{p.large_partitions} partitions; {cpu_note(usage)}",
        )
    )
    result.add(
        Figure(
            "large_broker_cpu_ms_per_mb",
            "(2b) broker CPU per MB (3 brokers together)",
            usage["broker_cpu_seconds"] * 1e3 / max(stats.bytes_acked / 1e6, 1e-9),
            "ms",
        )
    )
    details["large"] = {
        "batches": stats.batches_acked,
        "bytes": stats.bytes_acked,
        "seconds": round(secs, 3),
        "batch_bytes": stats.bytes_acked // max(stats.batches_acked, 1),
        "retries": stats.retries,
    }

    # Peak resident memory of each broker over both runs.
    rss = {b.broker_id: b.peak_rss_mib() for b in cluster.brokers.values()}
    worst = max(rss.values())
    result.add(
        Figure(
            "broker_peak_rss_mib",
            "broker peak RSS (VmHWM), worst of 3",
            worst,
            "MiB",
            Target("<=", TARGET_PEAK_RSS_MIB),
            note=", ".join(f"b{k} {v:.0f}" for k, v in sorted(rss.items())),
        )
    )
    details["broker_peak_rss_mib"] = {str(k): round(v, 1) for k, v in rss.items()}
    ctx.step("checking the replicas converged")
    await cluster.wait_converged("large", p.large_partitions, timeout=120)
    result.details = details


async def run_latency(ctx: BenchContext, result: ScenarioResult) -> None:
    p = ctx.params
    cluster = await start_cluster(ctx, "latency")
    try:
        partitions = 3
        await cluster.assign("lat", partitions)
        settings = ProducerSettings(
            acks=-1, record_size=100, batch_records=p.latency_batch_records, max_in_flight=5
        )
        await produce(ctx, cluster, "lat", settings, p.latency_rate, rate=p.latency_rate, label="3 warm-up")
        count = int(p.latency_rate * p.latency_seconds)
        stats = await produce(ctx, cluster, "lat", settings, count, rate=p.latency_rate, label="3 fixed rate")
        ctx.step("stopping the brokers cleanly (the report job reads their data)")
        await cluster.wait_converged("lat", partitions, timeout=60)
        await cluster.stop_all()
    finally:
        cluster.close()
    ctx.data_roots["latency"] = cluster.root
    lat = sorted(stats.latencies_ms)
    achieved = stats.records_acked / max(stats.elapsed, 1e-9)
    note = f"{p.latency_batch_records} records/request, {partitions} partitions"
    result.add(Figure("p50_ms", "(3) commit latency p50", percentile(lat, 0.50), "ms", note=note))
    result.add(
        Figure("p99_ms", "(3) commit latency p99", percentile(lat, 0.99), "ms", Target("<=", TARGET_P99_MS))
    )
    result.add(Figure("p999_ms", "(3) commit latency p99.9", percentile(lat, 0.999), "ms"))
    result.add(
        Figure(
            "achieved_records_per_s",
            "(3) rate achieved",
            achieved,
            "records/s",
            note=f"asked {p.latency_rate:,}",
        )
    )
    result.details = {
        "requests": len(lat),
        "max_ms": round(lat[-1], 3) if lat else None,
        "rate": p.latency_rate,
        "seconds": round(stats.elapsed, 2),
        "batch_records": p.latency_batch_records,
    }
