"""Scenario 5: follower catch-up.

Three brokers, replication factor 3, ``min.insync.replicas=2``, the partitions' leaders on brokers 1 and 2.
Broker 3 is stopped cleanly; the leaders drop it from the ISR (``replica.lag.time.max.ms``, shortened here
so the acks=-1 producer does not wait half a minute); the producer writes the volume (500 MB in the full
run) in 256 KiB batches. Then broker 3 is started again and told its partitions (LEADER_AND_ISR, as a
controller would); the figure is the bytes it fetched divided by the time from that request until every
leader has it back in the ISR.
"""

from __future__ import annotations

import time

from cli.bench.cluster import BenchCluster, dir_bytes, wait_for
from cli.bench.context import BenchContext
from cli.bench.results import Figure, ScenarioResult
from cli.bench.throughput import produce
from cli.producer import ProducerSettings

RECORDS_PER_BATCH = 16
RECORD_SIZE = (256 << 10) // RECORDS_PER_BATCH - 30
LAG_TIME_MS = 2000


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    p = ctx.params
    cluster = BenchCluster(
        ctx.scenario_dir("catchup"),
        {"min.insync.replicas": "2", "replica.lag.time.max.ms": str(LAG_TIME_MS)},
    )
    try:
        ctx.step("starting 3 brokers")
        await cluster.start([1, 2, 3])
        leaders = await cluster.assign("catchup", p.catchup_partitions, leaders=[1, 2])
        b3 = cluster[3]
        ctx.step("stopping broker 3")
        await b3.stop()
        settings = ProducerSettings(
            acks=-1, record_size=RECORD_SIZE, batch_records=RECORDS_PER_BATCH, max_in_flight=2
        )
        batch_bytes = RECORD_SIZE * RECORDS_PER_BATCH
        count = max(RECORDS_PER_BATCH, p.catchup_bytes // batch_bytes * RECORDS_PER_BATCH)
        stats = await produce(
            ctx, cluster, "catchup", settings, count, label="writing while broker 3 is down"
        )
        before = dir_bytes(b3.log_dir)
        target = sum(dir_bytes(cluster[leaders[q]].log_dir / f"catchup-{q}") for q in leaders)
        ctx.step("restarting broker 3")
        t_launch = time.monotonic()
        await b3.start()
        started_s = time.monotonic() - t_launch
        body = cluster.leader_and_isr_body(
            "catchup", leaders, leader_epoch=1, isr={q: [1, 2] for q in leaders}
        )
        t0 = time.monotonic()
        await cluster.send_leader_and_isr([b3], body)
        leader_brokers = sorted(set(leaders.values()))

        async def back_in_isr() -> bool:
            done = 0
            for lb in leader_brokers:
                view = await cluster.partitions_view(cluster[lb])
                done += sum(
                    1 for q, leader in leaders.items() if leader == lb and 3 in view[("catchup", q)]["isr"]
                )
            fetched = dir_bytes(b3.log_dir) - before
            ctx.step(
                f"broker 3 catching up: {fetched / 1e6:,.0f} MB, {done}/{len(leaders)} partitions in the ISR"
            )
            return done == len(leaders)

        await wait_for(back_in_isr, 600, "broker 3 to rejoin the ISR of every partition", interval=0.1)
        secs = time.monotonic() - t0
        fetched = dir_bytes(b3.log_dir) - before
    finally:
        cluster.close()
    mb_s = fetched / secs / 1e6
    result.add(
        Figure(
            "catchup_mb_per_s",
            "(5) follower catch-up until back in the ISR",
            mb_s,
            "MB/s",
            ratio=ctx.of_loopback(mb_s),
            ratio_to="loopback",
            note=f"{fetched / 1e6:,.0f} MB in {secs:.1f}s, {p.catchup_partitions} partitions",
        )
    )
    result.add(Figure("catchup_seconds", "(5) time until back in the ISR", secs, "s"))
    result.add(Figure("restart_seconds", "(5) broker 3 process start (to listening)", started_s, "s"))
    result.details = {
        "bytes_written_while_down": stats.bytes_acked,
        "bytes_fetched": fetched,
        "leader_log_bytes": target,
        "write_mb_per_s": round(stats.bytes_acked / max(stats.elapsed, 1e-9) / 1e6, 1),
        "partitions": p.catchup_partitions,
        "replica_lag_time_max_ms": LAG_TIME_MS,
        "batch_bytes": batch_bytes,
    }
