"""The consumer checks of SPEC §13 (docs/report.md, "Consumers"): ``consumer_no_skip`` and
``consumer_redelivery``, with each group's rebalance windows.

Inputs: the group coordinators' ``group_generation``, ``offset_commit`` and ``rebalance_started`` events (in
the brokers' ``events.jsonl``) and the brokers' ``served.jsonl``. Spark reads and filters them (the journals'
other lines stay on the executors); what is left is per-fetch and per-commit metadata, a few lines per
second of consuming, judged on the driver by ``consumer_logic``.

A run with no consumer group (no ``group_generation`` and no ``offset_commit`` event) has nothing for these
checks to judge: they say so (``checked`` None, a note) rather than make every producer-only run unknown.
A run with groups whose commits could not be judged (nothing served before them) is ``unknown``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import Window as W
from pyspark.sql import functions as F

from protocol import SERVED_FILE
from spark_jobs.clients import SERVED_SCHEMA
from spark_jobs.consumer_logic import (
    Commit,
    Crash,
    Generation,
    RebalanceStart,
    Served,
    SkipFindings,
    find_redeliveries,
    find_skips,
    rebalance_windows,
)
from spark_jobs.inputs import Inputs
from spark_jobs.plan import collect_tables
from spark_jobs.result import DEFAULT_MAX_EXAMPLES, CheckResult

GROUP_EVENTS = ("group_generation", "offset_commit", "rebalance_started", "group_rebalanced")
GROUP_EVENTS_SCHEMA = (
    "ts_ms LONG, broker_id INT, event STRING, group STRING, generation INT, member_id STRING, topic STRING, "
    "partition INT, offset LONG, state STRING, cause STRING, reason STRING, group_id STRING, "
    "generation_id INT, members STRING"
)
# ``members`` is kept as its JSON text: a group_generation's is a list of objects, a group_rebalanced's a
# list of member ids (one schema for both would null the lines of one kind).
NO_GROUP_NOTE = "no consumer group in this run (no group_generation or offset_commit event): nothing to judge"


class ConsumerFacts:
    """The collected rows both checks judge (read once per report: ``consumer_facts``)."""

    def __init__(
        self,
        generations: list[Generation],
        commits: list[Commit],
        starts: list[RebalanceStart],
        served: list[Served],
    ) -> None:
        self.generations = generations
        self.commits = commits
        self.starts = starts
        self.served = served
        self.crashes: list[Crash] | None = None

    @property
    def has_groups(self) -> bool:
        return bool(self.generations or self.commits)


# The last report's inputs and their facts (both checks of one report read them once).
_FACTS: list[tuple[Inputs, ConsumerFacts]] = []


def served_paths(inp: Inputs) -> list[str]:
    """Each broker's ``served.jsonl``: beside its ``client-activity.jsonl``."""
    out = []
    for p in inp.layout.activity_journals:
        served = Path(p).with_name(SERVED_FILE)
        if served.is_file() and os.path.getsize(served):
            out.append(str(served))
    return out


def group_events(inp: Inputs) -> DataFrame:
    spark = inp.journal.sparkSession
    paths = inp.layout.broker_journals
    if not paths:
        return spark.createDataFrame([], GROUP_EVENTS_SCHEMA)
    return spark.read.schema(GROUP_EVENTS_SCHEMA).json(paths).filter(F.col("event").isin(*GROUP_EVENTS))


def consumer_facts(inp: Inputs) -> ConsumerFacts:
    """The groups' generations, commits and rebalance starts, and what was served to consumers of the
    partitions groups committed or were assigned, from one Spark action."""
    if _FACTS and _FACTS[0][0] is inp:
        return _FACTS[0][1]
    spark = inp.journal.sparkSession
    ev = group_events(inp)
    paths = served_paths(inp)
    served = (
        spark.read.schema(SERVED_SCHEMA).json(paths).filter(F.col("client_id").isNotNull())
        if paths
        else spark.createDataFrame([], SERVED_SCHEMA)
    )
    got = collect_tables(
        {
            "generations": ev.filter(F.col("event") == "group_generation").select(
                "ts_ms", "group", "generation", "members"
            ),
            "commits": ev.filter(F.col("event") == "offset_commit").select(
                "ts_ms", "group", "generation", "member_id", "topic", "partition", "offset"
            ),
            "starts": ev.filter(F.col("event") == "rebalance_started").select(
                "ts_ms", "group", "generation", "cause", "reason"
            ),
            # A rebalance that ends with every member gone: the group Empty, no group_generation.
            "emptied": ev.filter((F.col("event") == "group_rebalanced") & (F.col("state") == "Empty")).select(
                "ts_ms", "group_id", "generation_id"
            ),
            "served": served.select(
                "client_id", "topic", "partition", "ts_ms", "fetch_offset", "last_offset"
            ),
        }
    )
    generations = []
    for r in got["generations"]:
        members = [m for m in json.loads(r["members"] or "[]") if isinstance(m, dict)]
        generations.append(
            Generation(
                str(r["group"]),
                int(r["generation"]),
                int(r["ts_ms"]),
                frozenset(str(m.get("client_id")) for m in members),
                tuple(
                    (str(m.get("client_id")), str(topic), int(p))
                    for m in members
                    for topic, parts in (m.get("assignment") or {}).items()
                    for p in parts or []
                ),
            )
        )
    commits = [
        Commit(
            str(r["group"]),
            int(r["generation"] if r["generation"] is not None else -1),
            str(r["member_id"] or ""),
            str(r["topic"]),
            int(r["partition"]),
            int(r["offset"]),
            int(r["ts_ms"]),
        )
        for r in got["commits"]
        if r["topic"] is not None and r["offset"] is not None
    ]
    generations += [
        Generation(str(r["group_id"]), int(r["generation_id"]), int(r["ts_ms"]), frozenset())
        for r in got["emptied"]
    ]
    generations.sort(key=lambda g: (g.ts_ms, g.generation))
    starts = [
        RebalanceStart(
            str(r["group"]), int(r["generation"]), int(r["ts_ms"]), str(r["cause"]), str(r["reason"] or "")
        )
        for r in got["starts"]
    ]
    lines = [
        Served(
            str(r["client_id"]),
            str(r["topic"]),
            int(r["partition"]),
            int(r["ts_ms"]),
            int(r["fetch_offset"]),
            int(r["last_offset"]),
        )
        for r in got["served"]
    ]
    facts = ConsumerFacts(generations, commits, starts, lines)
    _FACTS[:] = [(inp, facts)]
    return facts


def broker_crashes(journal: DataFrame) -> list[Crash]:
    """Brokers that stopped without a clean stop: each one's last line before a ``broker_started`` that
    followed no clean ``broker_stopped``, and its last line of all when that is not a clean stop."""
    broker = journal.filter(F.col("source") == "broker").select("owner", "ts_ms", "seq", "event", "clean")
    w = W.partitionBy("owner").orderBy("ts_ms", "seq")
    clean_stop = (F.col("event") == "broker_stopped") & F.coalesce(F.col("clean"), F.lit(False))
    marked = broker.withColumn("was_clean_stop", F.lag(clean_stop).over(w)).withColumn(
        "prev_ts", F.lag("ts_ms").over(w)
    )
    restarts = marked.filter(
        (F.col("event") == "broker_started")
        & F.col("prev_ts").isNotNull()
        & ~F.coalesce(F.col("was_clean_stop"), F.lit(False))
    ).select("owner", F.col("prev_ts").alias("last_seen"))
    last = broker.groupBy("owner").agg(
        F.max_by(clean_stop, F.struct("ts_ms", "seq")).alias("clean_end"), F.max("ts_ms").alias("last_seen")
    )
    got = collect_tables(
        {
            "restarts": restarts,
            "ends": last.filter(~F.coalesce(F.col("clean_end"), F.lit(False))).select("owner", "last_seen"),
        }
    )
    return [
        Crash(int(r["owner"]), int(r["last_seen"]))
        for r in got["restarts"] + got["ends"]
        if r["owner"] is not None
    ]


def phrase_no_skip(found: SkipFindings, has_groups: bool, max_examples: int) -> CheckResult:
    notes: list[str] = []
    if not has_groups:
        notes.append(NO_GROUP_NOTE)
    else:
        notes.append(
            f"{found.checked} acknowledged commit(s) of {len(found.groups)} group(s) judged: "
            f"{found.offsets_judged:,} committed-past offset(s) compared with what was served to the "
            "group's members before each commit"
        )
    if found.unjudged_first:
        notes.append(
            f"{found.unjudged_first} first commit(s) of a group for a partition not judged: nothing was "
            "served to the group for it before (its start position is unknown)"
        )
    if found.loose:
        notes.append(
            f"{found.loose} commit(s) made outside a known generation (a consumer without a group, or a "
            "generation not journaled): what was served to any client counted for them"
        )
    if found.unproven:
        n = sum(s.records_skipped for s in found.unproven)
        first = found.unproven[0]
        notes.append(
            f"{len(found.unproven)} gap(s) ({n:,} offsets) not counted: a broker stopped uncleanly during "
            f"them and may have lost its last second of served.jsonl (first: group {first.group}, "
            f"{first.topic}-{first.partition} offsets {first.first_missing}-{first.last_missing})"
        )
    skips = sorted(found.skips, key=lambda s: (s.ts_ms, s.group, s.topic, s.partition))
    return CheckResult(
        "consumer_no_skip",
        "No consumer group committed past a record it was not served",
        "A group's committed offset for a partition never passes an offset that was not served, before the "
        "commit, to a client of the group (a client id of the members of the commit's generation): from the "
        "group's previous commit for the partition (for the first, from the lowest offset served to it) up "
        "to the committed offset, every offset was in a FETCH response to such a client (served.jsonl). A "
        "skipped offset is a record the group can never process.",
        passed=not skips,
        violations=len(skips),
        examples=[s.as_row() for s in skips[:max_examples]],
        notes=notes,
        checked=found.checked if has_groups else None,
    )


def check_consumer_no_skip(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    facts = consumer_facts(inp)
    found = find_skips(facts.commits, facts.served, facts.generations)
    if found.skips:
        # Only now the brokers' crashes: a gap during one may be a served line lost with the broker.
        found = find_skips(facts.commits, facts.served, facts.generations, broker_crashes(inp.journal))
    return phrase_no_skip(found, facts.has_groups, max_examples)


def check_consumer_redelivery(inp: Inputs, max_examples: int = DEFAULT_MAX_EXAMPLES) -> CheckResult:
    facts = consumer_facts(inp)
    deliveries = find_redeliveries(facts.served, facts.generations, max_examples)
    windows = rebalance_windows(facts.starts, facts.generations)
    served = sum(d.served_offsets for d in deliveries)
    again = sum(d.redelivered for d in deliveries)
    notes = [NO_GROUP_NOTE] if not facts.has_groups else []
    if facts.has_groups:
        after = sum(d.redelivered_after_rebalance for d in deliveries)
        notes.append(
            f"{served:,} offset(s) served to {len(deliveries)} group(s); {again:,} served to the same group "
            f"again ({after:,} of them after a rebalance, in a later generation): at-least-once delivery, "
            f"not a violation; {len(windows)} rebalance window(s)"
        )
    examples: list[dict[str, Any]] = []
    for d in deliveries:
        examples.extend(d.examples)
    extra: dict[str, list[dict[str, Any]]] = {}
    if facts.has_groups:
        extra["groups"] = [_group_row(d.as_row(), windows) for d in deliveries]
        extra["rebalance_windows"] = windows
        extra["redelivered"] = sorted(examples, key=lambda r: r["ts_ms"])[:max_examples]
    return CheckResult(
        "consumer_redelivery",
        "Records served to a consumer group again (counted, not a violation)",
        "Offsets served to a group more than once (a FETCH response to a client of the group's generation in "
        "force), and apart those served again in a later generation than the first time: what a rebalance "
        "redelivers to a group that had not committed them. At-least-once delivery: processing must be "
        "idempotent. Per group, its rebalance windows: from a member's join, loss or change "
        "(rebalance_started) to the next completed SyncGroup (group_generation).",
        passed=True,
        violations=0,
        notes=notes,
        extra=extra,
        checked=served if facts.has_groups else None,
    )


def _group_row(row: dict[str, Any], windows: list[dict[str, Any]]) -> dict[str, Any]:
    mine = [w for w in windows if w["group"] == row["group"]]
    longest = max((w["seconds"] for w in mine if w["seconds"] is not None), default=None)
    return {**row, "rebalances": len(mine), "longest_rebalance_s": longest}


__all__ = [
    "ConsumerFacts",
    "broker_crashes",
    "check_consumer_no_skip",
    "check_consumer_redelivery",
    "consumer_facts",
    "group_events",
    "served_paths",
]
