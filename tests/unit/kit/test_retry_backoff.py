"""KIP-580's client back-off in the kit's producer: doubling from retry.backoff.ms up to the max."""

from __future__ import annotations

import random

from kit.producer import retry_backoff_s


def _without_jitter(attempt: int, base_ms: int, max_ms: int) -> float:
    # The jitter is uniform in [0.8, 1.2]: a generator pinned to the middle gives the bare term.
    class Middle(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return (a + b) / 2

    return retry_backoff_s(attempt, base_ms, max_ms, Middle())


def test_backoff_doubles_then_stays_at_the_cap() -> None:
    assert [_without_jitter(n, 100, 1000) for n in (1, 2, 3, 4, 5, 6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_a_batch_retried_thousands_of_times_still_gets_the_cap() -> None:
    # 2.0 ** 1100 overflows a float: the exponent must stop growing at the cap.
    assert _without_jitter(1100, 100, 1000) == 1.0
    assert _without_jitter(10**6, 100, 1000) == 1.0
    assert 0.8 <= retry_backoff_s(5000, 100, 1000) <= 1.2


def test_a_cap_below_the_base_is_the_cap() -> None:
    assert _without_jitter(1, 500, 200) == 0.2
    assert _without_jitter(3000, 500, 200) == 0.2
