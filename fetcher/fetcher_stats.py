"""``FetcherStats``: Kafka's ``FetcherStats`` of one fetcher (its ``clientId`` is
``ReplicaFetcherThread-<fetcher id>-<leader id>``): FETCH requests sent and record bytes fetched, as plain
counters. The fetcher manager keeps them past the fetcher's life (a fetcher restarted for the same leader
counts on), and the broker's metrics read them when scraped."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class FetcherStats:
    requests: int = 0
    bytes: int = 0
