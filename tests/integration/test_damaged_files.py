"""A broker started on damaged files (issue 13, item 5), as real processes.

- After a clean stop (``.kafka_cleanshutdown``) nothing is recovered, so one flipped byte in the middle of
  the active segment costs nothing at start; after kill -9 recovery cuts there, and says loudly that the log
  now ends below the checkpointed high watermark.
- A log-start-offset checkpoint beyond the log end keeps the data (and says so).
- A flipped base-offset byte (outside the CRC) is never served at the wrong offset.
- A refusal to start is one line naming the file and what to do, without a traceback.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.records import build_simple_batch, iter_batches
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

BATCHES = 60
BATCH = build_simple_batch([b"a" * 40, b"b" * 40], base_timestamp=1_000)
MIDDLE = BATCHES // 2


def _segment(b: BrokerProcess) -> Path:
    [segment] = sorted((b.log_dir / "t-0").glob("*.log"))
    return segment


def _flip(path: Path, position: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[position] ^= 0x01
    path.write_bytes(bytes(raw))


async def _fill(b: BrokerProcess) -> None:
    for _ in range(BATCHES):
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": BATCH}]}],
        }
        resp = await request(b.host, b.port, ApiKeys.PRODUCE, body)
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0, resp


def _leo(b: BrokerProcess) -> int:
    return trio.run(lambda: list_offset(b.host, b.port, "t", 0, replica_id=-2))


@pytest.fixture
def filled(broker_launcher: BrokerLauncher) -> BrokerProcess:
    b = broker_launcher.start(
        1, {"initial.leader.partitions": "t-0", "replica.high.watermark.checkpoint.interval.ms": "100"}
    )
    trio.run(_fill, b)
    assert _leo(b) == 2 * BATCHES
    return b


def test_clean_stop_then_flipped_record_byte_loses_nothing(filled: BrokerProcess) -> None:
    filled.stop()
    assert (filled.log_dir / ".kafka_cleanshutdown").exists()
    _flip(_segment(filled), MIDDLE * len(BATCH) + 80)  # a value byte of a middle batch (under its CRC)
    filled.start()
    assert _leo(filled) == 2 * BATCHES
    assert not (filled.log_dir / ".kafka_cleanshutdown").exists()  # a crash from now on means recovery
    assert "cutting" not in filled.stderr_tail(200)


def test_crash_then_flipped_byte_is_recovered_and_loss_below_the_hw_is_loud(filled: BrokerProcess) -> None:
    hw_file = filled.log_dir / "replication-offset-checkpoint"
    wait_until(lambda: hw_file.exists() and f"t 0 {2 * BATCHES}" in hw_file.read_text(), 10, message="HW")
    filled.kill(signal.SIGKILL)
    assert not (filled.log_dir / ".kafka_cleanshutdown").exists()
    _flip(_segment(filled), MIDDLE * len(BATCH) + 80)
    filled.start()
    assert _leo(filled) == 2 * MIDDLE
    log_text = filled.stderr_tail(200)
    assert f"t-0: recovery left the log end offset at {2 * MIDDLE}, BELOW the high watermark" in log_text
    assert " ERROR " in log_text


def test_log_start_checkpoint_beyond_the_log_end_keeps_the_data(filled: BrokerProcess) -> None:
    before = trio.run(lambda: read_partition(filled.host, filled.port, "t", 0))
    filled.stop()
    (filled.log_dir / "log-start-offset-checkpoint").write_text("0\n1\nt 0 100000\n")
    filled.start()
    assert _leo(filled) == 2 * BATCHES
    assert trio.run(lambda: read_partition(filled.host, filled.port, "t", 0)) == before
    assert "log start offset 100000 is beyond the log end offset 120" in filled.stderr_tail(200)


def test_flipped_base_offset_byte_is_never_served_at_the_wrong_offset(filled: BrokerProcess) -> None:
    filled.stop()
    _flip(_segment(filled), MIDDLE * len(BATCH) + 7)  # the lowest byte of a middle batch's base offset
    filled.start()

    async def fetch(offset: int) -> dict[str, Any]:
        resp = await request(filled.host, filled.port, ApiKeys.FETCH, fetch_body("t", 0, offset))
        part: dict[str, Any] = resp["responses"][0]["partitions"][0]
        return part

    served = trio.run(fetch, 0)
    assert served["error_code"] == 0
    offsets = [(h.base_offset, h.last_offset) for _, h in iter_batches(served["records"])]
    assert offsets == [(2 * i, 2 * i + 1) for i in range(MIDDLE)]  # everything before it, nothing after
    at_damage = trio.run(fetch, 2 * MIDDLE)
    assert at_damage["error_code"] == Errors.CORRUPT_MESSAGE and at_damage["records"] == b"", at_damage


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("recovery-point-offset-checkpoint", "0\n1\nt 0 abc\n", "every segment is then recovered"),
        ("replication-offset-checkpoint", "0\n3\nt 0 1\n", "high watermarks then restart"),
        ("log-start-offset-checkpoint", "7\n0\n", "each log then starts at its first segment"),
        ("t-0/leader-epoch-checkpoint", "0\n1\nx y\n", "repair it, or delete it"),
        ("meta.properties", b"\xff\xfe broker.id=1", "restore it, or delete it"),
        # a directory from before Kafka's record encoding (its segments hold msgpack records)
        ("meta.properties", "version=0\nbroker.id=1\ncluster.id=isrsim\n", "msgpack records"),
    ],
)
def test_refusal_to_start_is_one_line_naming_the_file(
    filled: BrokerProcess, name: str, content: str | bytes, expected: str
) -> None:
    filled.stop()
    path = filled.log_dir / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    filled.launch()
    assert filled.wait_exit() == 1
    run = filled.stderr_path.read_text().split("---- start #2 ----")[1]
    assert "Traceback" not in run and "RuntimeError" not in run, run
    [error] = [line for line in run.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: broker 1 refuses to start: ") and str(path) in error, error
    assert expected in error, error


@pytest.mark.parametrize(
    ("replaced", "expected"),
    [
        ("", "is not a directory; point log.dirs at a directory"),
        ("t-0", "cannot host initial.leader.partitions: error while creating the log of t-0: File exists"),
    ],
    ids=["log.dirs-is-a-file", "partition-dir-is-a-file"],
)
def test_a_file_where_a_directory_belongs_is_refused_in_one_line(
    filled: BrokerProcess, replaced: str, expected: str
) -> None:
    filled.stop()
    target = filled.log_dir / replaced if replaced else filled.log_dir
    shutil.rmtree(target)
    target.write_text("not a directory")
    filled.launch()
    assert filled.wait_exit() == 1
    run = filled.stderr_path.read_text().split("---- start #2 ----")[1]
    assert "Traceback" not in run, run
    [error] = [line for line in run.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: broker 1 refuses to start: ") and expected in error, error
