"""The data behind the report's plots and its fault x partition matrix, built before anything is drawn (so
tests read the series, not pixels; ``timeline.py`` draws them).

Every time is in **seconds since the first event** of the run (the earliest journal line, acknowledgement
or ``faults.jsonl`` record): ``t0_ms`` in ``report.json`` turns them back into epoch milliseconds.

- ``windows``: the fault windows (``converge.Window``) as shaded bands: from ``faults.jsonl`` and, where no
  CLI fault covers them, from the journals (a broker down between its last line and its restart, a broker
  fenced by the controller);
- ``rate``: throughput (acknowledged records and batches per second) and commit latency (``acked_ms -
  sent_ms`` of each acknowledged batch: p50, p99 and max) per time bin, from ``workload/acked-*.jsonl``;
  bins with no acknowledgement are there with 0 records and no latency, so a stall shows as a gap;
- ``lag``: per partition and replica, the leader's LEO minus the replica's LEO over time (from the journals'
  ``offsets`` events, at most one per ``journal.offsets.interval.ms``, so accurate to about that); a
  replica that is down keeps its last LEO, so its lag grows while the leader moves on; leader changes;
- ``matrix``: per fault window and partition, the leader changes, ISR shrinks and ISR expansions from the
  start of the window to its end, or to when the cluster converged after it if that is later.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import functions as F

from spark_jobs.converge import (
    QUORUM_EVENTS,
    Event,
    Window,
    collect_events,
    converge,
    fault_windows,
    final_stop_ms,
    isr_history,
)
from spark_jobs.fault_log import FaultBand
from spark_jobs.history import cached
from spark_jobs.inputs import TP, Inputs

TARGET_BINS = 60
STALE_MS = 1000  # a follower with no offsets event for this long is drawn from the leader's samples


@dataclass
class FigureData:
    t0_ms: int
    end_s: float
    t0_source: str = ""  # the event t0 is (``broker 1's journal: broker_started``)
    windows: list[dict[str, Any]] = field(default_factory=list)
    rate: dict[str, Any] = field(default_factory=dict)
    lag: dict[str, dict[str, Any]] = field(default_factory=dict)
    matrix: dict[str, Any] = field(default_factory=dict)
    stalls: list[dict[str, Any]] = field(default_factory=list)  # availability's stalls (from_s, to_s ...)
    # Per client id: records_per_s and latency_p50_ms on ``rate``'s bins (spark_jobs.client_series).
    clients: dict[str, dict[str, list[Any]]] = field(default_factory=dict)


def rel_s(ts_ms: int | None, t0_ms: int) -> float | None:
    return None if ts_ms is None else round((ts_ms - t0_ms) / 1000, 3)


def first_event(journal: Any, acked: Any, bands: list[FaultBand]) -> tuple[int, str]:
    """t0, the first event of the run, and what it is: the earliest line of ``faults.jsonl`` or of a node's
    journal (the rule ``isrsim chaos``, the demo and the scenarios use, so their times and the report's are
    the same clock); with neither, the first acknowledgement. Named as they name it: ``broker 1's journal:
    broker_started``, ``faults.jsonl: kill 3``."""
    row = (
        journal.filter(F.col("ts_ms").isNotNull())
        .orderBy("ts_ms", "source", "owner", "seq")
        .select("ts_ms", "source", "owner", "event")
        .first()
    )
    found: list[tuple[int, int, str]] = []
    if bands:
        b = min(bands, key=lambda b: b.start_ms)
        found.append((b.start_ms, 0, f"faults.jsonl: {' '.join([b.action, *b.nodes])}"))
    if row is not None and row["ts_ms"] is not None:
        found.append((int(row["ts_ms"]), 1, f"{row['source']} {row['owner']}'s journal: {row['event']}"))
    if found:
        ts, _, source = min(found)
        return ts, source
    arow = acked.agg(F.min(F.coalesce("sent_ms", "acked_ms", "ts_ms")).alias("a")).first()
    if arow is not None and arow["a"] is not None:
        return int(arow["a"]), "the first acknowledgement"
    return 0, "nothing: no journal, fault or acknowledgement"


def first_event_ms(journal: Any, acked: Any, bands: list[FaultBand]) -> int:
    return first_event(journal, acked, bands)[0]


def window_rows(windows: list[Window], t0_ms: int) -> list[dict[str, Any]]:
    return [
        {
            "label": w.label,
            "action": w.action,
            "nodes": list(w.nodes),
            "source": w.source,
            "start_s": rel_s(w.start_ms, t0_ms),
            "end_s": rel_s(w.end_ms, t0_ms),
            "converged_s": rel_s(w.converged_ms, t0_ms),
        }
        for w in windows
    ]


def _nice_bin_ms(span_ms: int) -> int:
    raw = max(100.0, span_ms / TARGET_BINS)
    for step in (100, 200, 250, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000):
        if step >= raw:
            return step
    return int(math.ceil(raw / 60_000) * 60_000)


def rate_series(acked: Any, t0_ms: int, end_ms: int) -> dict[str, Any]:
    """Throughput and commit latency per bin (see the module doc), aggregated by Spark."""
    bin_ms = _nice_bin_ms(max(end_ms - t0_ms, 1))
    lat = (F.col("acked_ms") - F.col("sent_ms")).cast("double")
    rows = (
        acked.filter(F.col("acked_ms").isNotNull())
        .withColumn("bin", F.floor((F.col("acked_ms") - F.lit(t0_ms)) / F.lit(bin_ms)).cast("long"))
        .groupBy("bin")
        .agg(
            F.count("*").alias("batches"),
            F.sum(F.col("last_offset") - F.col("base_offset") + 1).alias("records"),
            F.percentile_approx(lat, [0.5, 0.99], 1000).alias("pct"),
            F.max(lat).alias("max_lat"),
        )
        .collect()
    )
    by_bin = {int(r["bin"]): r for r in rows}
    n_bins = max([int((end_ms - t0_ms) // bin_ms) + 1, *(b + 1 for b in by_bin)]) if by_bin else 0
    out: dict[str, Any] = {
        "bin_s": bin_ms / 1000,
        "t_s": [],
        "records_per_s": [],
        "batches_per_s": [],
        "latency_p50_ms": [],
        "latency_p99_ms": [],
        "latency_max_ms": [],
    }
    for b in range(max(n_bins, 0)):
        r = by_bin.get(b)
        out["t_s"].append(round(b * bin_ms / 1000, 3))
        out["records_per_s"].append(0.0 if r is None else round(int(r["records"]) * 1000 / bin_ms, 1))
        out["batches_per_s"].append(0.0 if r is None else round(int(r["batches"]) * 1000 / bin_ms, 2))
        pct = None if r is None else r["pct"]
        out["latency_p50_ms"].append(None if not pct or pct[0] is None else float(pct[0]))
        out["latency_p99_ms"].append(None if not pct or pct[1] is None else float(pct[1]))
        out["latency_max_ms"].append(None if r is None or r["max_lat"] is None else float(r["max_lat"]))
    return out


def _leader_events(events: list[Event]) -> list[Event]:
    """A partition's leader changes, from the controller's ``leader_elected`` when there is a controller
    journal, else from the brokers' ``became_leader``; a deposed leader's older epoch is ignored."""
    has_controller = any(e.source == "controller" for e in events)
    want = ("controller", "leader_elected") if has_controller else ("broker", "became_leader")
    return [e for e in events if (e.source, e.event) == want and e.tp is not None]


def _point(per_broker: dict[int, dict[str, list[Any]]], b: int, t_s: float | None, lag: int | None) -> None:
    s = per_broker.setdefault(b, {"t_s": [], "lag": []})
    s["t_s"].append(t_s)
    s["lag"].append(lag)


def lag_series(series_rows: list[Any], events: list[Event], t0_ms: int) -> dict[str, dict[str, Any]]:
    """Per partition ("topic-partition"): ``brokers`` {broker: {"t_s": [...], "lag": [...]}} and
    ``leader_changes`` [{"t_s", "leader", "epoch"}]. A follower's lag is the leader's last reported LEO
    minus its own, never below 0, at each of its own ``offsets`` events, and at the leader's when it has
    reported nothing for ``STALE_MS`` (so a dead replica's lag grows); ``None`` (a break in the line) where
    a replica becomes leader. ``series_rows``: (broker, topic, partition, ts_ms, seq, leo) rows."""
    leaders: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for e in _leader_events(events):
        assert e.tp is not None
        leaders[e.tp].append(e)
    rows_by_tp: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for r in series_rows:
        rows_by_tp[(r["topic"], r["partition"])].append(r)
    out: dict[str, dict[str, Any]] = {}
    for tp, rows in sorted(rows_by_tp.items()):
        changes = sorted(leaders.get(tp, []), key=lambda e: (e.ts_ms, e.seq))
        merged: list[tuple[int, int, str, Any]] = [(r["ts_ms"], r["seq"], "offsets", r) for r in rows]
        merged += [(e.ts_ms, e.seq, "leader", e) for e in changes]
        merged.sort(key=lambda m: (m[0], m[1]))
        leo: dict[int, int] = {}
        seen: dict[int, int] = {}  # broker -> ts of its last offsets event
        leader: int | None = None
        epoch = -1
        per_broker: dict[int, dict[str, list[Any]]] = {}
        marks: list[dict[str, Any]] = []

        for ts, _, kind, item in merged:
            if kind == "leader":
                if item.leader_epoch is not None and item.leader_epoch < epoch:
                    continue
                epoch = item.leader_epoch if item.leader_epoch is not None else epoch
                if item.leader is not None and item.leader >= 0 and item.leader != leader:
                    leader = item.leader
                    marks.append({"t_s": rel_s(ts, t0_ms), "leader": leader, "epoch": item.leader_epoch})
                    if leader in per_broker:
                        _point(
                            per_broker, leader, rel_s(ts, t0_ms), None
                        )  # the new leader's line breaks: it has no lag while it leads
                continue
            b = int(item["broker"])
            leo[b], seen[b] = int(item["leo"]), ts
            per_broker.setdefault(b, {"t_s": [], "lag": []})
            if leader is None or leader not in leo:
                continue
            if b != leader:
                _point(per_broker, b, rel_s(ts, t0_ms), max(0, leo[leader] - leo[b]))
                continue
            # A leader's sample: followers silent for a while (down, paused, cut off) fall further behind.
            for f, f_leo in leo.items():
                if f != leader and ts - seen[f] >= STALE_MS:
                    _point(per_broker, f, rel_s(ts, t0_ms), max(0, leo[leader] - f_leo))
        out[f"{tp[0]}-{tp[1]}"] = {
            "topic": tp[0],
            "partition": tp[1],
            "brokers": {b: per_broker[b] for b in sorted(per_broker)},
            "leader_changes": marks,
        }
    return out


def fault_matrix(
    windows: list[Window], events: list[Event], partitions: list[tuple[str, int]], t0_ms: int, until_ms: int
) -> dict[str, Any]:
    """Which partitions each fault touched (see the module doc): ``faults`` (one per window, with its
    interval in seconds), ``partitions`` ("topic-partition"), ``cells[i][j]`` for fault i and partition j:
    ``{"leader_changes", "isr_shrinks", "isr_expands"}``."""
    leader_changes = _leader_events(events)
    # ISR changes: consecutive ISRs of a partition (any writer, stale epochs left out) that differ in size.
    shrinks: dict[tuple[str, int], list[int]] = defaultdict(list)
    expands: dict[tuple[str, int], list[int]] = defaultdict(list)
    for tp, changes in isr_history(events, {}).changes.items():
        for (_, before), (ts, after) in itertools.pairwise(changes):
            if len(after) < len(before):
                shrinks[tp].append(ts)
            elif len(after) > len(before):
                expands[tp].append(ts)
    cells: list[list[dict[str, int]]] = []
    faults = []
    for w in windows:
        end = w.end_ms if w.end_ms is not None else until_ms
        if w.converged_ms is not None:
            end = max(end, w.converged_ms)
        faults.append(
            {
                "label": w.label,
                "source": w.source,
                "from_s": rel_s(w.start_ms, t0_ms),
                "to_s": rel_s(end, t0_ms),
            }
        )
        row = []
        for tp in partitions:
            inside = [e for e in leader_changes if e.tp == tp and w.start_ms <= e.ts_ms <= end]
            row.append(
                {
                    "leader_changes": len(inside),
                    "isr_shrinks": sum(1 for ts in shrinks[tp] if w.start_ms <= ts <= end),
                    "isr_expands": sum(1 for ts in expands[tp] if w.start_ms <= ts <= end),
                }
            )
        cells.append(row)
    return {"faults": faults, "partitions": [f"{t}-{p}" for t, p in partitions], "cells": cells}


@dataclass
class Story:
    """What happened over time: the figure data, the time to converge (per fault, overall, per partition)
    and a note when only some partitions got a lag plot."""

    figures: FigureData
    per_fault: list[dict[str, Any]]
    overall: dict[str, Any]
    per_partition: list[dict[str, Any]]
    plotted_note: str | None
    events: list[Event] = field(default_factory=list)  # the journals' ISR and life-cycle events
    windows: list[Window] = field(default_factory=list)  # the fault windows


def build_story(
    inp: Inputs, bands: list[FaultBand], max_plots: int = 12, include_internal: bool = False
) -> Story:
    """The plots, lag panels and matrix show the user's topics (``spark_jobs.topics_shown``)."""
    from spark_jobs.topics_shown import fold_matrix, shown_partitions

    events = collect_events(inp.journal)
    stop = final_stop_ms(events)
    last_ts = max((e.ts_ms for e in events if e.event not in QUORUM_EVENTS), default=0)
    until = stop if stop is not None else last_ts + 1
    windows = fault_windows(events, bands, stop, inp.layout.controller_ids)
    replicas: dict[tuple[str, int], list[int]] = defaultdict(list)
    for b in inp.layout.brokers:
        for p in b.partitions:
            replicas[(p.topic, p.partition)].append(b.broker)
    history = isr_history(events, {tp: tuple(sorted(bs)) for tp, bs in replicas.items()})
    per_fault, overall, per_partition = converge(windows, history, until)
    t0, t0_source = first_event(inp.journal, inp.acked, bands)
    acked_end = inp.acked.agg(F.max("acked_ms").alias("m")).first()
    end_ms = max(
        [last_ts, *(v for v in [acked_end["m"] if acked_end else None] if v is not None)]
        + [b.end_ms or b.start_ms for b in bands]
    )
    fd = FigureData(t0_ms=t0, end_s=round((end_ms - t0) / 1000, 3), t0_source=t0_source)
    fd.windows = window_rows(windows, t0)
    # Throughput and latency from the workload's journal (its send and answer times); with none (a Kafka
    # client, the bench), throughput from the leaders' acked.jsonl.
    fd.rate = rate_series(inp.acked if inp.stats.acked_lines else inp.acknowledged, t0, end_ms)
    from spark_jobs.client_series import client_rates

    fd.clients = client_rates(
        inp.journal.sparkSession,
        inp.layout.broker_acked_journals,
        t0,
        float(fd.rate.get("bin_s", 0)),
        len(fd.rate.get("t_s", [])),
        include_internal,
    )
    all_tps = shown_partitions(sorted(replicas), include_internal)
    tps = all_tps[:max_plots]
    note = (
        f"lag plots drawn for the first {len(tps)} of {len(all_tps)} partitions"
        if len(tps) < len(all_tps)
        else None
    )
    if tps:
        keep = inp.journal.sparkSession.createDataFrame(tps, "topic STRING, partition INT")
        rows = (
            cached(inp, "series")
            .join(F.broadcast(keep), TP)
            .select("broker", *TP, "ts_ms", "seq", "leo")
            .collect()
        )
        fd.lag = lag_series(rows, events, t0)
        for tp in tps:  # a partition with no offsets in the journals still gets its (empty) plot
            fd.lag.setdefault(
                f"{tp[0]}-{tp[1]}", {"topic": tp[0], "partition": tp[1], "brokers": {}, "leader_changes": []}
            )
    fd.matrix = fold_matrix(fault_matrix(windows, events, all_tps, t0, until), all_tps)
    for row in per_fault:
        for k in ("start_ms", "end_ms", "converged_ms"):
            row[k.replace("_ms", "_s")] = rel_s(row[k], t0)
    for row in per_partition:
        for k in ("last_fault_ts", "last_fault_end_ts", "converged_ts"):
            row[k.replace("_ts", "_s")] = rel_s(row[k], t0)
    for k in ("last_fault_end_ms", "converged_ms"):
        overall[k.replace("_ms", "_s")] = rel_s(overall[k], t0)
    return Story(fd, per_fault, overall, per_partition, note, events, windows)


__all__ = [
    "FigureData",
    "Story",
    "build_story",
    "fault_matrix",
    "first_event",
    "first_event_ms",
    "lag_series",
    "rate_series",
    "rel_s",
    "window_rows",
]
