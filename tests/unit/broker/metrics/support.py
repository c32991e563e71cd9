"""A socket-less broker core (``tests.unit.broker.broker_support.Broker``) with its metrics as the server
wires them, read back by their published names."""

from __future__ import annotations

from pathlib import Path

from broker.kafka_apis import BROKER_APIS
from broker.metrics.broker_metrics import BrokerMetrics
from tests.unit.broker.broker_support import Broker


class MeteredBroker(Broker):
    def __init__(self, tmp_path: Path, *, min_isr: int = 1) -> None:
        super().__init__(tmp_path, min_isr=min_isr)
        self.metrics = BrokerMetrics(
            BROKER_APIS,
            self.log_manager,
            self.session_cache,
            (self.produce_purgatory, self.fetch_purgatory),
            process=False,
        )
        self.rm.state_listener.metrics = self.metrics.replica_manager

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name`` with ``labels`` as ``/metrics`` would show it; fails if there is none."""
        value = self.metrics.registry.get_sample_value(name, labels)
        assert value is not None, f"no sample {name}{labels}"
        return value
