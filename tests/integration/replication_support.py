"""Helpers for replication tests: drive unmanaged brokers with LEADER_AND_ISR as a controller would, read
their replica state, and compare their logs."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from protocol.api_keys import ApiKeys
from tests.integration.harness import BrokerProcess, python_cmd, request, wait_until

TEST_CONTROLLER_ID = 100


def leader_and_isr_body(
    brokers: Sequence[BrokerProcess],
    topic: str,
    partitions: Sequence[int],
    *,
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    replicas: Sequence[int] | None = None,
    controller_epoch: int = 1,
    live: Sequence[BrokerProcess] | None = None,
    leader_address: tuple[str, int] | None = None,
) -> dict[str, Any]:
    replicas = list(replicas) if replicas is not None else [b.broker_id for b in brokers]
    leaders = [
        {"broker_id": b.broker_id, "host_name": b.host, "port": b.port}
        for b in (live or brokers)
        if b.port > 0
    ]
    if leader_address is not None:
        leaders = [entry for entry in leaders if entry["broker_id"] != leader]
        leaders.append({"broker_id": leader, "host_name": leader_address[0], "port": leader_address[1]})
    return {
        "controller_id": TEST_CONTROLLER_ID,
        "controller_epoch": controller_epoch,
        "broker_epoch": -1,
        "topic_states": [
            {
                "topic_name": topic,
                "partition_states": [
                    {
                        "partition_index": p,
                        "controller_epoch": controller_epoch,
                        "leader": leader,
                        "leader_epoch": leader_epoch,
                        "isr": list(isr),
                        "partition_epoch": leader_epoch,
                        "replicas": replicas,
                        "is_new": False,
                    }
                    for p in partitions
                ],
            }
        ],
        "live_leaders": leaders,
    }


def send_leader_and_isr(targets: Sequence[BrokerProcess], body: dict[str, Any]) -> None:
    """Sends LEADER_AND_ISR to each target (the leader first, as the controller does) and checks it took."""

    async def go() -> None:
        for b in targets:
            resp = await request(b.host, b.port, ApiKeys.LEADER_AND_ISR, body)
            assert resp["error_code"] == 0, (b, resp)
            bad = [e for e in resp["partition_errors"] if e["error_code"] != 0]
            assert not bad, (b, bad)

    trio.run(go)


def describe(broker: BrokerProcess) -> dict[tuple[str, int], dict[str, Any]]:
    resp = trio.run(request, broker.host, broker.port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None})
    return {(p["topic"], p["partition"]): p for p in resp["partitions"]}


def describe_full(broker: BrokerProcess) -> dict[str, Any]:
    return trio.run(request, broker.host, broker.port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None})


def wait_converged(
    brokers: Sequence[BrokerProcess], topic: str, partitions: Sequence[int], *, timeout: float = 30.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """Waits until every broker has the same LEO and HW (HW == LEO) for every partition."""

    def converged() -> dict[tuple[str, int], tuple[int, int]] | None:
        views = [describe(b) for b in brokers]
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for p in partitions:
            tp = (topic, p)
            offsets = {(v[tp]["log_end_offset"], v[tp]["high_watermark"]) for v in views if tp in v}
            if len(offsets) != 1 or sum(1 for v in views if tp in v) != len(brokers):
                return None
            leo, hw = next(iter(offsets))
            if leo != hw:
                return None
            out[tp] = (leo, hw)
        return out

    return wait_until(
        converged,
        timeout=timeout,
        interval=0.1,
        message=lambda: (
            f"replicas to converge: {[(b.broker_id, describe(b)) for b in brokers if b.is_running()]}"
        ),
    )


def segment_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """Every segment of a partition, in offset order, as on disk."""
    directory = broker.log_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def start_producer(
    topic: str,
    count: int,
    brokers: Sequence[BrokerProcess],
    journal: Path,
    *,
    acks: str = "all",
    extra: Sequence[str] = (),
) -> subprocess.Popen[str]:
    bootstrap = ",".join(b.address for b in brokers)
    return subprocess.Popen(
        python_cmd(
            "produce",
            topic,
            "--count",
            str(count),
            "--acks",
            acks,
            "--bootstrap-server",
            bootstrap,
            "--acked-journal",
            str(journal),
            "--no-progress",
            *extra,
        ),
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def acked_lines(journal: Path) -> int:
    return sum(p.read_text().count("\n") for p in journal.glob("acked-*.jsonl")) if journal.exists() else 0
