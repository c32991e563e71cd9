"""The replica manager's gauges and ISR counters follow what the replica state listener is told."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.delayed_ops import FetchParams, FetchPartitionStatus
from broker.replica_manager import FetchPartitionResult
from protocol.common import TopicPartition
from tests.unit.broker.broker_support import LAG_MS, LOCAL, TP, batch

from .support import MeteredBroker

FOLLOWER = 1
RM = "kafka_server_replicamanager_"


@pytest.fixture
def broker(tmp_path: Path) -> MeteredBroker:
    return MeteredBroker(tmp_path, min_isr=2)


def counts(b: MeteredBroker) -> dict[str, float]:
    names = (
        "partitioncount",
        "leadercount",
        "underreplicatedpartitions",
        "underminisrpartitioncount",
        "atminisrpartitioncount",
        "isrshrinkspersec_total",
        "isrexpandspersec_total",
    )
    return {n: b.value(RM + n) for n in names}


def fetch(b: MeteredBroker, replica_id: int, offset: int, tp: TopicPartition = TP) -> FetchPartitionResult:
    results: list[dict[TopicPartition, FetchPartitionResult]] = []
    params = FetchParams(replica_id, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
    params.partitions[tp] = FetchPartitionStatus(offset, -1, 1 << 20)
    b.rm.fetch_messages(params, results.append)
    return results[0][tp]


def test_nothing_hosted_is_all_zero(broker: MeteredBroker) -> None:
    assert set(counts(broker).values()) == {0.0}


def test_leader_below_its_replica_set_is_under_replicated_until_the_follower_joins(
    broker: MeteredBroker,
) -> None:
    broker.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL, FOLLOWER])
    assert counts(broker) == {
        "partitioncount": 1,
        "leadercount": 1,
        "underreplicatedpartitions": 1,
        "underminisrpartitioncount": 1,
        "atminisrpartitioncount": 0,
        "isrshrinkspersec_total": 0,
        "isrexpandspersec_total": 0,
    }
    broker.rm.append_records(30_000, 1, {TP: batch(3)}, lambda _: None)
    fetch(broker, FOLLOWER, 3)  # caught up: joins the ISR
    assert broker.rm.partitions[TP].isr == [LOCAL, FOLLOWER]
    c = counts(broker)
    assert c["underreplicatedpartitions"] == 0 and c["underminisrpartitioncount"] == 0
    assert c["atminisrpartitioncount"] == 1 and c["isrexpandspersec_total"] == 1


def test_isr_expiration_counts_a_shrink_and_makes_the_partition_under_replicated(
    broker: MeteredBroker,
) -> None:
    broker.leader_and_isr(LOCAL, 1, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER])
    broker.rm.append_records(30_000, 1, {TP: batch(2)}, lambda _: None)
    assert broker.value(RM + "underreplicatedpartitions") == 0
    broker.clock.sleep(LAG_MS + 1)
    broker.rm.maybe_shrink_isr()
    c = counts(broker)
    assert c["isrshrinkspersec_total"] == 1 and c["underreplicatedpartitions"] == 1
    assert c["underminisrpartitioncount"] == 1


def test_an_isr_the_controller_shrinks_is_under_replicated_but_no_shrink_of_the_leader(
    broker: MeteredBroker,
) -> None:
    broker.leader_and_isr(LOCAL, 1, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER])
    broker.leader_and_isr(LOCAL, 2, [LOCAL], [LOCAL, FOLLOWER])  # the follower's broker failed
    c = counts(broker)
    assert c["underreplicatedpartitions"] == 1 and c["isrshrinkspersec_total"] == 0


def test_followers_count_as_partitions_only(broker: MeteredBroker) -> None:
    broker.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL, FOLLOWER])
    broker.leader_and_isr(FOLLOWER, 2, [FOLLOWER], [LOCAL, FOLLOWER])  # leadership moved away
    c = counts(broker)
    assert c["partitioncount"] == 1 and c["leadercount"] == 0
    assert c["underreplicatedpartitions"] == 0 and c["underminisrpartitioncount"] == 0


def test_stopped_partitions_are_no_longer_counted(broker: MeteredBroker) -> None:
    other: TopicPartition = ("t", 1)
    broker.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL, FOLLOWER])
    broker.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL, FOLLOWER], tp=other)
    assert counts(broker)["underreplicatedpartitions"] == 2
    broker.rm.stop_replicas(1, 1, [(TP, -1, True)])
    c = counts(broker)
    assert c["partitioncount"] == 1 and c["leadercount"] == 1 and c["underreplicatedpartitions"] == 1


def test_a_topic_min_isr_change_moves_the_min_isr_gauges(broker: MeteredBroker) -> None:
    broker.leader_and_isr(LOCAL, 1, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER])
    assert broker.value(RM + "atminisrpartitioncount") == 1
    broker.rm.apply_topic_configs("t", {"min.insync.replicas": "3"})
    c = counts(broker)
    assert c["underminisrpartitioncount"] == 1 and c["atminisrpartitioncount"] == 0
    broker.rm.apply_topic_configs("t", {"min.insync.replicas": "1"})
    c = counts(broker)
    assert c["underminisrpartitioncount"] == 0 and c["atminisrpartitioncount"] == 0
