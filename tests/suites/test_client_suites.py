"""The clients' own test suites against a `cluster up` cluster (RF 3), each judged by an allowlist of the
tests that must pass (scripts/client_suites/*.allowlist): librdkafka's test-runner in full mode and with
-P (every producer idempotent), kafka-python's integration tests, and librdkafka's allowlist again while
`isrsim chaos --workload none` breaks the cluster, followed by the report: nothing acknowledged lost (VALID).
The suites' code is fetched from the registries and built once outside the clone (docs/clients.md)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.conftest import bootstrap
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import REPO_ROOT, python_cmd

pytestmark = [pytest.mark.integration, pytest.mark.clients]

SCRIPTS = REPO_ROOT / "scripts" / "client_suites"
CARDS = Path(REPO_ROOT / "isrsim-suite-cards")  # the report cards, kept after the run (git-ignored)


# As the suites' own clusters are set: topics they create by producing get 4 partitions, RF 3.
SUITE_SETTINGS = (*FAST, "num.partitions=4", "default.replication.factor=3")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", 3, SUITE_SETTINGS)


def run_suite(script: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=timeout
    )
    print(proc.stdout[-20000:], proc.stderr[-3000:])
    return proc


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("mode", ["full", "idempotent"])
def test_librdkafka_suite_allowlist_passes(cluster: Cluster, mode: str) -> None:
    extra = ["--idempotent"] if mode == "idempotent" else []
    proc = run_suite(
        "librdkafka_suite.py",
        "--bootstrap",
        bootstrap(cluster),
        "--allowlist",
        str(SCRIPTS / "librdkafka.allowlist"),
        "--timeout",
        "180",
        "--card",
        str(CARDS / f"librdkafka-{mode}.txt"),
        *extra,
        timeout=3000,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "allowlist:" in proc.stdout and "not passing" not in proc.stdout


@pytest.mark.timeout(1800)
def test_kafka_python_integration_allowlist_passes(cluster: Cluster) -> None:
    proc = run_suite(
        "kafka_python_suite.py",
        "--bootstrap",
        bootstrap(cluster),
        "--allowlist",
        str(SCRIPTS / "kafka_python.allowlist"),
        "--card",
        str(CARDS / "kafka-python.txt"),
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.timeout(3600)
def test_librdkafka_allowlist_under_chaos_loses_nothing_acknowledged(cluster: Cluster) -> None:
    """The chaos run has no workload of its own: the suite's clients are the workload, the report judges
    what the leaders acknowledged to them. Which suite tests pass under faults is printed, not asserted
    (nobody runs client suites under faults); the verdict is."""
    chaos = subprocess.Popen(
        python_cmd(
            "chaos",
            "--workload",
            "none",
            "--duration",
            "90",
            "--interval",
            "6",
            "--faults",
            "kill,term,pause",
            "--data-dir",
            str(cluster.root),
        ),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        run_suite(
            "librdkafka_suite.py",
            "--bootstrap",
            bootstrap(cluster),
            "--allowlist",
            str(SCRIPTS / "librdkafka.allowlist"),
            "--timeout",
            "120",
            "--card",
            str(CARDS / "librdkafka-chaos.txt"),
            timeout=2400,
        )
        out, _ = chaos.communicate(timeout=1200)
    finally:
        if chaos.poll() is None:
            chaos.kill()
    print(out[-4000:])
    assert chaos.returncode == 0 and "isrsim report: VALID" in out, out[-4000:]
