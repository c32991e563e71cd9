"""Prometheus metrics with Kafka's names (docs/metrics.md): one ``CollectorRegistry`` per process, served on
``metrics.port`` by a trio task (``MetricsHttpServer``).

* ``request_metrics``: Kafka's ``RequestMetrics`` per API (rate, queue, local, remote and total time);
* ``network_metrics``: the socket server's gauges;
* ``http_server``: the ``/metrics`` endpoint.
The broker's registry is ``broker.metrics.broker_metrics``, the controller's
``controller.controller_metrics``.
"""

from prometheus_client import disable_created_metrics

# Counters without their ``_created`` twin series, as the JMX exporter publishes Kafka's meters.
disable_created_metrics()  # type: ignore[no-untyped-call]
