"""A producer workload: numbered records in batches, spread round-robin over the topic's partitions, sent to
each partition's leader with up to ``max_in_flight`` requests per partition, retried on retriable errors
after refreshing metadata (Kafka's producer without idempotence: a retry may duplicate a batch).

Every acknowledged batch is written to the workload journal ``acked-<producer_id>.jsonl`` (docs/storage.md),
so a later check can prove that nothing acknowledged was lost.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from cli.cluster_client import ClusterClient
from protocol import (
    RETRIABLE,
    ApiKeys,
    CompressionType,
    ConnectionClosed,
    Errors,
    TopicPartition,
    build_simple_batch,
    read_header,
)

log = logging.getLogger(__name__)

ACKS_BY_NAME = {"all": -1, "-1": -1, "1": 1, "0": 0}


def now_ms() -> int:
    return int(time.time() * 1000)


class AckJournal:
    """``acked-<producer_id>.jsonl``: one line per acknowledged batch, one ``write`` per line."""

    def __init__(self, directory: Path, producer_id: str) -> None:
        self.directory = directory
        self.path = directory / f"acked-{producer_id}.jsonl"
        self.producer_id = producer_id
        self._fd: int | None = None  # opened at the first acknowledgement: no batch, no file

    def _open(self) -> int:
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def acked(
        self,
        tp: TopicPartition,
        base_offset: int,
        last_offset: int,
        crc: int,
        acks: int,
        sent_ms: int,
        acked_ms: int,
    ) -> None:
        line = {
            "ts_ms": acked_ms,
            "producer_id": self.producer_id,
            "topic": tp[0],
            "partition": tp[1],
            "base_offset": base_offset,
            "last_offset": last_offset,
            "crc": crc,
            "acks": acks,
            "sent_ms": sent_ms,
            "acked_ms": acked_ms,
        }
        os.write(self._open(), (json.dumps(line, separators=(",", ":")) + "\n").encode())

    def failed(self, tp: TopicPartition, records: int, sent_ms: int, error: str) -> None:
        """A batch given up on (``attempts-<producer_id>.jsonl``: what the report's availability counts)."""
        self._attempt(
            {
                "event": "failed",
                "topic": tp[0],
                "partition": tp[1],
                "records": records,
                "sent_ms": sent_ms,
                "error": error,
            }
        )

    def summary(self, started_ms: int, rate: float | None, intended: int, stats: ProduceStats) -> None:
        """The run's counts in records, written when it ends: ``unknown`` were sent and neither
        acknowledged nor failed (in flight when the run was cut short)."""
        unknown = max(0, stats.records_sent - stats.records_acked - stats.records_failed)
        self._attempt(
            {"event": "summary", "started_ms": started_ms, "rate": rate, "intended": intended,
             "sent": stats.records_sent, "acknowledged": stats.records_acked, "failed": stats.records_failed,
             "unknown": unknown}
        )  # fmt: skip

    def _attempt(self, fields: dict[str, object]) -> None:
        line = {"ts_ms": now_ms(), "producer_id": self.producer_id, **fields}
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"attempts-{self.producer_id}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class ProduceStats:
    records_sent: int = 0
    records_acked: int = 0
    bytes_acked: int = 0
    batches_acked: int = 0
    batches_failed: int = 0
    retries: int = 0
    records_failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    last_error: str = ""
    latencies_ms: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    @property
    def rate(self) -> float:
        """Records acknowledged per second so far."""
        return self.records_acked / max(self.elapsed, 1e-9)


@dataclass
class ProducerSettings:
    acks: int = -1
    record_size: int = 100
    batch_records: int = 200
    max_in_flight: int = 5
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    # Kafka's compression.type of the producer: none, gzip, snappy, lz4 or zstd.
    compression_type: str = "none"


def retry_backoff_s(attempt: int, base_ms: int, max_ms: int, rng: random.Random | None = None) -> float:
    """KIP-580's back-off before retry ``attempt`` (1 for the first retry): ``base_ms * 2^(attempt-1)``,
    capped at ``max_ms``, times a random factor within +-20% so that clients do not retry in step."""
    term = min(float(max_ms), base_ms * 2.0 ** max(0, attempt - 1))
    jitter = (rng or random).uniform(0.8, 1.2)
    return term * jitter / 1000


class RateLimitedLog:
    """Logs a retriable error at most once per ``interval_s`` per error, with the count since."""

    def __init__(self, logger: logging.Logger, interval_s: float = 5.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()

    def warning(self, key: str, message: str) -> bool:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] += 1
            return False
        more = self._suppressed.pop(key, 0)
        self._last[key] = now
        suffix = f" ({more} more since the last report)" if more else ""
        self.logger.warning("%s%s", message, suffix)
        return True


async def _sleep_unless(stop: trio.Event | None, seconds: float) -> None:
    """Sleeps ``seconds``, or less if ``stop`` is set meanwhile."""
    with trio.move_on_after(seconds):
        if stop is None:
            await trio.sleep_forever()
        await stop.wait()


class Producer:
    def __init__(
        self,
        client: ClusterClient,
        topic: str,
        settings: ProducerSettings,
        *,
        journal: AckJournal | None = None,
        producer_id: str | None = None,
        on_progress: Callable[[ProduceStats], None] | None = None,
    ) -> None:
        self.client = client
        self.topic = topic
        self.settings = settings
        self.journal = journal
        self.producer_id = producer_id or (journal.producer_id if journal else f"p{os.getpid()}")
        self.stats = ProduceStats()
        self.on_progress = on_progress
        self.retry_log = RateLimitedLog(log)
        self._loop_ended: float | None = None  # when run() stopped starting batches

    @property
    def _codec(self) -> int:
        return int(CompressionType.for_name(self.settings.compression_type))

    def _values(self, first: int, n: int) -> list[bytes]:
        size = self.settings.record_size
        out = []
        for seq in range(first, first + n):
            head = f"{self.producer_id}:{seq}:".encode()
            # The value always carries producer id and sequence number, padded up to record_size.
            out.append(head + b"x" * (size - len(head)) if size > len(head) else head)
        return out

    async def run(
        self, count: int, rate: float | None = None, *, stop: trio.Event | None = None
    ) -> ProduceStats:
        """Produces ``count`` records (at ``rate`` records/s if given) and waits for every acknowledgement.

        When ``stop`` is set, no new batch is started; the batches in flight still finish."""
        partitions = await self.client.topic_partitions(self.topic)
        slots = {p: trio.Semaphore(self.settings.max_in_flight) for p in partitions}
        self.stats = ProduceStats()
        start = time.monotonic()
        started_ms = now_ms()
        self._loop_ended = None
        try:
            await self._produce(count, rate, stop, partitions, slots, start)
        finally:
            if self.journal is not None:
                # What it meant to write: all of ``count``, or, cut short, what the rate called for by then.
                elapsed = (self._loop_ended or time.monotonic()) - start
                stopped = stop is not None and stop.is_set()
                due = min(count, int(rate * elapsed)) if rate and stopped else (0 if stopped else count)
                intended = max(self.stats.records_sent, due)
                self.journal.summary(started_ms, rate, intended, self.stats)
        self.stats.finished = time.monotonic()
        if self.on_progress:
            self.on_progress(self.stats)
        return self.stats

    async def _produce(
        self,
        count: int,
        rate: float | None,
        stop: trio.Event | None,
        partitions: list[int],
        slots: dict[int, trio.Semaphore],
        start: float,
    ) -> None:
        async with trio.open_nursery() as nursery:
            seq = 0
            i = 0
            while seq < count and not (stop is not None and stop.is_set()):
                n = min(self.settings.batch_records, count - seq)
                if rate:
                    due = start + seq / rate
                    delay = due - time.monotonic()
                    if delay > 0:
                        await _sleep_unless(stop, delay)
                        if stop is not None and stop.is_set():
                            break
                partition = partitions[i % len(partitions)]
                i += 1
                batch = build_simple_batch(self._values(seq, n), attributes=self._codec)
                await slots[partition].acquire()
                nursery.start_soon(self._send, (self.topic, partition), batch, n, slots[partition])
                seq += n
                self.stats.records_sent += n
            self._loop_ended = time.monotonic()  # the batches in flight may take a while longer

    async def _send(self, tp: TopicPartition, batch: bytes, n: int, slot: trio.Semaphore) -> None:
        try:
            await self._send_with_retries(tp, batch, n)
        finally:
            slot.release()
            if self.on_progress:
                self.on_progress(self.stats)

    async def _send_with_retries(self, tp: TopicPartition, batch: bytes, n: int) -> None:
        s = self.settings
        sent_ms = now_ms()
        deadline = time.monotonic() + s.delivery_timeout_ms / 1000
        body = {
            "transactional_id": None,
            "acks": s.acks,
            "timeout_ms": s.request_timeout_ms,
            "topic_data": [{"name": tp[0], "partition_data": [{"index": tp[1], "records": batch}]}],
        }
        attempt = 0
        previous = ""
        while True:
            attempt += 1
            t0 = time.monotonic()
            error: str
            remaining = max(0.001, deadline - t0)
            cut_by_delivery_timeout = remaining < s.request_timeout_ms / 1000 + 5
            try:
                leader = self.client.leader_for(tp)
                if leader < 0:
                    raise ConnectionClosed(f"no leader known for {tp[0]}-{tp[1]}")
                conn = await self.client.broker_connection(leader)
                if s.acks == 0:
                    await conn.send_no_response(ApiKeys.PRODUCE, body)
                    return
                timeout = min(s.request_timeout_ms / 1000 + 5, remaining)
                resp = await conn.request(ApiKeys.PRODUCE, body, timeout=timeout)
                part = resp["responses"][0]["partition_responses"][0]
                code = Errors(part["error_code"])
                if code == Errors.NONE:
                    self._acked(tp, batch, n, part["base_offset"], sent_ms, t0)
                    return
                error = code.name
                retriable = code in RETRIABLE or code == Errors.REQUEST_TIMED_OUT
            except trio.TooSlowError:
                # An attempt cut short by delivery.timeout.ms was not timed out by the broker: the batch
                # failed for the error it was being retried for.
                error = previous if cut_by_delivery_timeout and previous else "TooSlowError"
                retriable = True
                self._drop_leader_connection(tp)
            except (OSError, ConnectionClosed) as exc:
                # Batches share a connection: one cut short by delivery.timeout.ms drops it under the others.
                # An attempt that was itself in its last stretch failed for the error it was retried for.
                error = previous if cut_by_delivery_timeout and previous else type(exc).__name__
                retriable = True
                self._drop_leader_connection(tp)
            except KeyError as exc:
                error = f"malformed response ({exc})"
                retriable = False
            previous = error
            self.stats.errors[error] += 1
            self.stats.last_error = error
            if not retriable or time.monotonic() >= deadline:
                self.stats.batches_failed += 1
                self.stats.records_failed += n
                if self.journal is not None:
                    self.journal.failed(tp, n, sent_ms, error)
                why = (
                    "not retriable"
                    if not retriable
                    else f"delivery.timeout.ms={s.delivery_timeout_ms} expired"
                )
                self.retry_log.warning(
                    f"failed:{error}",
                    f"{tp[0]}-{tp[1]}: batch of {n} records failed after {attempt} attempts ({why}): {error}",
                )
                return
            self.stats.retries += 1
            self.retry_log.warning(
                f"retry:{error}", f"{tp[0]}-{tp[1]}: {error} (retriable); retrying with back-off"
            )
            if self.on_progress:
                self.on_progress(self.stats)
            backoff = retry_backoff_s(attempt, s.retry_backoff_ms, s.retry_backoff_max_ms)
            await trio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            try:
                await self.client.refresh_metadata([tp[0]])
            except Exception as exc:  # the next attempt reports it
                log.debug("metadata refresh failed: %s", exc)

    def _drop_leader_connection(self, tp: TopicPartition) -> None:
        leader = self.client.leader_for(tp)
        if leader in self.client.brokers:
            self.client.drop(self.client.brokers[leader])

    def _acked(
        self, tp: TopicPartition, batch: bytes, n: int, base_offset: int, sent_ms: int, t0: float
    ) -> None:
        st = self.stats
        st.records_acked += n
        st.bytes_acked += len(batch)
        st.batches_acked += 1
        st.latencies_ms.append((time.monotonic() - t0) * 1000)
        if self.journal is not None:
            crc = read_header(batch).crc
            self.journal.acked(
                tp, base_offset, base_offset + n - 1, crc, self.settings.acks, sent_ms, now_ms()
            )
