"""One real broker process: a produce/consume round trip through the CLI, a SIGKILL in the middle of a
load (nothing acknowledged is lost, byte for byte), and a clean stop that keeps the high watermark."""

from __future__ import annotations

import re
import signal
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.api_keys import ApiKeys
from protocol.records import BatchHeader, batch_crc, build_simple_batch, iter_batches
from tests.integration.harness import (
    REPO_ROOT,
    BrokerLauncher,
    BrokerProcess,
    events,
    list_offset,
    python_cmd,
    read_partition,
    request,
    run_cli,
    wait_until,
)

pytestmark = pytest.mark.integration

TOPIC = "t"
PARTITIONS = (0, 1)
LINE = re.compile(r"^(\d+)\t(\d+)\t([^:]+):(\d+):")


def test_produce_then_consume_100k_records_in_order(single_broker: BrokerProcess, tmp_path: Path) -> None:
    count = 100_000
    journal_dir = tmp_path / "workload"
    out = run_cli(
        "produce", TOPIC, "--count", str(count), "--acks", "1", "--no-progress",
        "--bootstrap-server", single_broker.address, "--acked-journal", str(journal_dir),
    )  # fmt: skip
    assert f"{count:,} records acknowledged" in out.stdout, out.stdout
    (journal,) = journal_dir.glob("acked-*.jsonl")
    producer_id = journal.stem.removeprefix("acked-")
    retried = "retries:" in out.stdout

    consumed = run_cli(
        "consume", TOPIC, "--from-beginning", "--max-records", str(count), "--print-offsets",
        "--bootstrap-server", single_broker.address,
    )  # fmt: skip
    offsets: dict[int, list[int]] = defaultdict(list)
    seqs: dict[int, list[int]] = defaultdict(list)
    for line in consumed.stdout.splitlines():
        m = LINE.match(line)
        assert m is not None, f"unexpected consumer line {line!r}"
        partition, offset, pid, seq = int(m[1]), int(m[2]), m[3], int(m[4])
        assert pid == producer_id
        offsets[partition].append(offset)
        seqs[partition].append(seq)
    assert sorted(offsets) == list(PARTITIONS), "records spread round-robin over both partitions"
    for partition, offs in offsets.items():
        # Every offset of the partition, contiguous from 0, in order.
        assert offs == list(range(len(offs))), f"partition {partition} offsets are not 0..n-1 in order"
        if not retried:  # without retries one producer's batches keep their order within a partition
            assert seqs[partition] == sorted(seqs[partition]), f"partition {partition} out of order"
    all_seqs = sorted(s for ss in seqs.values() for s in ss)
    assert all_seqs == list(range(count)), "every sequence number exactly once"
    assert f"Processed a total of {count:,} messages" in consumed.stderr

    # The log end offsets agree with what was read, and consumers see all of it (acks=1, ISR = {leader}).
    for partition, offs in offsets.items():
        leo = trio.run(_latest, single_broker, partition, -2)
        hw = trio.run(_latest, single_broker, partition, -1)
        assert leo == hw == len(offs)


async def _latest(broker: BrokerProcess, partition: int, replica_id: int) -> int:
    return await list_offset(broker.host, broker.port, TOPIC, partition, replica_id=replica_id)


# ---------------------------------------------------------------------------------------- SIGKILL


def _segment_batches(partition_dir: Path) -> dict[int, tuple[BatchHeader, int]]:
    """base_offset -> (header, CRC computed over the bytes) for every batch of every segment file."""
    out: dict[int, tuple[BatchHeader, int]] = {}
    expected_next: int | None = None
    for path in sorted(partition_dir.glob("*.log")):
        data = path.read_bytes()
        assert int(path.stem) == (expected_next if expected_next is not None else int(path.stem))
        for pos, header in iter_batches(data):  # validates every header and CRC: no torn tail left
            if expected_next is not None:
                assert header.base_offset == expected_next, f"gap before offset {header.base_offset}"
            out[header.base_offset] = (header, batch_crc(data, pos))
            expected_next = header.next_offset
    return out


def _headers(data: bytes) -> dict[int, tuple[BatchHeader, int]]:
    return {h.base_offset: (h, batch_crc(data, pos)) for pos, h in iter_batches(data)}


def test_sigkill_mid_load_loses_no_acknowledged_batch(
    broker_launcher: BrokerLauncher, tmp_path: Path
) -> None:
    broker = broker_launcher.start(1, {"initial.leader.partitions": "t-0,t-1"})
    journal_dir = tmp_path / "workload"
    producer_log = tmp_path / "producer.stderr"
    with open(producer_log, "wb") as err:
        producer = subprocess.Popen(
            python_cmd(
                "produce",
                TOPIC,
                "--count",
                "2000000",
                "--rate",
                "40000",
                "--batch-records",
                "50",
                "--acks",
                "1",
                "--no-progress",
                "--timeout-ms",
                "2000",
                "--bootstrap-server",
                broker.address,
                "--acked-journal",
                str(journal_dir),
            ),
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:

        def acked() -> list[dict[str, Any]]:
            return [e for path in journal_dir.glob("acked-*.jsonl") for e in events(path)]

        wait_until(lambda: len(acked()) >= 100, 20, message="100 acknowledged batches in the journal")
        broker.kill(signal.SIGKILL)
        assert producer.poll() is None, "the producer finished before the broker was killed"
        # Everything in the journal now was acknowledged by the killed broker. Stop the producer (it would
        # retry for its delivery timeout).
    finally:
        producer.kill()
        producer.wait(10)
    batches = acked()
    assert len(batches) >= 100
    assert {b["partition"] for b in batches} == set(PARTITIONS)

    # Simulate a write torn by the crash on t-1: half a batch after the last whole one. Recovery must cut
    # it off by CRC and keep everything before it.
    (active_t1,) = sorted((broker.log_dir / f"{TOPIC}-1").glob("*.log"))[-1:]
    size_before_tear = active_t1.stat().st_size
    with open(active_t1, "ab") as f:
        f.write(build_simple_batch([b"torn"] * 20)[:70])

    broker.restart()
    assert active_t1.stat().st_size == size_before_tear, "the torn tail was not cut off"
    by_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for b in batches:
        by_partition[b["partition"]].append(b)

    for partition, acks in by_partition.items():
        on_disk = _segment_batches(broker.log_dir / f"{TOPIC}-{partition}")
        fetched_bytes = trio.run(read_partition, broker.host, broker.port, TOPIC, partition)
        fetched = _headers(fetched_bytes)
        leo = trio.run(_latest, broker, partition, -2)
        assert leo == max(h.next_offset for h, _ in on_disk.values())
        for view, name in ((on_disk, "segment files"), (fetched, "FETCH")):
            for ack in acks:
                assert ack["base_offset"] in view, f"{name}: acked batch {ack} is missing"
                header, computed_crc = view[ack["base_offset"]]
                assert header.last_offset == ack["last_offset"], f"{name}: {ack} vs {header}"
                assert header.crc == ack["crc"] == computed_crc, f"{name}: {ack} vs {header}"
        # The batches FETCH returns are exactly the segment bytes of the same batches.
        segment_bytes = b"".join(
            p.read_bytes() for p in sorted((broker.log_dir / f"t-{partition}").glob("*.log"))
        )
        assert fetched_bytes == segment_bytes[: len(fetched_bytes)]
        assert len(fetched) == len(on_disk)

    # The recovered log takes new appends right after its end.
    before = trio.run(_latest, broker, 0, -2)
    resp = trio.run(_produce, broker, 0, [b"after-restart"])
    assert resp["error_code"] == 0 and resp["base_offset"] == before


async def _produce(broker: BrokerProcess, partition: int, values: list[bytes], acks: int = 1) -> Any:
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": partition, "records": build_simple_batch(values)}]}
        ],
    }
    resp = await request(broker.host, broker.port, ApiKeys.PRODUCE, body)
    return resp["responses"][0]["partition_responses"][0]


# ---------------------------------------------------------------------------------------- clean stop


def _leader_and_isr(epoch: int, replicas: list[int], isr: list[int]) -> dict[str, Any]:
    return {
        "controller_id": 9000,
        "controller_epoch": 1,
        "broker_epoch": -1,
        "topic_states": [
            {
                "topic_name": TOPIC,
                "partition_states": [
                    {
                        "partition_index": 0,
                        "controller_epoch": 1,
                        "leader": 1,
                        "leader_epoch": epoch,
                        "isr": isr,
                        "partition_epoch": epoch,
                        "replicas": replicas,
                        "is_new": False,
                    }
                ],
            }
        ],
        "live_leaders": [],
    }


def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    lines = path.read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2
    return {(t, int(p)): int(o) for t, p, o in (line.split() for line in lines[2:])}


async def test_clean_stop_keeps_the_high_watermark(broker_launcher: BrokerLauncher) -> None:
    # An unmanaged broker that leads t-0 with a follower (2) that never runs: the HW moves only as far as
    # follower fetches say, so after a restart it can come only from replication-offset-checkpoint.
    broker = broker_launcher.start(1, {"replica.lag.time.max.ms": "600000"})  # 2 stays in the ISR
    resp = await request(broker.host, broker.port, ApiKeys.LEADER_AND_ISR, _leader_and_isr(1, [1, 2], [1, 2]))
    assert resp["error_code"] == 0 and resp["partition_errors"][0]["error_code"] == 0, resp
    for i in range(5):
        r = await _produce(broker, 0, [f"v{i}-{j}".encode() for j in range(10)])
        assert r["error_code"] == 0, r
    assert await _latest(broker, 0, -2) == 50
    assert await _latest(broker, 0, -1) == 0
    # "Broker 2" fetches from offset 30: it has 0..29, so the HW becomes 30.
    fetch = await request(broker.host, broker.port, ApiKeys.FETCH, _follower_fetch(30))
    assert fetch["responses"][0]["partitions"][0]["error_code"] == 0, fetch
    assert fetch["responses"][0]["partitions"][0]["high_watermark"] == 30
    assert await _latest(broker, 0, -1) == 30

    broker.stop()  # SIGTERM
    assert _read_checkpoint(broker.log_dir / "replication-offset-checkpoint")[(TOPIC, 0)] == 30
    assert _read_checkpoint(broker.log_dir / "recovery-point-offset-checkpoint")[(TOPIC, 0)] == 50
    stopped = broker.events("offsets")[-1]
    assert (stopped["log_end_offset"], stopped["high_watermark"]) == (50, 30)

    broker.restart()
    resp = await request(broker.host, broker.port, ApiKeys.LEADER_AND_ISR, _leader_and_isr(2, [1, 2], [1, 2]))
    assert resp["partition_errors"][0]["error_code"] == 0, resp
    assert await _latest(broker, 0, -2) == 50
    assert await _latest(broker, 0, -1) == 30, "the HW did not survive the clean restart"
    # A consumer reads exactly up to the HW.
    data = await read_partition(broker.host, broker.port, TOPIC, 0, replica_id=-1)
    assert [h.next_offset for _, h in iter_batches(data)] == [10, 20, 30]


def _follower_fetch(offset: int) -> dict[str, Any]:
    from tests.integration.harness import fetch_body

    body = fetch_body(TOPIC, 0, offset, replica_id=2)
    return body
