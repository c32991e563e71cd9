"""Scenario 8: the throughput cost of SASL_SSL (docs/security.md).

The same workload on two sets of three brokers (replication factor 3, ``min.insync.replicas=2``, acks=-1,
100-byte records in batches, one producer in this process): once on PLAINTEXT listeners, once on SASL_SSL
listeners with SCRAM-SHA-256, where every connection (the producer's, the followers' fetches, the
harness's LEADER_AND_ISR) is TLS and authenticated. The ratio SASL_SSL / PLAINTEXT is the figure.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from kit.producer import ProducerSettings
from kit.security_files import BROKER_USER, SecureSetup
from lab.bench.cluster import BenchCluster
from lab.bench.context import BenchContext
from lab.bench.results import Figure, ScenarioResult
from lab.bench.throughput import BROKER_IDS, CLUSTER_OVERRIDES, produce
from protocol import ClientSecurity, current_client_security

PARTITIONS = 6
ROUNDS = 3


def _secure_overrides(setup: SecureSetup, root: Path) -> dict[int, dict[str, str]]:
    """Each broker's SASL_SSL settings; writes its keystore and credentials first."""
    out: dict[int, dict[str, str]] = {}
    for broker_id in BROKER_IDS:
        bdir = root / f"broker-{broker_id}"
        settings = setup.node_settings(f"broker-{broker_id}", bdir, bdir / "data")
        # Transport and authentication only: no authorizer in this comparison.
        settings.pop("authorizer.class.name", None)
        settings.pop("super.users", None)
        out[broker_id] = {
            "listeners": "SASL_SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_SSL",
            **settings,
        }
    return out


async def _start(ctx: BenchContext, name: str, secure: bool) -> tuple[BenchCluster, ClientSecurity | None]:
    root = ctx.scenario_dir(name)
    per_broker: dict[int, dict[str, str]] = {}
    security = None
    if secure:
        setup = SecureSetup.create(root)
        per_broker = _secure_overrides(setup, root)
        security = ClientSecurity(
            "SASL_SSL", "SCRAM-SHA-256", BROKER_USER, setup.broker_password, str(setup.ca_path)
        )
    cluster = BenchCluster(root, CLUSTER_OVERRIDES)
    token = current_client_security.set(security)
    try:
        ctx.step(f"{name}: starting 3 brokers")
        await cluster.start(BROKER_IDS, per_broker=per_broker)
        await cluster.assign("bench", PARTITIONS)
    except BaseException:
        cluster.close()
        raise
    finally:
        current_client_security.reset(token)
    return cluster, security


async def _measure(
    ctx: BenchContext,
    cluster: BenchCluster,
    security: ClientSecurity | None,
    settings: ProducerSettings,
    count: int,
    label: str,
) -> tuple[float, float]:
    """(records/s, MB/s) of one producer run; its connections use ``security``."""
    token = current_client_security.set(security)
    try:
        stats = await produce(ctx, cluster, "bench", settings, count, label=label)
    finally:
        current_client_security.reset(token)
    secs = max(stats.elapsed, 1e-9)
    return stats.records_acked / secs, stats.bytes_acked / secs / 1e6


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    """Both clusters up at once; the runs alternate (PLAINTEXT, SASL_SSL, ...) so that the load of this
    shared machine falls on both alike; each side's median of ROUNDS runs is reported."""
    p = ctx.params
    settings = ProducerSettings(
        acks=-1, record_size=100, batch_records=p.small_batch_records, max_in_flight=5
    )
    count = max(p.small_records // 4, settings.batch_records * 20)
    plain, plain_sec = await _start(ctx, "plaintext", secure=False)
    try:
        secure, secure_sec = await _start(ctx, "sasl-ssl", secure=True)
        try:
            warm = max(count // 10, settings.batch_records * 6)
            await _measure(ctx, plain, plain_sec, settings, warm, "PLAINTEXT warm-up")
            await _measure(ctx, secure, secure_sec, settings, warm, "SASL_SSL warm-up")
            runs: dict[str, list[tuple[float, float]]] = {"plaintext": [], "sasl_ssl": []}
            for i in range(ROUNDS):
                runs["plaintext"].append(
                    await _measure(ctx, plain, plain_sec, settings, count, f"PLAINTEXT {i + 1}/{ROUNDS}")
                )
                runs["sasl_ssl"].append(
                    await _measure(ctx, secure, secure_sec, settings, count, f"SASL_SSL {i + 1}/{ROUNDS}")
                )
        finally:
            secure.close()
    finally:
        plain.close()
    plain_rec, plain_mb = statistics.median(runs["plaintext"])
    secure_rec, secure_mb = statistics.median(runs["sasl_ssl"])
    note = (
        f"median of {ROUNDS}; {settings.batch_records} records/batch, {PARTITIONS} partitions, "
        f"{count:,} records"
    )
    result.add(
        Figure("plaintext_records_per_s", "(8) PLAINTEXT, acks=-1, RF 3", plain_rec, "records/s", note=note)
    )
    result.add(
        Figure(
            "sasl_ssl_records_per_s",
            "(8) SASL_SSL (SCRAM-SHA-256), acks=-1, RF 3",
            secure_rec,
            "records/s",
            ratio=secure_rec / plain_rec if plain_rec else None,
            ratio_to="PLAINTEXT",
            note="TLS on every connection: producer, follower fetches, LEADER_AND_ISR",
        )
    )
    result.details = {
        side: {"runs_records_s": [round(r) for r, _ in v], "runs_mb_s": [round(m, 2) for _, m in v]}
        for side, v in runs.items()
    } | {"plaintext_mb_s": round(plain_mb, 2), "sasl_ssl_mb_s": round(secure_mb, 2)}
