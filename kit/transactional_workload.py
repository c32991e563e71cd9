"""An exactly-once workload through Kafka's own C client (librdkafka, confluent-kafka: the ``clients``
extra): ``isrsim chaos --workload transactions`` (docs/transactions.md, docs/faults.md).

Two transactional applications run side by side, each in a thread of its own:

- the **source** writes numbered records to ``topic`` in transactions of ``transaction_records`` (every
  ``abort_every``-th aborted), at ``rate`` records/s;
- the **processor** is a consume-transform-produce loop (Kafka Streams' exactly-once shape): it reads
  ``topic`` at read_committed in group ``group``, writes each record, transformed, to ``out_topic``, and
  commits the offsets it consumed in the same transaction (TxnOffsetCommit through
  ``send_offsets_to_transaction``).

Errors are handled as a Kafka application must: an abortable error aborts the transaction (the processor
then rewinds to its committed offsets, so nothing is lost or doubled); a retriable one is retried; a fatal
one (the producer fenced, by a coordinator's timeout abort) replaces the producer, whose
``init_transactions`` fences the old epoch. ``stats`` counts records of committed transactions as
acknowledged, of aborted ones as failed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kit.producer import AckJournal, ProduceStats, now_ms

log = logging.getLogger(__name__)

POLL_S = 0.2
TIMEOUT_S = 15.0  # of each transactional call (librdkafka answers a retriable timeout after it)


class _Txn:
    """One transactional producer with the error handling of a Kafka application."""

    def __init__(self, config: Mapping[str, Any], stats: ProduceStats, stop: threading.Event) -> None:
        self.config = dict(config)
        self.stats = stats
        self.stop = stop
        self.producer: Any = None
        self.replaced = 0

    def ensure(self) -> bool:
        """A producer whose transactions are initialized; False if ``stop`` came first."""
        from confluent_kafka import KafkaException, Producer

        while self.producer is None and not self.stop.is_set():
            producer = Producer(self.config)
            try:
                producer.init_transactions(TIMEOUT_S)
                self.producer = producer
            except KafkaException as exc:
                self._count(exc)
                time.sleep(POLL_S)
        return self.producer is not None

    def _count(self, exc: Any) -> Any:
        error = exc.args[0]
        name = str(error.name()) if hasattr(error, "name") else str(error)
        self.stats.errors[name] += 1
        self.stats.last_error = str(error)
        return error

    def fail(self, exc: Any) -> str:
        """After ``exc``: ``abort`` (the transaction was aborted), ``retry`` or ``replaced``."""
        from confluent_kafka import KafkaException

        error = self._count(exc)
        if error.txn_requires_abort():
            try:
                self.producer.abort_transaction(TIMEOUT_S)
                return "abort"
            except KafkaException as again:
                error = self._count(again)
                if error.retriable():
                    return self.fail(again)
        elif error.retriable():
            return "retry"
        # Fatal (fenced, a broken guarantee): a new producer, whose InitProducerId fences this one.
        self.producer = None
        self.replaced += 1
        return "replaced"

    def commit(self) -> str:
        """``committed``, ``abort``, ``replaced``, or ``unknown`` (the run stopped while the commit was
        still being retried): the end of the current transaction."""
        from confluent_kafka import KafkaException

        while True:
            try:
                self.producer.commit_transaction(TIMEOUT_S)
                return "committed"
            except KafkaException as exc:
                outcome = self.fail(exc)
                if outcome != "retry":
                    return outcome
                if self.stop.is_set():
                    return "unknown"


class TransactionsWorkload:
    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        out_topic: str,
        *,
        group: str,
        transactional_id: str,
        journal: AckJournal | None = None,
        transaction_records: int = 20,
        abort_every: int = 5,
        record_size: int = 100,
        on_progress: Callable[[ProduceStats], None] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.config = dict(config)
        self.topic = topic
        self.out_topic = out_topic
        self.group = group
        self.transactional_id = transactional_id
        self.journal = journal
        self.transaction_records = transaction_records
        self.abort_every = abort_every
        self.record_size = record_size
        self.on_progress = on_progress
        self.log_path = log_path
        self.stats = ProduceStats()
        self.committed = 0
        self.aborted = 0
        self.processed = 0  # records read and written again in committed transactions

    def _producer_config(self, suffix: str) -> dict[str, Any]:
        config = {
            **self.config,
            "client.id": f"{self.config.get('client.id', 'isrsim-txn')}-{suffix}",
            "transactional.id": f"{self.transactional_id}-{suffix}",
            "transaction.timeout.ms": 60_000,
            "message.timeout.ms": 60_000,
            "enable.idempotence": True,
            "acks": "all",
        }
        if self.log_path is not None:
            config["logger"] = _logger(self.log_path)
        return config

    # ------------------------------------------------------------------ the source

    def _source(self, rate: float | None, stop: threading.Event) -> None:
        from confluent_kafka import KafkaException

        txn = _Txn(self._producer_config("source"), self.stats, stop)
        start = time.monotonic()
        sent = 0
        number = 0
        pad = b"x" * self.record_size
        while not stop.is_set() and txn.ensure():
            due = int(rate * (time.monotonic() - start)) if rate else sent + self.transaction_records
            if due - sent < self.transaction_records:
                time.sleep(POLL_S)
                continue
            number += 1
            abort = self.abort_every > 0 and number % self.abort_every == 0
            try:
                txn.producer.begin_transaction()
                for i in range(self.transaction_records):
                    head = b"%d-%d " % (number, i)
                    txn.producer.produce(self.topic, value=head + pad[len(head) :])
                    self.stats.records_sent += 1
                if abort:
                    txn.producer.flush(TIMEOUT_S)
                    txn.producer.abort_transaction(TIMEOUT_S)
                    outcome = "abort"
                else:
                    outcome = txn.commit()
            except KafkaException as exc:  # produce, flush or abort failed
                outcome = txn.fail(exc)
            sent += self.transaction_records
            if outcome == "committed":
                self.committed += 1
                self.stats.records_acked += self.transaction_records
            elif outcome != "unknown":
                self.aborted += 1
                self.stats.records_failed += self.transaction_records
            if self.on_progress:
                self.on_progress(self.stats)

    # ------------------------------------------------------------------ the processor

    def _processor(self, stop: threading.Event) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.config["bootstrap.servers"],
                "group.id": self.group,
                "client.id": f"{self.config.get('client.id', 'isrsim-txn')}-processor-in",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **{k: v for k, v in self.config.items() if k.startswith(("security.", "sasl.", "ssl."))},
            }
        )
        consumer.subscribe([self.topic])
        txn = _Txn(self._producer_config("processor"), ProduceStats(), stop)
        try:
            while not stop.is_set():
                if not txn.ensure():
                    break
                msgs = [m for m in consumer.consume(200, POLL_S) if m.error() is None]
                if not msgs:
                    continue
                try:
                    txn.producer.begin_transaction()
                    for m in msgs:
                        txn.producer.produce(self.out_topic, value=b"processed " + (m.value() or b""))
                    positions = consumer.position(consumer.assignment())
                    txn.producer.send_offsets_to_transaction(
                        positions, consumer.consumer_group_metadata(), TIMEOUT_S
                    )
                    outcome = txn.commit()
                except KafkaException as exc:
                    outcome = txn.fail(exc)
                if outcome == "committed":
                    self.processed += len(msgs)
                    continue
                # Not committed: read again from the committed offsets (nothing lost, nothing doubled).
                try:
                    committed = consumer.committed(consumer.assignment(), TIMEOUT_S)
                    for tp in committed:
                        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                except KafkaException as exc:
                    txn._count(exc)
        finally:
            consumer.close()

    # ------------------------------------------------------------------ the run

    def run(self, rate: float | None, *, stop: threading.Event) -> ProduceStats:
        started_ms = now_ms()
        self.stats = ProduceStats()
        processor = threading.Thread(target=self._processor, args=(stop,), name="txn-processor", daemon=True)
        processor.start()
        try:
            self._source(rate, stop)
        finally:
            stop.set()
            processor.join(TIMEOUT_S * 2)
            self.stats.finished = time.monotonic()
            if self.journal is not None:
                self.journal.summary(
                    started_ms,
                    rate,
                    self.stats.records_sent,
                    self.stats,
                    client_id=f"{self.config.get('client.id', 'isrsim-txn')}-source",
                )
            if self.on_progress:
                self.on_progress(self.stats)
        return self.stats

    def summary(self) -> str:
        return (
            f"{self.committed:,} transactions committed, {self.aborted:,} aborted "
            f"({self.stats.records_acked:,} records committed); {self.processed:,} records processed "
            "exactly once into the output topic"
        )


def _logger(path: Path) -> logging.Logger:
    logger = logging.getLogger(f"librdkafka.{path}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    if not logger.handlers:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    return logger
