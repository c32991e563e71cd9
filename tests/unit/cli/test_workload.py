"""The producer's retry back-off and error reporting, the workload's summary, and ``run_client``."""

from __future__ import annotations

import logging
import random

import pytest
import trio

from cli.client_run import run_client
from cli.workload_cmd import produce_summary
from kit.cluster_client import ClientError
from kit.producer import ProduceStats, RateLimitedLog, retry_backoff_s


def test_backoff_doubles_up_to_the_maximum_with_jitter() -> None:
    rng = random.Random(7)
    for attempt, expected in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (12, 1.0)]:
        values = [retry_backoff_s(attempt, 100, 1000, rng) for _ in range(200)]
        assert all(expected * 0.8 - 1e-9 <= v <= expected * 1.2 + 1e-9 for v in values), (attempt, values)
        assert max(values) - min(values) > expected * 0.2  # jittered, not a fixed step


def test_retriable_errors_are_logged_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.ratelimit")
    limited = RateLimitedLog(log, interval_s=60)
    with caplog.at_level(logging.WARNING, logger="test.ratelimit"):
        assert limited.warning("NOT_ENOUGH_REPLICAS", "t-0: NOT_ENOUGH_REPLICAS")
        assert not any(limited.warning("NOT_ENOUGH_REPLICAS", "again") for _ in range(50))
        assert limited.warning("REQUEST_TIMED_OUT", "t-1: REQUEST_TIMED_OUT")  # another error is its own
    assert [r.getMessage() for r in caplog.records] == ["t-0: NOT_ENOUGH_REPLICAS", "t-1: REQUEST_TIMED_OUT"]
    limited.interval_s = 0
    with caplog.at_level(logging.WARNING, logger="test.ratelimit"):
        limited.warning("NOT_ENOUGH_REPLICAS", "t-0: NOT_ENOUGH_REPLICAS")
    assert caplog.records[-1].getMessage().endswith("(50 more since the last report)")


def test_summary_is_text_and_names_the_errors() -> None:
    stats = ProduceStats(records_acked=400, bytes_acked=40_000, retries=3, started=0.0, finished=2.0)
    stats.errors.update({"NOT_ENOUGH_REPLICAS": 3, "REQUEST_TIMED_OUT": 1})
    stats.latencies_ms += [1.0, 2.0, 30.0]
    lines = produce_summary(stats, 1000)
    assert lines[0].startswith("400 of 1,000 records acknowledged in 2.00s: 200 records/s")
    assert lines[-1] == "retries: 3; errors seen: NOT_ENOUGH_REPLICAS x3, REQUEST_TIMED_OUT x1"
    assert not any("{" in line or "Counter" in line for line in lines)
    assert produce_summary(stats, 1000, interrupted=True)[0].startswith("interrupted: 400 of 1,000")


def _fails_in_a_nursery(exc: BaseException) -> object:
    async def main() -> None:
        async def boom() -> None:
            raise exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(boom)
            nursery.start_soon(trio.sleep_forever)

    return main


def test_run_client_raises_a_client_error_alone() -> None:
    with pytest.raises(ClientError, match="topic 'x' does not exist"):
        run_client(_fails_in_a_nursery(ClientError("topic 'x' does not exist")))  # type: ignore[arg-type]


def test_run_client_turns_a_ctrl_c_in_a_nursery_into_keyboard_interrupt() -> None:
    with pytest.raises(KeyboardInterrupt):
        run_client(_fails_in_a_nursery(KeyboardInterrupt()))  # type: ignore[arg-type]


def test_run_client_leaves_a_bug_as_it_is() -> None:
    with pytest.raises(ZeroDivisionError):
        run_client(_fails_in_a_nursery(ZeroDivisionError()))  # type: ignore[arg-type]


def test_a_stall_is_said_with_what_waits_and_the_last_error() -> None:
    from collections import Counter

    from cli.workload_cmd import stall_line

    stats = ProduceStats(
        records_sent=5000, records_acked=3000, errors=Counter(), last_error="REQUEST_TIMED_OUT"
    )
    line = stall_line(stats, 10_000, 12.4)
    assert line == (
        "produce: 3,000 of 10,000 records acknowledged; none for 12s, 2,000 waiting "
        "(last error REQUEST_TIMED_OUT)"
    )
    assert stall_line(ProduceStats(), 10, 6.0) == (
        "produce: 0 of 10 records acknowledged; none for 6s, still finding the partitions' leaders"
    )
