"""A full disk under a broker (issue 13, item 2), as a real process on a small filesystem.

The broker's log dir sits on a 1.5 MB tmpfs (mounted by the test where it may, i.e. as root; otherwise the
process gets a 1.5 MB file-size limit, and writes past it fail with EFBIG instead of ENOSPC). A producer
fills it. Kafka's behaviour is expected: the log dir goes offline (one ERROR line, no traceback), every
partition in it answers KAFKA_STORAGE_ERROR (56) inside a normal PRODUCE/FETCH/LIST_OFFSETS response, the
broker keeps serving what does not need the disk (METADATA, API_VERSIONS), stops cleanly, and after the
space is back the next start recovers a log holding exactly the acknowledged batches.
"""

from __future__ import annotations

import resource
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.records import build_simple_batch, iter_batches, read_header
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import (
    BrokerLauncher,
    BrokerProcess,
    fetch_body,
    list_offset,
    read_partition,
    request,
    wait_until,
)

pytestmark = pytest.mark.integration

SMALL = 1536 * 1024
VALUE = 60_000


def _mount(args: list[str]) -> bool:
    try:
        return subprocess.run(args, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, Callable[[], None] | None, Callable[[], None]]]:
    """(directory, preexec for the broker, make room): a tmpfs if the test may mount one, else a file-size
    limit on the broker process."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if _mount(["mount", "-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs", str(mnt)]):

        def grow() -> None:
            assert _mount(["mount", "-o", "remount,size=16m", str(mnt)]), "could not grow the tmpfs"

        try:
            yield mnt, None, grow
        finally:
            _mount(["umount", "-l", str(mnt)])
        return

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (SMALL, SMALL))

    yield mnt, limit, lambda: None


def _produce_body(topic: str, partition: int, records: bytes) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


async def _fill(b: BrokerProcess) -> tuple[list[bytes], dict[str, Any]]:
    """Produces to t-0 until the broker refuses; returns the acknowledged batches and the refusal."""
    acked: list[bytes] = []
    for i in range(200):
        batch = build_simple_batch([bytes([i % 256]) * VALUE], base_timestamp=1_000 + i)
        resp = await request(b.host, b.port, ApiKeys.PRODUCE, _produce_body("t", 0, batch))
        part: dict[str, Any] = resp["responses"][0]["partition_responses"][0]
        if part["error_code"] != 0:
            return acked, resp
        assert part["base_offset"] == len(acked)
        acked.append(batch)
    raise AssertionError("the small filesystem never filled up")


def test_full_disk_takes_the_log_dir_offline_and_answers_kafka_storage_error(
    broker_launcher: BrokerLauncher, small_disk: tuple[Path, Callable[[], None] | None, Callable[[], None]]
) -> None:
    mnt, preexec, make_room = small_disk
    b = broker_launcher.create(1, {"initial.leader.partitions": "t-0,t-1"}, preexec=preexec)
    b.overrides["log.dirs"] = str(mnt / "data")
    b.overrides["journal.dir"] = str(b.data_dir)
    b.start()
    acked, refusal = trio.run(_fill, b)
    assert len(acked) >= 5
    # A well-formed PRODUCE response, the error per partition (not a top-level {"error_code": -1}).
    part = refusal["responses"][0]["partition_responses"][0]
    assert part["error_code"] == Errors.KAFKA_STORAGE_ERROR == 56 and part["error_message"], refusal

    async def after() -> None:
        resp = await request(
            b.host, b.port, ApiKeys.PRODUCE, _produce_body("t", 1, build_simple_batch([b"x"]))
        )
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 56, resp
        fetched = await request(b.host, b.port, ApiKeys.FETCH, fetch_body("t", 0, 0))
        assert fetched["responses"][0]["partitions"][0]["error_code"] == 56, fetched
        listed = await request(
            b.host,
            b.port,
            ApiKeys.LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
                    }
                ],
            },
        )
        assert listed["topics"][0]["partitions"][0]["error_code"] == 56, listed
        metadata = await request(b.host, b.port, ApiKeys.METADATA, {"topics": None})
        assert metadata["brokers"] and {t["name"] for t in metadata["topics"]} >= {"t"}

    trio.run(after)
    b.stop()  # a clean stop with an offline dir: exit 0, no marker written
    run = b.stderr_path.read_text()
    assert "Traceback" not in run, run[-3000:]
    assert run.count("is offline: error while appending to t-0") == 1, run[-3000:]
    assert not (mnt / "data" / ".kafka_cleanshutdown").exists()

    make_room()
    b.preexec = None
    b.start()
    stored = trio.run(lambda: read_partition(b.host, b.port, "t", 0))
    # No partial batch at the end and nothing acknowledged lost: the same batches (CRCs), in order.
    assert [h.crc for _, h in iter_batches(stored)] == [read_header(a).crc for a in acked]
    assert trio.run(lambda: list_offset(b.host, b.port, "t", 0, replica_id=-2)) == len(acked)
    b.kill(signal.SIGKILL)


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[Cluster]:
    probe = tmp_path / "probe"
    probe.mkdir()
    if not _mount(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)]):
        pytest.skip("needs to mount a tmpfs (root); the single-broker test above covers the broker side")
    _mount(["umount", "-l", str(probe)])
    yield from cluster_up(tmp_path / "root", brokers=2)


def test_managed_broker_with_a_full_disk_loses_its_leaderships(two_brokers: Cluster) -> None:
    """Kafka's handleLogDirFailure in a managed cluster: broker 1's log dir fills up; it reports the dir
    offline in its heartbeat, the controller fences it, and broker 2 leads every partition alone."""
    cluster = two_brokers
    cluster.cli("topic", "create", "t", "--partitions", "2", "--replication-factor", "2")
    cluster.wait_converged("t", 2)
    data = Path(cluster.info.broker(1).data_dir)
    cluster.cli("broker", "kill", "1", "--signal", "TERM")
    wait_until(lambda: cluster.leader("t", 0) == 2 and cluster.leader("t", 1) == 2, 30, message="failover")
    saved = data.with_name("data.saved")
    data.rename(saved)
    data.mkdir()
    assert _mount(["mount", "-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs", str(data)])
    try:
        shutil.copytree(saved, data, dirs_exist_ok=True)
        cluster.cli("broker", "restart", "1")
        wait_until(lambda: cluster.isr_full("t"), 60, message="broker 1 back in every ISR")
        b1 = cluster.info.broker(1)
        leaders = {p: cluster.info.broker(cluster.leader("t", p)) for p in (0, 1)}

        async def fill() -> int:
            for i in range(200):
                body = _produce_body("t", i % 2, build_simple_batch([bytes([i % 256]) * VALUE]))
                body["acks"] = -1
                leader = leaders[i % 2]
                resp = await request(leader.host, leader.port, ApiKeys.PRODUCE, body)
                code = resp["responses"][0]["partition_responses"][0]["error_code"]
                if code:
                    return int(code)
            raise AssertionError("broker 1's disk never filled up")

        # 56 from broker 1 as leader; from broker 2, acks=-1 waits on follower 1 until it leaves the ISR.
        assert trio.run(fill) in (
            Errors.KAFKA_STORAGE_ERROR,
            Errors.NOT_ENOUGH_REPLICAS,
            Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            Errors.REQUEST_TIMED_OUT,
        )
        fenced = wait_until(
            lambda: [
                e for e in cluster.controller_events("broker_fenced") if e.get("reason") == "log_dir_offline"
            ],
            30,
            message="the controller to fence broker 1 for its offline log dir",
        )
        assert fenced[0]["broker_id"] == 1
        wait_until(
            lambda: all(
                p["leader_id"] == 2 and p["isr_nodes"] == [2] for p in cluster.metadata("t").values()
            ),
            30,
            message=lambda: f"broker 2 to lead alone: {cluster.metadata('t')}",
        )
        assert process_running(b1.pid)  # it keeps serving what needs no disk
        assert trio.run(request, b1.host, b1.port, ApiKeys.API_VERSIONS, {})["error_code"] == 0
    finally:
        cluster.stop()
        _mount(["umount", "-l", str(data)])


def process_running(pid: int) -> bool:
    from kit.processes import process_state

    return process_state(pid) == "running"
