"""A `cluster up --secure` cluster (SASL_SSL everywhere, the authorizer on) used by real Kafka clients with
nothing but `<root>/client.properties` (docs/security.md, docs/clients.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.conftest import bootstrap, kcat
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path_factory.mktemp("secure") / "root", 3, FAST, secure=True)


def client_properties(cluster: Cluster) -> dict[str, str]:
    """librdkafka's keys, as `cluster up --secure` writes them."""
    out: dict[str, str] = {}
    for line in (cluster.root / "client.properties").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def test_kcat_with_client_properties(secure_cluster: Cluster) -> None:
    props = secure_cluster.root / "client.properties"
    for broker in secure_cluster.info.brokers:
        out = kcat("-F", str(props), "-b", f"{broker.host}:{broker.port}", "-L")
        assert out.returncode == 0, out.stderr
        assert " 3 brokers:" in out.stdout


def test_confluent_kafka_admin_with_client_properties(secure_cluster: Cluster) -> None:
    client = AdminClient(
        {"bootstrap.servers": bootstrap(secure_cluster), **client_properties(secure_cluster)}
    )
    futures = client.create_topics(
        [NewTopic("secured", num_partitions=2, replication_factor=3)], request_timeout=30
    )
    assert futures["secured"].result(timeout=60) is None
    wait_until(
        lambda: len(getattr(client.list_topics(timeout=10).topics.get("secured"), "partitions", {})) == 2, 30
    )


def test_wrong_password_is_refused(secure_cluster: Cluster, tmp_path: Path) -> None:
    text = (secure_cluster.root / "client.properties").read_text()
    bad = tmp_path / "bad.properties"
    bad.write_text(re.sub(r"sasl\.password=.*", "sasl.password=wrong", text))
    broker = secure_cluster.info.brokers[0]
    out = kcat("-F", str(bad), "-b", f"{broker.host}:{broker.port}", "-L", "-m", "3", timeout=30)
    assert out.returncode != 0
    assert "Authentication failed" in out.stderr
