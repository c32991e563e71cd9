"""Compaction on a real cluster: every replica's cleaner rewrites its own log; a follower that was down
across a clean fetches from the leader's cleaned segments (offset gaps) and ends with the same records per
key; a leader killed right after a clean hands over to a follower whose log is cleaned differently and
nothing acknowledged as a key's latest value is lost; __consumer_offsets is created compacted."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.records import CONTROL_FLAG_MASK, decode_records, iter_batches
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import REPO_ROOT, python_cmd, wait_until

pytestmark = pytest.mark.integration

TOPIC = "kv"
KEYS = 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "c", 3, (*FAST, "log.cleaner.backoff.ms=100"))


def produce(cluster: Cluster, round_: int, lines: int = 400) -> dict[bytes, bytes]:
    """``lines`` keyed records (KEYS keys) with acks=all; the last value written per key."""
    text = "".join(f"k{i % KEYS}:r{round_}-{i}\n" for i in range(lines))
    proc = subprocess.run(
        python_cmd(
            "produce", TOPIC, "--property", "parse.key=true", "--property", "key.separator=:",
            "--data-dir", str(cluster.root),
        ),
        input=text, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {f"k{i % KEYS}".encode(): f"r{round_}-{i}".encode() for i in range(lines)}


def partition_dir(cluster: Cluster, broker_id: int) -> Path:
    return Path(cluster.info.broker(broker_id).data_dir) / f"{TOPIC}-0"


def on_disk(cluster: Cluster, broker_id: int) -> tuple[dict[bytes, bytes | None], int]:
    """The last value per key in the replica's segments, and how many records they hold."""
    latest: dict[bytes, bytes | None] = {}
    count = 0
    for path in sorted(partition_dir(cluster, broker_id).glob("*.log")):
        data = path.read_bytes()
        for pos, header in iter_batches(data):
            if header.attributes & CONTROL_FLAG_MASK:
                continue
            for record in decode_records(data, pos)[1]:
                assert record.key is not None
                latest[record.key] = record.value
                count += 1
    return latest, count


def cleaned_to(cluster: Cluster, broker_id: int) -> int:
    """The replica's cleaner-offset-checkpoint entry for the topic (0 if none)."""
    path = Path(cluster.info.broker(broker_id).data_dir) / "cleaner-offset-checkpoint"
    if not path.exists():
        return 0
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        if topic == TOPIC and partition == "0":
            return int(offset)
    return 0


@pytest.mark.spark
@pytest.mark.timeout(900)  # two broker restarts, convergence and the Spark report
def test_followers_catch_up_from_cleaned_segments_and_a_leader_change_after_a_clean(cluster: Cluster) -> None:
    cluster.cli(
        "topic", "create", TOPIC, "--partitions", "1", "--replication-factor", "3",
        "--config", "cleanup.policy=compact", "--config", "segment.bytes=4096",
        "--config", "min.cleanable.dirty.ratio=0.01", "--config", "delete.retention.ms=600000",
    )  # fmt: skip
    expected = produce(cluster, 1)
    leader = cluster.leader(TOPIC, 0)
    follower = next(b.id for b in cluster.info.brokers if b.id != leader)

    # A follower down across a clean: it comes back behind the leader's cleaned range.
    cluster.cli("broker", "kill", str(follower))
    for round_ in (2, 3):
        expected.update(produce(cluster, round_))
    wait_until(
        lambda: cleaned_to(cluster, leader) > 800 and on_disk(cluster, leader)[1] < 1000,
        timeout=60,
        message=lambda: f"the leader's cleaner (checkpoint {cleaned_to(cluster, leader)})",
    )
    cluster.cli("broker", "restart", str(follower))
    wait_until(lambda: cluster.isr_full(TOPIC), timeout=60, message="the follower back in the ISR")
    cluster.wait_converged(TOPIC, 1)
    for b in cluster.info.brokers:
        assert on_disk(cluster, b.id)[0] == expected, f"broker {b.id} lost a key's latest value"

    # A leader change right after a clean.
    checkpoint = cleaned_to(cluster, leader)
    expected.update(produce(cluster, 4))
    wait_until(lambda: cleaned_to(cluster, leader) > checkpoint, timeout=60, message="another clean")
    cluster.cli("broker", "kill", str(leader))
    wait_until(lambda: cluster.leader(TOPIC, 0) not in (-1, leader), timeout=30, message="a new leader")
    expected.update(produce(cluster, 5, lines=100))
    cluster.cli("broker", "restart", str(leader))
    wait_until(lambda: cluster.isr_full(TOPIC), timeout=60, message="the old leader back in the ISR")
    cluster.wait_converged(TOPIC, 1)
    for b in cluster.info.brokers:
        latest, count = on_disk(cluster, b.id)
        assert latest == expected, f"broker {b.id} lost a key's latest value"
        assert count < 5 * 400  # it compacted

    # A consumer reading the whole compacted log gets each key's latest value.
    consumed = subprocess.run(
        python_cmd(
            "consume", TOPIC, "--from-beginning", "--property", "print.key=true", "--property",
            "key.separator=:", "--timeout-ms", "10000", "--data-dir", str(cluster.root),
        ),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    seen: dict[bytes, bytes] = {}
    for line in consumed.stdout.splitlines():
        key, _, value = line.partition(":")
        seen[key.encode()] = value.encode()
    assert seen == expected, (consumed.stdout[-500:], consumed.stderr[-2000:])

    # The report judges the compacted partition per key below its cleaned range, and finds it VALID.
    cluster.cli("cluster", "down", timeout=180)
    report = cluster.cli("report", check=False, timeout=600)
    body = json.loads((cluster.root / "report" / "report.json").read_text())
    checks = {c["name"]: c for c in body["checks"]}
    kept = checks["compaction_kept_latest"]
    assert kept["verdict"] == "valid" and kept["checked"] >= 3 * KEYS, kept
    bad = {name: c["examples"][:3] for name, c in checks.items() if c["verdict"] == "invalid"}
    assert not bad and report.returncode in (0, 3), (bad, report.stdout[-2000:])


def test_consumer_offsets_is_created_compacted(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "t", "--partitions", "1", "--replication-factor", "3")
    produce_t = subprocess.run(
        python_cmd("produce", "t", "--data-dir", str(cluster.root)),
        input="a\nb\n", cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert produce_t.returncode == 0, produce_t.stderr
    consumed = subprocess.run(
        python_cmd(
            "consume", "t", "--group", "g", "--from-beginning", "--timeout-ms", "10000", "--data-dir",
            str(cluster.root),
        ),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    described = cluster.cli("topic", "describe", "__consumer_offsets").stdout
    assert "cleanup.policy=compact" in described, described
