"""What every client asked of this broker and was told (docs/storage.md, docs/your-application.md):
``client-activity.jsonl`` and ``served.jsonl`` beside ``events.jsonl``.

- ``client-activity.jsonl``: per second, per (client_id, client_host, api, topic, partition) with traffic,
  ``{ts_ms, broker_id, client_id, client_host, api, topic, partition, requests, records, errors}``; ``api``
  is one of produce, fetch, list_offsets, offset_commit, metadata; ``errors`` counts the partition's error
  codes by Kafka's name (NONE is not counted). METADATA is counted per topic named (``partition`` null),
  or once with ``topic`` null when it asked for every topic.
- ``served.jsonl``: a line per partition of a consumer's FETCH response that carried records (followers'
  fetches are not clients'): ``{ts_ms, broker_id, client_id, client_host, topic, partition, fetch_offset,
  last_offset, isolation_level}``, and for read_committed ``last_stable_offset`` and
  ``aborted_transactions`` (``[[producer_id, first_offset]]``) as the response carried them.

Off the request path: a request only updates counters in memory (a dict update per partition); the lines
are written by ``flush``, which the broker calls from a periodic task once a second and at stop, with one
``write`` per file and no fsync.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from protocol.common import error_name, wall_clock_ms
from server.journal import Journal

APIS = ("produce", "fetch", "list_offsets", "offset_commit", "metadata")

ISOLATION_LEVELS = {0: "read_uncommitted", 1: "read_committed"}

_BATCH_HEAD = struct.Struct(">qi")  # base_offset, batch_length
_LAST_OFFSET_DELTA_AT = 23
_RECORDS_COUNT_AT = 57
_HEADER_SIZE = 61


def batch_span(records: bytes) -> tuple[int, int, int] | None:
    """``(first offset, last offset, records)`` of the whole batches in ``records`` (a FETCH answer's bytes),
    read from the batch headers only; None when there is no whole batch."""
    pos, end = 0, len(records)
    first = last = -1
    count = 0
    while pos + _HEADER_SIZE <= end:
        base, length = _BATCH_HEAD.unpack_from(records, pos)
        if length <= 0 or pos + 12 + length > end:
            break
        (delta,) = struct.unpack_from(">i", records, pos + _LAST_OFFSET_DELTA_AT)
        (n,) = struct.unpack_from(">i", records, pos + _RECORDS_COUNT_AT)
        if first < 0:
            first = base
        last = base + delta
        count += max(0, n)
        pos += 12 + length
    return None if first < 0 else (first, last, count)


@dataclass(slots=True)
class _Tally:
    requests: int = 0
    records: int = 0
    errors: Counter[str] = field(default_factory=Counter)


# (second, client_id, client_host, api, topic, partition)
_Key = tuple[int, str, str, str, str | None, int | None]


class ClientActivity:
    """The two journals of one broker. ``record`` and ``served`` are cheap (memory only); ``flush`` writes."""

    def __init__(
        self,
        activity_path: Path,
        served_path: Path,
        broker_id: int,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._clock_ms = clock_ms or (wall_clock_ms)
        self._activity = Journal(activity_path, broker_id, clock_ms=self._clock_ms)
        self._served = Journal(served_path, broker_id, clock_ms=self._clock_ms)
        self._tallies: dict[_Key, _Tally] = {}
        self._served_lines: list[str] = []

    def record(
        self,
        client_id: str,
        client_host: str,
        api: str,
        topic: str | None,
        partition: int | None,
        *,
        records: int = 0,
        error: int = 0,
    ) -> None:
        """One partition of one request (``error``: the code answered for it, Kafka's number)."""
        key = (self._clock_ms() // 1000, client_id, client_host, api, topic, partition)
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = _Tally()
        tally.requests += 1
        tally.records += records
        if error:
            tally.errors[error_name(error)] += 1

    def served(
        self,
        client_id: str,
        client_host: str,
        topic: str,
        partition: int,
        fetch_offset: int,
        last_offset: int,
        isolation_level: int,
        last_stable_offset: int | None = None,
        aborted_transactions: list[tuple[int, int]] | None = None,
    ) -> None:
        """A consumer was sent records of ``topic-partition`` from ``fetch_offset`` to ``last_offset``; a
        read_committed one also with the LSO and the aborted transactions (producer id, first offset) the
        response carried."""
        line: dict[str, object] = {
            "ts_ms": self._clock_ms(),
            "broker_id": self.broker_id,
            "client_id": client_id,
            "client_host": client_host,
            "topic": topic,
            "partition": partition,
            "fetch_offset": fetch_offset,
            "last_offset": last_offset,
            "isolation_level": ISOLATION_LEVELS.get(isolation_level, str(isolation_level)),
        }
        if last_stable_offset is not None:
            line["last_stable_offset"] = last_stable_offset
            line["aborted_transactions"] = [list(a) for a in aborted_transactions or []]
        self._served_lines.append(
            json.dumps(
                line,
                separators=(",", ":"),
            )
        )

    def flush(self) -> int:
        """Writes what was gathered since the last flush (one ``write`` per file); the lines written."""
        return self.write(*self.take())

    def take(self) -> tuple[dict[_Key, _Tally], list[str]]:
        """What was gathered since the last flush, handed over to :meth:`write` (which may run in a worker
        thread: a request of 100,000 partitions leaves 100,000 lines, a second of work)."""
        tallies, self._tallies = self._tallies, {}
        served, self._served_lines = self._served_lines, []
        return tallies, served

    def write(self, tallies: dict[_Key, _Tally], served: list[str]) -> int:
        """Writes what :meth:`take` handed over; the lines written."""
        lines: list[str] = []
        for (second, client_id, host, api, topic, partition), t in sorted(
            tallies.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][3], kv[0][4] or "", kv[0][5] or -1)
        ):
            lines.append(
                json.dumps(
                    {
                        "ts_ms": second * 1000,
                        "broker_id": self.broker_id,
                        "client_id": client_id,
                        "client_host": host,
                        "api": api,
                        "topic": topic,
                        "partition": partition,
                        "requests": t.requests,
                        "records": t.records,
                        "errors": dict(t.errors),
                    },
                    separators=(",", ":"),
                )
            )
        if lines:
            self._activity._write("\n".join(lines) + "\n", len(lines))
        if served:
            self._served._write("\n".join(served) + "\n", len(served))
        return len(lines) + len(served)

    def close(self) -> None:
        self.flush()
        self._activity.close()
        self._served.close()


__all__ = ["APIS", "ClientActivity", "batch_span"]
