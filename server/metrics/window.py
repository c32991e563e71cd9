"""``LatencyWindow``: one of Kafka's request-time histograms (a Yammer ``Histogram``), kept cheap enough to
update on every request: a count and a sum since start, and a ring of the latest samples for quantiles.

Kafka's histograms sample with an exponentially decaying reservoir of 1028 values biased to the last five
minutes; a ring of the last 1028 values is close enough for an operator's dashboard, and an observation is
three assignments. Quantiles are computed only when ``/metrics`` is scraped.
"""

from __future__ import annotations

# The quantiles Kafka's JMX histograms publish (50thPercentile ... 999thPercentile).
QUANTILES: tuple[float, ...] = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)
RESERVOIR_SIZE = 1028


class LatencyWindow:
    __slots__ = ("_next", "_samples", "count", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self._samples: list[float] = [0.0] * RESERVOIR_SIZE
        self._next = 0

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        i = self._next
        self._samples[i] = value
        self._next = 0 if i == RESERVOIR_SIZE - 1 else i + 1

    def quantiles(self) -> list[tuple[float, float]]:
        """(quantile, value) for each of ``QUANTILES`` over the window (0.0 with no samples, as Kafka)."""
        n = min(self.count, RESERVOIR_SIZE)
        if n == 0:
            return [(q, 0.0) for q in QUANTILES]
        ordered = sorted(self._samples[:n] if n < RESERVOIR_SIZE else self._samples)
        return [(q, ordered[min(n - 1, int(q * n))]) for q in QUANTILES]
