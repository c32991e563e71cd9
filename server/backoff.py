"""Waits between retries (Kafka's ``ExponentialBackoff``, without the jitter): the first wait is the
retry back-off (``retry.backoff.ms``), each failure in a row doubles the next one up to ``MAX_BACKOFF_S``,
and a success starts again from the first.

Used by every loop that retries a peer: a broker's link to the controller (``lifecycle``), its ISR changes
(``alter_partition``) and topic config requests (``topic_configs``), and the controller's channels to the
brokers (``controller/channel_manager``).
"""

from __future__ import annotations

# The longest wait between two attempts to reach the controller or a broker.
MAX_BACKOFF_S = 2.0


class ExponentialBackoff:
    def __init__(self, initial_s: float, max_s: float = MAX_BACKOFF_S) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self._next_s = initial_s

    def next_s(self) -> float:
        """How long to wait before the next attempt (after a failure); the one after waits twice as long,
        up to ``max_s``."""
        wait = self._next_s
        self._next_s = min(wait * 2, self.max_s)
        return wait

    def reset(self) -> None:
        """After a success: the next failure waits the first back-off again."""
        self._next_s = self.initial_s
