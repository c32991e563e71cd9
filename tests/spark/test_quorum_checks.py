"""The controller quorum's checks on hand-made journal rows: two leaders in one epoch, committed metadata
batches that differ between voters, and a broker that obeyed a deposed controller."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.quorum_checks import (
    metadata_log_matching_violations,
    one_leader_per_epoch_violations,
    phrase_one_leader_per_epoch,
    stale_controller_obeyed_violations,
)
from tests.spark.test_checks import journal, rows

pytestmark = pytest.mark.spark


def leader(ts: int, controller: int, epoch: int) -> dict[str, Any]:
    return {
        "ts_ms": ts,
        "controller_id": controller,
        "event": "quorum_state",
        "role": "leader",
        "epoch": epoch,
    }


def committed(ts: int, controller: int, offset: int, crc: int, epoch: int = 1) -> dict[str, Any]:
    return {
        "ts_ms": ts,
        "controller_id": controller,
        "event": "metadata_committed",
        "offset": offset,
        "crc": crc,
        "leader_epoch": epoch,
    }


def test_quorum_checks(spark: Any) -> None:
    j = journal(
        spark,
        [
            leader(1, 1000, 1),
            {"ts_ms": 2, "controller_id": 1001, "event": "quorum_state", "role": "follower", "epoch": 1},
            leader(3, 1001, 2),
            leader(4, 1002, 2),  # a second leader in epoch 2
            committed(5, 1000, 0, 11),
            committed(5, 1001, 0, 11),
            committed(6, 1000, 1, 22),
            committed(6, 1002, 1, 23),  # differs at offset 1
            # Broker 1 accepts epoch 2, then applies epoch 1 (a deposed controller obeyed); broker 2 restarts
            # and may then accept a lower epoch again.
            {"ts_ms": 10, "broker_id": 1, "event": "broker_started"},
            {
                "ts_ms": 11,
                "broker_id": 1,
                "event": "became_leader",
                "topic": "t",
                "partition": 0,
                "controller_epoch": 2,
            },
            {
                "ts_ms": 12,
                "broker_id": 1,
                "event": "partition_stopped",
                "topic": "t",
                "partition": 0,
                "controller_epoch": 1,
            },
            {"ts_ms": 10, "broker_id": 2, "event": "broker_started"},
            {
                "ts_ms": 11,
                "broker_id": 2,
                "event": "became_follower",
                "topic": "t",
                "partition": 0,
                "controller_epoch": 3,
            },
            {"ts_ms": 20, "broker_id": 2, "event": "broker_started"},
            {
                "ts_ms": 21,
                "broker_id": 2,
                "event": "became_follower",
                "topic": "t",
                "partition": 0,
                "controller_epoch": 2,
            },
        ],
    )
    two, epochs = one_leader_per_epoch_violations(j)
    assert rows(two, "epoch", "leaders") == [(2, [1001, 1002])]
    assert epochs.count() == 2
    differ, offsets = metadata_log_matching_violations(j)
    assert rows(differ, "offset", "problem") == [
        (1, "voters hold different committed batches at this offset")
    ]
    assert offsets.count() == 2
    # The voters' metadata logs on disk, each read below what its journal says it committed (1000: offsets
    # 0-1; 1001: offset 0 only, so its uncommitted offset 1 is not compared): 1001's committed offset 0
    # fails its CRC, 1000's log lacks its committed offset 1 and 1002 has no log.
    logs = spark.createDataFrame(
        [(1000, 0, 0, 1, 11, True), (1001, 0, 0, 1, 11, False), (1001, 1, 1, 1, 99, True)],
        "broker INT, base_offset LONG, last_offset LONG, leader_epoch INT, crc LONG, crc_ok BOOLEAN",
    )
    differ, offsets = metadata_log_matching_violations(j, logs)
    assert rows(differ, "offset", "problem", "missing_on") == [
        (0, "a committed batch's bytes do not match its CRC", []),
        (1, "voters hold different committed batches at this offset", [1000]),
    ]
    stale, applied = stale_controller_obeyed_violations(j)
    assert rows(stale, "broker", "event", "controller_epoch", "highest_before") == [
        (1, "partition_stopped", 1, 2)
    ]
    assert applied.count() == 4


def test_a_single_controller_makes_the_quorum_checks_pass_unexamined() -> None:
    result = phrase_one_leader_per_epoch({"examples": [], "violations": [{"n": 0}], "epochs": [{"n": 0}]})
    assert result.verdict == "valid" and result.checked is None and result.notes
