"""Scenario 9: what Kafka's encoding costs the broker (docs/clients.md, "Cost on the broker").

One set of three brokers (replication factor 3, ``min.insync.replicas=2``), two producers in this process
taking turns on the same topic at the same rate: Kafka's own C client (librdkafka through confluent-kafka,
acks=all, idempotent, ``linger.ms=5``, 100-byte records), and isrsim's producer on the msgpack path
(acks=-1, idempotent, 100-byte records). The msgpack producer sends batches of the size librdkafka's came out
at (the leaders' ``acked.jsonl`` says how many records each of its batches held), so the two differ in the
encoding and little else. The rate is one both reach on a small machine: flat out, the slower client would
leave the followers' fetches more rounds per record, and that, not the encoding, would show. The figures:
records/s each, the brokers' CPU (user + system, from /proc) per 1,000 records each, and the ratio
Kafka / msgpack of the CPU, whose target is at most 1.10.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import trio

from kit.librdkafka_producer import LibrdkafkaWorkload, producer_config
from kit.producer import ProducerSettings, ProduceStats
from lab.bench.cluster import BenchCluster, cpu_seconds
from lab.bench.context import BenchContext, Skip
from lab.bench.results import Figure, ScenarioResult, Target
from lab.bench.throughput import BROKER_IDS, CLUSTER_OVERRIDES, produce
from protocol import ACKED_FILE

TOPIC = "bench"
PARTITIONS = 3
LINGER_MS = 5
RECORD_SIZE = 100
CPU_RATIO_TARGET = 1.10


def _broker_cpu(cluster: BenchCluster) -> float:
    return sum(cpu_seconds(b.pid) for b in cluster.brokers.values())


def _batch_sizes(cluster: BenchCluster, client_id: str) -> list[int]:
    """Records per batch of every batch the leaders acknowledged to ``client_id``."""
    sizes: list[int] = []
    for b in cluster.brokers.values():
        path = Path(b.dir) / ACKED_FILE
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if client_id in line:
                a = json.loads(line)
                if a.get("client_id") == client_id:
                    sizes.append(int(a["last_offset"]) - int(a["base_offset"]) + 1)
    return sizes


async def _librdkafka(
    ctx: BenchContext, cluster: BenchCluster, count: int, rate: float, label: str, client_id: str
) -> tuple[float, float, list[int]]:
    """(records/s, broker CPU seconds, records per batch) of one librdkafka run of ``count`` records."""
    config = producer_config(cluster.bootstrap, client_id=client_id, linger_ms=LINGER_MS)
    workload = LibrdkafkaWorkload(config, TOPIC, record_size=RECORD_SIZE)
    done = trio.Event()

    async def show() -> None:
        while not done.is_set():
            ctx.step(f"{label}: {workload.stats.records_acked:,}/{count:,} records acknowledged")
            await trio.sleep(0.5)

    cpu0, t0 = _broker_cpu(cluster), time.monotonic()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(show)
        stats = await trio.to_thread.run_sync(lambda: workload.run(count, rate, drain_s=120))
        done.set()
    wall, cpu = time.monotonic() - t0, _broker_cpu(cluster) - cpu0
    if stats.records_acked != count:
        raise RuntimeError(
            f"{label}: {stats.records_acked:,} of {count:,} acknowledged ({workload.summary()})"
        )
    return count / wall, cpu, _batch_sizes(cluster, client_id)


async def _msgpack(
    ctx: BenchContext, cluster: BenchCluster, count: int, rate: float, batch_records: int, label: str
) -> tuple[float, float]:
    """(records/s, broker CPU seconds) of one run of isrsim's producer."""
    settings = ProducerSettings(
        acks=-1, record_size=RECORD_SIZE, batch_records=batch_records, max_in_flight=5
    )
    cpu0, t0 = _broker_cpu(cluster), time.monotonic()
    stats: ProduceStats = await produce(ctx, cluster, TOPIC, settings, count, rate, label=label)
    wall, cpu = time.monotonic() - t0, _broker_cpu(cluster) - cpu0
    return stats.records_acked / wall, cpu


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    """The runs alternate (librdkafka, msgpack, ...) so that the load of this shared machine falls on both
    alike; each side's median of the rounds is reported."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise Skip("confluent-kafka (librdkafka) is not installed: pip install 'isrsim[clients]'") from None
    p = ctx.params
    count, rounds, rate = p.kafka_client_records, p.kafka_client_rounds, float(p.kafka_client_rate)
    cluster = BenchCluster(ctx.scenario_dir("kafka-client"), CLUSTER_OVERRIDES)
    try:
        ctx.step("starting 3 brokers")
        await cluster.start(BROKER_IDS)
        await cluster.assign(TOPIC, PARTITIONS)
        warm = max(count // 5, 2000)
        _, _, sizes = await _librdkafka(
            ctx, cluster, warm, rate, "librdkafka warm-up", "bench-librdkafka-warm"
        )
        batch = max(1, round(statistics.mean(sizes))) if sizes else 200
        await _msgpack(ctx, cluster, warm, rate, batch, "msgpack warm-up")
        kafka_runs: list[tuple[float, float]] = []
        msgpack_runs: list[tuple[float, float]] = []
        all_sizes: list[int] = []
        for i in range(rounds):
            got_rate, cpu, sizes = await _librdkafka(
                ctx, cluster, count, rate, f"librdkafka {i + 1}/{rounds}", f"bench-librdkafka-{i}"
            )
            kafka_runs.append((got_rate, cpu))
            all_sizes += sizes
            batch = max(1, round(statistics.mean(all_sizes))) if all_sizes else batch
            msgpack_runs.append(await _msgpack(ctx, cluster, count, rate, batch, f"msgpack {i + 1}/{rounds}"))
    finally:
        cluster.close()
    kafka_rate = statistics.median(r for r, _ in kafka_runs)
    msgpack_rate = statistics.median(r for r, _ in msgpack_runs)
    kafka_cpu_ms = statistics.median(c for _, c in kafka_runs) * 1e6 / count
    msgpack_cpu_ms = statistics.median(c for _, c in msgpack_runs) * 1e6 / count
    ratio = kafka_cpu_ms / msgpack_cpu_ms if msgpack_cpu_ms else None
    mean_batch = statistics.mean(all_sizes) if all_sizes else 0.0
    note = (
        f"median of {rounds}; {count:,} records of {RECORD_SIZE} bytes at {rate:,.0f}/s, {PARTITIONS} "
        "partitions, RF 3, "
        f"acks=all, idempotent; librdkafka linger.ms={LINGER_MS} made {mean_batch:.0f} records/batch, "
        f"the msgpack producer sent {batch}"
    )
    result.add(
        Figure(
            "kafka_client_records_per_s",
            "(9) librdkafka (Kafka encoding)",
            kafka_rate,
            "records/s",
            note=note,
        )
    )
    result.add(
        Figure(
            "kafka_client_msgpack_records_per_s",
            "(9) isrsim producer (msgpack), same batches",
            msgpack_rate,
            "records/s",
            ratio=kafka_rate / msgpack_rate if msgpack_rate else None,
            ratio_to="msgpack (librdkafka / msgpack)",
        )
    )
    result.add(
        Figure(
            "kafka_client_broker_cpu_ms_per_1000_records",
            "(9) broker CPU per 1,000 records, librdkafka",
            kafka_cpu_ms,
            "ms",
            note="user + system CPU of the three brokers",
        )
    )
    result.add(
        Figure(
            "kafka_client_msgpack_broker_cpu_ms_per_1000_records",
            "(9) broker CPU per 1,000 records, msgpack",
            msgpack_cpu_ms,
            "ms",
        )
    )
    result.add(
        Figure(
            "kafka_client_cpu_ratio",
            "(9) broker CPU per record, Kafka encoding / msgpack",
            ratio,
            "x",
            target=Target("<=", CPU_RATIO_TARGET, f"<= {CPU_RATIO_TARGET:.2f} x msgpack"),
        )
    )
    result.details = {
        "records_per_run": count,
        "rate": rate,
        "librdkafka_runs": [{"records_s": round(r), "broker_cpu_s": round(c, 3)} for r, c in kafka_runs],
        "msgpack_runs": [{"records_s": round(r), "broker_cpu_s": round(c, 3)} for r, c in msgpack_runs],
        "librdkafka_records_per_batch": round(mean_batch, 1),
        "msgpack_records_per_batch": batch,
    }
