"""Real Kafka clients (kcat, confluent-kafka, kafka-python) against real isrsim processes (SPEC §10).

The fixtures are the integration tests' (brokers as real processes, always killed at the end)."""

from __future__ import annotations

from tests.integration.conftest import (  # noqa: F401  (fixtures and the failure-report hook)
    broker_launcher,
    module_launcher,
    pytest_runtest_makereport,
    single_broker,
)
