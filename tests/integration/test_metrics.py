"""Prometheus metrics of a running cluster (`isrsim cluster up`), scraped over HTTP as Prometheus would:
under-replicated partitions go from 0 to at least a killed broker's partitions and back to 0 after its
restart; request metrics exist for FETCH; the controller counts elections and offline partitions."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kit.cluster_files import ProcessEntry
from kit.processes import process_state
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import wait_until

pytestmark = pytest.mark.integration

URP = "kafka_server_replicamanager_underreplicatedpartitions"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root")


def scrape(entry: ProcessEntry) -> Samples | None:
    """Every sample on the node's /metrics; None when it does not answer (a dead broker)."""
    assert entry.metrics_url is not None, f"node {entry.id} has no metrics port in cluster.json"
    try:
        with urllib.request.urlopen(entry.metrics_url, timeout=5) as resp:
            text = resp.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def live_brokers(c: Cluster) -> list[ProcessEntry]:
    return [b for b in c.info.brokers if process_state(b.pid) == "running"]


def under_replicated(c: Cluster) -> float | None:
    """The sum over the live brokers (each counts the partitions it leads); None if one did not answer."""
    total = 0.0
    for b in live_brokers(c):
        samples = scrape(b)
        if samples is None:
            return None
        total += value(samples, URP)
    return total


def test_under_replicated_partitions_through_a_crash_and_a_restart(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "t", "--partitions", "6", "--replication-factor", "3")
    cluster.cli("produce", "t", "--count", "2000", "--acks", "all", "--no-progress")
    wait_until(lambda: cluster.isr_full("t"), timeout=30, message="every ISR full")
    wait_until(lambda: under_replicated(cluster) == 0, timeout=30, message="0 under-replicated partitions")
    for b in cluster.info.brokers:
        samples = scrape(b)
        assert samples is not None
        assert value(samples, "kafka_server_replicamanager_partitioncount") == 6
        assert value(samples, "kafka_log_log_logendoffset", topic="t", partition="0") > 0

    # Request metrics exist for FETCH: followers fetch from every leader.
    fetches = [scrape(b) for b in cluster.info.brokers]
    assert all(s is not None for s in fetches)
    rate = "kafka_network_requestmetrics_requestspersec_total"
    assert sum(value(s, rate, request="Fetch") for s in fetches if s) > 0
    assert sum(value(s, rate, request="FetchFollower") for s in fetches if s) > 0
    assert (
        sum(value(s, "kafka_network_requestmetrics_totaltimems_count", request="Fetch") for s in fetches if s)
        > 0
    )
    assert all(
        ("kafka_network_requestmetrics_totaltimems", frozenset({("request", "Fetch"), ("quantile", "0.99")}))
        in s
        for s in fetches
        if s
    )
    controller = scrape(cluster.info.controller)
    assert controller is not None
    assert value(controller, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(controller, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    elections_before = value(controller, "kafka_controller_controllerstats_leaderelectionrateandtimems_total")

    victim = cluster.info.broker(3)
    hosted = sum(1 for p in cluster.metadata("t").values() if 3 in p["replica_nodes"])
    assert hosted == 6
    cluster.cli("broker", "kill", "3", "--signal", "KILL")
    wait_until(
        lambda: (u := under_replicated(cluster)) is not None and u >= hosted,
        timeout=40,
        message=lambda: f"at least {hosted} under-replicated partitions (now {under_replicated(cluster)})",
    )
    assert scrape(victim) is None
    controller = scrape(cluster.info.controller)
    assert controller is not None
    assert value(controller, "kafka_controller_kafkacontroller_fencedbrokercount") == 1
    assert (
        value(controller, "kafka_controller_controllerstats_leaderelectionrateandtimems_total")
        > elections_before
    )

    cluster.cli("broker", "restart", "3")
    wait_until(
        lambda: len(live_brokers(cluster)) == 3 and under_replicated(cluster) == 0,
        timeout=60,
        message=lambda: f"0 under-replicated partitions after the restart (now {under_replicated(cluster)})",
    )
    expands = sum(
        value(s, "kafka_server_replicamanager_isrexpandspersec_total")
        for s in (scrape(b) for b in live_brokers(cluster))
        if s is not None
    )
    assert expands >= hosted  # the restarted broker rejoined every ISR through its leaders
