"""Fixtures for integration tests: brokers as real processes, always killed at the end.

- ``broker_launcher``: a :class:`~tests.integration.harness.BrokerLauncher` for one test.
- ``module_launcher``: one shared by a module's tests (for a broker many tests talk to).
- ``single_broker``: a broker (id 1) leading ``t-0`` and ``t-1`` alone, for one test.

When a test fails, the tail of every broker's stderr it used is added to the failure report.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.harness import BrokerLauncher, BrokerProcess


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    brokers: dict[int, BrokerProcess] = {}
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, BrokerLauncher):
            brokers.update((id(b), b) for b in value.brokers)
        elif isinstance(value, BrokerProcess):
            brokers[id(value)] = value
        elif isinstance(value, list | tuple):
            brokers.update((id(b), b) for b in value if isinstance(b, BrokerProcess))
    for b in brokers.values():
        report.sections.append((f"broker {b.broker_id} stderr tail ({b.stderr_path})", b.stderr_tail(30)))


def _launcher(root: Path) -> Iterator[BrokerLauncher]:
    launcher = BrokerLauncher(root)
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture
def broker_launcher(tmp_path: Path) -> Iterator[BrokerLauncher]:
    yield from _launcher(tmp_path)


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerLauncher]:
    yield from _launcher(tmp_path_factory.mktemp("brokers"))


@pytest.fixture
def single_broker(broker_launcher: BrokerLauncher) -> BrokerProcess:
    return broker_launcher.start(1, {"initial.leader.partitions": "t-0,t-1"})
