"""The broker's Prometheus metrics with Kafka's names (docs/metrics.md), on the registry and endpoint of
``server.metrics``:

* ``replica_metrics``: the replica manager's gauges and ISR counters, updated by the replica state listener
  (where the journal is written);
* ``broker_metrics``: the broker's registry, and what is read at scrape time (logs, fetchers, fetch
  sessions, purgatories).
"""

import server.metrics  # noqa: F401  (counters without their ``_created`` twin series)
