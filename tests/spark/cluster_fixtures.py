"""Cluster data for the report tests, made for real: a broker process (the kit's launcher) is started,
written to, killed with SIGKILL, restarted and stopped; its data directory is then copied to make identical
follower replicas, and copies are damaged on purpose, each damage in its own partition."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from kit.processes import BrokerProcess, isrsim_command
from protocol.records import build_simple_batch, iter_batches
from server.journal import Journal, read_journal
from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile
from storage.log import Log, LogConfig

TOPIC = "t"
PARTITIONS = 8
RECORDS_PER_ROUND = 8000
BATCH_RECORDS = 200
PER_PARTITION = 2 * RECORDS_PER_ROUND // PARTITIONS  # final LEO of every partition
SEGMENT_BYTES = 100_000
CONFIG = LogConfig(segment_bytes=SEGMENT_BYTES)


def read_events(path: Path) -> list[dict[str, Any]]:
    return read_journal(path)


def start_broker(broker_id: int, data_dir: Path) -> BrokerProcess:
    """A broker (the kit's launcher) leading every partition of ``TOPIC`` on ``data_dir``."""
    broker = BrokerProcess(
        broker_id,
        data_dir,
        log_path=data_dir.parent / "broker.log",
        overrides={
            "initial.leader.partitions": ",".join(f"{TOPIC}-{p}" for p in range(PARTITIONS)),
            "log.segment.bytes": str(SEGMENT_BYTES),
        },
    )
    broker.start(30)
    return broker


def produce(broker: BrokerProcess, count: int, workload: Path) -> None:
    subprocess.run(
        isrsim_command(
            "produce", TOPIC, "--count", str(count), "--acks", "all",
            "--batch-records", str(BATCH_RECORDS), "--bootstrap-server", f"127.0.0.1:{broker.port}",
            "--acked-journal", str(workload), "--no-progress",
        ),
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip


def make_single_broker_cluster(root: Path) -> Path:
    """One broker leading t-0..t-7: produce, SIGKILL, restart (log recovery), produce, SIGTERM."""
    data = root / "broker-1" / "data"
    data.mkdir(parents=True)
    broker = start_broker(1, data)
    try:
        produce(broker, RECORDS_PER_ROUND, root / "workload")
        broker.kill(signal.SIGKILL, 30)
        broker.start(30)
        produce(broker, RECORDS_PER_ROUND, root / "workload")
        broker.kill(signal.SIGTERM, 30)
    finally:
        broker.close()
    return root


def _journal_at(path: Path, owner: int, clock: list[int], field: str = "broker_id") -> Journal:
    return Journal(path, owner, owner_field=field, clock_ms=lambda: clock[0])


def write_follower_journal(
    path: Path,
    broker: int,
    t_start: int,
    t_end: int,
    finals: dict[int, tuple[int, int]],
    extra: list[tuple[int, str, dict[str, Any]]] = (),  # type: ignore[assignment]
) -> None:
    """A follower's journal: started, follows broker 1 in epoch 0 for every partition, catches up to
    ``finals[partition] = (leo, hw)``, then ``extra`` events ``(ts, event, fields)``, then a clean stop."""
    path.unlink(missing_ok=True)
    clock = [t_start]
    j = _journal_at(path, broker, clock)
    j.emit("broker_started", host="127.0.0.1", port=0, pid=0, log_dir=str(path.parent))
    for p in range(PARTITIONS):
        j.emit_partition("became_follower", (TOPIC, p), leader_epoch=0, leader_id=1, log_end_offset=0,
                         high_watermark=0)  # fmt: skip
    clock[0] = (t_start + t_end) // 2
    for p in range(PARTITIONS):
        leo, hw = finals.get(p, (PER_PARTITION, PER_PARTITION))
        j.emit_partition("offsets", (TOPIC, p), log_end_offset=leo, high_watermark=hw, log_start_offset=0)
    for ts, event, fields in extra:
        clock[0] = ts
        j.emit(event, **fields)
    clock[0] = max(t_end, *(ts + 1 for ts, _, _ in extra)) if extra else t_end
    j.emit("broker_stopped", clean=True)
    j.close()


def time_range(root: Path) -> tuple[int, int]:
    # The earliest and the latest stamp, not the first and last lines: a journal's lines need not be in
    # stamp order (an event is stamped when it happens and written when its task gets to it).
    stamps = [e["ts_ms"] for e in read_events(root / "broker-1" / "data" / "events.jsonl")]
    return min(stamps), max(stamps)


def write_controller_journal(root: Path, extra: list[tuple[int, str, dict[str, Any]]] = ()) -> None:  # type: ignore[assignment]
    """The controller's view: broker 1 leads every partition in epoch 0 with ISR [1, 2, 3]."""
    events = read_events(root / "broker-1" / "data" / "events.jsonl")
    last_leader = max(e["ts_ms"] for e in events if e["event"] == "became_leader")
    path = root / "controller" / "events.jsonl"
    path.unlink(missing_ok=True)
    clock = [last_leader + 1]
    j = _journal_at(path, 0, clock, "controller_id")
    j.emit("controller_started")
    for p in range(PARTITIONS):
        j.emit("leader_elected", topic=TOPIC, partition=p, leader_id=1, leader_epoch=0, isr=[1, 2, 3],
               unclean=False)  # fmt: skip
    for ts, event, fields in extra:
        clock[0] = ts
        j.emit(event, **fields)
    j.close()


def make_three_replicas(root: Path) -> None:
    """Copy broker 1's data directory to brokers 2 and 3 (identical followers) with their own journals."""
    src = root / "broker-1" / "data"
    t_start, t_end = time_range(root)
    for b in (2, 3):
        dst = root / f"broker-{b}" / "data"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("events.jsonl", "acked.jsonl"))
        meta = dst / "meta.properties"
        meta.write_text(meta.read_text().replace("broker.id=1", f"broker.id={b}"))
        write_follower_journal(dst / "events.jsonl", b, t_start + 2, t_end - 1, {})
    write_controller_journal(root)


# ---------------------------------------------------------------------------------------------- damage


def pdir(root: Path, broker: int, partition: int) -> Path:
    return root / f"broker-{broker}" / "data" / f"{TOPIC}-{partition}"


def set_checkpoint(root: Path, broker: int, name: str, partition: int, offset: int) -> None:
    f = OffsetCheckpointFile(root / f"broker-{broker}" / "data" / name)
    entries = f.read()
    entries[(TOPIC, partition)] = offset
    f.write(entries)


def open_log(root: Path, broker: int, partition: int) -> Log:
    return Log.open(pdir(root, broker, partition), TOPIC, partition, CONFIG)


def diverge(root: Path, broker: int, partition: int, at: int, epoch: int) -> None:
    """Cut the replica at ``at`` and write other batches under ``epoch`` up to the same end offset."""
    log = open_log(root, broker, partition)
    end = log.log_end_offset
    log.truncate_to(at)
    while log.log_end_offset < end:
        n = min(BATCH_RECORDS, end - log.log_end_offset)
        log.append_as_leader(build_simple_batch([b"diverged"] * n), epoch)
    log.close()


def truncate(root: Path, broker: int, partition: int, to: int) -> None:
    log = open_log(root, broker, partition)
    log.truncate_to(to)
    log.close()
    set_checkpoint(root, broker, "replication-offset-checkpoint", partition, to)
    set_checkpoint(root, broker, "recovery-point-offset-checkpoint", partition, to)


def find_batch(root: Path, broker: int, partition: int, base_offset: int) -> tuple[Path, int, int]:
    """(segment file, position, size) of the batch starting at ``base_offset``."""
    for seg in sorted(pdir(root, broker, partition).glob("*.log")):
        for pos, h in iter_batches(seg.read_bytes()):
            if h.base_offset == base_offset:
                return seg, pos, h.size
    raise KeyError(base_offset)


def remove_batch(root: Path, broker: int, partition: int, base_offset: int) -> None:
    seg, pos, size = find_batch(root, broker, partition, base_offset)
    data = seg.read_bytes()
    seg.write_bytes(data[:pos] + data[pos + size :])


def flip_record_byte(root: Path, broker: int, partition: int, base_offset: int) -> None:
    seg, pos, size = find_batch(root, broker, partition, base_offset)
    data = bytearray(seg.read_bytes())
    data[pos + size - 5] ^= 0xFF
    seg.write_bytes(bytes(data))


def write_epoch_cache(root: Path, broker: int, partition: int, entries: list[tuple[int, int]]) -> None:
    LeaderEpochCheckpointFile(pdir(root, broker, partition) / "leader-epoch-checkpoint").write(
        [EpochEntry(e, s) for e, s in entries]
    )


def insert_before_stop(path: Path, events: list[dict[str, Any]]) -> None:
    """Insert journal lines just before the final ``broker_stopped`` line (same timestamp)."""
    lines = path.read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["event"] == "broker_stopped"
    ts = json.loads(lines[-1])["ts_ms"]
    new = [json.dumps({"ts_ms": ts, "broker_id": 1, **e}, separators=(",", ":")) + "\n" for e in events]
    path.write_text("".join(lines[:-1] + new + lines[-1:]))


def append_torn(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def file_size(path: Path) -> int:
    return os.stat(path).st_size


# ---------------------------------------------------------------------------------------------- scenarios

ELECTION_AFTER_MS = 10


def add_kill9_leftovers(root: Path) -> dict[str, Any]:
    """What a kill -9 leaves and the report must tolerate: half a batch at the end of a partition's last
    segment, and a torn last journal line."""
    seg = sorted(pdir(root, 3, 7).glob("*.log"))[-1]
    torn = seg.read_bytes()[:100]
    with open(seg, "ab") as f:
        f.write(torn)
    journal = root / "broker-2" / "data" / "events.jsonl"
    append_torn(journal, '{"ts_ms":17953,"broker_id":2,"ev')
    return {"torn_segment": str(seg), "torn_bytes": len(torn), "torn_journal": str(journal)}


def damage(root: Path) -> dict[str, Any]:
    """One damage per partition, each aimed at one check:

    t-0 broker 2 diverges at 1000 (epoch 1); t-1 all replicas lose the last two acknowledged batches;
    t-2 broker 3 loses the batch at 600 (a gap); t-3 broker 2's HW checkpoint is above its LEO; t-4 broker
    1's journal shows its leader HW going back; t-5 broker 3's epoch cache disagrees with its batches;
    t-6 broker 3 has a batch whose bytes fail their CRC; t-7 broker 2 (behind at 1600, out of the ISR
    before the stop) is elected uncleanly.
    """
    _, t_end = time_range(root)
    diverge(root, 2, 0, 1000, epoch=1)
    for b in (1, 2, 3):
        truncate(root, b, 1, 1600)
    remove_batch(root, 3, 2, 600)
    set_checkpoint(root, 2, "replication-offset-checkpoint", 3, PER_PARTITION + 500)
    insert_before_stop(
        root / "broker-1" / "data" / "events.jsonl",
        [
            {"event": "offsets", "topic": TOPIC, "partition": 4, "log_end_offset": PER_PARTITION,
             "high_watermark": 1200, "log_start_offset": 0},
            {"event": "offsets", "topic": TOPIC, "partition": 4, "log_end_offset": PER_PARTITION,
             "high_watermark": PER_PARTITION, "log_start_offset": 0},
        ],
    )  # fmt: skip
    write_epoch_cache(root, 3, 5, [(0, 0), (3, 1000), (2, 1400)])
    flip_record_byte(root, 3, 6, 400)
    # t-7: broker 2 fell behind at 1600; broker 1 dies; the controller elects broker 2 uncleanly.
    truncate(root, 2, 7, 1600)
    elected = t_end + ELECTION_AFTER_MS
    t_start, _ = time_range(root)
    write_follower_journal(
        root / "broker-2" / "data" / "events.jsonl",
        2,
        t_start + 2,
        t_end - 1,
        {7: (1600, 1600)},
        [
            (elected + 1, "became_leader", {"topic": TOPIC, "partition": 7, "leader_epoch": 1, "leader_id": 2,
                                            "isr": [2], "replicas": [1, 2, 3], "log_end_offset": 1600,
                                            "high_watermark": 1600}),
        ],
    )  # fmt: skip
    write_controller_journal(
        root,
        [
            # Broker 2 fell behind before the stop: out of the ISR then, so not judged against it.
            (t_end - 10, "isr_changed", {"topic": TOPIC, "partition": 7, "leader_id": 1, "leader_epoch": 0,
                                         "isr": [1, 3], "reason": "lagging"}),
            (elected, "broker_fenced", {"broker_id": 1}),
            (elected, "leader_elected", {"topic": TOPIC, "partition": 7, "leader_id": 2, "leader_epoch": 1,
                                         "isr": [2], "unclean": True}),
            (elected + 5, "broker_registered", {"broker_id": 1}),
        ],
    )  # fmt: skip
    return {"elected_ts": elected}


def make_unreadable(root: Path) -> dict[str, str]:
    """A foreign file named like a segment, and a checkpoint that does not parse."""
    foreign = pdir(root, 1, 0) / "00000000000000099999.log"
    foreign.write_bytes(b"this is not a record batch log\n" * 10)
    checkpoint = root / "broker-2" / "data" / "replication-offset-checkpoint"
    checkpoint.write_text("0\n2\nt 0 abc\n")
    return {"foreign": str(foreign), "checkpoint": str(checkpoint)}
