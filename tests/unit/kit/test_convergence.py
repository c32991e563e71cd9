"""`isrsim chaos` waits for convergence: every partition's replicas all in the ISR, one LEO, HW = LEO on
every replica; what is missing is named per partition. The nodes' answers are faked here."""

from __future__ import annotations

from typing import Any

import pytest

from kit import health
from kit.cluster_files import ClusterInfo, ProcessEntry
from lab.chaos.view import ChaosState, status_line
from protocol import ApiKeys


def entry(node_id: int, port: int) -> ProcessEntry:
    return ProcessEntry(node_id, "127.0.0.1", port, None, "", "", "", "")


INFO = ClusterInfo("root", "isrsim", entry(1000, 9000), [entry(1, 9001), entry(2, 9002), entry(3, 9003)])


def fake_cluster(
    monkeypatch: pytest.MonkeyPatch,
    partitions: dict[int, dict[str, Any]],
    offsets: dict[int, dict[int, tuple[int, int]] | None],
) -> None:
    async def ask(host: str, port: int, api: int, body: dict[str, Any], timeout: float) -> Any:
        if port == 9000:
            assert api == ApiKeys.METADATA
            parts = [{"partition_index": p, **m} for p, m in partitions.items()]
            return {"topics": [{"name": "c", "partitions": parts}]}
        assert api == ApiKeys.DESCRIBE_REPLICA_STATE
        mine = offsets[port - 9000]
        if mine is None:
            return None
        return {
            "partitions": [
                {"topic": "c", "partition": p, "log_end_offset": leo, "high_watermark": hw}
                for p, (leo, hw) in mine.items()
            ]
        }

    monkeypatch.setattr(health, "ask", ask)


def meta(isr: list[int], leader: int = 1) -> dict[str, Any]:
    return {"leader_id": leader, "replica_nodes": [1, 2, 3], "isr_nodes": isr}


async def test_converged_when_every_replica_is_in_the_isr_with_one_leo_and_hw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_cluster(
        monkeypatch,
        {0: meta([3, 1, 2]), 1: meta([1, 2, 3], leader=2)},
        {b: {0: (100, 100), 1: (40, 40)} for b in (1, 2, 3)},
    )
    assert await health.not_converged(INFO) == []


async def test_what_did_not_converge_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cluster(
        monkeypatch,
        {0: meta([1, 2]), 1: meta([1, 2, 3]), 2: meta([1, 2, 3]), 3: meta([], leader=-1)},
        {
            1: {0: (100, 100), 1: (50, 50), 2: (70, 60), 3: (0, 0)},
            2: {0: (100, 100), 1: (50, 50), 2: (70, 60), 3: (0, 0)},
            3: {0: (90, 90), 1: (48, 48), 2: (70, 60), 3: (0, 0)},
        },
    )
    assert await health.not_converged(INFO) == [
        "c-0: ISR [1, 2] of replicas [1, 2, 3]",
        "c-1: 1: LEO 50 HW 50, 2: LEO 50 HW 50, 3: LEO 48 HW 48",
        "c-2: 1: LEO 70 HW 60, 2: LEO 70 HW 60, 3: LEO 70 HW 60",
        "c-3: no leader",
    ]


async def test_a_broker_that_does_not_answer_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cluster(monkeypatch, {0: meta([1, 2, 3])}, {1: {0: (5, 5)}, 2: None, 3: {0: (5, 5)}})
    assert await health.not_converged(INFO) == ["broker 2 does not answer"]


def test_status_line_shows_time_faults_acks_and_each_isr() -> None:
    state = ChaosState(
        duration_s=120,
        faults=["kill 2", "delay 1 <-> controller 100±20 ms"],
        records_acked=12345,
        isr={0: [1, 3], 1: [1, 2, 3]},
        replicas={0: [1, 2, 3], 1: [1, 2, 3]},
        leaders={0: 1, 1: -1},
    )
    line = status_line(state, 42.4, "312.5s")
    assert line.startswith("312.5s run 42s/120s  workload  faults: kill 2, delay 1 <-> controller 100±20 ms")
    assert "acked: 12,345 records" in line
    assert line.endswith("ISR [yellow]0:1,3[/] [red]1:1,2,3[/]")
