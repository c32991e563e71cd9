"""The clients' own test suites against isrsim (`make client-suites`)."""

from tests.integration.conftest import pytest_runtest_makereport  # noqa: F401  (the failure-report hook)
