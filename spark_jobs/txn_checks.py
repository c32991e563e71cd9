"""The transaction checks (SPEC §14, docs/transactions.md, docs/report.md), from the segment files of the
partitions and of ``__transaction_state`` and from what read_committed consumers were served
(``served.jsonl``).

Each partition is judged on its most complete replica (the one whose log ends furthest). Spark picks the
batches that carry a producer id and ``__transaction_state``'s batches; the driver then reads, for those
only, the attributes (transactional, control) and the markers' records from the segment files.

- ``transactions_atomic``: every transaction the coordinator completed (a PrepareCommit / PrepareAbort
  record of ``__transaction_state``, with its partitions) ends with the same marker in every partition it
  wrote: each of its partitions holds a marker of the producer written between the prepare record and the
  complete record (the coordinator writes the markers in between), and every such marker is of the
  transaction's outcome; and no data batch of it is left without a marker (data of the producer after
  its last marker in a partition, older than a completed transaction that named the partition).
- ``read_committed_isolated``: no read_committed FETCH served data at or above the partition's LSO (data
  of a transaction whose marker was written after the response, or that has no marker, or past the
  ``last_stable_offset`` the response carried), and every aborted batch it served was listed in the
  response's ``aborted_transactions`` (its producer, with a first offset at or below the batch).
- ``no_hanging_transactions``: at the end of the run no partition's LSO is held by a transaction (data of a
  producer with no marker after it) older than ``transaction.max.timeout.ms`` + the
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` of the brokers' properties (Kafka's
  defaults when they set none): the coordinator would have aborted any transaction it knew of by then.

A run without transactions examines nothing and passes (``checked`` None, with a note).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol import (
    BATCH_HEADER_SIZE,
    SERVED_FILE,
    TRANSACTION_STATE_TOPIC_NAME,
    CorruptRecordError,
    KafkaError,
    decode_end_txn_marker,
    decode_records,
    decode_transaction_log_key,
    decode_transaction_log_value,
    read_header,
)
from spark_jobs.inputs import Inputs
from spark_jobs.result import DEFAULT_MAX_EXAMPLES, CheckResult

TRANSACTIONAL = 0x10  # the batch attributes' transactional bit (Kafka's RecordBatch)
CONTROL = 0x20
PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = 2, 3, 4, 5
DEFAULT_MAX_TIMEOUT_MS = 900_000
DEFAULT_CLEANUP_INTERVAL_MS = 10_000
MAX_TIMEOUT_KEY = "transaction.max.timeout.ms"
CLEANUP_KEY = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
NO_TRANSACTIONS_NOTE = "no transactional batch in the segments: no transaction was written in this run"

TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnBatch:
    """A transactional batch of a partition: data, or a marker (``commit`` set)."""

    offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    timestamp_ms: int
    commit: bool | None = None  # None: data; True / False: a COMMIT / ABORT marker

    @property
    def is_marker(self) -> bool:
        return self.commit is not None


@dataclass(slots=True)
class Completion:
    """A transaction the coordinator completed (or was completing at the end): its prepare record, and its
    complete record's time when there is one."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TP]
    prepare_ms: int
    complete_ms: int | None = None
    until_ms: int | None = None  # the next transaction's prepare (a bound when there is no complete)


@dataclass
class TxnFacts:
    batches: dict[TP, list[TxnBatch]] = field(default_factory=dict)  # offset order, per partition
    replicas: dict[TP, int] = field(default_factory=dict)  # the replica each partition is judged on
    completions: list[Completion] = field(default_factory=list)
    end_ms: int | None = None  # the run's last journal line
    hanging_after_ms: int = DEFAULT_MAX_TIMEOUT_MS + DEFAULT_CLEANUP_INTERVAL_MS
    served: list[dict[str, Any]] = field(default_factory=list)  # read_committed lines of served.jsonl
    notes: list[str] = field(default_factory=list)

    @property
    def any_transactions(self) -> bool:
        return bool(self.completions) or any(self.batches.values())


# ---------------------------------------------------------------------------------------------- reading


def _read_batches(file: str, rows: list[Any], state_log: bool) -> tuple[list[tuple[Any, bytes]], int]:
    """The batches at the rows' positions of one segment file: (row, header bytes or the whole batch).
    Transactional batches (and every batch of ``__transaction_state``) are read whole; the rest only
    for their header. Returns what was read and how many could not be."""
    out: list[tuple[Any, bytes]] = []
    bad = 0
    try:
        f = open(file, "rb")  # noqa: SIM115 (closed by `with f`)
    except OSError:
        return out, len(rows)
    with f:
        for row in sorted(rows, key=lambda r: r["position"]):
            try:
                f.seek(row["position"])
                head = f.read(BATCH_HEADER_SIZE)
                h = read_header(head)
            except (CorruptRecordError, OSError):
                bad += 1
                continue
            if state_log or h.attributes & CONTROL:
                out.append((row, head + f.read(h.size - BATCH_HEADER_SIZE)))
            elif h.attributes & TRANSACTIONAL:
                out.append((row, head))
    return out, bad


def _transactional_producers(samples: list[Any]) -> set[int]:
    """The producer ids whose sampled batch (one per producer id: ``producer_id``, ``file``,
    ``position``) has the transactional bit."""
    out: set[int] = set()
    by_file: dict[str, list[Any]] = {}
    for r in samples:
        by_file.setdefault(str(r["file"]), []).append(r)
    for file, rows in by_file.items():
        try:
            f = open(file, "rb")  # noqa: SIM115 (closed by `with f`)
        except OSError:
            continue
        with f:
            for r in rows:
                try:
                    f.seek(int(r["position"]))
                    if read_header(f.read(BATCH_HEADER_SIZE)).attributes & TRANSACTIONAL:
                        out.add(int(r["producer_id"]))
                except (CorruptRecordError, OSError):
                    continue
    return out


def _marker_commit(batch: bytes) -> bool | None:
    try:
        _, records = decode_records(batch)
        return decode_end_txn_marker(records[0].key, records[0].value).is_commit
    except (CorruptRecordError, KafkaError, IndexError):
        return None


def _completions(values: list[tuple[str, Any]]) -> list[Completion]:
    """The completed (or completing) transactions of ``__transaction_state``'s records, in log order."""
    out: list[Completion] = []
    open_by_id: dict[str, Completion] = {}
    for transactional_id, v in values:
        if v is None:
            continue
        status = v.transaction_status
        if status in (PREPARE_COMMIT, PREPARE_ABORT):
            current = open_by_id.get(transactional_id)
            commit = status == PREPARE_COMMIT
            if current is not None and current.commit == commit and current.producer_id == v.producer_id:
                continue  # the same prepare written again
            parts = frozenset((t, p) for t, ps in v.transaction_partitions.items() for p in ps)
            c = Completion(
                transactional_id,
                v.producer_id,
                v.producer_epoch,
                commit,
                parts,
                v.transaction_last_update_timestamp_ms,
            )
            if current is not None:
                current.until_ms = c.prepare_ms
            previous = [x for x in out if x.transactional_id == transactional_id and x.until_ms is None]
            for x in previous:
                x.until_ms = c.prepare_ms
            open_by_id[transactional_id] = c
            out.append(c)
        elif status in (COMPLETE_COMMIT, COMPLETE_ABORT):
            current = open_by_id.pop(transactional_id, None)
            if current is not None:
                current.complete_ms = v.transaction_last_update_timestamp_ms
    return out


def _hanging_after_ms(root: Path) -> int:
    """``transaction.max.timeout.ms`` + the cleanup interval, the largest any broker's properties set."""
    max_timeout, interval = DEFAULT_MAX_TIMEOUT_MS, DEFAULT_CLEANUP_INTERVAL_MS
    seen: list[tuple[int, int]] = []
    for props in sorted(root.glob("broker-*/*.properties")):
        values: dict[str, str] = {}
        try:
            for line in props.read_text(encoding="utf-8").splitlines():
                key, sep, value = line.partition("=")
                if sep and not line.lstrip().startswith("#"):
                    values[key.strip()] = value.strip()
            seen.append(
                (
                    int(values.get(MAX_TIMEOUT_KEY, DEFAULT_MAX_TIMEOUT_MS)),
                    int(values.get(CLEANUP_KEY, DEFAULT_CLEANUP_INTERVAL_MS)),
                )
            )
        except (OSError, UnicodeDecodeError, ValueError):
            continue
    if seen:
        max_timeout = max(m for m, _ in seen)
        interval = max(i for _, i in seen)
    return max_timeout + interval


def read_served(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The read_committed lines of the brokers' ``served.jsonl``."""
    out: list[dict[str, Any]] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if "read_committed" not in line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if isinstance(row, dict) and row.get("isolation_level") == "read_committed":
                out.append(row)
    return out


def gather(inp: Inputs) -> TxnFacts:
    """What the three checks judge (computed once per report)."""
    cached = _CACHE.get(id(inp))
    if cached is not None and cached[0] is inp:
        return cached[1]
    from pyspark.sql import functions as F

    facts = TxnFacts()
    ends = (
        inp.batches.groupBy("topic", "partition", "broker").agg(F.max("last_offset").alias("end")).collect()
    )
    best: dict[TP, tuple[int, int]] = {}
    for r in ends:
        tp = (str(r["topic"]), int(r["partition"]))
        key = (int(r["end"]), -int(r["broker"]))
        if tp not in best or key > best[tp]:
            best[tp] = key
    facts.replicas = {tp: -b for tp, (_, b) in best.items()}
    # A producer id is transactional or not for its whole life (a transactional id's producer ids are its
    # own): one batch of each tells which, and only the transactional ones' batches are read.
    samples = (
        inp.batches.filter(F.col("producer_id") >= 0)
        .groupBy("producer_id")
        .agg(F.min(F.struct("file", "position")).alias("at"))
        .select("producer_id", "at.file", "at.position")
        .collect()
    )
    transactional = sorted(_transactional_producers(samples))
    wanted = F.col("topic") == TRANSACTION_STATE_TOPIC_NAME
    if transactional:
        wanted = wanted | F.col("producer_id").isin(*transactional)
    rows = (
        inp.batches.filter(wanted)
        .select("broker", "topic", "partition", "file", "position", "base_offset", "last_offset")
        .collect()
    )
    by_file: dict[str, list[Any]] = {}
    for r in rows:
        tp = (str(r["topic"]), int(r["partition"]))
        if facts.replicas.get(tp) == int(r["broker"]):
            by_file.setdefault(str(r["file"]), []).append(r)
    unreadable = 0
    state_values: list[tuple[int, int, str, Any]] = []  # (partition, offset, transactional id, value)
    for file, file_rows in by_file.items():
        state_log = str(file_rows[0]["topic"]) == TRANSACTION_STATE_TOPIC_NAME
        read, bad = _read_batches(file, file_rows, state_log)
        unreadable += bad
        for row, data in read:
            tp = (str(row["topic"]), int(row["partition"]))
            h = read_header(data)
            if state_log:
                try:
                    _, records = decode_records(data)
                    for rec in records:
                        if rec.key is None:
                            continue
                        txn_id = decode_transaction_log_key(rec.key)
                        value = None if rec.value is None else decode_transaction_log_value(rec.value)
                        state_values.append((tp[1], h.base_offset + rec.offset_delta, txn_id, value))
                except (CorruptRecordError, KafkaError):
                    unreadable += 1
                continue
            if not h.attributes & TRANSACTIONAL:
                continue
            commit = _marker_commit(data) if h.attributes & CONTROL else None
            if h.attributes & CONTROL and commit is None:
                unreadable += 1
                continue
            facts.batches.setdefault(tp, []).append(
                TxnBatch(
                    h.base_offset,
                    h.base_offset + h.last_offset_delta,
                    h.producer_id,
                    h.producer_epoch,
                    h.max_timestamp,
                    commit,
                )
            )
    for batches in facts.batches.values():
        batches.sort(key=lambda b: b.offset)
    state_values.sort(key=lambda v: (v[0], v[1]))
    facts.completions = _completions([(t, v) for _, _, t, v in state_values])
    if unreadable:
        facts.notes.append(f"{unreadable} transactional batches could not be read and were not judged")
    end = inp.journal.agg(F.max("ts_ms").alias("end")).collect()
    facts.end_ms = int(end[0]["end"]) if end and end[0]["end"] is not None else None
    root = Path(inp.layout.root)
    facts.hanging_after_ms = _hanging_after_ms(root)
    served_paths = sorted({Path(j).with_name(SERVED_FILE) for j in inp.layout.activity_journals})
    facts.served = read_served(p for p in served_paths if p.is_file())
    _CACHE.clear()
    _CACHE[id(inp)] = (inp, facts)
    return facts


_CACHE: dict[int, tuple[Inputs, TxnFacts]] = {}


# ---------------------------------------------------------------------------------------------- judging


def _markers_of(batches: list[TxnBatch], producer_id: int) -> list[TxnBatch]:
    return [b for b in batches if b.is_marker and b.producer_id == producer_id]


def open_transactions(batches: list[TxnBatch]) -> dict[int, TxnBatch]:
    """Per producer, the first data batch after its last marker (its transaction still open at the end)."""
    first_open: dict[int, TxnBatch] = {}
    for b in batches:
        if b.is_marker:
            first_open.pop(b.producer_id, None)
        else:
            first_open.setdefault(b.producer_id, b)
    return first_open


def atomic_violations(facts: TxnFacts) -> tuple[int, list[dict[str, Any]]]:
    checked = 0
    violations: list[dict[str, Any]] = []
    for c in facts.completions:
        until = c.complete_ms if c.complete_ms is not None else c.until_ms
        for tp in sorted(c.partitions):
            if tp not in facts.replicas:
                continue  # a partition no replica of which is in the data (a deleted topic)
            checked += 1
            markers = [
                m
                for m in _markers_of(facts.batches.get(tp, []), c.producer_id)
                if m.timestamp_ms >= c.prepare_ms and (until is None or m.timestamp_ms <= until)
            ]
            outcome = "COMMIT" if c.commit else "ABORT"
            base = {
                "transactional_id": c.transactional_id,
                "producer_id": c.producer_id,
                "topic": tp[0],
                "partition": tp[1],
                "outcome": outcome,
            }
            if not markers:
                if c.complete_ms is not None:
                    violations.append({**base, "problem": f"completed {outcome} has no marker here"})
                continue
            wrong = [m for m in markers if m.commit != c.commit]
            if wrong:
                violations.append(
                    {
                        **base,
                        "problem": f"{'ABORT' if c.commit else 'COMMIT'} marker at offset {wrong[0].offset}",
                    }
                )
    for tp, batches in sorted(facts.batches.items()):
        for pid, first in sorted(open_transactions(batches).items()):
            later = [
                c
                for c in facts.completions
                if c.producer_id == pid and tp in c.partitions and c.prepare_ms > first.timestamp_ms
            ]
            if later:
                violations.append(
                    {
                        "transactional_id": later[0].transactional_id,
                        "producer_id": pid,
                        "topic": tp[0],
                        "partition": tp[1],
                        "outcome": "COMMIT" if later[0].commit else "ABORT",
                        "problem": f"data from offset {first.offset} left without a marker",
                    }
                )
    return checked, violations


def isolation_violations(facts: TxnFacts) -> tuple[int, list[dict[str, Any]], list[str]]:
    checked = 0
    violations: list[dict[str, Any]] = []
    notes: list[str] = []
    no_aborted_field = 0
    starts: dict[TP, list[int]] = {tp: [b.offset for b in batches] for tp, batches in facts.batches.items()}
    for line in facts.served:
        tp = (str(line.get("topic")), int(line.get("partition", -1)))
        batches = facts.batches.get(tp)
        checked += 1
        first, last, ts = int(line["fetch_offset"]), int(line["last_offset"]), int(line["ts_ms"])
        base = {
            "topic": tp[0],
            "partition": tp[1],
            "broker_id": line.get("broker_id"),
            "client_id": line.get("client_id"),
            "ts_ms": ts,
            "fetch_offset": first,
            "last_offset": last,
        }
        lso = line.get("last_stable_offset")
        if lso is not None and last >= int(lso):
            violations.append({**base, "problem": f"served up to {last}, at or above the LSO {lso}"})
            continue
        if not batches:
            continue
        aborted = line.get("aborted_transactions")
        if aborted is None:
            no_aborted_field += 1
        listed = [(int(a[0]), int(a[1])) for a in aborted or []]
        i = max(0, bisect.bisect_right(starts[tp], first) - 1)
        for j in range(i, len(batches)):
            b = batches[j]
            if b.offset > last:
                break
            if b.is_marker or b.last_offset < first:
                continue
            end = next((m for m in batches[j + 1 :] if m.is_marker and m.producer_id == b.producer_id), None)
            if end is None or end.timestamp_ms > ts:
                violations.append(
                    {
                        **base,
                        "problem": f"batch {b.offset} of producer {b.producer_id} served while its "
                        "transaction was open",
                    }
                )
                break
            if (
                not end.commit
                and aborted is not None
                and not any(pid == b.producer_id and off <= b.offset for pid, off in listed)
            ):
                violations.append(
                    {
                        **base,
                        "problem": f"aborted batch {b.offset} of producer {b.producer_id} served "
                        "without it in aborted_transactions",
                    }
                )
                break
    if no_aborted_field:
        notes.append(f"{no_aborted_field} served lines carry no aborted_transactions (an older broker)")
    return checked, violations, notes


def hanging_violations(facts: TxnFacts) -> tuple[int, list[dict[str, Any]]]:
    checked = 0
    violations: list[dict[str, Any]] = []
    for tp, batches in sorted(facts.batches.items()):
        if not batches:
            continue
        checked += 1
        if facts.end_ms is None:
            continue
        for pid, first in sorted(open_transactions(batches).items()):
            age = facts.end_ms - first.timestamp_ms
            if age > facts.hanging_after_ms:
                violations.append(
                    {
                        "topic": tp[0],
                        "partition": tp[1],
                        "producer_id": pid,
                        "producer_epoch": first.producer_epoch,
                        "first_offset": first.offset,
                        "open_ms": age,
                        "problem": f"the LSO of {tp[0]}-{tp[1]} is held at {first.offset} by producer "
                        f"{pid}'s transaction, open for {age} ms",
                    }
                )
    return checked, violations


# ---------------------------------------------------------------------------------------------- results


def _result(
    name: str,
    title: str,
    description: str,
    checked: int,
    violations: list[dict[str, Any]],
    facts: TxnFacts,
    max_examples: int,
    notes: list[str] | None = None,
) -> CheckResult:
    all_notes = [*facts.notes, *(notes or [])]
    if not facts.any_transactions:
        all_notes.insert(0, NO_TRANSACTIONS_NOTE)
    return CheckResult(
        name=name,
        title=title,
        description=description,
        passed=not violations,
        violations=len(violations),
        examples=violations[:max_examples],
        notes=all_notes,
        checked=checked if facts.any_transactions else None,
    )


def check_transactions_atomic(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    facts = gather(inp)
    checked, violations = atomic_violations(facts)
    return _result(
        "transactions_atomic",
        "Transactions are atomic",
        "every completed transaction ends with the same marker in every partition it wrote, and no data "
        "batch of it is left without a marker",
        checked,
        violations,
        facts,
        max_examples,
        [f"{len(facts.completions)} transactions completed by the coordinators"],
    )


def check_read_committed_isolated(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    facts = gather(inp)
    checked, violations, notes = isolation_violations(facts)
    if not facts.served:
        notes.insert(0, "no read_committed FETCH served records in this run")
    result = _result(
        "read_committed_isolated",
        "read_committed reads are isolated",
        "no read_committed FETCH served data at or above the partition's LSO, and every aborted batch it "
        "served was listed in its aborted_transactions",
        checked,
        violations,
        facts,
        max_examples,
        notes,
    )
    if not facts.served:
        result.checked = None  # nothing to examine is no evidence against: the check passes, with its note
    return result


def check_no_hanging_transactions(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    facts = gather(inp)
    checked, violations = hanging_violations(facts)
    return _result(
        "no_hanging_transactions",
        "No hanging transactions",
        "at the end of the run no partition's LSO is held by a transaction older than "
        f"transaction.max.timeout.ms + the cleanup interval ({facts.hanging_after_ms} ms)",
        checked,
        violations,
        facts,
        max_examples,
    )
