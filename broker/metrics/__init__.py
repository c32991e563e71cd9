"""Prometheus metrics with Kafka's names (docs/metrics.md): one ``CollectorRegistry`` per process, served on
``metrics.port`` by a trio task (``MetricsHttpServer``).

* ``request_metrics``: Kafka's ``RequestMetrics`` per API (rate, queue, local, remote and total time);
* ``replica_metrics``: the replica manager's gauges and ISR counters, updated by the replica state listener
  (where the journal is written);
* ``broker_metrics``: the broker's registry, and what is read at scrape time (logs, fetchers, fetch
  sessions, purgatories);
* the controller's registry is ``broker.controller.controller_metrics`` (it reads the controller's state);
* ``http_server``: the ``/metrics`` endpoint.
"""

from prometheus_client import disable_created_metrics

# Counters without their ``_created`` twin series, as the JMX exporter publishes Kafka's meters.
disable_created_metrics()  # type: ignore[no-untyped-call]
