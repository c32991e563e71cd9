"""Fault windows and the time the cluster took to converge after each one.

A **fault window** is a stretch of time during which something was broken: a fault the CLI applied
(``faults.jsonl``, see ``fault_log``), or one seen only in the journals (a broker that stopped or crashed and
started again, a broker the controller fenced and unfenced) when no CLI fault of the same node covers it.

**Converged** means: every replica that should be in the ISR is in it. The replicas that should be in a
partition's ISR are its assigned replicas (the brokers holding a replica of it). Kafka admits a follower
back into the ISR only once its LEO has reached the leader's high watermark (``isr_changed``, reason
``follower_caught_up``), so a full ISR is also a caught-up one; the ISR is taken from ``became_leader``,
``isr_changed`` and ``leader_elected`` events, ignoring one whose leader epoch is older than the latest seen
for the partition (a deposed leader's late word).

**Time to converge** after a window that ended at ``end`` (a heal, a restart, a resume): the moment from
which the ISRs stay full up to the start of the next fault (or the final stop), minus ``end``; 0 if they
never stopped being full; ``None`` if they were not full when the next fault began (or when the final stop
began). The final stop (``cluster down``: controlled shutdowns shrink every ISR) and what follows it are
not looked at. Per partition the same, with that partition's ISR and the faults that touched it; overall,
after the end of the last fault, with every partition's ISR.

Everything here is plain Python over the journal's ISR and life-cycle events (a few per fault), collected
once on the driver by ``collect_events``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from protocol import FAULT_RULES, NETWORK, PROCESS, FaultAction
from spark_jobs.fault_log import FaultBand

ISR_EVENTS = ("became_leader", "isr_changed", "leader_elected")
# How long after a killed broker's restart its fencing still counts as the kill's (broker.session.timeout.ms,
# Kafka's default: a broker that re-registers is fenced until it has caught up, well within it).
KILL_FENCING_MS = 9_000
LIFE_EVENTS = ("broker_started", "broker_stopped", "broker_shutting_down", "broker_fenced", "broker_unfenced")
# The controllers' own: who the active controller (the quorum leader) is, and when there is none.
QUORUM_EVENTS = ("quorum_state", "controller_started", "controller_stopped")
TPKey = tuple[str, int]


@dataclass(frozen=True)
class Event:
    """One journal line, reduced to what the timelines and the convergence need."""

    ts_ms: int
    seq: int
    source: str  # "broker" or "controller"
    owner: int | None  # the broker (or controller) that wrote it
    event: str
    topic: str | None = None
    partition: int | None = None
    leader_epoch: int | None = None
    leader: int | None = None  # leader_elected's leader_id; a broker's became_leader: the broker itself
    isr: tuple[int, ...] | None = None
    old_isr: tuple[int, ...] | None = None
    broker_id: int | None = None  # the broker a controller event is about (broker_fenced ...)
    clean: bool | None = None
    # The writer's last line at an earlier millisecond (a crashed broker's last sign of life).
    prev_ts_ms: int | None = None
    role: str | None = None  # quorum_state: candidate / leader / follower / resigned (or unattached)
    epoch: int | None = None  # quorum_state: the quorum epoch

    @property
    def tp(self) -> TPKey | None:
        return None if self.topic is None or self.partition is None else (self.topic, self.partition)


@dataclass
class Window:
    """A fault window: ``label``, ``nodes`` (broker ids as strings, or "controller"), ``start_ms`` and
    ``end_ms`` (None: still in force at the end), where it came from (``faults.jsonl`` or ``journal``).
    ``controller``: the fault is the controller's (a node is "controller" or a voter's id): it touches every
    partition."""

    label: str
    action: str
    nodes: list[str]
    start_ms: int
    end_ms: int | None
    source: str
    converged_ms: int | None = None
    partitions: list[TPKey] = field(default_factory=list)
    ended_by: str | None = None
    controller: bool = False

    def touches(self, replicas: Iterable[int]) -> bool:
        return self.controller or "controller" in self.nodes or any(str(b) in self.nodes for b in replicas)


def voter_ids(events: Iterable[Event], known: Iterable[int] = ()) -> frozenset[int]:
    """The controllers' ids: every controller that journaled (and ``known``: cluster.json's, the
    controllers' directories)."""
    return frozenset(
        {int(e.owner) for e in events if e.source == "controller" and e.owner is not None} | set(known)
    )


def is_controller_node(node: str, voters: Iterable[int]) -> bool:
    """``node`` (as faults.jsonl names it) is the controller: "controller", or a voter's id."""
    return node == "controller" or (node.isdigit() and int(node) in set(voters))


def leaderless_periods(events: list[Event]) -> list[tuple[int, int | None]]:
    """The stretches with no active controller, from the voters' ``quorum_state`` journals: from when the
    quorum leader of an epoch stopped being it (its own journal: another role, a stop or a restart; or any
    voter standing as candidate in a later epoch, as the others do once a killed or paused leader goes
    silent) to the next ``role: leader``; and from the controllers' first line to the first leader. An
    open one has no end (None). Nothing without quorum_state lines (a single controller)."""
    ctrl = [e for e in events if e.source == "controller" and e.event in QUORUM_EVENTS]
    if not any(e.event == "quorum_state" for e in ctrl):
        return []
    out: list[tuple[int, int | None]] = []
    leader: tuple[int | None, int] | None = None
    since: int | None = ctrl[0].ts_ms
    for e in ctrl:
        if e.event == "quorum_state" and e.role == "leader":
            if since is not None:
                out.append((since, e.ts_ms))
                since = None
            leader = (e.owner, e.epoch or 0)
            continue
        if leader is None:
            continue
        voter, epoch = leader
        own = e.owner == voter and (e.event != "quorum_state" or e.role != "leader")
        newer = e.event == "quorum_state" and e.role == "candidate" and (e.epoch or 0) > epoch
        if own or newer:
            since, leader = e.ts_ms, None
    if since is not None:
        out.append((since, None))
    return out


def active_controller_at(events: list[Event], ts_ms: int) -> int | None:
    """The voter that was the quorum leader at ``ts_ms`` (its last ``role: leader`` before it, unless the
    quorum had no leader then)."""
    leader: int | None = None
    for e in events:
        if e.ts_ms > ts_ms:
            break
        if e.source == "controller" and e.event == "quorum_state" and e.role == "leader":
            leader = e.owner
    if leader is None:
        return None
    for start, end in leaderless_periods(events):
        if start <= ts_ms and (end is None or ts_ms < end):
            return None
    return leader


def controller_fault(w: Window, events: list[Event], voters: Iterable[int]) -> bool:
    """``w`` cut the cluster off its active controller: a network fault on "controller" or a voter, or a
    kill, term or pause of the voter that was the active controller when it began."""
    on_voter = [n for n in w.nodes if is_controller_node(n, voters)]
    if not on_voter:
        return False
    rule = FAULT_RULES.get(w.action)
    if rule is not None and rule.family == NETWORK:
        return True
    if rule is not None and rule.family == PROCESS:
        active = active_controller_at(events, w.start_ms)
        return "controller" in on_voter or (active is not None and str(active) in on_voter)
    return False


def collect_events(journal: Any) -> list[Event]:
    """The ISR and life-cycle events of the journal DataFrame (source, owner, ts_ms, seq, ...), in order."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    # The writer's last line at an earlier millisecond: a restarted broker may write a few lines (its
    # leaderships) in the millisecond of its broker_started, which belong to the new process.
    before = W.partitionBy("source", "owner").orderBy("ts_ms").rangeBetween(W.unboundedPreceding, -1)
    rows = (
        journal.withColumn("prev_ts_ms", F.max("ts_ms").over(before))
        .filter(F.col("event").isin(*ISR_EVENTS, *LIFE_EVENTS, *QUORUM_EVENTS))
        .select(
            "ts_ms",
            "seq",
            "source",
            "owner",
            "event",
            "topic",
            "partition",
            "leader_epoch",
            "leader_id",
            "isr",
            "old_isr",
            "broker_id",
            "clean",
            "prev_ts_ms",
            "role",
            "epoch",
        )
        .collect()
    )
    out = []
    for r in rows:
        leader = r["leader_id"]
        if r["source"] == "broker" and r["event"] == "became_leader":
            leader = r["owner"]
        out.append(
            Event(
                ts_ms=int(r["ts_ms"]),
                seq=int(r["seq"]),
                source=str(r["source"]),
                owner=r["owner"],
                event=str(r["event"]),
                topic=r["topic"],
                partition=r["partition"],
                leader_epoch=r["leader_epoch"],
                leader=leader,
                isr=None if r["isr"] is None else tuple(int(b) for b in r["isr"]),
                old_isr=None if r["old_isr"] is None else tuple(int(b) for b in r["old_isr"]),
                broker_id=r["broker_id"],
                clean=r["clean"],
                prev_ts_ms=r["prev_ts_ms"],
                role=r["role"],
                epoch=r["epoch"],
            )
        )
    return sorted(out, key=lambda e: (e.ts_ms, e.seq))


def events_from_records(records: list[dict[str, Any]]) -> list[Event]:
    """Journal lines as written (``broker_id`` or ``controller_id`` names the writer; each writer's lines in
    the order written) as ``Event``s, in order. For tests and small tools; the report uses
    ``collect_events``."""
    last: dict[tuple[str, Any], int] = {}  # writer -> ts of its latest line
    earlier: dict[tuple[str, Any], int] = {}  # writer -> ts of its latest line before that millisecond
    out: list[Event] = []
    for seq, rec in enumerate(records):
        if not isinstance(rec.get("ts_ms"), int):
            continue
        writer = (
            ("controller", rec["controller_id"])
            if "controller_id" in rec
            else ("broker", rec.get("broker_id"))
        )
        if writer in last and last[writer] < rec["ts_ms"]:
            earlier[writer] = last[writer]
        e = event_from_record(rec, seq, earlier.get(writer))
        last[writer] = rec["ts_ms"]
        if e is not None:
            out.append(e)
    return sorted(out, key=lambda e: (e.ts_ms, e.seq))


def event_from_record(rec: dict[str, Any], seq: int, prev_ts_ms: int | None = None) -> Event | None:
    """One journal line as an ``Event``; None for an event of no interest here."""
    if rec.get("event") not in (*ISR_EVENTS, *LIFE_EVENTS, *QUORUM_EVENTS) or not isinstance(
        rec.get("ts_ms"), int
    ):
        return None
    source = "controller" if "controller_id" in rec else "broker"
    owner = rec.get("controller_id") if source == "controller" else rec.get("broker_id")
    leader = owner if source == "broker" and rec["event"] == "became_leader" else rec.get("leader_id")
    isr, old = rec.get("isr"), rec.get("old_isr")
    return Event(
        ts_ms=rec["ts_ms"],
        seq=seq,
        source=source,
        owner=owner,
        event=rec["event"],
        topic=rec.get("topic"),
        partition=rec.get("partition"),
        leader_epoch=rec.get("leader_epoch"),
        leader=leader,
        isr=None if isr is None else tuple(isr),
        old_isr=None if old is None else tuple(old),
        broker_id=rec.get("broker_id") if source == "controller" else None,
        clean=rec.get("clean"),
        prev_ts_ms=prev_ts_ms,
        role=rec.get("role"),
        epoch=rec.get("epoch"),
    )


def final_stop_ms(events: list[Event]) -> int | None:
    """When the final stop began: the first controlled shutdown (or clean ``broker_stopped``) after the last
    ``broker_started``; None if the cluster never stopped cleanly."""
    starts = [e.ts_ms for e in events if e.source == "broker" and e.event == "broker_started"]
    if not starts:
        return None
    last = max(starts)
    for e in events:
        if e.ts_ms <= last:
            continue
        if e.event == "broker_shutting_down" or (e.event == "broker_stopped" and e.clean):
            return e.ts_ms
    return None


def journal_windows(events: list[Event], bands: list[FaultBand], until_ms: int | None) -> list[Window]:
    """Faults seen only in the journals: a broker down (from its last line before a restart, or its clean
    stop, to its ``broker_started``) and a broker fenced by the controller (to ``broker_unfenced``). One is
    left out when the CLI applied it: a crash or stop overlapped by a CLI ``kill``/``term`` of the broker,
    a fencing overlapped by any CLI fault of the broker, either overlapped by another journal window of it
    (a crashed broker is also fenced)."""
    found: list[Window] = []
    last_seen: dict[int, int] = {}
    life: dict[int, str] = {}
    stopped_at: dict[int, int] = {}
    fenced_at: dict[int, int] = {}
    for e in events:
        if until_ms is not None and e.ts_ms >= until_ms:
            break
        if e.source == "broker" and e.owner is not None:
            b = e.owner
            if e.event == "broker_started":
                if life.get(b) == "broker_started":
                    down = e.prev_ts_ms if e.prev_ts_ms is not None else last_seen.get(b, e.ts_ms)
                    found.append(
                        Window(
                            f"crash {b}",
                            "crash",
                            [str(b)],
                            down,
                            e.ts_ms,
                            "journal",
                            ended_by="restart",
                        )
                    )
                elif life.get(b) == "broker_stopped" and b in stopped_at:
                    found.append(
                        Window(
                            f"stop {b}",
                            "stop",
                            [str(b)],
                            stopped_at[b],
                            e.ts_ms,
                            "journal",
                            ended_by="restart",
                        )
                    )
                life[b] = "broker_started"
            elif e.event in ("broker_shutting_down", "broker_stopped"):
                if life.get(b) != "broker_stopped":
                    stopped_at.setdefault(b, e.ts_ms)
                if e.event == "broker_stopped":
                    life[b] = "broker_stopped"
            if e.event == "broker_started":
                stopped_at.pop(b, None)
            last_seen[b] = e.ts_ms
        elif e.source == "controller" and e.broker_id is not None:
            if e.event == "broker_fenced":
                fenced_at.setdefault(e.broker_id, e.ts_ms)
            elif e.event == "broker_unfenced" and e.broker_id in fenced_at:
                b = e.broker_id
                found.append(
                    Window(
                        f"fenced {b}",
                        "fenced",
                        [str(b)],
                        fenced_at.pop(b),
                        e.ts_ms,
                        "journal",
                        ended_by="unfenced",
                    )
                )
    for b, ts in fenced_at.items():
        found.append(Window(f"fenced {b}", "fenced", [str(b)], ts, None, "journal"))
    for b, ts in stopped_at.items():  # stopped (or halted) and not started again before the end
        if life.get(b) == "broker_stopped":
            found.append(Window(f"stop {b}", "stop", [str(b)], ts, None, "journal"))
    cli = [
        Window(band.label, band.action, band.nodes, band.start_ms, band.end_ms, "faults.jsonl")
        for band in bands
        if not band.instant
    ]
    kept: list[Window] = []
    for w in sorted(found, key=lambda w: (w.start_ms, w.label)):
        # A crash or stop is the CLI's kill/term of that broker when one overlaps it; a fencing is the
        # consequence of any CLI fault of that broker in force then (a kill, a pause, an isolation ...).
        same = [o for o in cli if w.action == "fenced" or o.action in (FaultAction.KILL, FaultAction.TERM)]
        if any(_overlap(w, o) and set(w.nodes) & set(o.nodes) for o in [*same, *kept]):
            continue
        kept.append(w)
    return kept


def _overlap(a: Window, b: Window) -> bool:
    a_end = a.end_ms if a.end_ms is not None else 2**62
    b_end = b.end_ms if b.end_ms is not None else 2**62
    return a.start_ms <= b_end and b.start_ms <= a_end


def fault_windows(
    events: list[Event], bands: list[FaultBand], until_ms: int | None, voters: Iterable[int] = ()
) -> list[Window]:
    """Every window: the CLI's (``faults.jsonl``, instants left out) and the journals' own, by start. A
    window on "controller" or on a voter (``voters``, and every controller that journaled) is the
    controller's."""
    ids = voter_ids(events, voters)
    cli = [
        Window(
            band.label,
            band.action,
            list(band.nodes),
            band.start_ms,
            band.end_ms,
            "faults.jsonl",
            ended_by=band.ended_by,
            controller=any(is_controller_node(n, ids) for n in band.nodes),
        )
        for band in bands
        if not band.instant and (until_ms is None or band.start_ms < until_ms)
    ]
    journal = _fencing_joins_its_kill(cli, journal_windows(events, bands, until_ms))
    return sorted([*cli, *journal], key=lambda w: (w.start_ms, w.label))


def _fencing_joins_its_kill(cli: list[Window], journal: list[Window]) -> list[Window]:
    """A broker killed (or stopped) and restarted at once registers again fenced, and the controller
    unfences it once it has caught up: a fencing that begins within ``KILL_FENCING_MS`` after a CLI
    kill/term of the broker ended, with no other CLI fault of it in between, is that kill's tail. The kill's
    window is extended to the unfencing (one fault per action: its effects show under the kill), and the
    fencing is no window of its own."""
    kept: list[Window] = []
    for w in journal:
        if w.action != "fenced":
            kept.append(w)
            continue
        node = w.nodes[0]
        before = [o for o in cli if node in o.nodes and o.start_ms <= w.start_ms]
        last = max(before, key=lambda o: o.start_ms, default=None)
        if (
            last is None
            or last.action not in (FaultAction.KILL, FaultAction.TERM)
            or last.end_ms is None
            or w.start_ms - last.end_ms > KILL_FENCING_MS
        ):
            kept.append(w)
            continue
        last.end_ms = None if w.end_ms is None else max(last.end_ms, w.end_ms)
        last.ended_by = w.ended_by
    return kept


@dataclass
class IsrHistory:
    """Per partition, the ISR over time (``changes``: (ts_ms, isr)) and the replicas that should be in it."""

    replicas: dict[TPKey, tuple[int, ...]]
    changes: dict[TPKey, list[tuple[int, frozenset[int]]]]

    def full_since(self, tps: Iterable[TPKey], at_ms: int) -> int | None:
        """Since when every partition of ``tps`` has had a full ISR, continuously until ``at_ms``; None if one
        of them is not full just before ``at_ms``. With no ISR change at all, full since the beginning (0)."""
        since = 0
        for tp in tps:
            want = set(self.replicas.get(tp, ()))
            start = 0
            full = True
            for ts, isr in self.changes.get(tp, []):
                if ts >= at_ms:
                    break
                now_full = want <= isr
                if now_full and not full:
                    start = ts
                full = now_full
            if not full:
                return None
            since = max(since, start)
        return since


def isr_history(events: list[Event], replicas: dict[TPKey, tuple[int, ...]]) -> IsrHistory:
    changes: dict[TPKey, list[tuple[int, frozenset[int]]]] = defaultdict(list)
    epoch: dict[TPKey, int] = {}
    for e in events:
        tp = e.tp
        if tp is None or e.isr is None or e.event not in ISR_EVENTS:
            continue
        if e.leader_epoch is not None:
            if e.leader_epoch < epoch.get(tp, -1):
                continue
            epoch[tp] = e.leader_epoch
        changes[tp].append((e.ts_ms, frozenset(e.isr)))
    return IsrHistory(dict(replicas), dict(changes))


def _touched(w: Window, replicas: dict[TPKey, tuple[int, ...]]) -> list[TPKey]:
    return [tp for tp, rs in sorted(replicas.items()) if w.touches(rs)]


def converge(
    windows: list[Window], history: IsrHistory, until_ms: int
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Fill each window's ``converged_ms`` and return (per fault, overall, per partition) rows; times in
    epoch ms (the renderer shows them as seconds since the first event)."""
    tps = sorted(history.replicas)
    per_fault: list[dict[str, Any]] = []
    for i, w in enumerate(windows):
        w.partitions = _touched(w, history.replicas)
        if w.end_ms is None:
            w.converged_ms = None
            reason = "still in force at the end"
        else:
            nxt = min([o.start_ms for o in windows[i + 1 :] if o.start_ms > w.end_ms] + [until_ms])
            since = history.full_since(tps, nxt)
            w.converged_ms = None if since is None else max(since, w.end_ms)
            reason = (
                ""
                if since is not None
                else (
                    "an ISR was not full when the final stop began" if nxt == until_ms else "next fault began"
                )
            )
        per_fault.append(
            {
                "fault": w.label,
                "action": w.action,
                "nodes": list(w.nodes),
                "source": w.source,
                "ended_by": w.ended_by,
                "start_ms": w.start_ms,
                "end_ms": w.end_ms,
                "converged_ms": w.converged_ms,
                "time_to_converge_ms": None
                if w.converged_ms is None or w.end_ms is None
                else w.converged_ms - w.end_ms,
                "not_converged_because": reason or None,
                "partitions_touched": len(w.partitions),
            }
        )
    ended = [w.end_ms for w in windows if w.end_ms is not None]
    open_ = [w for w in windows if w.end_ms is None]
    last = max((w for w in windows if w.end_ms is not None), key=lambda w: w.end_ms or 0, default=None)
    overall: dict[str, Any] = {
        "last_fault_end_ms": max(ended) if ended else None,
        "last_fault": None
        if last is None
        else last.label + ("" if last.source == "faults.jsonl" else " (journal)"),
    }
    if not windows:
        overall.update(converged_ms=None, time_to_converge_ms=None, note="no fault in this run")
    elif open_:
        overall.update(
            converged_ms=None,
            time_to_converge_ms=None,
            note=f"{open_[0].label} was still in force at the end",
        )
    else:
        since = history.full_since(tps, until_ms)
        last_end = max(ended)
        conv = None if since is None else max(since, last_end)
        overall.update(
            converged_ms=conv,
            time_to_converge_ms=None if conv is None else conv - last_end,
            note=None if conv is not None else "an ISR was not full when the final stop began",
        )
    per_partition: list[dict[str, Any]] = []
    for tp in tps:
        mine = [w for w in windows if tp in w.partitions and w.end_ms is not None]
        last = max(mine, key=lambda w: w.end_ms or 0) if mine else None
        since = history.full_since([tp], until_ms)
        conv = None if since is None else (max(since, last.end_ms or 0) if last else since)
        per_partition.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "replicas": list(history.replicas[tp]),
                "last_fault": last.label if last else None,
                "last_fault_ts": last.start_ms if last else None,
                "last_fault_end_ts": last.end_ms if last else None,
                "converged_ts": conv,
                "time_to_converge_ms": None if last is None or conv is None else conv - (last.end_ms or 0),
            }
        )
    return per_fault, overall, per_partition


__all__ = [
    "Event",
    "IsrHistory",
    "Window",
    "collect_events",
    "converge",
    "event_from_record",
    "events_from_records",
    "fault_windows",
    "final_stop_ms",
    "isr_history",
    "journal_windows",
]
