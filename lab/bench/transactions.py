"""Scenario 10: what transactions cost (docs/transactions.md, "Verification").

One set of three brokers (replication factor 3, ``min.insync.replicas=2``) and Kafka's own C client
(librdkafka through confluent-kafka, acks=all, ``linger.ms=5``, 100-byte records), flat out, taking turns:
an idempotent producer, and a transactional one writing the same records in transactions of 1,000 (each
committed: AddPartitionsToTxn, the leaders' KIP-890 verification with the coordinator, EndTxn, the markers).
The brokers are unmanaged, so ``__transaction_state`` (1 partition) is assigned to them up front as the
bench's other topics are. The figures: records/s of each (median of the rounds) and the ratio
transactional / idempotent, whose target is at least 0.5.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import trio

from kit.librdkafka_producer import LibrdkafkaWorkload, producer_config
from lab.bench.cluster import BenchCluster
from lab.bench.context import BenchContext, Skip
from lab.bench.results import Figure, ScenarioResult, Target
from lab.bench.throughput import BROKER_IDS, CLUSTER_OVERRIDES

TOPIC = "bench"
PARTITIONS = 3
RECORD_SIZE = 100
TRANSACTION_RECORDS = 1000
RATIO_TARGET = 0.5
TXN_OVERRIDES = {
    **CLUSTER_OVERRIDES,
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
}


def _transactional(config: dict[str, Any], count: int, transactional_id: str) -> float:
    """records/s of ``count`` records in committed transactions of TRANSACTION_RECORDS."""
    from confluent_kafka import Producer

    producer = Producer({**config, "transactional.id": transactional_id, "transaction.timeout.ms": 120_000})
    producer.init_transactions(60)
    pad = b"x" * RECORD_SIZE
    start = time.monotonic()
    sent = 0
    while sent < count:
        producer.begin_transaction()
        n = min(TRANSACTION_RECORDS, count - sent)
        for _ in range(n):
            while True:
                try:
                    producer.produce(TOPIC, value=pad)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction(60)
        sent += n
    return count / (time.monotonic() - start)


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise Skip("confluent-kafka (librdkafka) is not installed: pip install 'isrsim[clients]'") from None
    p = ctx.params
    count, rounds = p.kafka_client_records, p.kafka_client_rounds
    cluster = BenchCluster(ctx.scenario_dir("transactions"), TXN_OVERRIDES)
    idempotent: list[float] = []
    transactional: list[float] = []
    try:
        ctx.step("starting 3 brokers")
        await cluster.start(BROKER_IDS)
        await cluster.assign("__transaction_state", 1)
        await cluster.assign(TOPIC, PARTITIONS)
        for i in range(rounds + 1):  # the first round warms up
            label = "warm-up" if i == 0 else f"{i}/{rounds}"
            config = producer_config(cluster.bootstrap, client_id=f"bench-idempotent-{i}", linger_ms=5)
            workload = LibrdkafkaWorkload(config, TOPIC, record_size=RECORD_SIZE)
            ctx.step(f"idempotent {label}: {count:,} records")
            t0 = time.monotonic()
            stats = await trio.to_thread.run_sync(workload.run, count, None)
            if stats.records_acked != count:
                raise RuntimeError(f"idempotent: {workload.summary()}")
            idem_rate = count / (time.monotonic() - t0)
            ctx.step(f"transactional {label}: {count:,} records in transactions of {TRANSACTION_RECORDS:,}")
            txn_config = producer_config(cluster.bootstrap, client_id=f"bench-txn-{i}", linger_ms=5)
            txn_rate = await trio.to_thread.run_sync(_transactional, txn_config, count, f"bench-txn-{i}")
            if i > 0:
                idempotent.append(idem_rate)
                transactional.append(txn_rate)
    finally:
        cluster.close()
    idem = statistics.median(idempotent)
    txn = statistics.median(transactional)
    note = (
        f"median of {rounds}; {count:,} records of {RECORD_SIZE} bytes, {PARTITIONS} partitions, RF 3, "
        f"acks=all, librdkafka linger.ms=5, flat out; transactions of {TRANSACTION_RECORDS:,} records"
    )
    result.add(
        Figure("txn_idempotent_records_per_s", "(10) idempotent producer", idem, "records/s", note=note)
    )
    result.add(
        Figure(
            "txn_transactional_records_per_s",
            "(10) transactional producer",
            txn,
            "records/s",
            ratio=txn / idem if idem else None,
            ratio_to="idempotent (transactional / idempotent)",
            target=Target(">=", RATIO_TARGET * idem, f">= {RATIO_TARGET:.0%} of idempotent"),
        )
    )
    result.details = {
        "records_per_run": count,
        "idempotent_runs": [round(r) for r in idempotent],
        "transactional_runs": [round(r) for r in transactional],
    }
