"""Settings every test shares: no hypothesis deadline per example, and a test that pytest-timeout stopped
(pyproject.toml's ``timeout``, or ``@pytest.mark.timeout``) leaves nothing behind that fails the next one."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import settings

# No per-example deadline for property tests: on a shared 2-core machine one example can take 300 ms where it
# usually takes 1, and hypothesis reports that as a failure. A hang still fails the test: every test has a
# pytest-timeout deadline.
settings.register_profile("isrsim", deadline=None)
settings.load_profile("isrsim")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and "from pytest-timeout" in str(call.excinfo.value):
        # The timeout interrupted a trio.run from outside: trio still believes it is running (its run
        # context is only cleared when the run ends), and every later test of this process would fail with
        # "Attempted to call run() from inside a run()". That run is over: forget it (what it left open is
        # closed, with a warning, when the garbage collector finds it).
        from trio._core._run import GLOBAL_RUN_CONTEXT

        GLOBAL_RUN_CONTEXT.__dict__.clear()
