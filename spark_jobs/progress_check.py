"""``progress_during_faults`` (SPEC §13; only with ``isrsim run|report --min-progress N``): an availability
floor, as Redpanda's chaos harness demands a number of successful operations during each fault. Every fault
window must see at least N records acknowledged on the program's partitions that stayed available in
Kafka's rules through the window: a leader all along, never one of the faulted nodes, and an ISR of at least
``min.insync.replicas``. A window in which no such partition existed is not judged (a note says so).

The program's partitions: those of user topics with an acknowledged record. ``min.insync.replicas``: the
brokers' setting (their ``server.properties``; 1 when none says), not a topic's own override.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

from spark_jobs.clients import INTERNAL_TOPICS
from spark_jobs.converge import ISR_EVENTS, Event, TPKey
from spark_jobs.converge import Window as FaultWindow
from spark_jobs.inputs import Inputs
from spark_jobs.layout import read_properties
from spark_jobs.plan import collect_tables
from spark_jobs.result import CheckResult


def min_insync_replicas(root: Path) -> int:
    """The brokers' ``min.insync.replicas`` (the highest any of them says), 1 when none says."""
    values = []
    for props in sorted(root.glob("broker-*/server.properties")):
        raw = read_properties(props).get("min.insync.replicas")
        if raw is not None and raw.strip().isdigit():
            values.append(int(raw))
    return max(values, default=1)


def partition_states(events: list[Event]) -> dict[TPKey, list[tuple[int, int, frozenset[int]]]]:
    """Per partition, ``(ts_ms, leader, isr)`` after each leader or ISR change (a deposed leader's late
    word, an older leader epoch, ignored); leader -1: none."""
    out: dict[TPKey, list[tuple[int, int, frozenset[int]]]] = defaultdict(list)
    epoch: dict[TPKey, int] = {}
    for e in events:
        tp = e.tp
        if tp is None or e.event not in ISR_EVENTS:
            continue
        if e.leader_epoch is not None:
            if e.leader_epoch < epoch.get(tp, -1):
                continue
            epoch[tp] = e.leader_epoch
        prev = out[tp][-1] if out[tp] else (0, -1, frozenset())
        leader = e.leader if e.leader is not None else prev[1]
        isr = frozenset(e.isr) if e.isr is not None else prev[2]
        out[tp].append((e.ts_ms, leader, isr))
    return out


def available_through(
    states: list[tuple[int, int, frozenset[int]]], w: FaultWindow, end_ms: int, min_isr: int
) -> bool:
    """The partition had a leader, not one of the window's nodes, and an ISR of ``min_isr`` or more from
    the window's start to ``end_ms``."""
    before = [s for s in states if s[0] <= w.start_ms]
    during = [s for s in states if w.start_ms < s[0] <= end_ms]
    seen = ([before[-1]] if before else []) + during
    if not seen:
        return False
    return all(leader >= 0 and str(leader) not in w.nodes and len(isr) >= min_isr for _, leader, isr in seen)


def check_progress_during_faults(
    inp: Inputs, events: list[Event], windows: list[FaultWindow], min_progress: int, max_examples: int = 20
) -> CheckResult:
    min_isr = min_insync_replicas(Path(inp.layout.root))
    states = partition_states(events)
    last_ms = max((e.ts_ms for e in events), default=0)
    spans = [(i, w.start_ms, w.end_ms if w.end_ms is not None else last_ms) for i, w in enumerate(windows)]
    acked = inp.acknowledged.filter(~F.col("topic").isin(*INTERNAL_TOPICS))
    tables: dict[str, Any] = {"program": acked.select("topic", "partition").distinct()}
    if spans:
        spark = inp.journal.sparkSession
        wdf = spark.createDataFrame(spans, "window INT, start_ms LONG, end_ms LONG")
        tables["per_window"] = (
            acked.join(
                F.broadcast(wdf),
                (F.col("acked_ms") >= F.col("start_ms")) & (F.col("acked_ms") <= F.col("end_ms")),
            )
            .groupBy("window", "topic", "partition")
            .agg(F.sum(F.col("last_offset") - F.col("base_offset") + 1).alias("records"))
        )
    got = collect_tables(tables)
    program = sorted((str(r["topic"]), int(r["partition"])) for r in got["program"])
    per_window: dict[int, dict[TPKey, int]] = defaultdict(dict)
    for r in got.get("per_window", []):
        per_window[int(r["window"])][(str(r["topic"]), int(r["partition"]))] = int(r["records"] or 0)
    judged = 0
    unjudged: list[str] = []
    rows: list[dict[str, Any]] = []
    for i, start, end in spans:
        w = windows[i]
        kept = [tp for tp in program if available_through(states.get(tp, []), w, end, min_isr)]
        if not kept:
            unjudged.append(w.label)
            continue
        judged += 1
        n = sum(per_window[i].get(tp, 0) for tp in kept)
        if n < min_progress:
            rows.append(
                {
                    "fault": w.label,
                    "start_ts": start,
                    "end_ts": end,
                    "records_acknowledged": n,
                    "min_progress": min_progress,
                    "available_partitions": ", ".join(f"{t}-{p}" for t, p in kept),
                }
            )
    notes = [
        f"{judged} fault window(s) judged with min.insync.replicas={min_isr} on {len(program)} partition(s) "
        f"the program wrote to; at least {min_progress} acknowledged record(s) asked of each"
    ]
    if unjudged:
        more = ", ..." if len(unjudged) > 5 else ""
        notes.append(
            f"{len(unjudged)} window(s) not judged: none of the program's partitions kept a leader and "
            f"min.insync.replicas through them ({', '.join(unjudged[:5])}{more})"
        )
    return CheckResult(
        "progress_during_faults",
        f"At least {min_progress} records acknowledged during every fault",
        "Every fault window saw at least --min-progress acknowledged records on the program's partitions "
        "that stayed available in Kafka's rules through it (a leader all along, none of the faulted nodes, "
        "an ISR of at least min.insync.replicas): the program kept making progress where the cluster "
        "could serve it.",
        passed=not rows,
        violations=len(rows),
        examples=rows[:max_examples],
        notes=notes,
        checked=judged,
    )


__all__ = ["available_through", "check_progress_during_faults", "min_insync_replicas", "partition_states"]
