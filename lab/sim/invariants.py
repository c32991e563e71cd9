"""The online invariants of ``isrsim sim explore`` (SPEC §15), checked on the live brokers of a simulated
run (every step: a tick of :data:`STEP_S` virtual seconds) and once at its end, after the faults stop and
every broker is back:

* ``one_leader_per_epoch``: never two brokers leading one partition in one leader epoch;
* ``hw_monotonic``: a leader's high watermark never moves back within its leader epoch;
* ``acked_not_lost``: every batch acknowledged to the acks=all producer is, at the end, in the partition
  leader's log at its offset with its CRC (KIP-101's lost write);
* ``replicas_match``: below the smallest high watermark of a partition's replicas, their batches (offsets
  and CRCs) are the same (KIP-279's divergence).

They read the brokers' objects (duck-typed: ``replica_manager.partitions``, a ``Partition``'s
``is_leader``, ``leader_epoch``, ``high_watermark``, ``log``); they change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from protocol import iter_batches

STEP_S = 0.05


@dataclass
class Violation:
    invariant: str
    ts_ms: int
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant} at {self.ts_ms} ms: {self.detail}"


@dataclass
class AckedBatch:
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    crc: int


@dataclass
class OnlineInvariants:
    violations: list[Violation] = field(default_factory=list)
    steps: int = 0
    _hw: dict[tuple[int, tuple[str, int]], tuple[int, int]] = field(default_factory=dict)
    _leaders: dict[tuple[tuple[str, int], int], int] = field(default_factory=dict)

    def _fail(self, invariant: str, ts_ms: int, detail: str) -> None:
        if not any(v.invariant == invariant and v.detail == detail for v in self.violations):
            self.violations.append(Violation(invariant, ts_ms, detail))

    def step(self, ts_ms: int, brokers: Iterable[tuple[int, Any]]) -> None:
        """One look at every live broker (``(broker id, its replica manager)``)."""
        self.steps += 1
        for broker_id, replica_manager in brokers:
            for tp, partition in sorted(replica_manager.partitions.items()):
                if not partition.is_leader:
                    continue
                epoch = partition.leader_epoch
                holder = self._leaders.setdefault((tp, epoch), broker_id)
                if holder != broker_id:
                    self._fail(
                        "one_leader_per_epoch",
                        ts_ms,
                        f"{tp[0]}-{tp[1]} leader epoch {epoch} led by brokers {holder} and {broker_id}",
                    )
                hw = partition.high_watermark
                prev = self._hw.get((broker_id, tp))
                if prev is not None and prev[0] == epoch and hw < prev[1]:
                    self._fail(
                        "hw_monotonic",
                        ts_ms,
                        f"{tp[0]}-{tp[1]} on leader {broker_id} (epoch {epoch}): HW {prev[1]} -> {hw}",
                    )
                self._hw[(broker_id, tp)] = (epoch, hw)

    def final(self, ts_ms: int, brokers: list[tuple[int, Any]], acked: list[AckedBatch]) -> None:
        """The end-of-run checks, on the brokers as they are once every one is back."""
        batches = {
            broker_id: {tp: _batches(p.log) for tp, p in sorted(rm.partitions.items())}
            for broker_id, rm in brokers
        }
        leaders = {
            tp: broker_id for broker_id, rm in brokers for tp, p in rm.partitions.items() if p.is_leader
        }
        for a in acked:
            tp = (a.topic, a.partition)
            leader = leaders.get(tp)
            if leader is None:
                continue  # no leader at the end: nothing to read from (the report judges availability)
            found = batches[leader].get(tp, {}).get(a.base_offset)
            if found != a.crc:
                self._fail(
                    "acked_not_lost",
                    ts_ms,
                    f"{a.topic}-{a.partition} offsets {a.base_offset}..{a.last_offset} acknowledged "
                    f"(crc {a.crc}) but the leader {leader} has "
                    + ("no batch there" if found is None else f"crc {found}"),
                )
        for tp in sorted({tp for per in batches.values() for tp in per}):
            holders = [(b, rm.partitions[tp]) for b, rm in brokers if tp in rm.partitions]
            below = min(p.high_watermark for _, p in holders)
            views = {b: {o: c for o, c in batches[b][tp].items() if o < below} for b, _ in holders}
            first_b, first = next(iter(views.items()))
            for b, view in views.items():
                if view != first:
                    diff = sorted(set(view.items()) ^ set(first.items()))[:1]
                    self._fail(
                        "replicas_match",
                        ts_ms,
                        f"{tp[0]}-{tp[1]} below HW {below}: brokers {first_b} and {b} differ (first at "
                        f"offset {diff[0][0] if diff else '?'})",
                    )


def _batches(log: Any) -> dict[int, int]:
    """Base offset -> CRC of every batch of a log."""
    out: dict[int, int] = {}
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        last = offset
        for _, header in iter_batches(data, validate=False):
            out[header.base_offset] = header.crc
            last = header.next_offset
        if last <= offset:
            break
        offset = last
    return out
