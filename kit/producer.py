"""A producer workload: numbered records in batches, spread round-robin over the topic's partitions, sent to
each partition's leader with up to ``max_in_flight`` requests per partition, retried on retriable errors
after refreshing metadata.

Idempotent by default (KIP-98, as Kafka's producers since 3.0), with acks=all: the producer asks a broker
for a producer id (INIT_PRODUCER_ID) and stamps every batch with it, its epoch and the partition's next
sequence (``kit.producer_sequences``); a retry carries the same numbers, so a batch whose answer was lost
is written once and the retry is answered with the first write's offsets, and a partition's batches are
written in order. Without idempotence (``idempotence=False``, or acks 0 or 1) a retry may write a batch
twice and batches in flight together may be written out of order, as Kafka's producer without it.

Every acknowledged batch is written to the workload journal ``acked-<producer_id>.jsonl`` (docs/storage.md),
so a later check can prove that nothing acknowledged was lost.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import trio

from kit.cluster_client import ClientError, ClusterClient
from kit.console import LineRecord
from kit.producer_sequences import Assignment, EpochExhaustedError, PartitionSequences
from protocol import (
    RETRIABLE,
    ApiKeys,
    CompressionType,
    ConnectionClosed,
    Errors,
    ResponseLost,
    TopicPartition,
    build_simple_batch,
    monotonic,
    process_id,
    read_header,
    wall_clock_ms,
)

log = logging.getLogger(__name__)

ACKS_BY_NAME = {"all": -1, "-1": -1, "1": 1, "0": 0}
# A leader recognises a retry among a producer's last 5 batches (Kafka's limit on
# max.in.flight.requests.per.connection with idempotence).
MAX_IDEMPOTENT_IN_FLIGHT = 5
# INIT_PRODUCER_ID answers that a retry may cure (besides RETRIABLE's).
_INIT_RETRIABLE = frozenset({Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE})


def now_ms() -> int:
    return wall_clock_ms()


class JournalWriteError(ClientError):
    """The journal could not be written (a full disk, a directory the user may not write): fatal. It is a
    local failure, not the network's, so it is never retried: the batch it was recording was acknowledged,
    and sending it again would write it twice."""


class AckJournal:
    """``acked-<producer_id>.jsonl``: one line per acknowledged batch, one ``write`` per line. A write that
    fails raises :class:`JournalWriteError` (never an ``OSError``, which the producer takes for the
    network's)."""

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

    def _write_error(self, path: Path, exc: OSError) -> JournalWriteError:
        why = exc.strerror or type(exc).__name__
        return JournalWriteError(
            f"cannot write the producer's journal {path}: {why}. The producer stops here: the batch it was "
            "recording was acknowledged and is not sent again. Give the journal a directory this user may "
            "write (--acked-journal DIR or --data-dir), or run without it (--no-acked-journal)"
        )

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
        try:
            os.write(self._open(), (json.dumps(line, separators=(",", ":")) + "\n").encode())
        except OSError as exc:
            raise self._write_error(self.path, exc) from exc

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

    def summary(
        self,
        started_ms: int,
        rate: float | None,
        intended: int,
        stats: ProduceStats,
        client_id: str | None = None,
    ) -> None:
        """The run's counts in records, written when it ends: ``unknown`` were sent and neither
        acknowledged nor failed (in flight when the run was cut short). ``client_id``: the Kafka client's
        ``client.id`` when the batches are journaled only by the leaders (acked.jsonl), so the report can
        tell them from other clients' and count them once."""
        unknown = max(0, stats.records_sent - stats.records_acked - stats.records_failed)
        self._attempt(
            {"event": "summary", "started_ms": started_ms, "rate": rate, "intended": intended,
             "sent": stats.records_sent, "acknowledged": stats.records_acked, "failed": stats.records_failed,
             "unknown": unknown, **({"client_id": client_id} if client_id else {})}
        )  # fmt: skip

    def _attempt(self, fields: dict[str, object]) -> None:
        line = {"ts_ms": now_ms(), "producer_id": self.producer_id, **fields}
        path = self.directory / f"attempts-{self.producer_id}.jsonl"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._write_error(path, exc) from exc

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
        return (self.finished or monotonic()) - self.started

    @property
    def rate(self) -> float:
        """Records acknowledged per second so far."""
        return self.records_acked / max(self.elapsed, 1e-9)

    def errors_seen(self, most: int | None = None) -> str:
        """``NOT_ENOUGH_REPLICAS x12, connection lost x2``: the errors met, most frequent first."""
        return ", ".join(f"{name} x{n}" for name, n in self.errors.most_common(most))


def connection_error(exc: BaseException) -> str:
    """A failed connection in words (not Python's class name): refused, timed out, or lost."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "connection timed out"
    return "connection lost"


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
    # Kafka's enable.idempotence (default true): in force with acks=all only, as Kafka's default.
    idempotence: bool = True

    @property
    def attempt_timeout_s(self) -> float:
        """How long an attempt waits for its answer: the broker's timeout_ms, plus as much again (at most
        5 s) for the broker's own REQUEST_TIMED_OUT answer to arrive first."""
        return self.request_timeout_ms / 1000 + min(5.0, self.request_timeout_ms / 1000)

    @property
    def idempotent(self) -> bool:
        return self.idempotence and self.acks == -1


def retry_backoff_s(attempt: int, base_ms: int, max_ms: int, rng: random.Random | None = None) -> float:
    """KIP-580's back-off before retry ``attempt`` (1 for the first retry): ``base_ms * 2^(attempt-1)``,
    capped at ``max_ms``, times a random factor within +-20% so that clients do not retry in step. The
    exponent stops growing once the cap is reached (Kafka's ExponentialBackoff), so a batch retried a
    thousand times does not overflow the float."""
    exponent = max(0, attempt - 1)
    if base_ms > 0 and max_ms > base_ms:
        exponent = min(exponent, math.ceil(math.log2(max_ms / base_ms)))
    else:
        exponent = 0
    term = min(float(max_ms), base_ms * 2.0**exponent)
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
        now = monotonic()
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
        self.producer_id = producer_id or (journal.producer_id if journal else f"p{process_id()}")
        self.stats = ProduceStats()
        self.on_progress = on_progress
        self.retry_log = RateLimitedLog(log)
        self._loop_ended: float | None = None  # when run() stopped starting batches
        # Idempotence: the id INIT_PRODUCER_ID gave, each partition's sequences, and an event per partition
        # set whenever one of its batches completes or its epoch is bumped (a batch refused as out of
        # order waits on it).
        self.kafka_producer_id = -1
        self._epoch = 0
        self._sequences: dict[TopicPartition, PartitionSequences] = {}
        self._sequence_changed: dict[TopicPartition, trio.Event] = {}
        self._next_batch_id = 0

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
        if self.settings.idempotent and self.kafka_producer_id < 0:
            await self.init_producer_id()
        start = monotonic()
        started_ms = now_ms()
        self._loop_ended = None
        try:
            await self._produce(count, rate, stop, partitions, slots, start)
        finally:
            if self.journal is not None:
                # What it meant to write: all of ``count``, or, cut short, what the rate called for by then.
                elapsed = (self._loop_ended or monotonic()) - start
                stopped = stop is not None and stop.is_set()
                due = min(count, int(rate * elapsed)) if rate and stopped else (0 if stopped else count)
                intended = max(self.stats.records_sent, due)
                self.journal.summary(started_ms, rate, intended, self.stats)
        self.stats.finished = monotonic()
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
                    delay = due - monotonic()
                    if delay > 0:
                        await _sleep_unless(stop, delay)
                        if stop is not None and stop.is_set():
                            break
                partition = partitions[i % len(partitions)]
                i += 1
                await self._dispatch(nursery, slots[partition], partition, self._values(seq, n))
                seq += n
            self._loop_ended = monotonic()  # the batches in flight may take a while longer

    async def _dispatch(
        self,
        nursery: trio.Nursery,
        slot: trio.Semaphore,
        partition: int,
        values: list[bytes] | list[LineRecord],
    ) -> None:
        """Starts sending one batch of ``values`` (numbered values, or records with keys and headers) to
        ``partition`` once it has a slot (and, idempotent, room for its sequences)."""
        await slot.acquire()
        tp = (self.topic, partition)
        n = len(values)
        batch_id = self._next_batch_id
        self._next_batch_id += 1
        if self.settings.idempotent:
            sequences = self._partition_sequences(tp)
            while not sequences.has_room(min(self.settings.max_in_flight, MAX_IDEMPOTENT_IN_FLIGHT)):
                await self._sequence_changed[tp].wait()
            batch = self._build(values, sequences.add(batch_id, n))
        else:
            batch = self._build(values, None)
        nursery.start_soon(self._send, tp, values, batch, batch_id, slot)
        self.stats.records_sent += n

    async def run_records(
        self, records: trio.MemoryReceiveChannel[list[LineRecord]], *, partition: int | None = None
    ) -> ProduceStats:
        """Produces records as they arrive (kafka-console-producer): each list received is one round of
        batches, a batch per partition (at most ``batch_records`` records each). A record goes to
        ``partition`` if given, else where Kafka's default partitioner puts it (murmur2 of the key; key-less
        records round robin). Returns when the channel is closed and every batch is acknowledged or
        failed."""
        partitions = await self.client.topic_partitions(self.topic)
        if partition is not None and partition not in partitions:
            raise ClientError(
                f"partition {partition} does not exist in {self.topic} (partitions {partitions[0]}.."
                f"{partitions[-1]})"
            )
        slots = {p: trio.Semaphore(self.settings.max_in_flight) for p in partitions}
        self.stats = ProduceStats()
        if self.settings.idempotent and self.kafka_producer_id < 0:
            await self.init_producer_id()
        started_ms = now_ms()
        try:
            await self._produce_records(records, partition, partitions, slots)
        finally:
            if self.journal is not None:
                # What it meant to write: every record it read.
                self.journal.summary(started_ms, None, self.stats.records_sent, self.stats)
        self.stats.finished = monotonic()
        if self.on_progress:
            self.on_progress(self.stats)
        return self.stats

    async def _produce_records(
        self,
        records: trio.MemoryReceiveChannel[list[LineRecord]],
        partition: int | None,
        partitions: list[int],
        slots: dict[int, trio.Semaphore],
    ) -> None:
        from kit.console import partition_for_key

        turn = 0
        async with trio.open_nursery() as nursery:
            async for received in records:
                by_partition: dict[int, list[LineRecord]] = {}
                for r in received:
                    if partition is not None:
                        target = partition
                    elif r.key is not None:
                        target = partitions[partition_for_key(r.key, len(partitions))]
                    else:
                        target = partitions[turn % len(partitions)]
                        turn += 1
                    by_partition.setdefault(target, []).append(r)
                for target, rs in by_partition.items():
                    for i in range(0, len(rs), self.settings.batch_records):
                        await self._dispatch(
                            nursery, slots[target], target, rs[i : i + self.settings.batch_records]
                        )

    # ------------------------------------------------------------------ idempotence

    async def init_producer_id(self) -> None:
        """A producer id from any broker (INIT_PRODUCER_ID), retried while the brokers cannot give one yet
        (COORDINATOR_LOAD_IN_PROGRESS, no broker answering) until delivery.timeout.ms."""
        s = self.settings
        deadline = monotonic() + s.delivery_timeout_ms / 1000
        attempt = 0
        body = {"transactional_id": None, "transaction_timeout_ms": 0}
        while True:
            attempt += 1
            why: str
            try:
                resp = await self.client.request_any(
                    ApiKeys.INIT_PRODUCER_ID, body, timeout=s.request_timeout_ms / 1000
                )
                code = Errors(resp["error_code"])
                if code == Errors.NONE:
                    self.kafka_producer_id = int(resp["producer_id"])
                    self._sequences = {}
                    self._epoch = int(resp["producer_epoch"])
                    log.info("producer id %d, epoch %d", self.kafka_producer_id, self._epoch)
                    return
                if code not in RETRIABLE and code not in _INIT_RETRIABLE:
                    raise ClientError(
                        f"INIT_PRODUCER_ID refused: {code.name}; use --no-idempotence to produce without a "
                        "producer id"
                    )
                why = code.name
            except ClientError as exc:
                if "INIT_PRODUCER_ID refused" in str(exc):
                    raise
                why = str(exc)
            if monotonic() >= deadline:
                raise ClientError(f"no producer id within delivery.timeout.ms ({why})")
            self.retry_log.warning(f"init:{why}", f"INIT_PRODUCER_ID: {why}; retrying")
            await trio.sleep(retry_backoff_s(attempt, s.retry_backoff_ms, s.retry_backoff_max_ms))

    def _partition_sequences(self, tp: TopicPartition) -> PartitionSequences:
        sequences = self._sequences.get(tp)
        if sequences is None:
            sequences = self._sequences[tp] = PartitionSequences(self._epoch)
            self._sequence_changed[tp] = trio.Event()
        return sequences

    def _sequences_changed(self, tp: TopicPartition) -> None:
        self._sequence_changed[tp].set()
        self._sequence_changed[tp] = trio.Event()

    def _build(self, values: list[bytes] | list[LineRecord], assignment: Assignment | None) -> bytes:
        """A batch of ``values``; with an ``assignment``, stamped with the producer id, epoch and sequence."""
        ids = (
            {}
            if assignment is None
            else {
                "producer_id": self.kafka_producer_id,
                "producer_epoch": assignment.epoch,
                "base_sequence": assignment.base_sequence,
            }
        )
        if values and isinstance(values[0], LineRecord):
            records = cast(list[LineRecord], values)
            return build_simple_batch(
                [r.value for r in records],
                keys=[r.key for r in records],
                headers=[r.headers for r in records],
                attributes=self._codec,
                **ids,
            )
        return build_simple_batch(cast(list[bytes], values), attributes=self._codec, **ids)

    async def _out_of_order(self, tp: TopicPartition, batch_id: int, deadline: float) -> None:
        """A batch refused as out of order: if an earlier batch of its partition is unacked, wait until
        something of the partition changes; if it is the earliest, the gap cannot close: bump the epoch."""
        sequences = self._sequences[tp]
        if sequences.is_first(batch_id):
            sequences.bump_epoch()
            log.warning(
                "%s-%d: sequence gap that no unacked batch can fill: producer epoch bumped to %d",
                tp[0],
                tp[1],
                sequences.epoch,
            )
            self._sequences_changed(tp)
            return
        with trio.move_on_at(deadline):
            await self._sequence_changed[tp].wait()

    async def _my_turn(self, tp: TopicPartition, batch_id: int, deadline: float) -> bool:
        """Whether the batch may go out now; if not, waits until something of its partition changed (or
        the deadline) and says False."""
        if self._sequences[tp].may_send(batch_id) or monotonic() >= deadline:
            return True
        with trio.move_on_at(deadline):
            await self._sequence_changed[tp].wait()
        return False

    # ------------------------------------------------------------------ sending

    async def _send(
        self,
        tp: TopicPartition,
        values: list[bytes] | list[LineRecord],
        batch: bytes,
        batch_id: int,
        slot: trio.Semaphore,
    ) -> None:
        acked = False
        try:
            acked = await self._send_with_retries(tp, values, batch, batch_id)
        finally:
            if self.settings.idempotent:
                self._sequences[tp].done(batch_id, acked=acked)
                self._sequences_changed(tp)
            slot.release()
            if self.on_progress:
                self.on_progress(self.stats)

    async def _send_with_retries(
        self, tp: TopicPartition, values: list[bytes] | list[LineRecord], batch: bytes, batch_id: int
    ) -> bool:
        """True once acknowledged; False when it failed for good."""
        s = self.settings
        n = len(values)
        sent_ms = now_ms()
        deadline = monotonic() + s.delivery_timeout_ms / 1000
        partition_data: dict[str, object] = {"index": tp[1], "records": batch}
        body = {
            "transactional_id": None,
            "acks": s.acks,
            "timeout_ms": s.request_timeout_ms,
            "topic_data": [{"name": tp[0], "partition_data": [partition_data]}],
        }
        sent_with = self._sequences[tp].assignment(batch_id) if s.idempotent else None
        attempt = 0
        previous = ""
        while True:
            attempt += 1
            if sent_with is not None and self._sequences[tp].assignment(batch_id) != sent_with:
                # The partition's epoch was bumped: the batch goes with its new epoch and sequence.
                sent_with = self._sequences[tp].assignment(batch_id)
                batch = partition_data["records"] = self._build(values, sent_with)
            if s.idempotent and not await self._my_turn(tp, batch_id, deadline):
                attempt -= 1
                continue
            t0 = monotonic()
            error: str
            remaining = max(0.001, deadline - t0)
            cut_by_delivery_timeout = remaining < s.attempt_timeout_s
            try:
                leader = self.client.leader_for(tp)
                if leader < 0:
                    raise ConnectionClosed(f"no leader known for {tp[0]}-{tp[1]}")
                conn = await self.client.broker_connection(leader)
                if s.idempotent:
                    if not self._sequences[tp].may_send(batch_id):
                        attempt -= 1
                        continue  # an earlier batch must go again first
                    self._sequences[tp].sending(batch_id)
                if s.acks == 0:
                    await conn.send_no_response(ApiKeys.PRODUCE, body)
                    return True
                timeout = min(s.attempt_timeout_s, remaining)
                resp = await conn.request(ApiKeys.PRODUCE, body, timeout=timeout)
                part = resp["responses"][0]["partition_responses"][0]
                code = Errors(part["error_code"])
                if code == Errors.NONE:
                    self._acked(tp, batch, n, part["base_offset"], sent_ms, t0)
                    return True
                error = code.name
                retriable = code in RETRIABLE or code == Errors.REQUEST_TIMED_OUT
                if s.idempotent and code in (Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, Errors.UNKNOWN_PRODUCER_ID):
                    self._sequences[tp].to_resend(batch_id)
                    try:
                        await self._out_of_order(tp, batch_id, deadline)
                    except EpochExhaustedError as exc:
                        error, retriable = f"{error} ({exc})", False
                    else:
                        if monotonic() < deadline:
                            self.stats.retries += 1
                            continue
            except trio.TooSlowError:
                # An attempt cut short by delivery.timeout.ms was not timed out by the broker: the batch
                # failed for the error it was being retried for.
                error = previous if cut_by_delivery_timeout and previous else "TooSlowError"
                retriable = True
                self._drop_leader_connection(tp)
            except ResponseLost:
                # A later request on the connection was answered first: this answer was lost (whether
                # the batch was written is unknown). The connection is fine: the others on it go on.
                error = "ResponseLost"
                retriable = True
            except (OSError, ConnectionClosed) as exc:
                # Batches share a connection: one cut short by delivery.timeout.ms drops it under the others.
                # An attempt that was itself in its last stretch failed for the error it was retried for.
                error = previous if cut_by_delivery_timeout and previous else connection_error(exc)
                retriable = True
                self._drop_leader_connection(tp)
            except KeyError as exc:
                error = f"malformed response ({exc})"
                retriable = False
            if s.idempotent:
                self._sequences[tp].to_resend(batch_id)
            previous = error
            self.stats.errors[error] += 1
            self.stats.last_error = error
            if not retriable or monotonic() >= deadline:
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
                return False
            self.stats.retries += 1
            self.retry_log.warning(
                f"retry:{error}", f"{tp[0]}-{tp[1]}: {error} (retriable); retrying with back-off"
            )
            if self.on_progress:
                self.on_progress(self.stats)
            backoff = retry_backoff_s(attempt, s.retry_backoff_ms, s.retry_backoff_max_ms)
            await trio.sleep(min(backoff, max(0.0, deadline - monotonic())))
            try:
                await self.client.refresh_metadata([tp[0]], timeout=s.request_timeout_ms / 1000)
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
        st.latencies_ms.append((monotonic() - t0) * 1000)
        if self.journal is not None:
            crc = read_header(batch).crc
            self.journal.acked(
                tp, base_offset, base_offset + n - 1, crc, self.settings.acks, sent_ms, now_ms()
            )
