"""Scenario 5: follower catch-up.

Three brokers, replication factor 3, ``min.insync.replicas=2``, the partitions' leaders on brokers 1 and 2.
Broker 3 is stopped cleanly; the leaders drop it from the ISR (``replica.lag.time.max.ms``, shortened here
so the acks=-1 producer does not wait half a minute); the producer writes the volume (500 MB in the full
run) in 256 KiB batches. Then broker 3 is started again and told its partitions (LEADER_AND_ISR, as a
controller would); the figure is the bytes it fetched divided by the time from that request until every
leader has it back in the ISR. Then again with many lagging partitions (100), smaller volume: what a
broker restarted after maintenance faces (5b).
"""

from __future__ import annotations

import time
from typing import Any

from kit.processes import async_wait_until
from kit.producer import ProducerSettings
from lab.bench.cluster import BenchCluster, dir_bytes
from lab.bench.context import BenchContext
from lab.bench.results import Figure, ScenarioResult, Target
from lab.bench.throughput import produce

RECORDS_PER_BATCH = 16
RECORD_SIZE = (256 << 10) // RECORDS_PER_BATCH - 30
LAG_TIME_MS = 2000
# Requests in flight over all partitions (2 per partition over 4 partitions).
IN_FLIGHT = 8
# (5) catch-up reads and appends at least this share of the loopback ceiling.
TARGET_SHARE_OF_LOOPBACK = 0.10
# (5b) 100 lagging partitions catch up at least at this share of the rate of 4.
TARGET_MANY_SHARE = 0.5


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    p = ctx.params
    few = await _catch_up(ctx, "catchup", p.catchup_partitions, p.catchup_bytes)
    few_mb_s = few["bytes_fetched"] / few["seconds"] / 1e6
    result.add(
        Figure(
            "catchup_mb_per_s",
            "(5) follower catch-up until back in the ISR",
            few_mb_s,
            "MB/s",
            Target(
                ">=",
                TARGET_SHARE_OF_LOOPBACK * ctx.loopback_mb_s,
                f">= {TARGET_SHARE_OF_LOOPBACK:.0%} of loopback",
            )
            if ctx.loopback_mb_s
            else None,
            ratio=ctx.of_loopback(few_mb_s),
            ratio_to="loopback",
            note=f"{few['bytes_fetched'] / 1e6:,.0f} MB in {few['seconds']:.1f}s, "
            f"{p.catchup_partitions} partitions",
        )
    )
    result.add(Figure("catchup_seconds", "(5) time until back in the ISR", few["seconds"], "s"))
    result.add(
        Figure("restart_seconds", "(5) broker 3 process start (to listening)", few["restart_seconds"], "s")
    )
    many_count = p.catchup_many_partitions
    many = await _catch_up(ctx, "catchup-many", many_count, p.catchup_many_bytes)
    many_mb_s = many["bytes_fetched"] / many["seconds"] / 1e6
    result.add(
        Figure(
            "catchup_many_mb_per_s",
            f"(5b) follower catch-up, {many_count} lagging partitions",
            many_mb_s,
            "MB/s",
            Target(
                ">=",
                TARGET_MANY_SHARE * few_mb_s,
                f">= {TARGET_MANY_SHARE:.0%} of {p.catchup_partitions} partitions "
                f"({TARGET_MANY_SHARE * few_mb_s:,.0f})",
            ),
            ratio=many_mb_s / few_mb_s,
            ratio_to=f"{p.catchup_partitions} partitions",
            note=f"{many['bytes_fetched'] / 1e6:,.0f} MB in {many['seconds']:.1f}s",
        )
    )
    result.add(
        Figure(
            "catchup_many_seconds",
            f"(5b) time until back in the ISR of all {many_count}",
            many["seconds"],
            "s",
        )
    )
    result.details = {"few": few, "many": many, "replica_lag_time_max_ms": LAG_TIME_MS}


async def _catch_up(ctx: BenchContext, topic: str, partitions: int, volume: int) -> dict[str, Any]:
    """Broker 3 stopped, ``volume`` bytes written to ``partitions`` partitions led by brokers 1 and 2,
    broker 3 restarted and told its partitions: the bytes it fetched and the seconds until it is back in
    every ISR."""
    cluster = BenchCluster(
        ctx.scenario_dir(topic),
        {"min.insync.replicas": "2", "replica.lag.time.max.ms": str(LAG_TIME_MS)},
    )
    try:
        ctx.step(f"{topic}: starting 3 brokers")
        await cluster.start([1, 2, 3])
        leaders = await cluster.assign(topic, partitions, leaders=[1, 2])
        b3 = cluster[3]
        ctx.step(f"{topic}: stopping broker 3")
        await b3.stop()
        settings = ProducerSettings(
            acks=-1,
            record_size=RECORD_SIZE,
            batch_records=RECORDS_PER_BATCH,
            max_in_flight=max(1, IN_FLIGHT // partitions),
        )
        batch_bytes = RECORD_SIZE * RECORDS_PER_BATCH
        count = max(RECORDS_PER_BATCH * partitions, volume // batch_bytes * RECORDS_PER_BATCH)
        stats = await produce(
            ctx, cluster, topic, settings, count, label=f"{topic}: writing while broker 3 is down"
        )
        before = dir_bytes(b3.log_dir)
        target = sum(dir_bytes(cluster[leaders[q]].log_dir / f"{topic}-{q}") for q in leaders)
        ctx.step(f"{topic}: restarting broker 3")
        t_launch = time.monotonic()
        b3.launch()
        await b3.wait_started_async()
        started_s = time.monotonic() - t_launch
        body = cluster.leader_and_isr_body(topic, leaders, leader_epoch=1, isr={q: [1, 2] for q in leaders})
        t0 = time.monotonic()
        await cluster.send_leader_and_isr([b3], body)
        leader_brokers = sorted(set(leaders.values()))

        async def back_in_isr() -> bool:
            done = 0
            for lb in leader_brokers:
                view = await cluster.partitions_view(cluster[lb])
                done += sum(
                    1 for q, leader in leaders.items() if leader == lb and 3 in view[(topic, q)]["isr"]
                )
            fetched = dir_bytes(b3.log_dir) - before
            ctx.step(
                f"{topic}: broker 3 catching up: {fetched / 1e6:,.0f} MB, {done}/{len(leaders)} partitions "
                "in the ISR"
            )
            return done == len(leaders)

        await async_wait_until(
            back_in_isr, 600, "broker 3 to rejoin the ISR of every partition", interval=0.1
        )
        secs = time.monotonic() - t0
        fetched = dir_bytes(b3.log_dir) - before
    finally:
        cluster.close()
    return {
        "partitions": partitions,
        "bytes_written_while_down": stats.bytes_acked,
        "bytes_fetched": fetched,
        "leader_log_bytes": target,
        "seconds": round(secs, 3),
        "restart_seconds": round(started_s, 3),
        "write_mb_per_s": round(stats.bytes_acked / max(stats.elapsed, 1e-9) / 1e6, 1),
        "batch_bytes": batch_bytes,
        "max_in_flight_per_partition": settings.max_in_flight,
    }
