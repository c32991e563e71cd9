"""The retry back-off every peer loop uses: doubling from the first wait up to the cap, and back to the
first after a success."""

from __future__ import annotations

from server.backoff import MAX_BACKOFF_S, ExponentialBackoff


def test_doubles_up_to_the_cap_and_starts_again_after_a_success() -> None:
    backoff = ExponentialBackoff(0.1)
    waits = [backoff.next_s() for _ in range(7)]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, MAX_BACKOFF_S, MAX_BACKOFF_S]
    backoff.reset()
    assert backoff.next_s() == 0.1


def test_a_first_wait_above_the_cap_is_kept_once() -> None:
    backoff = ExponentialBackoff(5.0, max_s=2.0)
    assert [backoff.next_s() for _ in range(3)] == [5.0, 2.0, 2.0]
