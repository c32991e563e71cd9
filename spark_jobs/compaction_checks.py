"""Compacted partitions in the report.

A replica's log cleaner rewrites the segments below its ``cleaner-offset-checkpoint`` entry, each replica
at its own pace: there, batches are removed or rewritten (other CRCs, offset gaps), so replicas differ
byte for byte while holding the same latest record per key. The other checks judge a compacted partition
only above its cleaned range (:func:`cleaned_bounds`: per partition, the largest base offset of the first
segment no replica has rewritten, where the logs are the leader's bytes again); ``offsets_contiguous``
skips compacted partitions (gaps are what the cleaner leaves). Below it, ``compaction_kept_latest``
judges per key.

``compaction_kept_latest``: for every key of a compacted partition, the last value acknowledged with
acks=all (the leaders' ``acked.jsonl`` lines of a compacted topic carry ``records``: each record's offset,
key in hex and the CRC-32C of its value, null for a tombstone) is what a full read of each replica that
must hold it returns (a replica must hold what is below its bound, as ``log_matching``'s, and at or above
its log start): the key's last record in that log is at that offset with that value, or at a later offset
(a later write, acknowledged or not). A tombstone may be gone (removed after ``delete.retention.ms``), but
no older value of its key may be back. The logs of compacted partitions are decoded on the driver
(compacted topics are small: changelogs, ``__consumer_offsets``); records of aborted transactions count
as a full read_uncommitted read returns them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crc32c import crc32c
from pyspark.sql import DataFrame

from protocol import decode_records, iter_batches
from spark_jobs.checks import replicated_bounds
from spark_jobs.compacted import compacted_partitions
from spark_jobs.history import cached
from spark_jobs.inputs import TP, Inputs
from spark_jobs.result import DEFAULT_MAX_EXAMPLES, CheckResult

_CONTROL_FLAG = 0x20
_KEY = tuple[str, int]


def _latest_per_key(paths: list[str]) -> dict[str, tuple[int, int | None]]:
    """key hex -> (offset, value CRC or None) of the key's last record in the segments at ``paths``."""
    latest: dict[str, tuple[int, int | None]] = {}
    for path in paths:
        data = Path(path).read_bytes()
        try:
            for pos, header in iter_batches(data, validate=False):
                if header.attributes & _CONTROL_FLAG or header.records_count == 0:
                    continue
                for r in decode_records(data, pos)[1]:
                    if r.key is None:
                        continue
                    value = None if r.value is None else crc32c(r.value)
                    latest[r.key.hex()] = (header.base_offset + r.offset_delta, value)
        except Exception:
            continue
    return latest


def _last_acked(inp: Inputs, parts: set[_KEY]) -> dict[_KEY, dict[str, tuple[int, int | None]]]:
    out: dict[_KEY, dict[str, tuple[int, int | None]]] = {}
    for path in inp.layout.broker_acked_journals:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                ack = json.loads(line)
            except ValueError:
                continue
            records = ack.get("records")
            tp = (ack.get("topic"), ack.get("partition"))
            if not records or ack.get("acks") != -1 or tp not in parts:
                continue
            keys = out.setdefault(tp, {})  # type: ignore[arg-type]
            for offset, key, value in records:
                if key not in keys or keys[key][0] < offset:
                    keys[key] = (int(offset), value)
    return out


def judge_key(acked_offset: int, acked_value: int | None, got: tuple[int, int | None] | None) -> str | None:
    """What is wrong with a replica whose last record of a key is ``got`` (offset, value CRC), the key's
    last acknowledged write being at ``acked_offset`` with value CRC ``acked_value`` (None: a
    tombstone); None if nothing is."""
    if acked_value is None:
        if got is not None and got[0] < acked_offset:
            return "an older value is back after its acknowledged tombstone"
        return None
    if got is None:
        return "the key's last acknowledged value is gone (no record of the key)"
    if got[0] < acked_offset:
        return "an older value is the key's last record"
    if got[0] == acked_offset and got[1] != acked_value:
        return "a different value is at the acknowledged offset"
    return None


def _key_text(key_hex: str) -> str:
    raw = bytes.fromhex(key_hex)
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "0x" + key_hex


def check_compaction_kept_latest(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    parts = compacted_partitions(inp)
    acked = _last_acked(inp, parts)
    bounds_rows = (
        _replicated_bounds(inp)
        .join(inp.replicas.select("broker", *TP, "log_start"), ["broker", *TP], "left")
        .collect()
        if acked
        else []
    )
    segments: dict[tuple[int, str, int], list[tuple[int, str]]] = {}
    for seg in inp.layout.segments:
        if (seg.topic, seg.partition) in acked:
            segments.setdefault((seg.broker, seg.topic, seg.partition), []).append(
                (seg.base_offset, seg.path)
            )
    examples: list[dict[str, Any]] = []
    violations = 0
    checked = 0
    for row in bounds_rows:
        tp = (row["topic"], row["partition"])
        if tp not in acked:
            continue
        bound = int(row["bound"] or 0)
        log_start = int(row["log_start"] or 0)
        replica = (int(row["broker"]), tp[0], tp[1])
        latest = _latest_per_key([p for _, p in sorted(segments.get(replica, []))])
        for key, (offset, value) in acked[tp].items():
            if offset >= bound or offset < log_start:
                continue
            checked += 1
            got = latest.get(key)
            problem = judge_key(offset, value, got)
            if problem is not None:
                violations += 1
                if len(examples) < max_examples:
                    examples.append(
                        {
                            "topic": tp[0],
                            "partition": tp[1],
                            "broker": replica[0],
                            "key": _key_text(key),
                            "acked_offset": offset,
                            "found_offset": None if got is None else got[0],
                            "problem": problem,
                        }
                    )
    notes = []
    if not parts:
        notes.append("no compacted partition (no cleaner-offset-checkpoint names one)")
    elif not acked:
        notes.append("no acks=all acknowledgement of a compacted partition carries its records' keys")
    return CheckResult(
        name="compaction_kept_latest",
        title="Compaction kept every key's latest value",
        description=(
            "For every key of a compacted partition, each replica that must hold the key's last value "
            "acknowledged with acks=all (below its bound, at or above its log start) still returns it on a "
            "full read (or a later write of the key); a tombstone may be gone, no older value may be back."
        ),
        passed=violations == 0,
        violations=violations,
        examples=examples,
        notes=notes,
        checked=checked or None,  # nothing compacted: passes with the note (as the group checks)
    )


def _replicated_bounds(inp: Inputs) -> DataFrame:
    return replicated_bounds(inp.replicas, inp.partitions, cached(inp, "stop_isr"))
