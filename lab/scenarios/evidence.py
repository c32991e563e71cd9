"""What the stopped cluster's files show, read straight from the segments (docs/storage.md) and the
acknowledged batches (``workload/acked-*.jsonl``): is an acknowledged batch missing from every replica, do two
replicas hold different batches at the same offset below the high watermark, and the two logs side by side
where they differ (offset, epoch, CRC per batch of each replica)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from kit.cluster_files import ClusterInfo
from protocol import iter_batches

Batch = tuple[int, int, int]  # last offset, leader epoch, crc


@dataclass
class ReplicaLog:
    broker: int
    batches: dict[int, Batch]  # base offset -> batch
    leo: int
    hw: int | None


@dataclass
class Acked:
    base_offset: int
    last_offset: int
    crc: int
    acks: int


@dataclass
class Evidence:
    logs: list[ReplicaLog]
    acked: list[Acked]
    lost_everywhere: list[Acked] = field(default_factory=list)  # acks=all, on no replica
    missing_somewhere: list[tuple[Acked, list[int]]] = field(default_factory=list)  # acks=all
    acks1_lost: list[Acked] = field(default_factory=list)  # acks=1, on no replica
    diverged: list[int] = field(default_factory=list)  # base offsets below the smallest HW

    @property
    def outcome(self) -> str:
        """``diverged``, ``acked-lost`` or ``consistent`` (what the files say)."""
        if self.diverged:
            return "diverged"
        if self.lost_everywhere or self.missing_somewhere:
            return "acked-lost"
        return "consistent"


def read_replica(data_dir: Path, broker: int, topic: str, partition: int) -> ReplicaLog:
    pdir = data_dir / f"{topic}-{partition}"
    batches: dict[int, Batch] = {}
    for seg in sorted(pdir.glob("*.log")):
        data = seg.read_bytes()
        for _, h in iter_batches(data, validate=False):
            batches[h.base_offset] = (h.last_offset, h.partition_leader_epoch, h.crc)
    leo = max((b[0] + 1 for b in batches.values()), default=0)
    return ReplicaLog(
        broker,
        batches,
        leo,
        read_offset_checkpoint(data_dir / "replication-offset-checkpoint", topic, partition),
    )


def read_offset_checkpoint(path: Path, topic: str, partition: int) -> int | None:
    """Kafka's offset checkpoint text format: ``0``, count, then ``<topic> <partition> <offset>`` lines."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == str(partition):
            return int(parts[2])
    return None


def read_acked(root: Path, topic: str, partition: int) -> list[Acked]:
    out: list[Acked] = []
    for f in sorted((root / "workload").glob("acked-*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                a = json.loads(line)
            except ValueError:
                continue
            if a.get("topic") == topic and a.get("partition") == partition:
                out.append(Acked(a["base_offset"], a["last_offset"], a["crc"], a["acks"]))
    return sorted(out, key=lambda a: a.base_offset)


def gather(info: ClusterInfo, replicas: list[int], topic: str, partition: int) -> Evidence:
    logs = [read_replica(Path(info.broker(b).data_dir), b, topic, partition) for b in replicas]
    ev = Evidence(logs, read_acked(Path(info.root), topic, partition))
    for a in ev.acked:
        holders = [
            r.broker
            for r in logs
            if r.batches.get(a.base_offset, (None, None, None))[::2] == (a.last_offset, a.crc)
        ]
        if a.acks == 1:
            if not holders:
                ev.acks1_lost.append(a)
        elif not holders:
            ev.lost_everywhere.append(a)
        else:
            # A replica whose log ends before the batch is behind (out of the ISR), not missing it.
            missing = [r.broker for r in logs if r.broker not in holders and r.leo > a.base_offset]
            if missing:
                ev.missing_somewhere.append((a, missing))
    bound = min((r.hw if r.hw is not None else 0) for r in logs) if logs else 0
    bound = min([bound, *(r.leo for r in logs)])
    offsets = sorted({o for r in logs for o in r.batches if r.batches[o][0] < bound})
    for o in offsets:
        sides = {r.batches.get(o) for r in logs}
        if len(sides) > 1:
            ev.diverged.append(o)
    return ev


def side_by_side(ev: Evidence, around: list[int], context: int = 2) -> Table | None:
    """The replicas' batches side by side: every base offset within ``context`` batches of ``around``
    (the offsets where the logs differ or an acknowledged batch is missing); a differing row is marked."""
    offsets = sorted({o for r in ev.logs for o in r.batches})
    if not offsets or not around:
        return None
    index = {o: i for i, o in enumerate(offsets)}
    keep: set[int] = set()
    for a in around:
        i = index.get(a)
        if i is None:
            i = next((k for k, o in enumerate(offsets) if o >= a), len(offsets) - 1)
        keep.update(offsets[max(0, i - context) : i + context + 1])
    acked: dict[int, list[Acked]] = {}
    for a in ev.acked:
        acked.setdefault(a.base_offset, []).append(a)
    t = Table(title="the logs side by side (per batch: offsets, leader epoch, CRC)", title_justify="left",
              title_style="bold", show_edge=False, pad_edge=False)  # fmt: skip
    t.add_column("offset", justify="right")
    for r in ev.logs:
        t.add_column(f"broker {r.broker} (LEO {r.leo}, HW {r.hw})")
    t.add_column("acknowledged")
    prev = None
    for o in sorted(keep):
        if prev is not None and index[o] != index[prev] + 1:
            t.add_row("...", *["" for _ in ev.logs], "")
        prev = o
        cells = []
        for r in ev.logs:
            b = r.batches.get(o)
            cells.append("-" if b is None else f"{o}-{b[0]} e{b[1]} crc {b[2]}")
        ack = "; ".join(f"acks={'all' if a.acks == -1 else a.acks} crc {a.crc}" for a in acked.get(o, []))
        differs = len({r.batches.get(o) for r in ev.logs}) > 1
        t.add_row(str(o), *cells, ack, style="red" if differs else None)
    return t


def interesting_offsets(ev: Evidence) -> list[int]:
    lost = [a.base_offset for a in ev.lost_everywhere] + [a.base_offset for a in ev.acks1_lost]
    return sorted({*ev.diverged, *lost, *(a.base_offset for a, _ in ev.missing_somewhere)})
