"""The fuzzer's tests use the integration tests' fixtures (real processes, always killed at the end)."""

from tests.integration.conftest import (  # noqa: F401  (fixtures and the failure-report hook)
    broker_launcher,
    pytest_runtest_makereport,
    single_broker,
)
