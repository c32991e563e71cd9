"""What consumer groups were served and what they committed, judged in plain Python (SPEC §13; docs/report.md,
"Consumers"). ``consumer_checks`` reads the journals with Spark and hands the rows here; the tests hand in
small made-up ones.

- **Skips** (``consumer_no_skip``): a group's committed offset for a partition passes only offsets that were
  served, before the commit, to a client of the group: a client id among the members of the generation the
  commit was made in (any client for a commit outside a group, generation -1, or a generation the journals
  do not describe). The offsets judged for a commit run from the group's previous acknowledged commit for
  the partition (for its first one, from the lowest offset served to such a client before it: where
  ``auto.offset.reset`` or a seek put the consumer) up to the committed offset. An offset in that range that
  no such fetch carried is a record the group can never process.
- **Redeliveries** (``consumer_redelivery``): offsets of a partition served to a group again, counted per
  group, and apart those served again in a later generation than the first time (after a rebalance).
  At-least-once delivery, not a violation.
- **Rebalance windows**: from a group's ``rebalance_started`` (a member joined, left, expired or changed) to
  its next ``group_generation`` (the leader's SyncGroup stored, the group Stable again).

A broker journals what it served once a second, so one killed with ``kill -9`` may lose its last second of
``served.jsonl``: a gap in the service of a partition during which a broker crashed is not evidence of a
skip. Such a gap is reported as ``unproven`` (in the notes), not as a violation.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

TP = tuple[str, int]
# A gap this close after a broker's last sign of life may be a served line lost with that broker.
CRASH_SLACK_MS = 1500


@dataclass(frozen=True)
class Served:
    """One ``served.jsonl`` line: ``client_id`` was sent ``fetch_offset..last_offset`` at ``ts_ms``."""

    client_id: str
    topic: str
    partition: int
    ts_ms: int
    fetch_offset: int
    last_offset: int


@dataclass(frozen=True)
class Commit:
    """One ``offset_commit`` event: acknowledged at ``ts_ms`` by the coordinator."""

    group: str
    generation: int
    member_id: str
    topic: str
    partition: int
    offset: int
    ts_ms: int


@dataclass(frozen=True)
class Generation:
    """One ``group_generation`` event: the generation's members' client ids and who was assigned what (no
    client: the rebalance left the group Empty, its ``group_rebalanced`` event)."""

    group: str
    generation: int
    ts_ms: int
    clients: frozenset[str]
    assignment: tuple[tuple[str, str, int], ...] = ()  # (client_id, topic, partition)


@dataclass(frozen=True)
class RebalanceStart:
    group: str
    generation: int
    ts_ms: int
    cause: str
    reason: str


@dataclass(frozen=True)
class Crash:
    """A broker that stopped without a clean stop: its last journal line at ``last_seen_ms``."""

    broker: int
    last_seen_ms: int


@dataclass
class Skip:
    group: str
    topic: str
    partition: int
    generation: int
    member_id: str
    committed_offset: int
    ts_ms: int
    first_missing: int
    last_missing: int
    records_skipped: int
    clients: list[str]

    def as_row(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "partition": self.partition,
            "generation": self.generation,
            "member_id": self.member_id,
            "committed_offset": self.committed_offset,
            "ts_ms": self.ts_ms,
            "first_missing": self.first_missing,
            "last_missing": self.last_missing,
            "offsets_never_served": self.records_skipped,
            "clients": ", ".join(self.clients) if self.clients else "any",
        }


@dataclass
class SkipFindings:
    skips: list[Skip] = field(default_factory=list)
    checked: int = 0  # commits judged
    offsets_judged: int = 0
    unjudged_first: int = 0  # first commits with nothing served before them
    unproven: list[Skip] = field(default_factory=list)  # gaps in which a broker crashed
    loose: int = 0  # commits judged against any client (no generation known)
    groups: set[str] = field(default_factory=set)


def _uncovered(lo: int, hi: int, spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``lo..hi`` (inclusive) no span covers."""
    gaps: list[tuple[int, int]] = []
    at = lo
    for a, b in sorted(spans):
        if b < at:
            continue
        if a > hi:
            break
        if a > at:
            gaps.append((at, a - 1))
        at = max(at, b + 1)
        if at > hi:
            break
    if at <= hi:
        gaps.append((at, hi))
    return gaps


def _crash_near(crashes: list[Crash], start_ms: int, end_ms: int) -> bool:
    return any(start_ms - CRASH_SLACK_MS <= c.last_seen_ms <= end_ms for c in crashes)


def find_skips(
    commits: Iterable[Commit],
    served: Iterable[Served],
    generations: Iterable[Generation],
    crashes: Iterable[Crash] = (),
) -> SkipFindings:
    """Every acknowledged commit judged against what was served before it (see the module's text)."""
    members = {(g.group, g.generation): g.clients for g in generations}
    by_tp: dict[TP, list[Served]] = defaultdict(list)
    for s in served:
        by_tp[(s.topic, s.partition)].append(s)
    for lines in by_tp.values():
        lines.sort(key=lambda s: s.ts_ms)
    times = {tp: [s.ts_ms for s in lines] for tp, lines in by_tp.items()}
    crash_list = list(crashes)
    out = SkipFindings()
    by_key: dict[tuple[str, str, int], list[Commit]] = defaultdict(list)
    for c in commits:
        by_key[(c.group, c.topic, c.partition)].append(c)
    for (group, topic, partition), group_commits in sorted(by_key.items()):
        out.groups.add(group)
        tp = (topic, partition)
        lines = by_tp.get(tp, [])
        prev: int | None = None
        prev_ts: int | None = None
        for c in sorted(group_commits, key=lambda c: (c.ts_ms, c.offset)):
            clients = members.get((group, c.generation)) if c.generation >= 0 else None
            if clients is None:
                out.loose += 1
            before = lines[: bisect.bisect_right(times.get(tp, []), c.ts_ms)]
            mine = [s for s in before if clients is None or s.client_id in clients]
            start = prev
            if start is None:
                start = min((s.fetch_offset for s in mine), default=None)
            if start is None:
                out.unjudged_first += 1
                prev, prev_ts = c.offset, c.ts_ms
                continue
            out.checked += 1
            if c.offset > start:
                out.offsets_judged += c.offset - start
                spans = [(s.fetch_offset, s.last_offset) for s in mine]
                for lo, hi in _uncovered(start, c.offset - 1, spans):
                    served_below = [s.ts_ms for s in mine if s.last_offset < lo]
                    since = max(served_below, default=prev_ts if prev_ts is not None else c.ts_ms)
                    skip = Skip(
                        group,
                        topic,
                        partition,
                        c.generation,
                        c.member_id,
                        c.offset,
                        c.ts_ms,
                        lo,
                        hi,
                        hi - lo + 1,
                        sorted(clients) if clients is not None else [],
                    )
                    (out.unproven if _crash_near(crash_list, since, c.ts_ms) else out.skips).append(skip)
            prev, prev_ts = c.offset, c.ts_ms
    return out


@dataclass
class GroupDelivery:
    """What one group was served: offsets served (with repeats), distinct offsets, and the repeats."""

    group: str
    served_offsets: int = 0
    distinct_offsets: int = 0
    redelivered: int = 0
    redelivered_after_rebalance: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def as_row(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "offsets_served": self.served_offsets,
            "distinct_offsets": self.distinct_offsets,
            "redelivered": self.redelivered,
            "redelivered_after_rebalance": self.redelivered_after_rebalance,
        }


class _Seen:
    """Disjoint inclusive spans of offsets, each with the generation it was first served in."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int, int]] = []

    def add(self, lo: int, hi: int, generation: int) -> dict[int, int]:
        """Marks ``lo..hi`` served in ``generation``; how many of them were already served, per the
        generation they were first served in."""
        again: dict[int, int] = defaultdict(int)
        kept: list[tuple[int, int, int]] = []
        for a, b, g in self.spans:
            if b >= lo and a <= hi:
                again[g] += min(b, hi) - max(a, lo) + 1
            kept.append((a, b, g))
        for gap_lo, gap_hi in _uncovered(lo, hi, [(a, b) for a, b, _ in kept]):
            kept.append((gap_lo, gap_hi, generation))
        kept.sort()
        merged: list[tuple[int, int, int]] = []
        for a, b, g in kept:
            if merged and merged[-1][2] == g and merged[-1][1] + 1 >= a:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b), g)
            else:
                merged.append((a, b, g))
        self.spans = merged
        return again

    def size(self) -> int:
        return sum(b - a + 1 for a, b, _ in self.spans)


def generation_at(gens: list[Generation], ts_ms: int) -> Generation | None:
    """The group's generation in force at ``ts_ms``: the last journaled at or before it (``gens`` in
    journal order)."""
    i = bisect.bisect_right([g.ts_ms for g in gens], ts_ms)
    return gens[i - 1] if i else None


def find_redeliveries(
    served: Iterable[Served], generations: Iterable[Generation], max_examples: int = 20
) -> list[GroupDelivery]:
    """Per group, the offsets served to it more than once (a line is the group's when its client id is a
    member of the group's generation in force when it was served)."""
    per_group: dict[str, list[Generation]] = defaultdict(list)
    for gen in generations:
        per_group[gen.group].append(gen)
    for gens in per_group.values():
        gens.sort(key=lambda x: (x.ts_ms, x.generation))
    lines = sorted(served, key=lambda s: s.ts_ms)
    out: list[GroupDelivery] = []
    for group, gens in sorted(per_group.items()):
        d = GroupDelivery(group)
        seen: dict[TP, _Seen] = defaultdict(_Seen)
        for s in lines:
            g = generation_at(gens, s.ts_ms)
            if g is None or s.client_id not in g.clients:
                continue
            d.served_offsets += s.last_offset - s.fetch_offset + 1
            again = seen[(s.topic, s.partition)].add(s.fetch_offset, s.last_offset, g.generation)
            n = sum(again.values())
            if not n:
                continue
            after = sum(v for first, v in again.items() if first < g.generation)
            d.redelivered += n
            d.redelivered_after_rebalance += after
            if len(d.examples) < max_examples:
                d.examples.append(
                    {
                        "group": group,
                        "topic": s.topic,
                        "partition": s.partition,
                        "client_id": s.client_id,
                        "generation": g.generation,
                        "ts_ms": s.ts_ms,
                        "fetch_offset": s.fetch_offset,
                        "last_offset": s.last_offset,
                        "served_again": n,
                        "first_served_in_generation": min(again),
                    }
                )
        d.distinct_offsets = sum(x.size() for x in seen.values())
        out.append(d)
    return out


def rebalance_windows(
    starts: Iterable[RebalanceStart], generations: Iterable[Generation]
) -> list[dict[str, Any]]:
    """Per group, each rebalance: from its first ``rebalance_started`` after the last completed generation
    to the next ``group_generation`` (or the group left Empty). ``start_ts``/``end_ts`` in epoch ms;
    ``end_ts`` None: not completed by the end of the journals."""
    events: list[tuple[int, int, str, Any]] = []
    for s in starts:
        events.append((s.ts_ms, 0, s.group, s))
    for g in generations:
        events.append((g.ts_ms, 1, g.group, g))
    events.sort(key=lambda e: (e[0], e[1]))
    open_: dict[str, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for ts, kind, group, ev in events:
        if kind == 0:
            if group not in open_:
                open_[group] = {
                    "group": group,
                    "from_generation": ev.generation,
                    "to_generation": None,
                    "start_ts": ts,
                    "end_ts": None,
                    "seconds": None,
                    "cause": ev.cause,
                    "reason": ev.reason,
                    "clients": None,
                }
        elif group in open_:
            w = open_.pop(group)
            w["end_ts"] = ts
            w["to_generation"] = ev.generation
            w["seconds"] = round((ts - w["start_ts"]) / 1000, 3)
            w["clients"] = len(ev.clients)
            out.append(w)
    out.extend(open_.values())
    return sorted(out, key=lambda w: (w["group"], w["start_ts"]))


__all__ = [
    "Commit",
    "Crash",
    "Generation",
    "GroupDelivery",
    "RebalanceStart",
    "Served",
    "Skip",
    "SkipFindings",
    "find_redeliveries",
    "find_skips",
    "generation_at",
    "rebalance_windows",
]
