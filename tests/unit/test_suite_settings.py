"""The suite's own guards: every test has a deadline (pytest-timeout), so a hang fails one test instead of
stalling the run, and the trio tests after it still run."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def test_every_test_has_a_timeout(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed (make venv)"
    assert float(pytestconfig.getini("timeout")) > 0


def test_a_hung_trio_test_fails_alone(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        """
        import pytest
        import trio

        @pytest.mark.timeout(1)
        async def test_hangs():
            await trio.sleep_forever()

        async def test_after_it():
            await trio.sleep(0)

        @pytest.mark.timeout(1)
        def test_hangs_in_trio_run():
            trio.run(trio.sleep_forever)

        def test_after_that():
            trio.run(trio.sleep, 0)
        """
    )
    report = pytester.path / "report.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--junitxml={report}", timeout=60)
    result.assert_outcomes(passed=2, failed=2, warnings=result.parseoutcomes().get("warnings", 0))
    result.stdout.fnmatch_lines(["*.py F.F.*"])  # each hang fails by its timeout; the test after it passes
    # Each failure is the test's own timeout, not a broken run that a later test inherited.
    failures = {
        case.get("name"): failure.get("message", "")
        for case in ElementTree.parse(report).iter("testcase")
        for failure in case.iter("failure")
    }
    assert set(failures) == {"test_hangs", "test_hangs_in_trio_run"}
    assert all("Timeout (>1.0s) from pytest-timeout" in message for message in failures.values()), failures
