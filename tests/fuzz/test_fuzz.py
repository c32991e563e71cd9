"""The Kafka-protocol fuzzer against a real cluster (docs/fuzzing.md): three brokers and a quorum of three
controllers from `isrsim cluster up`, mutated client requests and schema-valid extreme ones sent to the
brokers (which forward the admin ones to the active controller), an acks=all producer running throughout.

After a run: every node is alive, the quorum has a leader within fetch timeout + election timeout, every
broker answers at once, no acknowledged record is lost, every node's RSS grew by less than RSS_GROWTH_MAX and
no node's event loop was held longer than LOOP_HOLD_MAX_MS (the nodes' slow-step log).

`make test` runs the short run; `make fuzz` the long one (ISRSIM_FUZZ_INPUTS inputs, at most
ISRSIM_FUZZ_SECONDS; ISRSIM_FUZZ_SEED picks the stream).
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from controller import ControllerConfig
from kit.controller_quorum import describe_quorum, leader_of, voters_of
from kit.node_query import ask
from kit.processes import process_state
from protocol import ApiKeys
from tests.clients.kafka_wire import KafkaWire
from tests.fuzz.mutate import inputs, load_corpus
from tests.fuzz.runner import FuzzStats, rss_bytes, run_fuzz
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import wait_until

pytestmark = pytest.mark.integration

WORKLOAD = "acked-workload"
PARTITIONS = 3
SEED_TOPICS = ("seed-a", "seed-c")  # the corpus's topics, so that mutated requests reach the logs
RSS_GROWTH_MAX = 200 * 1024 * 1024
# The slow-step log's threshold, and the longest hold of a node's loop a run accepts: on 2 busy cores a step
# of a few ms can take ten times that, so only a real hold (a loop over a huge count) passes this.
SLOW_STEP_MS = 100
LOOP_HOLD_MAX_MS = 3000.0
ANSWER_TIMEOUT_S = 5.0
SHORT_INPUTS = 5000
LONG_INPUTS = int(os.environ.get("ISRSIM_FUZZ_INPUTS", "1000000"))
LONG_SECONDS = float(os.environ.get("ISRSIM_FUZZ_SECONDS", "780"))
FUZZ_SEED = int(os.environ.get("ISRSIM_FUZZ_SEED", "33"))
# Resuming a long run: the stream's first ISRSIM_FUZZ_SKIP inputs are skipped (a run that stopped at its
# time limit prints the value that goes on where it stopped).
FUZZ_SKIP = int(os.environ.get("ISRSIM_FUZZ_SKIP", "0"))


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    previous = os.environ.get("ISRSIM_SLOW_STEP_MS")
    os.environ["ISRSIM_SLOW_STEP_MS"] = str(SLOW_STEP_MS)  # the nodes inherit it from `cluster up`
    try:
        clusters = cluster_up(tmp_path_factory.mktemp("fuzz") / "root", 3, FAST, controllers=3)
        cluster = next(clusters)
    finally:
        if previous is None:
            os.environ.pop("ISRSIM_SLOW_STEP_MS", None)
        else:
            os.environ["ISRSIM_SLOW_STEP_MS"] = previous
    for topic in (WORKLOAD, *SEED_TOPICS):
        cluster.cli("topic", "create", topic, "--partitions", str(PARTITIONS), "--replication-factor", "3")
    yield cluster
    next(clusters, None)


def quorum_deadline_s(cluster: Cluster) -> float:
    """controller.quorum.fetch.timeout.ms + controller.quorum.election.timeout.ms, from a voter's config."""
    config = ControllerConfig.load(Path(cluster.info.controllers[0].config), environ={})
    fetch = config.get_int("controller.quorum.fetch.timeout.ms")
    election = config.get_int("controller.quorum.election.timeout.ms")
    return (fetch + election) / 1000


def longest_loop_hold_ms(log: Path, since: int) -> float:
    """The longest event-loop hold the node's slow-step log reported after byte ``since`` of its log."""
    with log.open("rb") as f:
        f.seek(since)
        text = f.read().decode("utf-8", "replace")
    return max((float(m) for m in re.findall(r"event loop held ([0-9.]+) ms", text)), default=0.0)


def fuzz_and_check(
    cluster: Cluster, total: int, seed: int, max_seconds: float, records: int, skip: int = 0
) -> FuzzStats:
    info = cluster.info
    nodes = [*info.controllers, *info.brokers]
    log_sizes = {n.log: Path(n.log).stat().st_size for n in nodes}
    acked_before = len(cluster.acked())
    producer = cluster.producer(WORKLOAD, records, rate=max(1, int(records / max_seconds * 2)))
    try:
        source = itertools.islice(inputs(seed, load_corpus()), skip, None)
        stats = trio.run(lambda: run_fuzz(info, source, total, max_seconds=max_seconds))
    finally:
        try:
            producer.wait(120)
        except Exception:
            producer.kill()
            raise
    print()
    print(stats.summary())
    print("inputs by kind:", dict(stats.kinds.most_common()))
    print("no answer by kind:", dict(stats.slow_kinds.most_common()))
    holds = {n.log: longest_loop_hold_ms(Path(n.log), log_sizes[n.log]) for n in nodes}
    print("longest event-loop hold per node (ms):", {Path(k).parent.name: v for k, v in holds.items()})

    dead = [f"{n.log}" for n in nodes if process_state(n.pid) != "running"]
    assert not stats.crashes and not dead, f"nodes died: {stats.crashes} {dead}"

    deadline = quorum_deadline_s(cluster)
    wait_until(
        lambda: leader_of(trio.run(describe_quorum, voters_of(info))) is not None,
        timeout=deadline + 1.0,
        interval=0.1,
        message=f"the controller quorum has a leader within {deadline:.1f} s (fetch + election timeout)",
    )

    async def answered_at_once() -> list[str]:
        slow = []
        for b in info.brokers:
            t = time.monotonic()
            resp = await ask(
                b.host, b.port, ApiKeys.METADATA, {"topics": [{"name": WORKLOAD}]}, ANSWER_TIMEOUT_S
            )
            if resp is None:
                slow.append(f"broker {b.id} did not answer METADATA within {ANSWER_TIMEOUT_S} s")
            elif time.monotonic() - t > ANSWER_TIMEOUT_S:
                slow.append(f"broker {b.id} took {time.monotonic() - t:.1f} s")
        return slow

    assert not trio.run(answered_at_once)

    assert producer.returncode == 0, (
        f"the workload failed:\n{producer.stderr.read() if producer.stderr else ''}"
    )
    cluster.wait_converged(WORKLOAD, PARTITIONS, timeout=120)
    stats.batches_acked = len(cluster.acked()) - acked_before
    assert stats.batches_acked > 0, "the workload had nothing acknowledged"
    cluster.assert_no_acked_batch_lost(WORKLOAD, PARTITIONS)  # fails naming the lost batch
    stats.batches_lost = 0

    grown = {
        n.name: n.rss_peak - n.rss_start
        for n in stats.nodes.values()
        if n.rss_peak - n.rss_start > RSS_GROWTH_MAX
    }
    assert not grown, f"RSS grew by more than {RSS_GROWTH_MAX >> 20} MiB: {grown}"
    held = {k: v for k, v in holds.items() if v > LOOP_HOLD_MAX_MS}
    assert not held, f"an event loop was held longer than {LOOP_HOLD_MAX_MS} ms: {held}"
    print(stats.summary())
    return stats


def test_short_fuzz_run(fuzz_cluster: Cluster) -> None:
    stats = fuzz_and_check(fuzz_cluster, SHORT_INPUTS, FUZZ_SEED, max_seconds=40, records=400)
    assert stats.inputs >= SHORT_INPUTS // 2, "the fuzzer sent too few inputs to mean anything"
    assert stats.answered > 0 and stats.closed > 0


@pytest.mark.fuzz
@pytest.mark.timeout(1200)
def test_long_fuzz_run(fuzz_cluster: Cluster) -> None:
    stats = fuzz_and_check(
        fuzz_cluster, LONG_INPUTS, FUZZ_SEED + 1, max_seconds=LONG_SECONDS, records=20_000, skip=FUZZ_SKIP
    )
    if stats.inputs < LONG_INPUTS:
        print(
            f"stopped at ISRSIM_FUZZ_SECONDS={LONG_SECONDS:.0f}: {LONG_INPUTS - stats.inputs} inputs left; "
            f"ISRSIM_FUZZ_SKIP={FUZZ_SKIP + stats.inputs} ISRSIM_FUZZ_INPUTS={LONG_INPUTS - stats.inputs} "
            "make fuzz goes on from there"
        )
    assert stats.inputs >= min(LONG_INPUTS, 50_000), "the fuzzer sent too few inputs to mean anything"


def test_an_over_large_forwarded_create_topics_leaves_the_quorum_led(fuzz_cluster: Cluster) -> None:
    info = fuzz_cluster.info
    b = info.brokers[0]
    start = {c.id: rss_bytes(c.pid) for c in info.controllers}

    async def send() -> None:
        async with KafkaWire(b.host, b.port) as wire:
            topic = {"name": "fz-huge", "num_partitions": 2**31 - 1, "replication_factor": 3}
            body = {"topics": [{**topic, "assignments": [], "configs": {}}], "timeout_ms": 30000}
            await wire.send_request(ApiKeys.CREATE_TOPICS, 7, {**body, "validate_only": False})
            with trio.move_on_after(5):
                await wire.receive_frame(timeout=6)

    # Refused with POLICY_VIOLATION by the controller's bounds (docs/controller.md): nothing is allocated.
    trio.run(send)
    views = trio.run(describe_quorum, voters_of(info))
    grown = {c.id: rss_bytes(c.pid) - start[c.id] for c in info.controllers}
    assert leader_of(views) is not None, f"the quorum lost its leader (controllers' RSS growth: {grown})"
    assert all(g < RSS_GROWTH_MAX for g in grown.values()), f"controllers' RSS grew: {grown}"
