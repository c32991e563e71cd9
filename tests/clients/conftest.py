"""Real Kafka clients (kcat, confluent-kafka, kafka-python) against real isrsim processes (docs/clients.md).

The fixtures are the integration tests' (brokers as real processes, always killed at the end)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.conftest import (  # noqa: F401  (fixtures and the failure-report hook)
    broker_launcher,
    module_launcher,
    pytest_runtest_makereport,
    single_broker,
)


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three brokers and a controller (`isrsim cluster up`), shared by a module's tests."""
    yield from cluster_up(tmp_path_factory.mktemp("cluster") / "root", 3, FAST)


def bootstrap(cluster: Cluster, *, brokers: tuple[int, ...] | None = None) -> str:
    """The brokers' addresses as a client's ``bootstrap.servers``."""
    info = cluster.info
    return ",".join(f"{b.host}:{b.port}" for b in info.brokers if brokers is None or b.id in brokers)


def kcat(*args: str, timeout: float = 60.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs kcat (Debian's package; `make test` installs it when missing)."""
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: `make kcat` (apt-get install kcat)")
    return subprocess.run(
        [path, *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


__all__ = ["Path", "bootstrap", "kcat"]
