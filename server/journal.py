"""The broker's event journal, ``events.jsonl`` (docs/storage.md): one JSON object per line, append-only.

Each line is written with one ``write`` on an unbuffered file, so a SIGKILL loses no line that was written
and leaves at most one torn last line (which readers skip).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from protocol.common import TopicPartition, wall_clock_ms

logger = logging.getLogger(__name__)


def read_journal(path: Path, event: str | None = None) -> list[dict[str, Any]]:
    """The objects of a ``.jsonl`` journal, optionally only one ``event``. A torn line (a writer killed
    mid-line) is skipped; a missing file reads as empty."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict) and (event is None or obj.get("event") == event):
            out.append(obj)
    return out


class Journal:
    """Writes events for one process. ``owner_field`` is ``broker_id`` (brokers) or ``controller_id``."""

    def __init__(
        self,
        path: Path,
        owner_id: int,
        *,
        owner_field: str = "broker_id",
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._owner_field = owner_field
        self._owner_id = owner_id
        self._clock_ms = clock_ms or (wall_clock_ms)
        self.lost_lines = 0  # lines a write error lost since the last one written

    def emit(self, event: str, **fields: Any) -> None:
        record: dict[str, Any] = {
            "ts_ms": self._clock_ms(),
            self._owner_field: self._owner_id,
            "event": event,
        }
        record.update(fields)
        self._write(json.dumps(record, separators=(",", ":"), default=str) + "\n", 1)

    def emit_each(self, event: str, each: list[dict[str, Any]]) -> None:
        """One ``event`` line per item of ``each`` (its fields), all written with one ``write``."""
        if not each:
            return
        head: dict[str, Any] = {"ts_ms": self._clock_ms(), self._owner_field: self._owner_id, "event": event}
        text = "".join(
            json.dumps({**head, **fields}, separators=(",", ":"), default=str) + "\n" for fields in each
        )
        self._write(text, len(each))

    def _write(self, text: str, lines: int) -> None:
        """``text`` (whole lines) with one ``write``."""
        if self._fd < 0:
            return
        try:
            os.write(self._fd, text.encode("utf-8"))
        except OSError as e:
            # A full disk must not turn every event into a failed request: say so once, count the losses.
            if not self.lost_lines:
                logger.error("cannot write the journal %s (%s): events are lost until it can", self.path, e)
            self.lost_lines += lines
            return
        if self.lost_lines:
            logger.warning("journal %s written again after %d lost lines", self.path, self.lost_lines)
            self.lost_lines = 0

    def emit_partition(self, event: str, tp: TopicPartition, **fields: Any) -> None:
        self.emit(event, topic=tp[0], partition=tp[1], **fields)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class AckedBatch(Protocol):
    """What a line of ``acked.jsonl`` needs of a batch: its header, with the offsets it was given."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def crc(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...


class AckedStatus(Protocol):
    """A partition's answer to a PRODUCE (``delayed_ops.ProducePartitionStatus``)."""

    @property
    def error(self) -> int: ...
    @property
    def batches(self) -> tuple[AckedBatch, ...]: ...


class AckJournal(Journal):
    """``acked.jsonl`` beside ``events.jsonl``: a line per batch a leader acknowledged to a client (acks 1
    or all; acks=0 is acknowledged to nobody), written before the response goes out (docs/storage.md).

    The lines of one response are written with one ``write`` (one system call per PRODUCE, not per
    batch), on the same unbuffered file as ``events.jsonl``: a line written is a line kept through a
    SIGKILL, and a response is never sent for a batch whose line is not written (but for a disk error,
    which is logged and counted as ``events.jsonl``'s are). A retried idempotent batch answered as a
    duplicate carries the original batch's header, so its line names the original base offset."""

    def record(
        self,
        acks: int,
        client_id: str,
        statuses: Mapping[TopicPartition, AckedStatus],
        received_ms: int | None = None,
    ) -> None:
        """``received_ms``: when the leader read the PRODUCE off its socket (``acked_ms`` - ``received_ms``
        is the commit latency the client saw, less the network)."""
        parts: list[str] = []
        ts = self._clock_ms()
        received = ts if received_ms is None else received_ms
        owner = self._owner_id
        for (topic, partition), status in statuses.items():
            if status.error != 0:
                continue
            records = getattr(status, "records", None)
            for b in status.batches:
                line: dict[str, object] = {
                    "ts_ms": ts,
                    "broker_id": owner,
                    "topic": topic,
                    "partition": partition,
                    "base_offset": b.base_offset,
                    "last_offset": b.last_offset,
                    "crc": b.crc,
                    "acks": acks,
                    "producer_id": b.producer_id,
                    "producer_epoch": b.producer_epoch,
                    "base_sequence": b.base_sequence,
                    "client_id": client_id,
                    "received_ms": received,
                }
                if records is not None:
                    first, last = b.base_offset, b.last_offset
                    line["records"] = [list(r) for r in records if first <= r[0] <= last]
                parts.append(json.dumps(line, separators=(",", ":")))
        if parts:
            parts.append("")
            self._write("\n".join(parts), len(parts) - 1)


class OffsetsJournal:
    """Writes ``offsets`` events for partitions whose LEO/HW/log start changed, at most once per interval.

    The owner calls ``observe`` whenever offsets may have changed (cheap: a dict compare) and ``flush``
    from a periodic task every ``journal.offsets.interval.ms`` and at clean stop.
    """

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._last: dict[TopicPartition, tuple[int, int, int]] = {}
        self._pending: dict[TopicPartition, tuple[int, int, int]] = {}

    def observe(
        self, tp: TopicPartition, log_end_offset: int, high_watermark: int, log_start_offset: int
    ) -> None:
        now = (log_end_offset, high_watermark, log_start_offset)
        if self._last.get(tp) != now:
            self._pending[tp] = now
        else:
            self._pending.pop(tp, None)

    def forget(self, tp: TopicPartition) -> None:
        self._last.pop(tp, None)
        self._pending.pop(tp, None)

    def flush(self) -> int:
        pending, self._pending = self._pending, {}
        for tp, (leo, hw, lso) in pending.items():
            self._journal.emit_partition(
                "offsets", tp, log_end_offset=leo, high_watermark=hw, log_start_offset=lso
            )
            self._last[tp] = (leo, hw, lso)
        return len(pending)
