"""A workload through Kafka's own C client: a librdkafka producer (confluent-kafka) against a local cluster,
so a demo or chaos run shows what a real client's acknowledgements are worth (docs/clients.md).

Nothing of isrsim is on the client side: the producer speaks Kafka's binary protocol to the brokers, with
the settings a user would give it (``acks=all``, Kafka's default idempotence, ``linger.ms``), and the
security of the cluster's ``client.properties`` on a secure cluster. What it was told is written is judged
by the report from the leaders' ``acked.jsonl`` (SPEC §10): every batch a leader acknowledged to a client.

The workload keeps the report's availability figures as ``isrsim produce`` does, in
``workload/attempts-<producer_id>.jsonl``: the records given up on (librdkafka's delivery reports with an
error, gathered per partition and error each second) and a summary line (intended, sent, acknowledged,
failed, unknown). It runs in a thread of its own (librdkafka's own threads do the network work; the
delivery reports are served on the workload's thread by ``poll``).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.errors import KitError
from kit.producer import AckJournal, ProduceStats, now_ms

if TYPE_CHECKING:
    from kit.cluster_client import Address

LIBRDKAFKA_INSTALL = "pip install 'isrsim[clients]'"
FLUSH_FAILED_S = 1.0  # how often the records given up on are written to the attempts journal
QUEUE_FULL_WAIT_S = 0.05


class LibrdkafkaMissing(KitError):
    """confluent-kafka (librdkafka) is not installed."""


def require_librdkafka(what: str) -> None:
    """Raises ``LibrdkafkaMissing`` naming what to install (before a cluster is started for nothing)."""
    if importlib.util.find_spec("confluent_kafka") is None:
        raise LibrdkafkaMissing(
            f"{what} drives its workload through librdkafka, and confluent-kafka is not installed: "
            f"{LIBRDKAFKA_INSTALL} (or `--client isrsim` for isrsim's own producer)"
        )


def read_properties(path: Path) -> dict[str, str]:
    """A client properties file (``key=value`` lines, ``#`` comments) as a librdkafka configuration."""
    out: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def producer_config(
    bootstrap: Sequence[Address],
    *,
    client_id: str,
    acks: str = "all",
    idempotence: bool = True,
    linger_ms: int = 5,
    request_timeout_ms: int = 30_000,
    message_timeout_ms: int = 120_000,
    properties: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """librdkafka's configuration for a workload: Kafka's names, Kafka's defaults where a Java producer has
    them (``enable.idempotence`` with ``acks=all``), then ``properties`` (a ``client.properties``) on top.
    ``message.timeout.ms`` is Kafka's ``delivery.timeout.ms``."""
    return {
        "bootstrap.servers": ",".join(f"{host}:{port}" for host, port in bootstrap),
        "client.id": client_id,
        "acks": acks,
        "enable.idempotence": idempotence and acks in ("all", "-1"),
        "linger.ms": linger_ms,
        "request.timeout.ms": request_timeout_ms,
        "message.timeout.ms": message_timeout_ms,
        **(properties or {}),
    }


class LibrdkafkaWorkload:
    """``count`` records of ``record_size`` bytes to ``topic`` at ``rate`` records/s (None: as fast as the
    producer takes them), until done or ``stop`` is set; then up to ``drain_s`` for the deliveries still
    outstanding (what is left is ``unknown``). ``stats`` is a ``ProduceStats`` in records (librdkafka does
    not report its batches: ``batches_*`` stay 0)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        *,
        journal: AckJournal | None = None,
        record_size: int = 100,
        on_progress: Callable[[ProduceStats], None] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.config = dict(config)
        self.log_path = log_path  # librdkafka's own log lines go there (else to stderr, as it does)
        self.topic = topic
        self.journal = journal
        self.record_size = record_size
        self.on_progress = on_progress
        self.stats = ProduceStats()
        self.fatal: str | None = None  # the current producer's fatal error
        self.fatals: list[str] = []  # every fatal error met (each replaced the producer)
        self.exception: BaseException | None = None
        self._failed: dict[tuple[int, str], list[int]] = {}  # (partition, error) -> [records, first sent_ms]
        self._thread: threading.Thread | None = None
        self._ignore_reports = False

    # ------------------------------------------------------------------ the delivery reports

    def _delivered(self, err: Any, msg: Any) -> None:
        if self._ignore_reports:
            return
        if err is None:
            self.stats.records_acked += 1
            self.stats.bytes_acked += len(msg.value() or b"")
            return
        self.stats.records_failed += 1
        name = str(err.name()) if hasattr(err, "name") else str(err)
        self.stats.errors[name] += 1
        self.stats.last_error = str(err)
        _, sent_ms = msg.timestamp()
        entry = self._failed.setdefault((int(msg.partition()), name), [0, int(sent_ms) or now_ms()])
        entry[0] += 1

    def _error(self, err: Any) -> None:
        """librdkafka's client-level errors: counted; a fatal one (an idempotent producer's broken
        guarantee) makes the run replace its producer, as a Kafka application must."""
        name = str(err.name()) if hasattr(err, "name") else str(err)
        if getattr(err, "fatal", lambda: False)():
            self.fatal = f"{name}: {err.str() if hasattr(err, 'str') else err}"
        self.stats.errors[name] += 1

    def _flush_failed(self) -> None:
        if self.journal is not None:
            for (partition, name), (records, sent_ms) in self._failed.items():
                self.journal.failed((self.topic, partition), records, sent_ms, name)
        self._failed.clear()

    # ------------------------------------------------------------------ the run

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        self.fatal = None
        self._ignore_reports = False
        extra: dict[str, Any] = {"error_cb": self._error}
        if self.log_path is not None:
            extra["logger"] = self._logger(self.log_path)
        return Producer({**self.config, **extra})

    @staticmethod
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

    def _abandon(self, producer: Any) -> None:
        """What ``producer`` still holds is unknown (neither acknowledged nor given up on): dropped."""
        self._ignore_reports = True
        self._flush_failed()
        try:
            producer.purge()
            producer.flush(0)
        except Exception:  # purging a broken producer changes nothing of what was counted
            pass

    def run(self, count: int, rate: float | None = None, *, stop: threading.Event | None = None,
            drain_s: float = 120.0) -> ProduceStats:  # fmt: skip
        self.stats = ProduceStats()
        producer = self._new_producer()
        started_ms = now_ms()
        start = time.monotonic()
        loop_ended = start
        last_flush = start
        pad = b"x" * self.record_size
        try:
            sent = 0
            while sent < count and not (stop is not None and stop.is_set()):
                if self.fatal is not None:
                    # A fatal error (an idempotent producer's broken guarantee): as a Kafka application
                    # must, give the old producer up and go on with a new one.
                    self.fatals.append(self.fatal)
                    self._abandon(producer)
                    producer = self._new_producer()
                now = time.monotonic()
                due = count if rate is None else min(count, int(rate * (now - start)) + 1)
                while sent < due:
                    head = b"%d " % sent
                    try:
                        producer.produce(
                            self.topic, value=head + pad[len(head) :], on_delivery=self._delivered
                        )
                    except BufferError:  # librdkafka's queue is full: serve reports, then go on
                        producer.poll(QUEUE_FULL_WAIT_S)
                        break
                    sent += 1
                    self.stats.records_sent = sent
                    if sent % 1000 == 0:
                        producer.poll(0)
                producer.poll(0 if sent < due else 0.005)
                if now - last_flush >= FLUSH_FAILED_S:
                    last_flush = now
                    self._flush_failed()
                    if self.on_progress:
                        self.on_progress(self.stats)
            loop_ended = time.monotonic()
            deadline = loop_ended + drain_s
            while len(producer) > 0 and time.monotonic() < deadline and self.fatal is None:
                producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
                self._flush_failed()
                if self.on_progress:
                    self.on_progress(self.stats)
            if self.fatal is not None:
                self.fatals.append(self.fatal)
        finally:
            self._abandon(producer)
            self.stats.finished = time.monotonic()
            if self.journal is not None:
                # What it meant to write: all of ``count``, or, stopped, what the rate called for by then.
                stopped = stop is not None and stop.is_set()
                due = min(count, int(rate * (loop_ended - start))) if rate and stopped else count
                self.journal.summary(
                    started_ms,
                    rate,
                    max(self.stats.records_sent, due),
                    self.stats,
                    client_id=str(self.config.get("client.id") or "") or None,
                )
            if self.on_progress:
                self.on_progress(self.stats)
        return self.stats

    def start(self, count: int, rate: float | None = None, *, stop: threading.Event | None = None,
              drain_s: float = 120.0) -> None:  # fmt: skip
        """``run`` in a daemon thread; ``join`` waits for it and raises what it raised."""

        def target() -> None:
            try:
                self.run(count, rate, stop=stop, drain_s=drain_s)
            except BaseException as exc:  # handed to join()
                self.exception = exc

        self._thread = threading.Thread(target=target, name=f"librdkafka-{self.topic}", daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> ProduceStats:
        if self._thread is not None:
            self._thread.join(timeout)
        if self.exception is not None:
            raise self.exception
        return self.stats

    def summary(self) -> str:
        """``125,000 records acknowledged of 125,000 sent (0 failed, 0 unknown) in 26.1s``"""
        s = self.stats
        unknown = max(0, s.records_sent - s.records_acked - s.records_failed)
        line = (
            f"{s.records_acked:,} records acknowledged of {s.records_sent:,} sent "
            f"({s.records_failed:,} failed, {unknown:,} unknown) in {s.elapsed:.1f}s"
        )
        if s.errors:
            line += f"; errors seen: {s.errors_seen(6)}"
        if self.fatals:
            line += f"; fatal errors (producer replaced): {'; '.join(self.fatals[:3])}"
        return line


__all__ = [
    "LIBRDKAFKA_INSTALL",
    "LibrdkafkaMissing",
    "LibrdkafkaWorkload",
    "producer_config",
    "read_properties",
    "require_librdkafka",
]
